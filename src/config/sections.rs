//! endpoints.yml's `actiongate:` section: each key, its type and its default.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The `actiongate:` section, each key with its default: what the file leaves out is the
/// default, and what a flag (or its environment variable) sets comes before the file
/// ([`Settings::resolve`]). A section or key left empty (`consent:` with nothing under it)
/// is the default too.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Section {
    #[serde(deserialize_with = "or_default")]
    pub subscriptions: SubscriptionsSection,
    #[serde(deserialize_with = "or_default")]
    pub embedded_service: EmbeddedSection,
    /// Default: sqlite:DATA_DIR/actiongate.db.
    pub database_url: Option<String>,
    #[serde(deserialize_with = "or_default")]
    pub data_dir: DataDir,
    #[serde(deserialize_with = "or_default")]
    pub consent: ConsentSection,
    #[serde(deserialize_with = "or_default")]
    pub rate_limit: RateLimitSection,
    #[serde(deserialize_with = "or_default")]
    pub audit: AuditSection,
    #[serde(deserialize_with = "or_default")]
    pub server: ServerSection,
    #[serde(deserialize_with = "or_default")]
    pub events: EventsSection,
    #[serde(deserialize_with = "or_default")]
    pub approval: ApprovalSection,
    #[serde(deserialize_with = "or_default")]
    pub console: ConsoleSection,
}

/// Where SQLite files are kept (default `var`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct DataDir(pub PathBuf);

impl Default for DataDir {
    fn default() -> Self {
        Self(PathBuf::from("var"))
    }
}

/// A key written with nothing after it (YAML's null) is the default.
/// A key that is present is set: null (the key with nothing after it) is the empty text,
/// for the check that refuses an empty secret; an absent key is `None` (the section's
/// default).
fn set_even_if_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Some(Option::<String>::deserialize(d)?.unwrap_or_default()))
}

fn or_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The operator console: where it listens and who may sign in. Without a port (here or
/// `--admin-port`) it is not served.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleSection {
    pub port: Option<u16>,
    pub host: String,
    /// Operators, each with an argon2 password hash (`actiongate hash-password`).
    #[serde(deserialize_with = "or_default")]
    pub operators: Vec<OperatorEntry>,
    /// Minutes a sign-in lasts.
    pub session_minutes: f64,
    /// Names (`Host` values) the console answers to besides loopback and the address it is
    /// bound to, such as the name of a reverse proxy in front of it.
    #[serde(deserialize_with = "or_default")]
    pub hosts: Vec<String>,
}

impl Default for ConsoleSection {
    fn default() -> Self {
        Self {
            port: None,
            host: "127.0.0.1".to_owned(),
            operators: Vec::new(),
            session_minutes: 480.0,
            hosts: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorEntry {
    pub name: String,
    pub password_hash: String,
}

/// Which confirmed changes a person approves first (CONTRACT.md section 7).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalSection {
    /// Change types always held.
    #[serde(deserialize_with = "or_default")]
    pub change_types: Vec<String>,
    /// Accounts whose changes are always held.
    #[serde(deserialize_with = "or_default")]
    pub accounts: Vec<String>,
    /// Hold the options the service marks `"review": true`.
    pub review: bool,
    /// Hours a hold waits for a decision.
    pub expiry_hours: f64,
    /// Rasa's base URL, to tell the conversation the decision (trigger_intent).
    pub notify_rasa_url: Option<String>,
    pub notify_rasa_token: Option<String>,
    /// Open holds an account may have at once.
    pub max_open_per_account: usize,
    /// Open holds a subscription may have at once.
    pub max_open_per_subscription: usize,
}

impl Default for ApprovalSection {
    fn default() -> Self {
        Self {
            change_types: Vec::new(),
            accounts: Vec::new(),
            review: true,
            expiry_hours: 24.0,
            notify_rasa_url: None,
            notify_rasa_token: None,
            max_open_per_account: 5,
            max_open_per_subscription: 1,
        }
    }
}

impl ApprovalSection {
    /// The section as the guard holds it.
    pub fn rules(&self) -> crate::consent::ApprovalRules {
        crate::consent::ApprovalRules {
            change_types: self.change_types.clone(),
            accounts: self.accounts.clone(),
            review: self.review,
            expiry: std::time::Duration::from_secs_f64(self.expiry_hours.max(0.0) * 3600.0),
            notify_rasa_url: self.notify_rasa_url.clone(),
            notify_rasa_token: self.notify_rasa_token.clone(),
            max_open_per_account: self.max_open_per_account.max(1),
            max_open_per_subscription: self.max_open_per_subscription.max(1),
        }
    }
}

/// The service's change events: where they are received and the secret they are signed
/// with. Without a port they are not received.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventsSection {
    pub port: Option<u16>,
    pub host: String,
    pub secret: Option<String>,
    pub tolerance_secs: u64,
}

impl Default for EventsSection {
    fn default() -> Self {
        Self {
            port: None,
            host: "127.0.0.1".to_owned(),
            secret: None,
            tolerance_secs: 300,
        }
    }
}

/// Where the subscription service is. Without `url`, the embedded service runs.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubscriptionsSection {
    /// `service` (section 6: `url`, or the embedded service) or `stripe` (section 8).
    pub provider: ProviderKind,
    pub url: Option<String>,
    pub timeout_secs: f64,
    pub token: Option<String>,
    pub max_in_flight: usize,
    /// Stripe's secret or restricted key (default: the `STRIPE_API_KEY` variable).
    pub api_key: Option<String>,
    /// Default: Stripe's API.
    pub api_base: Option<String>,
    /// The changes offered through Stripe (`cancel_now` only when listed).
    pub options: Vec<String>,
    /// The signing secret of Stripe's webhook endpoint (`whsec_…`; default: the
    /// `STRIPE_WEBHOOK_SECRET` variable), for its events on the events port.
    pub webhook_secret: Option<String>,
}

