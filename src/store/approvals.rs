//! Held changes in the store (over 400 lines: every decision is its own conditional statement, written out in both dialects).
//!
//! Held changes (CONTRACT.md section 7) as stored operations: the hold, and each decision
//! as one conditional statement, so of two operators, two clicks or two replicas deciding
//! at once exactly one decides.

use super::db::Row;
use serde::Serialize;

use super::{now_ms, Store, StoreError};
use contract::outcome::{Outcome, Terms};

/// Where a held change is: held → approved (its operation, under the same request key,
/// then holds the outcome) | rejected | expired | blocked (on approval the facts had moved,
/// or the budget was spent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    Held,
    Approved,
    Rejected,
    Expired,
    Blocked,
    /// The customer took it back before it was decided (CONTRACT.md section 7).
    Withdrawn,
}

impl ApprovalState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Expired => "expired",
            Self::Blocked => "blocked",
            Self::Withdrawn => "withdrawn",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "held" => Self::Held,
            "approved" => Self::Approved,
            "rejected" => Self::Rejected,
            "expired" => Self::Expired,
            "withdrawn" => Self::Withdrawn,
            _ => Self::Blocked,
        }
    }
}

/// One held change.
#[derive(Debug, Clone, Serialize)]
pub struct Approval {
    pub request_key: String,
    pub sender_id: String,
    pub account: String,
    pub subscription: String,
    pub change_type: String,
    /// The revision the customer confirmed and the service had at step 13.
    pub revision: i64,
    /// The service's terms at step 13 (shown as JSON text, as stored).
    #[serde(serialize_with = "json_text")]
    pub terms: Terms,
    /// The question as Rasa sent it, and when.
    pub question: String,
    pub question_at: Option<f64>,
    /// The customer's reply, when, and its message id.
    pub reply: String,
    pub reply_at: Option<f64>,
    pub reply_id: Option<String>,
    /// Which rule held it (`change_type`, `account`, `review`).
    pub rule: String,
    pub state: ApprovalState,
    /// Milliseconds since the epoch.
    pub created_at: i64,
    pub expires_at: i64,
    pub decided_by: Option<String>,
    pub decided_at: Option<i64>,
    pub note: Option<String>,
    /// The outcome once decided, unless approved (then the operation's); shown as JSON
    /// text, as stored.
    #[serde(serialize_with = "json_text_or_null")]
    pub outcome: Option<Outcome>,
}

/// A value as the JSON text the store keeps (what `approvals list --format json` has always
/// shown).
fn json_text<S: serde::Serializer, T: Serialize>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&serde_json::to_string(value).map_err(serde::ser::Error::custom)?)
}

fn json_text_or_null<S: serde::Serializer>(
    value: &Option<Outcome>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => json_text(v, s),
        None => s.serialize_none(),
    }
}

const COLUMNS: &str = "request_key, sender_id, account, subscription, change_type, revision, terms, question, question_at, \
     reply, reply_at, reply_id, rule, state, created_at, expires_at, decided_by, decided_at, note, outcome";

fn approval_from(r: &Row) -> Result<Approval, StoreError> {
    let request_key: String = r.get(0);
    let corrupt = |what, e: serde_json::Error| StoreError::Corrupt {
        what,
        key: request_key.clone(),
        why: e.to_string(),
    };
    let terms = serde_json::from_str(r.str(6)).map_err(|e| corrupt("terms of the hold", e))?;
    let outcome = r
        .opt_str(19)
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| corrupt("outcome of the hold", e))?;
    Ok(Approval {
        request_key,
        sender_id: r.get(1),
        account: r.get(2),
        subscription: r.get(3),
        change_type: r.get(4),
        revision: r.get(5),
        terms,
        question: r.get(7),
        question_at: r.get(8),
        reply: r.get(9),
        reply_at: r.get(10),
        reply_id: r.get(11),
        rule: r.get(12),
        state: ApprovalState::parse(r.str(13)),
        created_at: r.get(14),
        expires_at: r.get(15),
        decided_by: r.get(16),
        decided_at: r.get(17),
        note: r.get(18),
        outcome,
    })
}

