//! Operations, one per request key, from the claim to the outcome: the statements the
//! lifecycle (`consent::lifecycle`) moves them with, the reads, and the finished ones kept
//! in memory (a final outcome never changes).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use super::db::{Query, Row};
use serde::Serialize;

use super::{now_ms, Store, StoreError};
use contract::operation::OpState;
use contract::outcome::{Outcome, Terms};

/// What a claim of a request key found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This call owns the key: it may send the command.
    Claimed,
    /// The key is another delivery's (of the same confirmation).
    KeyTaken,
    /// Another operation for the same subscription has no known outcome yet.
    SubscriptionBusy,
}

/// What a claim to send ([`Store::claim_to_send`]) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimToSend {
    /// The key claimed, a token spent, the operation sent: the command may go out.
    Sending,
    /// Nothing claimed: the key is another delivery's, or the subscription is busy.
    Refused(Claim),
    /// Nothing claimed: the account's budget is spent.
    BudgetSpent,
}

/// What stands before a claim ([`Store::repeats`]).
#[derive(Debug, Default)]
pub struct Repeats {
    /// The operation under the request key.
    pub mine: Option<Operation>,
    /// Another operation of the subscription whose outcome is not known yet.
    pub open: Option<Operation>,
    /// Whether a change held for approval is stored under the request key.
    pub held: bool,
}

/// One confirmed change, from the claim of its request key to its outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Operation {
    pub request_key: String,
    pub sender_id: String,
    pub account: String,
    pub subscription: String,
    pub change_type: String,
    pub revision: i64,
    /// The confirmed terms.
    pub terms: Terms,
    pub state: OpState,
    /// The outcome, once known.
    pub outcome: Option<Outcome>,
    /// Milliseconds since the epoch.
    pub created_at: i64,
    pub updated_at: i64,
    /// When the question the yes confirmed was asked (milliseconds since the epoch), if
    /// known: the confirmation's window is counted from it.
    pub asked_at: Option<i64>,
}

/// Operations with their final outcome, by request key, as last read or written. A final
/// outcome never changes (no statement moves an applied or failed operation, on any
/// replica), so a repeat of a finished "yes" is answered from here without the database.
/// Bounded: the oldest are forgotten first (and read from the database again if asked).
#[derive(Default)]
pub(super) struct Finished {
    by_key: HashMap<String, Operation>,
    order: VecDeque<String>,
}

/// Finished operations remembered at most (about 1 KB each): a repeat of the same "yes"
/// comes within minutes, and an older one is read from the database.
const FINISHED_KEPT: usize = 10_000;

impl Finished {
    fn remember(&mut self, op: &Operation) {
        if !op.state.is_final() || self.by_key.contains_key(&op.request_key) {
            return;
        }
        if self.order.len() >= FINISHED_KEPT {
            if let Some(oldest) = self.order.pop_front() {
                self.by_key.remove(&oldest);
            }
        }
        self.order.push_back(op.request_key.clone());
        self.by_key.insert(op.request_key.clone(), op.clone());
    }
}

impl Store {
    fn finished(&self, key: &str) -> Option<Operation> {
        let finished = self.finished.lock().unwrap_or_else(|e| e.into_inner());
        finished.by_key.get(key).cloned()
    }

    fn remember(&self, op: &Operation) {
        if op.state.is_final() {
            let mut finished = self.finished.lock().unwrap_or_else(|e| e.into_inner());
            finished.remember(op);
        }
    }

    /// The operation under a request key.
    pub async fn operation(&self, key: &str) -> Result<Option<Operation>, StoreError> {
        if let Some(op) = self.finished(key) {
            return Ok(Some(op));
        }
        let row = self
            .db
            .query(format!(
                "SELECT {OP_COLUMNS} FROM operations WHERE request_key = $1"
            ))
            .bind(key)
            .fetch_optional()
            .await?;
        let op = row.map(|r| operation_from(&r)).transpose()?;
        if let Some(op) = &op {
            self.remember(op);
        }
        Ok(op)
    }

