//! The service's answers read, whichever client brought them ([`Answer`]): capped at
//! [`MAX_ANSWER_BYTES`], JSON or the service's error body, and a command's answer taken
//! apart the same way for every provider.

use std::future::Future;

use bytes::Bytes;
use serde::Deserialize;

use super::MAX_ANSWER_BYTES;
use crate::subscriptions::provider::{CommandOutcome, ServiceError};

/// Why an answer was lost partway: the connection's error, or the call's deadline.
pub(in crate::subscriptions) type Lost = Box<dyn std::error::Error + Send + Sync>;

/// An answer as the readers here take it, whichever client brought it: reqwest's (Stripe)
/// or the service client's own ([`super::transport`]).
pub(in crate::subscriptions) trait Answer: Send {
    fn status(&self) -> u16;
    /// A header's value, when it is text.
    fn header(&self, name: &str) -> Option<&str>;
    /// The length the answer declares.
    fn content_length(&self) -> Option<u64>;
    /// The next piece of the body; `None` at its end.
    fn chunk(&mut self) -> impl Future<Output = Result<Option<Bytes>, Lost>> + Send;
}

impl Answer for reqwest::Response {
    fn status(&self) -> u16 {
        reqwest::Response::status(self).as_u16()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers().get(name)?.to_str().ok()
    }

    fn content_length(&self) -> Option<u64> {
        reqwest::Response::content_length(self)
    }

    async fn chunk(&mut self) -> Result<Option<Bytes>, Lost> {
        reqwest::Response::chunk(self)
            .await
            .map_err(|e| e.without_url().into())
    }
}

/// Why a request has no answer, as far as a command's outcome turns on it.
pub(in crate::subscriptions) trait Unsent {
    /// Whether the request never left (the connection was not made), so nothing was done.
    fn before_sending(&self) -> bool;
    /// What went wrong, in words (no URL: it may carry ids).
    fn describe(self) -> String;
}

impl Unsent for reqwest::Error {
    fn before_sending(&self) -> bool {
        self.is_connect()
    }

    fn describe(self) -> String {
        self.without_url().to_string()
    }
}

/// The service's error body.
#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// The message of an error answer: its `message`, its `error` code, or its first bytes.
pub(in crate::subscriptions) fn error_message(body: &[u8]) -> String {
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

/// Why an answer's body was not read.
#[derive(Debug, thiserror::Error)]
pub(in crate::subscriptions) enum ReadError {
    #[error("{0}")]
    Lost(#[source] Lost),
    #[error("the answer is larger than {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
}

impl From<ReadError> for ServiceError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Lost(e) => ServiceError::Unreachable(e),
            ReadError::TooLarge => ServiceError::Invalid(e.to_string()),
        }
    }
}

/// The answer's body, refused past [`MAX_ANSWER_BYTES`] (before reading it, when the
/// service declares its length).
pub(in crate::subscriptions) async fn read_capped(
    mut response: impl Answer,
) -> Result<Vec<u8>, ReadError> {
    if response
        .content_length()
        .is_some_and(|n| n > MAX_ANSWER_BYTES as u64)
    {
        return Err(ReadError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(ReadError::Lost)? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(ReadError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A successful answer read as `T`; an error answer as [`ServiceError::Status`].
pub(in crate::subscriptions) async fn read_json<T: serde::de::DeserializeOwned>(
    response: impl Answer,
) -> Result<T, ServiceError> {
    let status = response.status();
    let body = read_capped(response).await?;
    if !(200..300).contains(&status) {
        return Err(ServiceError::Status {
            status,
            message: error_message(&body),
        });
    }
    serde_json::from_slice(&body).map_err(|e| ServiceError::Invalid(e.to_string()))
}

/// A command's answer, as far as every provider reads it alike: its status, whether it
/// was replayed under its `Idempotency-Key`, and its body. A command that never left (the
/// connection refused) was not sent; one whose answer was lost may have been made.
pub(in crate::subscriptions) struct CommandAnswer {
    pub status: u16,
    pub replayed: bool,
    pub body: Vec<u8>,
}

/// Awaits a command's answer, sorting what went wrong into not sent and unknown.
pub(in crate::subscriptions) async fn command_answer(
    sent: Result<impl Answer, impl Unsent>,
    on_answer: impl FnOnce(u16),
) -> Result<CommandAnswer, CommandOutcome> {
    let response = match sent {
        Ok(response) => response,
        Err(e) if e.before_sending() => return Err(CommandOutcome::NotSent(e.describe())),
        Err(e) => return Err(CommandOutcome::Unknown(e.describe())),
    };
    let status = response.status();
    on_answer(status);
    let replayed = response
        .header("Idempotent-Replayed")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    match read_capped(response).await {
        Ok(body) => Ok(CommandAnswer {
            status,
            replayed,
            body,
        }),
        Err(e) => Err(CommandOutcome::Unknown(format!("the answer was lost: {e}"))),
    }
}
