//! The schema: the numbered `.sql` files in `migrations/sqlite/` and
//! `migrations/postgres/` (one folder a dialect), listed by `build.rs`, built into the
//! binary and applied at start by sqlx's migrator, each once, in order, recorded in `_sqlx_migrations` (on
//! PostgreSQL under an advisory lock, so two replicas starting together apply them once).
//! Stores made before sqlx ran the migrations recorded them in `actiongate_migrations`;
//! [`apply`] adopts those records first.

use std::borrow::Cow;

use backon::Retryable;
use sqlx::error::BoxDynError;
use sqlx::migrate::{Migrate, MigrateError, Migration, MigrationSource, MigrationType, Migrator};
use sqlx::AnyPool;

/// The files of each dialect, `(version, description, SQL)`, listed by `build.rs` from
/// the folders as sqlx names them (`0002_open_per_subscription.sql`: 2, "open per
/// subscription").
mod files {
    include!(concat!(env!("OUT_DIR"), "/migrations.rs"));
}

/// The files of one dialect, as sqlx's migrator reads a source.
#[derive(Debug)]
struct Embedded {
    postgres: bool,
}

impl MigrationSource<'static> for Embedded {
    fn resolve(
        self,
    ) -> futures_util::future::BoxFuture<'static, Result<Vec<Migration>, BoxDynError>> {
        Box::pin(async move { Ok(migrations(self.postgres)) })
    }
}

fn migrations(postgres: bool) -> Vec<Migration> {
    let files = if postgres {
        files::POSTGRES
    } else {
        files::SQLITE
    };
    files
        .iter()
        .map(|&(version, description, sql)| {
            Migration::new(
                version,
                Cow::Borrowed(description),
                MigrationType::Simple,
                Cow::Borrowed(sql),
                false,
            )
        })
        .collect()
}

/// The version of the newest migration this build carries.
pub fn latest_version() -> i64 {
    files::SQLITE.iter().map(|f| f.0).max().unwrap_or(0)
}

/// Applies the migrations not yet applied, after adopting the records of the runner that
/// came before sqlx's.
///
/// On PostgreSQL the migrator's advisory lock makes replicas take turns. SQLite has no such
/// lock: two processes starting on one file at once may both try a step; the one that
/// loses finds it done (the table exists, the version is recorded), its transaction rolls
/// back, and it tries again, a few times, to find nothing left to do.
pub async fn apply(pool: &AnyPool, postgres: bool) -> Result<(), MigrateError> {
    let migrator = Migrator::new(Embedded { postgres }).await?;
    let run = || async {
        adopt_earlier_records(pool, postgres).await?;
        migrator.run(pool).await
    };
    run.retry(
        backon::ExponentialBuilder::new()
            .with_min_delay(std::time::Duration::from_millis(50))
            .with_max_times(5),
    )
    .when(|_| !postgres)
    .notify(
        |e, _| tracing::debug!(error = %e, "another process is migrating the store; trying again"),
    )
    .await
}

