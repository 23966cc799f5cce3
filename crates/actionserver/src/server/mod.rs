//! The HTTP server: routes, body decoding, authentication, CORS, metrics, and the one
//! place where errors become status codes.
//!
//! The caller binds the listener, so tests serve on port 0 (see [`serve`]).

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{Server, ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderValue};
use actix_web::middleware::{from_fn, Next};
use actix_web::{web, App, HttpMessage, HttpRequest, HttpResponse, HttpServer, Route};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tracing::Instrument;

use crate::action::{ActionCall, ActionError, Dispatcher, Registry};
use crate::protocol::request::ActionNameOnly;
use crate::protocol::{ActionResponse, WebhookRequest};

pub mod body;
pub mod cors;
pub mod errors;
pub mod metrics;

pub use body::{BodyBudget, BodyLimits, DEFAULT_BODY_BUDGET};
pub use cors::CorsPolicy;
pub use errors::ApiError;
use metrics::Metrics;

/// How the server treats requests, independent of which actions it serves.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub limits: BodyLimits,
    /// Bytes of request bodies held at once, across all requests (503 beyond).
    pub body_budget: usize,
    /// When set, `/webhook`, `/actions` and `/metrics` require this token.
    pub auth_token: Option<String>,
    /// The query parameter Rasa puts the token in.
    pub token_name: String,
    pub cors: CorsPolicy,
    /// Worker threads (0: one per core).
    pub workers: usize,
    /// Seconds in-flight requests get to finish on shutdown.
    pub shutdown_timeout: u64,
    /// Handle SIGTERM/SIGINT (off in tests that stop the server themselves).
    pub handle_signals: bool,
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
        }
    }
}

/// Domains by digest. Rasa Pro sends only the digest once the server has seen the domain.
#[derive(Default)]
struct DomainCache {
    by_digest: Mutex<HashMap<String, Arc<Value>>>,
    /// The last non-empty domain, for a request that sends `domain: {}` (as rasa-sdk does).
    last: Mutex<Option<Arc<Value>>>,
    /// The text of the last domain parsed, and what it parsed to: Rasa 3.x sends the same
    /// domain with every call and no digest, so comparing the text (a memcmp) spares
    /// parsing it again.
    last_text: Mutex<Option<(Box<str>, Arc<Value>)>>,
}

/// At most this many domains are kept (one per assistant version in practice).
const DOMAIN_CACHE_SIZE: usize = 32;

impl DomainCache {
    /// The domain the action gets, or `None` when it must be asked for (449).
    fn resolve(
        &self,
        request: &WebhookRequest<'_>,
    ) -> Result<Option<Arc<Value>>, serde_json::Error> {
        let digest = request.domain_digest.as_deref().filter(|d| !d.is_empty());
        if let Some(raw) = &request.domain {
            let seen = self.last_text.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, domain)) = seen.as_ref().filter(|(text, _)| **text == *raw.get()) {
                let domain = domain.clone();
                drop(seen);
                return Ok(Some(self.keep(domain, digest)));
            }
        }
        let given: Option<Value> = match &request.domain {
            Some(raw) => Some(serde_json::from_str(raw.get())?),
            None => None,
        };
        match given {
            Some(Value::Object(map)) if !map.is_empty() => {
                let domain = Arc::new(Value::Object(map));
                if let Some(raw) = &request.domain {
                    *self.last_text.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some((raw.get().into(), domain.clone()));
                }
                Ok(Some(self.keep(domain, digest)))
            }
            Some(Value::Object(_)) => Ok(self
                .cached(digest)
                .or_else(|| self.last.lock().unwrap_or_else(|e| e.into_inner()).clone())),
            Some(Value::Null) | None => Ok(self.cached(digest)),
            Some(other) => Ok(Some(Arc::new(other))),
        }
    }

    /// Remembers a non-empty domain: under its digest (when it came with one), and as the
    /// last one.
    fn keep(&self, domain: Arc<Value>, digest: Option<&str>) -> Arc<Value> {
        if let Some(digest) = digest {
            let mut cache = self.by_digest.lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= DOMAIN_CACHE_SIZE && !cache.contains_key(digest) {
                cache.clear();
            }
            if !cache.get(digest).is_some_and(|d| Arc::ptr_eq(d, &domain)) {
                cache.insert(digest.to_owned(), domain.clone());
            }
        }
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(domain.clone());
        domain
    }

    fn cached(&self, digest: Option<&str>) -> Option<Arc<Value>> {
        let cache = self.by_digest.lock().unwrap_or_else(|e| e.into_inner());
        cache.get(digest?).cloned()
    }
}

struct AppState {
    registry: Registry,
    settings: ServerSettings,
    /// SHA-256 of the token: comparing digests keeps the comparison constant-time even
    /// for tokens of different lengths.
    token_digest: Option<[u8; 32]>,
    domains: DomainCache,
    metrics: Metrics,
    budget: BodyBudget,
}

