//! The Stripe provider's command against a recording stand-in for Stripe (a real HTTP
//! server on loopback that records each request and answers with the records it is
//! given, and a product's name): localstripe ignores `Idempotency-Key` and cannot race a write, so these paths
//! are shown here.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::record::{StripeSubscription, STOP_RENEWAL};
use super::*;

/// A request as the stand-in received it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    head: String,
    body: String,
}

/// The recording stand-in: `GET`s answer `read`, writes answer `status` with `written`.
async fn stand_in(read: Value, status: u16, written: Value) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let (log, read, written) = (log.clone(), read.clone(), written.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let mut chunk = [0u8; 4096];
                    let Ok(n) = socket.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    let length = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap())
                        })
                        .unwrap_or(0);
                    if buf.len() < end + 4 + length {
                        continue;
                    }
                    let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + length]).to_string();
                    buf.drain(..end + 4 + length);
                    let mut first = head.split(' ');
                    let (method, path) = (
                        first.next().unwrap().to_owned(),
                        first.next().unwrap().to_owned(),
                    );
                    let product = json!({"id": "prod_box", "name": "Style Box"});
                    let gone = json!({"error": {"message": "unavailable"}});
                    let (code, answer) = if path.starts_with("/v1/products/prod_gone") {
                        (500, &gone)
                    } else if path.starts_with("/v1/products/") {
                        (200, &product)
                    } else if method == "GET" {
                        (200, &read)
                    } else {
                        (status, &written)
                    };
                    log.lock().unwrap().push(Seen {
                        method,
                        path,
                        head: head.to_ascii_lowercase(),
                        body,
                    });
                    let answer = answer.to_string();
                    let response = format!(
                        "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
                        answer.len()
                    );
                    if socket.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, seen)
}

fn record(cancel_at_period_end: bool, amount: i64) -> Value {
    json!({
        "id": "sub_1", "customer": "cus_A", "status": "active",
        "cancel_at_period_end": cancel_at_period_end, "current_period_end": 1798761600,
        "latest_invoice": "in_1",
        "items": {"data": [{"quantity": 1, "plan": {"id": "plan_m", "amount": amount,
            "currency": "usd", "interval": "month", "product": "prod_box"}}]},
    })
}

fn fingerprint(record: &Value) -> i64 {
    serde_json::from_value::<StripeSubscription>(record.clone())
        .unwrap()
        .facts()
        .unwrap()
        .fingerprint()
}

/// A confirmed command, as only the guard makes one outside these tests.
struct Command {
    revision: i64,
}

impl super::super::provider::sealed::Sealed for Command {}

impl ConfirmedCommand for Command {
    fn subscription(&self) -> &str {
        "sub_1"
    }
    fn change_type(&self) -> &str {
        STOP_RENEWAL
    }
    fn revision(&self) -> i64 {
        self.revision
    }
    fn request_key(&self) -> &str {
        "ag-key-1"
    }
}

/// The provider at `url`, its readings in a store of its own (a SQLite file in the
/// directory returned, removed when it is dropped).
async fn provider(url: &str) -> (StripeProvider, tempfile::TempDir) {
    provider_offering(url, Offered::default()).await
}

/// The provider at `url`, offering `offered`.
async fn provider_offering(url: &str, offered: Offered) -> (StripeProvider, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&format!("sqlite:{}/readings.db", dir.path().display()))
        .await
        .unwrap();
    let provider = StripeProvider::new(
        &StripeSettings {
            api_key: "sk_test_stand_in".into(),
            api_base: url.into(),
            offered,
            timeout: Duration::from_secs(5),
            webhook_secret: None,
        },
        store,
    )
    .unwrap();
    (provider, dir)
}

/// The command, as the guard sends it for a yes to `revision`.
async fn send(url: &str, revision: i64) -> CommandOutcome {
    let (provider, _dir) = provider(url).await;
    provider.send_change(&Command { revision }).await
}

/// The command sent again, as the reconciler sends one whose outcome is unknown.
async fn resend(url: &str, revision: i64) -> CommandOutcome {
    let (provider, _dir) = provider(url).await;
    provider.resend(&Command { revision }).await
}

fn writes(seen: &Mutex<Vec<Seen>>) -> Vec<Seen> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|s| s.method != "GET")
        .cloned()
        .collect()
}

