//! [`Settings`], everything `serve` runs with (over 400 lines: every key is validated in this one pass): the layers merged ([`super::flags`]: flags
//! and environment first, then the file, then the defaults), validated once, and turned
//! into what each part of the server takes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::sections::ProviderKind;
use super::stripe::stripe_settings;
use super::{load_endpoints, ConfigError, EndpointsFile};
use crate::cli::ServeArgs;
use crate::consent::{ConsentConfig, IdentityConfig, RateLimit, Signals};
use crate::subscriptions::embedded::DEMO_DATA;
use crate::subscriptions::model::RevisionFormat;
use crate::subscriptions::stripe::StripeSettings;
use actionserver::{BodyLimits, CorsPolicy, ServerSettings};

/// Everything `serve` runs with, resolved and validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub host: String,
    pub port: u16,
    pub server: ServerSettings,
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Whether and where Rasa Pro's gRPC ActionService is served.
    pub grpc: GrpcMode,
    /// Mutual TLS for gRPC: the CA client certificates must chain to.
    pub grpc_client_ca: Option<PathBuf>,
    /// `None`: run the embedded service.
    pub subscriptions_url: Option<String>,
    /// Set when changes go to Stripe Billing (section 8) instead of a service.
    pub stripe: Option<StripeSettings>,
    pub subscriptions_token: Option<String>,
    pub subscriptions_timeout: Duration,
    pub subscriptions_max_in_flight: usize,
    pub embedded_port: u16,
    pub embedded_seed: String,
    pub embedded_command_delay: Duration,
    pub data_dir: PathBuf,
    pub database_url: String,
    pub consent: ConsentConfig,
    pub audit_retention: Duration,
    pub reconcile_interval: Duration,
    /// Where the service's change events are received, when they are.
    pub events: Option<EventsSettings>,
    /// The operator console, when served.
    pub console: Option<ConsoleSettings>,
    /// Where spans are exported (endpoints.yml's `tracing:`), when anywhere.
    pub traces: Option<super::TraceSettings>,
}

/// The operator console (`--admin-port`).
#[derive(Debug, Clone)]
pub struct ConsoleSettings {
    pub host: String,
    /// 0 picks a free port.
    pub port: u16,
    /// Name and argon2 hash (PHC string) of each operator.
    pub operators: Vec<(String, String)>,
    /// How long a sign-in lasts.
    pub session: Duration,
    /// Names the console answers to besides loopback and its bound address.
    pub hosts: Vec<String>,
}

/// The events listener: the service's (`POST /v1/service-events`) or Stripe's
/// (`POST /v1/stripe-events`).
#[derive(Debug, Clone)]
pub struct EventsSettings {
    pub host: String,
    /// 0 picks a free port.
    pub port: u16,
    /// Whose events these are, which says the route and the signature's secret.
    pub source: EventSource,
    /// The secret they are signed with: the service's, or Stripe's endpoint's.
    pub secret: String,
    /// How far an event's signature timestamp may be from now.
    pub tolerance: Duration,
}

/// Who sends the events received on the events port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventSource {
    /// The subscription service of section 6 (docs/EVENTS.md).
    Service,
    /// Stripe's webhooks (section 8).
    Stripe,
}

/// The events listener's settings: the service's events with `events.secret`, or with
/// `provider: stripe` Stripe's webhooks with `subscriptions.webhook_secret`.
fn events_settings(
    e: &super::sections::EventsSection,
    stripe: Option<&StripeSettings>,
    path: &Path,
) -> Result<Option<EventsSettings>, ConfigError> {
    let secret = e.secret.clone().filter(|s| !s.is_empty());
    let (source, secret) = match stripe {
        None => (EventSource::Service, secret),
        Some(_) if secret.is_some() => {
            return Err(ConfigError::new(
                path,
                "actiongate.events.secret",
                "with provider: stripe the events port receives Stripe's webhooks, signed with actiongate.subscriptions.webhook_secret",
            ))
        }
        Some(stripe) => (EventSource::Stripe, stripe.webhook_secret.clone()),
    };
    match (e.port, secret) {
        (None, None) => Ok(None),
        (None, Some(_)) if source == EventSource::Stripe => Err(ConfigError::new(
            path,
            "actiongate.events.port",
            "Stripe's webhooks are received on the events port: give it (--events-port)",
        )),
        (None, Some(_)) => Ok(None),
        (Some(_), None) if source == EventSource::Stripe => Err(ConfigError::new(
            path,
            "actiongate.subscriptions.webhook_secret",
            "receiving Stripe's webhooks needs the endpoint's signing secret (--stripe-webhook-secret or STRIPE_WEBHOOK_SECRET)",
        )),
        (Some(_), None) => Err(ConfigError::new(
            path,
            "actiongate.events.secret",
            "receiving events needs the secret they are signed with (--events-secret or ACTIONGATE_EVENTS_SECRET)",
        )),
        (Some(port), Some(secret)) => Ok(Some(EventsSettings {
            host: e.host.clone(),
            port,
            source,
            secret,
            tolerance: Duration::from_secs(e.tolerance_secs),
        })),
    }
}

