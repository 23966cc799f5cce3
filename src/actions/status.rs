//! `check_subscription_change`: resolves an outcome left unknown (the command was sent
//! and no answer came) by asking the service about the same request key. Never sends a
//! command.

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
                let op = guard
                    .store()
                    .latest_for_sender(&tracker.sender_id)
                    .await
                    .map_err(ActionError::failed)?
                    .filter(|op| op.account == account);
                match op {
                    Some(op) => guard.reconcile(&op).await.map_err(ActionError::failed)?,
                    None => Outcome::blocked(Reason::NotSelected),
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
