//! The client of the subscription service: a configured value (base URL, timeout,
//! token) that maps every answer to what it means for the customer. It fails closed:
//! when it cannot tell, it says so.

use std::time::Duration;

use reqwest::{header, StatusCode};
use serde::Deserialize;

use super::model::{Change, Subscription};
use crate::consent::ConfirmedChange;

/// Why the service's facts could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("the subscription service could not be reached: {0}")]
    Unreachable(#[source] reqwest::Error),
    #[error("the subscription service answered {status}: {message}")]
    Status { status: u16, message: String },
    #[error("the subscription service sent an answer that could not be read: {0}")]
    Invalid(String),
}

/// What became of a command.
#[derive(Debug, Clone, PartialEq)]
pub enum CommandOutcome {
    /// 201, or 200 replayed: the change is made.
    Applied { change: Change, replayed: bool },
    /// 412: the record moved; nothing happened. The current record.
    Stale(Box<Subscription>),
    /// 409: a command with this key is still in flight.
    InFlight,
    /// The command was sent and no answer came back (timeout, lost connection, 5xx): it
    /// may have been applied.
    Unknown(String),
    /// The command never left (connection refused): nothing can have happened.
    NotSent(String),
    /// Refused for another reason (404, 422, 428, other 4xx): nothing happened.
    Rejected { status: u16, message: String },
}

/// The service's error body.
#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// Where the service is and how to talk to it.
#[derive(Debug, Clone)]
pub struct ServiceClient {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl ServiceClient {
    pub fn new(
        base_url: &str,
        timeout: Duration,
        token: Option<String>,
    ) -> Result<Self, reqwest::Error> {
        crate::telemetry::install_crypto();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self {
            base: base_url.trim_end_matches('/').to_owned(),
            token,
            http,
        })
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let builder = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    /// The account's subscriptions (the service filters them).
    pub async fn list(&self, account: &str) -> Result<Vec<Subscription>, ServiceError> {
        let path = format!("/v1/accounts/{}/subscriptions", segment(account));
        let response = self
            .request(reqwest::Method::GET, &path)
            .send()
            .await
            .map_err(ServiceError::Unreachable)?;
        read_json(response).await
    }

    /// One subscription as it is now; `None` when the service does not know it.
    pub async fn get(&self, id: &str) -> Result<Option<Subscription>, ServiceError> {
        let path = format!("/v1/subscriptions/{}", segment(id));
        let response = self
            .request(reqwest::Method::GET, &path)
            .send()
            .await
            .map_err(ServiceError::Unreachable)?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        read_json(response).await.map(Some)
    }

    /// The change made under a request key, if any.
    pub async fn get_change(&self, request_key: &str) -> Result<Option<Change>, ServiceError> {
        let path = format!("/v1/changes/{}", segment(request_key));
        let response = self
            .request(reqwest::Method::GET, &path)
            .send()
            .await
            .map_err(ServiceError::Unreachable)?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        read_json(response).await.map(Some)
    }

    /// Sends the command for a change the guard confirmed: there is no other way to send
    /// one, since only the guard makes a [`ConfirmedChange`].
    pub async fn send_change(&self, change: &ConfirmedChange) -> CommandOutcome {
        let (subscription, change_type, revision, request_key) = (
            change.subscription(),
            change.change_type(),
            change.revision(),
            change.request_key(),
        );
        let path = format!("/v1/subscriptions/{}/changes", segment(subscription));
        let sent = self
            .request(reqwest::Method::POST, &path)
            .header(header::IF_MATCH, format!("\"r{revision}\""))
            .header("Idempotency-Key", request_key)
            .json(&serde_json::json!({"change_type": change_type}))
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(e) if e.is_connect() => return CommandOutcome::NotSent(e.to_string()),
            Err(e) => return CommandOutcome::Unknown(e.to_string()),
        };
        let status = response.status();
        let replayed = response
            .headers()
            .get("Idempotent-Replayed")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let body = match response.bytes().await {
            Ok(body) => body,
            Err(e) => return CommandOutcome::Unknown(format!("the answer was lost: {e}")),
        };
        match status.as_u16() {
            200 | 201 => match serde_json::from_slice::<Change>(&body) {
                Ok(change) => CommandOutcome::Applied {
                    change,
                    replayed: replayed || status == StatusCode::OK,
                },
                Err(e) => {
                    CommandOutcome::Unknown(format!("the service's answer could not be read: {e}"))
                }
            },
            409 => CommandOutcome::InFlight,
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
}

/// A path segment, percent-encoded: ids come from slots, which the customer can shape.
fn segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn error_message(body: &[u8]) -> String {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(ErrorBody {
            message: Some(message),
            ..
        }) => message,
        Ok(ErrorBody {
            error: Some(code), ..
        }) => code,
        _ => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    }
}

async fn read_json<T: serde::de::DeserializeOwned>(
    response: reqwest::Response,
) -> Result<T, ServiceError> {
    let status = response.status();
    let body = response.bytes().await.map_err(ServiceError::Unreachable)?;
    if !status.is_success() {
        return Err(ServiceError::Status {
            status: status.as_u16(),
            message: error_message(&body),
        });
    }
    serde_json::from_slice(&body).map_err(|e| ServiceError::Invalid(e.to_string()))
}