/// The action name and sender of a webhook call, for the request's span and metrics.
#[derive(Clone)]
struct CallInfo {
    action: &'static str,
}

/// Starts serving on a bound listener. The returned server runs until stopped (its
/// handle) or, with `handle_signals`, until SIGTERM/SIGINT: then it stops accepting, and
/// in-flight requests get `shutdown_timeout` seconds to finish.
pub fn serve(
    listener: TcpListener,
    registry: Registry,
    settings: ServerSettings,
    tls: Option<rustls::ServerConfig>,
) -> std::io::Result<Server> {
    let token_digest = settings
        .auth_token
        .as_ref()
        .map(|t| Sha256::digest(t.as_bytes()).into());
    let state = web::Data::new(AppState {
        registry,
        token_digest,
        domains: DomainCache::default(),
        budget: BodyBudget::new(settings.body_budget),
        metrics: Metrics::default(),
        settings: settings.clone(),
    });
    let mut server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .wrap(from_fn(cors_and_preflight))
            .wrap(from_fn(observe))
            .configure(|cfg| endpoint(cfg, "/webhook", "POST", || web::post().to(webhook)))
            .configure(|cfg| endpoint(cfg, "/health", "GET", || web::get().to(health)))
            .configure(|cfg| endpoint(cfg, "/actions", "GET", || web::get().to(actions)))
            .configure(|cfg| endpoint(cfg, "/metrics", "GET", || web::get().to(metrics)))
            .default_service(web::to(|| async {
                Err::<HttpResponse, _>(ApiError::NotFound)
            }))
    })
    .shutdown_timeout(settings.shutdown_timeout)
    .keep_alive(std::time::Duration::from_secs(120));
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

/// One span per request, with the action, sender, status and duration; and the metrics.
async fn observe(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let span = tracing::info_span!(
        "request",
        method = %req.method(),
        path = %req.path(),
        action = tracing::field::Empty,
        sender = tracing::field::Empty,
        status = tracing::field::Empty,
        ms = tracing::field::Empty,
    );
    let state = req.app_data::<web::Data<AppState>>().cloned();
    let res = next.call(req).instrument(span.clone()).await?;
    let status = res.status().as_u16();
    let elapsed = started.elapsed();
    let route = route_label(res.request().path());
    let action = res
        .request()
        .extensions()
        .get::<CallInfo>()
        .map_or("", |c| c.action);
    span.record("status", status);
    span.record("ms", elapsed.as_secs_f64() * 1000.0);
    span.in_scope(|| tracing::info!("served"));
    if let Some(state) = state {
        state.metrics.record(route, action, status, elapsed);
    }
    Ok(res)
}

/// The metrics label of a path: one of the routes (a trailing slash is the same route, as
/// rasa-sdk has it), or `<unmatched>`.
fn route_label(path: &str) -> &'static str {
    match path.strip_suffix('/').unwrap_or(path) {
        "/webhook" => "/webhook",
        "/health" => "/health",
        "/actions" => "/actions",
        "/metrics" => "/metrics",
        _ => "<unmatched>",
    }
}

/// OPTIONS on any path is answered before routing; CORS headers on every answer.
async fn cors_and_preflight(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<actix_web::body::BoxBody>, actix_web::Error> {
    let Some(state) = req.app_data::<web::Data<AppState>>().cloned() else {
        return Ok(next.call(req).await?.map_into_boxed_body());
    };
    let policy = &state.settings.cors;
    let preflight = req.method() == actix_web::http::Method::OPTIONS;
    if !preflight && !policy.is_enabled() {
        return Ok(next.call(req).await?.map_into_boxed_body());
    }
    let allow = {
        let origins: Vec<&str> = req
            .headers()
            .get_all(header::ORIGIN)
            .filter_map(|v| v.to_str().ok())
            .collect();
        policy.allow_origin(&origins)
    };
    let mut res = if preflight {
        let mut preflight = HttpResponse::Ok();
        if allow.is_some() {
            let method = req
                .headers()
                .get(header::ACCESS_CONTROL_REQUEST_METHOD)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if cors::ALLOW_METHODS.split(", ").any(|m| m == method) {
                preflight
                    .insert_header((header::ACCESS_CONTROL_ALLOW_METHODS, cors::ALLOW_METHODS));
                if let Some(requested) = req
                    .headers()
                    .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
                    .and_then(|v| v.to_str().ok())
                {
                    preflight.insert_header((
                        header::ACCESS_CONTROL_ALLOW_HEADERS,
                        cors::allow_headers(requested),
                    ));
                }
            }
        }
        req.into_response(preflight.finish())
    } else {
        next.call(req).await?.map_into_boxed_body()
    };
    if let Some(origin) = allow {
        if let Ok(value) = HeaderValue::from_str(&origin) {
            res.headers_mut()
                .insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
            if policy.varies() {
                res.headers_mut()
                    .insert(header::VARY, HeaderValue::from_static("Origin"));
            }
        }
    }
    Ok(res)
}

impl AppState {
    /// The action's label for metrics: its name when the server has it, `<unknown>`
    /// otherwise, so callers can't grow the metrics with names of their own.
    fn call_info(&self, name: &str) -> CallInfo {
        let action = self.registry.get(name).map_or("<unknown>", |a| a.name());
        CallInfo { action }
    }

    /// The token, from Rasa's query parameter or `Authorization: Bearer`.
    fn authorize(&self, req: &HttpRequest) -> Result<(), ApiError> {
        let Some(expected) = &self.token_digest else {
            return Ok(());
        };
        let from_query = web::Query::<HashMap<String, String>>::from_query(req.query_string())
            .ok()
            .and_then(|q| q.get(&self.settings.token_name).cloned());
        let from_header = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| t.trim().to_owned());
        let ok = [from_query, from_header]
            .into_iter()
            .flatten()
            .any(|given| {
                let digest: [u8; 32] = Sha256::digest(given.as_bytes()).into();
                bool::from(digest.ct_eq(expected))
            });
        if ok {
            Ok(())
        } else {
            Err(ApiError::Unauthorized)
        }
    }
}

