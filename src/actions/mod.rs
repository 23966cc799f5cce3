//! Actions: the [`Action`] trait, the registry the webhook looks names up in, and one
//! file per action.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::protocol::{Message, OutEvent, Tracker};

pub mod apply;
pub mod check;
pub mod list;
pub mod select;

/// What an action is given: a read-only view of the conversation and, for actions that
/// read it, the domain.
pub struct ActionCall<'a> {
    pub tracker: &'a Tracker<'a>,
    pub domain: Option<&'a Value>,
    /// Rasa's version, as it reported it.
    pub version: Option<&'a str>,
}

/// Collects the messages an action sends, like rasa-sdk's `CollectingDispatcher`.
#[derive(Debug, Default)]
pub struct Dispatcher {
    messages: Vec<Message>,
}

impl Dispatcher {
    pub fn utter(&mut self, message: Message) {
        self.messages.push(message);
    }

    pub fn into_messages(self) -> Vec<Message> {
        self.messages
    }
}

/// Why an action did not produce events.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// The action refuses to run on this request (HTTP 400, Rasa treats it as a
    /// rejection).
    #[error("{message}")]
    Rejected { message: String },
    /// Something broke (HTTP 500); the cause is logged, never sent to the caller.
    #[error("the action failed")]
    Failed(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl ActionError {
    pub fn rejected(message: impl Into<String>) -> Self {
        Self::Rejected {
            message: message.into(),
        }
    }

    pub fn failed(cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Failed(Box::new(cause))
    }
}

/// A custom action, registered under its name.
pub trait Action: Send + Sync + 'static {
    /// The name Rasa calls it by (`next_action`).
    fn name(&self) -> &'static str;

    /// Whether the action reads the domain. Only such actions take part in the
    /// domain-digest exchange (HTTP 449); the others run without a domain.
    fn reads_domain(&self) -> bool {
        false
    }

    /// Runs the action: messages go to the dispatcher, events are returned.
    fn run<'a>(
        &'a self,
        call: ActionCall<'a>,
        dispatcher: &'a mut Dispatcher,
    ) -> BoxFuture<'a, Result<Vec<OutEvent>, ActionError>>;
}

/// Two actions registered under one name.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("an action named `{0}` is registered already")]
pub struct DuplicateAction(pub &'static str);

/// The actions the server serves, in registration order.
#[derive(Default, Clone)]
pub struct Registry {
    order: Vec<&'static str>,
    by_name: HashMap<&'static str, Arc<dyn Action>>,
}

impl Registry {
    /// Registers an action. A second action of the same name is an error, never a silent
    /// replacement (rasa-sdk lets a later class win; here that would let anything take the
    /// guarded action's place).
    pub fn register(&mut self, action: impl Action) -> Result<&mut Self, DuplicateAction> {
        let name = action.name();
        if self.by_name.contains_key(name) {
            return Err(DuplicateAction(name));
        }
        self.by_name.insert(name, Arc::new(action));
        self.order.push(name);
        Ok(self)
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Action>> {
        self.by_name.get(name)
    }

    /// The names, in registration order (what `GET /actions` lists).
    pub fn names(&self) -> &[&'static str] {
        &self.order
    }
}

use crate::consent::{Guard, Outcome, Terms};
use crate::store::{now_ms, AuditEntry};

/// What the subscription actions share: the guard, and through it the service client,
/// the store and the consent settings.
#[derive(Clone)]
pub struct Subscriptions {
    pub guard: Guard,
}

impl Subscriptions {
    /// Appends a decision to the audit trail.
    async fn audit(
        &self,
        action: &str,
        tracker: &Tracker<'_>,
        account: Option<String>,
        outcome: &Outcome,
        terms: Option<&Terms>,
    ) -> Result<(), ActionError> {
        let target = match (
            tracker.slots.get_str("subscription"),
            tracker.slots.get_str("change_type"),
        ) {
            (None, None) => None,
            (s, c) => Some(format!("{} {}", s.unwrap_or("?"), c.unwrap_or("?"))),
        };
        let entry = AuditEntry {
            at: now_ms(),
            action: action.to_owned(),
            sender_id: tracker.sender_id.clone(),
            account,
            target,
            question_terms: None,
            service_terms: terms
                .or(outcome.current.as_ref())
                .map(|t| serde_json::to_string(t).expect("terms serialise")),
            status: outcome.status.as_str().to_owned(),
            reason: outcome.reason.map(|r| r.as_str().to_owned()),
            ..AuditEntry::default()
        };
        self.guard
            .store()
            .audit(&entry)
            .await
            .map_err(ActionError::failed)
    }
}

/// The outcome as slots, and as a response carrying the outcome as its `custom` payload
/// and its fields as template variables.
pub fn outcome_events(outcome: &Outcome, dispatcher: &mut Dispatcher) -> Vec<OutEvent> {
    if let Some(response) = outcome.status.response() {
        let current = outcome.current.as_ref();
        let field = |f: fn(&Terms) -> &String| current.map(f).cloned().unwrap_or_default();
        dispatcher.utter(
            Message::response(response)
                .with_custom(serde_json::to_value(outcome).expect("an outcome serialises"))
                .with_var("status", outcome.status.as_str())
                .with_var("reason", outcome.reason.map_or("", |r| r.as_str()))
                .with_var("why", outcome.why.clone().unwrap_or_default())
                .with_var("explanation", outcome.explanation())
                .with_var("current_tag", field(|t| &t.tag))
                .with_var("current_label", field(|t| &t.label))
                .with_var("current_effective", field(|t| &t.effective))
                .with_var("current_entitlements", field(|t| &t.entitlements)),
        );
    }
    vec![
        OutEvent::slot("change_status", outcome.status.as_str()),
        OutEvent::slot("change_reason", outcome.reason.map(|r| r.as_str())),
    ]
}

/// The four subscription actions, in the order `GET /actions` lists them.
pub fn subscription_actions(subscriptions: Subscriptions) -> Registry {
    let mut registry = Registry::default();
    (|| -> Result<(), DuplicateAction> {
        registry
            .register(list::ListSubscriptions(subscriptions.clone()))?
            .register(select::SelectSubscriptionChange(subscriptions.clone()))?
            .register(apply::ApplySubscriptionChange(subscriptions.clone()))?
            .register(check::CheckSubscriptionChange(subscriptions))?;
        Ok(())
    })()
    .expect("the four actions have four names");
    registry
}
