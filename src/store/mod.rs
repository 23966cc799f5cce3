//! The server's own records, through sqlx: operations (one per request key), the audit
//! trail, the per-account rate limits, held changes ([`Approval`]) and service events. A
//! SQLite file by default, PostgreSQL when the URL says so; the same schema and the same
//! statements on both.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

mod approvals;
mod migrations;

pub use approvals::{Approval, ApprovalState, OperationFilter, OperatorSession};
pub use contract::operation::OpState;
use contract::outcome::{Outcome, Terms};

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
    #[error("unsupported database URL `{0}` (use sqlite:PATH or postgres://...)")]
    Url(String),
    #[error("the schema could not be brought up to date: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A stored value that does not read as what was written (edited by hand, or a
    /// schema from elsewhere): nothing is concluded from it.
    #[error("the stored {what} of {key} could not be read: {why}")]
    Corrupt {
        what: &'static str,
        key: String,
        why: String,
    },
    #[error("a value could not be written: {0}")]
    Encode(#[from] serde_json::Error),
}

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
}

/// One decision, as the audit trail keeps it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AuditEntry {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<i64>,
    /// Milliseconds since the epoch.
    pub at: i64,
    pub action: String,
    pub sender_id: String,
    pub account: Option<String>,
    /// `subscription change_type`, as requested.
    pub target: Option<String>,
    /// The terms read out in the question (JSON).
    pub question_terms: Option<String>,
    /// The service's terms (JSON).
    pub service_terms: Option<String>,
    pub status: String,
    pub reason: Option<String>,
    pub request_key: Option<String>,
    /// The person who decided (an approval or rejection), when one did.
    pub operator: Option<String>,
}

/// The database.
#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    postgres: bool,
    audit: tokio::sync::mpsc::Sender<AuditWrite>,
    finished: Arc<Mutex<Finished>>,
}

