//! The way every statement reaches the database: SQLite through one connection used on the
//! caller's own thread, PostgreSQL through sqlx's pool; the values bound and the rows read
//! back, the same on both. On SQLite the writes ready together are committed together
//! ([`Group`]), and its checkpoints run on a thread of their own
//! ([`subscription_service::checkpoints`]).
//!
//! Why SQLite is not reached through sqlx: sqlx runs each SQLite connection on a worker
//! thread and hands every statement to it and its answer back, about 100 µs of CPU a
//! statement on this project's machines against 3 to 18 µs for the statement itself (the
//! README's "A new change each time" has the figures). A statement here takes microseconds, so the
//! caller runs it under the connection's lock instead; a second process writing the same
//! file makes it wait up to the busy timeout, as SQLite's own writers do.

use std::borrow::Cow;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, ValueRef};
use sqlx::{AnyPool, Column, Row as _};
use subscription_service::checkpoints::Checkpoints;

use super::StoreError;

/// How long a statement waits for another process's write to end, on SQLite.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Prepared statements kept per SQLite connection: every distinct statement of the store.
const STATEMENTS_KEPT: usize = 128;

/// A value bound to a statement or read from a row. A NULL keeps its kind, so PostgreSQL
/// is told the type of a NULL it is given.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value {
    Int(Option<i64>),
    Real(Option<f64>),
    Text(Option<String>),
    Blob(Option<Vec<u8>>),
}

impl Value {
    fn is_null(&self) -> bool {
        matches!(
            self,
            Self::Int(None) | Self::Real(None) | Self::Text(None) | Self::Blob(None)
        )
    }
}

/// What can be bound to a statement.
pub(super) trait IntoValue {
    fn into_value(self) -> Value;
    /// A NULL of this kind.
    fn null() -> Value;
}

macro_rules! into_value {
    ($variant:ident: $($t:ty => $conv:expr),* $(,)?) => {$(
        impl IntoValue for $t {
            fn into_value(self) -> Value {
                #[allow(clippy::redundant_closure_call)]
                Value::$variant(Some(($conv)(self)))
            }
            fn null() -> Value {
                Value::$variant(None)
            }
        }
    )*};
}

into_value!(Int: i64 => |v| v, i32 => i64::from, bool => i64::from);
into_value!(Real: f64 => |v| v);
into_value!(Text: String => |v| v, &str => str::to_owned, &String => String::clone);
into_value!(Blob: Vec<u8> => |v| v);

impl<T: IntoValue> IntoValue for Option<T> {
    fn into_value(self) -> Value {
        self.map_or_else(T::null, IntoValue::into_value)
    }
    fn null() -> Value {
        T::null()
    }
}

impl<'a, T> IntoValue for &'a Option<T>
where
    &'a T: IntoValue,
{
    fn into_value(self) -> Value {
        self.as_ref()
            .map_or_else(<&'a T>::null, IntoValue::into_value)
    }
    fn null() -> Value {
        <&'a T>::null()
    }
}

/// What a column can be read as. Reading a value as what it is not is a bug in the
/// statement (or a schema from elsewhere): it panics, naming the column, as sqlx's `get`
/// did.
pub(super) trait FromValue: Sized {
    fn from_value(v: &Value) -> Option<Self>;
}

impl FromValue for i64 {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Int(i) => *i,
            _ => None,
        }
    }
}

impl FromValue for f64 {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Real(r) => *r,
            // SQLite keeps a whole REAL as an integer where it can.
            Value::Int(i) => i.map(|i| i as f64),
            _ => None,
        }
    }
}

impl FromValue for String {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Text(s) => s.clone(),
            _ => None,
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> Option<Self> {
        if v.is_null() {
            Some(None)
        } else {
            T::from_value(v).map(Some)
        }
    }
}

/// One row as read: its values in the statement's column order.
#[derive(Debug)]
pub(super) struct Row(Vec<Value>);

impl Row {
    fn value(&self, i: usize) -> &Value {
        self.0
            .get(i)
            .unwrap_or_else(|| panic!("the statement has no column {i}"))
    }

    /// Column `i` as `T`.
    pub(super) fn get<T: FromValue>(&self, i: usize) -> T {
        let value = self.value(i);
        T::from_value(value).unwrap_or_else(|| {
            panic!(
                "column {i} holds {value:?}, not {}",
                std::any::type_name::<T>()
            )
        })
    }

