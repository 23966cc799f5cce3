//! Exactly once, across failures and replicas: atomic claims, unknown outcomes resolved by
//! reconciliation, a crash between sending and recording, rate limits shared by replicas,
//! and the audit trail. Each test runs on SQLite; its PostgreSQL twin runs when
//! ACTIONGATE_TEST_POSTGRES_URL names a server (scripts/test-postgres.sh sets it up).

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::faults::{Fault, FaultyService};
use common::{outcome_of, spawn_app_with, Chat, ChatExt, TestApp};
use serde_json::{json, Value};

use actiongate::consent::{Outcome, Reason, Terms};
use actiongate::store::{Approval, ApprovalState, Claim, ClaimToSend, OpState, Operation, Store};
use actiongate::subscriptions::embedded::{self, ServiceSettings, DEMO_DATA};

#[derive(Clone, Copy)]
enum Backend {
    Sqlite,
    Postgres,
}

/// A fresh database: a SQLite file in `dir`, or a new PostgreSQL database.
async fn database_url(backend: Backend, dir: &std::path::Path) -> String {
    match backend {
        Backend::Sqlite => format!("sqlite:{}", dir.join("shared.db").display()),
        Backend::Postgres => {
            use sqlx::Connection;
            let admin = std::env::var("ACTIONGATE_TEST_POSTGRES_URL")
                .expect("ACTIONGATE_TEST_POSTGRES_URL names a PostgreSQL server (see scripts/test-postgres.sh)");
            let name = format!(
                "ag_{}_{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos()
            );
            let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&mut conn)
                .await
                .unwrap();
            let (base, _) = admin.rsplit_once('/').unwrap();
            format!("{base}/{name}")
        }
    }
}

/// Declares a test for both backends.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name(super::Backend::Sqlite).await
            }
            #[tokio::test]
            #[ignore = "needs PostgreSQL: scripts/test-postgres.sh"]
            async fn postgres() {
                super::$name(super::Backend::Postgres).await
            }
        }
    )*};
}

on_both!(
    a_stored_value_that_does_not_read_is_an_error,
    concurrent_claims_have_one_winner,
    one_unresolved_operation_per_subscription_across_replicas,
    the_token_bucket_spends_and_refills,
    a_claim_to_send_is_all_or_nothing,
    fifty_concurrent_applies_over_two_replicas_change_once,
    a_dropped_connection_after_the_command_is_pending_until_checked,
    a_service_stalled_past_the_timeout_is_pending_until_checked,
    a_crash_between_sending_and_recording_is_reconciled,
    a_crash_between_sending_and_recording_is_resolved_by_a_repeat,
    the_rate_limit_is_shared_by_replicas,
    the_audit_trail_records_every_decision,
    a_burst_of_audit_entries_is_kept_whole_and_in_order,
    closing_the_store_commits_the_audit_entries_queued_before,
    a_store_the_earlier_migration_runner_made_is_adopted,
    two_replicas_receiving_the_same_events_resolve_each_once,
    two_replicas_approving_one_hold_at_once_send_one_command,
    an_approval_killed_after_its_command_is_reconciled_and_never_sent_twice,
    what_stands_before_a_claim_is_read_in_one_query,
    a_held_yes_delivered_again_under_other_rules_stays_held,
);

/// An outcome to record where which one does not matter to the test.
fn some_outcome() -> Outcome {
    Outcome::blocked(Reason::ServiceUnavailable)
}

fn op(key: &str) -> Operation {
    Operation {
        request_key: key.into(),
        sender_id: "s".into(),
        account: "acct-7".into(),
        subscription: "WS-SUB-3304".into(),
        change_type: "stop_renewal".into(),
        revision: 4,
        terms: Terms {
            tag: "WS-SUB-3304 stop_renewal r4".into(),
            label: "Stop renewal".into(),
            effective: "2027-01-01 00:00 UTC".into(),
            entitlements: "as read out".into(),
        },
        state: OpState::Claimed,
        outcome: None,
        created_at: 0,
        updated_at: 0,
        asked_at: None,
    }
}

/// A stored value that does not read as what was written (terms or an outcome edited by
/// hand) is the store's error, never a panic and never a guess; the rows beside it read.
async fn a_stored_value_that_does_not_read_is_an_error(backend: Backend) {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let url = database_url(backend, dir.path()).await;
    let store = Store::connect(&url).await.unwrap();
    for key in ["good", "bad-terms", "bad-outcome"] {
        let mut o = op(key);
        o.subscription = format!("WS-SUB-{key}");
        store.claim(&o).await.unwrap();
    }
    assert!(store
        .set_state("bad-outcome", OpState::Applied, Some(&some_outcome()))
        .await
        .unwrap());
    let raw = url.replacen("sqlite:", "sqlite://", 1);
    let mut conn = sqlx::AnyConnection::connect(&raw).await.unwrap();
    for sql in [
        "UPDATE operations SET terms = '{}' WHERE request_key = 'bad-terms'",
        "UPDATE operations SET outcome = '{\"status\": 7}' WHERE request_key = 'bad-outcome'",
    ] {
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
    }
    conn.close().await.unwrap();
    // A fresh store: nothing of these is cached.
    let store = Store::connect(&url).await.unwrap();
    for (key, what) in [("bad-terms", "terms"), ("bad-outcome", "outcome")] {
        match store.operation(key).await {
            Err(actiongate::store::StoreError::Corrupt {
                what: w, key: k, ..
            }) => {
                assert_eq!((w, k.as_str()), (what, key));
            }
            other => panic!("{key}: {other:?}"),
        }
    }
    let good = store.operation("good").await.unwrap().unwrap();
    assert_eq!(good.terms, op("good").terms);
}

