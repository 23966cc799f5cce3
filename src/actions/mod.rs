//! The subscription actions, one file each, and what they share. The action-server parts
//! (the [`Action`] trait, the registry, the dispatcher) come from the `actionserver` crate.

pub use actionserver::{
    Action, ActionCall, ActionError, ActionResult, Dispatcher, DuplicateAction, Registry,
};

use actionserver::{Message, OutEvent, Tracker};

pub mod apply;
pub mod list;
pub mod select;
pub mod status;
pub mod withdraw;

use crate::consent::{Guard, Outcome, Terms};
use crate::store::{now_ms, AuditEntry};

/// Appends a decision to the audit trail (the guard's store).
async fn audit(
    guard: &Guard,
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
        service_terms: terms.or(outcome.current.as_ref()).map(Terms::to_string),
        status: outcome.status.as_str().to_owned(),
        reason: outcome.reason.map(|r| r.as_str().to_owned()),
        ..AuditEntry::default()
    };
    guard
        .store()
        .audit(entry)
        .await
        .map_err(ActionError::failed)
}

/// The outcome as slots, and as a response carrying the outcome as its `custom` payload
/// and its fields as template variables.
pub fn outcome_events(outcome: &Outcome, dispatcher: &mut Dispatcher) -> Vec<OutEvent> {
    if let Some(response) = outcome.response() {
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

/// The five subscription actions, in the order `GET /actions` lists them, sharing one
/// guard (and through it the service client, the store and the consent settings).
pub fn subscription_actions(guard: Guard) -> Registry {
    let mut registry = Registry::default();
    (|| -> Result<(), DuplicateAction> {
        registry
            .register(list::ListSubscriptions(guard.clone()))?
            .register(select::SelectSubscriptionChange(guard.clone()))?
            .register(apply::ApplySubscriptionChange(guard.clone()))?
            .register(status::CheckSubscriptionChange(guard.clone()))?
            .register(withdraw::WithdrawSubscriptionChange(guard))?;
        Ok(())
    })()
    .expect("the five actions have five names");
    registry
}