    /// Claims a request key. Atomic: of any number of concurrent claims for one key, on
    /// any number of replicas, exactly one is [`Claim::Claimed`]; and no key is claimed
    /// while another operation for the same subscription is claimed, sent or unknown.
    pub async fn claim(&self, op: &Operation) -> Result<Claim, StoreError> {
        if self.claim_as(op, OpState::Claimed)?.execute().await? == 1 {
            return Ok(Claim::Claimed);
        }
        self.why_not_claimed(op).await
    }

    /// Claims a request key, takes one token from the account's bucket and marks the
    /// operation sent, in one transaction: the moment before its command goes out, with
    /// nothing between the claim and the send for a crash or a reconciler to find. All of
    /// it or none: a key another delivery holds, a subscription with an unresolved command
    /// or a spent budget leaves no claim and spends nothing. `capacity` is the bucket's
    /// (at least one; below that nothing is ever sent).
    pub async fn claim_to_send(
        &self,
        op: &Operation,
        capacity: f64,
        per_second: f64,
    ) -> Result<ClaimToSend, StoreError> {
        if capacity < 1.0 {
            return Ok(ClaimToSend::BudgetSpent);
        }
        let statements = vec![
            self.claim_as(op, OpState::Sent)?,
            self.spend(&op.account, capacity, per_second),
        ];
        Ok(match self.db.execute_while_changing(statements).await? {
            None => ClaimToSend::Sending,
            Some(0) => ClaimToSend::Refused(self.why_not_claimed(op).await?),
            Some(_) => ClaimToSend::BudgetSpent,
        })
    }

