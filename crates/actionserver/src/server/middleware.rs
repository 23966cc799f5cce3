//! What wraps every request: its span and metrics, and CORS (preflights answered before
//! routing).

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{web, HttpMessage, HttpResponse};
use tracing::Instrument;

use super::{cors, CallInfo, Core};

/// One span per request, with the action, sender, status and duration; and the metrics.
/// Its line, which adds the method and the path, is at debug level for a success, at info
/// level otherwise.
pub(super) async fn observe(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    // The method and the path are the line's, not the span's: a span's fields are
    // formatted when it is made, for every request, and a line inside the request (the
    // guard's warnings) has the action and the sender to say which call it was.
    let span = tracing::info_span!(
        "request",
        action = tracing::field::Empty,
        sender = tracing::field::Empty,
        status = tracing::field::Empty,
        ms = tracing::field::Empty,
    );
    let state = req.app_data::<web::Data<Core>>().cloned();
    let res = next.call(req).instrument(span.clone()).await?;
    let status = res.status().as_u16();
    let elapsed = started.elapsed();
    let route = route_label(res.request().path());
    let action = res
        .request()
        .extensions()
        .get::<CallInfo>()
        .map_or("", |c| c.action);
    // A success is the common case, counted in the metrics: its line is for debugging
    // (as rasa-sdk logs a call only at debug level). Anything else is logged. The status
    // and duration are recorded only for the line: the request is over, and formatting
    // them into the span for a line not logged was a few microseconds a call.
    let success = res.status().is_success();
    if !success || tracing::enabled!(tracing::Level::DEBUG) {
        span.record("status", status);
        span.record("ms", elapsed.as_secs_f64() * 1000.0);
    }
    let (method, path) = (res.request().method(), res.request().path());
    if success {
        span.in_scope(|| tracing::debug!(%method, %path, "served"));
    } else {
        span.in_scope(|| tracing::info!(%method, %path, "served"));
    }
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
pub(super) async fn cors_and_preflight(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<actix_web::body::BoxBody>, actix_web::Error> {
    let Some(state) = req.app_data::<web::Data<Core>>().cloned() else {
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
