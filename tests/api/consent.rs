//! The consent guard over HTTP: every row of CONTRACT.md section 4, every select outcome,
//! the Style Box story and the acceptance list of the cancellation lab, each through the
//! running server and the embedded service, with the service's state checked afterwards.

use crate::common;

use common::{
    asked, assert_outcome, outcome_of, slot_in, spawn_app, spawn_app_with, Chat, ChatExt, TestApp,
    STYLE_BOX, STYLE_BOX_WHY,
};
use serde_json::{json, Value};

/// Nothing was sent: the record is where it was.
async fn assert_untouched(app: &TestApp) {
    assert_eq!(
        app.revision(STYLE_BOX).await,
        4,
        "the service must not have changed"
    );
}

#[tokio::test]
async fn a_confirmed_change_is_applied_once() {
    let app = spawn_app().await;
    let mut c = asked(&app, "happy").await;
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "applied", None);
    assert_eq!(outcome["effects"], 1);
    assert_eq!(outcome["current"]["effective"], "2027-01-01 00:00 UTC");
    let record = app.record(STYLE_BOX).await;
    assert_eq!(record["revision"], 5);
    assert_eq!(record["status"], "ending");
}

#[tokio::test]
async fn the_outcome_is_returned_as_slots_response_and_custom_payload() {
    let app = spawn_app().await;
    let mut c = asked(&app, "shape").await;
    c.user("yes", "affirm", &[]);
    let (status, body) = app.webhook(&c.request("apply_subscription_change")).await;
    assert_eq!(status, 200);
    assert_eq!(slot_in(&body, "change_status"), Some(json!("applied")));
    assert_eq!(slot_in(&body, "change_reason"), Some(Value::Null));
    let message = &body["responses"][0];
    assert_eq!(message["response"], "utter_subscription_change_applied");
    assert_eq!(message["template"], "utter_subscription_change_applied");
    assert_eq!(message["current_effective"], "2027-01-01 00:00 UTC");
    for key in [
        "text",
        "buttons",
        "elements",
        "custom",
        "template",
        "response",
        "image",
        "attachment",
    ] {
        assert!(message.get(key).is_some(), "missing {key}");
    }
}

// Row 1.
#[tokio::test]
async fn without_an_authenticated_account_the_change_is_denied() {
    let app = spawn_app().await;
    // The session's start wrote no account.
    let mut c = asked(&app, "row1").await;
    c.slots.insert("session_started_metadata".into(), json!({}));
    c.events
        .iter_mut()
        .filter(|e| e["name"] == "session_started_metadata")
        .for_each(|e| e["value"] = json!({}));
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "denied", Some("not_authenticated"));
    // The slot says something the session's start did not write (altered in transit).
    let mut c = asked(&app, "row1b").await;
    c.slots.insert(
        "session_started_metadata".into(),
        json!({"account_id": "acct-9"}),
    );
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "denied", Some("not_authenticated"));
    assert_untouched(&app).await;
}

// Row 2.
#[tokio::test]
async fn without_a_selected_change_nothing_is_applied() {
    let app = spawn_app().await;
    let mut c = Chat::new("row2", Some("acct-7"));
    c.user(
        "stop renewal of WS-SUB-3304",
        "request_change",
        &[("subscription", STYLE_BOX), ("change_type", "stop_renewal")],
    );
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("not_selected"));
    let mut c = asked(&app, "row2b").await;
    c.slots
        .insert("change_tag".into(), json!("WS-SUB-3304 stop_renewal"));
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("not_selected"));
    assert_untouched(&app).await;
}

