//! Step 15: the [`ConfirmedChange`] (only the guard makes one; it is the only
//! implementation of the command's seal) and its sending, with the outcomes it records.

use super::checks::{current_terms, Confirmation};
use super::outcome::{Outcome, Reason, Status, Terms};
use crate::store::{OpState, Operation, Store, StoreError};
use crate::subscriptions::provider::{self, ConfirmedCommand};
use crate::subscriptions::{CommandOutcome, Provider};

/// A change the guard approved and whose request key this call claimed. Only the guard
/// makes one; sending consumes it. The type can be named anywhere:
///
/// ```
/// use actiongate::subscriptions::provider::ConfirmedCommand;
/// fn inspect(change: &actiongate::consent::ConfirmedChange) -> &str {
///     change.request_key()
/// }
/// ```
///
/// but nothing outside the guard can build one (its fields are private and it has no
/// constructor), so nothing else can reach the command:
///
/// ```compile_fail,E0451
/// use actiongate::consent::{Confirmation, ConfirmedChange, Terms};
/// fn forge(confirmation: Confirmation, current: Terms) -> ConfirmedChange {
///     ConfirmedChange { confirmation, current }
/// }
/// ```
#[derive(Debug)]
pub struct ConfirmedChange {
    pub(super) confirmation: Confirmation,
    pub(super) current: Terms,
}

impl provider::sealed::Sealed for ConfirmedChange {}

impl ConfirmedCommand for ConfirmedChange {
    fn subscription(&self) -> &str {
        &self.confirmation.tag.subscription
    }

    fn change_type(&self) -> &str {
        &self.confirmation.tag.change_type
    }

    fn revision(&self) -> i64 {
        self.confirmation.tag.revision
    }

    fn request_key(&self) -> &str {
        &self.confirmation.request_key
    }
}

impl ConfirmedChange {
    /// Step 15: the command, with `If-Match` and `Idempotency-Key`; the outcome recorded.
    pub(super) async fn send(
        self,
        provider: &dyn Provider,
        store: &Store,
    ) -> Result<Outcome, StoreError> {
        let c = &self.confirmation;
        let key = &c.request_key;
        if !store.mark_sent(key).await? {
            // The claim was taken back meanwhile: nothing may be sent under it.
            tracing::warn!(request_key = %key, "the claim was taken back before sending; nothing sent");
            return Ok(Outcome::blocked(Reason::ServiceUnavailable));
        }
        let result = provider.send_change(&self).await;
        let (state, outcome) = match result {
            CommandOutcome::Applied { .. } => (OpState::Applied, applied(&self.current)),
            CommandOutcome::Stale(record) => {
                let outcome = Outcome::blocked(Reason::StaleAtService)
                    .with_current(current_terms(&record, &c.tag.change_type))
                    .with_why(record.why_since(c.tag.revision));
                (OpState::Failed, outcome)
            }
            CommandOutcome::InFlight | CommandOutcome::Unknown(_) => {
                if let CommandOutcome::Unknown(why) = &result {
                    tracing::warn!(request_key = %key, %why, "the command's outcome is unknown");
                }
                (OpState::Unknown, pending())
            }
            CommandOutcome::Voided => (OpState::Failed, not_sent()),
            CommandOutcome::NotSent(why) => {
                tracing::warn!(request_key = %key, %why, "the command could not be sent");
                store.release(key).await?;
                return Ok(Outcome::blocked(Reason::ServiceUnavailable));
            }
            CommandOutcome::Rejected { status, message } => {
                tracing::warn!(request_key = %key, status, %message, "the service refused the command");
                let outcome = Outcome {
                    status: Status::Failed,
                    reason: Some(Reason::ServiceRejected),
                    effects: 0,
                    current: None,
                    why: Some(message),
                };
                (OpState::Failed, outcome)
            }
        };
        if !store.set_state(key, state, Some(&outcome)).await? {
            // A service event resolved it while the answer was awaited: that is the outcome.
            if let Some(op) = store.operation(key).await? {
                return Ok(recorded(&op));
            }
        }
        Ok(outcome)
    }
}

pub(super) fn applied(terms: &Terms) -> Outcome {
    Outcome {
        status: Status::Applied,
        reason: None,
        effects: 1,
        current: Some(terms.clone()),
        why: None,
    }
}

pub(super) fn held_outcome(terms: Terms) -> Outcome {
    Outcome {
        status: Status::Held,
        reason: Some(Reason::ApprovalRequired),
        effects: 0,
        current: Some(terms),
        why: None,
    }
}

pub(super) fn pending() -> Outcome {
    Outcome {
        status: Status::PendingVerification,
        reason: Some(Reason::OutcomeUnknown),
        effects: 0,
        current: None,
        why: None,
    }
}

/// `failed`/`not_sent`: the service never received the command and has fenced its key, so
/// it never will.
pub(super) fn not_sent() -> Outcome {
    Outcome {
        status: Status::Failed,
        reason: Some(Reason::NotSent),
        effects: 0,
        current: None,
        why: Some(
            "The subscription service never received this change, and will not make it; nothing was changed."
                .into(),
        ),
    }
}

pub(super) fn recorded(op: &Operation) -> Outcome {
    op.outcome.clone().unwrap_or_else(pending)
}