/// A store made before sqlx ran the migrations: the schema applied, its versions listed in
/// `actiongate_migrations`, an operation in it. Two replicas connect at once: sqlx adopts
/// the versions instead of applying them again, and the rows and the index are as they
/// were.
async fn a_store_the_earlier_migration_runner_made_is_adopted(backend: Backend) {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let url = database_url(backend, dir.path()).await;
    let (schema, index) = match backend {
        Backend::Sqlite => (
            include_str!("../../migrations/sqlite/0001_schema.sql"),
            include_str!("../../migrations/sqlite/0002_open_per_subscription.sql"),
        ),
        Backend::Postgres => (
            include_str!("../../migrations/postgres/0001_schema.sql"),
            include_str!("../../migrations/postgres/0002_open_per_subscription.sql"),
        ),
    };
    sqlx::any::install_default_drivers();
    let raw = url.replacen("sqlite:", "sqlite://", 1)
        + if url.starts_with("sqlite:") {
            "?mode=rwc"
        } else {
            ""
        };
    let mut conn = sqlx::AnyConnection::connect(&raw).await.unwrap();
    for sql in [
        schema,
        index,
        "CREATE TABLE actiongate_migrations (version BIGINT PRIMARY KEY)",
        "INSERT INTO actiongate_migrations (version) VALUES (1), (2)",
        r#"INSERT INTO operations VALUES ('k1', 's', 'acct-7', 'WS-SUB-3304', 'stop_renewal', 4,
         '{"tag":"WS-SUB-3304 stop_renewal r4","label":"Stop renewal","effective":"2027-01-01 00:00 UTC","entitlements":"as read out"}',
         'claimed', NULL, 0, 0)"#,
    ] {
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
    }
    conn.close().await.unwrap();
    let (a, b) = tokio::join!(Store::connect(&url), Store::connect(&url));
    let (a, b) = (a.expect("adopted"), b.expect("adopted"));
    assert_eq!(
        a.operation("k1").await.unwrap().unwrap().state,
        OpState::Claimed
    );
    let mut second = op("k2");
    second.subscription = "WS-SUB-3304".into();
    assert_eq!(
        b.claim(&second).await.unwrap(),
        Claim::SubscriptionBusy,
        "the partial unique index still holds"
    );
}

async fn concurrent_claims_have_one_winner(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&database_url(backend, dir.path()).await)
        .await
        .unwrap();
    let claims = (0..50).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.claim(&op("k1")).await.unwrap() })
    });
    let won = futures_util::future::join_all(claims)
        .await
        .into_iter()
        .filter(|r| *r.as_ref().unwrap() == Claim::Claimed)
        .count();
    assert_eq!(won, 1);
    // A claim the reconciler takes back (left behind, as it thinks) is never sent after.
    let claimed = store.operation("k1").await.unwrap().unwrap();
    assert!(store
        .release_stale_claim("k1", claimed.updated_at)
        .await
        .unwrap());
    assert!(
        !store.mark_sent("k1").await.unwrap(),
        "taken back: not sent"
    );
    // A claim that moved on to sent is not taken back.
    assert_eq!(store.claim(&op("k1")).await.unwrap(), Claim::Claimed);
    let claimed = store.operation("k1").await.unwrap().unwrap();
    assert!(store.mark_sent("k1").await.unwrap());
    assert!(!store
        .release_stale_claim("k1", claimed.updated_at)
        .await
        .unwrap());
    assert_eq!(
        store.operation("k1").await.unwrap().unwrap().state,
        OpState::Sent
    );
    store.release("k1").await.unwrap();
    assert!(
        store.operation("k1").await.unwrap().is_none(),
        "a claim with nothing sent can be released"
    );
}

/// The one query before a claim (`Store::repeats`): the operation under the key, the
/// subscription's open one, and a change held under the key, each found and none mistaken
/// for another.
async fn what_stands_before_a_claim_is_read_in_one_query(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&database_url(backend, dir.path()).await)
        .await
        .unwrap();
    let nothing = store.repeats("k1", "WS-SUB-3304").await.unwrap();
    assert!(nothing.mine.is_none() && nothing.open.is_none() && !nothing.held);
    assert_eq!(store.claim(&op("k1")).await.unwrap(), Claim::Claimed);
    let mine = store.repeats("k1", "WS-SUB-3304").await.unwrap();
    assert_eq!(mine.mine.map(|op| op.request_key).as_deref(), Some("k1"));
    assert!(mine.open.is_none(), "its own operation is not another's");
    assert!(!mine.held);
    let other = store.repeats("k2", "WS-SUB-3304").await.unwrap();
    assert!(other.mine.is_none() && !other.held);
    assert_eq!(other.open.map(|op| op.request_key).as_deref(), Some("k1"));
    let elsewhere = store.repeats("k2", "WS-SUB-4410").await.unwrap();
    assert!(elsewhere.mine.is_none() && elsewhere.open.is_none() && !elsewhere.held);
    // A change held under k3; then approved, with its operation under the same key.
    let hold = Approval {
        request_key: "k3".into(),
        sender_id: "s".into(),
        account: "acct-21".into(),
        subscription: "WS-SUB-7001".into(),
        change_type: "cancel_now".into(),
        revision: 3,
        terms: op("k3").terms,
        question: "Cancel now?".into(),
        question_at: Some(1.0),
        reply: "yes".into(),
        reply_at: Some(2.0),
        reply_id: None,
        rule: "review".into(),
        state: ApprovalState::Held,
        created_at: 0,
        expires_at: i64::MAX,
        decided_by: None,
        decided_at: None,
        note: None,
        outcome: None,
    };
    assert!(store.hold(&hold).await.unwrap());
    let held = store.repeats("k3", "WS-SUB-7001").await.unwrap();
    assert!(held.held && held.mine.is_none() && held.open.is_none());
    assert!(!store.repeats("k4", "WS-SUB-7001").await.unwrap().held);
    let approved = Operation {
        subscription: "WS-SUB-7001".into(),
        ..op("k3")
    };
    assert_eq!(store.claim(&approved).await.unwrap(), Claim::Claimed);
    let both = store.repeats("k3", "WS-SUB-7001").await.unwrap();
    assert!(both.held && both.open.is_none());
    assert_eq!(both.mine.map(|op| op.request_key).as_deref(), Some("k3"));
}

