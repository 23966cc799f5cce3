//! What the new-change benches' own programs share (`change_floor`, `store_alone`): the
//! bench's records and customers as actiongate sees them, actiongate's store calls of a
//! new change, and the floor's bare database.

use actiongate::store::{now_ms, AuditEntry, ClaimToSend, OpState, Operation, Store};
use contract::outcome::{Outcome, Status, Terms};

/// The budget as the bench runs actiongate (`--rate-capacity 1000000`), refilled at the
/// default rate (20 an hour).
pub const CAPACITY: f64 = 1_000_000.0;
pub const PER_SECOND: f64 = 20.0 / 3600.0;

/// A question of the length the bench's conversation reads out, for the audit entry.
pub const QUESTION: &str = "To confirm: Stop renewal at the end of the current period for LOAD-000000, \
     from 2027-02-01T00:00:00Z. January box ships as usual; no charge on 2027-02-01. Shall I go ahead?";

/// The account as the bench's customers have it: `load-N` talks for account `load-{N % 50}`.
pub fn account(sender: &str) -> String {
    let n: usize = sender
        .rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    format!("load-{}", n % 50)
}

/// The terms as actiongate keeps them for the bench's records
/// (`testkit::Service::put_stop_renewal_record`).
pub fn terms(revision: i64) -> Terms {
    Terms {
        tag: format!("r{revision}"),
        label: "Stop renewal at the end of the current period".into(),
        effective: "2027-02-01T00:00:00Z".into(),
        entitlements: "January box ships as usual; no charge on 2027-02-01".into(),
    }
}

/// An audit entry as actiongate writes one for `sender`'s call of `action`.
pub fn audit_entry(
    action: &str,
    sender: &str,
    subscription: &str,
    status: &str,
    key: Option<String>,
) -> AuditEntry {
    AuditEntry {
        at: now_ms(),
        action: action.into(),
        sender_id: sender.into(),
        account: Some(account(sender)),
        target: Some(format!("{subscription} stop_renewal")),
        service_terms: Some(terms(0).to_string()),
        status: status.into(),
        request_key: key,
        ..AuditEntry::default()
    }
}

/// actiongate's store before the command: the key, the subscription's open operation and a
/// held change under the key (one query), then the claim and the budget's token in one
/// transaction.
pub async fn claim(
    store: &Store,
    key: &str,
    sender: &str,
    subscription: &str,
    change_type: &str,
    revision: i64,
) -> Result<(), String> {
    let repeats = store
        .repeats(key, subscription)
        .await
        .map_err(|e| e.to_string())?;
    if repeats.mine.is_some() || repeats.open.is_some() || repeats.held {
        return Err("not a new change".into());
    }
    let now = now_ms();
    let op = Operation {
        request_key: key.to_owned(),
        sender_id: sender.to_owned(),
        account: account(sender),
        subscription: subscription.to_owned(),
        change_type: change_type.to_owned(),
        revision,
        terms: terms(revision),
        state: OpState::Claimed,
        outcome: None,
        created_at: now,
        updated_at: now,
        asked_at: Some(now),
    };
    match store.claim_to_send(&op, CAPACITY, PER_SECOND).await {
        Ok(ClaimToSend::Sending) => Ok(()),
        Ok(other) => Err(format!("not claimed: {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// actiongate's store after the command: the outcome (`made`: the service made the
/// change), then apply's audit entry.
pub async fn record_outcome(
    store: &Store,
    key: &str,
    sender: &str,
    subscription: &str,
    revision: i64,
    made: bool,
) -> Result<(), String> {
    let (op_state, status) = if made {
        (OpState::Applied, Status::Applied)
    } else {
        (OpState::Failed, Status::Blocked)
    };
    let outcome = Outcome {
        status,
        reason: None,
        effects: u8::from(made),
        current: Some(terms(revision)),
        why: None,
    };
    store
        .set_state(key, op_state, Some(&outcome))
        .await
        .map_err(|e| e.to_string())?;
    let mut entry = audit_entry(
        "apply_subscription_change",
        sender,
        subscription,
        outcome.status.as_str(),
        Some(key.to_owned()),
    );
    entry.question_terms = Some(QUESTION.to_owned());
    store.audit(entry).await.map_err(|e| e.to_string())
}

/// The floor's own database in `dir` (made when missing), opened as actiongate's store
/// opens SQLite (WAL, `synchronous = NORMAL`), with its one table.
pub fn open_bare(dir: &str) -> Result<rusqlite::Connection, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
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

/// The floor's claim: the operation's row, committed before the command.
pub const BARE_CLAIM: &str =
    "INSERT INTO operations (request_key, sender_id, subscription, change_type, revision, state) \
     VALUES (?1, ?2, ?3, ?4, ?5, 'sent')";

/// The floor's outcome: the row's state and the service's answer, committed before the
/// answer.
pub const BARE_OUTCOME: &str =
    "UPDATE operations SET state = ?2, outcome = ?3 WHERE request_key = ?1";

/// One statement in its own transaction, committed before it returns.
pub fn commit_one(
    db: &mut rusqlite::Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<()> {
    let tx = db.transaction()?;
    tx.prepare_cached(sql)?.execute(params)?;
    tx.commit()
}
