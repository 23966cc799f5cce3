//! The service's SQLite file: the records (one JSON body each) and the idempotency
//! records of the changes, opened and seeded at start, and reached through one connection
//! on the caller's own thread.
//!
//! Why not through sqlx, as before: sqlx runs a SQLite connection on a worker thread and
//! hands every statement to it and its answer back, about 100 µs of CPU a statement against
//! a few µs for the statement itself, and a command here is a dozen statements. Each
//! statement or transaction runs under the connection's lock, in microseconds; nothing
//! awaits while holding it.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior};

use super::{ServiceSettings, ServiceStartError};
use crate::checkpoints::Checkpoints;
use crate::model::Subscription;

/// Statements kept prepared: every distinct statement of the service.
const STATEMENTS_KEPT: usize = 32;

/// The service's one connection. One connection serialises every command, which is what
/// makes If-Match and the idempotency record checks atomic. Its file's checkpoints run on a
/// thread of their own ([`Checkpoints`]), not inside a command's commit.
pub(super) struct Db(Mutex<Connection>, Checkpoints);

impl Db {
    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A statement that panicked leaves SQLite's state whole (a statement is reset when
        // dropped, an open transaction rolled back): the connection stays usable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the connection, outside any transaction.
    pub(super) fn with<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let done = f(&self.lock());
        // Some of these write (a key released, the outbox's rows).
        self.1.written();
        done
    }

    /// Runs `f` in one transaction, committed when it returns `Ok`, rolled back otherwise.
    /// IMMEDIATE: the write lock is taken at the start, so another process writing the
    /// file is waited for (the busy timeout) before anything is read.
    pub(super) fn transaction<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let value = f(&tx)?;
        tx.commit()?;
        self.1.written();
        Ok(value)
    }
}

/// Opens (and seeds, when empty) the service's database.
pub(super) fn open(settings: &ServiceSettings) -> Result<Db, ServiceStartError> {
    let connect = || -> rusqlite::Result<Connection> {
        let conn = Connection::open_with_flags(
            &settings.database,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::from_secs(10))?;
        Ok(conn)
    };
    let conn = connect()?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // WAL with NORMAL sync: a crash of the process loses nothing committed; only a power
    // loss may lose the last transactions. Enough for the embedded service, and it spares
    // an fsync per command.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.set_prepared_statement_cache_capacity(STATEMENTS_KEPT);
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, account TEXT NOT NULL, body TEXT NOT NULL);
         CREATE TABLE IF NOT EXISTS changes (request_key TEXT PRIMARY KEY, body_hash TEXT NOT NULL, \
         state TEXT NOT NULL, response TEXT);",
    )?;
    // A command still in flight when the service last stopped never reached its atomic
    // step (its change and its `done` are one transaction): nothing was made, and nothing
    // will be, so its key is void, as a lookup would have fenced it. Left in flight, it
    // would answer 202 for ever and hold its subscription's operation unknown.
    conn.execute(
        "UPDATE changes SET state = 'void' WHERE state = 'in_flight'",
        [],
    )?;
    conn.execute(super::outbox::SCHEMA, [])?;
    let count: i64 = conn.query_row("SELECT COUNT(*) FROM records", [], |r| r.get(0))?;
    let checkpoints = if settings.database.as_os_str() == ":memory:" {
        Checkpoints::none()
    } else {
        Checkpoints::start(&conn, connect()?)?
    };
    let db = Db(Mutex::new(conn), checkpoints);
    if count == 0 {
        if let Some(seed) = &settings.seed {
            let records: Vec<Subscription> = serde_json::from_str(seed)?;
            db.transaction(|tx| records.iter().try_for_each(|record| save(tx, record)))?;
        }
    }
    Ok(db)
}

pub(super) fn save(db: &Connection, record: &Subscription) -> rusqlite::Result<()> {
    db.prepare_cached(
        "INSERT INTO records (id, account, body) VALUES (?1, ?2, ?3) \
         ON CONFLICT(id) DO UPDATE SET account = excluded.account, body = excluded.body",
    )?
    .execute((
        &record.id,
        &record.account,
        serde_json::to_string(record).expect("a record serialises"),
    ))?;
    Ok(())
}

pub(super) fn load(db: &Connection, id: &str) -> rusqlite::Result<Option<Subscription>> {
    let body: Option<String> = db
        .prepare_cached("SELECT body FROM records WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?;
    Ok(body.map(|b| serde_json::from_str(&b).expect("stored records are valid")))
}

/// The account's records, by id.
pub(super) fn list(db: &Connection, account: &str) -> rusqlite::Result<Vec<Subscription>> {
    let mut stmt = db.prepare_cached("SELECT body FROM records WHERE account = ?1 ORDER BY id")?;
    let bodies = stmt.query_map([account], |r| r.get::<_, String>(0))?;
    bodies
        .map(|b| b.map(|b| serde_json::from_str(&b).expect("stored records are valid")))
        .collect()
}

pub(super) fn release_key(db: &Connection, key: &str) -> rusqlite::Result<()> {
    db.prepare_cached("DELETE FROM changes WHERE request_key = ?1 AND state = 'in_flight'")?
        .execute([key])?;
    Ok(())
}
