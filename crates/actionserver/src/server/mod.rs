//! The HTTP server: its settings, the routes and their handlers, and authentication. Body
//! decoding ([`body`]), CORS ([`cors`]), the domain cache, the request's span and metrics
//! (`middleware`, [`metrics`]) and the one place where errors become status codes
//! ([`errors`]) live beside it.
//!
//! The caller binds the listener, so tests serve on port 0 (see [`serve`]).

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::Arc;

use actix_web::dev::Server;
use actix_web::http::header;
use actix_web::middleware::from_fn;
use actix_web::{web, App, HttpMessage, HttpRequest, HttpResponse, HttpServer, Route};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tracing::Instrument;

use crate::action::{ActionCall, ActionError, Dispatcher, Registry};
use crate::otel;
use crate::protocol::request::ActionNameOnly;
use crate::protocol::{ActionResponse, WebhookRequest};

pub mod body;
pub mod cors;
mod domain;
pub mod errors;
mod extend;
pub mod listener;
pub mod metrics;
mod middleware;
mod readiness;
pub mod tls;

pub use body::{BodyBudget, BodyLimits, DEFAULT_BODY_BUDGET};
pub use cors::CorsPolicy;
use domain::DomainCache;
pub use errors::ApiError;
pub use extend::HttpExtras;
pub use listener::{paced_bodies, refuse_over_cap, Pace, PeerLimit};
use metrics::Metrics;
use middleware::{cors_and_preflight, observe};
pub(crate) use readiness::Readiness;
pub use readiness::ReadinessCheck;

/// How the server treats requests, independent of which actions it serves.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// Sizes a request body may have, compressed and decompressed.
    pub limits: BodyLimits,
    /// Bytes of request bodies held at once, across all requests (503 beyond).
    pub body_budget: usize,
    /// When set, `/webhook`, `/actions` and `/metrics` require this token.
    pub auth_token: Option<String>,
    /// The query parameter Rasa puts the token in.
    pub token_name: String,
    /// Which origins browsers may call from.
    pub cors: CorsPolicy,
    /// Worker threads (0: one per core).
    pub workers: usize,
    /// Seconds in-flight requests get to finish on shutdown.
    pub shutdown_timeout: u64,
    /// Handle SIGTERM/SIGINT (off in tests that stop the server themselves).
    pub handle_signals: bool,
    /// Connections each worker keeps open at once (actix-web's 25,000); more wait in the
    /// listen backlog. Slow clients are bounded by time, not by a small count, so hostile
    /// ones never take every slot from Rasa.
    pub max_connections_per_worker: usize,
    /// gRPC: how long a new connection may stay silent before it is closed.
    pub first_bytes: std::time::Duration,
    /// Connections open at once from one peer address, on the webhook's and gRPC's
    /// listeners alike; one more is closed as it opens.
    pub max_connections_per_peer: usize,
    /// How long an action may run before the server answers for it
    /// ([`Action::timed_out`](crate::Action::timed_out)), for actions without a
    /// [`time_budget`](crate::Action::time_budget) of their own; `None`: no limit.
    pub action_time_budget: Option<std::time::Duration>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            limits: BodyLimits::default(),
            body_budget: DEFAULT_BODY_BUDGET,
            auth_token: None,
            token_name: "token".to_owned(),
            cors: CorsPolicy::default(),
            workers: 0,
            shutdown_timeout: 30,
            handle_signals: true,
            max_connections_per_worker: 25_000,
            first_bytes: std::time::Duration::from_secs(10),
            max_connections_per_peer: 256,
            action_time_budget: None,
        }
    }
}

/// What every transport shares: the actions, the settings, the token, the domain cache,
/// the metrics and the body budget. HTTP and gRPC served at once share one.
pub(crate) struct Core {
    pub(crate) registry: Registry,
    pub(crate) settings: ServerSettings,
    /// SHA-256 of the token: comparing digests keeps the comparison constant-time even
    /// for tokens of different lengths.
    token_digest: Option<[u8; 32]>,
    domains: DomainCache,
    pub(crate) metrics: Metrics,
    pub(crate) budget: BodyBudget,
    pub(crate) readiness: Readiness,
}

/// The action name of a call, for the request's span and metrics.
#[derive(Clone)]
pub(crate) struct CallInfo {
    pub(crate) action: &'static str,
}

/// The actions and how they are served, ready for one or more transports: [`http`]
/// (Rasa's webhook) and, with the `grpc` feature, [`grpc`](ActionServer::grpc) (Rasa Pro's
/// ActionService). The transports share one executor: the same domain cache, token,
/// limits and metrics.
///
/// [`http`]: ActionServer::http
#[derive(Clone)]
pub struct ActionServer {
    pub(crate) core: Arc<Core>,
}

