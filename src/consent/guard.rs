//! The guard's orchestration of CONTRACT.md section 4 for one call: the conversation's
//! checks ([`check_conversation`], steps 1 to 10), the repeat rules R1 to R3 right after
//! them, step 11's read and steps 12 and 13's comparison ([`compare_facts`]), step 14's
//! budget and step 15 ([`ConfirmedChange`], at most once per request key, never while
//! another command for the same subscription has an unknown outcome); and the
//! reconciliation of unknown outcomes by the service's facts.
use std::sync::Arc;
use std::time::Duration;

use super::checks::{check_conversation, compare_facts, Confirmation};
use super::inputs::ApplyInputs;
use super::lifecycle::{held_outcome, pending, recorded, Lifecycle};
use super::notify::RasaNotifier;
use super::outcome::{Outcome, Reason, Terms};
use super::send::ConfirmedChange;
use super::ConsentConfig;
use crate::store::{
    now_ms, Approval, ApprovalState, AuditEntry, Claim, ClaimToSend, OpState, Operation, Store,
    StoreError,
};
use crate::subscriptions::model::RevisionFormat;
use crate::subscriptions::{Provider, Subscription};
use tracing::Instrument as _;

/// A step's span in the action call's trace: how long it took and, when it decided the
/// outcome, the status and reason (no message text, no terms).
macro_rules! step {
    ($name:literal) => {
        tracing::info_span!(
            target: crate::telemetry::SPAN_TARGET,
            $name,
            status = tracing::field::Empty,
            reason = tracing::field::Empty,
        )
    };
}

/// A question's timestamp (seconds since the epoch, as Rasa writes it) in milliseconds.
pub(super) fn asked_ms(timestamp: Option<f64>) -> Option<i64> {
    timestamp
        .filter(|t| t.is_finite())
        .map(|t| (t * 1000.0) as i64)
}

/// Records the outcome a step decided on its span.
fn decided(span: &tracing::Span, outcome: &Outcome) {
    span.record("status", outcome.status.as_str());
    if let Some(reason) = outcome.reason {
        span.record("reason", reason.as_str());
    }
}

/// Runs the whole sequence for one call of `apply_subscription_change`. Its parts are
/// read through accessors only: nothing outside this module can swap the store or the
/// provider a confirmed change is sent through.
#[derive(Clone)]
pub struct Guard {
    pub(super) config: Arc<ConsentConfig>,
    pub(super) provider: Arc<dyn Provider>,
    pub(super) store: Store,
    /// Where a person's decision is told to the conversation, when anywhere.
    pub(super) notifier: Option<Arc<RasaNotifier>>,
}

impl Guard {
    /// The guard over `provider` (the client of section 6, or another billing system).
    pub fn new(config: ConsentConfig, provider: impl Provider, store: Store) -> Self {
        Self {
            notifier: RasaNotifier::new(&config.approval).map(Arc::new),
            config: Arc::new(config),
            provider: Arc::new(provider),
            store,
        }
    }

    /// How consent is checked.
    pub fn config(&self) -> &ConsentConfig {
        &self.config
    }

    /// The billing system's provider (its reads; a command takes a
    /// [`ConfirmedChange`], which only this module makes).
    pub fn provider(&self) -> &dyn Provider {
        self.provider.as_ref()
    }

    /// The store: operations, audit, rate limits.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Checks, and sends only when every check passes. Every call ends in exactly one
    /// outcome, which is also appended to the audit trail.
    pub async fn apply(&self, inputs: &ApplyInputs) -> Result<Outcome, StoreError> {
        let span = tracing::info_span!(
            target: crate::telemetry::SPAN_TARGET,
            "consent_guard",
            status = tracing::field::Empty,
            reason = tracing::field::Empty,
            request_key = tracing::field::Empty,
        );
        let outcome = self
            .apply_in(inputs, &span)
            .instrument(span.clone())
            .await?;
        decided(&span, &outcome);
        Ok(outcome)
    }

