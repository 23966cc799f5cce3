//! The Stripe provider's readings of each subscription (`stripe_readings`): the facts seen
//! under each fingerprint, shared by replicas and kept across restarts, the newest few.

use super::{now_ms, Store, StoreError};

impl Store {
    /// The readings of `subscription`, newest first, at most `kept`: each its fingerprint
    /// and its facts (JSON).
    pub async fn stripe_readings(
        &self,
        subscription: &str,
        kept: usize,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let rows = self.db.query(
            "SELECT revision, facts FROM stripe_readings WHERE subscription = $1 ORDER BY read_at DESC, revision LIMIT $2",
        )
        .bind(subscription)
        .bind(kept as i64)
        .fetch_all()
        .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Keeps a reading under its fingerprint, once (a fingerprint read again is already
    /// kept), and forgets all but the newest `kept` of the subscription.
    pub async fn keep_stripe_reading(
        &self,
        subscription: &str,
        revision: i64,
        facts: &str,
        kept: usize,
    ) -> Result<(), StoreError> {
        let added = self.db.query(
            "INSERT INTO stripe_readings (subscription, revision, facts, read_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (subscription, revision) DO NOTHING",
        )
        .bind(subscription)
        .bind(revision)
        .bind(facts)
        .bind(now_ms())
        .execute()
        .await?;
        if added == 1 {
            self.db.query(
                "DELETE FROM stripe_readings WHERE subscription = $1 AND revision NOT IN \
                 (SELECT revision FROM stripe_readings WHERE subscription = $1 ORDER BY read_at DESC, revision LIMIT $2)",
            )
            .bind(subscription)
            .bind(kept as i64)
            .execute()
            .await?;
        }
        Ok(())
    }
}
