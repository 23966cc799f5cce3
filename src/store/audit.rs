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
pub(super) enum AuditWrite {
    Entry(AuditEntry),
    /// Answer once everything queued before is committed.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Entries queued for the audit writer at most; past it, [`Store::audit`] waits for room.
pub(super) const AUDIT_QUEUE: usize = 16_384;

/// Entries written in one transaction at most (in statements of AUDIT_ROWS rows).
const AUDIT_BATCH: usize = 512;

/// A batch that could not be written is tried again every 100 ms, 50 times (five seconds
/// of a database away), before its entries are logged as lost.
fn audit_retry() -> backon::ConstantBuilder {
    backon::ConstantBuilder::new()
        .with_delay(Duration::from_millis(100))
        .with_max_times(50)
}

/// How long the writer waits for more entries after the first of a batch.
const AUDIT_LINGER: Duration = Duration::from_millis(2);

/// The audit writer: takes what is queued, writes it in one transaction, and again. A
/// request's entry is committed within one such transaction after its answer (a few
/// milliseconds), and a burst of requests costs one commit, not one each. A failed batch is
/// tried again (the entries are kept, and logged if the database stays down).
pub(super) async fn write_audit(db: Arc<Db>, mut queue: tokio::sync::mpsc::Receiver<AuditWrite>) {
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
    /// it within milliseconds (see [`Store::flush_audit`]). Waits only when the queue is
    /// full.
    pub async fn audit(&self, entry: AuditEntry) -> Result<(), StoreError> {
        if let Err(refused) = self.audit.send(AuditWrite::Entry(entry)).await {
            // The writer is gone (the runtime is stopping): write it here.
            if let AuditWrite::Entry(entry) = refused.0 {
                insert_audit(&self.db, std::slice::from_ref(&entry)).await?;
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
