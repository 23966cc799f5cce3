//! SQLite's checkpoints on a thread of their own, off the connection every request waits
//! for: the service's file and actiongate's store both use it.
//!
//! In WAL mode SQLite copies the log's pages back into the database file (a checkpoint)
//! by default inside the commit that takes the log past 1,000 pages: that one commit then
//! copies them and `fsync`s the file while holding the connection, and every request
//! behind it waits. So a file that is written to gets a thread that checkpoints it on a
//! connection of its own, soon after each write, and the statements' connection only
//! checkpoints itself past [`LOG_PAGES_KEPT`].
//!
//! Soon, and so in small steps: a checkpoint slows the writes beside it while it copies
//! and `fsync`s, and the more pages it has to copy, the longer (measured, not explained:
//! the file system's flush of the copied pages is the likely cause). On the new-change bench (`bench/new_changes.sh`, one worker thread) a change's p99 was
//! 13.5–17.4 ms with the service's checkpoints inside its commits, 11.3–13.1 ms with a
//! checkpoint every 100 ms on a thread, 18–20 ms every second, and 9.1–10.4 ms 20 ms
//! after a write; 11.7–12.3 ms with the service's at 20 ms and the store's at 100. The
//! price is a few µs of CPU a change in the more frequent checkpoints (the same hot pages
//! copied more often).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// How long after a write its pages are copied back: the writes of that moment gather
/// into one checkpoint.
const CHECKPOINT_AFTER: Duration = Duration::from_millis(20);

/// Pages in the log past which the statements' connection copies them back itself, as
/// SQLite does by default at 1,000. The log starts over only at a write that finds every
/// page of it copied back, which under writes that never pause the thread's checkpoints
/// (racing the writes) do not reach: then the log grows to this many pages (83 MB), the
/// connection copies the few the thread left, and the next write starts it over. At 1,000
/// that copy and its `fsync`s came every few hundred changes on the requests' path: the
/// same CPU, fewer changes a second and a longer p99 (README, "A new change each time").
pub const LOG_PAGES_KEPT: i64 = 20_000;

/// The checkpoint thread of a SQLite file: [`CHECKPOINT_AFTER`] a write, on a connection
/// of its own, it copies the write-ahead log's pages back into the database file (a
/// passive checkpoint: it waits for nobody). With no statement run it sleeps: its callers
/// (the store, the service) mark every statement, reads too, since a read may write
/// (`RETURNING`), so a burst of reads costs one checkpoint that finds nothing to copy. The
/// thread ends when this is stopped or dropped.
pub struct Checkpoints {
    /// Written since the thread last began a checkpoint.
    written: Arc<AtomicBool>,
    /// Wakes the thread; dropped, it ends it.
    wake: Mutex<Option<mpsc::Sender<()>>>,
}

impl Checkpoints {
    /// No thread: a file in memory or opened read-only.
    pub fn none() -> Self {
        Self {
            written: Arc::default(),
            wake: Mutex::new(None),
        }
    }

    /// Moves the checkpoints of `statements`' file onto a thread with `own`, a second
    /// connection to the same file: `statements` checkpoints itself only past
    /// [`LOG_PAGES_KEPT`] pages from now on. If the thread cannot start, `statements` keeps
    /// SQLite's default and checkpoints as it commits.
    pub fn start(
        statements: &rusqlite::Connection,
        own: rusqlite::Connection,
    ) -> rusqlite::Result<Self> {
        let written = Arc::new(AtomicBool::new(false));
        let (wake, woken) = mpsc::channel();
        let flag = written.clone();
        let spawned = std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || {
                // Pages left behind (a reader on them, another process's checkpoint) are
                // tried again after the same pause, written or not.
                let mut left_behind = false;
                loop {
                    let woke = if left_behind {
                        woken.recv_timeout(CHECKPOINT_AFTER)
                    } else {
                        woken
                            .recv()
                            .map_err(|_| mpsc::RecvTimeoutError::Disconnected)
                    };
                    if let Err(mpsc::RecvTimeoutError::Disconnected) = woke {
                        return;
                    }
                    if let Err(mpsc::RecvTimeoutError::Disconnected) =
                        woken.recv_timeout(CHECKPOINT_AFTER)
                    {
                        return;
                    }
                    // Writes from here on wake the thread again: what was committed
                    // before is in this checkpoint.
                    flag.store(false, Ordering::Relaxed);
                    left_behind = checkpoint(&own);
                }
            });
        match spawned {
            Ok(_) => {
                statements.pragma_update(None, "wal_autocheckpoint", LOG_PAGES_KEPT)?;
                Ok(Self {
                    written,
                    wake: Mutex::new(Some(wake)),
                })
            }
            Err(e) => {
                tracing::warn!(error = %e, "the SQLite checkpoint thread did not start");
                Ok(Self::none())
            }
        }
    }

    /// A statement ran (after its commit): what it wrote is copied back soon.
    pub fn written(&self) {
        if !self.written.swap(true, Ordering::Relaxed) {
            if let Some(wake) = &*self.wake.lock().unwrap_or_else(|e| e.into_inner()) {
                // A thread already gone has nothing left to do.
                let _ = wake.send(());
            }
        }
    }

    /// Ends the thread, as soon as a checkpoint under way is done.
    pub fn stop(&self) {
        self.wake.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// One passive checkpoint: as many of the log's pages as no reader still needs. `true`
/// when pages were left behind for the next one; a checkpoint that failed is warned of
/// and tried again after the next write, not at every turn.
fn checkpoint(conn: &rusqlite::Connection) -> bool {
    let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        Ok((
            row.get::<_, i64>(0)?,
            row.get::<_, i64>(1)?,
            row.get::<_, i64>(2)?,
        ))
    });
    match done {
        Ok((busy, in_log, copied)) => busy != 0 || copied < in_log,
        Err(e) => {
            tracing::warn!(error = %e, "a SQLite checkpoint failed");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(path: &std::path::Path) -> rusqlite::Connection {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn
    }

    /// Pages of the database file itself (not its log).
    fn file_pages(path: &std::path::Path) -> u64 {
        std::fs::metadata(path).unwrap().len() / 4096
    }

    /// 1,500 pages committed one by one: past SQLite's default of 1,000, so one of those
    /// commits would have copied the log into the file. None does; the thread does, once
    /// told of a write.
    #[test]
    fn no_commit_copies_the_log_back_and_the_thread_does() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let statements = open(&path);
        let checkpoints = Checkpoints::start(&statements, open(&path)).unwrap();
        statements.execute_batch("CREATE TABLE t (v BLOB)").unwrap();
        for _ in 0..1_500 {
            statements
                .execute("INSERT INTO t VALUES (zeroblob(4000))", [])
                .unwrap();
        }
        assert!(
            file_pages(&path) < 100,
            "a commit copied the log back: {} pages",
            file_pages(&path)
        );

        checkpoints.written();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while file_pages(&path) < 1_500 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(file_pages(&path) >= 1_500, "{} pages", file_pages(&path));
        checkpoints.stop();
    }
}