impl Store {
    /// Stores a hold; `false` when the request key has one already (a repeat of the same
    /// "yes").
    pub async fn hold(&self, a: &Approval) -> Result<bool, StoreError> {
        let done = self.db.query(format!(
            "INSERT INTO approvals ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 'held', $14, $15, NULL, NULL, NULL, NULL) \
             ON CONFLICT DO NOTHING"
        ))
        .bind(&a.request_key)
        .bind(&a.sender_id)
        .bind(&a.account)
        .bind(&a.subscription)
        .bind(&a.change_type)
        .bind(a.revision)
        .bind(serde_json::to_string(&a.terms)?)
        .bind(&a.question)
        .bind(a.question_at)
        .bind(&a.reply)
        .bind(a.reply_at)
        .bind(&a.reply_id)
        .bind(&a.rule)
        .bind(a.created_at)
        .bind(a.expires_at)
        .execute()
        .await?;
        Ok(done == 1)
    }

    /// The held change under a request key.
    pub async fn approval(&self, key: &str) -> Result<Option<Approval>, StoreError> {
        let row = self
            .db
            .query(format!(
                "SELECT {COLUMNS} FROM approvals WHERE request_key = $1"
            ))
            .bind(key)
            .fetch_optional()
            .await?;
        row.map(|r| approval_from(&r)).transpose()
    }

    /// Held changes in a state (all when `None`), oldest first.
    pub async fn approvals(
        &self,
        state: Option<ApprovalState>,
    ) -> Result<Vec<Approval>, StoreError> {
        let rows = self.db.query(format!(
            "SELECT {COLUMNS} FROM approvals WHERE (CAST($1 AS TEXT) IS NULL OR state = CAST($1 AS TEXT)) ORDER BY created_at, request_key"
        ))
        .bind(state.map(ApprovalState::as_str))
        .fetch_all()
        .await?;
        rows.iter().map(approval_from).collect()
    }

    /// The conversation's latest held change.
    pub async fn latest_approval_for_sender(
        &self,
        sender: &str,
    ) -> Result<Option<Approval>, StoreError> {
        let row = self
            .db
            .query(format!(
            "SELECT {COLUMNS} FROM approvals WHERE sender_id = $1 ORDER BY created_at DESC LIMIT 1"
        ))
            .bind(sender)
            .fetch_optional()
            .await?;
        row.map(|r| approval_from(&r)).transpose()
    }

    /// The conversation's newest change still held (unexpired, undecided), if any.
    pub async fn held_for_sender(&self, sender: &str) -> Result<Option<Approval>, StoreError> {
        let row = self
            .db
            .query(format!(
                "SELECT {COLUMNS} FROM approvals WHERE sender_id = $1 AND state = 'held' AND expires_at > $2 \
                 ORDER BY created_at DESC LIMIT 1"
            ))
            .bind(sender)
            .bind(now_ms())
            .fetch_optional()
            .await?;
        row.map(|r| approval_from(&r)).transpose()
    }

    /// The account's open (held, unexpired) holds, how many; and the subscription's, how
    /// many, with the oldest of them.
    pub async fn open_holds(
        &self,
        account: &str,
        subscription: &str,
    ) -> Result<(usize, usize, Option<Approval>), StoreError> {
        let now = now_ms();
        let count: i64 = self.db.query(
            "SELECT COUNT(*) FROM approvals WHERE account = $1 AND state = 'held' AND expires_at > $2",
        )
        .bind(account)
        .bind(now)
        .scalar()
        .await?;
        let row = self.db.query(format!(
            "SELECT {COLUMNS} FROM approvals WHERE subscription = $1 AND state = 'held' AND expires_at > $2 ORDER BY created_at LIMIT 1"
        ))
        .bind(subscription)
        .bind(now)
        .fetch_optional()
        .await?;
        let for_subscription: i64 = self.db.query(
            "SELECT COUNT(*) FROM approvals WHERE subscription = $1 AND state = 'held' AND expires_at > $2",
        )
        .bind(subscription)
        .bind(now)
        .scalar()
        .await?;
        Ok((
            count as usize,
            for_subscription as usize,
            row.map(|r| approval_from(&r)).transpose()?,
        ))
    }