#[tokio::test]
async fn the_write_carries_the_request_key_and_its_answer_is_checked() {
    let before = record(false, 1000);
    let (url, seen) = stand_in(before.clone(), 200, record(true, 1000)).await;
    let outcome = send(&url, fingerprint(&before)).await;
    let CommandOutcome::Applied {
        change,
        contradiction: None,
        ..
    } = &outcome
    else {
        panic!("{outcome:?}");
    };
    assert_eq!(change.revision, fingerprint(&record(true, 1000)));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter()
            .map(|s| (s.method.as_str(), s.path.as_str()))
            .collect::<Vec<_>>(),
        [
            ("GET", "/v1/subscriptions/sub_1"),
            ("POST", "/v1/subscriptions/sub_1")
        ],
        "read again right before the write"
    );
    let write = &seen[1];
    assert!(
        write.head.contains("\r\nidempotency-key: ag-key-1"),
        "{}",
        write.head
    );
    assert!(
        write
            .head
            .contains("\r\nauthorization: bearer sk_test_stand_in"),
        "{}",
        write.head
    );
    assert_eq!(write.body, "cancel_at_period_end=true");
}

#[tokio::test]
async fn a_write_that_raced_another_writer_stands_and_is_escalated() {
    let before = record(false, 1000);
    // Stripe's answer shows the change, and a new price nobody confirmed.
    let (url, _) = stand_in(before.clone(), 200, record(true, 2000)).await;
    let outcome = send(&url, fingerprint(&before)).await;
    let CommandOutcome::Applied {
        contradiction: Some(why),
        ..
    } = &outcome
    else {
        panic!("{outcome:?}");
    };
    assert!(
        why.contains("another writer") && why.contains("20.00 USD"),
        "{why}"
    );
}

/// Moved, and its product's name cannot be read (Stripe answers 500): still stale, nothing
/// sent, the terms now unknown (never `failed`: the command was not made).
#[tokio::test]
async fn a_moved_record_whose_product_cannot_be_read_is_stale() {
    let mut moved = record(false, 2000);
    moved["items"]["data"][0]["plan"]["product"] = json!("prod_gone");
    let (url, seen) = stand_in(moved, 200, record(true, 2000)).await;
    let outcome = send(&url, fingerprint(&record(false, 1000))).await;
    assert!(
        matches!(outcome, CommandOutcome::Stale(None)),
        "{outcome:?}"
    );
    assert!(writes(&seen).is_empty(), "nothing sent");
}

#[tokio::test]
async fn a_record_moved_since_the_yes_sends_nothing() {
    let (url, seen) = stand_in(record(false, 2000), 200, record(true, 2000)).await;
    let outcome = send(&url, fingerprint(&record(false, 1000))).await;
    assert!(matches!(outcome, CommandOutcome::Stale(_)), "{outcome:?}");
    assert!(writes(&seen).is_empty(), "nothing sent");
}

#[tokio::test]
async fn an_answer_that_does_not_show_the_change_or_a_5xx_is_unknown_never_failed() {
    let before = record(false, 1000);
    for (status, answer) in [
        (200, record(false, 1000)),
        (500, json!({"error": {"message": "x"}})),
    ] {
        let (url, seen) = stand_in(before.clone(), status, answer).await;
        let outcome = send(&url, fingerprint(&before)).await;
        assert!(
            matches!(outcome, CommandOutcome::Unknown(_)),
            "{status}: {outcome:?}"
        );
        assert_eq!(writes(&seen).len(), 1);
    }
    // Nothing listening: nothing can have been sent.
    let outcome = send("http://127.0.0.1:9", fingerprint(&before)).await;
    assert!(matches!(outcome, CommandOutcome::NotSent(_)), "{outcome:?}");
}

