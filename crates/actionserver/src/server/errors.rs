//! The errors a webhook call can end in, and their one mapping to HTTP: every error is
//! JSON `{"error", "action_name"}`.

use std::sync::OnceLock;

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use regex::Regex;
use serde_json::json;

/// A JSON error as a message that says what is wrong and where, never the request's own
/// text: quoted strings in it (the values serde quotes) are elided, and it is cut at 200
/// characters (a key serde names can be as long as the caller likes).
pub fn describe(e: &serde_json::Error) -> String {
    static QUOTED: OnceLock<Regex> = OnceLock::new();
    let quoted = QUOTED.get_or_init(|| Regex::new(r#""(?:[^"\\]|\\.)*""#).expect("a valid regex"));
    let text = e.to_string();
    let text = quoted.replace_all(&text, "\"…\"");
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.into_owned(),
    }
}

/// Why a request was not served.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed or invalid. Rasa treats every 400 as a rejection and
    /// reads `action_name`.
    #[error("{message}")]
    BadRequest {
        /// What is wrong.
        message: String,
        /// The action, when the request names one.
        action_name: Option<String>,
    },
    /// The action refused to run.
    #[error("{message}")]
    Rejected {
        /// What is wrong.
        message: String,
        /// The action, when the request names one.
        action_name: String,
    },
    #[error("No registered action found for name '{0}'.")]
    /// No action of this name is registered.
    UnknownAction(String),
    /// rasa-sdk's message, word for word (`ACTION_MISSING_DOMAIN_DEFAULT_MESSAGE`).
    #[error("Missing domain context, assistant will retry the request and include the domain in the request payload. For more information please see https://rasa.com/docs/action-server/")]
    DomainMissing(String),
    #[error("the request body is larger than {limit} bytes")]
    /// The body is over the limit.
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    #[error("a valid token is required")]
    /// Unauthorized.
    Unauthorized,
    #[error("not found")]
    /// NotFound.
    NotFound,
    #[error("method not allowed; allowed: {0}")]
    /// MethodNotAllowed.
    MethodNotAllowed(&'static str),
    #[error("Content-Encoding `{0}` is not supported (deflate and gzip are)")]
    /// UnsupportedEncoding.
    UnsupportedEncoding(String),
    /// The action broke. The cause goes to the log, never to the caller.
    #[error("the action failed")]
    ActionFailed {
        /// The action, when the request names one.
        action_name: String,
        #[source]
        /// Why (logged, never sent).
        cause: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The action ran past its time budget and did not answer for itself.
    #[error("the action ran past its time budget of {budget_ms} ms")]
    TimedOut {
        /// The action.
        action_name: String,
        /// Its budget.
        budget_ms: u128,
    },
    #[error("the server is shutting down")]
    /// The server is stopping.
    Unavailable,
    /// Too much is held at once; nothing was done.
    #[error("{0}")]
    Busy(String),
    /// The body arrived too slowly (below the minimum rate, after the grace); nothing was
    /// done.
    #[error("the request body arrived too slowly")]
    TooSlow,
}

impl ApiError {
    /// A 400, naming the action when known.
    pub fn bad_request(message: impl Into<String>, action_name: Option<String>) -> Self {
        Self::BadRequest {
            message: message.into(),
            action_name,
        }
    }

    /// The action the error is about, when known.
    pub fn action_name(&self) -> Option<&str> {
        match self {
            Self::BadRequest { action_name, .. } => action_name.as_deref(),
            Self::Rejected { action_name, .. }
            | Self::UnknownAction(action_name)
            | Self::DomainMissing(action_name)
            | Self::ActionFailed { action_name, .. }
            | Self::TimedOut { action_name, .. } => Some(action_name),
            _ => None,
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } | Self::Rejected { .. } => StatusCode::BAD_REQUEST,
            Self::UnknownAction(_) | Self::NotFound => StatusCode::NOT_FOUND,
            Self::DomainMissing(_) => StatusCode::from_u16(449).expect("449 is a valid status"),
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            // A body that cannot be read is an invalid request (CONTRACT.md section 0: 400,
            // which Rasa takes as a rejection and reads `action_name` from), not 415.
            Self::UnsupportedEncoding(_) => StatusCode::BAD_REQUEST,
            Self::ActionFailed { .. } | Self::TimedOut { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unavailable | Self::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::TooSlow => StatusCode::REQUEST_TIMEOUT,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        match self {
            Self::MethodNotAllowed(allow) => {
                response.insert_header((header::ALLOW, *allow));
            }
            Self::Unauthorized => {
                response.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
            }
            _ => {}
        }
        response.json(json!({"error": self.to_string(), "action_name": self.action_name()}))
    }
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn a_json_error_says_where_and_never_repeats_the_value() {
        let e = serde_json::from_str::<bool>(r#""my card is 4111 \" 1111""#).unwrap_err();
        let text = describe(&e);
        assert!(
            e.to_string().contains("4111"),
            "serde's own message does: {e}"
        );
        assert!(!text.contains("4111") && text.contains("line 1"), "{text}");
        let long = format!("{{\"{}\": 1}}", "k".repeat(10_000));
        let e = serde_json::from_str::<std::collections::HashMap<String, bool>>(&long).unwrap_err();
        assert!(describe(&e).chars().count() <= 201, "{}", describe(&e));
    }
}
