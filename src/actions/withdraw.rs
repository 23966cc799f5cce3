//! `withdraw_subscription_change`: the customer takes back their change while it waits for
//! a person's approval (CONTRACT.md section 7). Ends the hold; never sends a command.

use super::{audit, outcome_events, Action, ActionCall, ActionError, ActionResult, Dispatcher};
use crate::consent::identity::account;
use crate::consent::{Guard, Outcome, Reason};

pub struct WithdrawSubscriptionChange(pub Guard);

impl Action for WithdrawSubscriptionChange {
    fn name(&self) -> &'static str {
        "withdraw_subscription_change"
    }

    async fn run(&self, call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
        let guard = &self.0;
        let tracker = call.tracker;
        let account = account(tracker, &guard.config().identity)
            .map_err(|e| ActionError::rejected(e.to_string()))?;
        let outcome = match account.as_deref() {
            None => Outcome::not_authenticated(),
            Some(account) => {
                // The conversation's change still held; one decided, expired or withdrawn
                // already is not (CONTRACT.md section 7: with no held change, `not_selected`;
                // `check_subscription_change` tells what became of it).
                let held = guard
                    .store()
                    .held_for_sender(&tracker.sender_id)
                    .await
                    .map_err(ActionError::failed)?
                    .filter(|a| a.account == account);
                let withdrawn = match held {
                    Some(held) => guard.withdraw(&held).await.map_err(ActionError::failed)?,
                    None => None,
                };
                // Decided (or expired) the moment before, it is no longer held either.
                withdrawn.unwrap_or_else(|| Outcome::blocked(Reason::NotSelected))
            }
        };
        if outcome.reason != Some(Reason::Withdrawn) {
            audit(
                guard,
                "withdraw_subscription_change",
                tracker,
                account,
                &outcome,
                None,
            )
            .await?;
        }
        Ok(outcome_events(&outcome, dispatcher))
    }
}
