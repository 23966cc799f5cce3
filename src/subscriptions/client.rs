//! The client of the subscription service: a configured value (base URL, timeout,
//! token, how many calls may be in flight) that maps every answer to what it means for the
//! customer. It fails closed: when it cannot tell, it says so.

use std::sync::Arc;
use std::time::Duration;

use reqwest::{header, StatusCode};
use serde::Deserialize;
use tokio::sync::{Semaphore, SemaphorePermit};
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

/// Records the service's answer on the call's span.
pub(in crate::subscriptions) fn answered(response: &reqwest::Response) {
    tracing::Span::current().record("http.response.status_code", response.status().as_u16());
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
    /// `base`, parsed once: each call's URL is a copy with its path set, where a URL given
    /// as text was parsed whole again for every call. `None` when `base` does not parse or
    /// has a query or a fragment: its calls then go as text, as before (and one that does
    /// not parse fails as reqwest finds it).
    parsed: Option<reqwest::Url>,
    token: Option<String>,
    http: PerThread,
    /// How long a call waits for a turn; the call itself then has as long again.
    timeout: Duration,
    /// One permit per call in flight.
    turns: Arc<Semaphore>,
    max_in_flight: usize,
}

impl ServiceClient {
    /// A client allowing [`DEFAULT_MAX_IN_FLIGHT`] calls at once.
    pub fn new(
        base_url: &str,
        timeout: Duration,
        token: Option<String>,
    ) -> Result<Self, reqwest::Error> {
        Self::with_max_in_flight(base_url, timeout, token, DEFAULT_MAX_IN_FLIGHT)
    }

    /// A client allowing `max_in_flight` calls at once (at least 1); further calls wait
    /// for a turn, within their timeout.
    pub fn with_max_in_flight(
        base_url: &str,
        timeout: Duration,
        token: Option<String>,
        max_in_flight: usize,
    ) -> Result<Self, reqwest::Error> {
        crate::telemetry::install_crypto();
        let max_in_flight = max_in_flight.max(1);
        let http = PerThread::new(move || {
            reqwest::Client::builder()
                // A redirect is an answer, not followed: a command goes only where it
                // was configured to, and a 307 would send it elsewhere body and all.
                .redirect(reqwest::redirect::Policy::none())
                // reqwest's own retries are of HTTP/2's refused streams, and this client
                // speaks HTTP/1.1; left on, they copy every request (headers, body) in
                // case. A command is sent again only by the reconciler, with its key.
                .retry(reqwest::retry::never().max_retries_per_request(0))
                .timeout(timeout)
                .connect_timeout(timeout.min(Duration::from_secs(5)))
                .pool_idle_timeout(Duration::from_secs(30))
                .pool_max_idle_per_host(max_in_flight)
                .build()
        })?;
        let base = base_url.trim_end_matches('/').to_owned();
        Ok(Self {
            parsed: reqwest::Url::parse(&base)
                .ok()
                .filter(|u| !u.cannot_be_a_base() && u.query().is_none() && u.fragment().is_none()),
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

    /// A request, to be sent while holding a turn; `path` has no query.
    fn request(
        &self,
        _turn: &SemaphorePermit<'_>,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::RequestBuilder {
        let http = self.http.get();
        let mut builder = match &self.parsed {
            Some(base) => {
                let mut url = base.clone();
                url.set_path(&format!("{}{path}", base.path().trim_end_matches('/')));
                http.request(method, url)
            }
            None => http.request(method, format!("{}{path}", self.base)),
        };
        // The service continues this call's trace, when there is one.
        if let Some(traceparent) = actionserver::current_traceparent() {
            builder = builder.header("traceparent", traceparent);
        }
        match &self.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
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
            let turn = self.turn().await?;
            let response = self
                .request(&turn, reqwest::Method::GET, &path)
                .send()
                .await
                .map_err(|e| ServiceError::Unreachable(e.without_url()))?;
            answered(&response);
            read_json(response).await
        }
        .instrument(span)
        .await
    }

    /// One subscription as it is now; `None` when the service does not know it.
    pub async fn get(&self, id: &str) -> Result<Option<Subscription>, ServiceError> {
        let span = service_span!("subscription_service.get", "GET", "/v1/subscriptions/{id}");
        async move {
            let path = format!("/v1/subscriptions/{}", segment(id));
            let turn = self.turn().await?;
            let response = self
                .request(&turn, reqwest::Method::GET, &path)
                .send()
                .await
                .map_err(|e| ServiceError::Unreachable(e.without_url()))?;
            answered(&response);
            if response.status() == StatusCode::NOT_FOUND {
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
            let turn = self.turn().await?;
            let response = self
                .request(&turn, reqwest::Method::GET, &path)
                .send()
                .await
                .map_err(|e| ServiceError::Unreachable(e.without_url()))?;
            answered(&response);
            match response.status() {
                StatusCode::OK => read_json(response).await.map(KeyState::Made),
                StatusCode::ACCEPTED => Ok(KeyState::InFlight),
                StatusCode::NOT_FOUND => {
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
            let sent = self
                .request(&turn, reqwest::Method::POST, &path)
                .header(header::IF_MATCH, format!("\"r{revision}\""))
                .header("Idempotency-Key", request_key)
                .json(&serde_json::json!({"change_type": change_type}))
                .send()
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
                412 => match serde_json::from_slice::<Subscription>(&body) {
                    Ok(record) => CommandOutcome::Stale(Box::new(record)),
                    Err(_) => CommandOutcome::Rejected {
                        status: 412,
                        message: "the record changed".into(),
                    },
                },
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

pub(super) mod answer;
use answer::{command_answer, error_message, read_capped, read_json, CommandAnswer};
mod per_thread;
use per_thread::PerThread;

/// A real HTTP service for the client's tests, counting what reaches it.
#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod command_tests;
