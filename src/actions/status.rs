//! `check_subscription_change`: resolves an outcome left unknown (the command was sent
//! and no answer came) by asking the service about the same request key, and reports a
//! held change's state or its decision. Never sends a command.

use super::{audit, outcome_events, Action, ActionCall, ActionError, ActionResult, Dispatcher};
use crate::consent::identity::account;
use crate::consent::Guard;
use crate::consent::{Outcome, Reason};

pub struct CheckSubscriptionChange(pub Guard);

impl Action for CheckSubscriptionChange {
    fn name(&self) -> &'static str {
        "check_subscription_change"
    }

    async fn run(&self, call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
        let guard = &self.0;
        let tracker = call.tracker;
        let account = account(tracker, &guard.config().identity)
            .map_err(|e| ActionError::rejected(e.to_string()))?;
        let outcome = match account.clone() {
            None => Outcome::denied(),
            Some(account) => {
                let store = guard.store();
                let op = store
                    .latest_for_sender(&tracker.sender_id)
                    .await
                    .map_err(ActionError::failed)?
                    .filter(|op| op.account == account);
                let held = store
                    .latest_approval_for_sender(&tracker.sender_id)
                    .await
                    .map_err(ActionError::failed)?
                    .filter(|a| a.account == account);
                match (op, held) {
                    // A held change newer than any operation (or its own, once approved):
                    // its state, or its decision's outcome.
                    (op, Some(held))
                        if op.as_ref().is_none_or(|op| {
                            op.request_key == held.request_key || op.created_at < held.created_at
                        }) =>
                    {
                        guard
                            .approval_outcome(&held)
                            .await
                            .map_err(ActionError::failed)?
                    }
                    (Some(op), _) => guard.reconcile(&op).await.map_err(ActionError::failed)?,
                    (None, _) => Outcome::blocked(Reason::NotSelected),
                }
            }
        };
        audit(
            &self.0,
            "check_subscription_change",
            tracker,
            account,
            &outcome,
            None,
        )
        .await?;
        Ok(outcome_events(&outcome, dispatcher))
    }
}