/// A "yes" held for a person's approval and delivered again to a replica whose rules would
/// not hold it (or to the same server restarted with other rules) is answered from its
/// hold: nothing is sent until a person decides. A fresh "yes" to the same change on that
/// replica is applied at once, so its rules do differ.
async fn a_held_yes_delivered_again_under_other_rules_stays_held(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = database_url(backend, dir.path()).await;
    let service = service(dir.path()).await;
    let holding = app_on(&db, &service, &[]).await;
    let lenient = spawn_app_with(
        &["--database-url", &db, "--subscriptions-url", &service],
        |s| s.consent.approval.review = false,
    )
    .await;
    let mut c = Chat::new("held-then-lenient", Some("acct-21"));
    c.request_change(&holding, "WS-SUB-7001", "cancel_now")
        .await
        .unwrap();
    c.user("yes", "affirm", &[]);
    let request = c.request("apply_subscription_change");
    let first = outcome_of(&post(&holding.url, &request).await);
    assert_eq!(first["status"], "held", "{first}");
    let again = outcome_of(&post(&lenient.url, &request).await);
    assert_eq!(again["status"], "held", "{again}");
    assert_eq!(revision(&service, "WS-SUB-7001").await, 3, "nothing sent");
    assert!(
        lenient
            .store
            .latest_for_sender("held-then-lenient")
            .await
            .unwrap()
            .is_none(),
        "no operation"
    );
    let mut fresh = Chat::new("lenient-fresh", Some("acct-21"));
    fresh
        .request_change(&lenient, "WS-SUB-7001", "cancel_now")
        .await
        .unwrap();
    let applied = fresh.say_yes_and_apply(&lenient).await;
    assert_eq!(applied["status"], "applied", "{applied}");
    assert_eq!(revision(&service, "WS-SUB-7001").await, 4);
}

/// CONTRACT.md section 4: while a command for a subscription has an unknown outcome, no
/// other is sent. Fifty confirmations with different keys for one subscription, claimed at
/// once through two replicas' stores: one wins, the others find the subscription busy.
async fn one_unresolved_operation_per_subscription_across_replicas(backend: Backend) {
    use actiongate::store::Claim;
    let dir = tempfile::tempdir().unwrap();
    let url = database_url(backend, dir.path()).await;
    let replicas = [
        Store::connect(&url).await.unwrap(),
        Store::connect(&url).await.unwrap(),
    ];
    let claims = (0..50).map(|i| {
        let store = replicas[i % 2].clone();
        tokio::spawn(async move { store.claim(&op(&format!("key-{i}"))).await.unwrap() })
    });
    let results: Vec<Claim> = futures_util::future::join_all(claims)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(results.iter().filter(|c| **c == Claim::Claimed).count(), 1);
    assert_eq!(
        results
            .iter()
            .filter(|c| **c == Claim::SubscriptionBusy)
            .count(),
        49
    );
    let open = replicas[1]
        .open_operation("WS-SUB-3304")
        .await
        .unwrap()
        .expect("the winner's operation is open");
    // Sent and then unknown: still open, still the only one.
    replicas[0]
        .set_state(&open.request_key, OpState::Unknown, None)
        .await
        .unwrap();
    assert_eq!(
        replicas[1].claim(&op("later")).await.unwrap(),
        Claim::SubscriptionBusy
    );
    // Another subscription is not held up.
    let mut other = op("other-sub");
    other.subscription = "WS-SUB-3310".into();
    assert_eq!(replicas[1].claim(&other).await.unwrap(), Claim::Claimed);
    // Resolved: the subscription takes a command again.
    replicas[0]
        .set_state(&open.request_key, OpState::Applied, Some(&some_outcome()))
        .await
        .unwrap();
    assert!(replicas[1]
        .open_operation("WS-SUB-3304")
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        replicas[1].claim(&op("later")).await.unwrap(),
        Claim::Claimed
    );
}

async fn the_token_bucket_spends_and_refills(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let url = database_url(backend, dir.path()).await;
    let store = Store::connect(&url).await.unwrap();
    assert!(store.take_token("a", 2.0, 0.0).await.unwrap());
    assert!(store.take_token("a", 2.0, 0.0).await.unwrap());
    assert!(!store.take_token("a", 2.0, 0.0).await.unwrap(), "spent");
    assert!(
        store.take_token("b", 2.0, 0.0).await.unwrap(),
        "per account"
    );
    assert!(store.take_token("c", 1.0, 20.0).await.unwrap());
    assert!(!store.take_token("c", 1.0, 20.0).await.unwrap());
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert!(store.take_token("c", 1.0, 20.0).await.unwrap(), "refilled");
    assert!(
        !store.take_token("d", 0.5, 1000.0).await.unwrap(),
        "a bucket that holds less than one token gives none"
    );
    // Two replicas taking from one new bucket at once: exactly its capacity is given.
    let other = Store::connect(&url).await.unwrap();
    let takes = (0..12).map(|i| {
        let replica = if i % 2 == 0 { &store } else { &other };
        replica.take_token("e", 5.0, 0.0)
    });
    let given = futures_util::future::join_all(takes)
        .await
        .into_iter()
        .filter(|r| *r.as_ref().unwrap())
        .count();
    assert_eq!(given, 5, "a new bucket shared by two replicas");
}

