//! The service's answers read: capped at [`MAX_ANSWER_BYTES`], JSON or the service's
//! error body, and a command's answer taken apart the same way for every provider.

use serde::Deserialize;

use super::MAX_ANSWER_BYTES;
use crate::subscriptions::provider::{CommandOutcome, ServiceError};

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
    Lost(#[source] reqwest::Error),
    #[error("the answer is larger than {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
}

impl From<ReadError> for ServiceError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Lost(e) => ServiceError::Unreachable(e.without_url()),
            ReadError::TooLarge => ServiceError::Invalid(e.to_string()),
        }
    }
}

/// The answer's body, refused past [`MAX_ANSWER_BYTES`] (before reading it, when the
/// service declares its length).
pub(in crate::subscriptions) async fn read_capped(
    mut response: reqwest::Response,
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
    response: reqwest::Response,
) -> Result<T, ServiceError> {
    let status = response.status();
    let body = read_capped(response).await?;
    if !status.is_success() {
        return Err(ServiceError::Status {
            status: status.as_u16(),
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
    sent: Result<reqwest::Response, reqwest::Error>,
    on_answer: impl FnOnce(&reqwest::Response),
) -> Result<CommandAnswer, CommandOutcome> {
    let response = match sent {
        Ok(response) => response,
        Err(e) if e.is_connect() => {
            return Err(CommandOutcome::NotSent(e.without_url().to_string()))
        }
        Err(e) => return Err(CommandOutcome::Unknown(e.without_url().to_string())),
    };
    on_answer(&response);
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("Idempotent-Replayed")
        .and_then(|v| v.to_str().ok())
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