// Row 3: memory set by the customer's entities, or altered in the slots.
#[tokio::test]
async fn change_memory_not_written_by_select_is_untrusted() {
    let app = spawn_app().await;
    // The customer's message carries entities that fill the change memory.
    let mut c = Chat::new("row3", Some("acct-7"));
    c.user(
        "stop renewal of WS-SUB-3304 r4",
        "request_change",
        &[
            ("subscription", STYLE_BOX),
            ("change_type", "stop_renewal"),
            ("change_subscription", "WS-SUB-3304 (Style Box, monthly)"),
            (
                "change_label",
                "Stop renewal at the end of the current period",
            ),
            ("change_effective", "2027-01-01 00:00 UTC"),
            (
                "change_entitlements",
                "October to December boxes ship as usual; no charge on 2027-01-01",
            ),
            ("change_tag", "WS-SUB-3304 stop_renewal r4"),
        ],
    );
    c.ask_confirmation();
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("memory_untrusted"));

    // Selected properly, then one memory slot overwritten after the select.
    let mut c = asked(&app, "row3b").await;
    c.slot("change_entitlements", json!("nothing changes"));
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("memory_untrusted"));

    // The slots say something the events never said.
    let mut c = asked(&app, "row3c").await;
    c.slots
        .insert("change_effective".into(), json!("2030-01-01 00:00 UTC"));
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("memory_untrusted"));
    assert_untouched(&app).await;
}

// Row 4.
#[tokio::test]
async fn a_request_for_another_change_does_not_apply_the_selected_one() {
    let app = spawn_app().await;
    let mut c = asked(&app, "row4").await;
    c.user(
        "actually skip the next box",
        "request_change",
        &[("change_type", "skip_next_box")],
    );
    let outcome = c.apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("target_mismatch"));
    assert_untouched(&app).await;
}

// Row 5: never asked, and a yes to an older question.
#[tokio::test]
async fn a_change_never_asked_about_is_not_applied() {
    let app = spawn_app().await;
    let mut c = Chat::new("row5", Some("acct-7"));
    c.request_change(&app, STYLE_BOX, "stop_renewal")
        .await
        .unwrap();
    // Drop the question Rasa asked: select ran, but no confirmation was sent.
    c.events.retain(|e| e["event"] != "bot");
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("not_asked"));

    // Asked about skip_next_box, then selected stop_renewal without asking: the "yes"
    // answers the older question.
    let mut c = Chat::new("row5b", Some("acct-7"));
    c.request_change(&app, STYLE_BOX, "skip_next_box")
        .await
        .unwrap();
    c.user(
        "no, stop the renewal instead",
        "request_change",
        &[("change_type", "stop_renewal")],
    );
    c.run(&app, "select_subscription_change").await.unwrap();
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("not_asked"));
    assert_untouched(&app).await;
}

// Row 6, and an unrelated "yes" before the question.
#[tokio::test]
async fn an_unanswered_question_or_an_earlier_yes_is_not_consent() {
    let app = spawn_app().await;
    let mut c = Chat::new("row6", Some("acct-7"));
    c.user("yes, I love the Style Box", "affirm", &[]);
    c.request_change(&app, STYLE_BOX, "stop_renewal")
        .await
        .unwrap();
    let outcome = c.apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("not_answered"));

    // A command that names no intent is not a reply (no confirm slot is configured).
    let mut c = asked(&app, "row6b").await;
    c.user("/SetSlots(confirm_change=true)", "", &[]);
    let outcome = c.apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("not_answered"));
    assert_untouched(&app).await;
}

// Row 7.
#[tokio::test]
async fn a_question_without_the_date_or_the_entitlements_is_not_consent() {
    let app = spawn_app().await;
    for (sender, drop) in [
        ("row7a", "2027-01-01 00:00 UTC"),
        ("row7b", "no charge on 2027-01-01"),
    ] {
        let mut c = Chat::new(sender, Some("acct-7"));
        c.request_change(&app, STYLE_BOX, "stop_renewal")
            .await
            .unwrap();
        let question = c
            .events
            .iter_mut()
            .rev()
            .find(|e| e["event"] == "bot")
            .unwrap();
        let text = question["text"].as_str().unwrap().replace(drop, "soon");
        question["text"] = json!(text);
        let outcome = c.say_yes_and_apply(&app).await;
        assert_outcome(&outcome, "blocked", Some("question_incomplete"));
    }
    assert_untouched(&app).await;
}

