//! The whole matrix of service faults, each on a confirmed change, followed by retries
//! and a check once the service is healthy: never a doubled change, never `applied`
//! without the service's 201/200, and for each fault the one sequence of outcomes the
//! contract gives.

use crate::common;

use std::time::Duration;

use common::faults::{Fault, FaultyService};
use common::{outcome_of, spawn_app, spawn_app_with, Chat, TestApp};
use serde_json::Value;

const SUB: &str = "WS-SUB-3304";

/// What the customer is told, in order: the first answer, a retry while the fault lasts,
/// a retry once the service is healthy, and `check_subscription_change` after. Each fault
/// has exactly one right sequence (CONTRACT.md section 4): an unknown outcome is resolved
/// only by the service's facts (`GET /v1/changes/{key}`), never guessed.
fn expected(fault: Fault) -> [&'static str; 4] {
    const APPLIED: &str = "applied";
    const UNKNOWN: &str = "pending_verification/outcome_unknown";
    const NOT_SENT: &str = "failed/not_sent";
    const AWAY: &str = "blocked/service_unavailable";
    const STALE: &str = "blocked/stale_at_service";
    match fault {
        Fault::Pass => [APPLIED; 4],
        Fault::Slow(delay) if delay < TIMEOUT => [APPLIED; 4],
        // The command was made; its answer was lost or late: unknown, then the service
        // says it was made.
        Fault::DropAfterForwarding | Fault::Slow(_) => [UNKNOWN, APPLIED, APPLIED, APPLIED],
        // A 500, or a command lost on the way: unknown, then the service says it never had
        // it, and fences the key.
        Fault::Fail | Fault::LoseCommands => [UNKNOWN, NOT_SENT, NOT_SENT, NOT_SENT],
        // Nothing reached the service (or the facts could not be read): nothing was sent,
        // and a retry once it is back makes the change.
        Fault::ResetBeforeReading | Fault::FailReads => [AWAY, AWAY, APPLIED, APPLIED],
        // The record moved between the read and the command: the service refused it, and
        // every repeat of that yes is told the same.
        Fault::StaleAtLastMoment => [STALE; 4],
    }
}

/// The client's timeout for the service, as the app below is started with.
const TIMEOUT: Duration = Duration::from_millis(500);

/// An outcome as `status/reason` (`status` alone when there is no reason); its effects
/// are 0 or 1.
fn said(outcome: &Value) -> String {
    assert!(
        outcome["effects"] == 0 || outcome["effects"] == 1,
        "{outcome}"
    );
    match (outcome["status"].as_str(), outcome["reason"].as_str()) {
        (Some(status), Some(reason)) => format!("{status}/{reason}"),
        (Some(status), None) => status.to_owned(),
        _ => format!("unclear: {outcome}"),
    }
}