/// A store whose schema the earlier runner made lists its versions in
/// `actiongate_migrations` and has no sqlx records: each listed version is recorded as
/// applied, with the checksum of the same SQL, so sqlx applies only what is newer. The
/// earlier table is left as it was.
async fn adopt_earlier_records(pool: &AnyPool, postgres: bool) -> Result<(), MigrateError> {
    let mut conn = pool.acquire().await?;
    conn.lock().await?;
    let result = async {
        let earlier = if postgres {
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'actiongate_migrations' AND table_schema = current_schema()"
        } else {
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'actiongate_migrations'"
        };
        let found: i64 = sqlx::query_scalar(earlier).fetch_one(&mut *conn).await?;
        if found == 0 {
            return Ok(());
        }
        conn.ensure_migrations_table().await?;
        let recorded: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
            .fetch_one(&mut *conn)
            .await?;
        if recorded > 0 {
            return Ok(());
        }
        let versions: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM actiongate_migrations ORDER BY version")
                .fetch_all(&mut *conn)
                .await?;
        for migration in migrations(postgres) {
            if !versions.contains(&migration.version) {
                continue;
            }
            sqlx::query(
                "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
                 VALUES ($1, $2, TRUE, $3, 0) ON CONFLICT (version) DO NOTHING",
            )
            .bind(migration.version)
            .bind(migration.description.to_string())
            .bind(migration.checksum.to_vec())
            .execute(&mut *conn)
            .await?;
        }
        Ok::<(), MigrateError>(())
    }
    .await;
    conn.unlock().await?;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schema as the earlier runner left it: versions 1 and 2 applied and listed.
    async fn earlier_store(url: &str) -> AnyPool {
        sqlx::any::install_default_drivers();
        let pool = AnyPool::connect(url).await.unwrap();
        for (_, _, sql) in &files::SQLITE[..2] {
            sqlx::raw_sql(sql).execute(&pool).await.unwrap();
        }
        sqlx::raw_sql(
            "CREATE TABLE actiongate_migrations (version BIGINT PRIMARY KEY);
             INSERT INTO actiongate_migrations (version) VALUES (1), (2);
             INSERT INTO audit (at, action, sender_id, status) VALUES (1, 'apply_subscription_change', 's', 'applied');",
        )
        .execute(&pool)
        .await
        .unwrap();
        pool
    }

    #[tokio::test]
    async fn a_store_the_earlier_runner_made_is_adopted_and_keeps_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("s.db").display());
        let pool = earlier_store(&url).await;
        apply(&pool, false)
            .await
            .expect("adopted, not applied again");
        apply(&pool, false).await.expect("and again: nothing to do");
        let recorded: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
                .fetch_all(&pool)
                .await
                .unwrap();
        // 1 and 2 adopted; the later ones, which the earlier runner never had, applied.
        assert_eq!(recorded, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        let audit: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM audit")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(audit, 1, "the trail survives");
    }

    /// Both dialects carry the same versions with the same names, so either store is at
    /// the same version after the same build.
    #[test]
    fn both_dialects_have_the_same_migrations() {
        let names = |postgres| {
            migrations(postgres)
                .into_iter()
                .map(|m| (m.version, m.description.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(false), names(true));
        assert_eq!(names(false)[1], (2, "open per subscription".to_owned()));
        assert_eq!(names(false).len(), 10, "every file in the folder");
        assert_eq!(latest_version(), files::SQLITE.len() as i64);
    }

    #[tokio::test]
    async fn a_new_store_gets_every_migration() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("s.db").display());
        sqlx::any::install_default_drivers();
        let pool = AnyPool::connect(&url).await.unwrap();
        apply(&pool, false).await.unwrap();
        let recorded: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(recorded, files::SQLITE.len() as i64);
        // The partial unique index is there: a second open operation of one subscription
        // is refused.
        let open = "INSERT INTO operations VALUES ($1, 's', 'a', 'WS-1', 'stop_renewal', 1, '{}', 'claimed', NULL, 0, 0, NULL)";
        sqlx::query(open).bind("k1").execute(&pool).await.unwrap();
        assert!(sqlx::query(open).bind("k2").execute(&pool).await.is_err());
    }

    /// A store with an open operation made before the open-operation rule's index was
    /// written anew (0010) keeps it open: a second claim for its subscription is still
    /// refused, and a finished one is not counted.
    #[tokio::test]
    async fn an_open_operation_stays_open_across_the_rules_new_index() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("s.db").display());
        sqlx::any::install_default_drivers();
        let pool = AnyPool::connect(&url).await.unwrap();
        let before: Vec<_> = migrations(false)
            .into_iter()
            .filter(|m| m.version < 10)
            .collect();
        let migrator = Migrator {
            migrations: Cow::Owned(before),
            ..Migrator::DEFAULT
        };
        migrator.run(&pool).await.unwrap();
        let op = |key: &'static str, state: &'static str| {
            sqlx::query(
                "INSERT INTO operations VALUES ($1, 's', 'a', 'WS-1', 'stop_renewal', 1, '{}', $2, NULL, 0, 0, NULL)",
            )
            .bind(key)
            .bind(state)
        };
        op("sent-before", "sent").execute(&pool).await.unwrap();
        apply(&pool, false).await.unwrap();
        assert!(op("claimed-after", "claimed").execute(&pool).await.is_err());
        op("applied-after", "applied").execute(&pool).await.unwrap();
        let open: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM operations WHERE state NOT IN ('applied', 'failed')",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(open, 1);
    }

    #[tokio::test]
    async fn two_replicas_migrating_one_new_file_at_once_both_start() {
        for _ in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}?mode=rwc", dir.path().join("s.db").display());
            sqlx::any::install_default_drivers();
            let (a, b) = (
                AnyPool::connect(&url).await.unwrap(),
                AnyPool::connect(&url).await.unwrap(),
            );
            let (x, y) = tokio::join!(apply(&a, false), apply(&b, false));
            x.expect("the first replica starts");
            y.expect("the second replica starts");
            let recorded: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations")
                .fetch_one(&a)
                .await
                .unwrap();
            assert_eq!(recorded, files::SQLITE.len() as i64);
        }
    }
}
