//! Settings resolved and validated (over 400 lines: flags, environment and endpoints.yml are merged field by field, each with its rule).
//!
//! The one place flags, environment and endpoints.yml meet: [`Settings`], everything
//! `serve` runs with, resolved (flags and environment first, then the file, then the
//! defaults) and validated.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{load_endpoints, ConfigError, EndpointsFile};
use crate::cli::ServeArgs;
use crate::consent::{ConsentConfig, IdentityConfig, RateLimit, Signals};
use crate::subscriptions::embedded::DEMO_DATA;
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

/// The events listener (`POST /v1/service-events`).
#[derive(Debug, Clone)]
pub struct EventsSettings {
    pub host: String,
    /// 0 picks a free port.
    pub port: u16,
    pub secret: String,
    /// How far an event's signature timestamp may be from now.
    pub tolerance: Duration,
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
        let section = file.actiongate.as_ref();
        let subs = section.and_then(|s| s.subscriptions.as_ref());
        let embedded_section = section.and_then(|s| s.embedded_service.as_ref());
        let consent = section.and_then(|s| s.consent.as_ref());
        let rate = section.and_then(|s| s.rate_limit.as_ref());
        let server = section.and_then(|s| s.server.as_ref());
        let data_dir = args
            .data_dir
            .clone()
            .or_else(|| section.and_then(|s| s.data_dir.clone()))
            .unwrap_or_else(|| PathBuf::from("var"));
        let database_url = args
            .database_url
            .clone()
            .or_else(|| section.and_then(|s| s.database_url.clone()))
            .unwrap_or_else(|| format!("sqlite:{}", data_dir.join("actiongate.db").display()));
        if !(database_url.starts_with("sqlite:") || database_url.starts_with("postgres")) {
            return Err(ConfigError::new(
                path,
                "actiongate.database_url",
                "must be sqlite:PATH or postgres://...",
            ));
        }
        let embedded_seed = match embedded_section.and_then(|e| e.seed.as_ref()) {
            None => DEMO_DATA.to_owned(),
            Some(seed) => std::fs::read_to_string(seed).map_err(|e| {
                ConfigError::new(
                    path,
                    "actiongate.embedded_service.seed",
                    format!("{}: {e}", seed.display()),
                )
            })?,
        };
        let console_section = section.and_then(|s| s.console.as_ref());
        let console = match args
            .admin_port
            .or_else(|| console_section.and_then(|c| c.port))
        {
            None => None,
            Some(port) => {
                let operators: Vec<(String, String)> = console_section
                    .and_then(|c| c.operators.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|o| (o.name, o.password_hash))
                    .collect();
                for (name, hash) in &operators {
                    if argon2::password_hash::PasswordHash::new(hash).is_err() {
                        return Err(ConfigError::new(
                            path,
                            "actiongate.console.operators",
                            format!("{name}: password_hash is not an argon2 hash (make one with `actiongate hash-password`)"),
                        ));
                    }
                }
                Some(ConsoleSettings {
                    host: args
                        .admin_host
                        .clone()
                        .or_else(|| console_section.and_then(|c| c.host.clone()))
                        .unwrap_or_else(|| "127.0.0.1".to_owned()),
                    port,
                    operators,
                    session: Duration::from_secs_f64(
                        60.0 * console_section
                            .and_then(|c| c.session_minutes)
                            .unwrap_or(480.0)
                            .max(0.01),
                    ),
                    hosts: console_section
                        .and_then(|c| c.hosts.clone())
                        .unwrap_or_default(),
                })
            }
        };
        if let Some(c) = &console {
            if c.port != 0 && c.port == args.port.unwrap_or(5055) {
                return Err(ConfigError::new(
                    path,
                    "actiongate.console.port",
                    "the console is never served on the port Rasa calls: choose another --admin-port",
                ));
            }
        }
        let events_section = section.and_then(|s| s.events.as_ref());
        let events_port = args
            .events_port
            .or_else(|| events_section.and_then(|e| e.port));
        let events_secret = args
            .events_secret
            .clone()
            .or_else(|| events_section.and_then(|e| e.secret.clone()))
            .filter(|s| !s.is_empty());
        let events = match (events_port, events_secret) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(ConfigError::new(
                    path,
                    "actiongate.events.secret",
                    "receiving events needs the secret they are signed with (--events-secret or ACTIONGATE_EVENTS_SECRET)",
                ))
            }
            (Some(port), Some(secret)) => Some(EventsSettings {
                host: args
                    .events_host
                    .clone()
                    .or_else(|| events_section.and_then(|e| e.host.clone()))
                    .unwrap_or_else(|| "127.0.0.1".to_owned()),
                port,
                secret,
                tolerance: Duration::from_secs(
                    args.events_tolerance
                        .or_else(|| events_section.and_then(|e| e.tolerance_secs))
                        .unwrap_or(300),
                ),
            }),
        };
        let subscriptions_url = args
            .subscriptions_url
            .clone()
            .or_else(|| subs.and_then(|s| s.url.clone()));
        if let Some(url) = &subscriptions_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::new(
                    path,
                    "actiongate.subscriptions.url",
                    "must be an http(s) URL",
                ));
            }
        }
        let timeout = args
            .subscriptions_timeout
            .or_else(|| subs.and_then(|s| s.timeout_secs))
            .unwrap_or(5.0);
        if !(timeout > 0.0 && timeout <= 300.0) {
            return Err(ConfigError::new(
                path,
                "actiongate.subscriptions.timeout_secs",
                "must be in (0, 300]",
            ));
        }
        let max_in_flight = args
            .subscriptions_max_in_flight
            .or_else(|| subs.and_then(|s| s.max_in_flight))
            .unwrap_or(crate::subscriptions::DEFAULT_MAX_IN_FLIGHT);
        if max_in_flight == 0 {
            return Err(ConfigError::new(
                path,
                "actiongate.subscriptions.max_in_flight",
                "must be at least 1",
            ));
        }
        let limits = BodyLimits {
            max_body: args
                .body_limit
                .or_else(|| server.and_then(|s| s.body_limit))
                .unwrap_or(BodyLimits::default().max_body),
            max_decompressed: args
                .decompressed_limit
                .or_else(|| server.and_then(|s| s.decompressed_limit))
                .unwrap_or(BodyLimits::default().max_decompressed),
            ..BodyLimits::default()
        };
        let body_budget = args
            .body_budget
            .or_else(|| server.and_then(|s| s.body_budget))
            .unwrap_or(actionserver::DEFAULT_BODY_BUDGET);
        if body_budget < limits.max_body {
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
        let secrets = [
            (
                "action_endpoint.token",
                action_endpoint.and_then(|a| a.token.as_deref()),
            ),
            (
                "actiongate.subscriptions.token",
                subs.and_then(|s| s.token.as_deref()),
            ),
            (
                "actiongate.events.secret",
                events_section.and_then(|e| e.secret.as_deref()),
            ),
            (
                "actiongate.consent.signing_secret",
                consent.and_then(|c| c.signing_secret.as_deref()),
            ),
            (
                "actiongate.approval.notify_rasa_token",
                section
                    .and_then(|s| s.approval.as_ref())
                    .and_then(|a| a.notify_rasa_token.as_deref()),
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
        let per_hour = args
            .rate_per_hour
            .or_else(|| rate.and_then(|r| r.per_hour))
            .unwrap_or(5.0);
        let capacity = args
            .rate_capacity
            .or_else(|| rate.and_then(|r| r.capacity))
            .unwrap_or(5.0);
        if capacity < 1.0 || per_hour < 0.0 {
            return Err(ConfigError::new(
                path,
                "actiongate.rate_limit",
                "capacity must be at least 1 and per_hour not negative",
            ));
        }
        let signals = Signals {
            affirm_intents: consent
                .and_then(|c| c.affirm_intents.clone())
                .unwrap_or_else(|| Signals::default().affirm_intents),
            deny_intents: consent
                .and_then(|c| c.deny_intents.clone())
                .unwrap_or_else(|| Signals::default().deny_intents),
            min_confidence: args
                .min_confidence
                .or_else(|| consent.and_then(|c| c.min_confidence))
                .unwrap_or_else(|| Signals::default().min_confidence),
            confirm_slot: args
                .confirm_slot
                .clone()
                .or_else(|| consent.and_then(|c| c.confirm_slot.clone()))
                .filter(|s| !s.is_empty()),
        };
        // A secret that is set but empty is a mistake, never "no signing" (CONTRACT.md
        // section 2). clap drops an empty environment value, so the variable is read too.
        let empty_env = std::env::var_os("ACTIONGATE_SIGNING_SECRET").is_some_and(|v| v.is_empty());
        let signing_secret = args
            .signing_secret
            .clone()
            .or_else(|| consent.and_then(|c| c.signing_secret.clone()));
        if empty_env
            || signing_secret
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
        Ok(Self {
            host: args.host.clone().unwrap_or_else(|| "0.0.0.0".to_owned()),
            port: args.port.unwrap_or(5055),
            server: ServerSettings {
                limits,
                body_budget,
                auth_token: args
                    .auth_token
                    .clone()
                    .or_else(|| action_endpoint.and_then(|a| a.token.clone()))
                    .filter(|t| !t.is_empty()),
                token_name: args
                    .token_name
                    .clone()
                    .or_else(|| server.and_then(|s| s.token_name.clone()))
                    .or_else(|| action_endpoint.and_then(|a| a.token_name.clone()))
                    .unwrap_or_else(|| "token".to_owned()),
                cors,
                workers: args
                    .workers
                    .or_else(|| server.and_then(|s| s.workers))
                    .unwrap_or(0),
                max_connections_per_peer: server
                    .and_then(|s| s.max_connections_per_peer)
                    .unwrap_or(ServerSettings::default().max_connections_per_peer)
                    .max(1),
                ..ServerSettings::default()
            },
            tls: args.ssl_certificate.clone().zip(args.ssl_keyfile.clone()),
            grpc: match (
                args.grpc || server.and_then(|s| s.grpc).unwrap_or(false),
                args.grpc_port.or_else(|| server.and_then(|s| s.grpc_port)),
            ) {
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
            },
            grpc_client_ca: args
                .ssl_ca_file
                .clone()
                .or_else(|| server.and_then(|s| s.ssl_ca_file.clone())),
            subscriptions_url,
            subscriptions_token: args
                .subscriptions_token
                .clone()
                .or_else(|| subs.and_then(|s| s.token.clone())),
            subscriptions_timeout: Duration::from_secs_f64(timeout),
            subscriptions_max_in_flight: max_in_flight,
            embedded_port: args
                .embedded_service_port
                .or_else(|| embedded_section.and_then(|e| e.port))
                .unwrap_or(5056),
            embedded_seed,
            embedded_command_delay: Duration::from_millis(
                args.embedded_command_delay_ms
                    .or_else(|| embedded_section.and_then(|e| e.command_delay_ms))
                    .unwrap_or(0),
            ),
            data_dir,
            database_url,
            traces: super::traces::read(file.tracing.as_ref(), path, &|name| {
                std::env::var(name).ok()
            }),
            consent: ConsentConfig {
                confirm_response: consent
                    .and_then(|c| c.confirm_response.clone())
                    .unwrap_or_else(|| ConsentConfig::default().confirm_response),
                window: Duration::from_secs(
                    args.confirmation_window
                        .or_else(|| consent.and_then(|c| c.window_secs))
                        .unwrap_or(600),
                ),
                clock_skew: Duration::from_secs(
                    args.clock_skew
                        .or_else(|| consent.and_then(|c| c.clock_skew_secs))
                        .unwrap_or(5),
                ),
                signals,
                plain_yes: args
                    .plain_yes
                    .or_else(|| consent.and_then(|c| c.plain_yes))
                    .unwrap_or(true),
                reply_words: crate::consent::plain_yes::ReplyWords::new(
                    &consent
                        .and_then(|c| c.reply_words.clone())
                        .unwrap_or_default(),
                ),
                question: args
                    .consent_question
                    .or_else(|| consent.and_then(|c| c.question))
                    .unwrap_or_default(),
                identity: IdentityConfig {
                    account_key: args
                        .account_key
                        .clone()
                        .or_else(|| consent.and_then(|c| c.account_key.clone()))
                        .unwrap_or_else(|| "account_id".to_owned()),
                    signing_secret,
                    claim: consent
                        .and_then(|c| c.account_claim.clone())
                        .unwrap_or_else(|| "sub".to_owned()),
                    max_age: Duration::from_secs(
                        consent
                            .and_then(|c| c.token_max_age_secs)
                            .unwrap_or(24 * 3600),
                    ),
                    leeway: Duration::from_secs(
                        consent.and_then(|c| c.token_leeway_secs).unwrap_or(60),
                    ),
                },
                rate: RateLimit {
                    capacity,
                    per_second: per_hour / 3600.0,
                },
                in_flight_wait: Duration::from_secs_f64(timeout + 5.0),
                approval: approval_rules(section.and_then(|s| s.approval.as_ref())),
                ..ConsentConfig::default()
            },
            audit_retention: Duration::from_secs(
                86_400
                    * args
                        .audit_retention_days
                        .or_else(|| {
                            section
                                .and_then(|s| s.audit.as_ref())
                                .and_then(|a| a.retention_days)
                        })
                        .unwrap_or(90),
            ),
            reconcile_interval: Duration::from_secs(args.reconcile_interval.max(1)),
            events,
            console,
        })
    }
}

/// endpoints.yml `actiongate.approval`, with its defaults (review marks honoured, 24 h).
fn approval_rules(section: Option<&super::ApprovalSection>) -> crate::consent::ApprovalRules {
    let defaults = crate::consent::ApprovalRules::default();
    let Some(a) = section else {
        return defaults;
    };
    crate::consent::ApprovalRules {
        change_types: a.change_types.clone().unwrap_or_default(),
        accounts: a.accounts.clone().unwrap_or_default(),
        review: a.review.unwrap_or(defaults.review),
        expiry: a.expiry_hours.map_or(defaults.expiry, |h| {
            Duration::from_secs_f64(h.max(0.0) * 3600.0)
        }),
        notify_rasa_url: a.notify_rasa_url.clone(),
        notify_rasa_token: a.notify_rasa_token.clone(),
        max_open_per_account: a
            .max_open_per_account
            .unwrap_or(defaults.max_open_per_account)
            .max(1),
        max_open_per_subscription: a
            .max_open_per_subscription
            .unwrap_or(defaults.max_open_per_subscription)
            .max(1),
    }
}

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
