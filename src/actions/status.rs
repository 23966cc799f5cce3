//! `check_subscription_change`: resolves an outcome left unknown (the command was sent
//! and no answer came) by asking the service about the same request key, reports a
//! question still waiting for its yes or no, and a held change's state or its decision.
//! Never sends a command.

use super::{audit, outcome_events, Action, ActionCall, ActionError, ActionResult, Dispatcher};
use crate::consent::identity::account;
use crate::consent::{check_conversation, ApplyInputs, Guard, Outcome, Reason, Status, Terms};
use crate::store::OpState;
use actionserver::OutEvent;

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
            None => Outcome::not_authenticated(),
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
                let waiting = awaiting_reply(&call, guard)?;
                match (op, held) {
                    // An unknown outcome first: no other change may be made before it is
                    // resolved, and the customer must hear where it stands.
                    (Some(op), _) if op.state == OpState::Unknown => {
                        guard.reconcile(&op).await.map_err(ActionError::failed)?
                    }
                    _ if waiting.is_some() => Outcome {
                        status: Status::Selected,
                        reason: Some(Reason::AwaitingReply),
                        effects: 0,
                        current: waiting,
                        why: None,
                    },
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
        let mut events = outcome_events(&outcome, dispatcher);
        if outcome.reason == Some(Reason::AwaitingReply) {
            // The question again, as the next action, so the customer's next yes or no
            // answers it: Rasa renders it from the change memory, which this action leaves
            // as select wrote it, and the assistant's rules see the question's own step.
            events.push(OutEvent::followup(guard.config().confirm_response.clone()));
        }
        Ok(events)
    }
}

/// The terms of the latest question when it carries the change in memory and has no yes or
/// no yet (CONTRACT.md section 4: `selected`/`awaiting_reply`): nothing can have been sent
/// for it, so the assistant can only ask it again.
fn awaiting_reply(call: &ActionCall<'_>, guard: &Guard) -> Result<Option<Terms>, ActionError> {
    let inputs = ApplyInputs::from_tracker(call.tracker, None, guard.config())
        .map_err(|e| ActionError::rejected(e.to_string()))?;
    Ok(match check_conversation(&inputs, guard.config()) {
        Err(refused)
            if matches!(
                refused.reason,
                Some(Reason::NotAnswered | Reason::NotConfirmed)
            ) =>
        {
            let memory = &inputs.memory;
            Some(Terms {
                tag: memory.tag.clone().unwrap_or_default(),
                label: memory.label.clone().unwrap_or_default(),
                effective: memory.effective.clone().unwrap_or_default(),
                entitlements: memory.entitlements.clone().unwrap_or_default(),
            })
        }
        _ => None,
    })
}
