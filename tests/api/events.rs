//! The service's signed change events: the reference service running as its own process
//! and delivering over HTTP to the app's events listener. Duplicates acted on once;
//! reordered and delayed deliveries never take the known record back; forged, re-signed,
//! replayed or altered deliveries refused with nothing recorded; a contradiction kept for a
//! person and never acted on; an unknown outcome resolved by its event, with the
//! reconciler an hour away (how soon is printed).

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{outcome_of, spawn_app_with, Chat, Service, TestApp};
use serde_json::{json, Value};

use actiongate::store::OpState;
use actiongate::subscriptions::events::{sign, SIGNATURE_HEADER};

const SECRET: &str = "events-secret-for-tests";
/// How long the server waits for the service here, and how long these services hold a
/// command before they make it: the reads before it must answer in time even with the
/// whole suite loading the machine (at 0.5 s they did not always), and the command must
/// not, so its outcome is unknown.
const TIMEOUT_S: &str = "2";
const COMMAND_DELAY_MS: &str = "5000";

/// `actiongate subscription-service` as its own process, killed when dropped.
struct ServiceProcess {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the service on `port`, delivering events to `events_url` when given.
async fn service_process(port: u16, events_url: Option<&str>, extra: &[&str]) -> ServiceProcess {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_actiongate"));
    command
        .args([
            "subscription-service",
            "--quiet",
            "--port",
            &port.to_string(),
        ])
        .args(["--data-dir", dir.path().to_str().unwrap()]);
    if let Some(url) = events_url {
        command.args(["--events-url", url, "--events-secret", SECRET]);
    }
    let child = command.args(extra).stdout(Stdio::null()).spawn().unwrap();
    let process = ServiceProcess {
        child,
        url: format!("http://127.0.0.1:{port}"),
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while reqwest::get(format!("{}/v1/subscriptions/WS-SUB-3304", process.url))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the service did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    process
}

/// An app receiving events, on the service at `service_port` (started after it).
async fn app_for(service_port: u16, extra: &[&str]) -> TestApp {
    let url = format!("http://127.0.0.1:{service_port}");
    let mut args = vec![
        "--subscriptions-url",
        url.as_str(),
        "--events-port",
        "0",
        "--events-secret",
        SECRET,
        "--reconcile-interval",
        "3600",
    ];
    args.extend_from_slice(extra);
    spawn_app_with(&args, |_| {}).await
}

/// A confirmed "yes" and its apply request.
async fn confirmed(app: &TestApp, sender: &str) -> (Chat, Value) {
    let mut c = Chat::new(sender, Some("acct-7"));
    c.request_change(app, "WS-SUB-3304", "stop_renewal")
        .await
        .unwrap();
    c.user("yes", "affirm", &[]);
    let request = c.request("apply_subscription_change");
    (c, request)
}

/// The app's count of events with this outcome, from `/metrics`.
async fn counted(app: &TestApp, outcome: &str) -> u64 {
    let text = reqwest::get(format!("{}/metrics", app.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = format!("actiongate_service_events_total{{outcome=\"{outcome}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line))
        .unwrap_or_else(|| panic!("no {outcome} count in /metrics"))
        .parse()
        .unwrap()
}

/// Waits (polling every 20 ms) until `$done` is true; fails the test after `$within`.
macro_rules! until {
    ($what:expr, $within:expr, $done:expr) => {{
        let deadline = Instant::now() + $within;
        while !$done {
            assert!(Instant::now() < deadline, "timed out waiting for {}", $what);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }};
}

/// A command whose answer the app gave up on (the service holds it 1.5 s; the app waits
/// 0.5 s): the outcome is unknown, and the change is made at the service afterwards.
async fn unknown_outcome(app: &TestApp, sender: &str) -> (Value, String) {
    let (_, request) = confirmed(app, sender).await;
    let first = outcome_of(&app.webhook(&request).await.1);
    assert_eq!(first["status"], "pending_verification", "{first}");
    let op = app.store.latest_for_sender(sender).await.unwrap().unwrap();
    assert_eq!(op.state, OpState::Unknown);
    (request, op.request_key)
}

#[tokio::test]
async fn an_unknown_outcome_is_resolved_by_its_event_not_the_reconciler() {
    let port = free_port();
    let app = app_for(port, &["--subscriptions-timeout", TIMEOUT_S]).await;
    let service = service_process(
        port,
        Some(&app.events_url()),
        &["--command-delay-ms", COMMAND_DELAY_MS],
    )
    .await;
    let (request, key) = unknown_outcome(&app, "resolved-by-event").await;
    let records = Service::new(&service.url);
    // The change lands at the service; then its event resolves the operation.
    until!(
        "the change at the service",
        Duration::from_secs(20),
        records.revision("WS-SUB-3304").await == 5
    );
    // Resolved by the event: its verdict says so, and nothing else could have (the
    // reconciler runs at start and then hourly, and no customer turn came in between).
    until!(
        "the operation resolved",
        Duration::from_secs(10),
        app.store.operation(&key).await.unwrap().unwrap().state == OpState::Applied
    );
    let events = app.store.received_events(None).await.unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].verdict, "resolved");
    assert_eq!(events[0].revision, 5);
    // The customer's next turn sees it, and nothing was sent again.
    let again = outcome_of(&app.webhook(&request).await.1);
    assert_eq!(again["status"], "applied", "{again}");
    assert_eq!(records.revision("WS-SUB-3304").await, 5, "one change");
}

#[tokio::test]
async fn each_event_delivered_three_times_is_acted_on_once() {
    let port = free_port();
    let app = app_for(port, &["--subscriptions-timeout", TIMEOUT_S]).await;
    let service = service_process(
        port,
        Some(&app.events_url()),
        &[
            "--command-delay-ms",
            COMMAND_DELAY_MS,
            "--events-copies",
            "3",
        ],
    )
    .await;
    let (request, key) = unknown_outcome(&app, "three-times").await;
    until!(
        "the three deliveries",
        Duration::from_secs(20),
        counted(&app, "received").await == 3
    );
    assert_eq!(counted(&app, "resolved").await, 1);
    assert_eq!(counted(&app, "duplicate").await, 2);
    let op = app.store.operation(&key).await.unwrap().unwrap();
    assert_eq!(op.state, OpState::Applied);
    assert_eq!(app.store.received_events(None).await.unwrap().len(), 1);
    // An administrative change afterwards, three times too: recorded once.
    let records = Service::new(&service.url);
    let mut record = records.record("WS-SUB-3310").await;
    record["plan"] = json!("annual, renamed");
    records.put_record(&record).await;
    until!(
        "the PUT's deliveries",
        Duration::from_secs(10),
        counted(&app, "received").await == 6
    );
    assert_eq!(counted(&app, "recorded").await, 1);
    assert_eq!(counted(&app, "duplicate").await, 4);
    let known = app
        .store
        .known_record("WS-SUB-3310")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(known.0, 3);
    assert_eq!(
        outcome_of(&app.webhook(&request).await.1)["status"],
        "applied"
    );
    assert_eq!(records.revision("WS-SUB-3304").await, 5, "one change");
}

#[tokio::test]
async fn reordered_and_delayed_deliveries_never_take_the_record_back() {
    let port = free_port();
    let app = app_for(port, &[]).await;
    // Every event held 400 ms, then each batch delivered newest first.
    let service = service_process(
        port,
        Some(&app.events_url()),
        &[
            "--events-delay-percent",
            "100",
            "--events-delay-ms",
            "400",
            "--events-reorder",
        ],
    )
    .await;
    let records = Service::new(&service.url);
    let mut record = records.record("WS-SUB-5120").await;
    for n in 1..=6 {
        record["plan"] = json!(format!("plan {n}"));
        records.put_record(&record).await;
    }
    assert_eq!(records.revision("WS-SUB-5120").await, 13);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.store.received_events(None).await.unwrap().len() < 6 {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for all six events"
        );
        if let Some((revision, _, _)) = app.store.known_record("WS-SUB-5120").await.unwrap() {
            seen.push(revision);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "the known revision went back: {seen:?}"
    );
    let (revision, _, known) = app
        .store
        .known_record("WS-SUB-5120")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(revision, 13, "the newest revision's record is kept");
    let known: Value = serde_json::from_str(&known).unwrap();
    assert_eq!(known, records.record("WS-SUB-5120").await);
    let events = app.store.received_events(None).await.unwrap();
    let stale = events.iter().filter(|e| e.verdict == "stale").count();
    assert!(
        stale >= 1,
        "the newest came first, so older ones were stale: {events:?}"
    );
    assert_eq!(
        stale + events.iter().filter(|e| e.verdict == "recorded").count(),
        6
    );
    assert_eq!(counted(&app, "stale").await, stale as u64);
}

#[tokio::test]
async fn a_change_event_arriving_after_a_newer_record_still_resolves_its_operation() {
    let port = free_port();
    let app = app_for(port, &["--subscriptions-timeout", TIMEOUT_S]).await;
    // This service delivers nothing: the test delivers, in the order it chooses.
    let service = service_process(port, None, &["--command-delay-ms", COMMAND_DELAY_MS]).await;
    let (request, key) = unknown_outcome(&app, "older-event-last").await;
    let records = Service::new(&service.url);
    until!(
        "the change at the service",
        Duration::from_secs(20),
        records.revision("WS-SUB-3304").await == 5
    );
    let made = records.record("WS-SUB-3304").await;
    // Then a PUT moves the record on to r6, and its event is delivered first.
    let mut renamed = made.clone();
    renamed["plan"] = json!("monthly, renamed");
    records.put_record(&renamed).await;
    let newer = records.record("WS-SUB-3304").await;
    assert_eq!(newer["revision"], 6);
    let put = serde_json::to_vec(&json!({
        "id": "evt_test_put_r6", "type": "subscription.updated", "created": now(),
        "subscription": "WS-SUB-3304", "account": "acct-7", "revision": 6, "record": newer,
    }))
    .unwrap();
    let (status, answer) = deliver(&app, &put, Some(sign(SECRET.as_bytes(), now(), &put))).await;
    assert_eq!(
        (status, answer["verdict"].as_str()),
        (200, Some("recorded"))
    );
    // The change's own event, older than what is known, arrives last: it still proves the
    // change made under the key.
    let change = serde_json::to_vec(&change_event(&key, "acct-7", "WS-SUB-3304", &made)).unwrap();
    let (status, answer) =
        deliver(&app, &change, Some(sign(SECRET.as_bytes(), now(), &change))).await;
    assert_eq!(
        (status, answer["verdict"].as_str()),
        (200, Some("resolved")),
        "{answer}"
    );
    let op = app.store.operation(&key).await.unwrap().unwrap();
    assert_eq!(op.state, OpState::Applied);
    let (revision, _, _) = app
        .store
        .known_record("WS-SUB-3304")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(revision, 6, "the known record is not taken back");
    // The customer's next turn hears it, and nothing was sent again.
    let again = outcome_of(&app.webhook(&request).await.1);
    assert_eq!(again["status"], "applied", "{again}");
    assert_eq!(records.revision("WS-SUB-3304").await, 6, "no second change");
}

/// A real event for the Style Box at r5, as the service would send it for `key`.
fn change_event(key: &str, account: &str, subscription: &str, record: &Value) -> Value {
    let mut record = record.clone();
    record["revision"] = json!(5);
    json!({
        "id": format!("evt_test_{key}_{subscription}"),
        "type": "change.scheduled",
        "created": 0,
        "subscription": subscription,
        "account": account,
        "revision": 5,
        "request_key": key,
        "change": {"request_key": key, "subscription": subscription, "change_type": "stop_renewal",
                   "status": "scheduled", "effective_at": "2027-01-01T00:00:00Z", "revision": 5},
        "record": record,
    })
}

async fn deliver(app: &TestApp, body: &[u8], signature: Option<String>) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(app.events_url())
        .header("content-type", "application/json")
        .body(body.to_vec());
    if let Some(signature) = signature {
        request = request.header(SIGNATURE_HEADER, signature);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test]
async fn forged_replayed_and_altered_deliveries_are_refused_and_nothing_is_recorded() {
    let port = free_port();
    let app = app_for(port, &["--subscriptions-timeout", TIMEOUT_S]).await;
    // This service delivers nothing: the test is the only sender.
    let service = service_process(port, None, &["--command-delay-ms", COMMAND_DELAY_MS]).await;
    let (_, key) = unknown_outcome(&app, "forged").await;
    let records = Service::new(&service.url);
    until!(
        "the change at the service",
        Duration::from_secs(20),
        records.revision("WS-SUB-3304").await == 5
    );
    let record = records.record("WS-SUB-3304").await;
    let body = serde_json::to_vec(&change_event(&key, "acct-7", "WS-SUB-3304", &record)).unwrap();
    let t = now();
    let altered = String::from_utf8(body.clone())
        .unwrap()
        .replace("2027-01-01T00:00:00Z", "2026-12-02T00:00:00Z");
    let forged = [
        ("no signature", body.clone(), None),
        (
            "another secret",
            body.clone(),
            Some(sign(b"not-the-secret", t, &body)),
        ),
        ("garbage", body.clone(), Some(format!("t={t},v1=deadbeef"))),
        (
            "no timestamp",
            body.clone(),
            Some(sign(SECRET.as_bytes(), t, &body).replace(&format!("t={t},"), "")),
        ),
        (
            "replayed, ten minutes old",
            body.clone(),
            Some(sign(SECRET.as_bytes(), t - 600, &body)),
        ),
        (
            "from the future",
            body.clone(),
            Some(sign(SECRET.as_bytes(), t + 600, &body)),
        ),
        (
            "changed after signing",
            altered.into_bytes(),
            Some(sign(SECRET.as_bytes(), t, &body)),
        ),
    ];
    for (what, body, signature) in forged {
        let (status, answer) = deliver(&app, &body, signature).await;
        assert_eq!(status, 401, "{what}: {answer}");
        assert_eq!(answer["error"], "invalid_signature", "{what}");
        assert!(
            !answer.to_string().contains("acct-7"),
            "{what}: nothing echoed"
        );
    }
    assert!(
        app.store.received_events(None).await.unwrap().is_empty(),
        "nothing recorded"
    );
    assert!(app
        .store
        .known_record("WS-SUB-3304")
        .await
        .unwrap()
        .is_none());
    let op = app.store.operation(&key).await.unwrap().unwrap();
    assert_eq!(op.state, OpState::Unknown, "nothing resolved");
    assert_eq!(counted(&app, "rejected_signature").await, 5);
    assert_eq!(counted(&app, "rejected_too_old").await, 2);
    // The same event, signed as the service signs it, is taken: the checks can pass.
    let (status, answer) = deliver(&app, &body, Some(sign(SECRET.as_bytes(), now(), &body))).await;
    assert_eq!(
        (status, answer["verdict"].as_str()),
        (200, Some("resolved")),
        "{answer}"
    );
    // The server kept serving throughout.
    assert_eq!(
        reqwest::get(format!("{}/health", app.url))
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test]
async fn an_event_naming_another_accounts_subscription_is_a_mismatch_and_changes_nothing() {
    let port = free_port();
    let app = app_for(port, &["--subscriptions-timeout", TIMEOUT_S]).await;
    let service = service_process(port, None, &["--command-delay-ms", COMMAND_DELAY_MS]).await;
    let (_, key) = unknown_outcome(&app, "mismatch").await;
    let records = Service::new(&service.url);
    let other = records.record("WS-SUB-4410").await;
    // Correctly signed, but the request key's change on acct-9's subscription.
    let mut event = change_event(&key, "acct-9", "WS-SUB-4410", &other);
    event["record"]["revision"] = json!(5);
    let body = serde_json::to_vec(&event).unwrap();
    let (status, answer) = deliver(&app, &body, Some(sign(SECRET.as_bytes(), now(), &body))).await;
    assert_eq!(
        (status, answer["verdict"].as_str()),
        (200, Some("mismatch")),
        "{answer}"
    );
    // Never acted on: the operation still unknown, nothing remembered of the record, the
    // other account's subscription as it was.
    let op = app.store.operation(&key).await.unwrap().unwrap();
    assert_eq!(op.state, OpState::Unknown);
    assert!(app
        .store
        .known_record("WS-SUB-4410")
        .await
        .unwrap()
        .is_none());
    assert_eq!(records.record("WS-SUB-4410").await, other);
    // Kept for a person, with the original request and the confirmed terms.
    let mismatches = app.store.received_events(Some("mismatch")).await.unwrap();
    assert_eq!(mismatches.len(), 1);
    assert!(
        mismatches[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("WS-SUB-4410"),
        "{mismatches:?}"
    );
    let audit = app.store.audit_entries(None, None).await.unwrap();
    let entry = audit
        .iter()
        .find(|e| e.action == "service_event")
        .expect("audited");
    assert_eq!(entry.status, "mismatch");
    assert_eq!(entry.request_key.as_deref(), Some(key.as_str()));
    assert_eq!(entry.target.as_deref(), Some("WS-SUB-3304 stop_renewal"));
    assert!(
        entry
            .question_terms
            .as_deref()
            .unwrap()
            .contains("Stop renewal"),
        "{entry:?}"
    );
    assert_eq!(counted(&app, "mismatch").await, 1);
    // `actiongate audit --mismatches` shows it with the request and the confirmed terms.
    let db = format!(
        "sqlite:{}",
        app.dir.path().join("data/actiongate.db").display()
    );
    let output = Command::new(env!("CARGO_BIN_EXE_actiongate"))
        .args(["audit", "--mismatches", "--database-url", &db])
        .output()
        .unwrap();
    let table = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "{table}");
    for part in [
        "WS-SUB-4410",
        "acct-9",
        &key,
        "conversation mismatch (acct-7)",
        "stop_renewal on WS-SUB-3304 at r4",
        "confirmed terms: {",
    ] {
        assert!(table.contains(part), "{part} missing in:\n{table}");
    }
    // A change under a key no operation has, and a change of another date (an immediate
    // revocation instead of the period-end change): mismatches too.
    let stranger = change_event(
        "ag-not-ours",
        "acct-7",
        "WS-SUB-3304",
        &records.record("WS-SUB-3304").await,
    );
    let body = serde_json::to_vec(&stranger).unwrap();
    let (_, answer) = deliver(&app, &body, Some(sign(SECRET.as_bytes(), now(), &body))).await;
    assert_eq!(answer["verdict"], "mismatch", "{answer}");
    let mut sooner = change_event(
        &key,
        "acct-7",
        "WS-SUB-3304",
        &records.record("WS-SUB-3304").await,
    );
    sooner["id"] = json!("evt_sooner");
    sooner["change"]["effective_at"] = json!("2026-12-01T00:00:00Z");
    let body = serde_json::to_vec(&sooner).unwrap();
    let (_, answer) = deliver(&app, &body, Some(sign(SECRET.as_bytes(), now(), &body))).await;
    assert_eq!(answer["verdict"], "mismatch", "{answer}");
    assert_eq!(
        app.store.operation(&key).await.unwrap().unwrap().state,
        OpState::Unknown
    );
    // A malformed event, signed, is refused as such.
    let body = b"{\"id\": 5}".to_vec();
    let (status, answer) = deliver(&app, &body, Some(sign(SECRET.as_bytes(), now(), &body))).await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (400, Some("invalid_event"))
    );
}

#[tokio::test]
async fn a_record_moved_by_an_event_is_told_when_the_service_is_away() {
    let port = free_port();
    let app = app_for(port, &["--subscriptions-timeout", TIMEOUT_S]).await;
    let service = service_process(port, Some(&app.events_url()), &[]).await;
    let (_, request) = confirmed(&app, "moved-then-away").await;
    let records = Service::new(&service.url);
    records.charge_october_box_early().await;
    until!(
        "the PUT's event",
        Duration::from_secs(10),
        app.store
            .known_record("WS-SUB-3304")
            .await
            .unwrap()
            .is_some()
    );
    drop(service);
    let outcome = outcome_of(&app.webhook(&request).await.1);
    // Step 11 decides (the facts could not be read); what the event told comes with it.
    assert_eq!(outcome["status"], "blocked", "{outcome}");
    assert_eq!(outcome["reason"], "service_unavailable", "{outcome}");
    assert!(
        outcome["why"].as_str().unwrap().contains("charged early"),
        "the event's note names the change: {outcome}"
    );
    assert_eq!(
        outcome["current"]["tag"], "WS-SUB-3304 stop_renewal r5",
        "{outcome}"
    );
    assert!(
        app.store
            .latest_for_sender("moved-then-away")
            .await
            .unwrap()
            .is_none(),
        "nothing claimed"
    );
}

#[tokio::test]
async fn the_embedded_service_delivers_its_events_to_the_app() {
    let app = spawn_app_with(&["--events-port", "0", "--events-secret", SECRET], |_| {}).await;
    app.charge_october_box_early().await;
    until!(
        "the embedded service's event",
        Duration::from_secs(10),
        app.store
            .known_record("WS-SUB-3304")
            .await
            .unwrap()
            .is_some_and(|(r, _, _)| r == 5)
    );
    assert_eq!(counted(&app, "recorded").await, 1);
    // The listener is not the port Rasa calls.
    let (status, _, _) = app
        .post_raw(
            "/v1/service-events",
            b"{}".to_vec(),
            &[("content-type", "application/json")],
        )
        .await;
    assert_eq!(status, 404);
}
