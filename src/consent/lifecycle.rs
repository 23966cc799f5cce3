//! An operation's life, owned here alone: claimed → sent → applied, failed or unknown
//! (CONTRACT.md section 4), each move a typed transition the store makes conditionally, so
//! that of two moves racing (a reply and a lookup, an event and a redelivery) the first
//! stands and the other reads it back; and the outcomes each state answers with.

use super::outcome::{Outcome, Reason, Status, Terms};
use super::RateLimit;
use crate::store::{ClaimToSend, OpState, Operation, Store, StoreError};

/// How a sent command ended, as far as the one who learned it knows.
#[derive(Debug)]
pub(super) enum Ending {
    /// The service made the change: its 2xx, its answer about the key, or a signed event.
    Applied,
    /// It was not made and never will be (refused, stale, or void and fenced); the outcome
    /// says which.
    Failed(Outcome),
    /// Nobody knows yet: only the service's facts will tell (never the time passed).
    Unknown,
}

impl Ending {
    fn state(&self) -> OpState {
        match self {
            Self::Applied => OpState::Applied,
            Self::Failed(_) => OpState::Failed,
            Self::Unknown => OpState::Unknown,
        }
    }
}

/// The moves of an operation, over the store that keeps it. Nothing else in the product
/// moves an operation's state; the store's conditions make each move at most once.
#[derive(Clone, Copy)]
pub(super) struct Lifecycle<'a> {
    store: &'a Store,
}

impl<'a> Lifecycle<'a> {
    pub(super) fn of(store: &'a Store) -> Self {
        Self { store }
    }

    /// → sent, the moment before the command goes out: the request key claimed and the
    /// account's budget spent (step 14) in the same transaction, so that a claim is never
    /// left between the two for a crash or the reconciler to find, and a refusal leaves
    /// nothing behind.
    pub(super) async fn sending(
        &self,
        op: &Operation,
        rate: RateLimit,
    ) -> Result<ClaimToSend, StoreError> {
        debug_assert_eq!(op.state, OpState::Claimed);
        self.store
            .claim_to_send(op, rate.capacity, rate.per_second)
            .await
    }

    /// claimed or sent → gone: the command never left (the service could not be
    /// reached), so the same confirmation may be tried again.
    /// `false` when the reconciler took the operation over meanwhile (its sender was
    /// too slow): it stays, and its outcome is the reconciler's to learn.
    pub(super) async fn never_sent(&self, key: &str) -> Result<bool, StoreError> {
        self.store.release(key).await
    }

    /// sent → unknown, for a command whose sender has not answered within the wait, only
    /// if it is still exactly as `op` saw it: from then on its sender cannot give it back
    /// as never sent, and it may be sent again under its key. `true` when taken over.
    pub(super) async fn take_over(&self, op: &Operation) -> Result<bool, StoreError> {
        debug_assert_eq!(op.state, OpState::Sent);
        self.store
            .take_over_sent(&op.request_key, op.updated_at)
            .await
    }

    /// claimed → gone, for a claim left behind by a process that stopped before sending,
    /// only if it is still exactly as `op` saw it. `true` when it was taken back.
    pub(super) async fn take_back_left_claim(&self, op: &Operation) -> Result<bool, StoreError> {
        debug_assert_eq!(op.state, OpState::Claimed);
        self.store
            .release_stale_claim(&op.request_key, op.updated_at)
            .await
    }

    /// sent or unknown → how it ended, with the outcome the customer is told: this
    /// ending's, or, when another move resolved the operation first, the one recorded.
    pub(super) async fn end(
        &self,
        key: &str,
        terms: &Terms,
        ending: Ending,
    ) -> Result<Outcome, StoreError> {
        let state = ending.state();
        let outcome = match ending {
            Ending::Applied => applied(terms),
            Ending::Failed(outcome) => outcome,
            Ending::Unknown => pending(),
        };
        if !self.store.set_state(key, state, Some(&outcome)).await? {
            // Resolved meanwhile (an event, a lookup, another delivery): that stands.
            if let Some(op) = self.store.operation(key).await? {
                return Ok(recorded(&op));
            }
        }
        Ok(outcome)
    }