/// Which billing system the changes go to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    #[default]
    Service,
    Stripe,
}

impl Default for SubscriptionsSection {
    fn default() -> Self {
        Self {
            provider: ProviderKind::Service,
            url: None,
            timeout_secs: 5.0,
            token: None,
            max_in_flight: crate::subscriptions::DEFAULT_MAX_IN_FLIGHT,
            api_key: None,
            api_base: None,
            options: vec!["stop_renewal".into(), "resume_renewal".into()],
            webhook_secret: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddedSection {
    pub port: u16,
    /// Records to load into an empty service (default: the demo data).
    pub seed: Option<PathBuf>,
    pub command_delay_ms: u64,
}

impl Default for EmbeddedSection {
    fn default() -> Self {
        Self {
            port: 5056,
            seed: None,
            command_delay_ms: 0,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsentSection {
    pub confirm_response: String,
    pub window_secs: u64,
    /// Seconds a reply may be timestamped before the question (replicas' clocks).
    pub clock_skew_secs: u64,
    /// NLU intents whose reply means yes / no.
    pub affirm_intents: Vec<String>,
    pub deny_intents: Vec<String>,
    /// Rasa Pro CALM's boolean confirmation slot (empty: none).
    pub confirm_slot: Option<String>,
    /// The least confidence at which a yes intent says yes.
    pub min_confidence: f64,
    /// Whether a typed yes must also be a plain yes in its own words.
    pub plain_yes: bool,
    /// Words added to the plain yes's lists: `affirm`, `filler`, `refuse`.
    #[serde(deserialize_with = "or_default")]
    pub reply_words: crate::consent::plain_yes::ExtraWords,
    /// `template` (default) or `terms`.
    pub question: crate::consent::QuestionCheck,
    pub account_key: String,
    pub account_claim: String,
    /// `signing_secret:` with nothing after it is set, and empty: an error, never "no
    /// signing" (CONTRACT.md section 2).
    #[serde(
        deserialize_with = "set_even_if_empty",
        skip_serializing_if = "Option::is_none"
    )]
    pub signing_secret: Option<String>,
    /// The longest a signed account token may be valid for, in seconds: its `exp` is
    /// required.
    pub token_max_age_secs: u64,
    /// How far the token's issuer's clock may be from ours, in seconds (60, as
    /// jsonwebtoken's validation has it): allowed past `exp`, before `nbf` and `iat`.
    pub token_leeway_secs: u64,
}

impl Default for ConsentSection {
    fn default() -> Self {
        let signals = crate::consent::Signals::default();
        Self {
            confirm_response: crate::consent::ConsentConfig::default().confirm_response,
            window_secs: 600,
            clock_skew_secs: 5,
            affirm_intents: signals.affirm_intents,
            deny_intents: signals.deny_intents,
            confirm_slot: None,
            min_confidence: signals.min_confidence,
            plain_yes: true,
            reply_words: Default::default(),
            question: Default::default(),
            account_key: "account_id".to_owned(),
            account_claim: "sub".to_owned(),
            signing_secret: None,
            token_max_age_secs: 24 * 3600,
            token_leeway_secs: 60,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitSection {
    /// Irreversible changes an account may make in a burst.
    pub capacity: f64,
    /// Irreversible changes an account regains per hour.
    pub per_hour: f64,
}

impl Default for RateLimitSection {
    fn default() -> Self {
        Self {
            capacity: 5.0,
            per_hour: 5.0,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditSection {
    pub retention_days: u64,
}

impl Default for AuditSection {
    fn default() -> Self {
        Self { retention_days: 90 }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSection {
    pub body_limit: usize,
    pub decompressed_limit: usize,
    pub body_budget: usize,
    /// Default: action_endpoint.token_name, else `token`.
    pub token_name: Option<String>,
    /// 0: one per core.
    pub workers: usize,
    /// Connections open at once from one address, on every listener.
    pub max_connections_per_peer: usize,
    /// Serve gRPC on the port instead of the HTTP webhook (`--grpc`).
    pub grpc: bool,
    /// Serve gRPC on this port as well (`--grpc-port`).
    pub grpc_port: Option<u16>,
    /// The CA of mutual TLS for gRPC (`--ssl-ca-file`).
    pub ssl_ca_file: Option<PathBuf>,
}

impl Default for ServerSection {
    fn default() -> Self {
        let limits = actionserver::BodyLimits::default();
        Self {
            body_limit: limits.max_body,
            decompressed_limit: limits.max_decompressed,
            body_budget: actionserver::DEFAULT_BODY_BUDGET,
            token_name: None,
            workers: 0,
            max_connections_per_peer: actionserver::ServerSettings::default()
                .max_connections_per_peer,
            grpc: false,
            grpc_port: None,
            ssl_ca_file: None,
        }
    }
}