    /// Approves a held, unexpired change: the time of the approval for exactly one caller
    /// however many approve at once, on any replica (`None` for the others).
    pub async fn start_approval(
        &self,
        key: &str,
        operator: &str,
        note: Option<&str>,
    ) -> Result<Option<i64>, StoreError> {
        let now = now_ms();
        let done = self.db.query(
            "UPDATE approvals SET state = 'approved', decided_by = $1, decided_at = $2, note = $3 \
             WHERE request_key = $4 AND state = 'held' AND expires_at > $2",
        )
        .bind(operator)
        .bind(now)
        .bind(note)
        .bind(key)
        .execute()
        .await?;
        Ok((done == 1).then_some(now))
    }

    /// Takes over an approval whose approver stopped before claiming its operation (approved
    /// at `decided_at`, untouched since): the time of the takeover for exactly one caller.
    pub async fn resume_approval(
        &self,
        key: &str,
        decided_at: i64,
    ) -> Result<Option<i64>, StoreError> {
        let now = now_ms();
        let done = self.db.query(
            "UPDATE approvals SET decided_at = $1 WHERE request_key = $2 AND state = 'approved' AND decided_at = $3",
        )
        .bind(now)
        .bind(key)
        .bind(decided_at)
        .execute()
        .await?;
        Ok((done == 1).then_some(now))
    }

    /// Gives an approval back to the held changes when it could not be carried out and
    /// nothing was sent or claimed (the service could not be read, another change of the
    /// subscription is unresolved): approved at `decided_at` by this caller, untouched since
    /// (a takeover moves it). It may then be approved again, rejected, withdrawn or expire.
    pub async fn release_approval(&self, key: &str, decided_at: i64) -> Result<bool, StoreError> {
        let done = self.db.query(
            "UPDATE approvals SET state = 'held', decided_by = NULL, decided_at = NULL, note = NULL \
             WHERE request_key = $1 AND state = 'approved' AND decided_at = $2",
        )
        .bind(key)
        .bind(decided_at)
        .execute()
        .await?;
        Ok(done == 1)
    }

    /// Ends an approved change without sending (the facts moved, the budget was spent).
    pub async fn block_approval(&self, key: &str, outcome: &Outcome) -> Result<(), StoreError> {
        let outcome = serde_json::to_string(outcome)?;
        self.db.query(
            "UPDATE approvals SET state = 'blocked', outcome = $1 WHERE request_key = $2 AND state = 'approved'",
        )
        .bind(&outcome)
        .bind(key)
        .execute()
        .await?;
        Ok(())
    }

    /// The customer withdraws a held change before it is decided: `true` for exactly one
    /// caller; an approval or a rejection that comes first wins, and one that comes after
    /// finds nothing held.
    pub async fn withdraw_approval(
        &self,
        key: &str,
        outcome: &Outcome,
    ) -> Result<bool, StoreError> {
        let outcome = serde_json::to_string(outcome)?;
        let done = self.db.query(
            "UPDATE approvals SET state = 'withdrawn', decided_by = 'customer', decided_at = $1, outcome = $2 \
             WHERE request_key = $3 AND state = 'held' AND expires_at > $1",
        )
        .bind(now_ms())
        .bind(&outcome)
        .bind(key)
        .execute()
        .await?;
        Ok(done == 1)
    }

    /// Rejects a held change: `true` for exactly one caller.
    pub async fn reject_approval(
        &self,
        key: &str,
        operator: &str,
        note: &str,
        outcome: &Outcome,
    ) -> Result<bool, StoreError> {
        let outcome = serde_json::to_string(outcome)?;
        let done = self.db.query(
            "UPDATE approvals SET state = 'rejected', decided_by = $1, decided_at = $2, note = $3, outcome = $4 \
             WHERE request_key = $5 AND state = 'held' AND expires_at > $2",
        )
        .bind(operator)
        .bind(now_ms())
        .bind(note)
        .bind(&outcome)
        .bind(key)
        .execute()
        .await?;
        Ok(done == 1)
    }

    /// Ends every hold past its expiry; returns their request keys.
    pub async fn expire_approvals(&self, outcome: &Outcome) -> Result<Vec<String>, StoreError> {
        let outcome = serde_json::to_string(outcome)?;
        let now = now_ms();
        let due: Vec<String> = self
            .db
            .query("SELECT request_key FROM approvals WHERE state = 'held' AND expires_at <= $1")
            .bind(now)
            .scalars()
            .await?;
        let mut expired = Vec::new();
        for key in due {
            let done = self
                .db
                .query(
                    "UPDATE approvals SET state = 'expired', decided_at = $1, outcome = $2 \
                 WHERE request_key = $3 AND state = 'held' AND expires_at <= $1",
                )
                .bind(now)
                .bind(&outcome)
                .bind(&key)
                .execute()
                .await?;
            if done == 1 {
                expired.push(key);
            }
        }
        Ok(expired)
    }
}

