//! The acceptance list of "Subscription Cancellation Needs an Exact Confirmation", each as
//! a test against the running server and the embedded service.

use crate::common;

use common::{outcome_of, spawn_app, Chat, ChatExt, TestApp};
use serde_json::json;

const SUB: &str = "WS-SUB-3304";

async fn asked(app: &TestApp, sender: &str) -> Chat {
    let mut c = Chat::new(sender, Some("acct-7"));
    c.request_change(app, SUB, "stop_renewal").await.unwrap();
    c
}

/// A period-end request presented to the naive path shows the defect: a tool that sends
/// whatever memory says, against whatever the record is now, makes the change on terms
/// the customer never saw. (The guarded path blocks the same conversation.)
#[tokio::test]
async fn the_naive_path_exercises_the_defect() {
    let app = spawn_app().await;
    let mut c = asked(&app, "naive").await;
    app.charge_october_box_early().await;
    c.user("yes", "affirm", &[]);
    // Naive: read the record now and send the command with its current revision.
    let now = app.revision(SUB).await;
    let naive = app
        .http
        .post(format!(
            "{}/v1/subscriptions/{SUB}/changes",
            app.service_url
        ))
        .header("If-Match", format!("\"r{now}\""))
        .header("Idempotency-Key", "naive-1")
        .json(&json!({"change_type": "stop_renewal"}))
        .send()
        .await
        .unwrap();
    assert_eq!(naive.status(), 201, "the naive path changes the record");
    // The guarded path, on an identical conversation, refuses.
    let app = spawn_app().await;
    let mut c = asked(&app, "guarded").await;
    app.charge_october_box_early().await;
    let outcome = c.say_yes_and_apply(&app).await;
    assert_eq!(outcome["reason"], "benefit_loss_hidden");
    assert_eq!(app.record(SUB).await["status"], "active");
}

/// Confirming revision 4 against revision 5 leaves the record active and requires a
/// fresh preview.
#[tokio::test]
async fn an_old_revision_leaves_the_record_active_and_requires_a_fresh_preview() {
    let app = spawn_app().await;
    let mut c = asked(&app, "old-rev").await;
    app.charge_october_box_early().await;
    let outcome = c.say_yes_and_apply(&app).await;
    assert_eq!(outcome["status"], "blocked");
    assert_eq!(
        outcome["current"]["tag"], "WS-SUB-3304 stop_renewal r5",
        "the fresh preview's terms"
    );
    let record = app.record(SUB).await;
    assert_eq!(
        (record["status"].as_str(), record["revision"].as_i64()),
        (Some("active"), Some(5))
    );
}

/// A valid proposal with no matching confirmation stays blocked even if the chat holds an
/// unrelated "yes".
#[tokio::test]
async fn an_unrelated_yes_is_not_a_confirmation() {
    let app = spawn_app().await;
    let mut c = Chat::new("unrelated", Some("acct-7"));
    c.user("yes", "affirm", &[]);
    c.bot("Glad to hear it!", Some("utter_happy"));
    c.user(
        "stop the renewal of WS-SUB-3304",
        "request_change",
        &[("subscription", SUB), ("change_type", "stop_renewal")],
    );
    c.run(&app, "select_subscription_change").await.unwrap();
    let outcome = c.apply(&app).await;
    assert_eq!(outcome["reason"], "not_asked");
    assert_eq!(app.revision(SUB).await, 4);
}

/// An account other than the owner gets no subscription details and no mutation: the
/// answer a made-up id gets.
#[tokio::test]
async fn another_account_gets_no_details_and_no_mutation() {
    let app = spawn_app().await;
    let mut c = Chat::new("other", Some("acct-9"));
    let body = c.request_change(&app, SUB, "stop_renewal").await.unwrap();
    let text = body.to_string();
    assert!(
        !text.contains("Style Box") && !text.contains("2027-01-01"),
        "nothing revealed: {text}"
    );
    assert_eq!(outcome_of(&body)["status"], "blocked");
    assert_eq!(outcome_of(&body)["reason"], "unknown_subscription");
    assert_eq!(app.revision(SUB).await, 4);
}

/// Repeating the execution does not schedule a second operation; the replay returns the
/// persisted outcome.
#[tokio::test]
async fn a_repeated_execution_returns_the_persisted_outcome() {
    let app = spawn_app().await;
    let mut c = asked(&app, "repeat").await;
    c.user("yes", "affirm", &[]);
    let request = c.request("apply_subscription_change");
    let (_, first) = app.webhook(&request).await;
    for _ in 0..3 {
        let (_, again) = app.webhook(&request).await;
        assert_eq!(outcome_of(&again), outcome_of(&first));
    }
    assert_eq!(app.revision(SUB).await, 5);
}

/// A delayed or duplicate delivery does not turn the scheduled period-end change into
/// anything else.
#[tokio::test]
async fn a_duplicate_delivery_does_not_change_the_scheduled_change() {
    let app = spawn_app().await;
    let mut c = asked(&app, "duplicate").await;
    c.user("yes", "affirm", &[]);
    let request = c.request("apply_subscription_change");
    let (_, first) = app.webhook(&request).await;
    assert_eq!(outcome_of(&first)["status"], "applied");
    let before = app.record(SUB).await;
    // A late duplicate of the same confirmation, after the customer moved on.
    c.run(&app, "apply_subscription_change").await.unwrap();
    c.user("thanks", "thank", &[]);
    let (_, late) = app.webhook(&request).await;
    assert_eq!(outcome_of(&late)["status"], "applied");
    assert_eq!(
        app.record(SUB).await,
        before,
        "the scheduled change is untouched"
    );
    assert_eq!(before["status"], "ending");
}