/// The claim, the budget and the mark of sending are one transaction: a claim that
/// goes through is `sent` at once with one token spent; a key another delivery holds, a
/// busy subscription or a spent budget leaves no row behind and spends nothing; and of
/// concurrent claims to send on two replicas, one wins and spends one token.
async fn a_claim_to_send_is_all_or_nothing(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let url = database_url(backend, dir.path()).await;
    let store = Store::connect(&url).await.unwrap();
    let count = |store: &Store, key: &'static str| {
        let store = store.clone();
        async move { store.operation(key).await.unwrap().map(|op| op.state) }
    };
    // Through: sent, and one of the account's two tokens spent.
    assert_eq!(
        store.claim_to_send(&op("k1"), 2.0, 0.0).await.unwrap(),
        ClaimToSend::Sending
    );
    assert_eq!(count(&store, "k1").await, Some(OpState::Sent));
    // The same key again: refused, nothing spent (the account still has its second token).
    assert_eq!(
        store.claim_to_send(&op("k1"), 2.0, 0.0).await.unwrap(),
        ClaimToSend::Refused(Claim::KeyTaken)
    );
    // Another key for the same subscription while k1 is unresolved: refused, no row.
    assert_eq!(
        store.claim_to_send(&op("k2"), 2.0, 0.0).await.unwrap(),
        ClaimToSend::Refused(Claim::SubscriptionBusy)
    );
    assert_eq!(count(&store, "k2").await, None);
    assert!(
        store.take_token("acct-7", 2.0, 0.0).await.unwrap(),
        "unspent"
    );
    // The budget spent: refused, and the claim rolled back with it.
    assert!(store
        .set_state("k1", OpState::Applied, Some(&some_outcome()))
        .await
        .unwrap());
    assert_eq!(
        store.claim_to_send(&op("k3"), 2.0, 0.0).await.unwrap(),
        ClaimToSend::BudgetSpent
    );
    assert_eq!(count(&store, "k3").await, None, "no claim left behind");
    assert_eq!(
        store
            .open_operation("WS-SUB-3304")
            .await
            .unwrap()
            .map(|op| op.request_key),
        None,
        "the subscription is free"
    );
    // Two replicas, twelve keys for one subscription at once: one sent, one token spent.
    let other = Store::connect(&url).await.unwrap();
    let mut fresh = op("r0");
    fresh.account = "acct-8".into();
    fresh.subscription = "WS-SUB-9".into();
    let claims = (0..12).map(|i| {
        let replica = if i % 2 == 0 { &store } else { &other };
        let mut op = fresh.clone();
        op.request_key = format!("r{i}");
        async move { replica.claim_to_send(&op, 3.0, 0.0).await.unwrap() }
    });
    let results = futures_util::future::join_all(claims).await;
    assert_eq!(
        results
            .iter()
            .filter(|c| **c == ClaimToSend::Sending)
            .count(),
        1,
        "{results:?}"
    );
    assert!(results.iter().all(|c| matches!(
        c,
        ClaimToSend::Sending | ClaimToSend::Refused(Claim::SubscriptionBusy)
    )));
    assert!(store.take_token("acct-8", 3.0, 0.0).await.unwrap());
    assert!(store.take_token("acct-8", 3.0, 0.0).await.unwrap());
    assert!(
        !store.take_token("acct-8", 3.0, 0.0).await.unwrap(),
        "exactly one token went to the claims"
    );
}

/// An `actiongate serve` process, killed when dropped.
struct Process {
    child: Child,
    url: String,
}