impl ActionServer {
    /// The actions, served with these settings.
    pub fn new(registry: Registry, settings: ServerSettings) -> Self {
        let token_digest = settings
            .auth_token
            .as_ref()
            .map(|t| Sha256::digest(t.as_bytes()).into());
        Self {
            core: Arc::new(Core {
                registry,
                token_digest,
                domains: DomainCache::default(),
                budget: BodyBudget::new(settings.body_budget),
                metrics: Metrics::default(),
                readiness: Readiness::default(),
                settings,
            }),
        }
    }

    /// What `GET /ready` and the gRPC health service report beyond "not stopping": the
    /// check runs at most once a second (probes in between get its answer), bounded by
    /// 2 s; `Err` says
    /// why the server should not be sent calls now (say, its store cannot be reached).
    /// Without one, a server that is not stopping is ready.
    pub fn set_readiness(
        &self,
        check: impl Fn() -> futures_util::future::BoxFuture<'static, Result<(), String>>
            + Send
            + Sync
            + 'static,
    ) {
        self.core.readiness.set(Arc::new(check));
    }

    /// From now on not ready: the server is stopping (calls in flight still finish).
    pub fn drain(&self) {
        self.core.readiness.drain();
    }

    /// Adds metrics of the application's own to `GET /metrics` (on every transport): the
    /// source writes Prometheus' text format after the server's own metrics.
    pub fn add_metrics(&self, source: impl Fn(&mut String) + Send + Sync + 'static) {
        self.core.metrics.add_source(Box::new(source));
    }

    /// Serves the webhook (and `/health`, `/ready`, `/actions`, `/metrics`) on a bound
    /// listener, with TLS when given.
    pub fn http(
        &self,
        listener: TcpListener,
        tls: Option<rustls::ServerConfig>,
    ) -> std::io::Result<Server> {
        self.http_with(listener, tls, HttpExtras::default())
    }

    /// [`Self::http`], with the application's own routes and middleware beside the
    /// webhook ([`HttpExtras`]).
    pub fn http_with(
        &self,
        listener: TcpListener,
        tls: Option<rustls::ServerConfig>,
        extras: HttpExtras,
    ) -> std::io::Result<Server> {
        let settings = self.core.settings.clone();
        let state = web::Data::from(self.core.clone());
        let peers = PeerLimit::new("webhook", settings.max_connections_per_peer);
        let mut server = HttpServer::new(move || {
            let middleware = extras.middleware.clone();
            let routes = extras.routes.clone();
            App::new()
                .app_data(state.clone())
                .wrap(from_fn(move |req, next| {
                    extend::apply(middleware.clone(), req, next)
                }))
                .wrap(from_fn(cors_and_preflight))
                .wrap(from_fn(observe))
                .wrap(from_fn(refuse_over_cap))
                .configure(|cfg| endpoint(cfg, "/webhook", "POST", || web::post().to(webhook)))
                .configure(|cfg| endpoint(cfg, "/health", "GET", || web::get().to(health)))
                .configure(|cfg| endpoint(cfg, "/ready", "GET", || web::get().to(ready)))
                .configure(|cfg| endpoint(cfg, "/actions", "GET", || web::get().to(actions)))
                .configure(|cfg| endpoint(cfg, "/metrics", "GET", || web::get().to(metrics)))
                .configure(|cfg| {
                    if let Some(routes) = &routes {
                        routes(cfg)
                    }
                })
                .default_service(web::to(|| async {
                    Err::<HttpResponse, _>(ApiError::NotFound)
                }))
        })
        .shutdown_timeout(settings.shutdown_timeout)
        // Slow clients: the request head within 5 s, an idle keep-alive connection closed
        // after 30 s, at most `max_connections` open per worker and
        // `max_connections_per_peer` from one address; the body's own rate is held in
        // `body::read`.
        .client_request_timeout(std::time::Duration::from_secs(5))
        .client_disconnect_timeout(std::time::Duration::from_secs(1))
        .keep_alive(std::time::Duration::from_secs(30))
        .max_connections(settings.max_connections_per_worker)
        .on_connect(peers.on_connect());
        if settings.workers > 0 {
            server = server.workers(settings.workers);
        }
        if !settings.handle_signals {
            server = server.disable_signals();
        }
        let server = match tls {
            Some(config) => server.listen_rustls_0_23(listener, config)?,
            None => server.listen(listener)?,
        };
        Ok(server.run())
    }
}

