//! The command line: `serve` (the default), `check`, `subscription-service`, `audit`,
//! `approvals` and `hash-password`, with rasa-sdk's flag names where they exist. The
//! developer tools (`converse`, `eval`) are `actiongate-dev`'s.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::telemetry::LogFormat;

/// A Rasa-compatible custom action server that will not let an assistant act on an
/// outdated confirmation.
#[derive(Debug, Parser)]
#[command(name = "actiongate", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Flags of `serve`, which runs when no command is given.
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once at start
pub enum Command {
    /// Serve the actions to Rasa (the default).
    Serve(ServeArgs),
    /// Validate the configuration and the Rasa-side files; exit non-zero on a problem.
    Check(CheckArgs),
    /// Run the embedded subscription service alone.
    SubscriptionService(ServiceArgs),
    /// Read the audit trail.
    Audit(AuditArgs),
    /// List, approve or reject changes held for a person's approval.
    Approvals(ApprovalsArgs),
    /// Print the argon2 hash of a password read from standard input, for
    /// `actiongate.console.operators`.
    HashPassword,
}

/// Logging flags, shared by every command.
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// More logging: -v debug, -vv trace.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Only warnings and errors.
    #[arg(long, global = true)]
    pub quiet: bool,
    /// Log as text or as JSON lines.
    #[arg(long, value_enum, default_value = "text", global = true)]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Port to listen on.
    #[arg(short = 'p', long, env = "ACTIONGATE_PORT")]
    pub port: Option<u16>,
    /// Address to bind.
    #[arg(long, env = "ACTIONGATE_HOST")]
    pub host: Option<String>,
    /// Allowed CORS origins (`*`, literals, globs, regexes), as rasa-sdk matches them.
    #[arg(long, num_args = 0..)]
    pub cors: Option<Vec<String>>,
    /// TLS certificate chain (PEM); serves HTTPS with --ssl-keyfile.
    #[arg(long, requires = "ssl_keyfile")]
    pub ssl_certificate: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, requires = "ssl_certificate")]
    pub ssl_keyfile: Option<PathBuf>,
    /// With gRPC over TLS: the CA whose certificates clients must present (mutual TLS,
    /// Rasa's `ssl_client_cert`/`ssl_client_key`), as rasa-sdk's `--ssl-ca-file`.
    #[arg(long, requires = "ssl_certificate")]
    pub ssl_ca_file: Option<PathBuf>,
    /// Serve Rasa Pro's gRPC ActionService on --port instead of the HTTP webhook, as
    /// rasa-sdk's `--grpc` (Rasa: `action_endpoint.url: grpc://host:port`).
    #[arg(long, env = "ACTIONGATE_GRPC")]
    pub grpc: bool,
    /// Serve the gRPC ActionService on this port as well, beside the HTTP webhook on --port.
    #[arg(long, conflicts_with = "grpc")]
    pub grpc_port: Option<u16>,
    /// Rasa's endpoints.yml; our settings are under its `actiongate:` key.
    #[arg(long, default_value = "endpoints.yml")]
    pub endpoints: PathBuf,
    /// Require this token on /webhook, /actions and /metrics (Rasa's `token` query
    /// parameter, or `Authorization: Bearer`). Default: action_endpoint.token.
    #[arg(long, env = "ACTIONGATE_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// The query parameter carrying the token.
    #[arg(long)]
    pub token_name: Option<String>,
    /// Largest request body accepted, in bytes.
    #[arg(long)]
    pub body_limit: Option<usize>,
    /// Largest decompressed body accepted, in bytes.
    #[arg(long)]
    pub decompressed_limit: Option<usize>,
    /// Bytes of request bodies held at once, received and decompressed, across all
    /// requests; a request that would go past it gets 503 (default 1 GiB).
    #[arg(long)]
    pub body_budget: Option<usize>,
    /// Worker threads (default: one per core).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Base URL of the subscription service; without it the embedded service runs.
    #[arg(long, env = "ACTIONGATE_SUBSCRIPTIONS_URL")]
    pub subscriptions_url: Option<String>,
    /// Which billing system changes go to: `service` (section 6) or `stripe`.
    #[arg(long, env = "ACTIONGATE_SUBSCRIPTIONS_PROVIDER")]
    pub subscriptions_provider: Option<String>,
    /// Stripe's API base URL (default Stripe's own).
    #[arg(long, env = "ACTIONGATE_STRIPE_API_BASE")]
    pub stripe_api_base: Option<String>,
    /// The signing secret of Stripe's webhook endpoint (`whsec_…`), whose events are
    /// received on --events-port (`POST /v1/stripe-events`).
    #[arg(long, env = "STRIPE_WEBHOOK_SECRET", hide_env_values = true)]
    pub stripe_webhook_secret: Option<String>,
    /// Bearer token for the subscription service.
    #[arg(long, env = "ACTIONGATE_SUBSCRIPTIONS_TOKEN", hide_env_values = true)]
    pub subscriptions_token: Option<String>,
    /// Timeout of one call to the subscription service, in seconds.
    #[arg(long)]
    pub subscriptions_timeout: Option<f64>,
    /// Calls to the subscription service in flight at once; more wait for a turn within
    /// their timeout (default 64).
    #[arg(long)]
    pub subscriptions_max_in_flight: Option<usize>,
    /// Port of the embedded subscription service on 127.0.0.1 (0 picks a free one).
    #[arg(long)]
    pub embedded_service_port: Option<u16>,
    /// How long the embedded service keeps a command in flight, in milliseconds (demos).
    #[arg(long)]
    pub embedded_command_delay_ms: Option<u64>,
    /// Where SQLite files are kept.
    #[arg(long, env = "ACTIONGATE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// The store: sqlite:PATH (default: DATA_DIR/actiongate.db) or postgres://...
    #[arg(long, env = "ACTIONGATE_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Seconds after the question within which a "yes" counts.
    #[arg(long)]
    pub confirmation_window: Option<u64>,
    /// Seconds a reply may be timestamped before the question and still count (Rasa
    /// replicas' clocks differ; default 5).
    #[arg(long)]
    pub clock_skew: Option<u64>,
    /// Rasa Pro CALM: the boolean slot the confirmation flow collects; its value after the
    /// reply is the reply's yes or no.
    #[arg(long)]
    pub confirm_slot: Option<String>,
    /// The least NLU confidence at which a yes intent counts as a yes (default 0.8).
    #[arg(long)]
    pub min_confidence: Option<f64>,
    /// Whether a typed yes must also be a plain yes in its own words: an affirmation, and
    /// nothing that negates, hedges, sets a condition, defers or asks (default true).
    #[arg(long)]
    pub plain_yes: Option<bool>,
    /// How the question is held to what the customer read: the confirmation response's
    /// text rendered with the slots (template, the default), or only the terms.
    #[arg(long, value_enum)]
    pub consent_question: Option<crate::consent::QuestionCheck>,
    /// HS256 secret: the account in the session metadata must be a token signed with it.
    #[arg(long, env = "ACTIONGATE_SIGNING_SECRET", hide_env_values = true)]
    pub signing_secret: Option<String>,
    /// The key of session_started_metadata naming the account.
    #[arg(long)]
    pub account_key: Option<String>,
    /// Irreversible changes an account may make in a burst.
    #[arg(long)]
    pub rate_capacity: Option<f64>,
    /// Irreversible changes an account regains per hour.
    #[arg(long)]
    pub rate_per_hour: Option<f64>,
    /// Days the audit trail is kept.
    #[arg(long)]
    pub audit_retention_days: Option<u64>,
    /// Seconds between reconciliation passes over unknown outcomes.
    #[arg(long, default_value_t = 30)]
    pub reconcile_interval: u64,
    /// Receive the subscription service's signed change events on this port
    /// (`POST /v1/service-events`; never the port Rasa calls). Needs --events-secret.
    #[arg(long)]
    pub events_port: Option<u16>,
    /// Address the events listener binds (default 127.0.0.1).
    #[arg(long)]
    pub events_host: Option<String>,
    /// The secret the service signs its events with.
    #[arg(long, env = "ACTIONGATE_EVENTS_SECRET", hide_env_values = true)]
    pub events_secret: Option<String>,
    /// Seconds an event's signature timestamp may be from now (default 300).
    #[arg(long)]
    pub events_tolerance: Option<u64>,
    /// Serve the operator console on this port (never the port Rasa calls; endpoints
    /// `console.port`); operators are configured under `actiongate.console.operators`.
    #[arg(long)]
    pub admin_port: Option<u16>,
    /// Address the console binds (default 127.0.0.1).
    #[arg(long)]
    pub admin_host: Option<String>,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Rasa's endpoints.yml.
    #[arg(long, default_value = "endpoints.yml")]
    pub endpoints: PathBuf,
    /// The project folder holding responses/ and skills/.
    #[arg(long, default_value = ".")]
    pub project: PathBuf,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Clone, Args)]