    /// Column `i`, text.
    pub(super) fn str(&self, i: usize) -> &str {
        self.opt_str(i)
            .unwrap_or_else(|| panic!("column {i} holds {:?}, not text", self.value(i)))
    }

    /// Column `i`, text or NULL.
    pub(super) fn opt_str(&self, i: usize) -> Option<&str> {
        match self.value(i) {
            Value::Text(s) => s.as_deref(),
            v if v.is_null() => None,
            v => panic!("column {i} holds {v:?}, not text"),
        }
    }
}

/// The database.
pub(super) enum Db {
    Sqlite(Mutex<Option<rusqlite::Connection>>, Checkpoints, Group),
    Postgres(AnyPool),
}

/// A connection to a SQLite file; `query` holds SQLite's URI parameters, if any.
fn connect(path: &str, query: &str) -> rusqlite::Result<rusqlite::Connection> {
    use rusqlite::OpenFlags;
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = if query.is_empty() {
        rusqlite::Connection::open_with_flags(Path::new(path), flags)?
    } else {
        rusqlite::Connection::open_with_flags(
            format!("file:{path}?{query}"),
            flags | OpenFlags::SQLITE_OPEN_URI,
        )?
    };
    conn.busy_timeout(BUSY_TIMEOUT)?;
    Ok(conn)
}

impl Db {
    /// Opens a SQLite file (created when missing) in WAL mode; `query` holds SQLite's URI
    /// parameters, if any (`mode=ro`). A file written to gets a checkpoint thread
    /// ([`Checkpoints`]); one in memory or opened read-only does not.
    pub(super) fn open_sqlite(path: &str, query: &str) -> Result<Self, StoreError> {
        let conn = connect(path, query)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.set_prepared_statement_cache_capacity(STATEMENTS_KEPT);
        let on_disk = path != ":memory:"
            && !query
                .split('&')
                .any(|p| p == "mode=ro" || p == "mode=memory");
        let checkpoints = if on_disk {
            Checkpoints::start(&conn, connect(path, query)?)?
        } else {
            Checkpoints::none()
        };
        Ok(Self::Sqlite(
            Mutex::new(Some(conn)),
            checkpoints,
            Group::default(),
        ))
    }

    pub(super) fn is_postgres(&self) -> bool {
        matches!(self, Self::Postgres(_))
    }

    /// Every later statement fails.
    pub(super) async fn close(&self) {
        match self {
            Self::Sqlite(conn, checkpoints, _) => {
                checkpoints.stop();
                drop(lock(conn).take());
            }
            Self::Postgres(pool) => pool.close().await,
        }
    }

    /// A statement to bind and run.
    pub(super) fn query<'a>(&'a self, sql: impl Into<Cow<'a, str>>) -> Query<'a> {
        Query {
            db: self,
            sql: sql.into(),
            args: Vec::new(),
        }
    }

    /// Runs statements in one transaction: all of them, or none.
    pub(super) async fn execute_all(&self, statements: Vec<Query<'_>>) -> Result<(), StoreError> {
        self.transaction(statements, false).await.map(drop)
    }

    /// Runs statements in order in one transaction, each only if every one before it
    /// changed a row: the first that changes none ends it, everything rolled back, and its
    /// index is returned; `None` when each changed a row and all are committed.
    pub(super) async fn execute_while_changing(
        &self,
        statements: Vec<Query<'_>>,
    ) -> Result<Option<usize>, StoreError> {
        self.transaction(statements, true).await
    }

    async fn transaction(
        &self,
        statements: Vec<Query<'_>>,
        stop_when_unchanged: bool,
    ) -> Result<Option<usize>, StoreError> {
        match self {
            Self::Sqlite(conn, checkpoints, group) => {
                let statements = statements.into_iter().map(Query::owned).collect();
                Ok(group
                    .write(conn, checkpoints, statements, stop_when_unchanged)
                    .await?
                    .stopped)
            }
            Self::Postgres(pool) => {
                let unchanged =
                    |i: usize, changed: u64| (stop_when_unchanged && changed == 0).then_some(i);
                let mut tx = pool.begin().await?;
                for (i, q) in statements.iter().enumerate() {
                    let changed = pg_query(&q.sql, &q.args)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    if let Some(stop) = unchanged(i, changed) {
                        tx.rollback().await?;
                        return Ok(Some(stop));
                    }
                }
                tx.commit().await?;
                Ok(None)
            }
        }
    }
}

