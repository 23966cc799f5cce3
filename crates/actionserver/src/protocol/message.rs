//! The answer of a successful webhook call: events and messages, each message with the
//! eight keys rasa-sdk always sends.

use serde::Serialize;
use serde_json::{Map, Value};

use super::OutEvent;

/// One message for Rasa to send, as `dispatcher.utter_message` builds it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Message {
    pub text: Option<String>,
    pub buttons: Vec<Value>,
    pub elements: Vec<Value>,
    pub custom: Value,
    pub template: Option<String>,
    pub response: Option<String>,
    pub image: Option<String>,
    pub attachment: Option<Value>,
    /// Template variables and other keyword arguments, merged at the top level.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Default for Message {
    fn default() -> Self {
        Self {
            text: None,
            buttons: Vec::new(),
            elements: Vec::new(),
            custom: Value::Object(Map::new()),
            template: None,
            response: None,
            image: None,
            attachment: None,
            extra: Map::new(),
        }
    }
}

impl Message {
    /// A plain text message.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// A domain response for Rasa to render; sets `template` too, as rasa-sdk does.
    pub fn response(name: impl Into<String>) -> Self {
        let name = name.into();
        Self {
            template: Some(name.clone()),
            response: Some(name),
            ..Self::default()
        }
    }

    /// Sets the `custom` payload.
    pub fn with_custom(mut self, custom: Value) -> Self {
        self.custom = custom;
        self
    }

    /// Adds a template variable.
    pub fn with_var(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }
}

/// `{"events": [...], "responses": [...]}`: both keys always present.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ActionResponse {
    pub events: Vec<OutEvent>,
    pub responses: Vec<Message>,
}
