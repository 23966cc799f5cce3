//! What the conversation says, read from the applied events of the current session:
//! the latest confirmation question, whether the customer answered it, and what
//! `select_subscription_change` wrote into memory. Pure functions over events.

use std::collections::HashMap;

use serde_json::Value;

use std::borrow::Cow;

use serde::Deserialize;

use crate::protocol::{EventKind, RawEvent};

/// The fields of `user`, `bot`, `action` and `slot` events this module reads.
#[derive(Deserialize)]
struct Lite<'a> {
    // Declared so that a duplicate `event` or `timestamp` key is refused, not guessed at.
    #[serde(default, rename = "event")]
    _event: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "timestamp")]
    _timestamp: Option<serde::de::IgnoredAny>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    metadata: Option<LiteMetadata<'a>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    value: Option<Value>,
}

/// The `utter_action` of a bot event's metadata. Read as a map only: a derived struct
/// would also read an array, by position.
struct LiteMetadata<'a> {
    utter_action: Option<Cow<'a, str>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for LiteMetadata<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Fields<'a> {
            type Value = LiteMetadata<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of metadata")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut utter_action = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == "utter_action" {
                        if utter_action.is_some() {
                            return Err(serde::de::Error::duplicate_field("utter_action"));
                        }
                        utter_action = Some(map.next_value::<Option<Cow<'de, str>>>()?);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(LiteMetadata {
                    utter_action: utter_action.flatten(),
                })
            }
        }
        deserializer.deserialize_map(Fields(std::marker::PhantomData))
    }
}

/// The change-memory slots, written only by `select_subscription_change`.
pub const CHANGE_MEMORY: [&str; 5] = [
    "change_subscription",
    "change_label",
    "change_effective",
    "change_entitlements",
    "change_tag",
];

/// The confirmation question as Rasa sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub text: String,
    pub timestamp: Option<f64>,
    /// Position among the session's applied events (part of the request key).
    pub position: usize,
}

/// The customer's latest message after the question.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub text: String,
    pub timestamp: Option<f64>,
    pub message_id: Option<String>,
}

/// Everything the guard needs to know about the conversation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversation {
    /// The latest bot message produced by the confirmation response.
    pub question: Option<Question>,
    /// The latest customer message after that question, if any.
    pub answer: Option<Answer>,
    /// The change memory as the latest `select_subscription_change` wrote it, or `None`
    /// when any change-memory slot was last set by something else.
    pub selected_memory: Option<HashMap<String, Value>>,
}

/// A typed event that could not be read: the request is refused rather than guessed at.
#[derive(Debug, thiserror::Error)]
#[error("event {position} (`{kind}`) is malformed: {source}")]
pub struct MalformedEvent {
    pub position: usize,
    pub kind: String,
    #[source]
    pub source: serde_json::Error,
}

/// Who set a change-memory slot last.
#[derive(Clone, Copy, PartialEq)]
enum Setter {
    /// The latest run of the select action.
    Select,
    Other,
}

/// Reads the conversation from the session's applied events.
///
/// `confirm_response` names the confirmation response (`utter_confirm_subscription_change`)
/// and `select_action` the action whose slot events count as change memory.
///
/// It reads from the end and stops once it has found both the latest question and the
/// latest run of the select action, so in a long conversation only the last few events
/// are parsed (and only the fields it needs).
pub fn read(
    events: &[&RawEvent<'_>],
    confirm_response: &str,
    select_action: &str,
) -> Result<Conversation, MalformedEvent> {
    let mut conversation = Conversation::default();
    // The latest customer message seen so far (from the end): the answer, if it turns out
    // to follow the question.
    let mut latest_message: Option<(usize, Answer)> = None;
    let mut select_found = false;
    // The latest setter of each change-memory field, and the slot events not yet assigned
    // to the action (or user message) they follow.
    let mut memory: HashMap<&'static str, (Value, Setter)> = HashMap::new();
    let mut unassigned: Vec<(&'static str, Value)> = Vec::new();
    for (position, event) in events.iter().enumerate().rev() {
        if conversation.question.is_some() && select_found {
            break;
        }
        let lite = || -> Result<Lite, MalformedEvent> {
            serde_json::from_str(event.raw().get()).map_err(|source| MalformedEvent {
                position,
                kind: event.name().to_owned(),
                source,
            })
        };
        match event.kind() {
            EventKind::User => {
                // Slot events right after a user message were set from it, not by select.
                assign(&mut memory, &mut unassigned, Setter::Other);
                if conversation.question.is_none() && latest_message.is_none() {
                    let user = lite()?;
                    let text = user.text.unwrap_or_default();
                    if !text.starts_with('/') {
                        let answer = Answer {
                            text: text.into_owned(),
                            timestamp: event.timestamp(),
                            message_id: user.message_id.map(Cow::into_owned),
                        };
                        latest_message = Some((position, answer));
                    }
                }
            }
            EventKind::Bot if conversation.question.is_none() => {
                let bot = lite()?;
                if bot.metadata.and_then(|m| m.utter_action).as_deref() == Some(confirm_response) {
                    conversation.question = Some(Question {
                        text: bot.text.unwrap_or_default().into_owned(),
                        timestamp: event.timestamp(),
                        position,
                    });
                }
            }
            EventKind::Action if !select_found => {
                let action = lite()?;
                if action.name.as_deref() == Some(select_action) {
                    assign(&mut memory, &mut unassigned, Setter::Select);
                    select_found = true;
                } else {
                    assign(&mut memory, &mut unassigned, Setter::Other);
                }
            }
            EventKind::Slot if !select_found => {
                let slot = lite()?;
                let name = slot.name.unwrap_or_default();
                if let Some(field) = CHANGE_MEMORY.iter().find(|f| **f == name) {
                    unassigned.push((field, slot.value.unwrap_or(Value::Null)));
                }
            }
            _ => {}
        }
    }
    if let (Some(question), Some((at, answer))) = (&conversation.question, latest_message) {
        if at > question.position {
            conversation.answer = Some(answer);
        }
    }
    if select_found
        && CHANGE_MEMORY.iter().all(|f| {
            memory
                .get(f)
                .is_some_and(|(_, setter)| *setter == Setter::Select)
        })
    {
        conversation.selected_memory = Some(
            memory
                .into_iter()
                .map(|(k, (v, _))| (k.to_owned(), v))
                .collect(),
        );
    }
    Ok(conversation)
}

/// Gives the slot events seen since the last boundary to their setter. Scanning from the
/// end, the first value seen for a field is its latest, so an existing entry is kept.
fn assign(
    memory: &mut HashMap<&'static str, (Value, Setter)>,
    unassigned: &mut Vec<(&'static str, Value)>,
    setter: Setter,
) {
    for (field, value) in unassigned.drain(..) {
        memory.entry(field).or_insert((value, setter));
    }
}

/// The customer's own messages (not `/intent` commands), in order.
pub fn customer_messages(events: &[&RawEvent<'_>]) -> Result<Vec<String>, MalformedEvent> {
    let mut messages = Vec::new();
    for (position, event) in events.iter().enumerate() {
        if event.kind() != EventKind::User {
            continue;
        }
        let user: Lite =
            serde_json::from_str(event.raw().get()).map_err(|source| MalformedEvent {
                position,
                kind: event.name().to_owned(),
                source,
            })?;
        let text = user.text.unwrap_or_default();
        if !text.starts_with('/') {
            messages.push(text.into_owned());
        }
    }
    Ok(messages)
}
