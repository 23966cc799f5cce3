//! The client of the subscription service: a configured value (base URL, timeout,
//! token, how many calls may be in flight) that maps every answer to what it means for the
//! customer. It fails closed: when it cannot tell, it says so.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::Method;
use http_body_util::Full;
use serde::Deserialize;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;
use tracing::Instrument as _;

use super::model::{Change, Subscription};
use super::provider::{Call, CommandOutcome, ConfirmedCommand, KeyState, Provider, ServiceError};

/// Calls in flight at once by default. Each holds a connection and its buffers, so the
/// bound is also a bound on memory when bursts come in, and on the load put on the service.
/// A call's span in the action's trace: the operation, its method and route (ids left
/// out: they are the customer's), and the status the service answered.
macro_rules! service_span {
    ($name:literal, $method:expr, $route:expr) => {
        tracing::info_span!(
            target: crate::telemetry::SPAN_TARGET,
            $name,
            otel.kind = "client",
            http.request.method = $method,
            http.route = $route,
            http.response.status_code = tracing::field::Empty,
        )
    };
}

pub(in crate::subscriptions) use service_span;

/// Records the service's answer (its status) on the call's span.
pub(in crate::subscriptions) fn answered(status: u16) {
    tracing::Span::current().record("http.response.status_code", status);
}

pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;

/// The largest answer read from the service. Answers are a record, a change or one
/// account's list; anything larger is refused as unreadable rather than buffered.
pub const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// The client of CONTRACT.md section 6 as a [`Provider`]: each call is the method of the same
/// name.
impl Provider for ServiceClient {
    fn list<'a>(&'a self, account: &'a str) -> Call<'a, Result<Vec<Subscription>, ServiceError>> {
        Box::pin(Self::list(self, account))
    }

    fn get<'a>(&'a self, id: &'a str) -> Call<'a, Result<Option<Subscription>, ServiceError>> {
        Box::pin(Self::get(self, id))
    }

    fn change_by_key<'a>(
        &'a self,
        request_key: &'a str,
    ) -> Call<'a, Result<KeyState, ServiceError>> {
        Box::pin(Self::change_by_key(self, request_key))
    }

    fn send_change<'a>(&'a self, change: &'a dyn ConfirmedCommand) -> Call<'a, CommandOutcome> {
        Box::pin(Self::send_change(self, change))
    }
}

/// Where the service is and how to talk to it. Clones share the turns, and on each thread
/// the connections ([`PerThread`]).
#[derive(Debug, Clone)]
pub struct ServiceClient {
    base: String,
    /// What each call's path follows: `base` parsed once and written back (its host in
    /// ASCII, its path without a trailing slash), or why it cannot be called (it does not
    /// parse, or has a query or a fragment), which each call then answers.
    prefix: Result<String, String>,
    /// `Authorization: Bearer …`, marked sensitive.
    token: Option<HeaderValue>,
    http: PerThread,
    /// How long a call waits for a turn; the call itself then has as long again.
    timeout: Duration,
    /// One permit per call in flight.
    turns: Arc<Semaphore>,
    max_in_flight: usize,
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("the token cannot be sent in a header")]
    Token,
}

impl ServiceClient {
    /// A client allowing [`DEFAULT_MAX_IN_FLIGHT`] calls at once.
    pub fn new(
        base_url: &str,
        timeout: Duration,
        token: Option<String>,
    ) -> Result<Self, BuildError> {
        Self::with_max_in_flight(base_url, timeout, token, DEFAULT_MAX_IN_FLIGHT)
    }

