//! Changes a person approves (CONTRACT.md section 7): the rules that hold a confirmed
//! change, and each decision checked at the service's record: approved → one change however
//! often it is given; rejected, expired, moved facts, a spent budget → nothing sent.

use crate::common;

use std::time::{Duration, Instant};

use common::{spawn_app_with, test_settings, Chat, ChatExt, TestApp};
use serde_json::{json, Value};

use actiongate::consent::{Guard, Outcome, Reason, Status};
use actiongate::store::{ApprovalState, OpState};

const WINE: &str = "WS-SUB-7001";

/// A guard on the app's store and service, as `actiongate approvals` builds one.
async fn operator_guard(app: &TestApp) -> Guard {
    operator_guard_at(app, &app.service_url).await
}

/// The same, its service at `service_url`.
async fn operator_guard_at(app: &TestApp, service_url: &str) -> Guard {
    let db = format!(
        "sqlite:{}",
        app.dir.path().join("data/actiongate.db").display()
    );
    let dir = tempfile::tempdir().unwrap();
    let settings = test_settings(
        dir.path(),
        &["--database-url", &db, "--subscriptions-url", service_url],
    );
    actiongate::app::guard_for(&settings).await.unwrap()
}

/// The customer of `account` asks for `change_type` on `id`, is asked, says yes: the
/// apply's outcome, and the chat.
async fn confirm(
    app: &TestApp,
    sender: &str,
    account: &str,
    id: &str,
    change_type: &str,
) -> (Value, Chat) {
    let mut c = Chat::new(sender, Some(account));
    c.request_change(app, id, change_type).await.unwrap();
    assert_eq!(
        c.slots.get("change_status"),
        Some(&json!("selected")),
        "selected"
    );
    let outcome = c.say_yes_and_apply(app).await;
    (outcome, c)
}

async fn check(app: &TestApp, c: &mut Chat) -> Value {
    c.user("did it go through?", "check", &[]);
    let (status, body) = c.run(app, "check_subscription_change").await.unwrap();
    assert_eq!(status, 200);
    common::outcome_of(&body)
}

fn status_reason(outcome: &Value) -> (&str, Option<&str>) {
    (
        outcome["status"].as_str().unwrap(),
        outcome["reason"].as_str(),
    )
}

#[tokio::test]
async fn a_change_the_service_marks_for_review_is_held_and_nothing_is_sent() {
    let app = spawn_app_with(&["--rate-capacity", "1"], |_| {}).await;
    let (outcome, mut c) = confirm(&app, "wine-held", "acct-21", WINE, "cancel_now").await;
    assert_eq!(
        status_reason(&outcome),
        ("held", Some("approval_required")),
        "{outcome}"
    );
    assert_eq!(outcome["effects"], 0);
    assert!(outcome["current"]["entitlements"]
        .as_str()
        .unwrap()
        .contains("40 EUR"));
    let (_, body) = c.run(&app, "apply_subscription_change").await.unwrap();
    assert_eq!(
        body["responses"][0]["response"],
        "utter_subscription_change_held"
    );
    // Nothing reached the service, no operation, no token spent.
    assert_eq!(app.revision(WINE).await, 3);
    assert_eq!(app.record(WINE).await["status"], "active");
    assert!(app
        .store
        .latest_for_sender("wine-held")
        .await
        .unwrap()
        .is_none());
    let held = app
        .store
        .approvals(Some(ApprovalState::Held))
        .await
        .unwrap();
    assert_eq!(held.len(), 1);
    let held = &held[0];
    assert_eq!(
        (held.account.as_str(), held.rule.as_str(), held.revision),
        ("acct-21", "review", 3)
    );
    assert!(
        held.question.contains("40 EUR"),
        "the question as sent: {}",
        held.question
    );
    assert_eq!(held.reply, "yes");
    assert!(held.expires_at - held.created_at >= 24 * 3600 * 1000 - 1000);
    assert!(
        app.store
            .token_available("acct-21", 1.0, 0.0)
            .await
            .unwrap(),
        "no token spent"
    );
    // A repeat of the same "yes", and the check, report it held.
    assert_eq!(
        status_reason(&check(&app, &mut c).await),
        ("held", Some("approval_required"))
    );
    // The other option of the same record is not marked for review: applied at once.
    let (other, _) = confirm(&app, "wine-stop", "acct-21", WINE, "stop_renewal").await;
    assert_eq!(other["status"], "applied", "{other}");
}