/// Runs a statement that binds nothing (`BEGIN IMMEDIATE`, `COMMIT`, `ROLLBACK`) from the
/// connection's cache: prepared once, not parsed again at every transaction as a batch is.
fn run_cached(conn: &rusqlite::Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.raw_execute().map(drop)
}

fn lock(
    conn: &Mutex<Option<rusqlite::Connection>>,
) -> std::sync::MutexGuard<'_, Option<rusqlite::Connection>> {
    // A statement that panicked leaves SQLite's state whole (its statement is reset when
    // dropped): the connection stays usable.
    conn.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on the connection under its lock, then tells the checkpoint thread the log
/// may have grown (after the commit, so the thread never misses the last one).
fn with<T>(
    conn: &Mutex<Option<rusqlite::Connection>>,
    checkpoints: &Checkpoints,
    f: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<T>,
) -> Result<T, StoreError> {
    let done = {
        let guard = lock(conn);
        let conn = guard.as_ref().ok_or(StoreError::Closed)?;
        f(conn)
    };
    checkpoints.written();
    Ok(done?)
}

/// Writes on SQLite committed together: the first write to arrive leads; it lets the
/// writes ready at that moment join (one turn of its runtime), then commits all of them
/// in one transaction, each in a savepoint of its own, and answers each when the commit is
/// done. A write that changes nothing or fails is undone alone; a commit that fails
/// undoes all of them and each is told. So every write is committed before its caller
/// goes on, as alone, and a burst of them costs one commit: one set of the log's pages
/// (the table's last page, an index page two of them touch) and of SQLite's locks.
/// What cannot run inside a transaction (`VACUUM`, `PRAGMA foreign_keys`) is not a write
/// for a group: the store has none.
#[derive(Default)]
pub(super) struct Group(Mutex<Vec<Member>>);

/// One write waiting in a group: its statements, and where its answer goes.
struct Member {
    statements: Vec<(String, Vec<Value>)>,
    stop_when_unchanged: bool,
    done: tokio::sync::oneshot::Sender<Result<Ran, StoreError>>,
}

/// How a write ended: the statement that changed no row, if one stopped it (everything
/// of it undone), and the rows its last statement changed.
#[derive(Debug, Clone, Copy)]
struct Ran {
    stopped: Option<usize>,
    changed: u64,
}

impl Group {
    async fn write(
        &self,
        conn: &Mutex<Option<rusqlite::Connection>>,
        checkpoints: &Checkpoints,
        statements: Vec<(String, Vec<Value>)>,
        stop_when_unchanged: bool,
    ) -> Result<Ran, StoreError> {
        let (done, ran) = tokio::sync::oneshot::channel();
        let leads = {
            let mut waiting = self.0.lock().unwrap_or_else(|e| e.into_inner());
            waiting.push(Member {
                statements,
                stop_when_unchanged,
                done,
            });
            waiting.len() == 1
        };
        if leads {
            // The group is committed when this is dropped: after the turn, or at once if
            // the leader's caller is gone meanwhile, so no write is left waiting.
            let commit = Commit {
                group: self,
                conn,
                checkpoints,
            };
            tokio::task::yield_now().await;
            drop(commit);
        }
        ran.await.unwrap_or(Err(StoreError::Closed))
    }
}

/// Commits a group when dropped.
struct Commit<'a> {
    group: &'a Group,
    conn: &'a Mutex<Option<rusqlite::Connection>>,
    checkpoints: &'a Checkpoints,
}

impl Drop for Commit<'_> {
    fn drop(&mut self) {
        let members = std::mem::take(&mut *self.group.0.lock().unwrap_or_else(|e| e.into_inner()));
        // The only failure `with` can meet here is a closed store.
        let answers = with(self.conn, self.checkpoints, |c| {
            Ok(commit_group(c, &members))
        })
        .unwrap_or_else(|_| members.iter().map(|_| Err(StoreError::Closed)).collect());
        for (member, answer) in members.into_iter().zip(answers) {
            // A caller gone meanwhile is not told.
            let _ = member.done.send(answer);
        }
    }
}