/// Which transports Rasa can call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrpcMode {
    /// The HTTP webhook only.
    Off,
    /// gRPC on the port, instead of the webhook (`--grpc`, as rasa-sdk's).
    Only,
    /// The webhook on the port and gRPC on this one (`--grpc-port`).
    Beside(u16),
}

impl Settings {
    /// Flags and environment first, then endpoints.yml, then the defaults.
    pub fn resolve(args: &ServeArgs) -> Result<Self, ConfigError> {
        let required = args.endpoints != Path::new("endpoints.yml");
        let file = load_endpoints(&args.endpoints, required)?.unwrap_or_default();
        for section in &file.unknown_sections {
            tracing::warn!(file = %args.endpoints.display(), section, "endpoints.yml: a section neither Rasa nor actiongate is known to read; left alone");
        }
        Self::from_parts(args, &file, &args.endpoints)
    }

    pub(crate) fn from_parts(
        args: &ServeArgs,
        file: &EndpointsFile,
        path: &Path,
    ) -> Result<Self, ConfigError> {
        let s = super::flags::layered(args, file.actiongate.as_ref(), path)?;
        let data_dir = s.data_dir.0.clone();
        let database_url = s
            .database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite:{}", data_dir.join("actiongate.db").display()));
        if !(database_url.starts_with("sqlite:") || database_url.starts_with("postgres")) {
            return Err(ConfigError::new(
                path,
                "actiongate.database_url",
                "must be sqlite:PATH or postgres://...",
            ));
        }
        let embedded_seed = match &s.embedded_service.seed {
            None => DEMO_DATA.to_owned(),
            Some(seed) => std::fs::read_to_string(seed).map_err(|e| {
                ConfigError::new(
                    path,
                    "actiongate.embedded_service.seed",
                    format!("{}: {e}", seed.display()),
                )
            })?,
        };
        let port = args.port.unwrap_or(5055);
        let console = match s.console.port {
            None => None,
            Some(console_port) => {
                let c = &s.console;
                for o in &c.operators {
                    if argon2::password_hash::PasswordHash::new(&o.password_hash).is_err() {
                        return Err(ConfigError::new(
                            path,
                            "actiongate.console.operators",
                            format!("{}: password_hash is not an argon2 hash (make one with `actiongate hash-password`)", o.name),
                        ));
                    }
                }
                if console_port != 0 && console_port == port {
                    return Err(ConfigError::new(
                        path,
                        "actiongate.console.port",
                        "the console is never served on the port Rasa calls: choose another --admin-port",
                    ));
                }
                Some(ConsoleSettings {
                    host: c.host.clone(),
                    port: console_port,
                    operators: c
                        .operators
                        .iter()
                        .map(|o| (o.name.clone(), o.password_hash.clone()))
                        .collect(),
                    session: Duration::from_secs_f64(60.0 * c.session_minutes.max(0.01)),
                    hosts: c.hosts.clone(),
                })
            }
        };
        let subs = &s.subscriptions;
        let stripe = match subs.provider {
            ProviderKind::Service => None,
            ProviderKind::Stripe => Some(stripe_settings(subs, path, &|name| {
                std::env::var(name).ok()
            })?),
        };
        let events = events_settings(&s.events, stripe.as_ref(), path)?;
        if let Some(url) = &subs.url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::new(
                    path,
                    "actiongate.subscriptions.url",
                    "must be an http(s) URL",
                ));
            }
        }
        let timeout = subs.timeout_secs;
        if !(timeout > 0.0 && timeout <= 300.0) {
            return Err(ConfigError::new(
                path,
                "actiongate.subscriptions.timeout_secs",
                "must be in (0, 300]",
            ));
        }
        if subs.max_in_flight == 0 {
            return Err(ConfigError::new(
                path,
                "actiongate.subscriptions.max_in_flight",
                "must be at least 1",
            ));
        }
        let server = &s.server;
        let limits = BodyLimits {
            max_body: server.body_limit,
            max_decompressed: server.decompressed_limit,
            ..BodyLimits::default()
        };
        if server.body_budget < limits.max_body {
            return Err(ConfigError::new(
                path,
                "actiongate.server.body_budget",
                format!(
                    "must be at least the body limit ({} bytes), or no body that large could be read",
                    limits.max_body
                ),
            ));
        }
        let cors = CorsPolicy::new(args.cors.as_deref().unwrap_or_default())
            .map_err(|e| ConfigError::new("--cors", "cors", e))?;
        let action_endpoint = file.action_endpoint.as_ref();
        // The same for the flag and its variable (clap drops an empty variable, so it is
        // read too): set but empty is a mistake, never "no token".
        let empty_env = std::env::var_os("ACTIONGATE_AUTH_TOKEN").is_some_and(|v| v.is_empty());
        if empty_env || args.auth_token.as_deref().is_some_and(str::is_empty) {
            return Err(ConfigError::new(
                "--auth-token",
                "auth_token",
                "is empty (a secret that was not set?); leave it out to use action_endpoint.token",
            ));
        }
        if let Some(token) = action_endpoint.and_then(|a| a.token.as_deref()) {
            if token.is_empty() {
                // Rasa sends no token then, and this server would require none: an unset
                // secret must not turn authentication off.
                return Err(ConfigError::new(
                    path,
                    "action_endpoint.token",
                    "is empty (a secret that was not set?); remove the key to run without a token",
                ));
            }
        }
        // The file's own text: a flag's value is never a variable left unreplaced.
        let in_file = file.actiongate.as_ref();
        let secrets = [
            (
                "action_endpoint.token",
                action_endpoint.and_then(|a| a.token.as_deref()),
            ),
            (
                "actiongate.subscriptions.api_key",
                in_file.and_then(|f| f.subscriptions.api_key.as_deref()),
            ),
            (
                "actiongate.subscriptions.token",
                in_file.and_then(|f| f.subscriptions.token.as_deref()),
            ),
            (
                "actiongate.events.secret",
                in_file.and_then(|f| f.events.secret.as_deref()),
            ),
            (
                "actiongate.consent.signing_secret",
                in_file.and_then(|f| f.consent.signing_secret.as_deref()),
            ),
            (
                "actiongate.approval.notify_rasa_token",
                in_file.and_then(|f| f.approval.notify_rasa_token.as_deref()),
            ),
        ];
        for (key, value) in secrets {
            if let Some(value) = value.filter(|v| looks_unreplaced(v)) {
                // Quoted (or `$NAME` alone), neither Rasa nor we replace it: the secret
                // would be text anyone reading the file's template can guess.
                return Err(ConfigError::new(
                    path,
                    key,
                    format!("is the literal text {value}: neither Rasa nor actiongate replaces a variable there (quoted, or `$NAME` without braces); write it unquoted as ${{NAME}}"),
                ));
            }
        }
        let rate = &s.rate_limit;
        if rate.capacity < 1.0 || rate.per_hour < 0.0 {
            return Err(ConfigError::new(
                path,
                "actiongate.rate_limit",
                "capacity must be at least 1 and per_hour not negative",
            ));
        }
        let consent = &s.consent;
        if stripe.is_some() && consent.window_secs > STRIPE_KEY_KEPT_SECS {
            // An unknown outcome is sent again within the window under its key, which
            // Stripe answers as the first write only for a day (CONTRACT.md section 8).
            return Err(ConfigError::new(
                path,
                "actiongate.consent.window_secs",
                "with provider: stripe, at most 86400 (Stripe keeps a request key's answer for a day)",
            ));
        }
        let signals = Signals {
            affirm_intents: consent.affirm_intents.clone(),
            deny_intents: consent.deny_intents.clone(),
            min_confidence: consent.min_confidence,
            confirm_slot: consent.confirm_slot.clone().filter(|s| !s.is_empty()),
        };
        // A secret that is set but empty is a mistake, never "no signing" (CONTRACT.md
        // section 2). clap drops an empty environment value, so the variable is read too.
        let empty_env = std::env::var_os("ACTIONGATE_SIGNING_SECRET").is_some_and(|v| v.is_empty());
        if empty_env
            || consent
                .signing_secret
                .as_deref()
                .is_some_and(|s| s.trim().is_empty())
        {
            return Err(ConfigError::new(
                path,
                "actiongate.consent.signing_secret",
                "the signing secret is set but empty; set a secret, or unset it to trust unsigned account ids",
            ));
        }
        if !(0.0..=1.0).contains(&signals.min_confidence) {
            return Err(ConfigError::new(
                path,
                "actiongate.consent",
                "min_confidence must be between 0 and 1",
            ));
        }
        if let Some(both) = signals
            .affirm_intents
            .iter()
            .find(|i| signals.deny_intents.contains(i))
        {
            return Err(ConfigError::new(
                path,
                "actiongate.consent",
                format!("`{both}` is both an affirm and a deny intent"),
            ));
        }
        let grpc = match (server.grpc, server.grpc_port) {
            (true, Some(_)) => {
                return Err(ConfigError::new(
                    path,
                    "actiongate.server.grpc_port",
                    "gRPC is served either on the port (grpc: true) or beside the webhook (grpc_port), not both",
                ))
            }
            (true, None) => GrpcMode::Only,
            (false, Some(port)) => GrpcMode::Beside(port),
            (false, None) => GrpcMode::Off,
        };
        Ok(Self {
            host: args.host.clone().unwrap_or_else(|| "0.0.0.0".to_owned()),
            port,
            server: ServerSettings {
                limits,
                body_budget: server.body_budget,
                auth_token: args
                    .auth_token
                    .clone()
                    .or_else(|| action_endpoint.and_then(|a| a.token.clone())),
                token_name: server
                    .token_name
                    .clone()
                    .or_else(|| action_endpoint.and_then(|a| a.token_name.clone()))
                    .unwrap_or_else(|| "token".to_owned()),
                cors,
                workers: server.workers,
                max_connections_per_peer: server.max_connections_per_peer.max(1),
                ..ServerSettings::default()
            },
            tls: args.ssl_certificate.clone().zip(args.ssl_keyfile.clone()),
            grpc,
            grpc_client_ca: server.ssl_ca_file.clone(),
            subscriptions_url: subs.url.clone(),
            stripe,
            subscriptions_token: subs.token.clone(),
            subscriptions_timeout: Duration::from_secs_f64(timeout),
            subscriptions_max_in_flight: subs.max_in_flight,
            embedded_port: s.embedded_service.port,
            embedded_seed,
            embedded_command_delay: Duration::from_millis(s.embedded_service.command_delay_ms),
            data_dir,
            database_url,
            traces: super::traces::read(file.tracing.as_ref(), path, &|name| {
                std::env::var(name).ok()
            }),
            consent: ConsentConfig {
                confirm_response: consent.confirm_response.clone(),
                window: Duration::from_secs(consent.window_secs),
                clock_skew: Duration::from_secs(consent.clock_skew_secs),
                signals,
                plain_yes: consent.plain_yes,
                reply_words: crate::consent::plain_yes::ReplyWords::new(&consent.reply_words),
                question: consent.question,
                identity: IdentityConfig {
                    account_key: consent.account_key.clone(),
                    signing_secret: consent.signing_secret.clone(),
                    claim: consent.account_claim.clone(),
                    max_age: Duration::from_secs(consent.token_max_age_secs),
                    leeway: Duration::from_secs(consent.token_leeway_secs),
                },
                rate: RateLimit {
                    capacity: rate.capacity,
                    per_second: rate.per_hour / 3600.0,
                },
                in_flight_wait: Duration::from_secs_f64(timeout + 5.0),
                approval: s.approval.rules(),
                revision_format: match subs.provider {
                    ProviderKind::Service => RevisionFormat::Decimal,
                    ProviderKind::Stripe => RevisionFormat::Fingerprint,
                },
                ..ConsentConfig::default()
            },
            audit_retention: Duration::from_secs(86_400 * s.audit.retention_days),
            reconcile_interval: Duration::from_secs(args.reconcile_interval.max(1)),
            events,
            console,
        })
    }
}

/// How long Stripe answers a request key again with its first answer.
const STRIPE_KEY_KEPT_SECS: u64 = 86_400;

/// A secret that is still the text of a variable: `${NAME}` somewhere, or `$NAME` alone.
fn looks_unreplaced(value: &str) -> bool {
    let braced = value
        .find("${")
        .is_some_and(|i| value[i + 2..].contains('}'));
    let bare = value.strip_prefix('$').is_some_and(|name| {
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    });
    braced || bare
}
