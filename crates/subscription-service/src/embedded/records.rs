//! The service's SQLite file: the records (one JSON body each) and the idempotency
//! records of the changes, opened and seeded at start.

use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{Row, SqlitePool};

use super::{ServiceSettings, ServiceStartError};
use crate::model::Subscription;

/// Opens (and seeds, when empty) the service's database.
pub(super) async fn open(settings: &ServiceSettings) -> Result<SqlitePool, ServiceStartError> {
    let options = SqliteConnectOptions::new()
        .filename(&settings.database)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        // WAL with NORMAL sync: a crash of the process loses nothing committed; only a
        // power loss may lose the last transactions. Enough for the embedded service, and
        // it spares an fsync per command.
        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(10));
    // One connection: every command is serialised, which is what makes If-Match and the
    // idempotency record checks atomic.
    let db = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, account TEXT NOT NULL, body TEXT NOT NULL)",
    )
    .execute(&db)
    .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS changes (request_key TEXT PRIMARY KEY, body_hash TEXT NOT NULL, \
         state TEXT NOT NULL, response TEXT)",
    )
    .execute(&db)
    .await?;
    // A command still in flight when the service last stopped never reached its atomic
    // step (its change and its `done` are one transaction): nothing was made, and nothing
    // will be, so its key is void, as a lookup would have fenced it. Left in flight, it
    // would answer 202 for ever and hold its subscription's operation unknown.
    sqlx::query("UPDATE changes SET state = 'void' WHERE state = 'in_flight'")
        .execute(&db)
        .await?;
    sqlx::query(super::outbox::SCHEMA).execute(&db).await?;
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM records")
        .fetch_one(&db)
        .await?;
    if count == 0 {
        if let Some(seed) = &settings.seed {
            let records: Vec<Subscription> = serde_json::from_str(seed)?;
            for record in records {
                save(&db, &record).await?;
            }
        }
    }
    Ok(db)
}

pub(super) async fn save<'e, E: sqlx::SqliteExecutor<'e>>(
    db: E,
    record: &Subscription,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO records (id, account, body) VALUES (?, ?, ?) ON CONFLICT(id) DO UPDATE SET account = excluded.account, body = excluded.body")
        .bind(&record.id)
        .bind(&record.account)
        .bind(serde_json::to_string(record).expect("a record serialises"))
        .execute(db)
        .await?;
    Ok(())
}

pub(super) async fn load<'e, E: sqlx::SqliteExecutor<'e>>(
    db: E,
    id: &str,
) -> Result<Option<Subscription>, sqlx::Error> {
    let row = sqlx::query("SELECT body FROM records WHERE id = ?")
        .bind(id)
        .fetch_optional(db)
        .await?;
    Ok(row.map(|r| serde_json::from_str(r.get::<&str, _>(0)).expect("stored records are valid")))
}

pub(super) async fn release_key<'e, E: sqlx::SqliteExecutor<'e>>(
    db: E,
    key: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM changes WHERE request_key = ? AND state = 'in_flight'")
        .bind(key)
        .execute(db)
        .await?;
    Ok(())
}
