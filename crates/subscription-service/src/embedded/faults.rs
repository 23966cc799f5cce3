//! Injected misbehaviour, for soak and fault tests: a share of the calls answered slowly
//! or with a 503, rolled per request by a small deterministic generator so a run's faults
//! are reproducible.

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::web;

use super::{error, State};

/// A share of calls answered slowly or with a failure (503), decided per request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Percentage of calls delayed by `slow`.
    pub slow_percent: f64,
    pub slow: Duration,
    /// Percentage of calls answered 503 without doing anything.
    pub fail_percent: f64,
}

impl Faults {
    pub(super) fn is_active(&self) -> bool {
        self.slow_percent > 0.0 || self.fail_percent > 0.0
    }
}

/// A small deterministic generator (xorshift), so a soak run's faults are reproducible.
pub(super) fn next_percent(state: &std::sync::atomic::AtomicU64) -> f64 {
    use std::sync::atomic::Ordering;
    let mut x = state.load(Ordering::Relaxed);
    loop {
        let mut y = x;
        y ^= y << 13;
        y ^= y >> 7;
        y ^= y << 17;
        match state.compare_exchange_weak(x, y, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return (y % 10_000) as f64 / 100.0,
            Err(now) => x = now,
        }
    }
}

/// Slows or fails a share of the calls (never the administration route).
pub(super) async fn inject_faults(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody + 'static>,
) -> Result<actix_web::dev::ServiceResponse<actix_web::body::BoxBody>, actix_web::Error> {
    let state = req.app_data::<web::Data<State>>().cloned();
    if let Some(state) =
        state.filter(|s| s.faults.is_active() && req.method() != actix_web::http::Method::PUT)
    {
        let roll = next_percent(&state.dice);
        if roll < state.faults.fail_percent {
            let response = error(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "injected failure",
            );
            return Ok(req.into_response(response));
        }
        if roll < state.faults.fail_percent + state.faults.slow_percent {
            tokio::time::sleep(state.faults.slow).await;
        }
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}