    /// The claim of `op`'s key, in `state`: it changes no row when either constraint
    /// refuses it (the key taken, or the subscription's open operation).
    fn claim_as(&self, op: &Operation, state: OpState) -> Result<Query<'_>, StoreError> {
        Ok(self
            .db
            .query(CLAIM_SQL)
            .bind(&op.request_key)
            .bind(&op.sender_id)
            .bind(&op.account)
            .bind(&op.subscription)
            .bind(&op.change_type)
            .bind(op.revision)
            .bind(serde_json::to_string(&op.terms)?)
            .bind(now_ms())
            .bind(op.asked_at)
            .bind(state.as_str()))
    }

    /// Which constraint refused a claim: the key's own row, or the subscription's open one.
    async fn why_not_claimed(&self, op: &Operation) -> Result<Claim, StoreError> {
        Ok(if self.operation(&op.request_key).await?.is_some() {
            Claim::KeyTaken
        } else {
            Claim::SubscriptionBusy
        })
    }

    /// In one query, what the repeat rules of CONTRACT.md section 4 ask before a claim: the
    /// operation under `key` (R1), another operation for `subscription` whose outcome is
    /// not known yet (claimed, sent or unknown: R2), and whether a change held for approval
    /// is stored under `key` (R1 for a held change). One statement is one snapshot of the
    /// three, and on SQLite one read transaction (one pair of the shared-memory locks'
    /// `fcntl` calls) where two statements took two.
    pub async fn repeats(&self, key: &str, subscription: &str) -> Result<Repeats, StoreError> {
        // A finished operation under the key decides alone (R1): nothing else is asked.
        if let Some(op) = self.finished(key) {
            return Ok(Repeats {
                mine: Some(op),
                ..Repeats::default()
            });
        }
        let rows = self
            .db
            .query(repeats_sql())
            .bind(key)
            .bind(subscription)
            .fetch_all()
            .await?;
        let mut repeats = Repeats::default();
        for row in &rows {
            if row.str(OP_FIELDS) == "approval" {
                repeats.held = true;
                continue;
            }
            let op = operation_from(row)?;
            if op.request_key == key {
                self.remember(&op);
                repeats.mine = Some(op);
            } else {
                repeats.open = Some(op);
            }
        }
        Ok(repeats)
    }

    /// The subscription's operation whose outcome is not known yet (claimed, sent or
    /// unknown), if there is one.
    pub async fn open_operation(
        &self,
        subscription: &str,
    ) -> Result<Option<Operation>, StoreError> {
        let row = self.db.query(format!(
            "SELECT {OP_COLUMNS} FROM operations WHERE subscription = $1 AND state NOT IN ('applied', 'failed') LIMIT 1"
        ))
        .bind(subscription)
        .fetch_optional()
        .await?;
        row.map(|r| operation_from(&r)).transpose()
    }

    /// Moves an operation to a new state, with its outcome when known. A final outcome
    /// (applied, failed) is never replaced: `false` when the operation had one already
    /// (a service event or another replica resolved it meanwhile).
    pub async fn set_state(
        &self,
        key: &str,
        state: OpState,
        outcome: Option<&Outcome>,
    ) -> Result<bool, StoreError> {
        let outcome = outcome.map(serde_json::to_string).transpose()?;
        let done = self
            .db
            .query(SET_STATE_SQL)
            .bind(state.as_str())
            .bind(outcome)
            .bind(now_ms())
            .bind(key)
            .execute()
            .await?;
        Ok(done == 1)
    }

    /// sent → failed, for the sender's own answer that its command was not made (refused,
    /// stale, void): only while the operation is still its sender's. `false` when it moved
    /// meanwhile: resolved, or taken over (unknown) by a reconciler that may have sent it
    /// again, which the sender's answer says nothing about.
    pub async fn fail_sent(&self, key: &str, outcome: &Outcome) -> Result<bool, StoreError> {
        let done = self
            .db
            .query(
                "UPDATE operations SET state = 'failed', outcome = $1, updated_at = $2 \
             WHERE request_key = $3 AND state = 'sent'",
            )
            .bind(serde_json::to_string(outcome)?)
            .bind(now_ms())
            .bind(key)
            .execute()
            .await?;
        Ok(done == 1)
    }

    /// Moves a claimed operation to sent, the moment before its command goes out. `false`
    /// when it is no longer claimed (the reconciler took back a claim it thought left
    /// behind): then the command must not be sent.
    pub async fn mark_sent(&self, key: &str) -> Result<bool, StoreError> {
        let done = self.db.query(
            "UPDATE operations SET state = 'sent', updated_at = $1 WHERE request_key = $2 AND state = 'claimed'",
        )
        .bind(now_ms())
        .bind(key)
        .execute()
        .await?;
        Ok(done == 1)
    }

    /// Takes back a claim left behind (claimed and untouched since `updated_at`): the
    /// process that made it stopped before sending. An operation that moved on meanwhile is
    /// left alone. `true` when it was taken back.
    pub async fn release_stale_claim(
        &self,
        key: &str,
        updated_at: i64,
    ) -> Result<bool, StoreError> {
        let done = self.db.query(
            "DELETE FROM operations WHERE request_key = $1 AND state = 'claimed' AND updated_at = $2",
        )
        .bind(key)
        .bind(updated_at)
        .execute()
        .await?;
        Ok(done == 1)
    }

    /// Gives a claim back when nothing was sent, so the same confirmation can be tried
    /// again (rate limited, or the service unreachable before the command left). `false`
    /// when it was neither claimed nor sent any more (the reconciler took over a command
    /// sent long ago, to send it again under its key): then it stays.
    pub async fn release(&self, key: &str) -> Result<bool, StoreError> {
        let done = self
            .db
            .query("DELETE FROM operations WHERE request_key = $1 AND state IN ('claimed', 'sent')")
            .bind(key)
            .execute()
            .await?;
        Ok(done == 1)
    }

    /// Moves an operation sent and untouched since `updated_at` to unknown: its sender
    /// has not answered within the wait, and the reconciler takes it over. An operation
    /// that moved on meanwhile is left alone. `true` when it was taken over.
    pub async fn take_over_sent(&self, key: &str, updated_at: i64) -> Result<bool, StoreError> {
        let done = self
            .db
            .query(
                "UPDATE operations SET state = 'unknown', updated_at = $1 \
             WHERE request_key = $2 AND state = 'sent' AND updated_at = $3",
            )
            .bind(now_ms())
            .bind(key)
            .bind(updated_at)
            .execute()
            .await?;
        Ok(done == 1)
    }

    /// The sender's latest operation (what `check_subscription_change` looks at).
    pub async fn latest_for_sender(&self, sender: &str) -> Result<Option<Operation>, StoreError> {
        let row = self
            .db
            .query(latest_for_sender_sql())
            .bind(sender)
            .fetch_optional()
            .await?;
        row.map(|r| operation_from(&r)).transpose()
    }

    /// Operations whose outcome is not known (claimed, sent or unknown), untouched for
    /// `min_age`.
    pub async fn unresolved(&self, min_age: Duration) -> Result<Vec<Operation>, StoreError> {
        let before = now_ms() - min_age.as_millis() as i64;
        let rows = self
            .db
            .query(unresolved_sql())
            .bind(before)
            .fetch_all()
            .await?;
        rows.iter().map(operation_from).collect()
    }

    /// Resolves an operation sent or unknown as applied, with its outcome. `false` when it
    /// was in neither state (resolved already, by another replica or the reconciler).
    pub async fn resolve_applied(&self, key: &str, outcome: &Outcome) -> Result<bool, StoreError> {
        let outcome = serde_json::to_string(outcome)?;
        let done = self
            .db
            .query(
                "UPDATE operations SET state = 'applied', outcome = $1, updated_at = $2 \
             WHERE request_key = $3 AND state IN ('sent', 'unknown')",
            )
            .bind(outcome)
            .bind(now_ms())
            .bind(key)
            .execute()
            .await?;
        Ok(done == 1)
    }
}

