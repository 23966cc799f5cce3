//! Changes a person approves first (CONTRACT.md section 7): a held change's outcome, the
//! approval (steps 11 to 15 again with the terms stored at the hold), the rejection, the
//! withdrawal, expiry, and their audit.

use super::checks::Confirmation;
use super::guard::Guard;
use super::lifecycle::held_outcome;
use super::outcome::{Outcome, Reason};
use crate::conversation::{Given, Meaning, Question, Reply};
use crate::store::{now_ms, Approval, ApprovalState, AuditEntry, OpState, Operation, StoreError};
use crate::subscriptions::model::Tag;

/// What an operator's approval or rejection did.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The held change's outcome now; for an approval given back ([`Decision::held`]), why
    /// it could not be carried out.
    pub outcome: Outcome,
    /// Whether this call decided it (`false`: it was decided already, by another click, another
    /// operator or another replica, or it expired: nothing was done again).
    pub decided: bool,
    /// Whether the change is still held: the approval could not be carried out, and nothing
    /// was sent or claimed (the service could not be read, another change of the
    /// subscription is unresolved), so it was given back to the held changes, to be approved
    /// again, rejected, withdrawn or left to expire.
    pub held: bool,
}

impl Guard {
    /// A held change's outcome as it stands: held; the operation's once approved; the
    /// decision's otherwise.
    pub async fn approval_outcome(&self, held: &Approval) -> Result<Outcome, StoreError> {
        match held.state {
            ApprovalState::Held if held.expires_at > now_ms() => {
                Ok(held_outcome(held.terms.clone()))
            }
            ApprovalState::Held => Ok(
                Outcome::blocked(Reason::ApprovalExpired).with_current(Some(held.terms.clone()))
            ),
            ApprovalState::Approved => match self.store.operation(&held.request_key).await? {
                Some(op) => Box::pin(self.replay(op)).await,
                // Approved, the command about to be claimed: still waiting.
                None => Ok(held_outcome(held.terms.clone())),
            },
            ApprovalState::Rejected
            | ApprovalState::Expired
            | ApprovalState::Blocked
            | ApprovalState::Withdrawn => Ok(held
                .outcome
                .clone()
                .unwrap_or_else(|| Outcome::blocked(Reason::ApprovalRejected))),
        }
    }

    /// An operator approves a held change. The service's record is read again: if the
    /// revision or any term moved, nothing is sent (`blocked`/`benefit_loss_hidden`); if the
    /// account's budget is spent by now, nothing is sent (`blocked`/`rate_limited`);
    /// otherwise the command goes out with the stored revision and the original request key,
    /// once however often this is called, by however many operators or replicas.
    pub async fn approve(
        &self,
        key: &str,
        operator: &str,
        note: Option<&str>,
    ) -> Result<Option<Decision>, StoreError> {
        let Some(held) = self.store.approval(key).await? else {
            return Ok(None);
        };
        let mine = match held.state {
            ApprovalState::Held => self.store.start_approval(key, operator, note).await?,
            // Approved by a process that stopped before claiming the operation: taken over
            // once the claim is surely not coming.
            ApprovalState::Approved => {
                let stalled = held.decided_at.is_some_and(|at| {
                    now_ms() - at > self.config.in_flight_wait.as_millis() as i64
                });
                if stalled && self.store.operation(key).await?.is_none() {
                    self.store
                        .resume_approval(key, held.decided_at.unwrap_or_default())
                        .await?
                } else {
                    None
                }
            }
            _ => None,
        };
        let Some(approved_at) = mine else {
            let now = self.store.approval(key).await?.unwrap_or(held);
            return Ok(Some(Decision {
                outcome: self.approval_outcome(&now).await?,
                decided: false,
                held: false,
            }));
        };
        let outcome = self.send_approved(&held).await?;
        self.audit_decision(
            &held,
            "approve_subscription_change",
            operator,
            &outcome,
            note,
        )
        .await?;
        // Nothing sent, nothing claimed, the hold not ended (moved facts and a spent budget
        // end it): the change is still the person's to decide.
        let held_still = self.store.operation(key).await?.is_none()
            && self.store.release_approval(key, approved_at).await?;
        if held_still {
            tracing::warn!(request_key = %key, %operator, reason = outcome.reason.map_or("-", |r| r.as_str()), "an approval could not be carried out; the change is still held");
            return Ok(Some(Decision {
                outcome,
                decided: false,
                held: true,
            }));
        }
        self.tell_rasa(&held, &outcome).await;
        Ok(Some(Decision {
            outcome,
            decided: true,
            held: false,
        }))
    }