// Row 8.
#[tokio::test]
async fn an_expired_confirmation_is_not_consent() {
    let app = spawn_app().await;
    let mut c = asked(&app, "row8").await;
    c.wait(601.0);
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("confirmation_expired"));
    assert_untouched(&app).await;
    // Within the window it counts.
    let mut c = asked(&app, "row8b").await;
    c.wait(590.0);
    assert_outcome(&c.say_yes_and_apply(&app).await, "applied", None);
}

// Row 9: the service cannot be read; fail closed.
#[tokio::test]
async fn when_the_facts_cannot_be_read_nothing_is_sent() {
    let app = spawn_app().await;
    let mut c = asked(&app, "row9").await;
    // Point a second server at a service that is not there, with the same store.
    let dead = spawn_app_with(&["--subscriptions-url", "http://127.0.0.1:9"], |_| {}).await;
    let outcome = c.say_yes_and_apply(&dead).await;
    assert_outcome(&outcome, "blocked", Some("service_unavailable"));
    assert_untouched(&app).await;
}

// Row 10: another account's subscription; nothing about it revealed.
#[tokio::test]
async fn another_accounts_subscription_is_denied_without_revealing_it() {
    let app = spawn_app().await;
    let mut c = Chat::new("row10", Some("acct-9"));
    let body = c
        .request_change(&app, STYLE_BOX, "stop_renewal")
        .await
        .unwrap();
    // Exactly what an id that does not exist gets: nothing tells the ids apart.
    assert_outcome(&outcome_of(&body), "blocked", Some("unknown_subscription"));
    let mut made_up = Chat::new("row10-made-up", Some("acct-9"));
    let none = made_up
        .request_change(&app, "WS-SUB-0000", "stop_renewal")
        .await
        .unwrap();
    assert_eq!(body["events"], none["events"]);
    assert_eq!(body["responses"], none["responses"]);
    assert!(outcome_of(&body).get("current").is_none());
    assert_eq!(slot_in(&body, "change_tag"), Some(Value::Null));
    // Even with memory taken from acct-7's conversation and a question, apply denies.
    let mut theirs = asked(&app, "row10-owner").await;
    theirs.slots.insert(
        "session_started_metadata".into(),
        json!({"account_id": "acct-9"}),
    );
    theirs
        .events
        .iter_mut()
        .filter(|e| e["name"] == "session_started_metadata")
        .for_each(|e| {
            e["value"] = json!({"account_id": "acct-9"});
        });
    let outcome = theirs.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "denied", Some("not_owner"));
    assert!(
        outcome.get("current").is_none() && outcome.get("why").is_none(),
        "{outcome}"
    );
    assert_untouched(&app).await;
}

// Row 11, and the Style Box story.
#[tokio::test]
async fn the_style_box_story() {
    let app = spawn_app().await;
    let mut c = asked(&app, "style-box").await;
    // The October box is charged early while the chat is open.
    let moved = app.charge_october_box_early().await;
    assert_eq!(moved["revision"], 5);
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("benefit_loss_hidden"));
    assert_eq!(outcome["effects"], 0);
    assert_eq!(outcome["current"]["tag"], "WS-SUB-3304 stop_renewal r5");
    assert_eq!(outcome["current"]["effective"], "2027-01-01 00:00 UTC");
    assert_eq!(
        outcome["current"]["entitlements"],
        "October box ships 2026-10-05 (paid); no charge on 2027-01-01; no refund"
    );
    assert_eq!(outcome["why"], STYLE_BOX_WHY);
    assert_eq!(app.revision(STYLE_BOX).await, 5, "blocked: nothing changed");
    // Selected again, asked again with the new terms, yes: applied once.
    let body = c
        .request_change(&app, STYLE_BOX, "stop_renewal")
        .await
        .unwrap();
    assert_eq!(
        slot_in(&body, "change_tag"),
        Some(json!("WS-SUB-3304 stop_renewal r5"))
    );
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "applied", None);
    assert_eq!(outcome["effects"], 1);
    assert_eq!(app.revision(STYLE_BOX).await, 6);
}