#[tokio::test]
async fn rules_hold_by_change_type_or_account_and_review_marks_can_be_ignored() {
    let app = spawn_app_with(&[], |s| {
        s.consent.approval.change_types = vec!["skip_next_box".into()];
        s.consent.approval.accounts = vec!["acct-9".into()];
        s.consent.approval.review = false;
    })
    .await;
    let (by_type, _) = confirm(&app, "by-type", "acct-7", "WS-SUB-3304", "skip_next_box").await;
    assert_eq!(by_type["status"], "held", "{by_type}");
    let (by_account, _) =
        confirm(&app, "by-account", "acct-9", "WS-SUB-4410", "stop_renewal").await;
    assert_eq!(by_account["status"], "held", "{by_account}");
    let (not_held, _) = confirm(&app, "other", "acct-7", "WS-SUB-3310", "stop_renewal").await;
    assert_eq!(not_held["status"], "applied", "{not_held}");
    let (review_off, _) = confirm(&app, "review-off", "acct-21", WINE, "cancel_now").await;
    assert_eq!(
        review_off["status"], "applied",
        "review marks ignored: {review_off}"
    );
    let rules: Vec<String> = app
        .store
        .approvals(None)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.rule)
        .collect();
    assert_eq!(rules, ["change_type", "account"]);
    assert_eq!(app.revision("WS-SUB-3304").await, 4, "held: unchanged");
    assert_eq!(app.revision("WS-SUB-4410").await, 1, "held: unchanged");
}