    /// Steps 11 to 15 again for an approved change, with the terms stored at the hold.
    pub(super) async fn send_approved(&self, held: &Approval) -> Result<Outcome, StoreError> {
        let key = &held.request_key;
        let terms = held.terms.clone();
        let confirmation = Confirmation {
            account: held.account.clone(),
            tag: Tag {
                subscription: held.subscription.clone(),
                change_type: held.change_type.clone(),
                revision: held.revision,
            },
            // The hold's stored terms and revision bind it; the name is not stored.
            subscription: None,
            terms: terms.clone(),
            question: Question {
                text: held.question.clone(),
                timestamp: held.question_at,
                position: 0,
            },
            reply: Reply {
                text: held.reply.clone(),
                timestamp: held.reply_at,
                message_id: held.reply_id.clone(),
                meaning: Meaning::Yes,
                given: Given::Typed,
                after_other_message: None,
            },
            request_key: key.clone(),
            revision_format: self.config.revision_format,
        };
        let (current, _) = match self.read_and_compare(&confirmation).await {
            Ok(current) => current,
            Err(refusal) => {
                if refusal.reason != Some(Reason::ServiceUnavailable) {
                    self.store.block_approval(key, &refusal).await?;
                }
                // The service away: nothing sent and nothing known; the approver gives the
                // change back to the held ones.
                return Ok(refusal);
            }
        };
        let op = Operation {
            request_key: key.clone(),
            sender_id: held.sender_id.clone(),
            account: held.account.clone(),
            subscription: held.subscription.clone(),
            change_type: held.change_type.clone(),
            revision: held.revision,
            terms: held.terms.clone(),
            state: OpState::Claimed,
            outcome: None,
            created_at: now_ms(),
            updated_at: now_ms(),
            asked_at: super::guard::asked_ms(held.question_at),
        };
        let outcome = self.claim_spend_send(op, confirmation, current).await?;
        if outcome.reason == Some(Reason::RateLimited) {
            // The budget was spent by the time of approval: the hold ends, nothing sent.
            self.store.block_approval(key, &outcome).await?;
        }
        Ok(outcome)
    }

    /// An operator rejects a held change: `blocked`/`approval_rejected`, the note as `why`.
    pub async fn reject(
        &self,
        key: &str,
        operator: &str,
        note: &str,
    ) -> Result<Option<Decision>, StoreError> {
        let Some(held) = self.store.approval(key).await? else {
            return Ok(None);
        };
        let outcome = Outcome::blocked(Reason::ApprovalRejected)
            .with_current(Some(held.terms.clone()))
            .with_why(Some(note.to_owned()).filter(|n| !n.trim().is_empty()));
        if !self
            .store
            .reject_approval(key, operator, note, &outcome)
            .await?
        {
            let now = self.store.approval(key).await?.unwrap_or(held);
            return Ok(Some(Decision {
                outcome: self.approval_outcome(&now).await?,
                decided: false,
                held: false,
            }));
        }
        self.audit_decision(
            &held,
            "reject_subscription_change",
            operator,
            &outcome,
            Some(note),
        )
        .await?;
        self.tell_rasa(&held, &outcome).await;
        Ok(Some(Decision {
            outcome,
            decided: true,
            held: false,
        }))
    }

    /// The customer takes back their held change before it is decided (CONTRACT.md
    /// section 7): `blocked`/`withdrawn`, audited, and nothing is sent, then or on a later
    /// approval. `None` when it was no longer held (decided meanwhile).
    pub async fn withdraw(&self, held: &Approval) -> Result<Option<Outcome>, StoreError> {
        let outcome = Outcome::blocked(Reason::Withdrawn).with_current(Some(held.terms.clone()));
        if !self
            .store
            .withdraw_approval(&held.request_key, &outcome)
            .await?
        {
            return Ok(None);
        }
        self.audit_decision(
            held,
            "withdraw_subscription_change",
            "customer",
            &outcome,
            None,
        )
        .await?;
        Ok(Some(outcome))
    }

    /// Ends the holds past their expiry (`blocked`/`approval_expired`); how many.
    pub async fn expire_holds(&self) -> Result<usize, StoreError> {
        let outcome = Outcome::blocked(Reason::ApprovalExpired);
        let keys = self.store.expire_approvals(&outcome).await?;
        for key in &keys {
            if let Some(held) = self.store.approval(key).await? {
                self.audit_decision(&held, "expire_subscription_change", "-", &outcome, None)
                    .await?;
                self.tell_rasa(&held, &outcome).await;
            }
        }
        Ok(keys.len())
    }

    pub(super) async fn audit_decision(
        &self,
        held: &Approval,
        action: &str,
        operator: &str,
        outcome: &Outcome,
        note: Option<&str>,
    ) -> Result<(), StoreError> {
        tracing::info!(request_key = %held.request_key, operator, action, status = outcome.status.as_str(), "a held change was decided");
        self.store
            .audit(AuditEntry {
                at: now_ms(),
                action: action.into(),
                sender_id: held.sender_id.clone(),
                account: Some(held.account.clone()),
                target: Some(format!("{} {}", held.subscription, held.change_type)),
                question_terms: Some(held.question.clone()),
                service_terms: Some(held.terms.to_string()),
                status: outcome.status.as_str().into(),
                reason: match (outcome.reason, note) {
                    (Some(r), Some(n)) if !n.is_empty() => Some(format!("{}: {n}", r.as_str())),
                    (Some(r), _) => Some(r.as_str().into()),
                    (None, Some(n)) if !n.is_empty() => Some(n.to_owned()),
                    (None, _) => None,
                },
                request_key: Some(held.request_key.clone()),
                operator: Some(operator.to_owned()),
                ..AuditEntry::default()
            })
            .await
    }
}