pub(super) const OP_COLUMNS: &str = "request_key, sender_id, account, subscription, change_type, revision, terms, state, outcome, created_at, updated_at, asked_at";

/// How many columns [`OP_COLUMNS`] names.
const OP_FIELDS: usize = 12;

/// The operation under `$1` and the subscription `$2`'s open one (at most one each: the
/// key and the open operation per subscription are unique), and a row for a held change
/// under `$1` (its approval's key, the rest null); the last column says which table a row
/// is from. Each part is read through an index: the key's, the partial index of open
/// operations (`migrations/*/0010`), the approvals' key.
fn repeats_sql() -> String {
    format!(
        "SELECT {OP_COLUMNS}, 'operation' FROM operations WHERE request_key = $1 \
         OR (subscription = $2 AND state NOT IN ('applied', 'failed')) \
         UNION ALL SELECT request_key, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, \
         NULL, NULL, 'approval' FROM approvals WHERE request_key = $1"
    )
}

/// An operation as stored: its terms and outcome read back as the types written, or
/// [`StoreError::Corrupt`].
pub(super) fn operation_from(r: &Row) -> Result<Operation, StoreError> {
    let request_key: String = r.get(0);
    let corrupt = |what, e: serde_json::Error| StoreError::Corrupt {
        what,
        key: request_key.clone(),
        why: e.to_string(),
    };
    let terms = serde_json::from_str(r.str(6)).map_err(|e| corrupt("terms", e))?;
    let outcome = r
        .opt_str(8)
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| corrupt("outcome", e))?;
    Ok(Operation {
        sender_id: r.get(1),
        account: r.get(2),
        subscription: r.get(3),
        change_type: r.get(4),
        revision: r.get(5),
        terms,
        state: OpState::parse(r.str(7)),
        outcome,
        created_at: r.get(9),
        updated_at: r.get(10),
        asked_at: r.get(11),
        request_key,
    })
}

/// The claim of a request key: no row when the key is taken or the subscription has an
/// open operation (the partial unique index of `migrations/*/0010`).
const CLAIM_SQL: &str = "INSERT INTO operations (request_key, sender_id, account, subscription, change_type, revision, \
     terms, state, outcome, created_at, updated_at, asked_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $10, NULL, $8, $8, $9) \
     ON CONFLICT DO NOTHING";

/// An operation's move to state `$1`, with its outcome `$2` when known, unless it has a
/// final outcome already.
const SET_STATE_SQL: &str =
    "UPDATE operations SET state = $1, outcome = COALESCE($2, outcome), updated_at = $3 \
     WHERE request_key = $4 AND state NOT IN ('applied', 'failed')";

