//! The event outbox: an event written in the same transaction as the change it reports,
//! then delivered to the configured URL, signed, at least once (retries with backoff), and
//! removed once a delivery got a 2xx. Its fault switches duplicate, delay, reorder and drop
//! deliveries, for the receiver's tests and the soak.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

use super::faults::next_percent;
use super::records::Db;
use crate::events::{sign, Event, SIGNATURE_HEADER};
use crate::model::{Change, Subscription};

/// Where events go, and how their delivery misbehaves (nothing by default).
#[derive(Debug, Clone)]
pub struct EventDelivery {
    /// The receiver, e.g. `http://127.0.0.1:5057/v1/service-events`.
    pub url: String,
    /// The shared secret of the signature.
    pub secret: String,
    pub faults: DeliveryFaults,
}

/// Misbehaviour of the delivery, for tests and the soak.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeliveryFaults {
    /// Each delivery is sent this many times (1 when 0).
    pub copies: u32,
    /// Percentage of events held back by `delay` before their first delivery, so later
    /// events overtake them.
    pub delay_percent: f64,
    pub delay: Duration,
    /// Deliver each batch of due events newest first.
    pub reorder: bool,
    /// Percentage of events dropped without being sent (lost deliveries).
    pub drop_percent: f64,
}

pub(super) const SCHEMA: &str =
    "CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, \
     id TEXT NOT NULL UNIQUE, body TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, \
     next_at INTEGER NOT NULL DEFAULT 0, held INTEGER NOT NULL DEFAULT 0)";

fn now_ms() -> i64 {
    (OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

fn event_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the system's random source works");
    format!("evt_{}", hex::encode(bytes))
}

/// Writes the event for `record` (after a change under `change`'s key, or a `PUT`) into
/// the outbox, inside the caller's transaction.
pub(super) fn write(
    db: &rusqlite::Connection,
    record: &Subscription,
    change: Option<&Change>,
) -> rusqlite::Result<()> {
    let event = Event {
        id: event_id(),
        kind: match change {
            Some(_) => crate::events::CHANGE_SCHEDULED,
            None => crate::events::SUBSCRIPTION_UPDATED,
        }
        .to_owned(),
        created: OffsetDateTime::now_utc().unix_timestamp(),
        subscription: record.id.clone(),
        account: record.account.clone(),
        revision: record.revision,
        request_key: change.map(|c| c.request_key.clone()),
        change: change.cloned(),
        record: record.clone(),
    };
    db.prepare_cached("INSERT INTO outbox (id, body) VALUES (?1, ?2)")?
        .execute([
            event.id.clone(),
            serde_json::to_string(&event).expect("an event serialises"),
        ])?;
    Ok(())
}

/// The delay before the next attempt after `attempts` failed ones: 100 ms doubling, at
/// most 30 s.
fn backoff(attempts: i64) -> i64 {
    (100_i64 << attempts.clamp(0, 9)).min(30_000)
}

/// Delivers due events until the process stops; `wake` is notified after each commit that
/// wrote one.
pub(super) async fn deliver(
    db: Arc<Db>,
    settings: EventDelivery,
    wake: Arc<tokio::sync::Notify>,
    dice: Arc<AtomicU64>,
) {
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
    {
        Ok(client) => client,
        Err(e) => {
            tracing::error!(error = %e, "the event delivery client could not be built; no events are delivered");
            return;
        }
    };
    let faults = settings.faults;
    loop {
        let due = db.with(|db| {
            db.prepare_cached(
                "SELECT seq, body, attempts, held FROM outbox WHERE next_at <= ?1 ORDER BY seq LIMIT 64",
            )?
            .query_map([now_ms()], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get::<_, i64>(3)? != 0))
            })?
            .collect::<rusqlite::Result<Vec<(i64, String, i64, bool)>>>()
        });
        let mut due = match due {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "the outbox could not be read");
                Vec::new()
            }
        };
        if due.is_empty() {
            tokio::select! {
                () = wake.notified() => {}
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
            continue;
        }
        if faults.reorder {
            due.reverse();
        }
        for (seq, body, attempts, held) in due {
            let result = if attempts == 0 && !held && next_percent(&dice) < faults.drop_percent {
                tracing::debug!(seq, "event dropped (injected)");
                remove(&db, seq)
            } else if attempts == 0 && !held && next_percent(&dice) < faults.delay_percent {
                db.with(|db| {
                    db.prepare_cached("UPDATE outbox SET held = 1, next_at = ?1 WHERE seq = ?2")?
                        .execute([now_ms() + faults.delay.as_millis() as i64, seq])
                })
            } else if send(&client, &settings, &body, faults.copies.max(1)).await {
                remove(&db, seq)
            } else {
                db.with(|db| {
                    db.prepare_cached(
                        "UPDATE outbox SET attempts = attempts + 1, next_at = ?1 WHERE seq = ?2",
                    )?
                    .execute([now_ms() + backoff(attempts), seq])
                })
            };
            if let Err(e) = result {
                tracing::warn!(error = %e, "the outbox could not be updated");
            }
        }
    }
}

/// Removes a delivered (or dropped) event.
fn remove(db: &Db, seq: i64) -> rusqlite::Result<usize> {
    db.with(|db| {
        db.prepare_cached("DELETE FROM outbox WHERE seq = ?1")?
            .execute([seq])
    })
}

/// Sends one event `copies` times, each signed now; `true` when one got a 2xx.
async fn send(client: &reqwest::Client, settings: &EventDelivery, body: &str, copies: u32) -> bool {
    let mut delivered = false;
    for _ in 0..copies {
        let t = OffsetDateTime::now_utc().unix_timestamp();
        let signature = sign(settings.secret.as_bytes(), t, body.as_bytes());
        let answer = client
            .post(&settings.url)
            .header(SIGNATURE_HEADER, signature)
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await;
        match answer {
            Ok(response) if response.status().is_success() => delivered = true,
            Ok(response) => {
                tracing::warn!(
                    status = response.status().as_u16(),
                    "an event delivery was refused"
                )
            }
            Err(e) => tracing::warn!(error = %e, "an event could not be delivered"),
        }
    }
    delivered
}