/// Starts serving the webhook on a bound listener. The returned server runs until stopped
/// (its handle) or, with `handle_signals`, until SIGTERM/SIGINT: then it stops accepting,
/// and in-flight requests get `shutdown_timeout` seconds to finish.
pub fn serve(
    listener: TcpListener,
    registry: Registry,
    settings: ServerSettings,
    tls: Option<rustls::ServerConfig>,
) -> std::io::Result<Server> {
    ActionServer::new(registry, settings).http(listener, tls)
}

/// Registers `path` and `path/` (the same route, as rasa-sdk has it) as two resources
/// with static paths, which match by comparison; one resource with both paths would match
/// by regex on every request. Other methods get 405 naming the allowed one.
fn endpoint(cfg: &mut web::ServiceConfig, path: &str, allowed: &'static str, route: fn() -> Route) {
    for path in [path.to_owned(), format!("{path}/")] {
        cfg.service(web::resource(path).route(route()).default_service(web::to(
            move || async move { Err::<HttpResponse, _>(ApiError::MethodNotAllowed(allowed)) },
        )));
    }
}

impl Core {
    /// The action's label for metrics: its name when the server has it, `<unknown>`
    /// otherwise, so callers can't grow the metrics with names of their own.
    pub(crate) fn call_info(&self, name: &str) -> CallInfo {
        let action = self.registry.get(name).map_or("<unknown>", |a| a.name());
        CallInfo { action }
    }

    /// Whether one of the tokens given is the configured one (always, when none is
    /// configured). Constant-time.
    pub(crate) fn token_accepted<'a>(&self, given: impl IntoIterator<Item = &'a str>) -> bool {
        let Some(expected) = &self.token_digest else {
            return true;
        };
        given.into_iter().any(|given| {
            let digest: [u8; 32] = Sha256::digest(given.as_bytes()).into();
            bool::from(digest.ct_eq(expected))
        })
    }

    /// The token, from Rasa's query parameter or `Authorization: Bearer` (the scheme's name
    /// in any letter case, as HTTP has it).
    fn authorize(&self, req: &HttpRequest) -> Result<(), ApiError> {
        let from_query = web::Query::<HashMap<String, String>>::from_query(req.query_string())
            .ok()
            .and_then(|q| q.get(&self.settings.token_name).cloned());
        let from_header = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer)
            .map(|t| t.trim().to_owned());
        if self.token_accepted(
            [from_query, from_header]
                .iter()
                .flatten()
                .map(String::as_str),
        ) {
            Ok(())
        } else {
            Err(ApiError::Unauthorized)
        }
    }

    /// Runs the request's action, whatever the transport: the one path from a decoded
    /// request to events and responses. `None`: the request names no action.
    /// The action runs inside the call's span ([`otel::call_span`]), which continues the
    /// trace the call arrived with.
    pub(crate) async fn execute(
        &self,
        request: &WebhookRequest<'_>,
        transport: otel::Transport,
        from: otel::Carrier<'_>,
    ) -> Result<Option<ActionResponse>, ApiError> {
        let Some(name) = request.next_action.as_deref().filter(|n| !n.is_empty()) else {
            return Ok(None);
        };
        // The request's own span (its log line) names the action and the sender.
        let request_span = tracing::Span::current();
        request_span.record("action", name);
        if let Some(tracker) = &request.tracker {
            request_span.record("sender", tracker.sender_id.as_str());
        }
        let span = otel::call_span(transport, request, from);
        let result = self
            .run_call(name.to_owned(), request)
            .instrument(span.clone())
            .await;
        if let Err(e) = &result {
            otel::failed(&span, &e.to_string());
        }
        result.map(Some)
    }

    async fn run_call(
        &self,
        name: String,
        request: &WebhookRequest<'_>,
    ) -> Result<ActionResponse, ApiError> {
        let Some(action) = self.registry.get(&name).cloned() else {
            return Err(ApiError::UnknownAction(name));
        };
        let Some(tracker) = &request.tracker else {
            return Err(ApiError::bad_request(
                "the request has no tracker",
                Some(name),
            ));
        };
        if let Some(sender) = &request.sender_id {
            if *sender != tracker.sender_id {
                return Err(ApiError::bad_request(
                    "sender_id and tracker.sender_id differ",
                    Some(name),
                ));
            }
        }
        let domain = if action.reads_domain() {
            let domain = self.domains.resolve(request).map_err(|e| {
                ApiError::bad_request(
                    format!("invalid domain: {}", errors::describe(&e)),
                    Some(name.clone()),
                )
            })?;
            match domain {
                Some(domain) => Some(domain),
                None => return Err(ApiError::DomainMissing(name)),
            }
        } else {
            None
        };
        let mut dispatcher = Dispatcher::default();
        let call = ActionCall {
            tracker,
            domain: domain.as_deref(),
            version: request.version.as_deref(),
            state: self.registry.state(),
        };
        let budget = action.time_budget().or(self.settings.action_time_budget);
        let ran = match budget {
            None => action.run(call, &mut dispatcher).await,
            Some(budget) => {
                match tokio::time::timeout(budget, action.run(call, &mut dispatcher)).await {
                    Ok(ran) => ran,
                    Err(_) => {
                        tracing::warn!(action = %name, budget_ms = budget.as_millis(), "the action ran past its time budget");
                        dispatcher = Dispatcher::default();
                        action.timed_out(&mut dispatcher)
                    }
                }
            }
        };
        let events = match ran {
            Ok(events) => events,
            Err(ActionError::Rejected { message }) => {
                return Err(ApiError::Rejected {
                    message,
                    action_name: name,
                })
            }
            Err(ActionError::Failed(cause)) => {
                tracing::error!(action = %name, error = %cause, "the action failed");
                return Err(ApiError::ActionFailed {
                    action_name: name,
                    cause,
                });
            }
            Err(ActionError::TimedOut) => {
                return Err(ApiError::TimedOut {
                    action_name: name,
                    budget_ms: budget.unwrap_or_default().as_millis(),
                })
            }
        };
        Ok(ActionResponse {
            events,
            responses: dispatcher.into_messages(),
        })
    }
}