/// The answers of a group's writes, in order, once the group is committed or undone.
fn commit_group(c: &rusqlite::Connection, members: &[Member]) -> Vec<Result<Ran, StoreError>> {
    if let [alone] = members {
        return vec![write_alone(c, alone).map_err(StoreError::from)];
    }
    // IMMEDIATE: the write lock is taken at the start, so waiting for another process is
    // the busy timeout's, never a deadlock found halfway.
    if let Err(e) = run_cached(c, "BEGIN IMMEDIATE") {
        return members.iter().map(|_| Err(copy(&e).into())).collect();
    }
    let mut ran = Vec::with_capacity(members.len());
    for member in members {
        let mine = run_cached(c, "SAVEPOINT member").and_then(|()| {
            let done = run_statements(c, member);
            if !matches!(done, Ok(Ran { stopped: None, .. })) {
                run_cached(c, "ROLLBACK TO member")?;
            }
            run_cached(c, "RELEASE member")?;
            done
        });
        if let (Err(e), true) = (&mine, c.is_autocommit()) {
            // SQLite ended the whole transaction on this failure (a full disk, an I/O
            // error): the writes before it are undone too, and none after it may run
            // (a savepoint outside a transaction would begin one of its own).
            return members.iter().map(|_| Err(copy(e).into())).collect();
        }
        ran.push(mine);
    }
    match run_cached(c, "COMMIT") {
        Ok(()) => ran
            .into_iter()
            .map(|r| r.map_err(StoreError::from))
            .collect(),
        Err(e) => {
            if !c.is_autocommit() {
                let _ = run_cached(c, "ROLLBACK");
            }
            members.iter().map(|_| Err(copy(&e).into())).collect()
        }
    }
}

/// A write with no other in its group, as it ran before groups: one statement on its own
/// (SQLite's own transaction), or several in one transaction.
fn write_alone(c: &rusqlite::Connection, member: &Member) -> rusqlite::Result<Ran> {
    if let [_] = member.statements.as_slice() {
        if !member.stop_when_unchanged {
            return run_statements(c, member);
        }
    }
    run_cached(c, "BEGIN IMMEDIATE")?;
    let ran = run_statements(c, member).and_then(|ran| match ran.stopped {
        None => run_cached(c, "COMMIT").map(|()| ran),
        Some(_) => Ok(ran),
    });
    // Anything but a commit (a statement that changed nothing, failed, or a commit that
    // failed) leaves all of it undone.
    if !matches!(ran, Ok(Ran { stopped: None, .. })) && !c.is_autocommit() {
        run_cached(c, "ROLLBACK")?;
    }
    ran
}

/// A write's statements in order, each only while the ones before changed a row when
/// it stops at one that changes none.
fn run_statements(c: &rusqlite::Connection, member: &Member) -> rusqlite::Result<Ran> {
    let mut changed = 0;
    for (i, (sql, args)) in member.statements.iter().enumerate() {
        let mut stmt = c.prepare_cached(sql)?;
        bind(&mut stmt, args)?;
        changed = stmt.raw_execute()? as u64;
        if member.stop_when_unchanged && changed == 0 {
            return Ok(Ran {
                stopped: Some(i),
                changed,
            });
        }
    }
    Ok(Ran {
        stopped: None,
        changed,
    })
}

/// The same failure again, for each write of a group it ended.
fn copy(e: &rusqlite::Error) -> rusqlite::Error {
    match e {
        rusqlite::Error::SqliteFailure(code, message) => {
            rusqlite::Error::SqliteFailure(*code, message.clone())
        }
        other => rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(other.to_string()),
        ),
    }
}

/// A statement and its values. Its placeholders are `$1`, `$2`, ... (the same one may
/// appear twice), or `?` on SQLite, bound in order.
pub(super) struct Query<'a> {
    db: &'a Db,
    sql: Cow<'a, str>,
    args: Vec<Value>,
}

