//! The app put together and run (over 400 lines: each listener, TLS and the housekeeping are started here so one file shows what runs).
//!
//! Wiring for `serve` and `subscription-service`: the embedded service, the store, the
//! guard and the actions put together from the [`Settings`]; the service events listener;
//! TLS; the background
//! housekeeping (reconciling unknown outcomes, audit retention); the server started and
//! stopped on a signal.

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use std::sync::Arc;

use actionserver::{ActionServer, GrpcTls};

use crate::actions::subscription_actions;
use crate::cli::ServeArgs;
use crate::config::ConfigError;
use crate::config::{GrpcMode, Settings};
use crate::consent::Guard;
use crate::events::Inbox;
use crate::store::Store;
use crate::subscriptions::embedded::{self, ServiceSettings, DEMO_DATA};
use crate::subscriptions::stripe::StripeProvider;
use crate::subscriptions::ServiceClient;

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
    #[error("the subscription service client could not be built: {0}")]
    ServiceClient(#[from] crate::subscriptions::client::BuildError),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("gRPC: {0}")]
    Grpc(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// A started server: the port Rasa calls, the embedded service's port (if it runs), the
/// HTTP server future to await (unless gRPC took the port), and the gRPC server (when
/// served).
pub struct Started {
    pub port: u16,
    pub embedded_port: Option<u16>,
    pub http: Option<actix_web::dev::Server>,
    pub grpc: Option<GrpcRunning>,
    pub store: Store,
    /// The guard the actions use (for operators' decisions in the same process).
    pub guard: Guard,
    /// The operator console, when served: its port and a handle to stop it.
    pub console: Option<EventsRunning>,
    /// The service events listener, when events are received: its port and a handle to
    /// stop it (it runs on its own task).
    pub events: Option<EventsRunning>,
    /// The housekeeping task and the embedded service: they run as long as this is kept.
    pub background: Background,
}

/// What a started server runs beside its listeners: the housekeeping task (reconciling,
/// expiring holds, trimming the audit trail) and the embedded service. Dropping it stops
/// both, so a process that starts many servers (`actiongate-dev eval`) does not keep them all.
pub struct Background {
    housekeeping: tokio::task::JoinHandle<()>,
    embedded: Option<actix_web::dev::ServerHandle>,
}

impl Drop for Background {
    fn drop(&mut self) {
        self.housekeeping.abort();
        if let Some(embedded) = &self.embedded {
            // The stop is sent now; its completion need not be awaited.
            drop(embedded.stop(false));
        }
    }
}

/// The service events listener (`POST /v1/service-events`), running on its own task.
pub struct EventsRunning {
    pub port: u16,
    pub handle: actix_web::dev::ServerHandle,
}

/// The gRPC ActionService, running on its own task.
pub struct GrpcRunning {
    pub port: u16,
    stop: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<Result<(), actionserver::GrpcError>>,
}

impl GrpcRunning {
    /// Stops accepting; calls in flight finish.
    pub fn stop(&self) {
        self.stop.notify_one();
    }

    /// Until the server has stopped.
    pub async fn stopped(self) -> Result<(), StartError> {
        match self.task.await {
            Ok(result) => result.map_err(|e| StartError::Grpc(e.to_string())),
            Err(e) => Err(StartError::Grpc(e.to_string())),
        }
    }
}

/// Starts everything `serve` runs: the embedded service (unless a URL is given), the
/// store, the reconciler, the audit retention, and the action server.
pub async fn start(settings: &Settings) -> Result<Started, StartError> {
    crate::telemetry::install_crypto();
    // The webhook's certificate and key, read before anything starts: a file that cannot
    // be read stops the server with nothing serving.
    let webhook_tls = match (&settings.grpc, &settings.tls) {
        (GrpcMode::Off | GrpcMode::Beside(_), Some((cert, key))) => Some(tls_config(cert, key)?),
        _ => None,
    };
    std::fs::create_dir_all(&settings.data_dir)?;
    // Bound first, so the embedded service can deliver its events here from the start.
    let events_listener = match &settings.events {
        Some(events) => Some(TcpListener::bind((events.host.as_str(), events.port))?),
        None => None,
    };
    let events_port = match &events_listener {
        Some(listener) => Some(listener.local_addr()?.port()),
        None => None,
    };
    let (service_url, embedded_port, embedded) = match &settings.subscriptions_url {
        Some(url) => (url.clone(), None, None),
        // Changes go to Stripe: no service, embedded or not.
        None if settings.stripe.is_some() => (String::new(), None, None),
        None => {
            let running = embedded::start(
                settings.embedded_port,
                ServiceSettings {
                    database: settings.data_dir.join("subscriptions.db"),
                    seed: Some(settings.embedded_seed.clone()),
                    token: settings.subscriptions_token.clone(),
                    command_delay: settings.embedded_command_delay,
                    faults: Default::default(),
                    // With events received, the embedded service delivers its own here.
                    events: settings
                        .events
                        .as_ref()
                        .zip(events_port)
                        .map(|(events, port)| embedded::EventDelivery {
                            url: format!("http://127.0.0.1:{port}/v1/service-events"),
                            secret: events.secret.clone(),
                            faults: Default::default(),
                        }),
                    per_peer: embedded::PER_PEER,
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
                Some(running.handle),
            )
        }
    };
    let store = Store::connect(&settings.database_url).await?;
    let guard = guard_with(settings, &service_url, store.clone())?;
    // Only operations untouched for longer than a command can take (a wait for a turn,
    // then the call, each up to the timeout) are reconciled, so a command still in flight
    // on another replica is left alone.
    let min_age = settings.subscriptions_timeout * 2 + Duration::from_secs(1);
    let housekeeping = spawn_housekeeping(
        guard.clone(),
        settings.reconcile_interval,
        min_age,
        settings.audit_retention,
    );
    let events = match (events_listener, &settings.events) {
        (Some(listener), Some(events)) => {
            let inbox = Inbox::with_source(
                events.source,
                guard.clone(),
                &events.secret,
                events.tolerance,
            );
            let port = listener.local_addr()?.port();
            let counters = inbox.counters();
            let server =
                crate::events::serve(listener, inbox, settings.server.max_connections_per_peer)?;
            let handle = server.handle();
            tokio::spawn(server);
            let route = match events.source {
                crate::config::EventSource::Service => "/v1/service-events",
                crate::config::EventSource::Stripe => "/v1/stripe-events",
            };
            tracing::info!(port, host = %events.host, route, "receiving events");
            Some((EventsRunning { port, handle }, counters))
        }
        _ => None,
    };
    // Bound before the port Rasa calls, so the two can never be one: a second bind fails.
    let console = match &settings.console {
        Some(c) => {
            let listener = TcpListener::bind((c.host.as_str(), c.port))?;
            let port = listener.local_addr()?.port();
            let server = crate::console::serve(
                listener,
                crate::console::Console::new(
                    guard.clone(),
                    c.operators.clone(),
                    c.session,
                    c.hosts.clone(),
                ),
                settings.server.max_connections_per_peer,
            )?;
            let handle = server.handle();
            tokio::spawn(server);
            tracing::info!(port, host = %c.host, operators = c.operators.len(), "operator console listening");
            Some(EventsRunning { port, handle })
        }
        None => None,
    };
    let actions = ActionServer::new(subscription_actions(guard.clone()), settings.server.clone());
    // Ready while the store answers with this build's schema. The subscription service is
    // not asked: without it the guard fails closed and says so, which is better than no
    // answer at all.
    let ready_store = store.clone();
    actions.set_readiness(move || {
        let store = ready_store.clone();
        Box::pin(async move { store.ready().await })
    });
    if let Some((_, counters)) = &events {
        let counters = counters.clone();
        actions.add_metrics(move |out| counters.render(out));
    }
    let events = events.map(|(running, _)| running);
    let listener = TcpListener::bind((settings.host.as_str(), settings.port))?;
    let port = listener.local_addr()?.port();
    if settings.grpc_client_ca.is_some() && settings.grpc == GrpcMode::Off {
        return Err(StartError::Tls(
            "--ssl-ca-file (mutual TLS) applies to gRPC: add --grpc or --grpc-port".into(),
        ));
    }
    if settings.grpc_client_ca.is_some() && settings.tls.is_none() {
        // Mutual TLS without TLS would serve plain text to anyone: refuse to start.
        return Err(StartError::Tls(
            "ssl_ca_file (mutual TLS) needs a certificate and key: --ssl-certificate and --ssl-keyfile".into(),
        ));
    }
    let (http, grpc_listener) = match settings.grpc {
        GrpcMode::Only => (None, Some(listener)),
        GrpcMode::Off | GrpcMode::Beside(_) => {
            let second = match settings.grpc {
                GrpcMode::Beside(grpc_port) => {
                    Some(TcpListener::bind((settings.host.as_str(), grpc_port))?)
                }
                _ => None,
            };
            (Some(actions.http(listener, webhook_tls)?), second)
        }
    };
    let grpc = match grpc_listener {
        None => None,
        Some(listener) => Some(start_grpc(&actions, listener, settings)?),
    };
    tracing::info!(
        port,
        host = %settings.host,
        transport = match settings.grpc { GrpcMode::Off => "http", GrpcMode::Only => "grpc", GrpcMode::Beside(_) => "http+grpc" },
        grpc_port = grpc.as_ref().map(|g| g.port),
        store = if store.is_postgres() { "postgres" } else { "sqlite" },
        "actiongate listening"
    );
    Ok(Started {
        port,
        embedded_port,
        http,
        grpc,
        store,
        guard,
        events,
        console,
        background: Background {
            housekeeping,
            embedded,
        },
    })
}

/// The guard `serve` would build from these settings, for commands that decide as the
/// server does (`actiongate approvals`): the same store, the same service (the embedded
/// one at its port when no URL is given), the same rules.
pub async fn guard_for(settings: &Settings) -> Result<Guard, StartError> {
    crate::telemetry::install_crypto();
    let service_url = settings
        .subscriptions_url
        .clone()
        .unwrap_or_else(|| format!("http://127.0.0.1:{}", settings.embedded_port));
    let store = Store::connect(&settings.database_url).await?;
    guard_with(settings, &service_url, store)
}

/// The guard over the configured provider: Stripe (section 8) or the service at
/// `service_url` (section 6).
fn guard_with(settings: &Settings, service_url: &str, store: Store) -> Result<Guard, StartError> {
    let consent = settings.consent.clone();
    if let Some(stripe) = &settings.stripe {
        tracing::info!(api_base = %stripe.api_base, "changes go to Stripe Billing");
        return Ok(Guard::new(
            consent,
            StripeProvider::new(stripe, store.clone())?,
            store,
        ));
    }
    let client = ServiceClient::with_max_in_flight(
        service_url,
        settings.subscriptions_timeout,
        settings.subscriptions_token.clone(),
        settings.subscriptions_max_in_flight,
    )?;
    Ok(Guard::new(consent, client, store))
}

/// Starts the gRPC ActionService on its own task: stopped by [`GrpcRunning::stop`] or,
/// when the server handles signals, by SIGTERM/SIGINT.
fn start_grpc(
    actions: &ActionServer,
    listener: TcpListener,
    settings: &Settings,
) -> Result<GrpcRunning, StartError> {
    let port = listener.local_addr()?.port();
    let read = |path: &Path| {
        std::fs::read(path).map_err(|e| StartError::Tls(format!("{}: {e}", path.display())))
    };
    let tls = match &settings.tls {
        Some((cert, key)) => Some(GrpcTls {
            certificate: read(cert)?,
            key: read(key)?,
            client_ca: settings.grpc_client_ca.as_deref().map(read).transpose()?,
        }),
        None => None,
    };
    let stop = Arc::new(tokio::sync::Notify::new());
    let stopped = stop.clone();
    let signals = settings.server.handle_signals;
    let grace = Duration::from_secs(settings.server.shutdown_timeout);
    let actions = actions.clone();
    let task = tokio::spawn(async move {
        let (asked, asked_rx) = tokio::sync::oneshot::channel::<()>();
        let shutdown = async move {
            if signals {
                tokio::select! {
                    () = stopped.notified() => {}
                    () = shutdown_signal() => {}
                }
            } else {
                stopped.notified().await;
            }
            tracing::info!(
                grace_secs = grace.as_secs(),
                "gRPC: stopping; calls in flight finish"
            );
            let _ = asked.send(());
        };
        let serving = actions.grpc(listener, tls, shutdown);
        tokio::pin!(serving);
        // As the webhook's shutdown timeout: calls in flight get `grace`, then the
        // connections still open (a client that never finishes) are dropped.
        tokio::select! {
            result = &mut serving => result,
            () = async {
                if asked_rx.await.is_ok() {
                    tokio::time::sleep(grace).await;
                } else {
                    std::future::pending::<()>().await;
                }
            } => {
                tracing::warn!("gRPC: calls still open after the shutdown timeout; closing them");
                Ok(())
            }
        }
    });
    Ok(GrpcRunning { port, stop, task })
}

/// Raises the open-file soft limit to the hard limit (systemd's default soft limit is 1024:
/// a few hundred slow clients would otherwise leave no descriptor for Rasa's calls), and
/// logs both.
fn raise_descriptor_limit() {
    match rlimit::Resource::NOFILE.get() {
        Ok((soft, hard)) => {
            let raised = rlimit::increase_nofile_limit(hard).unwrap_or(soft);
            tracing::info!(soft_was = soft, soft = raised, hard, "open-file limit");
        }
        Err(e) => tracing::warn!(error = %e, "the open-file limit could not be read"),
    }
}

/// Resolves unknown outcomes and trims the audit trail, in the background.
fn spawn_housekeeping(
    guard: Guard,
    interval: Duration,
    min_age: Duration,
    retention: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        loop {
            ticker.tick().await;
            match guard.reconcile_all(min_age).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(resolved = n, "reconciled unknown outcomes"),
                Err(e) => tracing::warn!(error = %e, "reconciliation failed"),
            }
            match guard.expire_holds().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(expired = n, "held changes expired undecided"),
                Err(e) => tracing::warn!(error = %e, "expiring held changes failed"),
            }
            if let Err(e) = guard.store().prune_audit(retention).await {
                tracing::warn!(error = %e, "audit retention failed");
            }
        }
    })
}