    /// How the sender's own command ended. Its "not made" (refused, stale, void) ends the
    /// operation only while it is still the sender's: once a reconciler took it over
    /// (unknown) and may have sent it again under its key, the sender's answer is about
    /// its own write alone, so the operation stays unknown for the facts to settle
    /// (section 4: never failed while the command may still be made).
    pub(super) async fn sender_end(
        &self,
        key: &str,
        terms: &Terms,
        ending: Ending,
    ) -> Result<Outcome, StoreError> {
        let Ending::Failed(outcome) = ending else {
            return self.end(key, terms, ending).await;
        };
        if self.store.fail_sent(key, &outcome).await? {
            return Ok(outcome);
        }
        match self.store.operation(key).await? {
            Some(op) if op.state.is_final() => Ok(recorded(&op)),
            _ => Ok(pending()),
        }
    }

    /// sent or unknown → applied, because a signed service event names the operation's
    /// request key: the event proves the outcome in whatever order it arrives. `true` when
    /// this moved it; `false` when it was already resolved.
    pub(super) async fn applied_by_event(&self, op: &Operation) -> Result<bool, StoreError> {
        self.store
            .resolve_applied(&op.request_key, &applied(&op.terms))
            .await
    }
}

/// `applied`, with the terms confirmed.
pub(super) fn applied(terms: &Terms) -> Outcome {
    Outcome {
        status: Status::Applied,
        reason: None,
        effects: 1,
        current: Some(terms.clone()),
        why: None,
    }
}

/// `held`/`approval_required`, with the terms a person will decide on.
pub(super) fn held_outcome(terms: Terms) -> Outcome {
    Outcome {
        status: Status::Held,
        reason: Some(Reason::ApprovalRequired),
        effects: 0,
        current: Some(terms),
        why: None,
    }
}

/// `pending_verification`/`outcome_unknown`.
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

/// What an operation answers with as recorded: its outcome, or pending while it has none.
pub(super) fn recorded(op: &Operation) -> Outcome {
    op.outcome.clone().unwrap_or_else(pending)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn sent_op(store: &Store, key: &str) -> Operation {
        let now = crate::store::now_ms();
        let op = Operation {
            request_key: key.to_owned(),
            sender_id: "s".into(),
            account: "acct-7".into(),
            subscription: format!("SUB-{key}"),
            change_type: "stop_renewal".into(),
            revision: 4,
            terms: Terms {
                tag: format!("SUB-{key} stop_renewal r4"),
                label: "Stop renewal".into(),
                effective: "2027-01-01 00:00 UTC".into(),
                entitlements: "none".into(),
            },
            state: OpState::Claimed,
            outcome: None,
            created_at: now,
            updated_at: now,
            asked_at: Some(now),
        };
        let life = Lifecycle::of(store);
        let rate = RateLimit::default();
        assert_eq!(life.sending(&op, rate).await.unwrap(), ClaimToSend::Sending);
        store.operation(key).await.unwrap().unwrap()
    }

    /// The sender's "stale" after a reconciler took its command over (and may have sent it
    /// again) leaves the operation unknown; while the command is still the sender's, it
    /// ends it failed.
    #[tokio::test]
    async fn a_senders_not_made_after_a_take_over_leaves_the_operation_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite:{}", dir.path().join("actiongate.db").display());
        let store = Store::connect(&db).await.unwrap();
        let life = Lifecycle::of(&store);
        let stale = || Ending::Failed(Outcome::blocked(Reason::StaleAtService));

        let taken = sent_op(&store, "taken").await;
        assert!(life.take_over(&taken).await.unwrap());
        let said = life
            .sender_end("taken", &taken.terms, stale())
            .await
            .unwrap();
        assert_eq!(said, pending());
        let kept = store.operation("taken").await.unwrap().unwrap();
        assert_eq!(kept.state, OpState::Unknown, "not failed by the sender");

        let own = sent_op(&store, "own").await;
        let said = life.sender_end("own", &own.terms, stale()).await.unwrap();
        assert_eq!(said.reason, Some(Reason::StaleAtService));
        let ended = store.operation("own").await.unwrap().unwrap();
        assert_eq!(ended.state, OpState::Failed);
    }
}
