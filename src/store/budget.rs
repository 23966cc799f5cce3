//! The per-account budget for irreversible changes: a token bucket per account in the
//! store, shared by every replica using it.

use super::db::Query;
use super::{now_ms, Store, StoreError};

impl Store {
    /// Takes one token from the account's bucket (shared by every replica using this
    /// database). `false`: the budget is spent.
    pub async fn take_token(
        &self,
        account: &str,
        capacity: f64,
        per_second: f64,
    ) -> Result<bool, StoreError> {
        // A bucket that holds less than one token when full never gives one.
        if capacity < 1.0 {
            return Ok(false);
        }
        Ok(self.spend(account, capacity, per_second).execute().await? == 1)
    }

    /// The statement that takes one token from the account's bucket: it changes a row
    /// when the bucket held one. A new bucket starts full and gives its first token; an
    /// existing one is refilled by the time elapsed (capped), then gives one if it holds
    /// one. For a capacity of at least one.
    pub(super) fn spend(&self, account: &str, capacity: f64, per_second: f64) -> Query<'_> {
        let refilled = "(CASE WHEN rate_buckets.tokens + (CASE WHEN CAST($2 AS BIGINT) > rate_buckets.updated_at \
             THEN CAST($2 AS BIGINT) - rate_buckets.updated_at ELSE 0 END) * CAST($3 AS DOUBLE PRECISION) \
             > CAST($4 AS DOUBLE PRECISION) THEN CAST($4 AS DOUBLE PRECISION) \
             ELSE rate_buckets.tokens + (CASE WHEN CAST($2 AS BIGINT) > rate_buckets.updated_at \
             THEN CAST($2 AS BIGINT) - rate_buckets.updated_at ELSE 0 END) * CAST($3 AS DOUBLE PRECISION) END)";
        self.db
            .query(format!(
                "INSERT INTO rate_buckets (account, tokens, updated_at) \
                 VALUES ($1, CAST($4 AS DOUBLE PRECISION) - 1, CAST($2 AS BIGINT)) \
                 ON CONFLICT (account) DO UPDATE SET tokens = {refilled} - 1, updated_at = CAST($2 AS BIGINT) \
                 WHERE {refilled} >= 1"
            ))
            .bind(account)
            .bind(now_ms())
            .bind(per_second / 1000.0)
            .bind(capacity)
    }

    /// Whether the account's bucket holds a token now, without taking it (a held change
    /// spends none until its command is sent).
    pub async fn token_available(
        &self,
        account: &str,
        capacity: f64,
        per_second: f64,
    ) -> Result<bool, StoreError> {
        let row = self
            .db
            .query("SELECT tokens, updated_at FROM rate_buckets WHERE account = $1")
            .bind(account)
            .fetch_optional()
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
}