impl Drop for Process {
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

async fn serve_process(
    dir: &std::path::Path,
    database_url: &str,
    service_url: &str,
    extra: &[&str],
) -> Process {
    actiongate::telemetry::install_crypto();
    let port = free_port();
    let endpoints = dir.join("none.yml");
    std::fs::write(&endpoints, "").unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_actiongate"))
        .args([
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--quiet",
        ])
        .args([
            "--endpoints",
            endpoints.to_str().unwrap(),
            "--data-dir",
            dir.to_str().unwrap(),
        ])
        .args([
            "--database-url",
            database_url,
            "--subscriptions-url",
            service_url,
        ])
        .args(extra)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Owned before waiting, so a server that never answers is still killed.
    let process = Process {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while reqwest::get(format!("{}/health", process.url))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the server did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    process
}

/// A standalone subscription service (the embedded implementation, on its own port).
async fn service(dir: &std::path::Path) -> String {
    let running = embedded::start(
        0,
        ServiceSettings {
            database: dir.join("service.db"),
            seed: Some(DEMO_DATA.to_owned()),
            token: None,
            command_delay: Duration::ZERO,
            faults: Default::default(),
            events: None,
            per_peer: embedded::PER_PEER,
        },
    )
    .await
    .unwrap();
    format!("http://127.0.0.1:{}", running.port)
}

async fn revision(service: &str, id: &str) -> i64 {
    let v: Value = reqwest::get(format!("{service}/v1/subscriptions/{id}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["revision"].as_i64().unwrap()
}

/// An app (in-process) on the given store and service.
async fn app_on(database_url: &str, service_url: &str, extra: &[&str]) -> TestApp {
    let mut args = vec![
        "--database-url",
        database_url,
        "--subscriptions-url",
        service_url,
    ];
    args.extend_from_slice(extra);
    spawn_app_with(&args, |_| {}).await
}

/// A confirmed conversation (selected, asked, "yes") and its apply request.
async fn confirmed(
    app: &TestApp,
    sender: &str,
    subscription: &str,
    change_type: &str,
) -> (Chat, Value) {
    let mut c = Chat::new(sender, Some("acct-7"));
    c.request_change(app, subscription, change_type)
        .await
        .unwrap();
    c.user("yes", "affirm", &[]);
    let request = c.request("apply_subscription_change");
    (c, request)
}

async fn post(url: &str, body: &Value) -> Value {
    let answer: Value = reqwest::Client::new()
        .post(format!("{url}/webhook"))
        .json(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer
}

async fn fifty_concurrent_applies_over_two_replicas_change_once(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = database_url(backend, dir.path()).await;
    let service = service(dir.path()).await;
    let a = serve_process(dir.path(), &db, &service, &[]).await;
    let b = serve_process(dir.path(), &db, &service, &[]).await;
    // Select through replica A (the tracker comes back from Rasa the same either way).
    let probe = app_on(&db, &service, &[]).await;
    let (_, request) = confirmed(&probe, "replicas", "WS-SUB-3304", "stop_renewal").await;
    let calls = (0..50).map(|i| {
        let url = if i % 2 == 0 {
            a.url.clone()
        } else {
            b.url.clone()
        };
        let request = request.clone();
        tokio::spawn(async move { outcome_of(&post(&url, &request).await) })
    });
    let outcomes: Vec<Value> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(outcomes[0]["status"], "applied", "{}", outcomes[0]);
    let odd: Vec<&Value> = outcomes.iter().filter(|o| **o != outcomes[0]).collect();
    assert!(
        odd.is_empty(),
        "all 50 answers carry the same outcome: {} differ, e.g. {}",
        odd.len(),
        odd[0]
    );
    assert_eq!(
        revision(&service, "WS-SUB-3304").await,
        5,
        "exactly one change at the service"
    );
}

/// Asks `check_subscription_change` in the same conversation.
async fn check(app: &TestApp, c: &mut Chat) -> Value {
    c.user("did it go through?", "check", &[]);
    let (status, body) = c.run(app, "check_subscription_change").await.unwrap();
    assert_eq!(status, 200, "{body}");
    outcome_of(&body)
}

async fn a_dropped_connection_after_the_command_is_pending_until_checked(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = database_url(backend, dir.path()).await;
    let service = service(dir.path()).await;
    let faulty = FaultyService::start(&service, Fault::DropAfterForwarding).await;
    let app = app_on(&db, &faulty.url, &[]).await;
    let (mut c, request) = confirmed(&app, "dropped", "WS-SUB-3304", "stop_renewal").await;
    let outcome = outcome_of(&post(&app.url, &request).await);
    assert_eq!(
        (outcome["status"].as_str(), outcome["reason"].as_str()),
        (Some("pending_verification"), Some("outcome_unknown"))
    );
    assert_eq!(faulty.commands_forwarded(), 1);
    assert_eq!(
        revision(&service, "WS-SUB-3304").await,
        5,
        "the service did make the change"
    );
    // Repeating the apply sends no second command, even with the service healthy again.
    faulty.set(Fault::Pass);
    let again = outcome_of(&post(&app.url, &request).await);
    assert_eq!(again["status"], "applied", "the replay reconciles: {again}");
    assert_eq!(faulty.commands_forwarded(), 1);
    c.run(&app, "apply_subscription_change").await.unwrap();
    assert_eq!(check(&app, &mut c).await["status"], "applied");
    assert_eq!(faulty.commands_forwarded(), 1);
    assert_eq!(revision(&service, "WS-SUB-3304").await, 5);
}

async fn a_service_stalled_past_the_timeout_is_pending_until_checked(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = database_url(backend, dir.path()).await;
    let service = service(dir.path()).await;
    let faulty = FaultyService::start(&service, Fault::Slow(Duration::from_millis(1500))).await;
    let app = app_on(&db, &faulty.url, &["--subscriptions-timeout", "0.5"]).await;
    let (mut c, request) = confirmed(&app, "stalled", "WS-SUB-3304", "stop_renewal").await;
    let outcome = outcome_of(&post(&app.url, &request).await);
    assert_eq!(outcome["status"], "pending_verification", "{outcome}");
    c.run(&app, "apply_subscription_change").await.unwrap();
    assert_eq!(
        check(&app, &mut c).await["status"],
        "applied",
        "the service made it; check finds it"
    );
    let again = outcome_of(&post(&app.url, &request).await);
    assert_eq!(again["status"], "applied");
    assert_eq!(faulty.commands_forwarded(), 1, "no second command");
    assert_eq!(revision(&service, "WS-SUB-3304").await, 5);
}

/// A server killed (SIGKILL) while its command is at the service: the command is made
/// there (1.5 s later), the operation is left sent, never recorded.
struct Crashed {
    _dir: tempfile::TempDir,
    db: String,
    service: String,
    faulty: FaultyService,
    request: Value,
    store: Store,
    left: Operation,
}

async fn crash_while_sending(backend: Backend, sender: &str) -> Crashed {
    let dir = tempfile::tempdir().unwrap();
    let db = database_url(backend, dir.path()).await;
    let service = service(dir.path()).await;
    let faulty = FaultyService::start(&service, Fault::Slow(Duration::from_millis(1500))).await;
    let server = serve_process(
        dir.path(),
        &db,
        &faulty.url,
        &["--subscriptions-timeout", "10"],
    )
    .await;
    let probe = app_on(&db, &service, &[]).await;
    let (_, request) = confirmed(&probe, sender, "WS-SUB-3304", "stop_renewal").await;
    let url = server.url.clone();
    let call = tokio::spawn({
        let request = request.clone();
        async move {
            reqwest::Client::new()
                .post(format!("{url}/webhook"))
                .json(&request)
                .send()
                .await
        }
    });
    // The command is at the service; kill the server before it records the answer.
    let deadline = Instant::now() + Duration::from_secs(15);
    while faulty.commands_forwarded() == 0 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut server = server;
    let _ = Command::new("kill")
        .args(["-9", &server.child.id().to_string()])
        .status();
    let _ = server.child.wait();
    assert!(
        call.await.unwrap().is_err(),
        "the call died with the server"
    );
    let store = Store::connect(&db).await.unwrap();
    let left = store.latest_for_sender(sender).await.unwrap().unwrap();
    assert_eq!(left.state, OpState::Sent, "sent, never recorded");
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(revision(&service, "WS-SUB-3304").await, 5);
    Crashed {
        _dir: dir,
        db,
        service,
        faulty,
        request,
        store,
        left,
    }
}

async fn a_crash_between_sending_and_recording_is_reconciled(backend: Backend) {
    let Crashed {
        _dir: dir,
        db,
        service,
        faulty,
        request,
        store,
        left: pending,
    } = crash_while_sending(backend, "crash").await;
    // Restarted: the reconciler resolves the operation.
    faulty.set(Fault::Pass);
    let restarted = serve_process(
        dir.path(),
        &db,
        &faulty.url,
        &[
            "--subscriptions-timeout",
            "0.3",
            "--reconcile-interval",
            "1",
        ],
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let op = store
            .operation(&pending.request_key)
            .await
            .unwrap()
            .unwrap();
        if op.state == OpState::Applied {
            break;
        }
        assert!(Instant::now() < deadline, "not reconciled: {:?}", op.state);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let again = outcome_of(&post(&restarted.url, &request).await);
    assert_eq!(again["status"], "applied");
    assert_eq!(faulty.commands_forwarded(), 1, "no change doubled");
    assert_eq!(revision(&service, "WS-SUB-3304").await, 5);
}

/// The same crash, resolved by the customer's repeat rather than the reconciler (CONTRACT.md
/// section 4: "by `check_subscription_change`, a repeat, or the reconciler"): the repeat
/// finds the operation left sent past the wait, asks the service about its key, and answers
/// `applied`, with no second command.
async fn a_crash_between_sending_and_recording_is_resolved_by_a_repeat(backend: Backend) {
    let Crashed {
        _dir,
        db,
        service,
        faulty,
        request,
        store,
        left,
    } = crash_while_sending(backend, "crash-repeat").await;
    // Another replica, whose reconciler finds the operation too young at its first round
    // (untouched for less than twice the timeout and a second) and comes back in 30 s: the
    // repeat, after waiting out the command's time, resolves it.
    faulty.set(Fault::Pass);
    let replica = app_on(&db, &faulty.url, &["--subscriptions-timeout", "2"]).await;
    let key = &left.request_key;
    assert_eq!(
        store.operation(key).await.unwrap().unwrap().state,
        OpState::Sent,
        "nothing else resolved it"
    );
    let again = outcome_of(&post(&replica.url, &request).await);
    assert_eq!(again["status"], "applied", "{again}");
    assert_eq!(
        store.operation(key).await.unwrap().unwrap().state,
        OpState::Applied
    );
    assert_eq!(faulty.commands_forwarded(), 1, "no change doubled");
    assert_eq!(revision(&service, "WS-SUB-3304").await, 5);
}

async fn the_rate_limit_is_shared_by_replicas(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = database_url(backend, dir.path()).await;
    let service = service(dir.path()).await;
    let limits = ["--rate-capacity", "1", "--rate-per-hour", "0"];
    let a = app_on(&db, &service, &limits).await;
    let b = app_on(&db, &service, &limits).await;
    let (mut c, _) = confirmed(&a, "budget-a", "WS-SUB-3310", "switch_to_monthly").await;
    assert_eq!(c.apply(&a).await["status"], "applied");
    let (mut c, _) = confirmed(&b, "budget-b", "WS-SUB-3304", "stop_renewal").await;
    let outcome = c.apply(&b).await;
    assert_eq!(
        (outcome["status"].as_str(), outcome["reason"].as_str()),
        (Some("blocked"), Some("rate_limited"))
    );
    assert_eq!(revision(&service, "WS-SUB-3304").await, 4, "nothing sent");
}

/// A burst larger than one statement and one transaction of the audit writer: every
/// entry is committed with every field as given, in the order queued.
async fn a_burst_of_audit_entries_is_kept_whole_and_in_order(backend: Backend) {
    use actiongate::store::AuditEntry;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&database_url(backend, dir.path()).await)
        .await
        .unwrap();
    let entry = |i: usize| AuditEntry {
        at: 1_000 + i as i64,
        action: format!("action-{i}"),
        sender_id: "burst".into(),
        account: (i % 3 != 0).then(|| format!("acct-{i}")),
        target: Some(format!("WS-SUB-{i} stop_renewal")),
        question_terms: (i % 2 == 0).then(|| format!("question {i} with 'quotes' and ?")),
        service_terms: Some(format!(r#"{{"n": {i}}}"#)),
        status: "blocked".into(),
        reason: (i % 5 == 0).then(|| "rate_limited".to_owned()),
        request_key: Some(format!("key-{i}")),
        operator: (i % 7 == 0).then(|| format!("operator-{i}")),
        ..AuditEntry::default()
    };
    let queued = 1_500;
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in (w * 500)..(w * 500 + 500) {
                    store.audit(entry(i)).await.unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let kept = store.audit_entries(Some("burst"), None).await.unwrap();
    assert_eq!(kept.len(), queued);
    let mut seen: Vec<usize> = Vec::new();
    for got in &kept {
        let i: usize = got.action["action-".len()..].parse().unwrap();
        let want = entry(i);
        assert_eq!(
            (
                got.at,
                &got.account,
                &got.target,
                &got.question_terms,
                &got.service_terms,
                &got.status,
                &got.reason,
                &got.request_key,
                &got.operator
            ),
            (
                want.at,
                &want.account,
                &want.target,
                &want.question_terms,
                &want.service_terms,
                &want.status,
                &want.reason,
                &want.request_key,
                &want.operator
            )
        );
        seen.push(i);
    }
    // Each writer's entries in the order it queued them.
    for w in 0..3 {
        let mine: Vec<usize> = seen.iter().copied().filter(|i| i / 500 == w).collect();
        assert_eq!(mine, ((w * 500)..(w * 500 + 500)).collect::<Vec<_>>());
    }
}

/// Entries queued right before the store is closed (a server stopping, an eval removing
/// its data) are committed by the close, not lost with the writer's queue: a store opened
/// on the same database afterwards reads every one.
async fn closing_the_store_commits_the_audit_entries_queued_before(backend: Backend) {
    use actiongate::store::AuditEntry;
    let dir = tempfile::tempdir().unwrap();
    let url = database_url(backend, dir.path()).await;
    let store = Store::connect(&url).await.unwrap();
    for i in 0..40 {
        store
            .audit(AuditEntry {
                at: 2_000 + i,
                action: format!("closing-{i}"),
                sender_id: "closing".into(),
                status: "blocked".into(),
                ..AuditEntry::default()
            })
            .await
            .unwrap();
    }
    store.close().await;
    let reopened = Store::connect(&url).await.unwrap();
    let kept = reopened.audit_entries(Some("closing"), None).await.unwrap();
    assert_eq!(
        kept.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(),
        (0..40).map(|i| format!("closing-{i}")).collect::<Vec<_>>()
    );
}

async fn the_audit_trail_records_every_decision(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = database_url(backend, dir.path()).await;
    let service = service(dir.path()).await;
    let app = app_on(&db, &service, &[]).await;
    let (mut c, _) = confirmed(&app, "audited", "WS-SUB-3304", "stop_renewal").await;
    c.apply(&app).await;
    check(&app, &mut c).await;
    let mut other = Chat::new("someone-else", Some("acct-9"));
    other
        .request_change(&app, "WS-SUB-3304", "stop_renewal")
        .await
        .unwrap();
    // The audit writer commits each entry within milliseconds of the answer; another
    // process reads what is committed.
    app.store.flush_audit().await;
    let output = Command::new(env!("CARGO_BIN_EXE_actiongate"))
        .args([
            "audit",
            "--database-url",
            &db,
            "--sender",
            "audited",
            "--format",
            "json",
            "--since",
            "2020-01-01T00:00:00Z",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let entries: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let decisions: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| (e["action"].as_str().unwrap(), e["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        decisions,
        [
            ("select_subscription_change", "selected"),
            ("apply_subscription_change", "applied"),
            ("check_subscription_change", "applied")
        ]
    );
    let apply = &entries[1];
    assert_eq!(apply["account"], "acct-7");
    assert_eq!(apply["target"], "WS-SUB-3304 stop_renewal");
    assert!(apply["question_terms"]
        .as_str()
        .unwrap()
        .contains("2027-01-01 00:00 UTC"));
    assert!(apply["service_terms"]
        .as_str()
        .unwrap()
        .contains("WS-SUB-3304 stop_renewal r4"));
    assert!(apply["request_key"].as_str().unwrap().starts_with("ag-"));
    let table = Command::new(env!("CARGO_BIN_EXE_actiongate"))
        .args(["audit", "--database-url", &db])
        .output()
        .unwrap();
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(
        table.contains("someone-else") && table.contains("unknown_subscription"),
        "{table}"
    );
    assert_eq!(json!(entries.len()), json!(3));
}

/// Two replicas on one store, each receiving every event of two unknown operations three
/// times, all at once: each operation is resolved once, each event recorded once.
async fn two_replicas_receiving_the_same_events_resolve_each_once(backend: Backend) {
    use actiongate::subscriptions::events::{sign, SIGNATURE_HEADER};
    use actiongate::subscriptions::model::effective_text;
    const SECRET: &str = "replica-events";
    let dir = tempfile::tempdir().unwrap();
    let db = database_url(backend, dir.path()).await;
    let service = service(dir.path()).await;
    let events = ["--events-port", "0", "--events-secret", SECRET];
    let a = app_on(&db, &service, &events).await;
    let b = app_on(&db, &service, &events).await;
    let mut bodies = Vec::new();
    for (subscription, effective_at, revision) in [
        ("WS-SUB-3304", "2027-01-01T00:00:00Z", 4),
        ("WS-SUB-3310", "2027-03-01T00:00:00Z", 2),
    ] {
        let key = format!("ag-replicas-{subscription}");
        let terms = Terms {
            tag: format!("{subscription} stop_renewal r{revision}"),
            label: "Stop renewal at the end of the current period".into(),
            effective: effective_text(effective_at).unwrap(),
            entitlements: "as read out".into(),
        };
        let mut unknown = op(&key);
        unknown.subscription = subscription.into();
        unknown.revision = revision;
        unknown.terms = terms;
        a.store.claim(&unknown).await.unwrap();
        assert!(a.store.mark_sent(&key).await.unwrap());
        a.store
            .set_state(&key, OpState::Unknown, None)
            .await
            .unwrap();
        let record = reqwest::get(format!("{service}/v1/subscriptions/{subscription}"))
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        let event = json!({
            "id": format!("evt_{key}"), "type": "change.scheduled", "created": 0,
            "subscription": subscription, "account": "acct-7", "revision": revision + 1,
            "request_key": key,
            "change": {"request_key": key, "subscription": subscription, "change_type": "stop_renewal",
                       "status": "scheduled", "effective_at": effective_at, "revision": revision + 1},
            "record": record,
        });
        bodies.push((key, serde_json::to_vec(&event).unwrap()));
    }
    let client = reqwest::Client::new();
    let mut deliveries = Vec::new();
    for (_, body) in &bodies {
        for url in [a.events_url(), b.events_url()] {
            for _ in 0..3 {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs() as i64;
                let request = client
                    .post(&url)
                    .header(SIGNATURE_HEADER, sign(SECRET.as_bytes(), t, body))
                    .body(body.clone());
                deliveries.push(tokio::spawn(async move {
                    let answer: Value = request.send().await.unwrap().json().await.unwrap();
                    answer["verdict"].as_str().unwrap().to_owned()
                }));
            }
        }
    }
    let verdicts: Vec<String> = futures_util::future::join_all(deliveries)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let resolved = verdicts.iter().filter(|v| *v == "resolved").count();
    assert_eq!(resolved, 2, "one resolution per operation: {verdicts:?}");
    assert!(
        verdicts
            .iter()
            .all(|v| v == "resolved" || v == "duplicate" || v == "confirmed"),
        "{verdicts:?}"
    );
    for (key, _) in &bodies {
        let op = a.store.operation(key).await.unwrap().unwrap();
        assert_eq!(op.state, OpState::Applied, "{key}");
        // A late answer (the command timing out after the event resolved it) or the
        // reconciler's "no record" never replaces the resolved outcome.
        for late in [OpState::Unknown, OpState::Failed] {
            assert!(!b
                .store
                .set_state(key, late, Some(&some_outcome()))
                .await
                .unwrap());
        }
        assert_eq!(
            a.store.operation(key).await.unwrap().unwrap().state,
            OpState::Applied
        );
    }
    let recorded = a.store.received_events(None).await.unwrap();
    assert_eq!(recorded.len(), 2, "each event recorded once: {recorded:?}");
    assert!(
        recorded.iter().all(|e| e.verdict == "resolved"),
        "{recorded:?}"
    );
}

/// A held change (the demo data's Wine Club cancellation, marked for review) confirmed
/// through `app`; its request key.
async fn held_change(app: &TestApp, sender: &str) -> String {
    held_change_of(app, sender, "WS-SUB-7001").await
}

async fn held_change_of(app: &TestApp, sender: &str, id: &str) -> String {
    let mut c = Chat::new(sender, Some("acct-21"));
    c.request_change(app, id, "cancel_now").await.unwrap();
    let outcome = c.say_yes_and_apply(app).await;
    assert_eq!(outcome["status"], "held", "{outcome}");
    app.store
        .latest_approval_for_sender(sender)
        .await
        .unwrap()
        .unwrap()
        .request_key
}

/// Two replicas on one store, each with operators approving the same hold at once: one
/// decision, one command; and the decision's statement itself has one winner.
async fn two_replicas_approving_one_hold_at_once_send_one_command(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = database_url(backend, dir.path()).await;
    let service = service(dir.path()).await;
    let faulty = FaultyService::start(&service, Fault::Pass).await;
    let a = app_on(&db, &faulty.url, &[]).await;
    let b = app_on(&db, &faulty.url, &[]).await;
    let key = held_change(&a, "replicas-approve").await;
    let guards = [a.guard(), b.guard()];
    let clicks = (0..20).map(|i| {
        let guard = guards[i % 2].clone();
        let key = key.clone();
        tokio::spawn(async move {
            guard
                .approve(&key, &format!("operator-{i}"), None)
                .await
                .unwrap()
                .unwrap()
        })
    });
    let decisions: Vec<_> = futures_util::future::join_all(clicks)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        decisions.iter().filter(|d| d.decided).count(),
        1,
        "{decisions:?}"
    );
    assert_eq!(faulty.commands_forwarded(), 1, "one command");
    assert_eq!(revision(&service, "WS-SUB-7001").await, 4);
    // The statement itself, raced directly from both stores: one winner of twenty.
    let mut second = a.record("WS-SUB-7001").await;
    second["id"] = json!("WS-SUB-7002");
    second["status"] = json!("active");
    second["options"] = json!([{"change_type": "cancel_now", "label": "Cancel now",
        "effective_at": "2026-12-01T00:00:00Z", "entitlements": "No refund", "review": true}]);
    second["notes"] = json!([]);
    second.as_object_mut().unwrap().remove("revision");
    a.put_record(&second).await;
    let key2 = held_change_of(&b, "replicas-cas", "WS-SUB-7002").await;
    let races = (0..20).map(|i| {
        let store = if i % 2 == 0 {
            a.store.clone()
        } else {
            b.store.clone()
        };
        let key = key2.clone();
        tokio::spawn(async move {
            store
                .start_approval(&key, "racer", None)
                .await
                .unwrap()
                .is_some()
        })
    });
    let won = futures_util::future::join_all(races)
        .await
        .into_iter()
        .filter(|r| *r.as_ref().unwrap())
        .count();
    assert_eq!(won, 1);
}

/// `actiongate approvals approve` killed (SIGKILL) while its command is at the service:
/// the operation is left sent; approving again sends nothing; the reconciler resolves it as
/// applied; the service made one change.
async fn an_approval_killed_after_its_command_is_reconciled_and_never_sent_twice(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = database_url(backend, dir.path()).await;
    let service = service(dir.path()).await;
    let faulty = FaultyService::start(&service, Fault::Pass).await;
    let app = app_on(&db, &faulty.url, &[]).await;
    let key = held_change(&app, "approval-crash").await;
    faulty.set(Fault::Slow(Duration::from_millis(1500)));
    let endpoints = dir.path().join("none.yml");
    std::fs::write(&endpoints, "").unwrap();
    let mut cli = Command::new(env!("CARGO_BIN_EXE_actiongate"))
        .args([
            "approvals",
            "--database-url",
            &db,
            "--subscriptions-url",
            &faulty.url,
        ])
        .args([
            "--endpoints",
            endpoints.to_str().unwrap(),
            "--subscriptions-timeout",
            "10",
            "--quiet",
        ])
        .args(["approve", &key, "--operator", "ana"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while faulty.commands_forwarded() == 0 {
        assert!(Instant::now() < deadline, "the command never left");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = Command::new("kill")
        .args(["-9", &cli.id().to_string()])
        .status();
    let _ = cli.wait();
    let store = Store::connect(&db).await.unwrap();
    assert_eq!(
        store.operation(&key).await.unwrap().unwrap().state,
        OpState::Sent,
        "sent, never recorded"
    );
    faulty.set(Fault::Pass);
    tokio::time::sleep(Duration::from_millis(1600)).await;
    // Approving again: decided already, nothing sent again.
    let again = app
        .guard()
        .approve(&key, "ben", None)
        .await
        .unwrap()
        .unwrap();
    assert!(!again.decided, "{again:?}");
    // The reconciler (here called as its pass does) resolves it.
    app.guard().reconcile_all(Duration::ZERO).await.unwrap();
    assert_eq!(
        store.operation(&key).await.unwrap().unwrap().state,
        OpState::Applied
    );
    let mut c = Chat::new("approval-crash", Some("acct-21"));
    c.user("did it go through?", "check", &[]);
    let (_, body) = c.run(&app, "check_subscription_change").await.unwrap();
    assert_eq!(outcome_of(&body)["status"], "applied");
    assert_eq!(faulty.commands_forwarded(), 1, "one command");
    assert_eq!(revision(&service, "WS-SUB-7001").await, 4);
}