#[tokio::test]
async fn an_unknown_outcome_is_sent_again_under_the_same_key_only_onto_the_confirmed_record() {
    let before = record(false, 1000);
    // Still the confirmed revision: the first write may never have been made.
    let (url, seen) = stand_in(before.clone(), 200, record(true, 1000)).await;
    let outcome = resend(&url, fingerprint(&before)).await;
    assert!(
        matches!(
            outcome,
            CommandOutcome::Applied {
                contradiction: None,
                ..
            }
        ),
        "{outcome:?}"
    );
    let sent = writes(&seen);
    assert_eq!(sent.len(), 1);
    assert!(sent[0].head.contains("\r\nidempotency-key: ag-key-1"));
    // The change already shows, as Stripe writes it (cancel_at at the period's end): the
    // same key again, which Stripe answers with the first write's record.
    let mut made = record(true, 1000);
    made["cancel_at"] = json!(1798761600);
    let (url, seen) = stand_in(made.clone(), 200, made.clone()).await;
    let outcome = resend(&url, fingerprint(&before)).await;
    assert!(
        matches!(
            outcome,
            CommandOutcome::Applied {
                contradiction: None,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(writes(&seen).len(), 1);
    assert!(writes(&seen)[0]
        .head
        .contains("\r\nidempotency-key: ag-key-1"));
    // Moved otherwise (another price): whether the first write was made cannot be told
    // from the record, and nothing is written onto it.
    let (url, seen) = stand_in(record(true, 2000), 200, record(true, 2000)).await;
    let outcome = resend(&url, fingerprint(&before)).await;
    assert!(matches!(outcome, CommandOutcome::Stale(_)), "{outcome:?}");
    assert!(writes(&seen).is_empty(), "nothing sent");
}

#[tokio::test]
async fn a_change_no_longer_offered_is_not_sent_again() {
    // Stopping renewal was offered when the customer said yes, and is not any more (the
    // configuration changed before the outcome was known): the resend is checked as the
    // first write was, onto the confirmed record or that record with the change made.
    let offered = Offered {
        stop_renewal: false,
        ..Offered::default()
    };
    let before = record(false, 1000);
    let mut made = record(true, 1000);
    made["cancel_at"] = json!(1798761600);
    for now in [before.clone(), made] {
        let (url, seen) = stand_in(now.clone(), 200, now).await;
        let (provider, _dir) = provider_offering(&url, offered).await;
        let outcome = provider
            .resend(&Command {
                revision: fingerprint(&before),
            })
            .await;
        assert!(
            matches!(outcome, CommandOutcome::Rejected { status: 422, .. }),
            "{outcome:?}"
        );
        assert!(writes(&seen).is_empty(), "nothing sent");
    }
}

/// The spans of the calls made, with the status each answer had.
#[derive(Default, Clone)]
struct Spans(Arc<Mutex<Vec<(String, String)>>>);

impl<S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>>
    tracing_subscriber::Layer<S> for Spans
{
    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Status(String);
        impl tracing::field::Visit for Status {
            fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
                if field.name() == "http.response.status_code" {
                    self.0 = value.to_string();
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        let mut status = Status(String::new());
        values.record(&mut status);
        if let Some(span) = ctx.span(id) {
            self.0
                .lock()
                .unwrap()
                .push((span.name().to_owned(), status.0));
        }
    }
}

#[tokio::test]
async fn each_call_to_stripe_has_its_span_with_the_status_answered() {
    use tracing_subscriber::layer::SubscriberExt as _;
    crate::telemetry::spans_enabled_on_every_thread();
    let spans = Spans::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let before = record(false, 1000);
    let (url, _) = stand_in(before.clone(), 200, record(true, 1000)).await;
    let outcome = send(&url, fingerprint(&before)).await;
    assert!(
        matches!(outcome, CommandOutcome::Applied { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        *spans.0.lock().unwrap(),
        [
            ("stripe.get_subscription".to_owned(), "200".to_owned()),
            ("stripe.update_subscription".to_owned(), "200".to_owned()),
        ]
    );
}

/// A redirect is an answer to Stripe's client too, never followed: with every call
/// redirected to Stripe itself, the read before the write is not a record, nothing is
/// written, and Stripe receives no request at all.
#[tokio::test]
async fn a_redirect_is_not_followed_and_nothing_reaches_stripe() {
    let before = record(false, 1000);
    let (url, seen) = stand_in(before.clone(), 200, record(true, 1000)).await;
    let (front, redirected) = crate::subscriptions::client::testing::redirecting(url).await;
    let outcome = send(&front, fingerprint(&before)).await;
    assert!(
        !matches!(outcome, CommandOutcome::Applied { .. }),
        "{outcome:?}"
    );
    assert!(
        redirected
            .received
            .load(std::sync::atomic::Ordering::SeqCst)
            >= 1,
        "the front was asked"
    );
    assert!(seen.lock().unwrap().is_empty(), "Stripe received nothing");
}
