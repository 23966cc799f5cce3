//! Unknown outcomes resolved by the service's facts alone (CONTRACT.md section 4): a
//! command left sent or unknown is asked about by its request key (`GET
//! /v1/changes/{key}`), made, in flight, or never received and fenced; or, for a provider
//! without that history (Stripe, section 8), sent again under the same key while the
//! confirmation is within its window. Never "failed" by guess.

use std::time::Duration;

use super::guard::Guard;
use super::lifecycle::{not_sent, pending, recorded, Ending, Lifecycle};
use super::outcome::{Outcome, Reason, Status};
use super::send::{escalate_raced, Raced};
use crate::store::{now_ms, OpState, Operation, StoreError};
use crate::subscriptions::provider::{sealed, ConfirmedCommand};
use crate::subscriptions::{CommandOutcome, KeyState};

/// An operation the guard claimed for a confirmed change, whose command's outcome is
/// unknown: sent again as it was (its key, its subscription, its change, its revision).
struct Unresolved<'a>(&'a Operation);

impl sealed::Sealed for Unresolved<'_> {}

impl ConfirmedCommand for Unresolved<'_> {
    fn subscription(&self) -> &str {
        &self.0.subscription
    }

    fn change_type(&self) -> &str {
        &self.0.change_type
    }

    fn revision(&self) -> i64 {
        self.0.revision
    }

    fn request_key(&self) -> &str {
        &self.0.request_key
    }
}

impl Guard {
    /// Resolves an unknown operation by asking the service about its request key.
    pub async fn reconcile(&self, op: &Operation) -> Result<Outcome, StoreError> {
        if op.state.is_final() {
            return Ok(recorded(op));
        }
        if op.state == OpState::Claimed {
            // A fresh claim is another call's, about to send: leave it be.
            if now_ms() - op.updated_at < self.config.in_flight_wait.as_millis() as i64 {
                return Ok(pending());
            }
            // Claimed and left (the process stopped before sending): nothing was sent. Only
            // if it is still exactly as seen: a claim that moved on to sent is not touched.
            if Lifecycle::of(&self.store).take_back_left_claim(op).await? {
                return Ok(Outcome::blocked(Reason::ServiceUnavailable));
            }
            return match self.store.operation(&op.request_key).await? {
                Some(now) if now.state != OpState::Claimed => Box::pin(self.reconcile(&now)).await,
                _ => Ok(pending()),
            };
        }
        // Only the service's answer about the key resolves it (CONTRACT.md section 4):
        // made, in flight, or void and fenced. Never the time passed, nor a 404 from a
        // service that cannot fence the key.
        let life = Lifecycle::of(&self.store);
        match self.provider.change_by_key(&op.request_key).await {
            Ok(KeyState::Made(_change)) => {
                life.end(&op.request_key, &op.terms, Ending::Applied).await
            }
            Ok(KeyState::Void) => {
                life.end(&op.request_key, &op.terms, Ending::Failed(not_sent()))
                    .await
            }
            Ok(KeyState::NotFound) => self.resend(op).await,
            Ok(KeyState::InFlight) => Ok(pending()),
            Err(e) => {
                tracing::warn!(error = %e, request_key = %op.request_key, "could not reconcile");
                Ok(pending())
            }
        }
    }

    /// Section 8: the command sent again under its key while the confirmation is within
    /// its window (counted from the question, as the yes was), for a provider that
    /// resends. A command still with its sender (sent within the wait) is left to it; one
    /// sent longer ago is taken over first (sent → unknown), so its sender can no longer
    /// give it back as never sent once it is sent again. Only a made change resolves it;
    /// anything else leaves it for the next round, and after the window for a person.
    async fn resend(&self, op: &Operation) -> Result<Outcome, StoreError> {
        let now = now_ms();
        // The question's time is Rasa's clock: never later than the claim on ours, so a
        // question stamped ahead cannot stretch the window.
        let within = op
            .asked_at
            .map(|at| at.min(op.created_at))
            .is_some_and(|at| now - at <= self.config.window.as_millis() as i64);
        if !within {
            return Ok(pending());
        }
        if op.state == OpState::Sent {
            if now - op.updated_at < self.config.in_flight_wait.as_millis() as i64 {
                return Ok(pending());
            }
            if !Lifecycle::of(&self.store).take_over(op).await? {
                // Moved on meanwhile (its sender's answer, an event): that stands.
                return match self.store.operation(&op.request_key).await? {
                    Some(now) if now.state.is_final() => Ok(recorded(&now)),
                    _ => Ok(pending()),
                };
            }
        }
        let Some(outcome) = self.provider.resend(&Unresolved(op)).await else {
            return Ok(pending());
        };
        let life = Lifecycle::of(&self.store);
        match outcome {
            CommandOutcome::Applied { contradiction, .. } => {
                if let Some(why) = contradiction {
                    let raced = Raced {
                        account: &op.account,
                        subscription: &op.subscription,
                        change_type: &op.change_type,
                        terms: op.terms.to_string(),
                        request_key: &op.request_key,
                    };
                    escalate_raced(&self.store, raced, &why).await?;
                }
                tracing::info!(request_key = %op.request_key, "the command sent again under its key: applied");
                life.end(&op.request_key, &op.terms, Ending::Applied).await
            }
            other => {
                tracing::warn!(request_key = %op.request_key, outcome = ?other, "the command sent again under its key did not resolve it");
                Ok(pending())
            }
        }
    }

    /// Resolves an operation a signed service event names by its request key: the event
    /// proves the change was made, in whatever order it arrives (docs/EVENTS.md). `true`
    /// when this resolved it; `false` when it was already resolved (applied by the
    /// command's own answer, a lookup, or an earlier delivery of the event).
    pub async fn resolve_by_event(&self, op: &Operation) -> Result<bool, StoreError> {
        Lifecycle::of(&self.store).applied_by_event(op).await
    }

    /// Resolves every operation left sent or unknown for longer than `min_age`.
    pub async fn reconcile_all(&self, min_age: Duration) -> Result<usize, StoreError> {
        let mut resolved = 0;
        for op in self.store.unresolved(min_age).await? {
            if self.reconcile(&op).await?.status != Status::PendingVerification {
                resolved += 1;
            }
        }
        Ok(resolved)
    }
}
