//! Wiring: settings resolved from flags, environment and endpoints.yml; the embedded
//! service, the store, the guard and the actions put together; the server started.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::actions::{subscription_actions, Subscriptions};
use crate::cli::ServeArgs;
use crate::config::{load_endpoints, ConfigError, EndpointsFile};
use crate::consent::{ConsentConfig, Guard, IdentityConfig, RateLimit, Signals};
use crate::store::Store;
use crate::subscriptions::embedded::{self, ServiceSettings, DEMO_DATA};
use crate::subscriptions::ServiceClient;
use actionserver::{BodyLimits, CorsPolicy, ServerSettings};

/// Everything `serve` runs with, resolved and validated.
#[derive(Debug, Clone)]
pub struct Settings {
    pub host: String,
    pub port: u16,
    pub server: ServerSettings,
    pub tls: Option<(PathBuf, PathBuf)>,
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
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("the store could not be opened: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("the embedded subscription service could not start: {0}")]
    Service(#[from] embedded::ServiceStartError),
    #[error("the subscription service client could not be built: {0}")]
    Client(#[from] reqwest::Error),
    #[error("TLS: {0}")]
    Tls(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Settings {
    /// Flags and environment first, then endpoints.yml, then the defaults.
    pub fn resolve(args: &ServeArgs) -> Result<Self, ConfigError> {
        let required = args.endpoints != Path::new("endpoints.yml");
        let file = load_endpoints(&args.endpoints, required)?.unwrap_or_default();
        Self::from_parts(args, &file, &args.endpoints)
    }

    fn from_parts(
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
            confirm_slot: args
                .confirm_slot
                .clone()
                .or_else(|| consent.and_then(|c| c.confirm_slot.clone()))
                .filter(|s| !s.is_empty()),
        };
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
                ..ServerSettings::default()
            },
            tls: args.ssl_certificate.clone().zip(args.ssl_keyfile.clone()),
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
                    signing_secret: args
                        .signing_secret
                        .clone()
                        .or_else(|| consent.and_then(|c| c.signing_secret.clone()))
                        .filter(|s| !s.is_empty()),
                    claim: consent
                        .and_then(|c| c.account_claim.clone())
                        .unwrap_or_else(|| "sub".to_owned()),
                },
                rate: RateLimit {
                    capacity,
                    per_second: per_hour / 3600.0,
                },
                in_flight_wait: Duration::from_secs_f64(timeout + 5.0),
                unknown_grace: Duration::from_secs_f64((timeout * 4.0).max(60.0)),
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
        })
    }
}

/// A started server: its port, the embedded service's port (if it runs), and the server
/// future to await.
pub struct Started {
    pub port: u16,
    pub embedded_port: Option<u16>,
    pub server: actix_web::dev::Server,
    pub store: Store,
}

/// Starts everything `serve` runs: the embedded service (unless a URL is given), the
/// store, the reconciler, the audit retention, and the action server.
pub async fn start(settings: &Settings) -> Result<Started, StartError> {
    start_with(settings, subscription_actions).await
}

/// [`start`], serving the registry `actions` builds (the consent matrix's naive baseline
/// is served this way).
pub async fn start_with(
    settings: &Settings,
    actions: impl FnOnce(Subscriptions) -> crate::actions::Registry,
) -> Result<Started, StartError> {
    crate::telemetry::install_crypto();
    std::fs::create_dir_all(&settings.data_dir)?;
    let (service_url, embedded_port) = match &settings.subscriptions_url {
        Some(url) => (url.clone(), None),
        None => {
            let running = embedded::start(
                settings.embedded_port,
                ServiceSettings {
                    database: settings.data_dir.join("subscriptions.db"),
                    seed: Some(settings.embedded_seed.clone()),
                    token: settings.subscriptions_token.clone(),
                    command_delay: settings.embedded_command_delay,
                    faults: Default::default(),
                },
            )
            .await?;
            tracing::info!(
                port = running.port,
                "embedded subscription service listening on 127.0.0.1"
            );
            (
                format!("http://127.0.0.1:{}", running.port),
                Some(running.port),
            )
        }
    };
    let store = Store::connect(&settings.database_url).await?;
    let client = ServiceClient::with_max_in_flight(
        &service_url,
        settings.subscriptions_timeout,
        settings.subscriptions_token.clone(),
        settings.subscriptions_max_in_flight,
    )?;
    let guard = Guard::new(settings.consent.clone(), client, store.clone());
    // Only operations untouched for longer than a command can take (a wait for a turn,
    // then the call, each up to the timeout) are reconciled, so a command still in flight
    // on another replica is left alone.
    let min_age = settings.subscriptions_timeout * 2 + Duration::from_secs(1);
    spawn_housekeeping(
        guard.clone(),
        settings.reconcile_interval,
        min_age,
        settings.audit_retention,
    );
    let registry = actions(Subscriptions { guard });
    let listener = TcpListener::bind((settings.host.as_str(), settings.port))?;
    let port = listener.local_addr()?.port();
    let tls = match &settings.tls {
        Some((cert, key)) => Some(tls_config(cert, key)?),
        None => None,
    };
    let server = actionserver::serve(listener, registry, settings.server.clone(), tls)?;
    tracing::info!(port, host = %settings.host, store = if store.is_postgres() { "postgres" } else { "sqlite" }, "actiongate listening");
    Ok(Started {
        port,
        embedded_port,
        server,
        store,
    })
}

