//! The audit trail: one entry per decision, queued and written in batches by one writer
//! task, read back for `actiongate audit` and the console, pruned past its retention.

use std::time::Duration;

use super::db::{Db, Query};
use super::{now_ms, Store, StoreError};
use backon::Retryable;
use serde::Serialize;
use std::sync::Arc;

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

/// A batch that could not be written is tried again every 100 ms, 50 times (five seconds
/// of a database away), before its entries are logged as lost.
fn audit_retry() -> backon::ConstantBuilder {
    backon::ConstantBuilder::new()
        .with_delay(Duration::from_millis(100))
        .with_max_times(50)
}

/// How long the writer waits for more entries after the first of a batch, unless a flush
/// asks for them sooner. Under a steady load it makes the batches: at 2 ms a batch held a
/// few changes' entries, and the writer woke, committed and went back to sleep for each
/// batch: 6–9 % of the server's CPU a new change; at 20 ms, half of that (README, "The
/// audit writer's batches"). The price: a crash loses the entries of the last 20 ms, where
/// it lost those of the last 2 (their operations are committed before the command and
/// before the answer, as ever).
pub(super) const AUDIT_LINGER: Duration = Duration::from_millis(20);

/// Where the store's audit entries go: the queue of the writer task ([`write_audit`]), and
/// its wake for a flush.
#[derive(Clone)]
pub(super) struct AuditQueue {
    queue: tokio::sync::mpsc::Sender<AuditWrite>,
    flushing: Arc<tokio::sync::Notify>,
}

impl AuditQueue {
    /// The queue, and its writer spawned on the current runtime, lingering `linger` for
    /// each batch.
    pub(super) fn start(db: Arc<Db>, linger: Duration) -> Self {
        let (queue, entries) = tokio::sync::mpsc::channel(AUDIT_QUEUE);
        let flushing = Arc::new(tokio::sync::Notify::new());
        tokio::spawn(write_audit(db, entries, flushing.clone(), linger));
        Self { queue, flushing }
    }

    /// Queues `entry`; it comes back when the writer is gone.
    async fn send(&self, entry: AuditEntry) -> Result<(), AuditEntry> {
        match self.queue.send(AuditWrite::Entry(entry)).await {
            Err(tokio::sync::mpsc::error::SendError(AuditWrite::Entry(entry))) => Err(entry),
            _ => Ok(()),
        }
    }

    /// Until everything queued before is committed: the flush's mark is queued, then the
    /// writer is woken from its linger.
    async fn flush(&self) {
        let (done, committed) = tokio::sync::oneshot::channel();
        if self.queue.send(AuditWrite::Flush(done)).await.is_ok() {
            self.flushing.notify_one();
            let _ = committed.await;
        }
    }
}

/// The audit writer: takes what is queued, writes it in one transaction, and again. A
/// request's entry is committed within one such transaction after its answer (within
/// [`AUDIT_LINGER`] and the commit), and a burst of requests costs one commit, not one
/// each. A flush ([`AuditQueue::flush`]) ends the wait at once (`flushing` is notified
/// after its mark is queued), so a reader of the trail never waits for the linger. A
/// failed batch is tried again (the entries are kept, and logged if the database stays
/// down).
async fn write_audit(
    db: Arc<Db>,
    mut queue: tokio::sync::mpsc::Receiver<AuditWrite>,
    flushing: Arc<tokio::sync::Notify>,
    linger: Duration,
) {
    let mut batch = Vec::with_capacity(AUDIT_BATCH);
    let mut flushes = Vec::new();
    while let Some(first) = queue.recv().await {
        // Under load, let a burst gather: one statement for many requests. Entries queued
        // meanwhile wake nobody; a flush does. (A flush that finds the writer busy leaves
        // its notice for the next wait, which then ends at once: one batch written early.)
        if queue.len() < AUDIT_BATCH && !matches!(first, AuditWrite::Flush(_)) {
            tokio::select! {
                () = tokio::time::sleep(linger) => {}
                () = flushing.notified() => {}
            }
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
        if !batch.is_empty() {
            let written = (|| insert_audit(&db, &batch))
                .retry(audit_retry())
                .notify(|e, _| {
                    tracing::warn!(error = %e, entries = batch.len(), "the audit trail could not be written; trying again");
                })
                .await;
            if let Err(e) = written {
                for entry in &batch {
                    tracing::error!(error = %e, action = %entry.action, sender = %entry.sender_id, status = %entry.status, "an audit entry was lost");
                }
            }
            batch.clear();
        }
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
    }
}

async fn insert_audit(db: &Db, entries: &[AuditEntry]) -> Result<(), StoreError> {
    let mut statements: Vec<Query<'_>> = entries
        .chunks(AUDIT_ROWS)
        .map(|rows| audit_rows(db, rows))
        .collect();
    if statements.len() == 1 {
        return statements.remove(0).execute().await.map(drop);
    }
    db.execute_all(statements).await
}

/// Rows of one INSERT at most (a batch of AUDIT_BATCH is a few statements, each prepared
/// once per connection and row count).
const AUDIT_ROWS: usize = 64;

/// One multi-row INSERT. SQLite gets anonymous `?` placeholders: finding the number of a
/// named one is a walk of all the statement's names, so `$n` would cost the square of the
/// parameters; anonymous ones have no name to look up.
fn audit_rows<'a>(db: &'a Db, entries: &[AuditEntry]) -> Query<'a> {
    let postgres = db.is_postgres();
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
    let mut query = db.query(sql);
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
    query
}