    pub(super) async fn apply_in(
        &self,
        inputs: &ApplyInputs,
        span: &tracing::Span,
    ) -> Result<Outcome, StoreError> {
        // Steps 1 to 10 take microseconds and read only the tracker: one span, which says
        // which check refused by its reason.
        let checks = step!("guard.conversation_checks");
        let checked = checks.in_scope(|| check_conversation(inputs, &self.config));
        let (outcome, key) = match checked {
            Err(outcome) => {
                decided(&checks, &outcome);
                drop(checks);
                (outcome, None)
            }
            Ok(confirmation) => {
                drop(checks);
                let key = confirmation.request_key.clone();
                span.record("request_key", key.as_str());
                // Boxed: steps 11 to 15 hold the service calls and the store's, the bulk of
                // this future, which each poll's caller would otherwise move whole.
                (
                    Box::pin(self.decide(confirmation, inputs)).await?,
                    Some(key),
                )
            }
        };
        self.store
            .audit(AuditEntry {
                at: now_ms(),
                action: "apply_subscription_change".into(),
                sender_id: inputs.sender_id.clone(),
                account: inputs.account.clone(),
                target: inputs.target(),
                question_terms: inputs
                    .conversation
                    .question
                    .as_ref()
                    .map(|q| q.text.clone()),
                service_terms: outcome.current.as_ref().map(Terms::to_string),
                status: outcome.status.as_str().into(),
                reason: outcome.reason.map(|r| r.as_str().into()),
                request_key: key,
                ..AuditEntry::default()
            })
            .instrument(step!("guard.audit"))
            .await?;
        Ok(outcome)
    }

    /// Steps 11 to 15, once the conversation checks passed, with the repeat rules of
    /// CONTRACT.md section 4 where they apply:
    ///
    /// - R1. A repeat (the request key has an operation) gets the first call's outcome;
    ///   steps 11 to 14 are skipped, since the change itself has moved the record on.
    /// - R2. While another operation of this subscription has an unknown outcome, nothing
    ///   is sent for it: `pending_verification`.
    /// - R3. A repeat that raced this call to the claim (or applied the change, moving the
    ///   record on, while this call read it) is R1 after all.
    pub(super) async fn decide(
        &self,
        confirmation: Confirmation,
        inputs: &ApplyInputs,
    ) -> Result<Outcome, StoreError> {
        // R1 and R2, right after step 10 (the claim below enforces R2 atomically; asking
        // first answers before the service is read).
        let key = &confirmation.request_key;
        if let Some(answer) = self.by_repeats(&confirmation, true).await? {
            return Ok(answer);
        }
        // 11, 12, 13. The facts as they are now, compared; fail closed.
        let facts = step!("guard.facts");
        let compared = self
            .read_and_compare(&confirmation)
            .instrument(facts.clone())
            .await;
        if let Err(refusal) = &compared {
            decided(&facts, refusal);
        }
        // Each step's span ends with the step: the steps after it are its siblings.
        drop(facts);
        let (current, review) = match compared {
            Ok(current) => current,
            Err(refusal) => {
                // R3: another delivery of the same "yes" may have claimed and applied it
                // since the lookup above, moving the record on: then its outcome is the
                // answer.
                if let Some(op) = self.store.operation(key).await? {
                    return self.replay(op).await;
                }
                return Ok(refusal);
            }
        };
        let op = Operation {
            request_key: key.clone(),
            sender_id: inputs.sender_id.clone(),
            account: confirmation.account.clone(),
            subscription: confirmation.tag.subscription.clone(),
            change_type: confirmation.tag.change_type.clone(),
            revision: confirmation.tag.revision,
            terms: confirmation.terms.clone(),
            state: OpState::Claimed,
            outcome: None,
            created_at: now_ms(),
            updated_at: now_ms(),
            asked_at: asked_ms(confirmation.question.timestamp),
        };
        // 14 and 15 for a change a person approves first (CONTRACT.md section 7): the budget
        // is looked at but not spent, and the change is stored as held; nothing is sent.
        let rules = &self.config.approval;
        if let Some(rule) = rules.holds(&confirmation.account, &op.change_type, review) {
            if !self.budget_left(&confirmation.account).await? {
                return Ok(Outcome::blocked(Reason::RateLimited).with_current(Some(current)));
            }
            // One open hold per subscription, and a few per account, so a burst of holds
            // cannot bury the ones a person must decide (a redelivery of this very "yes" is
            // answered from its own hold, above).
            let (for_account, for_subscription, oldest) = self
                .store
                .open_holds(&confirmation.account, &op.subscription)
                .await?;
            if let Some(open) = oldest.filter(|h| {
                h.request_key != *key && for_subscription >= rules.max_open_per_subscription
            }) {
                return Ok(held_outcome(open.terms.clone()).with_why(Some(
                    "A change to this subscription already waits for a colleague's approval; it must be decided or withdrawn first.".into(),
                )));
            }
            if for_account >= rules.max_open_per_account {
                return Ok(Outcome::blocked(Reason::RateLimited)
                    .with_current(Some(current))
                    .with_why(Some(
                        "Too many changes of this account already wait for a colleague's approval."
                            .into(),
                    )));
            }
            let now = now_ms();
            let held = Approval {
                request_key: key.clone(),
                sender_id: inputs.sender_id.clone(),
                account: confirmation.account.clone(),
                subscription: op.subscription.clone(),
                change_type: op.change_type.clone(),
                revision: op.revision,
                terms: current.clone(),
                question: confirmation.question.text.clone(),
                question_at: confirmation.question.timestamp,
                reply: confirmation.reply.text.clone(),
                reply_at: confirmation.reply.timestamp,
                reply_id: confirmation.reply.message_id.clone(),
                rule: rule.to_owned(),
                state: ApprovalState::Held,
                created_at: now,
                expires_at: now + rules.expiry.as_millis() as i64,
                decided_by: None,
                decided_at: None,
                note: None,
                outcome: None,
            };
            if !self.store.hold(&held).await? {
                // R3: another delivery of the same "yes" stored it first.
                if let Some(held) = self.store.approval(key).await? {
                    return self.approval_outcome(&held).await;
                }
            }
            tracing::info!(request_key = %key, rule, subscription = %op.subscription, "held for approval");
            return Ok(held_outcome(current));
        }
        self.claim_spend_send(op, confirmation, current).await
    }

