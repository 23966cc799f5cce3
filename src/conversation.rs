//! What the conversation says, read from the applied events of the current session:
//! the latest confirmation question, whether the customer answered it, and what
//! `select_subscription_change` wrote into memory. Pure functions over events.

use std::collections::HashMap;

use serde_json::Value;

use crate::protocol::{Event, EventKind, RawEvent};

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
    /// The customer's own messages (not `/intent` commands), in order.
    pub customer_messages: Vec<String>,
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
    /// The n-th run of the select action.
    Select(usize),
    Other,
}

/// Reads the conversation from the session's applied events.
///
/// `confirm_response` names the confirmation response (`utter_confirm_subscription_change`)
/// and `select_action` the action whose slot events count as change memory.
pub fn read(
    events: &[&RawEvent],
    confirm_response: &str,
    select_action: &str,
) -> Result<Conversation, MalformedEvent> {
    let mut conversation = Conversation::default();
    let mut current_action: Option<String> = None;
    let mut select_runs = 0usize;
    let mut memory: HashMap<&'static str, (Value, Setter)> = HashMap::new();
    for (position, event) in events.iter().enumerate() {
        let typed = || {
            event.typed().map_err(|source| MalformedEvent {
                position,
                kind: event.name().to_owned(),
                source,
            })
        };
        match event.kind() {
            EventKind::User => {
                current_action = None;
                let Event::User(user) = typed()? else { continue };
                let text = user.text.unwrap_or_default();
                if text.starts_with('/') {
                    continue;
                }
                conversation.customer_messages.push(text.clone());
                if conversation.question.is_some() {
                    conversation.answer = Some(Answer {
                        text,
                        timestamp: user.timestamp,
                        message_id: user.message_id,
                    });
                }
            }
            EventKind::Bot => {
                let Event::Bot(bot) = typed()? else { continue };
                if bot.utter_action() == Some(confirm_response) {
                    conversation.question = Some(Question {
                        text: bot.text.unwrap_or_default(),
                        timestamp: bot.timestamp,
                        position,
                    });
                    conversation.answer = None;
                }
            }
            EventKind::Action => {
                let Event::Action(action) = typed()? else { continue };
                if action.name.as_deref() == Some(select_action) {
                    select_runs += 1;
                }
                current_action = action.name;
            }
            EventKind::Slot => {
                let Event::Slot(slot) = typed()? else { continue };
                if let Some(field) = CHANGE_MEMORY.iter().find(|f| **f == slot.name) {
                    let setter = if current_action.as_deref() == Some(select_action) {
                        Setter::Select(select_runs)
                    } else {
                        Setter::Other
                    };
                    memory.insert(field, (slot.value, setter));
                }
            }
            _ => {}
        }
    }
    let latest = Setter::Select(select_runs);
    if select_runs > 0
        && CHANGE_MEMORY
            .iter()
            .all(|f| memory.get(f).is_some_and(|(_, setter)| *setter == latest))
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
