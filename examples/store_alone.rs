//! The store's share of a new change, for bench/new_changes.sh: actiongate's own store on
//! SQLite making, change after change, the calls a new change makes of it, with no HTTP,
//! no service and no guard, so its CPU is read apart from everything around it.
//!
//! Per change, as `change_floor --store actiongate` makes them: select's audit entry; the
//! key and the subscription's open operation, and a held change under the key (the reads
//! before the claim); the claim and the budget's token in one transaction; the outcome;
//! apply's audit entry (both through the batched writer). One customer at a time on one
//! thread, so the figure is the store's and nothing waits on anything else.
//!
//! With `--store bare`, the floor's two commits instead (`change_floor`'s own table, opened
//! as it opens it): the claim's row inserted, then its outcome written, each committed.
//!
//! Usage: store_alone --data-dir DIR [--changes N] [--store actiongate|bare]
//! Prints `store_alone store=… changes=N cpu_us=… user_us=… kernel_us=… checkpoint_us=…`: the
//! process's CPU per change, split into user and kernel time, and the part of it on the
//! checkpoint thread (`subscription_service::checkpoints`), all from /proc.

use actiongate::store::Store;

#[path = "shared/new_change.rs"]
mod new_change;
use new_change::{
    audit_entry, claim, commit_one, open_bare, record_outcome, terms, BARE_CLAIM, BARE_OUTCOME,
};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Changes made before the measured ones: the statements prepared, the log and the
/// tables past their first pages.
const WARM_UP: usize = 2_000;

/// Record `n`'s customer, subscription and request key.
fn names(n: usize) -> (String, String, String) {
    let sender = format!("load-{}", n % 16);
    let subscription = format!("LOAD-{n:06}");
    let key = format!("{sender}:{subscription}:stop_renewal:r1");
    (sender, subscription, key)
}

/// One new change's calls of actiongate's store, for record `n`.
async fn change(store: &Store, n: usize) -> Result<(), String> {
    let (sender, subscription, key) = names(n);
    store
        .audit(audit_entry(
            "select_subscription_change",
            &sender,
            &subscription,
            "selected",
            None,
        ))
        .await
        .map_err(|e| e.to_string())?;
    claim(store, &key, &sender, &subscription, "stop_renewal", 1).await?;
    record_outcome(store, &key, &sender, &subscription, 1, true).await
}

/// The floor's two commits for record `n`, as `change_floor` makes them.
fn bare_change(db: &mut rusqlite::Connection, n: usize) -> Result<(), String> {
    let (sender, subscription, key) = names(n);
    commit_one(
        db,
        BARE_CLAIM,
        rusqlite::params![key, sender, subscription, "stop_renewal", 1],
    )
    .and_then(|()| {
        commit_one(
            db,
            BARE_OUTCOME,
            rusqlite::params![key, "applied", terms(2).to_string()],
        )
    })
    .map_err(|e| e.to_string())
}

/// CPU seconds so far of this process's threads: (user, kernel, the checkpoint thread's).
fn cpu() -> (f64, f64, f64) {
    let tick = 100.0; // USER_HZ: /proc's clock ticks on Linux
    let (mut user, mut kernel, mut checkpoint) = (0.0, 0.0, 0.0);
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let path = task.expect("a thread").path();
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
            continue; // a thread that ended meanwhile
        };
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        // The fields after the command's closing parenthesis: utime and stime are the
        // 12th and 13th of them.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace()
            .collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let (u, k) = (ticks(11) / tick, ticks(12) / tick);
        user += u;
        kernel += k;
        // The kernel keeps 15 bytes of a thread's name.
        if "sqlite-checkpoint".starts_with(comm.trim()) && !comm.trim().is_empty() {
            checkpoint += u + k;
        }
    }
    (user, kernel, checkpoint)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), String> {
    let (mut dir, mut changes, mut bare) = (None, 30_000usize, false);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--data-dir" => dir = Some(value),
            "--changes" => changes = value.parse().map_err(|e| format!("--changes: {e}"))?,
            "--store" => {
                bare = match value.as_str() {
                    "bare" => true,
                    "actiongate" => false,
                    other => return Err(format!("--store actiongate|bare, not {other}")),
                }
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let dir =
        dir.ok_or("usage: store_alone --data-dir DIR [--changes N] [--store actiongate|bare]")?;
    if bare {
        let mut db = open_bare(&dir).map_err(|e| e.to_string())?;
        for n in 0..WARM_UP {
            bare_change(&mut db, n)?;
        }
        let before = cpu();
        for n in WARM_UP..WARM_UP + changes {
            bare_change(&mut db, n)?;
        }
        report("bare", changes, before, cpu());
        return Ok(());
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let store = Store::connect(&format!("sqlite:{dir}/actiongate.db"))
        .await
        .map_err(|e| e.to_string())?;
    for n in 0..WARM_UP {
        change(&store, n).await?;
    }
    store.flush_audit().await;
    let before = cpu();
    for n in WARM_UP..WARM_UP + changes {
        change(&store, n).await?;
    }
    store.flush_audit().await;
    report("actiongate", changes, before, cpu());
    Ok(())
}

/// Prints the CPU per change between two readings of [`cpu`].
fn report(store: &str, changes: usize, before: (f64, f64, f64), after: (f64, f64, f64)) {
    let per = |s: f64| s * 1e6 / changes as f64;
    let (user, kernel, checkpoint) = (
        per(after.0 - before.0),
        per(after.1 - before.1),
        per(after.2 - before.2),
    );
    println!(
        "store_alone store={store} changes={changes} cpu_us={:.1} user_us={user:.1} kernel_us={kernel:.1} checkpoint_us={checkpoint:.1}",
        user + kernel
    );
}