    /// The request key claimed, the account's budget spent (step 14), the command sent
    /// (step 15): for a confirmation now, or a held one once approved.
    pub(super) async fn claim_spend_send(
        &self,
        op: Operation,
        confirmation: Confirmation,
        current: Terms,
    ) -> Result<Outcome, StoreError> {
        let key = &confirmation.request_key;
        // 14. The key claimed and the account's budget spent, in one transaction.
        let claim = step!("guard.claim");
        let life = Lifecycle::of(&self.store);
        let claimed = life
            .sending(&op, self.config.rate)
            .instrument(claim.clone())
            .await?;
        let refusal = match claimed {
            ClaimToSend::Sending => None,
            // R3: another delivery of the same "yes" got here first.
            ClaimToSend::Refused(Claim::KeyTaken) => {
                drop(claim);
                let op = self.store.operation(key).await?.unwrap_or(op);
                return self.replay(op).await;
            }
            // R2: another confirmation's command for this subscription is unresolved.
            ClaimToSend::Refused(_) => Some(pending().with_current(Some(current.clone()))),
            ClaimToSend::BudgetSpent => {
                Some(Outcome::blocked(Reason::RateLimited).with_current(Some(current.clone())))
            }
        };
        if let Some(refusal) = refusal {
            decided(&claim, &refusal);
            return Ok(refusal);
        }
        drop(claim);
        // 15. The command.
        let command = step!("guard.command");
        let outcome = ConfirmedChange {
            confirmation,
            current,
        }
        .send(self.provider.as_ref(), &self.store)
        .instrument(command.clone())
        .await?;
        decided(&command, &outcome);
        Ok(outcome)
    }

    /// Where a confirmed "yes" stands, for `check_subscription_change`, with nothing claimed,
    /// spent or sent: its operation's outcome (an unknown one resolved by asking the
    /// service), or its held change's; without either, what apply would answer now at
    /// R2 and steps 11 to 14 (another change of the subscription unresolved, the service
    /// away, not the account's, the terms moved, the budget spent), or `selected` with the
    /// current terms when none of them would refuse: the yes has not been acted on.
    pub async fn standing(&self, confirmation: &Confirmation) -> Result<Outcome, StoreError> {
        if let Some(answer) = self.by_repeats(confirmation, false).await? {
            return Ok(answer);
        }
        let current = match self.read_and_compare(confirmation).await {
            Ok((current, _)) => current,
            Err(refusal) => return Ok(refusal),
        };
        if !self.budget_left(&confirmation.account).await? {
            return Ok(Outcome::blocked(Reason::RateLimited).with_current(Some(current)));
        }
        Ok(Outcome {
            status: super::outcome::Status::Selected,
            reason: None,
            effects: 0,
            current: Some(current),
            why: None,
        })
    }