    /// A client allowing `max_in_flight` calls at once (at least 1); further calls wait
    /// for a turn, within their timeout.
    pub fn with_max_in_flight(
        base_url: &str,
        timeout: Duration,
        token: Option<String>,
        max_in_flight: usize,
    ) -> Result<Self, BuildError> {
        crate::telemetry::install_crypto();
        let max_in_flight = max_in_flight.max(1);
        let http = PerThread::new(move || transport::build(timeout, max_in_flight))?;
        let token = match token {
            Some(token) => {
                let mut value = HeaderValue::try_from(format!("Bearer {token}"))
                    .map_err(|_| BuildError::Token)?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let base = base_url.trim_end_matches('/').to_owned();
        Ok(Self {
            prefix: prefix(&base),
            base,
            token,
            http,
            timeout,
            turns: Arc::new(Semaphore::new(max_in_flight)),
            max_in_flight,
        })
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Waits for a turn, at most the timeout; `Busy` when none comes (nothing was sent).
    /// The call then gets its whole timeout: a call left with a sliver of time would be
    /// sent and then abandoned, and a command abandoned that way has an unknown outcome.
    /// So a call takes at most twice the timeout, which the reconciler waits out.
    async fn turn(&self) -> Result<SemaphorePermit<'_>, ServiceError> {
        tokio::time::timeout(self.timeout, self.turns.acquire())
            .await
            .map_err(|_| ServiceError::Busy(self.max_in_flight))?
            .map_err(|_| ServiceError::Busy(self.max_in_flight))
    }

    /// Sends a request while holding a turn (`path` has no query; `headers` and `body`
    /// only for a command), and hands back its answer to be read within the same timeout:
    /// the connection, the request and the whole answer take at most the timeout together.
    async fn call(
        &self,
        _turn: &SemaphorePermit<'_>,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<transport::Timed, transport::SendError> {
        let deadline = Instant::now() + self.timeout;
        let prefix = self
            .prefix
            .as_ref()
            .map_err(|why| transport::SendError::Invalid(why.clone()))?;
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("{prefix}{path}"));
        // The service continues this call's trace, when there is one.
        if let Some(traceparent) = actionserver::current_traceparent() {
            request = request.header("traceparent", traceparent);
        }
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, token.clone());
        }
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(body.map(Bytes::from).unwrap_or_default()))
            .map_err(|e| transport::SendError::Invalid(e.to_string()))?;
        transport::send(self.http.get(), request, deadline).await
    }

    /// A read: its answer, or why there is none.
    async fn read(&self, path: &str) -> Result<transport::Timed, ServiceError> {
        let turn = self.turn().await?;
        let response = self
            .call(&turn, Method::GET, path, &[], None)
            .await
            .map_err(|e| ServiceError::Unreachable(Box::new(e)))?;
        answered(response.status());
        Ok(response)
    }

    /// The account's subscriptions (the service filters them).
    pub async fn list(&self, account: &str) -> Result<Vec<Subscription>, ServiceError> {
        let span = service_span!(
            "subscription_service.list",
            "GET",
            "/v1/accounts/{account}/subscriptions"
        );
        async move {
            let path = format!("/v1/accounts/{}/subscriptions", segment(account));
            read_json(self.read(&path).await?).await
        }
        .instrument(span)
        .await
    }

    /// One subscription as it is now; `None` when the service does not know it.
    pub async fn get(&self, id: &str) -> Result<Option<Subscription>, ServiceError> {
        let span = service_span!("subscription_service.get", "GET", "/v1/subscriptions/{id}");
        async move {
            let path = format!("/v1/subscriptions/{}", segment(id));
            let response = self.read(&path).await?;
            if response.status() == 404 {
                return Ok(None);
            }
            read_json(response).await.map(Some)
        }
        .instrument(span)
        .await
    }

    /// What happened to a request key: made, in flight, or void (fenced from now on).
    pub async fn change_by_key(&self, request_key: &str) -> Result<KeyState, ServiceError> {
        let span = service_span!(
            "subscription_service.change_by_key",
            "GET",
            "/v1/changes/{key}"
        );
        async move {
            #[derive(Deserialize)]
            struct Status {
                #[serde(default)]
                status: Option<String>,
            }
            let path = format!("/v1/changes/{}", segment(request_key));
            let response = self.read(&path).await?;
            match response.status() {
                200 => read_json(response).await.map(KeyState::Made),
                202 => Ok(KeyState::InFlight),
                404 => {
                    let body = read_capped(response).await.unwrap_or_default();
                    let fenced = serde_json::from_slice::<Status>(&body)
                        .is_ok_and(|s| s.status.as_deref() == Some("void"));
                    Ok(if fenced {
                        KeyState::Void
                    } else {
                        KeyState::NotFound
                    })
                }
                _ => read_json::<Change>(response).await.map(KeyState::Made),
            }
        }
        .instrument(span)
        .await
    }

    /// Sends the command for a change the guard confirmed: there is no other way to send
    /// one, since only the guard makes a [`ConfirmedCommand`].
    pub async fn send_change(&self, change: &(impl ConfirmedCommand + ?Sized)) -> CommandOutcome {
        let span = service_span!(
            "subscription_service.send_change",
            "POST",
            "/v1/subscriptions/{id}/changes"
        );
        async move {
            let (subscription, change_type, revision, request_key) = (
                change.subscription(),
                change.change_type(),
                change.revision(),
                change.request_key(),
            );
            let path = format!("/v1/subscriptions/{}/changes", segment(subscription));
            let turn = match self.turn().await {
                Ok(turn) => turn,
                Err(e) => return CommandOutcome::NotSent(e.to_string()),
            };
            let if_match = format!("\"r{revision}\"");
            let body = serde_json::to_vec(&serde_json::json!({"change_type": change_type}))
                .expect("a JSON object serialises");
            let sent = self
                .call(
                    &turn,
                    Method::POST,
                    &path,
                    &[("if-match", &if_match), ("idempotency-key", request_key)],
                    Some(body),
                )
                .await;
            let CommandAnswer {
                status,
                replayed,
                body,
            } = match command_answer(sent, answered).await {
                Ok(answer) => answer,
                Err(outcome) => return outcome,
            };
            match status {
                200 | 201 => match serde_json::from_slice::<Change>(&body) {
                    Ok(change) => CommandOutcome::Applied {
                        change,
                        replayed: replayed || status == 200,
                        contradiction: None,
                    },
                    Err(e) => CommandOutcome::Unknown(format!(
                        "the service's answer could not be read: {e}"
                    )),
                },
                409 => CommandOutcome::InFlight,
                410 => CommandOutcome::Voided,
                412 => CommandOutcome::Stale(
                    serde_json::from_slice::<Subscription>(&body)
                        .ok()
                        .map(Box::new),
                ),
                // Accepted, without the change made: whether it will be is not known.
                s @ 202..=299 => CommandOutcome::Unknown(format!(
                    "the service answered {s} without the change it made"
                )),
                s if s >= 500 => CommandOutcome::Unknown(format!("the service answered {s}")),
                s => CommandOutcome::Rejected {
                    status: s,
                    message: error_message(&body),
                },
            }
        }
        .instrument(span)
        .await
    }
}

/// Every byte but RFC 3986's unreserved characters is percent-encoded.
pub const NOT_UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A path or query segment, percent-encoded: ids come from slots, which the customer can
/// shape.
pub(in crate::subscriptions) fn segment(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, NOT_UNRESERVED).to_string()
}

/// What a call's path follows, from the base URL (see [`ServiceClient`]'s `prefix`).
fn prefix(base: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(base).map_err(|e| format!("the service's URL: {e}"))?;
    if url.cannot_be_a_base() || url.query().is_some() || url.fragment().is_some() {
        return Err("the service's URL has a query or a fragment, or takes no path".to_owned());
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

pub(super) mod answer;
use answer::{command_answer, error_message, read_capped, read_json, Answer as _, CommandAnswer};
mod per_thread;
use per_thread::PerThread;
mod transport;

/// A real HTTP service for the client's tests, counting what reaches it.
#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod command_tests;
