//! What the guard reads from a call, once: the change memory as the slots hold it, the
//! response template the question was rendered from, and the conversation read from the
//! tracker ([`ApplyInputs::from_tracker`]).

use std::collections::HashMap;

use serde_json::Value;

use super::question;
use super::{ConsentConfig, QuestionCheck};
use crate::conversation::{self, change_memory, Conversation, Question, Reading};
use actionserver::{EventKind, Tracker};

/// The change memory as the tracker's slots hold it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Memory {
    pub subscription: Option<String>,
    pub label: Option<String>,
    pub effective: Option<String>,
    pub entitlements: Option<String>,
    pub tag: Option<String>,
}

impl Memory {
    /// Each field with the name of the slot it was read from.
    pub(super) fn slots(&self) -> [(&'static str, &Option<String>); 5] {
        [
            (change_memory::SUBSCRIPTION, &self.subscription),
            (change_memory::LABEL, &self.label),
            (change_memory::EFFECTIVE, &self.effective),
            (change_memory::ENTITLEMENTS, &self.entitlements),
            (change_memory::TAG, &self.tag),
        ]
    }
}

/// The confirmation response as the customer could have read it: its text variations
/// (from the domain) and the slots' values when the question was sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Template {
    pub variations: Vec<String>,
    pub values: HashMap<String, Value>,
}

/// Everything `apply_subscription_change` decides on, read from the tracker once.
#[derive(Debug, Clone)]
pub struct ApplyInputs {
    pub sender_id: String,
    /// The authenticated account; `None` also when the identity was changed after the
    /// session's start.
    pub account: Option<String>,
    /// What the customer asked for (model-settable slots).
    pub requested_subscription: Option<String>,
    pub requested_change_type: Option<String>,
    pub memory: Memory,
    pub conversation: Conversation,
    /// The confirmation response's text, when the domain carries it and the question is
    /// checked against it (`consent.question: template`).
    pub template: Option<Template>,
    /// Whether the confirmation response shows `{change_subscription}` (known when the
    /// domain carries it): then the question must name the subscription as memory does.
    pub shows_subscription: bool,
}

impl ApplyInputs {
    /// The change asked for, as the audit trail names it (`WS-SUB-3304 stop_renewal`).
    pub(super) fn target(&self) -> Option<String> {
        match (&self.requested_subscription, &self.requested_change_type) {
            (None, None) => None,
            (s, c) => Some(format!(
                "{} {}",
                s.as_deref().unwrap_or("?"),
                c.as_deref().unwrap_or("?")
            )),
        }
    }

    /// Reads the inputs; `domain` is the domain Rasa sent (or the cached one), when known.
    pub fn from_tracker(
        tracker: &Tracker<'_>,
        domain: Option<&Value>,
        config: &ConsentConfig,
    ) -> Result<Self, conversation::MalformedEvent> {
        let events = tracker.session_events();
        let reading = Reading {
            confirm_response: &config.confirm_response,
            select_action: &config.select_action,
            signals: &config.signals,
        };
        // The conversation and the slots as asked read the same events: each once.
        let book = conversation::Fieldbook::default();
        let conversation = conversation::read_with(&events, &reading, &book)?;
        let variations = domain.and_then(|d| question::variations(d, &config.confirm_response));
        let shows_subscription = variations.as_ref().is_some_and(|vs| {
            vs.iter()
                .any(|v| question::placeholders(v).contains(&change_memory::SUBSCRIPTION))
        });
        let template = match (&conversation.question, domain, config.question, variations) {
            (Some(asked), Some(domain), QuestionCheck::Template, Some(variations)) => {
                let values =
                    values_when_asked(tracker, domain, &events, asked, &variations, &book)?;
                Some(Template { variations, values })
            }
            _ => None,
        };
        let text = |name: &str| tracker.slots.get_str(name).map(str::to_owned);
        Ok(Self {
            sender_id: tracker.sender_id.clone(),
            account: super::identity::account(tracker, &config.identity)?,
            requested_subscription: text("subscription"),
            requested_change_type: text("change_type"),
            memory: Memory {
                subscription: text(change_memory::SUBSCRIPTION),
                label: text(change_memory::LABEL),
                effective: text(change_memory::EFFECTIVE),
                entitlements: text(change_memory::ENTITLEMENTS),
                tag: text(change_memory::TAG),
            },
            conversation,
            template,
            shows_subscription,
        })
    }
}

/// The values of the slots the variations name, as they were when the question was sent:
/// the latest slot event before it; when the session's start is not in the events (Rasa
/// trimmed the front) and nothing set the slot since, its value now; otherwise the
/// domain's initial value (null unless it says otherwise). A name the domain has no slot
/// for stays missing, as it is to Rasa, which then sends the template unrendered.
fn values_when_asked<'a>(
    tracker: &Tracker<'_>,
    domain: &Value,
    events: &[&actionserver::RawEvent<'a>],
    asked: &Question,
    variations: &[String],
    book: &conversation::Fieldbook<'a>,
) -> Result<HashMap<String, Value>, conversation::MalformedEvent> {
    let mut names: Vec<&str> = variations
        .iter()
        .flat_map(|v| question::placeholders(v))
        .collect();
    names.sort_unstable();
    names.dedup();
    let (mut values, reset) =
        conversation::slots_before_with(events, asked.position, &names, book)?;
    let trimmed = !reset
        && events
            .first()
            .is_none_or(|e| e.kind() != EventKind::SessionStarted);
    for name in names {
        if values.contains_key(name) {
            continue;
        }
        let declared = domain.get("slots").and_then(|s| s.get(name));
        if trimmed && !conversation::set_after_with(events, asked.position, name, book)? {
            if let Some(now) = tracker.slots.get_raw(name) {
                values.insert(name.to_owned(), now.clone());
                continue;
            }
        }
        if let Some(slot) = declared {
            let initial = slot.get("initial_value").cloned().unwrap_or(Value::Null);
            values.insert(name.to_owned(), initial);
        }
    }
    Ok(values)
}