    /// R1 and R2, in one query: the answer when the request key has an operation (its
    /// outcome; one in flight waited for briefly when `wait`, as a repeat of apply does,
    /// only resolved otherwise) or a held change (its state, or its decision's outcome), or
    /// when another operation of the subscription is unresolved (`pending_verification`);
    /// `None` when steps 11 onward decide.
    async fn by_repeats(
        &self,
        confirmation: &Confirmation,
        wait: bool,
    ) -> Result<Option<Outcome>, StoreError> {
        let key = &confirmation.request_key;
        let repeats = self
            .store
            .repeats(key, &confirmation.tag.subscription)
            .instrument(step!("guard.repeats"))
            .await?;
        if let Some(op) = repeats.mine {
            return Ok(Some(if wait {
                self.replay(op).await?
            } else {
                self.reconcile(&op).await?
            }));
        }
        if repeats.held {
            if let Some(held) = self.store.approval(key).await? {
                return self.approval_outcome(&held).await.map(Some);
            }
        }
        Ok(repeats.open.is_some().then(pending))
    }

    /// Step 14 looked at, not spent: whether the account's budget has a token left.
    async fn budget_left(&self, account: &str) -> Result<bool, StoreError> {
        let rate = self.config.rate;
        self.store
            .token_available(account, rate.capacity, rate.per_second)
            .await
    }

    /// Steps 11 to 13: reads the record and compares it with the confirmation; the current
    /// terms, and whether the service marks the option for review. When the read fails,
    /// nothing is sent (`service_unavailable`: step 11 decides before 12 and 13); but if the
    /// service's events already said the record moved past the confirmed revision, that
    /// record's terms and what moved come with it (`current`, `why`: known), so the customer
    /// hears what changed rather than only that the service is away. Nothing of a record
    /// that is not the account's is told.
    pub(super) async fn read_and_compare(
        &self,
        confirmation: &Confirmation,
    ) -> Result<(Terms, bool), Outcome> {
        let record = match self.provider.get(&confirmation.tag.subscription).await {
            Ok(record) => record,
            Err(e) => {
                tracing::warn!(error = %e, "the subscription could not be read");
                let away = Outcome::blocked(Reason::ServiceUnavailable);
                return Err(match self.moved_by_events(confirmation).await {
                    Some(moved) => away.with_current(moved.current).with_why(moved.why),
                    None => away,
                });
            }
        };
        let review = record
            .as_ref()
            .and_then(|r| r.option(&confirmation.tag.change_type))
            .is_some_and(|o| o.review);
        compare_facts(confirmation, record.as_ref()).map(|terms| (terms, review))
    }

    /// Step 13's refusal against the newest record the service's events told of, when it is
    /// past the confirmed revision and the account's own.
    async fn moved_by_events(&self, confirmation: &Confirmation) -> Option<Outcome> {
        if confirmation.revision_format != RevisionFormat::Decimal {
            return None;
        }
        let (revision, _, json) = self
            .store
            .known_record(&confirmation.tag.subscription)
            .await
            .ok()??;
        if revision <= confirmation.tag.revision {
            return None;
        }
        let record = serde_json::from_str::<Subscription>(&json).ok()?;
        compare_facts(confirmation, Some(&record))
            .err()
            .filter(|refusal| refusal.reason == Some(Reason::BenefitLossHidden))
    }

    /// The outcome of an operation that already exists: final as recorded; in flight,
    /// waited for briefly; unknown, or left by a sender that stopped, reconciled.
    pub(super) async fn replay(&self, mut op: Operation) -> Result<Outcome, StoreError> {
        let deadline = tokio::time::Instant::now() + self.config.in_flight_wait;
        while matches!(op.state, OpState::Claimed | OpState::Sent)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(25)).await;
            match self.store.operation(&op.request_key).await? {
                Some(now) => op = now,
                // Released: nothing was sent; the confirmation may be tried again.
                None => return Ok(Outcome::blocked(Reason::ServiceUnavailable)),
            }
        }
        let left = now_ms() - op.updated_at >= self.config.in_flight_wait.as_millis() as i64;
        match op.state {
            OpState::Applied | OpState::Failed => Ok(recorded(&op)),
            OpState::Unknown => self.reconcile(&op).await,
            // Left claimed or sent past the wait (longer than any sender waits for its
            // answer): its sender stopped. Resolved as the reconciler resolves it, by the
            // service's answer about the key (a claim never sent is taken back).
            OpState::Claimed | OpState::Sent if left => self.reconcile(&op).await,
            OpState::Claimed | OpState::Sent => Ok(pending()),
        }
    }
}
