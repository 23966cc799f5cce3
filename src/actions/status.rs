//! `check_subscription_change`: where the conversation's latest change stands (a question
//! waiting for its yes or no, the confirmation's outcome after the reply, a held change's
//! state or its decision), resolving an outcome left unknown by asking the service about
//! the same request key. Never sends a command.

use super::{audit, outcome_events, Action, ActionCall, ActionError, ActionResult, Dispatcher};
use crate::consent::identity::account;
use crate::consent::{check_conversation, ApplyInputs, Guard, Outcome, Reason, Status, Terms};
use crate::store::OpState;
use crate::subscriptions::model::Tag;
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
            Some(account) => standing(guard, &call, &account).await?,
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
        if matches!(
            outcome.reason,
            Some(Reason::AwaitingReply | Reason::NotConfirmed)
        ) {
            // The question again, as the next action, so the customer's next yes or no
            // answers it (after a reply that is not a yes it must be asked again: CONTRACT.md
            // section 3): Rasa renders it from the change memory, which this action leaves as
            // select wrote it, and the assistant's rules see the question's own step.
            events.push(OutEvent::followup(guard.config().confirm_response.clone()));
        }
        Ok(events)
    }
}

/// Where the conversation's latest change stands (CONTRACT.md section 4): after a question
/// with no reply yet, `selected`/`awaiting_reply`; after a reply, the confirmation's
/// outcome (a yes: [`Guard::standing`]; anything else: what apply answers for it); with no
/// question for the change in memory (nothing selected, or its question gone with a
/// restart or an earlier session), the conversation's latest recorded change, held or
/// sent, or `blocked`/`not_selected`. An unknown outcome comes first: no other change of
/// its subscription may be made before it is resolved, and the customer must hear where it
/// stands.
async fn standing(
    guard: &Guard,
    call: &ActionCall<'_>,
    account: &str,
) -> Result<Outcome, ActionError> {
    let tracker = call.tracker;
    let store = guard.store();
    let op = store
        .latest_for_sender(&tracker.sender_id)
        .await
        .map_err(ActionError::failed)?
        .filter(|op| op.account == account);
    if let Some(op) = op.as_ref().filter(|op| op.state == OpState::Unknown) {
        return guard.reconcile(op).await.map_err(ActionError::failed);
    }
    let mut inputs = ApplyInputs::from_tracker(tracker, None, guard.config())
        .map_err(|e| ActionError::rejected(e.to_string()))?;
    // Check names no change of its own: it asks after the one in memory, whatever the
    // requested-target slots hold now (Mantle's tool passes none), so step 4 compares the
    // tag with itself.
    if let Some(tag) = inputs
        .memory
        .tag
        .as_deref()
        .and_then(|t| Tag::parse_as(t, guard.config().revision_format))
    {
        inputs.requested_subscription = Some(tag.subscription);
        inputs.requested_change_type = Some(tag.change_type);
    }
    match check_conversation(&inputs, guard.config()) {
        Ok(confirmation) => guard
            .standing(&confirmation)
            .await
            .map_err(ActionError::failed),
        Err(refused) if refused.reason == Some(Reason::NotAnswered) => {
            let memory = &inputs.memory;
            Ok(Outcome {
                status: Status::Selected,
                reason: Some(Reason::AwaitingReply),
                effects: 0,
                current: Some(Terms {
                    tag: memory.tag.clone().unwrap_or_default(),
                    label: memory.label.clone().unwrap_or_default(),
                    effective: memory.effective.clone().unwrap_or_default(),
                    entitlements: memory.entitlements.clone().unwrap_or_default(),
                }),
                why: None,
            })
        }
        Err(refused) if matches!(refused.reason, Some(Reason::NotSelected | Reason::NotAsked)) => {
            let held = store
                .latest_approval_for_sender(&tracker.sender_id)
                .await
                .map_err(ActionError::failed)?
                .filter(|a| a.account == account);
            match (op, held) {
                // A held change newer than any operation (or its own, once approved): its
                // state, or its decision's outcome.
                (op, Some(held))
                    if op.as_ref().is_none_or(|op| {
                        op.request_key == held.request_key || op.created_at < held.created_at
                    }) =>
                {
                    guard.approval_outcome(&held).await
                }
                (Some(op), _) => guard.reconcile(&op).await,
                (None, _) => Ok(Outcome::blocked(Reason::NotSelected)),
            }
            .map_err(ActionError::failed)
        }
        Err(refused) => Ok(refused),
    }
}