async fn health() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

async fn actions(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    state.authorize(&req)?;
    let list: Vec<Value> = state
        .registry
        .names()
        .iter()
        .map(|name| serde_json::json!({"name": name}))
        .collect();
    Ok(HttpResponse::Ok().json(list))
}

async fn metrics(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    state.authorize(&req)?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render()))
}

async fn webhook(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
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
                format!("the request must be a JSON object: {e}")
            } else {
                format!("invalid request: {e}")
            };
            return Err(ApiError::bad_request(message, name));
        }
    };
    let Some(name) = request.next_action.clone().filter(|n| !n.is_empty()) else {
        return Ok(HttpResponse::Ok().json(Value::Null));
    };
    req.extensions_mut().insert(state.call_info(&name));
    tracing::Span::current().record("action", name.as_str());
    let Some(action) = state.registry.get(&name).cloned() else {
        return Err(ApiError::UnknownAction(name));
    };
    let Some(tracker) = &request.tracker else {
        return Err(ApiError::bad_request(
            "the request has no tracker",
            Some(name),
        ));
    };
    tracing::Span::current().record("sender", tracker.sender_id.as_str());
    if let Some(sender) = &request.sender_id {
        if *sender != tracker.sender_id {
            return Err(ApiError::bad_request(
                "sender_id and tracker.sender_id differ",
                Some(name),
            ));
        }
    }
    let domain = if action.reads_domain() {
        let domain = state.domains.resolve(&request).map_err(|e| {
            ApiError::bad_request(format!("invalid domain: {e}"), Some(name.clone()))
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
    };
    let events = match action.run(call, &mut dispatcher).await {
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
    };
    Ok(HttpResponse::Ok().json(ActionResponse {
        events,
        responses: dispatcher.into_messages(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: &str) -> WebhookRequest<'_> {
        WebhookRequest::parse(body.as_bytes()).unwrap().unwrap()
    }

    #[test]
    fn the_same_domain_text_is_parsed_once_and_a_new_one_replaces_it() {
        let cache = DomainCache::default();
        let a = r#"{"next_action": "x", "domain": {"responses": {"utter_q": [{"text": "one"}]}}}"#;
        let first = cache.resolve(&request(a)).unwrap().unwrap();
        let again = cache.resolve(&request(a)).unwrap().unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the cached parse is reused");
        let b = r#"{"next_action": "x", "domain": {"responses": {"utter_q": [{"text": "two"}]}}}"#;
        let changed = cache.resolve(&request(b)).unwrap().unwrap();
        assert_eq!(changed["responses"]["utter_q"][0]["text"], "two");
        // Digest only, after a domain came with that digest: the cached one.
        let with_digest = r#"{"next_action": "x", "domain_digest": "D", "domain": {"responses": {"utter_q": [{"text": "one"}]}}}"#;
        let kept = cache.resolve(&request(with_digest)).unwrap().unwrap();
        assert_eq!(kept, first);
        let digest_only = cache
            .resolve(&request(r#"{"next_action": "x", "domain_digest": "D"}"#))
            .unwrap()
            .unwrap();
        assert_eq!(digest_only["responses"]["utter_q"][0]["text"], "one");
        // An unknown digest and no domain: asked for (449).
        assert!(cache
            .resolve(&request(r#"{"next_action": "x", "domain_digest": "E"}"#))
            .unwrap()
            .is_none());
        // `{}` is not a domain to remember: the last one is used.
        let empty = cache
            .resolve(&request(r#"{"next_action": "x", "domain": {}}"#))
            .unwrap()
            .unwrap();
        assert_eq!(empty["responses"]["utter_q"][0]["text"], "one");
    }
}