/// The open operations untouched since `$1`: read through the partial index of open
/// operations (`migrations/*/0010`), a few rows whatever the history.
fn unresolved_sql() -> String {
    format!(
        "SELECT {OP_COLUMNS} FROM operations WHERE state NOT IN ('applied', 'failed') AND updated_at <= $1 ORDER BY created_at"
    )
}

/// A sender's latest operation: read through the `operations_sender` index
/// (`migrations/*/0009`).
fn latest_for_sender_sql() -> String {
    format!(
        "SELECT {OP_COLUMNS} FROM operations WHERE sender_id = $1 ORDER BY created_at DESC LIMIT 1"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLite's plan for a sender's latest operation searches the index and reads it
    /// backwards for the order: no scan of the table, no sort.
    #[tokio::test]
    async fn a_senders_latest_operation_is_found_through_its_index() {
        let steps = plan(&latest_for_sender_sql(), 1).await;
        assert_eq!(
            steps,
            ["SEARCH operations USING INDEX operations_sender (sender_id=?)"],
            "{steps:?}"
        );
    }

    /// The query before a claim reads each of its parts through an index, whatever the
    /// history: no scan of the operations nor of the approvals.
    #[tokio::test]
    async fn what_stands_before_a_claim_is_found_through_indexes() {
        let steps = plan(&repeats_sql(), 2).await;
        let reads: Vec<&str> = steps
            .iter()
            .map(String::as_str)
            .filter(|s| s.starts_with("SEARCH") || s.starts_with("SCAN"))
            .collect();
        assert_eq!(
            reads,
            [
                "SEARCH operations USING INDEX sqlite_autoindex_operations_1 (request_key=?)",
                "SEARCH operations USING INDEX operations_open_per_subscription (subscription=?)",
                "SEARCH approvals USING COVERING INDEX sqlite_autoindex_approvals_1 (request_key=?)",
            ],
            "{steps:?}"
        );
    }

    /// The column that says which table a row is from comes right after the operation's.
    #[test]
    fn the_marker_column_follows_the_operations_columns() {
        assert_eq!(OP_COLUMNS.split(", ").count(), OP_FIELDS);
    }

    async fn sqlite_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("store.db").display());
        let store = Store::connect(&url).await.unwrap();
        (dir, store)
    }

    /// SQLite's plan for `sql` on a fresh store, its `params` parameters bound to null
    /// (a plan is made before any value is read): one line a step.
    async fn plan(sql: &str, params: usize) -> Vec<String> {
        let (_dir, store) = sqlite_store().await;
        let mut query = store.db.query(format!("EXPLAIN QUERY PLAN {sql}"));
        for _ in 0..params {
            query = query.bind(Option::<String>::None);
        }
        let rows = query.fetch_all().await.unwrap();
        rows.iter().map(|row| row.str(3).to_owned()).collect()
    }

    /// The reconciler's open operations are read through the partial index of open ones,
    /// not a scan of every operation ever stored.
    #[tokio::test]
    async fn the_open_operations_are_found_through_their_partial_index() {
        let steps = plan(&unresolved_sql(), 1).await;
        assert_eq!(
            steps[0], "SCAN operations USING INDEX operations_open_per_subscription",
            "{steps:?}"
        );
    }

    /// A claim, and every move of an operation, tests the open-operation rule's condition
    /// in place: no temporary b-tree built for it (an IN list of three states built one on
    /// each claim and each move, about a tenth of the store's CPU on a new change).
    #[tokio::test]
    async fn the_claim_and_the_moves_build_no_temporary_b_tree() {
        let (_dir, store) = sqlite_store().await;
        let moves = [(CLAIM_SQL, 10), (SET_STATE_SQL, 4)];
        for (sql, params) in moves {
            let mut query = store.db.query(format!("EXPLAIN {sql}"));
            for _ in 0..params {
                query = query.bind(Option::<String>::None);
            }
            let program = query.fetch_all().await.unwrap();
            let opcodes: Vec<&str> = program.iter().map(|row| row.str(1)).collect();
            assert!(opcodes.contains(&"IdxInsert"), "{sql}: {opcodes:?}");
            assert!(!opcodes.contains(&"OpenEphemeral"), "{sql}: {opcodes:?}");
        }
    }
}
