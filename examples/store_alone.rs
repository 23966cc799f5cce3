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
//! Prints `store_alone changes=N cpu_us=… user_us=… kernel_us=… checkpoint_us=…`: the
//! process's CPU per change, split into user and kernel time, and the part of it on the
//! checkpoint thread (`subscription_service::checkpoints`), all from /proc.

use actiongate::store::{now_ms, AuditEntry, ClaimToSend, OpState, Operation, Store};
use contract::outcome::{Outcome, Status, Terms};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Changes made before the measured ones: the statements prepared, the log and the
/// tables past their first pages.
const WARM_UP: usize = 2_000;

/// The budget as the bench runs actiongate (`--rate-capacity 1000000`), refilled at the
/// default rate (20 an hour).
const CAPACITY: f64 = 1_000_000.0;
const PER_SECOND: f64 = 20.0 / 3600.0;

/// The question of the bench's conversation, for apply's audit entry.
const QUESTION: &str = "To confirm: Stop renewal at the end of the current period for LOAD-000000, \
     from 2027-02-01T00:00:00Z. January box ships as usual; no charge on 2027-02-01. Shall I go ahead?";

/// The terms as actiongate keeps them for the bench's records.
fn terms(revision: i64) -> Terms {
    Terms {
        tag: format!("r{revision}"),
        label: "Stop renewal at the end of the current period".into(),
        effective: "2027-02-01T00:00:00Z".into(),
        entitlements: "January box ships as usual; no charge on 2027-02-01".into(),
    }
}

fn audit_entry(action: &str, sender: &str, subscription: &str, key: Option<&str>) -> AuditEntry {
    AuditEntry {
        at: now_ms(),
        action: action.into(),
        sender_id: sender.into(),
        account: Some(account(sender)),
        target: Some(format!("{subscription} stop_renewal")),
        question_terms: key.map(|_| QUESTION.to_owned()),
        service_terms: Some(terms(1).to_string()),
        status: if key.is_some() { "applied" } else { "selected" }.into(),
        request_key: key.map(str::to_owned),
        ..AuditEntry::default()
    }
}

/// The account as the bench's customers have it: `load-N` talks for account `load-{N % 50}`.
fn account(sender: &str) -> String {
    let n: usize = sender
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    format!("load-{}", n % 50)
}

/// One new change's calls of the store, for record `n` and customer `load-{n % 16}`.
async fn change(store: &Store, n: usize) -> Result<(), String> {
    let sender = format!("load-{}", n % 16);
    let subscription = format!("LOAD-{n:06}");
    let key = format!("{sender}:{subscription}:stop_renewal:r1");
    let fail = |e: actiongate::store::StoreError| e.to_string();
    store
        .audit(audit_entry(
            "select_subscription_change",
            &sender,
            &subscription,
            None,
        ))
        .await
        .map_err(fail)?;
    let (mine, open) = store
        .operation_and_open(&key, &subscription)
        .await
        .map_err(fail)?;
    if mine.is_some() || open.is_some() || store.approval(&key).await.map_err(fail)?.is_some() {
        return Err(format!("{key} is not a new change"));
    }
    let now = now_ms();
    let op = Operation {
        request_key: key.clone(),
        sender_id: sender.clone(),
        account: account(&sender),
        subscription: subscription.clone(),
        change_type: "stop_renewal".into(),
        revision: 1,
        terms: terms(1),
        state: OpState::Claimed,
        outcome: None,
        created_at: now,
        updated_at: now,
        asked_at: Some(now),
    };
    match store.claim_to_send(&op, CAPACITY, PER_SECOND).await {
        Ok(ClaimToSend::Sending) => {}
        Ok(other) => return Err(format!("{key} not claimed: {other:?}")),
        Err(e) => return Err(e.to_string()),
    }
    let outcome = Outcome {
        status: Status::Applied,
        reason: None,
        effects: 1,
        current: Some(terms(2)),
        why: None,
    };
    store
        .set_state(&key, OpState::Applied, Some(&outcome))
        .await
        .map_err(fail)?;
    store
        .audit(audit_entry(
            "apply_subscription_change",
            &sender,
            &subscription,
            Some(&key),
        ))
        .await
        .map_err(fail)
}

/// The floor's two commits for record `n`, as `change_floor` makes them.
fn bare_change(db: &mut rusqlite::Connection, n: usize) -> Result<(), String> {
    let sender = format!("load-{}", n % 16);
    let subscription = format!("LOAD-{n:06}");
    let key = format!("{sender}:{subscription}:stop_renewal:r1");
    let outcome = terms(2).to_string();
    let mut commit = |sql: &str, params: &[&dyn rusqlite::ToSql]| -> rusqlite::Result<()> {
        let tx = db.transaction()?;
        tx.prepare_cached(sql)?.execute(params)?;
        tx.commit()
    };
    commit(
        "INSERT INTO operations (request_key, sender_id, subscription, change_type, revision, state) \
         VALUES (?1, ?2, ?3, 'stop_renewal', 1, 'sent')",
        &[&key, &sender, &subscription],
    )
    .and_then(|()| {
        commit(
            "UPDATE operations SET state = 'applied', outcome = ?2 WHERE request_key = ?1",
            &[&key, &outcome],
        )
    })
    .map_err(|e| e.to_string())
}

/// `change_floor`'s database: WAL, `synchronous = NORMAL`, its one table.
fn bare_open(dir: &str) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(format!("{dir}/floor.db"))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS operations (request_key TEXT PRIMARY KEY, sender_id TEXT NOT NULL, \
           subscription TEXT NOT NULL, change_type TEXT NOT NULL, revision INTEGER NOT NULL, \
           state TEXT NOT NULL, outcome TEXT);",
    )?;
    Ok(conn)
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
            "--store" => bare = value == "bare",
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let dir = dir.ok_or("usage: store_alone --data-dir DIR [--changes N]")?;
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    if bare {
        let mut db = bare_open(&dir).map_err(|e| e.to_string())?;
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