pub struct ServiceArgs {
    /// Port on 127.0.0.1.
    #[arg(short = 'p', long, default_value_t = 5056)]
    pub port: u16,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Where the service's SQLite file is kept.
    #[arg(long, default_value = "var")]
    pub data_dir: PathBuf,
    /// Records to load into an empty database (default: the demo data).
    #[arg(long)]
    pub seed: Option<PathBuf>,
    /// Require this bearer token.
    #[arg(long, env = "ACTIONGATE_SUBSCRIPTIONS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// How long a command stays in flight, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub command_delay_ms: u64,
    /// Percentage of calls answered slowly (soak and fault tests).
    #[arg(long, default_value_t = 0.0)]
    pub fault_slow_percent: f64,
    /// How slowly, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub fault_slow_ms: u64,
    /// Percentage of calls answered 503 without doing anything.
    #[arg(long, default_value_t = 0.0)]
    pub fault_fail_percent: f64,
    /// Deliver an event after each change and each PUT to this URL (e.g.
    /// http://127.0.0.1:5057/v1/service-events), signed with --events-secret.
    #[arg(long, requires = "events_secret")]
    pub events_url: Option<String>,
    /// The secret events are signed with.
    #[arg(long, env = "ACTIONGATE_EVENTS_SECRET", hide_env_values = true)]
    pub events_secret: Option<String>,
    /// Send each event delivery this many times (tests and soak).
    #[arg(long, default_value_t = 1)]
    pub events_copies: u32,
    /// Percentage of events held back by --events-delay-ms, so later ones overtake them.
    #[arg(long, default_value_t = 0.0)]
    pub events_delay_percent: f64,
    #[arg(long, default_value_t = 0)]
    pub events_delay_ms: u64,
    /// Deliver each batch of due events newest first.
    #[arg(long)]
    pub events_reorder: bool,
    /// Percentage of events dropped without being sent (lost deliveries).
    #[arg(long, default_value_t = 0.0)]
    pub events_drop_percent: f64,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuditFormat {
    Table,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// Only this conversation.
    #[arg(long)]
    pub sender: Option<String>,
    /// Only entries at or after this time (RFC 3339, e.g. 2026-11-30T09:00:00Z).
    #[arg(long)]
    pub since: Option<String>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: AuditFormat,
    /// Instead: the service events that contradicted the operation they named, each with
    /// the original request and the confirmed terms (for a person to look into).
    #[arg(long)]
    pub mismatches: bool,
    /// The store (default: DATA_DIR/actiongate.db).
    #[arg(long, env = "ACTIONGATE_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    #[arg(long, env = "ACTIONGATE_DATA_DIR", default_value = "var")]
    pub data_dir: PathBuf,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Clone, Args)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    pub action: ApprovalsAction,
    /// `serve`'s settings (the store, the service, the rules): the same as the server's.
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Clone, Subcommand)]
pub enum ApprovalsAction {
    /// The held changes, oldest first (with --all, decided ones too).
    List {
        #[arg(long)]
        all: bool,
        #[arg(long, value_enum, default_value = "table")]
        format: AuditFormat,
    },
    /// Approve a held change: the facts are read again; the command is sent once.
    Approve {
        /// The held change's request key.
        key: String,
        /// Who approves (recorded in the audit trail).
        #[arg(long)]
        operator: String,
        #[arg(long)]
        note: Option<String>,
    },
    /// Reject a held change; the note is what the customer is told.
    Reject {
        key: String,
        #[arg(long)]
        operator: String,
        #[arg(long)]
        note: String,
    },
    /// The operators' console sessions.
    Sessions {
        #[command(subcommand)]
        action: SessionsAction,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum SessionsAction {
    /// Sign an operator out everywhere: every session of theirs ends now.
    Revoke {
        /// The operator's name.
        name: String,
    },
}

impl Cli {
    /// `serve`'s flags with nothing given (their defaults).
    pub fn default_serve_args() -> ServeArgs {
        Cli::parse_from(["actiongate"]).serve
    }
}
