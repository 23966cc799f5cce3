//! Step 15: the [`ConfirmedChange`] (only the guard makes one; it is the only
//! implementation of the command's seal) and its sending, its ending handed to the
//! operation's [`Lifecycle`].

use super::checks::{current_terms, Confirmation};
use super::lifecycle::{not_sent, Ending, Lifecycle};
use super::outcome::{Outcome, Reason, Status, Terms};
use crate::store::{now_ms, AuditEntry, Store, StoreError};
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
    /// The operation is already sent (claimed, its budget spent and marked in one step).
    pub(super) async fn send(
        self,
        provider: &dyn Provider,
        store: &Store,
    ) -> Result<Outcome, StoreError> {
        let life = Lifecycle::of(store);
        let c = &self.confirmation;
        let key = &c.request_key;
        let ending = match provider.send_change(&self).await {
            CommandOutcome::Applied {
                contradiction: None,
                ..
            } => Ending::Applied,
            CommandOutcome::Applied {
                contradiction: Some(why),
                ..
            } => {
                escalate_raced(
                    store,
                    Raced {
                        account: &c.account,
                        subscription: &c.tag.subscription,
                        change_type: &c.tag.change_type,
                        terms: c.terms.to_string(),
                        request_key: &c.request_key,
                    },
                    &why,
                )
                .await?;
                Ending::Applied
            }
            CommandOutcome::Stale(Some(record)) => Ending::Failed(
                Outcome::blocked(Reason::StaleAtService)
                    .with_current(current_terms(
                        &record,
                        &c.tag.change_type,
                        c.revision_format,
                    ))
                    .with_why(record.why_since_as(c.tag.revision, c.revision_format)),
            ),
            // Refused as stale, the record as it is now not read: its terms unknown.
            CommandOutcome::Stale(None) => Ending::Failed(Outcome::blocked(Reason::StaleAtService)),
            CommandOutcome::InFlight => Ending::Unknown,
            CommandOutcome::Unknown(why) => {
                tracing::warn!(request_key = %key, %why, "the command's outcome is unknown");
                Ending::Unknown
            }
            CommandOutcome::Voided => Ending::Failed(not_sent()),
            CommandOutcome::NotSent(why) => {
                tracing::warn!(request_key = %key, %why, "the command could not be sent");
                if life.never_sent(key).await? {
                    return Ok(Outcome::blocked(Reason::ServiceUnavailable));
                }
                // Taken over by the reconciler while this send took its time: another
                // send of it may have been made, so its outcome is not known here.
                Ending::Unknown
            }
            CommandOutcome::Rejected { status, message } => {
                tracing::warn!(request_key = %key, status, %message, "the service refused the command");
                // The terms step 11 read are still the newest known: the refusal moved nothing.
                Ending::Failed(Outcome {
                    status: Status::Failed,
                    reason: Some(Reason::ServiceRejected),
                    effects: 0,
                    current: Some(self.current.clone()),
                    why: Some(message),
                })
            }
        };
        life.sender_end(key, &self.current, ending).await
    }
}

/// The change a raced write made, as the audit names it.
pub(super) struct Raced<'a> {
    pub account: &'a str,
    pub subscription: &'a str,
    pub change_type: &'a str,
    /// The terms the customer confirmed.
    pub terms: String,
    pub request_key: &'a str,
}

/// A write that raced another writer (section 8): the change stands, and a person is told
/// through the audit trail (a `mismatch`, as a contradictory service event is) and the log.
pub(super) async fn escalate_raced(
    store: &Store,
    raced: Raced<'_>,
    why: &str,
) -> Result<(), StoreError> {
    tracing::warn!(
        request_key = %raced.request_key,
        subscription = %raced.subscription,
        %why,
        "the change was made, but the record shows another writer's change too; a person must look at it"
    );
    store
        .audit(AuditEntry {
            at: now_ms(),
            action: "provider_write".into(),
            sender_id: "-".into(),
            account: Some(raced.account.to_owned()),
            target: Some(format!("{} {}", raced.subscription, raced.change_type)),
            question_terms: Some(raced.terms),
            status: "mismatch".into(),
            reason: Some(why.to_owned()),
            request_key: Some(raced.request_key.to_owned()),
            ..AuditEntry::default()
        })
        .await
}