async fn run(fault: Fault) {
    let service = spawn_app().await; // the real service lives in this app's embedded service
    let faulty = FaultyService::start(&service.service_url, fault).await;
    let app: TestApp = spawn_app_with(
        &[
            "--subscriptions-url",
            &faulty.url,
            "--subscriptions-timeout",
            &TIMEOUT.as_secs_f64().to_string(),
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
    if first["status"] == "applied" {
        assert_eq!(
            faulty.commands_accepted(),
            1,
            "{fault:?}: applied without the service's 2xx"
        );
    }
    // Retries while the fault lasts, then with the service healthy, then a check.
    let (_, again) = app.endpoint.webhook(&request).await.unwrap();
    if let Fault::Slow(delay) = fault {
        tokio::time::sleep(delay).await;
    }
    faulty.set(Fault::Pass);
    let (_, healthy) = app.endpoint.webhook(&request).await.unwrap();
    let healthy = outcome_of(&healthy);
    c.record("apply_subscription_change", &body);
    c.user("did it work?", "check", &[]);
    let (_, checked) = c.run(&app, "check_subscription_change").await.unwrap();
    let checked = outcome_of(&checked);
    let told = [&first, &outcome_of(&again), &healthy, &checked].map(said);
    assert_eq!(
        told,
        expected(fault),
        "{fault:?}: the first answer, the retry during the fault, the retry once healthy, the check"
    );
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

#[tokio::test]
async fn the_command_is_lost_on_the_way() {
    run(Fault::LoseCommands).await;
}

/// Issue 23's reconciler: a command the service is still processing is never declared
/// failed. The client gives up after 0.5 s, the service makes the change after 2 s; the
/// reconciler asks meanwhile (202 in flight: still pending), and afterwards (200: applied).
#[tokio::test]
async fn an_unknown_outcome_still_in_flight_stays_pending_until_the_service_answers() {
    let app = spawn_app_with(
        &[
            "--subscriptions-timeout",
            &TIMEOUT.as_secs_f64().to_string(),
            "--embedded-command-delay-ms",
            "2000",
        ],
        |_| {},
    )
    .await;
    let mut c = common::asked(&app, "slow-service").await;
    c.user("yes", "affirm", &[]);
    let request = c.request("apply_subscription_change");
    let (_, body) = app.endpoint.webhook(&request).await.unwrap();
    let first = outcome_of(&body);
    assert_eq!(first["status"], "pending_verification", "{first}");
    // Asked while the service still holds the command: in flight, so still unknown.
    app.guard().reconcile_all(Duration::ZERO).await.unwrap();
    let op = app
        .store
        .latest_for_sender("slow-service")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(op.state, actiongate::store::OpState::Unknown);
    assert_eq!(app.revision(SUB).await, 4, "not made yet");
    // Once the service has made it, the same question resolves it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(app.revision(SUB).await, 5, "the service made it");
    assert_eq!(app.guard().reconcile_all(Duration::ZERO).await.unwrap(), 1);
    let (_, again) = app.endpoint.webhook(&request).await.unwrap();
    assert_eq!(outcome_of(&again)["status"], "applied");
    assert_eq!(app.revision(SUB).await, 5, "made once");
}

/// A command that never reached the service: the lookup finds nothing and fences the key
/// (failed/not_sent), and the same command arriving late with that key changes nothing.
#[tokio::test]
async fn a_command_never_received_is_resolved_not_sent_and_its_key_fenced() {
    let service = spawn_app().await;
    let faulty = FaultyService::start(&service.service_url, Fault::Pass).await;
    let app = spawn_app_with(
        &[
            "--subscriptions-url",
            &faulty.url,
            "--subscriptions-timeout",
            &TIMEOUT.as_secs_f64().to_string(),
        ],
        |_| {},
    )
    .await;
    let mut c = Chat::new("never-received", Some("acct-7"));
    c.request_change(&app, SUB, "stop_renewal").await.unwrap();
    faulty.set(Fault::LoseCommands);
    c.user("yes", "affirm", &[]);
    let request = c.request("apply_subscription_change");
    let (_, body) = app.endpoint.webhook(&request).await.unwrap();
    assert_eq!(outcome_of(&body)["status"], "pending_verification");
    faulty.set(Fault::Pass);
    assert_eq!(app.guard().reconcile_all(Duration::ZERO).await.unwrap(), 1);
    let (_, again) = app.endpoint.webhook(&request).await.unwrap();
    let resolved = outcome_of(&again);
    assert_eq!(
        (resolved["status"].as_str(), resolved["reason"].as_str()),
        (Some("failed"), Some("not_sent")),
        "{resolved}"
    );
    assert_eq!(faulty.commands_accepted(), 0);
    // The command, arriving now with the fenced key: 410, nothing made.
    let op = app
        .store
        .latest_for_sender("never-received")
        .await
        .unwrap()
        .unwrap();
    let late = reqwest::Client::new()
        .post(format!(
            "{}/v1/subscriptions/{SUB}/changes",
            service.service_url
        ))
        .header("If-Match", "\"r4\"")
        .header("Idempotency-Key", &op.request_key)
        .json(&serde_json::json!({"change_type": "stop_renewal"}))
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), 410);
    assert_eq!(service.revision(SUB).await, 4, "nothing was changed");
}