/// Resolves unknown outcomes and trims the audit trail, in the background.
fn spawn_housekeeping(guard: Guard, interval: Duration, min_age: Duration, retention: Duration) {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        loop {
            ticker.tick().await;
            match guard.reconcile_all(min_age).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(resolved = n, "reconciled unknown outcomes"),
                Err(e) => tracing::warn!(error = %e, "reconciliation failed"),
            }
            if let Err(e) = guard.store().prune_audit(retention).await {
                tracing::warn!(error = %e, "audit retention failed");
            }
        }
    });
}

fn tls_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, StartError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| StartError::Tls(format!("{}: {e}", cert.display())))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StartError::Tls(format!("{}: {e}", cert.display())))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| StartError::Tls(format!("{}: {e}", key.display())))?;
    rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| StartError::Tls(e.to_string()))
}

/// `actiongate serve`: runs until SIGTERM/SIGINT, then lets in-flight requests finish.
pub async fn serve(args: &ServeArgs) -> Result<(), StartError> {
    let settings = Settings::resolve(args)?;
    let started = start(&settings).await?;
    started.server.await?;
    tracing::info!("stopped");
    Ok(())
}

/// `actiongate check`: every problem in the configuration and the Rasa-side files, and
/// notes on what each deployment style needs.
pub fn check(args: &crate::cli::CheckArgs) -> crate::project::Report {
    let serve = ServeArgs {
        endpoints: args.endpoints.clone(),
        ..crate::cli::Cli::default_serve_args()
    };
    let required = args.endpoints != Path::new("endpoints.yml");
    let mut problems = Vec::new();
    let consent = match load_endpoints(&args.endpoints, required) {
        Err(e) => {
            problems.push(e);
            ConsentConfig::default()
        }
        Ok(file) => {
            match Settings::from_parts(&serve, &file.unwrap_or_default(), &args.endpoints) {
                Ok(settings) => settings.consent,
                Err(e) => {
                    problems.push(e);
                    ConsentConfig::default()
                }
            }
        }
    };
    let mut report =
        crate::project::check(&args.project, &consent.confirm_response, &consent.signals);
    problems.append(&mut report.problems);
    report.problems = problems;
    report
}

/// `actiongate subscription-service`: the embedded service alone, until SIGTERM/SIGINT.
pub async fn subscription_service(args: &crate::cli::ServiceArgs) -> Result<(), StartError> {
    std::fs::create_dir_all(&args.data_dir)?;
    let seed = match &args.seed {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(path, "--seed", e.to_string()))?,
        None => DEMO_DATA.to_owned(),
    };
    let listener = TcpListener::bind((args.host.as_str(), args.port))?;
    let port = listener.local_addr()?.port();
    let server = embedded::serve(
        listener,
        ServiceSettings {
            database: args.data_dir.join("subscriptions.db"),
            seed: Some(seed),
            token: args.token.clone(),
            command_delay: Duration::from_millis(args.command_delay_ms),
            faults: embedded::Faults {
                slow_percent: args.fault_slow_percent,
                slow: Duration::from_millis(args.fault_slow_ms),
                fail_percent: args.fault_fail_percent,
            },
        },
    )
    .await?;
    tracing::info!(port, host = %args.host, "subscription service listening");
    let handle = server.handle();
    tokio::spawn(async move {
        shutdown_signal().await;
        handle.stop(true).await;
    });
    server.await?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM can be watched");
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// `actiongate audit`: prints the audit trail as a table or JSON lines.
pub async fn audit(args: &crate::cli::AuditArgs) -> Result<String, StartError> {
    use std::fmt::Write;
    let url = args
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite:{}", args.data_dir.join("actiongate.db").display()));
    let since = match &args.since {
        None => None,
        Some(text) => {
            let at =
                time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
                    .map_err(|e| {
                    ConfigError::new("--since", "since", format!("{text:?} is not RFC 3339: {e}"))
                })?;
            Some((at.unix_timestamp_nanos() / 1_000_000) as i64)
        }
    };
    let store = Store::connect(&url).await?;
    let entries = store.audit_entries(args.sender.as_deref(), since).await?;
    let mut out = String::new();
    match args.format {
        crate::cli::AuditFormat::Json => {
            for entry in &entries {
                let _ = writeln!(
                    out,
                    "{}",
                    serde_json::to_string(entry).expect("an entry serialises")
                );
            }
        }
        crate::cli::AuditFormat::Table => {
            let _ = writeln!(
                out,
                "{:<24} {:<28} {:<20} {:<10} {:<32} {:<21} reason",
                "at", "action", "sender", "account", "target", "status"
            );
            for e in &entries {
                let at =
                    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(e.at) * 1_000_000)
                        .ok()
                        .and_then(|t| {
                            t.format(&time::format_description::well_known::Rfc3339)
                                .ok()
                        })
                        .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "{:<24} {:<28} {:<20} {:<10} {:<32} {:<21} {}",
                    at,
                    e.action,
                    e.sender_id,
                    e.account.as_deref().unwrap_or("-"),
                    e.target.as_deref().unwrap_or("-"),
                    e.status,
                    e.reason.as_deref().unwrap_or("-")
                );
            }
        }
    }
    Ok(out)
}