#[tokio::test]
async fn an_approval_sends_the_change_once_however_often_it_is_given() {
    let app = spawn_app_with(&[], |_| {}).await;
    let (_, mut c) = confirm(&app, "approve-once", "acct-21", WINE, "cancel_now").await;
    let key = app.store.approvals(None).await.unwrap()[0]
        .request_key
        .clone();
    // Two operators, each clicking five times, on two guards (two processes' worth), at once.
    let (a, b) = (operator_guard(&app).await, operator_guard(&app).await);
    let clicks = (0..10).map(|i| {
        let guard = if i % 2 == 0 { a.clone() } else { b.clone() };
        let key = key.clone();
        tokio::spawn(async move {
            let operator = if i % 2 == 0 { "ana" } else { "ben" };
            guard.approve(&key, operator, None).await.unwrap().unwrap()
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
    let decided = decisions.iter().find(|d| d.decided).unwrap();
    assert_eq!(decided.outcome.status, Status::Applied);
    assert!(
        decisions
            .iter()
            .all(|d| matches!(d.outcome.status, Status::Applied | Status::Held)),
        "{decisions:?}"
    );
    // One change at the service, on the revision the customer confirmed.
    assert_eq!(app.revision(WINE).await, 4);
    let record = app.record(WINE).await;
    assert!(
        record["notes"][0]["text"]
            .as_str()
            .unwrap()
            .contains("cancel_now"),
        "{record}"
    );
    let op = app.store.operation(&key).await.unwrap().unwrap();
    assert_eq!(op.state, OpState::Applied);
    // The customer's repeat and check see it; approving again changes nothing.
    assert_eq!(check(&app, &mut c).await["status"], "applied");
    assert_eq!(c.apply(&app).await["status"], "applied");
    let again = a.approve(&key, "ana", None).await.unwrap().unwrap();
    assert!(!again.decided);
    // The decision itself is one conditional statement: once approved, never again.
    assert!(app
        .store
        .start_approval(&key, "ben", None)
        .await
        .unwrap()
        .is_none());
    assert!(!app
        .store
        .reject_approval(
            &key,
            "ben",
            "late",
            &Outcome::blocked(Reason::ApprovalRejected)
        )
        .await
        .unwrap());
    assert_eq!(app.revision(WINE).await, 4);
    // Audited with the operator's name. Each operator's process commits its trail before
    // it ends, as `actiongate approvals` does.
    a.store().flush_audit().await;
    b.store().flush_audit().await;
    let audit = app.store.audit_entries(None, None).await.unwrap();
    let approval = audit
        .iter()
        .find(|e| e.action == "approve_subscription_change")
        .expect("audited");
    assert!(matches!(approval.operator.as_deref(), Some("ana" | "ben")));
    assert_eq!(approval.status, "applied");
    assert_eq!(approval.request_key.as_deref(), Some(key.as_str()));
}

#[tokio::test]
async fn a_rejection_sends_nothing_and_tells_the_customer_the_note() {
    let app = spawn_app_with(&[], |_| {}).await;
    let (_, mut c) = confirm(&app, "rejected", "acct-21", WINE, "cancel_now").await;
    let key = app.store.approvals(None).await.unwrap()[0]
        .request_key
        .clone();
    let guard = operator_guard(&app).await;
    let note = "The cellar credit can be moved to a friend's account instead; we will call.";
    let decision = guard.reject(&key, "ana", note).await.unwrap().unwrap();
    assert!(decision.decided);
    let outcome = check(&app, &mut c).await;
    assert_eq!(
        status_reason(&outcome),
        ("blocked", Some("approval_rejected"))
    );
    assert_eq!(outcome["why"], note);
    // Approving afterwards decides nothing and sends nothing.
    let late = guard.approve(&key, "ben", None).await.unwrap().unwrap();
    assert!(!late.decided);
    assert_eq!(app.revision(WINE).await, 3);
    assert!(app.store.operation(&key).await.unwrap().is_none());
    assert_eq!(c.apply(&app).await["reason"], "approval_rejected");
    guard.store().flush_audit().await;
    let audit = app.store.audit_entries(None, None).await.unwrap();
    let entry = audit
        .iter()
        .find(|e| e.action == "reject_subscription_change")
        .unwrap();
    assert_eq!(entry.operator.as_deref(), Some("ana"));
    assert!(entry
        .reason
        .as_deref()
        .unwrap()
        .contains("moved to a friend"));
}

#[tokio::test]
async fn an_undecided_hold_expires_in_the_background() {
    let app = spawn_app_with(&["--reconcile-interval", "1"], |s| {
        s.consent.approval.expiry = Duration::from_millis(300);
    })
    .await;
    let (_, mut c) = confirm(&app, "expires", "acct-21", WINE, "cancel_now").await;
    let key = app.store.approvals(None).await.unwrap()[0]
        .request_key
        .clone();
    let deadline = Instant::now() + Duration::from_secs(5);
    while app.store.approval(&key).await.unwrap().unwrap().state != ApprovalState::Expired {
        assert!(Instant::now() < deadline, "not expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        status_reason(&check(&app, &mut c).await),
        ("blocked", Some("approval_expired"))
    );
    let late = operator_guard(&app)
        .await
        .approve(&key, "ana", None)
        .await
        .unwrap()
        .unwrap();
    assert!(!late.decided, "an expired hold is not approved");
    assert_eq!(app.revision(WINE).await, 3, "nothing sent");
}

#[tokio::test]
async fn an_operator_cannot_approve_a_hold_whose_terms_moved() {
    let app = spawn_app_with(&[], |_| {}).await;
    let (_, mut c) = confirm(&app, "moved", "acct-21", WINE, "cancel_now").await;
    let key = app.store.approvals(None).await.unwrap()[0]
        .request_key
        .clone();
    let mut record = app.record(WINE).await;
    record.as_object_mut().unwrap().remove("revision");
    record["options"][0]["entitlements"] =
        json!("The cellar credit of 60 EUR is forfeited; no refund");
    record["notes"] =
        json!([{"at": "2026-11-30T09:00:00Z", "text": "A bonus credit of 20 EUR was added."}]);
    app.put_record(&record).await;
    let decision = operator_guard(&app)
        .await
        .approve(&key, "ana", None)
        .await
        .unwrap()
        .unwrap();
    assert!(decision.decided);
    assert_eq!(decision.outcome.status, Status::Blocked);
    assert_eq!(
        decision.outcome.reason.map(|r| r.as_str()),
        Some("benefit_loss_hidden")
    );
    assert!(decision.outcome.why.as_deref().unwrap().contains("20 EUR"));
    assert_eq!(app.revision(WINE).await, 4, "only the PUT");
    assert_eq!(app.record(WINE).await["status"], "active", "not cancelled");
    assert!(
        app.store.operation(&key).await.unwrap().is_none(),
        "nothing claimed"
    );
    assert_eq!(check(&app, &mut c).await["reason"], "benefit_loss_hidden");
}

#[tokio::test]
async fn the_budget_is_spent_when_the_command_is_sent_not_when_held() {
    let app = spawn_app_with(&["--rate-capacity", "1", "--rate-per-hour", "0.001"], |s| {
        s.consent.approval.change_types = vec!["skip_next_box".into()];
    })
    .await;
    let (held, _) = confirm(
        &app,
        "budget-held",
        "acct-7",
        "WS-SUB-3304",
        "skip_next_box",
    )
    .await;
    assert_eq!(held["status"], "held");
    // The hold spent nothing: another change of the account goes through and spends it.
    let (other, _) = confirm(
        &app,
        "budget-other",
        "acct-7",
        "WS-SUB-3310",
        "stop_renewal",
    )
    .await;
    assert_eq!(other["status"], "applied", "{other}");
    let key = app.store.approvals(None).await.unwrap()[0]
        .request_key
        .clone();
    let decision = operator_guard(&app)
        .await
        .approve(&key, "ana", None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        decision.outcome.reason.map(|r| r.as_str()),
        Some("rate_limited")
    );
    assert_eq!(app.revision("WS-SUB-3304").await, 4, "nothing sent");
    assert_eq!(
        app.store.approval(&key).await.unwrap().unwrap().state,
        ApprovalState::Blocked
    );
    // With the budget spent before the hold, the hold is refused at step 14 itself.
    let (refused, _) = confirm(
        &app,
        "budget-spent",
        "acct-7",
        "WS-SUB-3304",
        "skip_next_box",
    )
    .await;
    assert_eq!(
        status_reason(&refused),
        ("blocked", Some("rate_limited")),
        "{refused}"
    );
}

#[tokio::test]
async fn approvals_from_the_terminal_use_the_same_rules_and_audit() {
    let app = spawn_app_with(&[], |_| {}).await;
    confirm(&app, "terminal", "acct-21", WINE, "cancel_now").await;
    let db = format!(
        "sqlite:{}",
        app.dir.path().join("data/actiongate.db").display()
    );
    let endpoints = app.dir.path().join("endpoints.yml");
    let run = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_actiongate"))
            .arg("approvals")
            .args([
                "--database-url",
                &db,
                "--subscriptions-url",
                &app.service_url,
            ])
            .args(["--endpoints", endpoints.to_str().unwrap(), "--quiet"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    app.store.flush_audit().await;
    let list = run(&["list"]);
    assert!(
        list.contains("acct-21 cancel_now on WS-SUB-7001 (r3), held by rule review"),
        "{list}"
    );
    assert!(
        list.contains("asked: ") && list.contains("reply: yes"),
        "{list}"
    );
    // The JSON lines keep the stored shape: the terms as the JSON text the store holds.
    let line: Value =
        serde_json::from_str(run(&["list", "--format", "json"]).lines().next().unwrap()).unwrap();
    let terms: Value =
        serde_json::from_str(line["terms"].as_str().expect("terms as text")).unwrap();
    assert_eq!(terms["tag"], "WS-SUB-7001 cancel_now r3");
    assert_eq!(line["outcome"], Value::Null);
    let key = app.store.approvals(None).await.unwrap()[0]
        .request_key
        .clone();
    assert_eq!(
        run(&["approve", &key, "--operator", "cli-ana"]).trim(),
        "applied"
    );
    assert!(run(&["approve", &key, "--operator", "cli-ben"]).contains("decided before"));
    assert_eq!(app.revision(WINE).await, 4, "one change");
    assert_eq!(run(&["list"]).trim(), "no held changes");
    let audit = app.store.audit_entries(None, None).await.unwrap();
    assert!(audit
        .iter()
        .any(|e| e.operator.as_deref() == Some("cli-ana")));
}

/// A stand-in for Rasa's HTTP API (`rasa run --enable-api`): records each
/// `trigger_intent` call it gets.
async fn rasa_api() -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>,
) {
    use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
    let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = calls.clone();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = HttpServer::new(move || {
        let seen = seen.clone();
        App::new().default_service(web::to(move |req: HttpRequest, body: web::Json<Value>| {
            let seen = seen.clone();
            async move {
                let uri = req.uri().to_string();
                seen.lock().unwrap().push((uri, body.into_inner()));
                HttpResponse::Ok().json(json!({"tracker": {}}))
            }
        }))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    tokio::spawn(server);
    (format!("http://127.0.0.1:{port}"), calls)
}

#[tokio::test]
async fn a_decision_triggers_an_intent_in_the_conversation_through_rasas_api() {
    let (rasa, calls) = rasa_api().await;
    let app = spawn_app_with(&[], |s| {
        s.consent.approval.notify_rasa_url = Some(rasa.clone());
        s.consent.approval.notify_rasa_token = Some("rasa-token".into());
    })
    .await;
    confirm(&app, "notify me/1", "acct-21", WINE, "cancel_now").await;
    let key = app.store.approvals(None).await.unwrap()[0]
        .request_key
        .clone();
    let decision = app
        .guard()
        .approve(&key, "ana", None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(decision.outcome.status, Status::Applied);
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let (uri, body) = &calls[0];
    assert_eq!(
        uri,
        "/conversations/notify%20me%2F1/trigger_intent?token=rasa%2Dtoken"
    );
    assert_eq!(
        body,
        &json!({"name": "subscription_change_decided",
                "entities": {"change_status": "applied", "change_reason": null}})
    );
}

/// The customer withdraws the change while it waits (CONTRACT.md section 7): the hold ends
/// as blocked/withdrawn, audited; an operator's approval after that decides nothing and
/// sends nothing; check reports the withdrawal; with nothing held, withdraw says so.
#[tokio::test]
async fn a_withdrawn_hold_is_never_sent() {
    let app = spawn_app_with(&[], |_| {}).await;
    let mut nothing = Chat::new("wine-nothing-held", Some("acct-21"));
    nothing.user("cancel that", "withdraw_change", &[]);
    let (_, body) = nothing
        .run(&app, "withdraw_subscription_change")
        .await
        .unwrap();
    assert_eq!(
        status_reason(&common::outcome_of(&body)),
        ("blocked", Some("not_selected"))
    );
    let (outcome, mut c) = confirm(&app, "wine-withdrawn", "acct-21", WINE, "cancel_now").await;
    assert_eq!(status_reason(&outcome), ("held", Some("approval_required")));
    c.user("cancel that", "withdraw_change", &[]);
    let (status, body) = c.run(&app, "withdraw_subscription_change").await.unwrap();
    assert_eq!(status, 200, "{body}");
    let withdrawn = common::outcome_of(&body);
    assert_eq!(status_reason(&withdrawn), ("blocked", Some("withdrawn")));
    assert_eq!(withdrawn["effects"], 0);
    assert_eq!(app.revision(WINE).await, 3);
    let held = app
        .store
        .latest_approval_for_sender("wine-withdrawn")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(held.state, ApprovalState::Withdrawn);
    // An operator approves it afterwards: nothing is decided, nothing sent.
    let guard = operator_guard(&app).await;
    let decision = guard
        .approve(&held.request_key, "op-ana", None)
        .await
        .unwrap()
        .unwrap();
    assert!(!decision.decided);
    assert_eq!(
        status_reason(&serde_json::to_value(&decision.outcome).unwrap()),
        ("blocked", Some("withdrawn"))
    );
    assert!(app
        .store
        .operation(&held.request_key)
        .await
        .unwrap()
        .is_none());
    assert_eq!(app.revision(WINE).await, 3, "nothing was sent");
    // Check reports it; withdrawing again finds nothing held (not_selected), nothing done.
    assert_eq!(
        status_reason(&check(&app, &mut c).await),
        ("blocked", Some("withdrawn"))
    );
    let (_, again) = c.run(&app, "withdraw_subscription_change").await.unwrap();
    assert_eq!(
        status_reason(&common::outcome_of(&again)),
        ("blocked", Some("not_selected"))
    );
    assert_eq!(
        app.store
            .approval(&held.request_key)
            .await
            .unwrap()
            .unwrap()
            .state,
        ApprovalState::Withdrawn
    );
    // The withdrawal is in the audit trail, by the customer.
    let trail = app
        .store
        .audit_entries(Some("wine-withdrawn"), None)
        .await
        .unwrap();
    assert!(
        trail
            .iter()
            .any(|e| e.action == "withdraw_subscription_change"
                && e.operator.as_deref() == Some("customer")),
        "{trail:?}"
    );
}

/// Open holds are capped (issue 24): one per subscription (a second confirmation for it is
/// answered with the hold already waiting, and nothing new is stored) and a few per account
/// (`approval.max_open_per_account`; one more is `blocked`/`rate_limited`), so a burst of
/// holds cannot bury the ones a person must decide.
#[tokio::test]
async fn open_holds_are_capped_per_subscription_and_per_account() {
    let app = spawn_app_with(&[], |s| {
        s.consent.approval.change_types = vec!["stop_renewal".into()];
        s.consent.approval.max_open_per_account = 1;
    })
    .await;
    let (first, _) = confirm(&app, "wine-first", "acct-21", WINE, "cancel_now").await;
    assert_eq!(status_reason(&first), ("held", Some("approval_required")));
    let (second, _) = confirm(&app, "wine-second", "acct-21", WINE, "stop_renewal").await;
    assert_eq!(status_reason(&second), ("held", Some("approval_required")));
    assert!(second["why"].as_str().unwrap().contains("already waits"));
    assert_eq!(
        second["current"], first["current"],
        "the hold that waits is the one reported"
    );
    let held = app
        .store
        .approvals(Some(ApprovalState::Held))
        .await
        .unwrap();
    assert_eq!(held.len(), 1, "nothing new was stored");
    // acct-7: one hold allowed at once.
    let (style_box, _) = confirm(
        &app,
        "acct-7-first",
        "acct-7",
        "WS-SUB-3304",
        "stop_renewal",
    )
    .await;
    assert_eq!(
        status_reason(&style_box),
        ("held", Some("approval_required"))
    );
    let (coffee, _) = confirm(
        &app,
        "acct-7-second",
        "acct-7",
        "WS-SUB-3310",
        "stop_renewal",
    )
    .await;
    assert_eq!(status_reason(&coffee), ("blocked", Some("rate_limited")));
    assert!(coffee["why"].as_str().unwrap().contains("Too many changes"));
    let held = app
        .store
        .approvals(Some(ApprovalState::Held))
        .await
        .unwrap();
    assert_eq!(held.len(), 2);
    for id in [WINE, "WS-SUB-3304", "WS-SUB-3310"] {
        let record: Value = app.service.record(id).await;
        assert_eq!(record["status"], "active", "{id}: nothing was sent");
    }
}

/// The conversation's held change is the one withdrawn, not merely its newest hold: with one
/// change held and a newer one rejected, withdraw ends the held one; with nothing held any
/// more (decided, applied), it answers `blocked`/`not_selected` (CONTRACT.md section 7).
#[tokio::test]
async fn withdraw_ends_the_change_still_held_and_nothing_else() {
    let app = spawn_app_with(&[], |s| {
        s.consent.approval.change_types = vec!["stop_renewal".into()];
    })
    .await;
    let mut c = Chat::new("two-holds", Some("acct-7"));
    for id in ["WS-SUB-3304", "WS-SUB-3310"] {
        c.request_change(&app, id, "stop_renewal").await.unwrap();
        let outcome = c.say_yes_and_apply(&app).await;
        assert_eq!(status_reason(&outcome), ("held", Some("approval_required")));
    }
    let holds = app.store.approvals(None).await.unwrap();
    let key_of = |id: &str| {
        holds
            .iter()
            .find(|a| a.subscription == id)
            .unwrap()
            .request_key
            .clone()
    };
    let (first, newer) = (key_of("WS-SUB-3304"), key_of("WS-SUB-3310"));
    let guard = operator_guard(&app).await;
    assert!(
        guard
            .reject(&newer, "ana", "not now")
            .await
            .unwrap()
            .unwrap()
            .decided
    );
    c.user("take it back", "withdraw_change", &[]);
    let (_, body) = c.run(&app, "withdraw_subscription_change").await.unwrap();
    assert_eq!(
        status_reason(&common::outcome_of(&body)),
        ("blocked", Some("withdrawn")),
        "the held one is withdrawn, not the rejected one reported: {body}"
    );
    let state = |key: String| {
        let store = app.store.clone();
        async move { store.approval(&key).await.unwrap().unwrap().state }
    };
    assert_eq!(state(first.clone()).await, ApprovalState::Withdrawn);
    assert_eq!(state(newer.clone()).await, ApprovalState::Rejected);
    let (_, body) = c.run(&app, "withdraw_subscription_change").await.unwrap();
    assert_eq!(
        status_reason(&common::outcome_of(&body)),
        ("blocked", Some("not_selected"))
    );
    for id in ["WS-SUB-3304", "WS-SUB-3310"] {
        assert_eq!(
            app.record(id).await["status"],
            "active",
            "{id}: nothing sent"
        );
    }
}

/// A hold past its expiry is decided (`approval_expired`) even before the background sweep
/// has marked it: a rejection or a withdrawal then changes nothing and reports the expiry.
#[tokio::test]
async fn a_hold_past_its_expiry_is_neither_rejected_nor_withdrawn() {
    let app = spawn_app_with(&[], |s| {
        s.consent.approval.expiry = Duration::from_millis(300);
    })
    .await;
    let (_, mut c) = confirm(&app, "expired-unswept", "acct-21", WINE, "cancel_now").await;
    let key = app.store.approvals(None).await.unwrap()[0]
        .request_key
        .clone();
    tokio::time::sleep(Duration::from_millis(400)).await;
    // The sweep runs every 30 s: the row still says held.
    assert_eq!(
        app.store.approval(&key).await.unwrap().unwrap().state,
        ApprovalState::Held
    );
    let guard = operator_guard(&app).await;
    let late = guard
        .reject(&key, "ana", "too late")
        .await
        .unwrap()
        .unwrap();
    assert!(!late.decided, "{late:?}");
    assert_eq!(late.outcome.reason, Some(Reason::ApprovalExpired));
    c.user("take it back", "withdraw_change", &[]);
    let (_, body) = c.run(&app, "withdraw_subscription_change").await.unwrap();
    assert_eq!(
        status_reason(&common::outcome_of(&body)),
        ("blocked", Some("not_selected"))
    );
    assert_eq!(
        app.store.approval(&key).await.unwrap().unwrap().state,
        ApprovalState::Held,
        "neither a rejection nor a withdrawal was recorded"
    );
    assert_eq!(
        status_reason(&check(&app, &mut c).await),
        ("blocked", Some("approval_expired"))
    );
    assert_eq!(app.revision(WINE).await, 3, "nothing sent");
}

/// An approval given while the service cannot be read sends nothing, claims nothing and
/// spends nothing, and leaves the change held (on the console's held page, to approve
/// again, reject, withdraw or expire) rather than approved with nothing to show for it.
#[tokio::test]
async fn an_approval_the_service_cannot_answer_leaves_the_change_held() {
    let app = spawn_app_with(&["--rate-capacity", "1"], |_| {}).await;
    let (_, mut c) = confirm(&app, "approve-away", "acct-21", WINE, "cancel_now").await;
    let key = app.store.approvals(None).await.unwrap()[0]
        .request_key
        .clone();
    // An operator's process whose service is unreachable.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let away = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let unreachable = operator_guard_at(&app, &away).await;
    let decision = unreachable
        .approve(&key, "ana", None)
        .await
        .unwrap()
        .unwrap();
    assert!(decision.held && !decision.decided, "{decision:?}");
    assert_eq!(decision.outcome.reason, Some(Reason::ServiceUnavailable));
    let held = app.store.approval(&key).await.unwrap().unwrap();
    assert_eq!(held.state, ApprovalState::Held);
    assert_eq!(held.decided_by, None);
    assert!(
        app.store.operation(&key).await.unwrap().is_none(),
        "nothing claimed"
    );
    assert_eq!(app.revision(WINE).await, 3, "nothing sent");
    assert!(
        app.store
            .token_available("acct-21", 1.0, 0.0)
            .await
            .unwrap(),
        "nothing spent"
    );
    assert_eq!(
        status_reason(&check(&app, &mut c).await),
        ("held", Some("approval_required"))
    );
    // Once the service answers, the same change is approved and made, once.
    let decision = operator_guard(&app)
        .await
        .approve(&key, "ben", None)
        .await
        .unwrap()
        .unwrap();
    assert!(decision.decided && !decision.held, "{decision:?}");
    assert_eq!(decision.outcome.status, Status::Applied);
    assert_eq!(app.revision(WINE).await, 4);
}
