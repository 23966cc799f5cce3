//! Changes a person approves first (CONTRACT.md section 7): a held change's outcome, the
//! approval (steps 11 to 15 again with the terms stored at the hold), the rejection, the
//! withdrawal, expiry, and their audit.

use super::checks::Confirmation;
use super::guard::Guard;
use super::outcome::{Outcome, Reason, Terms};
use super::send::held_outcome;
use crate::conversation::{Given, Meaning, Question, Reply};
use crate::store::{now_ms, Approval, ApprovalState, AuditEntry, OpState, Operation, StoreError};
use crate::subscriptions::model::Tag;

/// What an operator's approval or rejection did.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The held change's outcome now.
    pub outcome: Outcome,
    /// Whether this call decided it (`false`: it was decided already, by another click, another
    /// operator or another replica, or it expired: nothing was done again).
    pub decided: bool,
}

impl Guard {
    /// A held change's outcome as it stands: held; the operation's once approved; the
    /// decision's otherwise.
    pub async fn approval_outcome(&self, held: &Approval) -> Result<Outcome, StoreError> {
        match held.state {
            ApprovalState::Held if held.expires_at > now_ms() => {
                Ok(held_outcome(stored_terms(held)?))
            }
            ApprovalState::Held => {
                Ok(Outcome::blocked(Reason::ApprovalExpired)
                    .with_current(Some(stored_terms(held)?)))
            }
            ApprovalState::Approved => match self.store.operation(&held.request_key).await? {
                Some(op) => Box::pin(self.replay(op)).await,
                // Approved, the command about to be claimed: still waiting.
                None => Ok(held_outcome(stored_terms(held)?)),
            },
            ApprovalState::Rejected
            | ApprovalState::Expired
            | ApprovalState::Blocked
            | ApprovalState::Withdrawn => Ok(held
                .outcome
                .as_deref()
                .and_then(|json| serde_json::from_str(json).ok())
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
                stalled
                    && self.store.operation(key).await?.is_none()
                    && self
                        .store
                        .resume_approval(key, held.decided_at.unwrap_or_default())
                        .await?
            }
            _ => false,
        };
        if !mine {
            let now = self.store.approval(key).await?.unwrap_or(held);
            return Ok(Some(Decision {
                outcome: self.approval_outcome(&now).await?,
                decided: false,
            }));
        }
        let outcome = self.send_approved(&held).await?;
        self.audit_decision(
            &held,
            "approve_subscription_change",
            operator,
            &outcome,
            note,
        )
        .await?;
        self.tell_rasa(&held, &outcome).await;
        Ok(Some(Decision {
            outcome,
            decided: true,
        }))
    }

    /// Steps 11 to 15 again for an approved change, with the terms stored at the hold.
    pub(super) async fn send_approved(&self, held: &Approval) -> Result<Outcome, StoreError> {
        let key = &held.request_key;
        let terms = stored_terms(held)?;
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
        };
        let (current, _) = match self.read_and_compare(&confirmation).await {
            Ok(current) => current,
            Err(refusal) => {
                if refusal.reason == Some(Reason::ServiceUnavailable) {
                    // Nothing sent and nothing known: the approval stands and may be given
                    // again once the service answers (it is taken over after a while).
                    return Ok(refusal);
                }
                let json = serde_json::to_string(&refusal).expect("an outcome serialises");
                self.store.block_approval(key, &json).await?;
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
            terms: stored_terms(held)?,
            state: OpState::Claimed,
            outcome: None,
            created_at: now_ms(),
            updated_at: now_ms(),
        };
        let outcome = self.claim_spend_send(op, confirmation, current).await?;
        if outcome.reason == Some(Reason::RateLimited) {
            // The budget was spent by the time of approval: the hold ends, nothing sent.
            let json = serde_json::to_string(&outcome).expect("an outcome serialises");
            self.store.block_approval(key, &json).await?;
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
            .with_current(Some(stored_terms(&held)?))
            .with_why(Some(note.to_owned()).filter(|n| !n.trim().is_empty()));
        let json = serde_json::to_string(&outcome).expect("an outcome serialises");
        if !self
            .store
            .reject_approval(key, operator, note, &json)
            .await?
        {
            let now = self.store.approval(key).await?.unwrap_or(held);
            return Ok(Some(Decision {
                outcome: self.approval_outcome(&now).await?,
                decided: false,
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
        }))
    }

    /// The customer takes back their held change before it is decided (CONTRACT.md
    /// section 7): `blocked`/`withdrawn`, audited, and nothing is sent, then or on a later
    /// approval. `None` when it was no longer held (decided meanwhile).
    pub async fn withdraw(&self, held: &Approval) -> Result<Option<Outcome>, StoreError> {
        let outcome = Outcome::blocked(Reason::Withdrawn).with_current(Some(stored_terms(held)?));
        let json = serde_json::to_string(&outcome).expect("an outcome serialises");
        if !self
            .store
            .withdraw_approval(&held.request_key, &json)
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
        let json = serde_json::to_string(&outcome).expect("an outcome serialises");
        let keys = self.store.expire_approvals(&json).await?;
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
                service_terms: Some(held.terms.clone()),
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

/// The service's terms a hold stored at step 13.
pub(super) fn stored_terms(held: &Approval) -> Result<Terms, StoreError> {
    serde_json::from_str(&held.terms).map_err(|e| StoreError::Corrupt {
        what: "terms of the hold",
        key: held.request_key.clone(),
        why: e.to_string(),
    })
}