impl Query<'_> {
    /// Its text and values, owned: what a write waiting for its group keeps.
    fn owned(self) -> (String, Vec<Value>) {
        (self.sql.into_owned(), self.args)
    }

    pub(super) fn bind(mut self, value: impl IntoValue) -> Self {
        self.args.push(value.into_value());
        self
    }

    /// Runs it; how many rows it changed.
    pub(super) async fn execute(self) -> Result<u64, StoreError> {
        match self.db {
            Db::Sqlite(conn, checkpoints, group) => Ok(group
                .write(conn, checkpoints, vec![self.owned()], false)
                .await?
                .changed),
            Db::Postgres(pool) => Ok(pg_query(&self.sql, &self.args)
                .execute(pool)
                .await?
                .rows_affected()),
        }
    }

    /// Every row it reads.
    pub(super) async fn fetch_all(self) -> Result<Vec<Row>, StoreError> {
        match self.db {
            // A read may be a write too (`RETURNING`).
            Db::Sqlite(conn, checkpoints, _) => with(conn, checkpoints, |c| {
                let mut stmt = c.prepare_cached(&self.sql)?;
                bind(&mut stmt, &self.args)?;
                let columns = stmt.column_count();
                let mut rows = stmt.raw_query();
                let mut all = Vec::new();
                while let Some(row) = rows.next()? {
                    all.push(Row((0..columns)
                        .map(|i| row.get_ref(i).map(from_sqlite))
                        .collect::<Result<_, _>>()?));
                }
                Ok(all)
            }),
            Db::Postgres(pool) => pg_query(&self.sql, &self.args)
                .fetch_all(pool)
                .await?
                .iter()
                .map(from_any)
                .collect(),
        }
    }

    /// The first row it reads, if any.
    pub(super) async fn fetch_optional(self) -> Result<Option<Row>, StoreError> {
        Ok(self.fetch_all().await?.into_iter().next())
    }

    /// The first column of its first row (a statement that always reads one: a count).
    pub(super) async fn scalar<T: FromValue>(self) -> Result<T, StoreError> {
        match self.fetch_optional().await? {
            Some(row) => Ok(row.get(0)),
            None => Err(StoreError::Database(sqlx::Error::RowNotFound)),
        }
    }

    /// The first column of every row it reads.
    pub(super) async fn scalars<T: FromValue>(self) -> Result<Vec<T>, StoreError> {
        Ok(self.fetch_all().await?.iter().map(|r| r.get(0)).collect())
    }
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Int(Some(i)) => ValueRef::Integer(*i),
            Value::Real(Some(r)) => ValueRef::Real(*r),
            Value::Text(Some(s)) => ValueRef::Text(s.as_bytes()),
            Value::Blob(Some(b)) => ValueRef::Blob(b),
            _ => ValueRef::Null,
        }))
    }
}

/// Binds each of the statement's placeholders: `$n` (or `?n`) to the n-th value, a bare
/// `?` to the value at its position.
fn bind(stmt: &mut rusqlite::CachedStatement<'_>, args: &[Value]) -> rusqlite::Result<()> {
    let wanted = stmt.parameter_count();
    for position in 1..=wanted {
        let n = stmt
            .parameter_name(position)
            .and_then(|name| name.get(1..))
            .and_then(|digits| digits.parse::<usize>().ok())
            .unwrap_or(position);
        let value = args
            .get(n.wrapping_sub(1))
            .ok_or(rusqlite::Error::InvalidParameterCount(n, args.len()))?;
        stmt.raw_bind_parameter(position, value)?;
    }
    Ok(())
}

fn from_sqlite(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Text(None),
        ValueRef::Integer(i) => Value::Int(Some(i)),
        ValueRef::Real(r) => Value::Real(Some(r)),
        ValueRef::Text(t) => Value::Text(Some(String::from_utf8_lossy(t).into_owned())),
        ValueRef::Blob(b) => Value::Blob(Some(b.to_vec())),
    }
}

fn pg_query<'q>(
    sql: &'q str,
    args: &[Value],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    let mut q = sqlx::query(sql);
    for a in args {
        q = match a.clone() {
            Value::Int(v) => q.bind(v),
            Value::Real(v) => q.bind(v),
            Value::Text(v) => q.bind(v),
            Value::Blob(v) => q.bind(v),
        };
    }
    q
}