#[tokio::test]
async fn a_moved_date_or_a_tag_from_an_older_revision_is_blocked() {
    let app = spawn_app().await;
    let mut c = asked(&app, "moved-date").await;
    let mut record = app.record(STYLE_BOX).await;
    record.as_object_mut().unwrap().remove("revision");
    record["options"][0]["effective_at"] = json!("2026-12-15T00:00:00Z");
    app.put_record(&record).await;
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("benefit_loss_hidden"));
    assert_eq!(outcome["current"]["effective"], "2026-12-15 00:00 UTC");
    assert_eq!(app.revision(STYLE_BOX).await, 5);

    // Same terms, but the revision moved: the tag is from an older revision.
    let app = spawn_app().await;
    let mut c = asked(&app, "old-tag").await;
    let mut record = app.record(STYLE_BOX).await;
    record.as_object_mut().unwrap().remove("revision");
    app.put_record(&record).await;
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("benefit_loss_hidden"));
    assert_eq!(app.revision(STYLE_BOX).await, 5);
}

// Row 12.
#[tokio::test]
async fn the_accounts_budget_limits_irreversible_changes() {
    let app = spawn_app_with(&["--rate-capacity", "1", "--rate-per-hour", "0"], |_| {}).await;
    let mut c = Chat::new("row12", Some("acct-7"));
    c.request_change(&app, "WS-SUB-3310", "switch_to_monthly")
        .await
        .unwrap();
    assert_outcome(&c.say_yes_and_apply(&app).await, "applied", None);
    let mut c = asked(&app, "row12b").await;
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("rate_limited"));
    assert_untouched(&app).await;
}

// Row 13: the service refuses at the last moment.
#[tokio::test]
async fn a_record_that_moves_between_comparison_and_command_is_refused_by_the_service() {
    // The command is held in flight by a second server's embedded service? No: move the
    // record through a service that answers the read with r4 and the command with 412.
    let app = spawn_app().await;
    let proxy = common_stale_proxy(&app.service_url).await;
    let racing = spawn_app_with(&["--subscriptions-url", &proxy], |_| {}).await;
    let mut c = asked(&racing, "row13").await;
    let outcome = c.say_yes_and_apply(&racing).await;
    assert_outcome(&outcome, "blocked", Some("stale_at_service"));
    assert_eq!(outcome["effects"], 0);
    assert_eq!(outcome["why"], STYLE_BOX_WHY);
    // The proxy moved the record (r5) just before forwarding the command; the command
    // changed nothing.
    assert_eq!(app.revision(STYLE_BOX).await, 5);
    assert_eq!(app.record(STYLE_BOX).await["status"], "active");
}

/// A proxy in front of the embedded service that, when a command arrives, first charges
/// the October box early through the administration route (the record moves to r5), then
/// forwards the command: the service answers 412.
async fn common_stale_proxy(upstream: &str) -> String {
    use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
    let upstream = upstream.to_owned();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = HttpServer::new(move || {
        let upstream = upstream.clone();
        App::new().default_service(web::to(move |req: HttpRequest, body: web::Bytes| {
            let upstream = upstream.clone();
            async move {
                let http = reqwest::Client::new();
                let url = format!("{upstream}{}", req.uri());
                if req.method() == actix_web::http::Method::POST {
                    let mut record: Value = http
                        .get(format!("{upstream}/v1/subscriptions/WS-SUB-3304"))
                        .send()
                        .await
                        .unwrap()
                        .json()
                        .await
                        .unwrap();
                    record.as_object_mut().unwrap().remove("revision");
                    record["options"][0]["entitlements"] = json!(
                        "October box ships 2026-10-05 (paid); no charge on 2027-01-01; no refund"
                    );
                    record["notes"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"at": "2026-09-30T08:00:00Z", "text": STYLE_BOX_WHY}));
                    http.put(format!("{upstream}/v1/subscriptions/WS-SUB-3304"))
                        .json(&record)
                        .send()
                        .await
                        .unwrap();
                }
                let mut forward = http
                    .request(req.method().as_str().parse().unwrap(), url)
                    .body(body.to_vec());
                for (k, v) in req.headers() {
                    if k != "host" && k != "content-length" {
                        forward = forward.header(k.as_str(), v.to_str().unwrap());
                    }
                }
                let answer = forward.send().await.unwrap();
                let status = answer.status().as_u16();
                let bytes = answer.bytes().await.unwrap();
                HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap())
                    .content_type("application/json")
                    .body(bytes)
            }
        }))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    tokio::spawn(server);
    format!("http://127.0.0.1:{port}")
}

