//! The service's change events as received (taken once across replicas, with their
//! verdicts), and the newest record each subscription's events made known.

use std::time::Duration;

use serde::Serialize;

use super::{now_ms, Store, StoreError};

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
        self.db
            .query("DELETE FROM service_events WHERE id = $1 AND verdict = 'received'")
            .bind(id)
            .execute()
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
        let done = self.db.query(
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
        .execute()
        .await?;
        Ok(done == 1)
    }

    /// Records what was made of a taken event.
    pub async fn finish_event(
        &self,
        id: &str,
        verdict: &str,
        detail: Option<&str>,
    ) -> Result<(), StoreError> {
        self.db
            .query("UPDATE service_events SET verdict = $1, detail = $2 WHERE id = $3")
            .bind(verdict)
            .bind(detail)
            .bind(id)
            .execute()
            .await?;
        Ok(())
    }

    /// Received events, oldest first; only those with `verdict` when given.
    pub async fn received_events(
        &self,
        verdict: Option<&str>,
    ) -> Result<Vec<ReceivedEvent>, StoreError> {
        let rows = self.db.query(
            "SELECT id, received_at, kind, subscription, account, revision, request_key, verdict, detail, body \
             FROM service_events WHERE (CAST($1 AS TEXT) IS NULL OR verdict = CAST($1 AS TEXT)) ORDER BY received_at, id",
        )
        .bind(verdict)
        .fetch_all()
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
        let done = self.db.query(
            "INSERT INTO known_records (subscription, revision, event_id, record, updated_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (subscription) DO UPDATE SET revision = excluded.revision, event_id = excluded.event_id, \
             record = excluded.record, updated_at = excluded.updated_at WHERE known_records.revision < excluded.revision",
        )
        .bind(subscription)
        .bind(revision)
        .bind(event_id)
        .bind(record)
        .bind(now_ms())
        .execute()
        .await?;
        if done == 1 {
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
        let row = self
            .db
            .query("SELECT revision, event_id, record FROM known_records WHERE subscription = $1")
            .bind(subscription)
            .fetch_optional()
            .await?;
        Ok(row.map(|r| (r.get(0), r.get(1), r.get(2))))
    }
}
