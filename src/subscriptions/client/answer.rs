//! The service's answers read: capped at [`MAX_ANSWER_BYTES`], JSON or the service's
//! error body.

use serde::Deserialize;

use super::MAX_ANSWER_BYTES;
use crate::subscriptions::provider::ServiceError;

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