#[tokio::test]
async fn a_repeated_yes_never_changes_anything_twice() {
    let app = spawn_app().await;
    let mut c = asked(&app, "repeat").await;
    c.user("yes", "affirm", &[]);
    let request = c.request("apply_subscription_change");
    let (_, first) = app.webhook(&request).await;
    let (_, second) = app.webhook(&request).await;
    assert_eq!(outcome_of(&first)["status"], "applied");
    assert_eq!(
        outcome_of(&first),
        outcome_of(&second),
        "a retry returns the first outcome"
    );
    assert_eq!(app.revision(STYLE_BOX).await, 5, "exactly one change");
    // Rasa records the action; the retried "yes" arrives again in a longer tracker.
    c.run(&app, "apply_subscription_change").await.unwrap();
    c.action("action_listen");
    let (_, third) = app.webhook(&c.request("apply_subscription_change")).await;
    assert_eq!(outcome_of(&third)["status"], "applied");
    assert_eq!(app.revision(STYLE_BOX).await, 5);
}

#[tokio::test]
async fn a_new_session_or_a_restart_drops_the_old_question() {
    let app = spawn_app().await;
    let mut c = asked(&app, "restart").await;
    c.events.push(json!({"event": "restart", "timestamp": c.t}));
    let outcome = c.say_yes_and_apply(&app).await;
    assert_ne!(outcome["status"], "applied", "{outcome}");
    let mut c = asked(&app, "new-session").await;
    c.session_start(json!({"account_id": "acct-7"}));
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("memory_untrusted"));
    // Rewinding the answer leaves the question unanswered.
    let mut c = asked(&app, "rewind").await;
    c.user("yes", "affirm", &[]);
    c.events.push(json!({"event": "rewind", "timestamp": c.t}));
    let outcome = c.apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("not_answered"));
    assert_untouched(&app).await;
}

// Select outcomes.
#[tokio::test]
async fn select_writes_the_services_terms_or_says_why_not() {
    let app = spawn_app().await;
    let mut c = Chat::new("select", Some("acct-7"));
    let body = c
        .request_change(&app, STYLE_BOX, "stop_renewal")
        .await
        .unwrap();
    assert_eq!(slot_in(&body, "change_status"), Some(json!("selected")));
    assert_eq!(
        slot_in(&body, "change_subscription"),
        Some(json!("WS-SUB-3304 (Style Box, monthly)"))
    );
    assert_eq!(
        slot_in(&body, "change_effective"),
        Some(json!("2027-01-01 00:00 UTC"))
    );
    assert_eq!(
        body["responses"],
        json!([]),
        "the question is the next step, not the action's"
    );

    for (sender, account, sub, change, status, reason) in [
        (
            "s1",
            None,
            STYLE_BOX,
            "stop_renewal",
            "denied",
            "not_authenticated",
        ),
        (
            "s2",
            Some("acct-7"),
            "WS-SUB-0000",
            "stop_renewal",
            "blocked",
            "unknown_subscription",
        ),
        (
            "s3",
            Some("acct-7"),
            STYLE_BOX,
            "upgrade_to_gold",
            "blocked",
            "change_not_offered",
        ),
        (
            "s4",
            Some("acct-9"),
            STYLE_BOX,
            "stop_renewal",
            "blocked",
            "unknown_subscription",
        ),
    ] {
        let mut c = Chat::new(sender, account);
        // A stale tag from earlier must not survive a failed select.
        c.slot("change_tag", json!("WS-SUB-3304 stop_renewal r4"));
        let body = c.request_change(&app, sub, change).await.unwrap();
        assert_eq!(
            slot_in(&body, "change_status"),
            Some(json!(status)),
            "{sender}: {body}"
        );
        assert_eq!(
            slot_in(&body, "change_reason"),
            Some(json!(reason)),
            "{sender}"
        );
        assert_eq!(slot_in(&body, "change_tag"), Some(Value::Null), "{sender}");
        assert!(
            body["responses"][0]["response"].as_str().is_some(),
            "{sender}"
        );
    }

    let dead = spawn_app_with(&["--subscriptions-url", "http://127.0.0.1:9"], |_| {}).await;
    let mut c = Chat::new("s5", Some("acct-7"));
    let body = c
        .request_change(&dead, STYLE_BOX, "stop_renewal")
        .await
        .unwrap();
    assert_eq!(
        slot_in(&body, "change_reason"),
        Some(json!("service_unavailable"))
    );
}