async fn health() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

/// Readiness, open as `/health` is (probes carry no token): 200 when calls may be sent
/// here, 503 with the reason when not.
async fn ready(state: web::Data<Core>) -> HttpResponse {
    match state.readiness.now().await {
        Ok(()) => HttpResponse::Ok().json(serde_json::json!({"status": "ready"})),
        Err(reason) => HttpResponse::ServiceUnavailable()
            .json(serde_json::json!({"status": "not_ready", "reason": reason})),
    }
}

async fn actions(req: HttpRequest, state: web::Data<Core>) -> Result<HttpResponse, ApiError> {
    state.authorize(&req)?;
    let list: Vec<Value> = state
        .registry
        .names()
        .iter()
        .map(|name| serde_json::json!({"name": name}))
        .collect();
    Ok(HttpResponse::Ok().json(list))
}

async fn metrics(req: HttpRequest, state: web::Data<Core>) -> Result<HttpResponse, ApiError> {
    state.authorize(&req)?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render()))
}

async fn webhook(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<Core>,
) -> Result<HttpResponse, ApiError> {
    state.authorize(&req)?;
    // The body's share of the budget is held until the answer is made.
    let (body, _held) =
        body::read(req.headers(), payload, state.settings.limits, &state.budget).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("Invalid body request", None));
    }
    let request: WebhookRequest = match WebhookRequest::parse(&body) {
        Ok(Some(request)) => request,
        Ok(None) => return Err(ApiError::bad_request("Invalid body request", None)),
        Err(e) => {
            // Name the action when the body says which, and prefer 404 for an unknown
            // one, as rasa-sdk's order does.
            let name = ActionNameOnly::read(&body);
            if let Some(name) = &name {
                req.extensions_mut().insert(state.call_info(name));
                if state.registry.get(name).is_none() {
                    return Err(ApiError::UnknownAction(name.clone()));
                }
            }
            let first = body.iter().find(|b| !b.is_ascii_whitespace());
            let message = if e.is_data() && first != Some(&b'{') {
                format!(
                    "the request must be a JSON object: {}",
                    errors::describe(&e)
                )
            } else {
                format!("invalid request: {}", errors::describe(&e))
            };
            return Err(ApiError::bad_request(message, name));
        }
    };
    if let Some(name) = request.next_action.as_deref().filter(|n| !n.is_empty()) {
        req.extensions_mut().insert(state.call_info(name));
    }
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let from = otel::Carrier {
        traceparent: header(otel::TRACEPARENT),
        tracestate: header(otel::TRACESTATE),
    };
    match state.execute(&request, otel::Transport::Http, from).await? {
        Some(answer) => Ok(HttpResponse::Ok().json(answer)),
        None => Ok(HttpResponse::Ok().json(Value::Null)),
    }
}

/// The credentials of an `Authorization` value in the Bearer scheme, its name matched in any
/// letter case (RFC 9110, section 11.1).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}
