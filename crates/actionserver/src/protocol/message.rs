//! The answer of a successful webhook call: events and messages, each message with the
//! eight keys rasa-sdk always sends.

use serde::Serialize;
use serde_json::{Map, Value};

use super::OutEvent;

/// One message for Rasa to send, as `dispatcher.utter_message` builds it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Message {
    /// The text to send.
    pub text: Option<String>,
    /// Buttons under the text (see [`Button`]).
    pub buttons: Vec<Value>,
    /// Carousel elements.
    pub elements: Vec<Value>,
    /// A custom payload (`json_message`), `{}` when none.
    pub custom: Value,
    /// The response's name again (what rasa-sdk sends beside `response`).
    pub template: Option<String>,
    /// A domain response for Rasa to render.
    pub response: Option<String>,
    /// An image URL.
    pub image: Option<String>,
    /// An attachment.
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

    /// An image, by URL (`utter_message(image=...)`).
    pub fn image(url: impl Into<String>) -> Self {
        Self::default().with_image(url)
    }

    /// A custom JSON payload for the channel to interpret (`utter_message(json_message=...)`).
    pub fn custom(custom: Value) -> Self {
        Self::default().with_custom(custom)
    }

    /// Sets the `custom` payload.
    pub fn with_custom(mut self, custom: Value) -> Self {
        self.custom = custom;
        self
    }

    /// Adds a template variable (or any other keyword rasa-sdk would merge in).
    pub fn with_var(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }

    /// Sets the text (say, above buttons or an image).
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// Adds a button.
    pub fn with_button(mut self, button: Button) -> Self {
        self.buttons.push(button.into_value());
        self
    }

    /// Adds buttons.
    pub fn with_buttons(mut self, buttons: impl IntoIterator<Item = Button>) -> Self {
        self.buttons
            .extend(buttons.into_iter().map(Button::into_value));
        self
    }

    /// Quick replies: Rasa hands `quick_replies` to the channel's `send_quick_replies`
    /// (channels without them show the text alone).
    pub fn with_quick_replies(mut self, replies: impl IntoIterator<Item = Button>) -> Self {
        let replies: Vec<Value> = replies.into_iter().map(Button::into_value).collect();
        self.extra
            .insert("quick_replies".to_owned(), Value::Array(replies));
        self
    }

    /// Sets the image URL.
    pub fn with_image(mut self, url: impl Into<String>) -> Self {
        self.image = Some(url.into());
        self
    }

    /// Sets the attachment (a URL or whatever the channel takes).
    pub fn with_attachment(mut self, attachment: impl Into<Value>) -> Self {
        self.attachment = Some(attachment.into());
        self
    }

    /// Adds a carousel element (a card, as the channel defines it).
    pub fn with_element(mut self, element: Value) -> Self {
        self.elements.push(element);
        self
    }
}

/// A button (or quick reply): what it shows, and the payload Rasa receives when it is
/// pressed (`/intent{"entity": "value"}` or text).
#[derive(Debug, Clone, PartialEq)]
pub struct Button {
    title: String,
    payload: String,
    extra: Map<String, Value>,
}

impl Button {
    /// A button showing `title` that sends `payload`.
    pub fn new(title: impl Into<String>, payload: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            payload: payload.into(),
            extra: Map::new(),
        }
    }

    /// A button that sends the intent (and entities): `/intent{"entity": "value"}`.
    pub fn intent(title: impl Into<String>, intent: &str, entities: &Map<String, Value>) -> Self {
        let payload = if entities.is_empty() {
            format!("/{intent}")
        } else {
            format!("/{intent}{}", Value::Object(entities.clone()))
        };
        Self::new(title, payload)
    }

    /// Adds a key some channels read (`type`, `url`, ...).
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }

    fn into_value(self) -> Value {
        let mut map = Map::new();
        map.insert("title".to_owned(), Value::String(self.title));
        map.insert("payload".to_owned(), Value::String(self.payload));
        map.extend(self.extra);
        Value::Object(map)
    }
}

/// `{"events": [...], "responses": [...]}`: both keys always present.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ActionResponse {
    /// The events for the tracker.
    pub events: Vec<OutEvent>,
    /// The messages for the customer.
    pub responses: Vec<Message>,
}
