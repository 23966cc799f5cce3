//! The schema, as numbered migrations applied at start (each once, in order). Each has a
//! SQLite and a PostgreSQL form where the two dialects differ.

use sqlx::AnyPool;

struct Migration {
    version: i64,
    sqlite: &'static str,
    postgres: &'static str,
}

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
    sqlite: "
CREATE TABLE operations (
    request_key TEXT PRIMARY KEY, sender_id TEXT NOT NULL, account TEXT NOT NULL,
    subscription TEXT NOT NULL, change_type TEXT NOT NULL, revision BIGINT NOT NULL,
    terms TEXT NOT NULL, state TEXT NOT NULL, outcome TEXT,
    created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL);
CREATE INDEX operations_state ON operations (state, updated_at);
CREATE TABLE rate_buckets (account TEXT PRIMARY KEY, tokens DOUBLE PRECISION NOT NULL, updated_at BIGINT NOT NULL);
CREATE TABLE audit (
    id INTEGER PRIMARY KEY, at BIGINT NOT NULL, action TEXT NOT NULL,
    sender_id TEXT NOT NULL, account TEXT, target TEXT, question_terms TEXT, service_terms TEXT,
    status TEXT NOT NULL, reason TEXT, request_key TEXT);
CREATE INDEX audit_sender ON audit (sender_id, at);
",
    postgres: "
CREATE TABLE operations (
    request_key TEXT PRIMARY KEY, sender_id TEXT NOT NULL, account TEXT NOT NULL,
    subscription TEXT NOT NULL, change_type TEXT NOT NULL, revision BIGINT NOT NULL,
    terms TEXT NOT NULL, state TEXT NOT NULL, outcome TEXT,
    created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL);
CREATE INDEX operations_state ON operations (state, updated_at);
CREATE TABLE rate_buckets (account TEXT PRIMARY KEY, tokens DOUBLE PRECISION NOT NULL, updated_at BIGINT NOT NULL);
CREATE TABLE audit (
    id BIGSERIAL PRIMARY KEY, at BIGINT NOT NULL, action TEXT NOT NULL,
    sender_id TEXT NOT NULL, account TEXT, target TEXT, question_terms TEXT, service_terms TEXT,
    status TEXT NOT NULL, reason TEXT, request_key TEXT);
CREATE INDEX audit_sender ON audit (sender_id, at);
",
    },
    // At most one operation per subscription whose outcome is not known (CONTRACT.md
    // section 4): a command for a subscription is not sent while another one's may have
    // been applied. A partial unique index, so the claim enforces it atomically on every
    // replica.
    Migration {
        version: 2,
        sqlite: OPEN_PER_SUBSCRIPTION,
        postgres: OPEN_PER_SUBSCRIPTION,
    },
];

const OPEN_PER_SUBSCRIPTION: &str = "
CREATE UNIQUE INDEX operations_open_per_subscription ON operations (subscription)
    WHERE state IN ('claimed', 'sent', 'unknown');
";

/// Applies the migrations not yet applied. On PostgreSQL an advisory lock keeps two
/// replicas starting together from both applying them.
pub async fn apply(pool: &AnyPool, postgres: bool) -> Result<(), sqlx::Error> {
    let mut conn = pool.acquire().await?;
    if postgres {
        sqlx::query("SELECT pg_advisory_lock(7351001)")
            .execute(&mut *conn)
            .await?;
    }
    let result = async {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS actiongate_migrations (version BIGINT PRIMARY KEY)",
        )
        .execute(&mut *conn)
        .await?;
        for migration in MIGRATIONS {
            let applied: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM actiongate_migrations WHERE version = $1")
                    .bind(migration.version)
                    .fetch_one(&mut *conn)
                    .await?;
            if applied > 0 {
                continue;
            }
            let sql = if postgres {
                migration.postgres
            } else {
                migration.sqlite
            };
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            for statement in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
                sqlx::query(statement).execute(&mut *tx).await?;
            }
            sqlx::query("INSERT INTO actiongate_migrations (version) VALUES ($1)")
                .bind(migration.version)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        }
        Ok(())
    }
    .await;
    if postgres {
        sqlx::query("SELECT pg_advisory_unlock(7351001)")
            .execute(&mut *conn)
            .await?;
    }
    result
}
