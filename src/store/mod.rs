//! The server's own records: [`operations`] (one per request key), the
//! [`audit`] trail, the per-account [`budget`], held changes ([`approvals`]) and service
//! events ([`inbox`]), each in its own file; here the connection, the schema's readiness
//! and the store's error. A SQLite file by default, PostgreSQL when the URL says so; the
//! same schema and the same statements on both, through [`db`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::any::AnyPoolOptions;

mod approvals;
mod audit;
mod budget;
mod db;
mod inbox;
mod migrations;
mod operations;
mod readings;

pub use approvals::{Approval, ApprovalState, OperationFilter, OperatorSession};
pub use audit::AuditEntry;
use audit::{AuditQueue, AUDIT_LINGER};
pub use contract::operation::OpState;
use db::Db;
pub use inbox::ReceivedEvent;
use operations::Finished;
pub use operations::{Claim, ClaimToSend, Operation, Repeats};

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the database failed: {0}")]
    Database(#[from] sqlx::Error),
    #[error("the database failed: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("the store is closed")]
    Closed,
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

/// The database.
#[derive(Clone)]
pub struct Store {
    db: Arc<Db>,
    postgres: bool,
    audit: AuditQueue,
    finished: Arc<Mutex<Finished>>,
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
        let db = if postgres {
            let pool = AnyPoolOptions::new()
                .max_connections(16)
                // A PostgreSQL connection can be closed by the server: it is tested first.
                .test_before_acquire(true)
                .acquire_timeout(Duration::from_secs(10))
                .connect(url)
                .await?;
            migrations::apply(&pool, true).await?;
            Db::Postgres(pool)
        } else if let Some(path) = url.strip_prefix("sqlite:") {
            let path = path.trim_start_matches("//");
            let (path, query) = path.split_once('?').unwrap_or((path, ""));
            if let Some(parent) = std::path::Path::new(path).parent() {
                if !parent.as_os_str().is_empty() {
                    let _ = std::fs::create_dir_all(parent);
                }
            }
            // The schema through sqlx's migrator (its records, its checksums), on a
            // connection of its own that is closed once the schema is up to date.
            let migrate = AnyPoolOptions::new()
                .max_connections(1)
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        sqlx::query("PRAGMA journal_mode = WAL")
                            .execute(&mut *conn)
                            .await?;
                        sqlx::query("PRAGMA busy_timeout = 10000")
                            .execute(&mut *conn)
                            .await?;
                        Ok(())
                    })
                })
                .connect(&format!(
                    "sqlite://{path}?{}",
                    if query.is_empty() { "mode=rwc" } else { query }
                ))
                .await?;
            let migrated = migrations::apply(&migrate, false).await;
            migrate.close().await;
            migrated?;
            Db::open_sqlite(path, query)?
        } else {
            return Err(StoreError::Url(url.to_owned()));
        };
        let db = Arc::new(db);
        let audit = AuditQueue::start(db.clone(), AUDIT_LINGER);
        Ok(Self {
            db,
            postgres,
            audit,
            finished: Arc::default(),
        })
    }

    pub fn is_postgres(&self) -> bool {
        self.postgres
    }

    /// Closes the store's connections: the audit entries queued so far are committed
    /// first, then every later use fails (readiness included).
    pub async fn close(&self) {
        self.flush_audit().await;
        self.db.close().await;
    }

    /// Readiness: the store answers, and its schema is this build's (every migration up
    /// to the newest recorded as applied). The reason names no address or credential.
    pub async fn ready(&self) -> Result<(), String> {
        let wanted = migrations::latest_version();
        let applied: i64 = self
            .db
            .query(
                "SELECT COUNT(DISTINCT version) FROM _sqlx_migrations WHERE success AND version <= $1",
            )
            .bind(wanted)
            .scalar()
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
}
