//! `select_subscription_change`: asks the service what the requested change would do
//! now, and writes its terms into the change memory. The model says only which
//! subscription and which change; every term comes from the service.

use serde_json::Value;

use super::{audit, outcome_events, Action, ActionCall, ActionError, ActionResult, Dispatcher};
use crate::consent::current_terms;
use crate::consent::identity::account;
use crate::consent::Guard;
use crate::consent::{Outcome, Reason, Status, Terms};
use crate::conversation::change_memory;
use actionserver::OutEvent;

pub struct SelectSubscriptionChange(pub Guard);

impl Action for SelectSubscriptionChange {
    fn name(&self) -> &'static str {
        "select_subscription_change"
    }

    async fn run(&self, call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
        let tracker = call.tracker;
        let account = account(tracker, &self.0.config().identity)
            .map_err(|e| ActionError::rejected(e.to_string()))?;
        let (outcome, terms) = self.select(call, account.as_deref()).await;
        audit(
            &self.0,
            "select_subscription_change",
            tracker,
            account,
            &outcome,
            terms.as_ref().map(|(t, _)| t),
        )
        .await?;
        let mut events = match &terms {
            Some((terms, display)) => vec![
                OutEvent::slot(change_memory::SUBSCRIPTION, display.as_str()),
                OutEvent::slot(change_memory::LABEL, terms.label.as_str()),
                OutEvent::slot(change_memory::EFFECTIVE, terms.effective.as_str()),
                OutEvent::slot(change_memory::ENTITLEMENTS, terms.entitlements.as_str()),
                OutEvent::slot(change_memory::TAG, terms.tag.as_str()),
            ],
            // Nothing selected: clear the memory so no stale tag survives.
            None => change_memory::ALL
                .iter()
                .map(|name| OutEvent::slot(*name, Value::Null))
                .collect(),
        };
        if outcome.status == Status::Selected {
            events.push(OutEvent::slot("change_status", "selected"));
            events.push(OutEvent::slot("change_reason", Value::Null));
        } else {
            events.extend(outcome_events(&outcome, dispatcher));
        }
        Ok(events)
    }
}

impl SelectSubscriptionChange {
    /// The outcome, and on success the terms with the subscription's display name.
    async fn select(
        &self,
        call: ActionCall<'_>,
        account: Option<&str>,
    ) -> (Outcome, Option<(Terms, String)>) {
        let guard = &self.0;
        let tracker = call.tracker;
        let Some(account) = account else {
            return (Outcome::not_authenticated(), None);
        };
        let Some(id) = tracker
            .slots
            .get_str("subscription")
            .filter(|s| !s.is_empty())
        else {
            return (Outcome::blocked(Reason::UnknownSubscription), None);
        };
        let record = match guard.provider().get(id).await {
            Ok(Some(record)) => record,
            Ok(None) => return (Outcome::blocked(Reason::UnknownSubscription), None),
            Err(e) => {
                tracing::warn!(error = %e, "the subscription could not be read");
                return (Outcome::blocked(Reason::ServiceUnavailable), None);
            }
        };
        // Another account's subscription gets the answer a made-up id gets: nothing tells
        // a stranger which ids exist (CONTRACT.md section 4, Selecting).
        if record.account != account {
            return (Outcome::blocked(Reason::UnknownSubscription), None);
        }
        let change_type = tracker.slots.get_str("change_type").unwrap_or("");
        match current_terms(&record, change_type, guard.config().revision_format) {
            Some(terms) => (
                Outcome {
                    status: Status::Selected,
                    reason: None,
                    effects: 0,
                    current: Some(terms.clone()),
                    why: None,
                },
                Some((terms, record.display_name())),
            ),
            None if record.option(change_type).is_some() => {
                tracing::warn!(subscription = %record.id, "the service's effective date is not RFC 3339");
                (Outcome::blocked(Reason::ServiceUnavailable), None)
            }
            None => (Outcome::blocked(Reason::ChangeNotOffered), None),
        }
    }
}
