//! The body of `POST /webhook`.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::Tracker;

/// What Rasa sends to run one action. Unknown top-level keys are ignored, as rasa-sdk
/// does; a wrong type in a known key is an error.
#[derive(Debug, Deserialize)]
pub struct WebhookRequest<'a> {
    #[serde(default)]
    pub next_action: Option<String>,
    #[serde(default)]
    pub sender_id: Option<String>,
    #[serde(default, borrow)]
    pub tracker: Option<Tracker<'a>>,
    /// Kept raw: only actions that read the domain pay for parsing it.
    #[serde(default, borrow)]
    pub domain: Option<&'a RawValue>,
    #[serde(default)]
    pub domain_digest: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
}

/// Only the action name, read from a body that failed to parse as a whole, so the error
/// can still name the action (Rasa reads `action_name` from every 400).
#[derive(Deserialize)]
pub struct ActionNameOnly {
    #[serde(default)]
    pub next_action: Option<Value>,
}

impl ActionNameOnly {
    pub fn read(body: &[u8]) -> Option<String> {
        let v: ActionNameOnly = serde_json::from_slice(body).ok()?;
        v.next_action?.as_str().map(str::to_owned)
    }
}
