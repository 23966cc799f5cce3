//! The whole matrix of service faults, each on a confirmed change, followed by retries
//! and a check once the service is healthy: never a doubled change, never `applied`
//! without the service's 201/200, always a clear outcome.

mod common;

use std::time::Duration;

use common::faults::{Fault, FaultyService};
use common::{outcome_of, spawn_app, spawn_app_with, Chat, TestApp};
use serde_json::Value;

const SUB: &str = "WS-SUB-3304";

const CLEAR: [(&str, Option<&str>); 9] = [
    ("applied", None),
    ("blocked", Some("stale_at_service")),
    ("blocked", Some("service_unavailable")),
    ("blocked", Some("benefit_loss_hidden")),
    ("pending_verification", Some("outcome_unknown")),
    ("failed", Some("service_rejected")),
    ("blocked", Some("not_answered")),
    ("denied", Some("not_owner")),
    ("blocked", Some("rate_limited")),
];

fn assert_clear(outcome: &Value, fault: Fault) {
    let pair = (
        outcome["status"].as_str().unwrap_or("?"),
        outcome["reason"].as_str(),
    );
    assert!(
        CLEAR.contains(&pair),
        "{fault:?}: unclear outcome {outcome}"
    );
    assert!(
        outcome["effects"] == 0 || outcome["effects"] == 1,
        "{fault:?}: {outcome}"
    );
}

async fn run(fault: Fault) {
    let service = spawn_app().await; // the real service lives in this app's embedded service
    let faulty = FaultyService::start(&service.service_url, fault).await;
    let app: TestApp = spawn_app_with(
        &[
            "--subscriptions-url",
            &faulty.url,
            "--subscriptions-timeout",
            "0.5",
        ],
        |_| {},
    )
    .await;
    let before = service.revision(SUB).await;
    // Select through a healthy path so every fault hits the apply.
    let mut c = Chat::new("faults", Some("acct-7"));
    faulty.set(Fault::Pass);
    c.request_change(&app, SUB, "stop_renewal").await.unwrap();
    faulty.set(fault);
    c.user("yes", "affirm", &[]);
    let request = c.request("apply_subscription_change");
    let (status, body) = app.endpoint.webhook(&request).await.unwrap();
    assert_eq!(status, 200, "{fault:?}: {body}");
    let first = outcome_of(&body);
    assert_clear(&first, fault);
    if first["status"] == "applied" {
        assert_eq!(
            faulty.commands_accepted(),
            1,
            "{fault:?}: applied without the service's 2xx"
        );
    }
    // Retries while the fault lasts, then with the service healthy, then a check.
    let (_, again) = app.endpoint.webhook(&request).await.unwrap();
    assert_clear(&outcome_of(&again), fault);
    if let Fault::Slow(delay) = fault {
        tokio::time::sleep(delay).await;
    }
    faulty.set(Fault::Pass);
    let (_, healthy) = app.endpoint.webhook(&request).await.unwrap();
    let healthy = outcome_of(&healthy);
    assert_clear(&healthy, fault);
    c.record("apply_subscription_change", &body);
    c.user("did it work?", "check", &[]);
    let (_, checked) = c.run(&app, "check_subscription_change").await.unwrap();
    let checked = outcome_of(&checked);
    let changes =
        service.revision(SUB).await - before - i64::from(fault == Fault::StaleAtLastMoment);
    assert!(changes <= 1, "{fault:?}: {changes} changes");
    assert_eq!(
        changes as usize,
        faulty.commands_accepted().min(1),
        "{fault:?}: every change went through a 2xx"
    );
    if healthy["status"] == "applied" || checked["status"] == "applied" {
        assert_eq!(changes, 1, "{fault:?}: applied means changed");
    }
    if changes == 1 {
        assert!(
            [&first, &healthy, &checked]
                .iter()
                .any(|o| o["status"] == "applied"),
            "{fault:?}: a change the customer is never told about"
        );
    }
}

#[tokio::test]
async fn pass() {
    run(Fault::Pass).await;
}

#[tokio::test]
async fn connection_dropped_after_the_command() {
    run(Fault::DropAfterForwarding).await;
}

#[tokio::test]
async fn connection_reset_before_the_request_is_read() {
    run(Fault::ResetBeforeReading).await;
}

#[tokio::test]
async fn the_service_fails() {
    run(Fault::Fail).await;
}

#[tokio::test]
async fn the_service_is_slow_within_the_timeout() {
    run(Fault::Slow(Duration::from_millis(200))).await;
}

#[tokio::test]
async fn the_service_stalls_past_the_timeout() {
    run(Fault::Slow(Duration::from_millis(1200))).await;
}

#[tokio::test]
async fn the_record_moves_at_the_last_moment() {
    run(Fault::StaleAtLastMoment).await;
}

#[tokio::test]
async fn reads_fail() {
    run(Fault::FailReads).await;
}