#[tokio::test]
async fn listing_shows_only_the_accounts_own_subscriptions() {
    let app = spawn_app().await;
    let mut c = Chat::new("list", Some("acct-7"));
    c.user("what do I have?", "list_subscriptions", &[]);
    let (status, body) = app.webhook(&c.request("list_subscriptions")).await;
    assert_eq!(status, 200);
    let list = slot_in(&body, "subscriptions").unwrap();
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["WS-SUB-3304", "WS-SUB-3310"]);
    assert_eq!(
        list[0]["change_types"],
        json!(["stop_renewal", "skip_next_box"])
    );
    assert_eq!(body["responses"][0]["response"], "utter_list_subscriptions");
    assert_eq!(body["responses"][0]["custom"]["subscriptions"], list);

    let c = Chat::new("list-anon", None);
    let (_, body) = app.webhook(&c.request("list_subscriptions")).await;
    assert_eq!(slot_in(&body, "change_status"), Some(json!("denied")));
    assert_eq!(slot_in(&body, "subscriptions"), None);
}

#[tokio::test]
async fn with_a_signing_secret_only_a_signed_account_counts() {
    let app = spawn_app_with(&["--signing-secret", "s3cret"], |_| {}).await;
    let mut c = Chat::new("unsigned", Some("acct-7"));
    let body = c
        .request_change(&app, STYLE_BOX, "stop_renewal")
        .await
        .unwrap();
    assert_eq!(slot_in(&body, "change_status"), Some(json!("denied")));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // Without exp: refused (a token good forever is no identity).
    let forever = actiongate::consent::identity::sign_hs256(&json!({"sub": "acct-7"}), b"s3cret");
    c = Chat::new("signed-forever", Some(&forever));
    let body = c
        .request_change(&app, STYLE_BOX, "stop_renewal")
        .await
        .unwrap();
    assert_eq!(
        slot_in(&body, "change_reason"),
        Some(json!("not_authenticated"))
    );
    // Bound to another conversation: refused here.
    let theirs = actiongate::consent::identity::sign_hs256(
        &json!({"sub": "acct-7", "exp": now + 600, "sid": "someone-else"}),
        b"s3cret",
    );
    c = Chat::new("signed-elsewhere", Some(&theirs));
    let body = c
        .request_change(&app, STYLE_BOX, "stop_renewal")
        .await
        .unwrap();
    assert_eq!(
        slot_in(&body, "change_reason"),
        Some(json!("not_authenticated"))
    );
    let token = actiongate::consent::identity::sign_hs256(
        &json!({"sub": "acct-7", "exp": now + 600, "sid": "signed"}),
        b"s3cret",
    );
    c = Chat::new("signed", Some(&token));
    c.request_change(&app, STYLE_BOX, "stop_renewal")
        .await
        .unwrap();
    assert_outcome(&c.say_yes_and_apply(&app).await, "applied", None);
}