/// Operations with their final outcome, by request key, as last read or written. A final
/// outcome never changes (no statement moves an applied or failed operation, on any
/// replica), so a repeat of a finished "yes" is answered from here without the database.
/// Bounded: the oldest are forgotten first (and read from the database again if asked).
#[derive(Default)]
struct Finished {
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

/// What the audit writer is asked to do.
#[allow(clippy::large_enum_variant)] // nearly every message is an entry: boxing would allocate for each
enum AuditWrite {
    Entry(AuditEntry),
    /// Answer once everything queued before is committed.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Entries queued for the audit writer at most; past it, [`Store::audit`] waits for room.
const AUDIT_QUEUE: usize = 16_384;

/// Entries written in one transaction at most (in statements of AUDIT_ROWS rows).
const AUDIT_BATCH: usize = 512;

/// How long the writer waits for more entries after the first of a batch.
const AUDIT_LINGER: Duration = Duration::from_millis(2);

/// The audit writer: takes what is queued, writes it in one transaction, and again. A
/// request's entry is committed within one such transaction after its answer (a few
/// milliseconds), and a burst of requests costs one commit, not one each. A failed batch is
/// tried again (the entries are kept, and logged if the database stays down).
async fn write_audit(
    pool: AnyPool,
    postgres: bool,
    mut queue: tokio::sync::mpsc::Receiver<AuditWrite>,
) {
    let mut batch = Vec::with_capacity(AUDIT_BATCH);
    let mut flushes = Vec::new();
    while let Some(first) = queue.recv().await {
        // Under load, let a burst gather: one statement for many requests.
        if queue.len() < AUDIT_BATCH {
            tokio::time::sleep(AUDIT_LINGER).await;
        }
        let mut next = Some(first);
        while let Some(item) = next.take() {
            match item {
                AuditWrite::Entry(entry) => batch.push(entry),
                AuditWrite::Flush(done) => flushes.push(done),
            }
            if batch.len() < AUDIT_BATCH {
                next = queue.try_recv().ok();
            }
        }
        let mut attempt = 0;
        while !batch.is_empty() {
            match insert_audit(&pool, postgres, &batch).await {
                Ok(()) => batch.clear(),
                Err(e) if attempt < 50 => {
                    attempt += 1;
                    tracing::warn!(error = %e, entries = batch.len(), "the audit trail could not be written; trying again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => {
                    for entry in batch.drain(..) {
                        tracing::error!(error = %e, action = %entry.action, sender = %entry.sender_id, status = %entry.status, "an audit entry was lost");
                    }
                }
            }
        }
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
    }
}

async fn insert_audit(
    pool: &AnyPool,
    postgres: bool,
    entries: &[AuditEntry],
) -> Result<(), sqlx::Error> {
    if entries.len() <= AUDIT_ROWS {
        return insert_audit_rows(pool, postgres, entries).await;
    }
    let mut tx = pool.begin().await?;
    for rows in entries.chunks(AUDIT_ROWS) {
        insert_audit_rows(&mut *tx, postgres, rows).await?;
    }
    tx.commit().await
}

/// Rows of one INSERT at most (a batch of AUDIT_BATCH is a few statements, each prepared
/// once per connection and row count).
const AUDIT_ROWS: usize = 64;

/// One multi-row INSERT. SQLite gets anonymous `?` placeholders: sqlx asks SQLite the name
/// of every parameter it binds, a walk of all the statement's named ones, so `$n` would
/// cost the square of the parameters; anonymous ones have no name to look up.
async fn insert_audit_rows<'e, E: sqlx::Executor<'e, Database = sqlx::Any>>(
    db: E,
    postgres: bool,
    entries: &[AuditEntry],
) -> Result<(), sqlx::Error> {
    let mut sql = String::from(
        "INSERT INTO audit (at, action, sender_id, account, target, question_terms, service_terms, status, reason, request_key, operator) VALUES ",
    );
    for i in 0..entries.len() {
        let n = i * 11;
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for column in 1..=11 {
            if column > 1 {
                sql.push_str(", ");
            }
            if postgres {
                sql.push('$');
                sql.push_str(&(n + column).to_string());
            } else {
                sql.push('?');
            }
        }
        sql.push(')');
    }
    let mut query = sqlx::query(&sql);
    for entry in entries {
        query = query
            .bind(entry.at)
            .bind(&entry.action)
            .bind(&entry.sender_id)
            .bind(&entry.account)
            .bind(&entry.target)
            .bind(&entry.question_terms)
            .bind(&entry.service_terms)
            .bind(&entry.status)
            .bind(&entry.reason)
            .bind(&entry.request_key)
            .bind(&entry.operator);
    }
    query.execute(db).await?;
    Ok(())
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Store {
    /// Connects and applies the migrations. `sqlite:PATH` (created when missing) or
    /// `postgres://...`.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
        let url = if postgres {
            url.to_owned()
        } else if let Some(path) = url.strip_prefix("sqlite:") {
            let path = path.trim_start_matches("//");
            let (path, query) = path.split_once('?').unwrap_or((path, ""));
            if let Some(parent) = std::path::Path::new(path).parent() {
                if !parent.as_os_str().is_empty() {
                    let _ = std::fs::create_dir_all(parent);
                }
            }
            let query = if query.is_empty() {
                "mode=rwc".to_owned()
            } else {
                query.to_owned()
            };
            format!("sqlite://{path}?{query}")
        } else {
            return Err(StoreError::Url(url.to_owned()));
        };
        let pool = AnyPoolOptions::new()
            .max_connections(if postgres { 16 } else { 4 })
            .acquire_timeout(Duration::from_secs(10))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if !postgres {
                        sqlx::query("PRAGMA journal_mode = WAL")
                            .execute(&mut *conn)
                            .await?;
                        sqlx::query("PRAGMA busy_timeout = 10000")
                            .execute(&mut *conn)
                            .await?;
                        sqlx::query("PRAGMA synchronous = NORMAL")
                            .execute(&mut *conn)
                            .await?;
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await?;
        migrations::apply(&pool, postgres).await?;
        let (audit, queue) = tokio::sync::mpsc::channel(AUDIT_QUEUE);
        tokio::spawn(write_audit(pool.clone(), postgres, queue));
        Ok(Self {
            pool,
            postgres,
            audit,
            finished: Arc::default(),
        })
    }

    pub fn is_postgres(&self) -> bool {
        self.postgres
    }

    /// Closes the store's connections: every later use fails (readiness included).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Readiness: the store answers, and its schema is this build's (every migration up
    /// to the newest recorded as applied). The reason names no address or credential.
    pub async fn ready(&self) -> Result<(), String> {
        let wanted = migrations::latest_version();
        let applied: i64 = sqlx::query_scalar(
            "SELECT COUNT(DISTINCT version) FROM _sqlx_migrations WHERE success AND version <= $1",
        )
        .bind(wanted)
        .fetch_one(&self.pool)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "readiness: the store did not answer");
            "the store cannot be reached".to_owned()
        })?;
        if applied >= wanted {
            Ok(())
        } else {
            Err(format!(
                "the store's schema has {applied} of this build's {wanted} migrations"
            ))
        }
    }

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
        let row = sqlx::query(&format!(
            "SELECT {OP_COLUMNS} FROM operations WHERE request_key = $1"
        ))
        .bind(key)
        .fetch_optional(&self.pool)
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
        let done = sqlx::query(
            "INSERT INTO operations (request_key, sender_id, account, subscription, change_type, revision, \
             terms, state, outcome, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, 'claimed', NULL, $8, $8) \
             ON CONFLICT DO NOTHING",
        )
        .bind(&op.request_key)
        .bind(&op.sender_id)
        .bind(&op.account)
        .bind(&op.subscription)
        .bind(&op.change_type)
        .bind(op.revision)
        .bind(serde_json::to_string(&op.terms)?)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(Claim::Claimed);
        }
        // Either constraint refused it: the key's own row, or the subscription's open one.
        Ok(if self.operation(&op.request_key).await?.is_some() {
            Claim::KeyTaken
        } else {
            Claim::SubscriptionBusy
        })
    }

    /// In one query: the operation under `key`, and another operation for `subscription`
    /// whose outcome is not known yet (claimed, sent or unknown), each if there is one.
    pub async fn operation_and_open(
        &self,
        key: &str,
        subscription: &str,
    ) -> Result<(Option<Operation>, Option<Operation>), StoreError> {
        // A finished operation under the key decides alone (R1): the open one is not asked.
        if let Some(op) = self.finished(key) {
            return Ok((Some(op), None));
        }
        let rows = sqlx::query(&format!(
            "SELECT {OP_COLUMNS} FROM operations WHERE request_key = $1 \
             OR (subscription = $2 AND state IN ('claimed', 'sent', 'unknown')) LIMIT 2"
        ))
        .bind(key)
        .bind(subscription)
        .fetch_all(&self.pool)
        .await?;
        let (mine, others): (Vec<Operation>, Vec<Operation>) = rows
            .iter()
            .map(operation_from)
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .partition(|op| op.request_key == key);
        let mine = mine.into_iter().next();
        if let Some(op) = &mine {
            self.remember(op);
        }
        Ok((mine, others.into_iter().next()))
    }

    /// The subscription's operation whose outcome is not known yet (claimed, sent or
    /// unknown), if there is one.
    pub async fn open_operation(
        &self,
        subscription: &str,
    ) -> Result<Option<Operation>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {OP_COLUMNS} FROM operations WHERE subscription = $1 AND state IN ('claimed', 'sent', 'unknown') LIMIT 1"
        ))
        .bind(subscription)
        .fetch_optional(&self.pool)
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
        let done = sqlx::query(
            "UPDATE operations SET state = $1, outcome = COALESCE($2, outcome), updated_at = $3 \
             WHERE request_key = $4 AND state NOT IN ('applied', 'failed')",
        )
        .bind(state.as_str())
        .bind(outcome)
        .bind(now_ms())
        .bind(key)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Moves a claimed operation to sent, the moment before its command goes out. `false`
    /// when it is no longer claimed (the reconciler took back a claim it thought left
    /// behind): then the command must not be sent.
    pub async fn mark_sent(&self, key: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE operations SET state = 'sent', updated_at = $1 WHERE request_key = $2 AND state = 'claimed'",
        )
        .bind(now_ms())
        .bind(key)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Takes back a claim left behind (claimed and untouched since `updated_at`): the
    /// process that made it stopped before sending. An operation that moved on meanwhile is
    /// left alone. `true` when it was taken back.
    pub async fn release_stale_claim(
        &self,
        key: &str,
        updated_at: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "DELETE FROM operations WHERE request_key = $1 AND state = 'claimed' AND updated_at = $2",
        )
        .bind(key)
        .bind(updated_at)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Gives a claim back when nothing was sent, so the same confirmation can be tried
    /// again (rate limited, or the service unreachable before the command left).
    pub async fn release(&self, key: &str) -> Result<(), StoreError> {
        sqlx::query(
            "DELETE FROM operations WHERE request_key = $1 AND state IN ('claimed', 'sent')",
        )
        .bind(key)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The sender's latest operation (what `check_subscription_change` looks at).
    pub async fn latest_for_sender(&self, sender: &str) -> Result<Option<Operation>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {OP_COLUMNS} FROM operations WHERE sender_id = $1 ORDER BY created_at DESC LIMIT 1"
        ))
        .bind(sender)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| operation_from(&r)).transpose()
    }

    /// Operations whose outcome is not known (claimed, sent or unknown), untouched for
    /// `min_age`.
    pub async fn unresolved(&self, min_age: Duration) -> Result<Vec<Operation>, StoreError> {
        let before = now_ms() - min_age.as_millis() as i64;
        let rows = sqlx::query(&format!(
            "SELECT {OP_COLUMNS} FROM operations WHERE state IN ('claimed', 'sent', 'unknown') AND updated_at <= $1 ORDER BY created_at"
        ))
        .bind(before)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(operation_from).collect()
    }

    /// Takes one token from the account's bucket (shared by every replica using this
    /// database). `false`: the budget is spent.
    pub async fn take_token(
        &self,
        account: &str,
        capacity: f64,
        per_second: f64,
    ) -> Result<bool, StoreError> {
        let now = now_ms();
        sqlx::query(
            "INSERT INTO rate_buckets (account, tokens, updated_at) VALUES ($1, CAST($2 AS DOUBLE PRECISION), $3) \
             ON CONFLICT (account) DO NOTHING",
        )
        .bind(account)
        .bind(capacity)
        .bind(now)
        .execute(&self.pool)
        .await?;
        // One statement: refill by the time elapsed (capped), then take one if there is one.
        let refilled = "(CASE WHEN tokens + (CASE WHEN CAST($2 AS BIGINT) > updated_at THEN CAST($2 AS BIGINT) - updated_at ELSE 0 END) \
             * CAST($3 AS DOUBLE PRECISION) > CAST($4 AS DOUBLE PRECISION) THEN CAST($4 AS DOUBLE PRECISION) \
             ELSE tokens + (CASE WHEN CAST($2 AS BIGINT) > updated_at THEN CAST($2 AS BIGINT) - updated_at ELSE 0 END) \
             * CAST($3 AS DOUBLE PRECISION) END)";
        let done = sqlx::query(&format!(
            "UPDATE rate_buckets SET tokens = {refilled} - 1, updated_at = CAST($2 AS BIGINT) \
             WHERE account = $1 AND {refilled} >= 1"
        ))
        .bind(account)
        .bind(now)
        .bind(per_second / 1000.0)
        .bind(capacity)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Whether the account's bucket holds a token now, without taking it (a held change
    /// spends none until its command is sent).
    pub async fn token_available(
        &self,
        account: &str,
        capacity: f64,
        per_second: f64,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query("SELECT tokens, updated_at FROM rate_buckets WHERE account = $1")
            .bind(account)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            None => capacity >= 1.0,
            Some(row) => {
                let (tokens, updated_at): (f64, i64) = (row.get(0), row.get(1));
                let elapsed = (now_ms() - updated_at).max(0) as f64;
                (tokens + elapsed * per_second / 1000.0).min(capacity) >= 1.0
            }
        })
    }

    /// Appends one decision to the audit trail: queued for the audit writer, which commits
    /// it within milliseconds (see [`Store::flush_audit`]). Waits only when the queue is
    /// full.
    pub async fn audit(&self, entry: AuditEntry) -> Result<(), StoreError> {
        if let Err(refused) = self.audit.send(AuditWrite::Entry(entry)).await {
            // The writer is gone (the runtime is stopping): write it here.
            if let AuditWrite::Entry(entry) = refused.0 {
                insert_audit(&self.pool, self.postgres, std::slice::from_ref(&entry)).await?;
            }
        }
        Ok(())
    }

    /// Until every audit entry queued so far is committed.
    pub async fn flush_audit(&self) {
        let (done, committed) = tokio::sync::oneshot::channel();
        if self.audit.send(AuditWrite::Flush(done)).await.is_ok() {
            let _ = committed.await;
        }
    }

    /// Reads the audit trail, oldest first (after what this process queued is committed).
    pub async fn audit_entries(
        &self,
        sender: Option<&str>,
        since_ms: Option<i64>,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.flush_audit().await;
        let rows = sqlx::query(
            "SELECT id, at, action, sender_id, account, target, question_terms, service_terms, status, reason, request_key, operator \
             FROM audit WHERE (CAST($1 AS TEXT) IS NULL OR sender_id = CAST($1 AS TEXT)) AND at >= $2 ORDER BY id",
        )
        .bind(sender)
        .bind(since_ms.unwrap_or(0))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| AuditEntry {
                id: Some(r.get(0)),
                at: r.get(1),
                action: r.get(2),
                sender_id: r.get(3),
                account: r.get(4),
                target: r.get(5),
                question_terms: r.get(6),
                service_terms: r.get(7),
                status: r.get(8),
                reason: r.get(9),
                request_key: r.get(10),
                operator: r.get(11),
            })
            .collect())
    }

    /// Drops audit entries older than the retention period; returns how many.
    pub async fn prune_audit(&self, retention: Duration) -> Result<u64, StoreError> {
        let before = now_ms() - retention.as_millis() as i64;
        let done = sqlx::query("DELETE FROM audit WHERE at < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}

/// One service event as received, and what was made of it.
#[derive(Debug, Clone, Serialize)]
pub struct ReceivedEvent {
    pub id: String,
    /// Milliseconds since the epoch.
    pub received_at: i64,
    pub kind: String,
    pub subscription: String,
    pub account: String,
    pub revision: i64,
    pub request_key: Option<String>,
    /// `resolved`, `confirmed`, `recorded`, `stale` or `mismatch` (`received` while it
    /// is being processed).
    pub verdict: String,
    /// For a mismatch: what contradicts what.
    pub detail: Option<String>,
    /// The event as delivered (JSON).
    pub body: String,
}

impl Store {
    /// Gives back a taken event that could not be processed, so its redelivery is taken.
    pub async fn release_event(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM service_events WHERE id = $1 AND verdict = 'received'")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Takes a received event for processing: recorded as `received`; `false` when its id
    /// was taken already (a duplicate, or the same delivery on another replica at the same
    /// moment). A take left `received` for longer than `abandoned` (its process stopped
    /// before finishing) may be taken again, so a redelivery is not lost to it.
    pub async fn take_event(
        &self,
        event: &ReceivedEvent,
        abandoned: Duration,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "INSERT INTO service_events (id, received_at, kind, subscription, account, revision, request_key, verdict, detail, body) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'received', NULL, $8) \
             ON CONFLICT (id) DO UPDATE SET received_at = excluded.received_at \
             WHERE service_events.verdict = 'received' AND service_events.received_at < $9",
        )
        .bind(&event.id)
        .bind(event.received_at)
        .bind(&event.kind)
        .bind(&event.subscription)
        .bind(&event.account)
        .bind(event.revision)
        .bind(&event.request_key)
        .bind(&event.body)
        .bind(event.received_at - abandoned.as_millis() as i64)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Records what was made of a taken event.
    pub async fn finish_event(
        &self,
        id: &str,
        verdict: &str,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE service_events SET verdict = $1, detail = $2 WHERE id = $3")
            .bind(verdict)
            .bind(detail)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Received events, oldest first; only those with `verdict` when given.
    pub async fn received_events(
        &self,
        verdict: Option<&str>,
    ) -> Result<Vec<ReceivedEvent>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, received_at, kind, subscription, account, revision, request_key, verdict, detail, body \
             FROM service_events WHERE (CAST($1 AS TEXT) IS NULL OR verdict = CAST($1 AS TEXT)) ORDER BY received_at, id",
        )
        .bind(verdict)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| ReceivedEvent {
                id: r.get(0),
                received_at: r.get(1),
                kind: r.get(2),
                subscription: r.get(3),
                account: r.get(4),
                revision: r.get(5),
                request_key: r.get(6),
                verdict: r.get(7),
                detail: r.get(8),
                body: r.get(9),
            })
            .collect())
    }

    /// Remembers `record` (JSON, at `revision`) as the subscription's newest known record,
    /// unless a newer one is known. `true` when this event's record is now the known one
    /// (also when the same event was applied before); `false`: the event is stale.
    pub async fn advance_known_record(
        &self,
        subscription: &str,
        revision: i64,
        event_id: &str,
        record: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "INSERT INTO known_records (subscription, revision, event_id, record, updated_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (subscription) DO UPDATE SET revision = excluded.revision, event_id = excluded.event_id, \
             record = excluded.record, updated_at = excluded.updated_at WHERE known_records.revision < excluded.revision",
        )
        .bind(subscription)
        .bind(revision)
        .bind(event_id)
        .bind(record)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(true);
        }
        Ok(self
            .known_record(subscription)
            .await?
            .is_some_and(|(_, id, _)| id == event_id))
    }

    /// The newest record an event reported for the subscription: revision, event id, record
    /// (JSON).
    pub async fn known_record(
        &self,
        subscription: &str,
    ) -> Result<Option<(i64, String, String)>, StoreError> {
        let row = sqlx::query(
            "SELECT revision, event_id, record FROM known_records WHERE subscription = $1",
        )
        .bind(subscription)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| (r.get(0), r.get(1), r.get(2))))
    }

    /// Resolves an operation sent or unknown as applied, with its outcome. `false` when it
    /// was in neither state (resolved already, by another replica or the reconciler).
    pub async fn resolve_applied(&self, key: &str, outcome: &Outcome) -> Result<bool, StoreError> {
        let outcome = serde_json::to_string(outcome)?;
        let done = sqlx::query(
            "UPDATE operations SET state = 'applied', outcome = $1, updated_at = $2 \
             WHERE request_key = $3 AND state IN ('sent', 'unknown')",
        )
        .bind(outcome)
        .bind(now_ms())
        .bind(key)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }
}

const OP_COLUMNS: &str = "request_key, sender_id, account, subscription, change_type, revision, terms, state, outcome, created_at, updated_at";

/// An operation as stored: its terms and outcome read back as the types written, or
/// [`StoreError::Corrupt`].
fn operation_from(r: &AnyRow) -> Result<Operation, StoreError> {
    let request_key: String = r.get(0);
    let corrupt = |what, e: serde_json::Error| StoreError::Corrupt {
        what,
        key: request_key.clone(),
        why: e.to_string(),
    };
    let terms = serde_json::from_str(r.get::<&str, _>(6)).map_err(|e| corrupt("terms", e))?;
    let outcome = r
        .get::<Option<&str>, _>(8)
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
        state: OpState::parse(r.get::<&str, _>(7)),
        outcome,
        created_at: r.get(9),
        updated_at: r.get(10),
        request_key,
    })
}