fn from_any(row: &sqlx::any::AnyRow) -> Result<Row, StoreError> {
    use sqlx::any::AnyTypeInfoKind as Kind;
    row.columns()
        .iter()
        .enumerate()
        .map(|(i, column)| {
            Ok(match column.type_info().kind() {
                Kind::Bool => Value::Int(row.try_get::<Option<bool>, _>(i)?.map(i64::from)),
                Kind::SmallInt => Value::Int(row.try_get::<Option<i16>, _>(i)?.map(i64::from)),
                Kind::Integer => Value::Int(row.try_get::<Option<i32>, _>(i)?.map(i64::from)),
                Kind::BigInt => Value::Int(row.try_get(i)?),
                Kind::Real => Value::Real(row.try_get::<Option<f32>, _>(i)?.map(f64::from)),
                Kind::Double => Value::Real(row.try_get(i)?),
                Kind::Blob => Value::Blob(row.try_get(i)?),
                Kind::Text => Value::Text(row.try_get(i)?),
                Kind::Null => Value::Text(None),
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map(Row)
        .map_err(StoreError::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use subscription_service::checkpoints::LOG_PAGES_KEPT;

    fn sqlite() -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_sqlite(dir.path().join("t.db").to_str().unwrap(), "").unwrap();
        (dir, db)
    }

    #[tokio::test]
    async fn numbered_placeholders_bind_by_number_and_nulls_read_back_as_none() {
        let (_dir, db) = sqlite();
        db.query("CREATE TABLE t (a INTEGER, b TEXT, c REAL, d TEXT)")
            .execute()
            .await
            .unwrap();
        // $2 used twice and out of order: bound by its number, not its position.
        let changed = db
            .query("INSERT INTO t (a, b, c, d) VALUES ($2, $1, $3, CAST($2 AS TEXT) || $4)")
            .bind("text")
            .bind(7_i64)
            .bind(None::<f64>)
            .bind(&None::<String>)
            .execute()
            .await
            .unwrap();
        assert_eq!(changed, 1);
        let row = db
            .query("SELECT a, b, c, d FROM t")
            .fetch_optional()
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.get::<i64>(0), 7);
        assert_eq!(row.str(1), "text");
        assert_eq!(row.get::<Option<f64>>(2), None);
        assert_eq!(row.opt_str(3), None, "'7' || NULL is NULL");
        let anonymous = db
            .query("SELECT ? + ?")
            .bind(2_i64)
            .bind(3_i64)
            .scalar::<i64>()
            .await
            .unwrap();
        assert_eq!(anonymous, 5);
    }

    #[tokio::test]
    async fn a_transaction_that_fails_halfway_leaves_nothing() {
        let (_dir, db) = sqlite();
        db.query("CREATE TABLE t (k TEXT PRIMARY KEY)")
            .execute()
            .await
            .unwrap();
        let insert = |k: &'static str| db.query("INSERT INTO t (k) VALUES ($1)").bind(k);
        let failed = db
            .execute_all(vec![insert("a"), insert("b"), insert("a")])
            .await;
        assert!(failed.is_err(), "the third breaks the key");
        let count = db
            .query("SELECT COUNT(*) FROM t")
            .scalar::<i64>()
            .await
            .unwrap();
        assert_eq!(count, 0, "rolled back whole");
        db.execute_all(vec![insert("a"), insert("b")])
            .await
            .unwrap();
        assert_eq!(
            db.query("SELECT COUNT(*) FROM t")
                .scalar::<i64>()
                .await
                .unwrap(),
            2
        );
    }

    /// A table `parent` and a table `child` whose parent is checked only at the commit (a
    /// deferred foreign key): a commit that fails.
    async fn parent_and_child(db: &Db) {
        run(db, "PRAGMA foreign_keys = ON").await;
        run(db, "CREATE TABLE parent (k TEXT PRIMARY KEY)").await;
        run(
            db,
            "CREATE TABLE child (k TEXT PRIMARY KEY, \
             parent TEXT REFERENCES parent (k) DEFERRABLE INITIALLY DEFERRED)",
        )
        .await;
    }

    /// Runs a statement that must succeed.
    async fn run(db: &Db, sql: &'static str) {
        db.query(sql).execute().await.unwrap();
    }

    /// A commit that fails (here a deferred foreign key, checked only then) leaves nothing,
    /// and no transaction open: the next one begins and commits as usual.
    #[tokio::test]
    async fn a_transaction_whose_commit_fails_leaves_nothing() {
        let (_dir, db) = sqlite();
        parent_and_child(&db).await;
        let child = |k: &'static str, parent: &'static str| {
            db.query("INSERT INTO child (k, parent) VALUES ($1, $2)")
                .bind(k)
                .bind(parent)
        };
        let parent = |k: &'static str| db.query("INSERT INTO parent (k) VALUES ($1)").bind(k);
        let failed = db
            .execute_all(vec![parent("p"), child("c", "nobody")])
            .await;
        assert!(failed.is_err(), "the commit finds the missing parent");
        let count = |table: &'static str| {
            db.query(format!("SELECT COUNT(*) FROM {table}"))
                .scalar::<i64>()
        };
        assert_eq!(count("parent").await.unwrap(), 0, "rolled back whole");
        assert_eq!(count("child").await.unwrap(), 0);
        db.execute_all(vec![parent("p"), child("c", "p")])
            .await
            .unwrap();
        assert_eq!(count("child").await.unwrap(), 1);
    }

    /// The first statement that changes no row rolls back those before it and ends the
    /// transaction there (the later ones are not run); all changing commits all.
    #[tokio::test]
    async fn statements_run_while_each_changes_a_row() {
        let (_dir, db) = sqlite();
        db.query("CREATE TABLE t (k TEXT PRIMARY KEY)")
            .execute()
            .await
            .unwrap();
        let insert = |k: &'static str| {
            db.query("INSERT INTO t (k) VALUES ($1) ON CONFLICT DO NOTHING")
                .bind(k)
        };
        let count = || db.query("SELECT COUNT(*) FROM t").scalar::<i64>();
        assert_eq!(
            db.execute_while_changing(vec![insert("a"), insert("b")])
                .await
                .unwrap(),
            None
        );
        assert_eq!(count().await.unwrap(), 2);
        let stopped = db
            .execute_while_changing(vec![insert("c"), insert("a"), insert("d")])
            .await
            .unwrap();
        assert_eq!(stopped, Some(1), "\"a\" is there: no row changed");
        assert_eq!(count().await.unwrap(), 2, "c rolled back, d never run");
    }

    #[tokio::test]
    async fn a_closed_store_refuses_every_statement() {
        let (_dir, db) = sqlite();
        db.close().await;
        assert!(matches!(
            db.query("SELECT 1").scalar::<i64>().await,
            Err(StoreError::Closed)
        ));
    }

    /// Rows written reach the database file itself within moments, with no statement of
    /// the store's own connection copying them there (it would only past
    /// LOG_PAGES_KEPT): the database file alone, without its log, holds them.
    #[tokio::test]
    async fn the_checkpoint_thread_copies_the_log_into_the_database_file() {
        let (dir, db) = sqlite();
        db.query("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
            .execute()
            .await
            .unwrap();
        for i in 0..10i64 {
            db.query("INSERT INTO t (id, v) VALUES ($1, 'x')")
                .bind(i)
                .execute()
                .await
                .unwrap();
        }
        let file_alone = || {
            let copy = dir.path().join("alone.db");
            let _ = std::fs::remove_file(&copy);
            std::fs::copy(dir.path().join("t.db"), &copy).unwrap();
            let conn = rusqlite::Connection::open(&copy).unwrap();
            conn.query_row("SELECT COUNT(*) FROM t", [], |r| r.get::<_, i64>(0))
                .unwrap_or(-1)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while file_alone() != 10 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(file_alone(), 10, "the rows are in the database file");
        let kept: i64 = db
            .query("PRAGMA wal_autocheckpoint")
            .scalar()
            .await
            .unwrap();
        assert_eq!(
            kept, LOG_PAGES_KEPT,
            "the connection's own checkpoints are the fallback"
        );
        db.close().await;
    }

    #[tokio::test]
    async fn a_value_missing_for_a_placeholder_is_an_error_not_a_null() {
        let (_dir, db) = sqlite();
        assert!(db
            .query("SELECT $1 + $2")
            .bind(1_i64)
            .scalar::<i64>()
            .await
            .is_err());
    }

    /// Polls a write once, with a waker that does nothing: pending while it waits for its
    /// group's commit.
    fn poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
        f.poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    }

    async fn keys(db: &Db) -> Vec<String> {
        db.query("SELECT k FROM t ORDER BY k")
            .scalars::<String>()
            .await
            .unwrap()
    }

    /// A table `t` holding the key `taken`.
    async fn table_t(db: &Db) {
        run(
            db,
            "CREATE TABLE t (k TEXT PRIMARY KEY, n INTEGER NOT NULL)",
        )
        .await;
        run(db, "INSERT INTO t VALUES ('taken', 0)").await;
    }

    #[tokio::test]
    async fn writes_ready_together_wait_for_one_commit_and_each_is_undone_alone() {
        let (_dir, db) = sqlite();
        table_t(&db).await;
        let insert = |k: &str| db.query("INSERT INTO t VALUES ($1, 1)").bind(k);
        let mut a = std::pin::pin!(insert("a").execute());
        // Stopped by its second statement: its first is undone with it.
        let mut b = std::pin::pin!(db.execute_while_changing(vec![
            insert("b"),
            db.query("INSERT INTO t VALUES ('taken', 9) ON CONFLICT DO NOTHING"),
        ]));
        // Failed by its second statement (the key is taken): its first is undone with it.
        let mut c = std::pin::pin!(db.execute_all(vec![insert("c"), insert("taken")]));
        let mut d = std::pin::pin!(insert("d").execute());
        // The first leads and lets the others join; none is answered before the commit.
        assert!(poll_once(a.as_mut()).is_pending());
        assert!(poll_once(b.as_mut()).is_pending());
        assert!(poll_once(c.as_mut()).is_pending());
        assert!(poll_once(d.as_mut()).is_pending());
        assert_eq!(a.await.unwrap(), 1);
        assert_eq!(b.await.unwrap(), Some(1));
        assert!(c.await.is_err());
        assert_eq!(d.await.unwrap(), 1);
        assert_eq!(keys(&db).await, ["a", "d", "taken"]);
    }

    #[tokio::test]
    async fn a_group_whose_commit_fails_tells_every_write_and_keeps_none() {
        let (_dir, db) = sqlite();
        parent_and_child(&db).await;
        // The child's missing parent is found at the commit, which the parent's row shares.
        let mut orphan = std::pin::pin!(db
            .query("INSERT INTO child VALUES ('c', 'nobody')")
            .execute());
        let mut parent = std::pin::pin!(db.query("INSERT INTO parent VALUES ('p')").execute());
        assert!(poll_once(orphan.as_mut()).is_pending());
        assert!(poll_once(parent.as_mut()).is_pending());
        assert!(orphan.await.is_err());
        assert!(parent.await.is_err(), "its commit failed");
        for table in ["parent", "child"] {
            let rows = db
                .query(format!("SELECT count(*) FROM {table}"))
                .scalar::<i64>()
                .await
                .unwrap();
            assert_eq!(rows, 0, "{table}");
        }
    }

    #[tokio::test]
    async fn a_write_is_answered_as_it_was_committed_when_sqlite_ends_the_group_halfway() {
        let (_dir, db) = sqlite();
        table_t(&db).await;
        let pages = db.query("PRAGMA page_count").scalar::<i64>().await.unwrap();
        db.query(format!("PRAGMA max_page_count = {}", pages + 2))
            .fetch_all()
            .await
            .unwrap();
        let insert = |k: &str, bytes: usize| {
            db.query("INSERT INTO t VALUES ($1, $2)")
                .bind(k)
                .bind("x".repeat(bytes))
        };
        let mut before = std::pin::pin!(insert("before", 1).execute());
        // Past the file's last page: SQLITE_FULL.
        let mut full = std::pin::pin!(insert("full", 1 << 20).execute());
        let mut after = std::pin::pin!(insert("after", 1).execute());
        assert!(poll_once(before.as_mut()).is_pending());
        assert!(poll_once(full.as_mut()).is_pending());
        assert!(poll_once(after.as_mut()).is_pending());
        let answers = [
            ("before", before.await.is_ok()),
            ("full", full.await.is_ok()),
            ("after", after.await.is_ok()),
        ];
        let kept = keys(&db).await;
        assert!(!answers[1].1, "the disk was full");
        for (k, ok) in answers {
            assert_eq!(
                ok,
                kept.iter().any(|kept| kept == k),
                "{k}: {answers:?}, kept {kept:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_group_is_committed_though_its_leader_is_gone_while_it_waits() {
        let (_dir, db) = sqlite();
        table_t(&db).await;
        let insert = |k: &str| db.query("INSERT INTO t VALUES ($1, 1)").bind(k);
        let mut leader = Box::pin(insert("leader").execute());
        let mut follower = std::pin::pin!(insert("follower").execute());
        assert!(poll_once(leader.as_mut()).is_pending());
        assert!(poll_once(follower.as_mut()).is_pending());
        // Its caller gone (a timeout, a closed connection): the group is committed at
        // once, as a write whose caller goes away after its commit.
        drop(leader);
        assert_eq!(follower.await.unwrap(), 1);
        assert_eq!(keys(&db).await, ["follower", "leader", "taken"]);
    }
}