/// A signed-in operator.
#[derive(Debug, Clone)]
pub struct OperatorSession {
    pub operator: String,
    /// The token every form of this session carries.
    pub csrf: String,
    pub expires_at: i64,
    /// The fingerprint of the credential it was opened with (the SHA-256 of the
    /// operator's password hash then).
    pub credential: String,
}

/// What the console's search narrows operations to (every field optional).
#[derive(Debug, Clone, Default)]
pub struct OperationFilter {
    pub account: Option<String>,
    pub sender_id: Option<String>,
    pub subscription: Option<String>,
    /// An operation state (`applied`, `unknown`, ...).
    pub state: Option<String>,
    /// Milliseconds since the epoch.
    pub since: Option<i64>,
    pub limit: i64,
}

impl Store {
    /// Stores a session under the digest of its cookie.
    pub async fn open_session(
        &self,
        id_hash: &str,
        operator: &str,
        csrf: &str,
        expires_at: i64,
        credential: &str,
    ) -> Result<(), StoreError> {
        self.db.query(
            "INSERT INTO operator_sessions (id_hash, operator, csrf, created_at, expires_at, credential) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(id_hash)
        .bind(operator)
        .bind(csrf)
        .bind(now_ms())
        .bind(expires_at)
        .bind(credential)
        .execute()
        .await?;
        Ok(())
    }

    /// The unexpired session under the digest of a cookie.
    pub async fn session(&self, id_hash: &str) -> Result<Option<OperatorSession>, StoreError> {
        let row = self.db.query(
            "SELECT operator, csrf, expires_at, credential FROM operator_sessions WHERE id_hash = $1 AND expires_at > $2",
        )
        .bind(id_hash)
        .bind(now_ms())
        .fetch_optional()
        .await?;
        Ok(row.map(|r| OperatorSession {
            operator: r.get(0),
            csrf: r.get(1),
            expires_at: r.get(2),
            credential: r.get(3),
        }))
    }

    /// Ends every session of an operator (sign-out everywhere); how many there were.
    pub async fn close_sessions_of(&self, operator: &str) -> Result<u64, StoreError> {
        let done = self
            .db
            .query("DELETE FROM operator_sessions WHERE operator = $1")
            .bind(operator)
            .execute()
            .await?;
        Ok(done)
    }

    /// Ends a session (sign-out), and drops every expired one.
    pub async fn close_session(&self, id_hash: &str) -> Result<(), StoreError> {
        self.db
            .query("DELETE FROM operator_sessions WHERE id_hash = $1 OR expires_at <= $2")
            .bind(id_hash)
            .bind(now_ms())
            .execute()
            .await?;
        Ok(())
    }

    /// Operations matching the filter, newest first.
    pub async fn search_operations(
        &self,
        f: &OperationFilter,
    ) -> Result<Vec<super::Operation>, StoreError> {
        let rows = self.db.query(format!(
            "SELECT {} FROM operations WHERE (CAST($1 AS TEXT) IS NULL OR account = CAST($1 AS TEXT)) \
             AND (CAST($2 AS TEXT) IS NULL OR sender_id = CAST($2 AS TEXT)) \
             AND (CAST($3 AS TEXT) IS NULL OR subscription = CAST($3 AS TEXT)) \
             AND (CAST($4 AS TEXT) IS NULL OR state = CAST($4 AS TEXT)) \
             AND created_at >= $5 ORDER BY created_at DESC LIMIT $6",
            super::operations::OP_COLUMNS
        ))
        .bind(&f.account)
        .bind(&f.sender_id)
        .bind(&f.subscription)
        .bind(&f.state)
        .bind(f.since.unwrap_or(0))
        .bind(if f.limit > 0 { f.limit } else { 500 })
        .fetch_all()
        .await?;
        rows.iter().map(super::operations::operation_from).collect()
    }
}
