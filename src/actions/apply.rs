//! `apply_subscription_change`: the one irreversible action. Resolve the inputs, guard,
//! act, return the outcome; the guard is the only way to the command.

use super::{outcome_events, Action, ActionCall, ActionError, ActionResult, Dispatcher};
use crate::consent::ApplyInputs;
use crate::consent::Guard;

pub struct ApplySubscriptionChange(pub Guard);

impl Action for ApplySubscriptionChange {
    fn name(&self) -> &'static str {
        "apply_subscription_change"
    }

    /// The question is held to the confirmation response's text (CONTRACT.md section 3),
    /// which the domain carries.
    fn reads_domain(&self) -> bool {
        true
    }

    async fn run(&self, call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
        let guard = &self.0;
        let inputs = ApplyInputs::from_tracker(call.tracker, call.domain, guard.config())
            .map_err(|e| ActionError::rejected(e.to_string()))?;
        let outcome = guard.apply(&inputs).await.map_err(ActionError::failed)?;
        Ok(outcome_events(&outcome, dispatcher))
    }
}