impl Store {
    /// Appends one decision to the audit trail: queued for the audit writer, which commits
    /// it within [`AUDIT_LINGER`] and a commit (see [`Store::flush_audit`]). Waits only
    /// when the queue is full.
    pub async fn audit(&self, entry: AuditEntry) -> Result<(), StoreError> {
        if let Err(entry) = self.audit.send(entry).await {
            // The writer is gone (the runtime is stopping): write it here.
            insert_audit(&self.db, std::slice::from_ref(&entry)).await?;
        }
        Ok(())
    }

    /// Until every audit entry queued so far is committed (at once: the writer does not
    /// linger for it).
    pub async fn flush_audit(&self) {
        self.audit.flush().await;
    }

    /// Reads the audit trail, oldest first (after what this process queued is committed).
    pub async fn audit_entries(
        &self,
        sender: Option<&str>,
        since_ms: Option<i64>,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.flush_audit().await;
        let rows = self.db.query(
            "SELECT id, at, action, sender_id, account, target, question_terms, service_terms, status, reason, request_key, operator \
             FROM audit WHERE (CAST($1 AS TEXT) IS NULL OR sender_id = CAST($1 AS TEXT)) AND at >= $2 ORDER BY id",
        )
        .bind(sender)
        .bind(since_ms.unwrap_or(0))
        .fetch_all()
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
        let done = self
            .db
            .query("DELETE FROM audit WHERE at < $1")
            .bind(before)
            .execute()
            .await?;
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(sender: &str) -> AuditEntry {
        AuditEntry {
            at: now_ms(),
            action: "apply_subscription_change".to_owned(),
            sender_id: sender.to_owned(),
            status: "applied".to_owned(),
            ..AuditEntry::default()
        }
    }

    /// The rows committed so far, read without asking any writer to flush.
    async fn committed(store: &Store) -> Vec<String> {
        let rows = store
            .db
            .query("SELECT sender_id FROM audit ORDER BY id")
            .fetch_all()
            .await
            .unwrap();
        rows.iter().map(|row| row.str(0).to_owned()).collect()
    }

    /// Entries queued while the writer lingers do not end the wait (that is what makes a
    /// batch); a flush does, at once, and everything queued before it is committed. A
    /// writer of its own with an hour's linger: without the flush's notice the flush
    /// would wait the hour.
    #[tokio::test]
    async fn a_flush_ends_the_linger_and_entries_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("store.db").display());
        let store = Store::connect(&url).await.unwrap();
        let audit = AuditQueue::start(store.db.clone(), Duration::from_secs(3600));
        for sender in ["first", "second"] {
            audit.send(entry(sender)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            committed(&store).await.is_empty(),
            "written before the linger ended"
        );
        tokio::time::timeout(Duration::from_secs(30), audit.flush())
            .await
            .expect("the flush waited for the linger");
        assert_eq!(committed(&store).await, ["first", "second"]);
    }
}