fn tls_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, StartError> {
    actionserver::tls::from_pem_files(cert, key).map_err(StartError::Tls)
}

/// `actiongate serve`: runs until SIGTERM/SIGINT, then lets in-flight requests finish.
pub async fn serve(args: &ServeArgs) -> Result<(), StartError> {
    let settings = Settings::resolve(args)?;
    raise_descriptor_limit();
    let started = start(&settings).await?;
    let events = started.events.map(|e| e.handle);
    let console = started.console.map(|c| c.handle);
    let store = started.store.clone();
    match (started.http, started.grpc) {
        (Some(http), Some(grpc)) => {
            // Either stopping stops both: a signal reaches each, and an error in one
            // does not leave the other serving alone.
            let handle = http.handle();
            let stop_grpc = grpc.stop.clone();
            let (http, grpc) = tokio::join!(
                async {
                    let result = http.await;
                    stop_grpc.notify_one();
                    result
                },
                async {
                    let result = grpc.stopped().await;
                    handle.stop(true).await;
                    result
                },
            );
            http?;
            grpc?;
        }
        (Some(http), None) => http.await?,
        (None, Some(grpc)) => grpc.stopped().await?,
        (None, None) => {}
    }
    if let Some(events) = events {
        events.stop(true).await;
    }
    if let Some(console) = console {
        console.stop(true).await;
    }
    // The audit entries of the last requests are committed before the process ends.
    store.flush_audit().await;
    tracing::info!("stopped");
    Ok(())
}

/// `actiongate subscription-service`: the embedded service alone, until SIGTERM/SIGINT.
pub async fn subscription_service(args: &crate::cli::ServiceArgs) -> Result<(), StartError> {
    crate::telemetry::install_crypto();
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
            events: args.events_url.as_ref().map(|url| embedded::EventDelivery {
                url: url.clone(),
                secret: args.events_secret.clone().unwrap_or_default(),
                faults: embedded::DeliveryFaults {
                    copies: args.events_copies,
                    delay_percent: args.events_delay_percent,
                    delay: Duration::from_millis(args.events_delay_ms),
                    reorder: args.events_reorder,
                    drop_percent: args.events_drop_percent,
                },
            }),
            per_peer: embedded::PER_PEER,
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
