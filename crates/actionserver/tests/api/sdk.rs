//! The SDK's additions as a user meets them: validation actions run with the test kit,
//! every event constructor against rasa-sdk's key order, shared state, the per-action time
//! budget and the application's routes and middleware over real HTTP.

#[path = "../../examples/validation.rs"]
mod validation;

use std::time::Duration;

use actionserver::testing::{run, run_with, Conversation, Utterance};
use actionserver::{
    Action, ActionCall, ActionResult, ActionServer, Button, Dispatcher, HttpExtras, Message,
    OutEvent, Registry, ServerSettings, ValidateForm,
};
use serde_json::{json, Value};

fn domain() -> Value {
    let form_slot = |form: &str| json!({"type": "any", "mappings": [{"type": "from_text", "conditions": [{"active_loop": form}]}]});
    json!({
        "slots": {"cuisine": form_slot("restaurant_form"), "num_people": form_slot("restaurant_form"),
                  "vegetarian": form_slot("booking_form"), "requested_slot": form_slot("booking_form")},
        "forms": {"restaurant_form": {"required_slots": ["cuisine", "num_people", "outdoor_seating"]},
                  "booking_form": {"required_slots": ["cuisine", "num_people"]}},
        "responses": {"utter_wrong_cuisine": [{"text": "We don't serve that."}]},
    })
}

fn form_chat(slots: &[(&str, Value)], text: &str) -> Conversation {
    let mut chat = Conversation::new("ada");
    chat.with_domain(domain()).session_start();
    chat.loop_active(Some("restaurant_form"));
    chat.user(Utterance::new(text).intent("inform"));
    for (name, value) in slots {
        chat.slot(name, value.clone());
    }
    chat
}

#[tokio::test]
async fn a_form_validates_its_candidates_and_refuses_with_a_response() {
    let form = ValidateForm::new("validate_restaurant_form", validation::Restaurant);
    let chat = form_chat(
        &[("cuisine", json!("Thai")), ("num_people", json!("4"))],
        "thai for 4",
    );
    let ran = run(&form, &chat).await.unwrap();
    assert_eq!(
        ran.slots(),
        [("cuisine", &json!("thai")), ("num_people", &json!(4))]
    );
    assert!(ran.messages.is_empty());

    let chat = form_chat(
        &[("cuisine", json!("haggis")), ("num_people", json!("four"))],
        "x",
    );
    let ran = run(&form, &chat).await.unwrap();
    assert_eq!(
        ran.slots(),
        [("cuisine", &Value::Null), ("num_people", &Value::Null)]
    );
    assert_eq!(ran.responses(), ["utter_wrong_cuisine"]);
    assert_eq!(ran.texts(), ["How many people, as a number?"]);
    // The candidate that is not the form's is dropped; no override, no requested_slot.
    let chat = form_chat(
        &[("phone", json!("555")), ("cuisine", json!("indian"))],
        "x",
    );
    let ran = run(&form, &chat).await.unwrap();
    assert_eq!(ran.slots(), [("cuisine", &json!("indian"))]);
}

#[tokio::test]
async fn an_overridden_form_asks_for_the_next_slot_itself() {
    let form = ValidateForm::new("validate_booking_form", validation::Booking);
    let chat = form_chat(&[("cuisine", json!("Indian"))], "indian");
    let ran = run(&form, &chat).await.unwrap();
    assert_eq!(
        ran.slots(),
        [
            ("cuisine", &json!("indian")),
            ("requested_slot", &json!("num_people"))
        ]
    );
    // All filled: requested_slot null ends the form.
    let mut chat = form_chat(&[("num_people", json!(2))], "veg is fine");
    chat.slot("cuisine", "indian").slot("vegetarian", "Yes");
    let ran = run(&form, &chat).await.unwrap();
    assert_eq!(ran.slot("vegetarian"), Some(&json!(true)));
    assert_eq!(ran.slot("requested_slot"), Some(&Value::Null));
    // Thai: the required slots are the domain's, so Rasa's form asks, not the action.
    let chat = form_chat(&[("cuisine", json!("thai"))], "thai");
    let ran = run(&form, &chat).await.unwrap();
    assert_eq!(ran.slots(), [("cuisine", &json!("thai"))]);
}

#[tokio::test]
async fn global_slots_are_extracted_then_validated() {
    let action = actionserver::ValidateSlotMappings(validation::Contact);
    let global = json!({"type": "text", "mappings": [{"type": "from_text"}]});
    let mut chat = Conversation::new("ada");
    chat.with_domain(json!({"slots": {"email": global, "phone": global, "nickname": global}}))
        .session_start()
        .user(Utterance::new("mail me at Ada@Example.com").intent("inform"))
        .slot("nickname", "ace")
        .slot("phone", "555-12");
    let ran = run(&action, &chat).await.unwrap();
    assert_eq!(
        ran.slots(),
        [
            ("nickname", &json!("ace")),
            ("phone", &Value::Null),
            ("email", &json!("ada@example.com"))
        ]
    );
    assert_eq!(ran.texts(), ["That phone number looks too short."]);
}

#[test]
fn every_event_is_written_as_rasa_sdk_writes_it() {
    let at = time::macros::datetime!(2026-12-02 10:00 UTC);
    let cases = [
        (
            OutEvent::slot("a", 1),
            r#"{"event":"slot","timestamp":null,"name":"a","value":1}"#,
        ),
        (
            OutEvent::restarted(),
            r#"{"event":"restart","timestamp":null}"#,
        ),
        (
            OutEvent::session_started(),
            r#"{"event":"session_started","timestamp":null}"#,
        ),
        (
            OutEvent::session_ended(Some(json!({"why": "done"}))),
            r#"{"event":"session_ended","timestamp":null,"metadata":{"why":"done"}}"#,
        ),
        (
            OutEvent::user_utterance_reverted(),
            r#"{"event":"rewind","timestamp":null}"#,
        ),
        (
            OutEvent::all_slots_reset(),
            r#"{"event":"reset_slots","timestamp":null}"#,
        ),
        (
            OutEvent::action_reverted(),
            r#"{"event":"undo","timestamp":null}"#,
        ),
        (
            OutEvent::story_exported(),
            r#"{"event":"export","timestamp":null}"#,
        ),
        (
            OutEvent::conversation_paused(),
            r#"{"event":"pause","timestamp":null}"#,
        ),
        (
            OutEvent::conversation_resumed(),
            r#"{"event":"resume","timestamp":null}"#,
        ),
        (
            OutEvent::followup("action_x"),
            r#"{"event":"followup","timestamp":null,"name":"action_x"}"#,
        ),
        (
            OutEvent::user_uttered(Some("hi".into()), None, Some("rest".into())),
            r#"{"event":"user","timestamp":null,"text":"hi","parse_data":null,"input_channel":"rest"}"#,
        ),
        (
            OutEvent::bot_uttered(Some("hey".into()), None, None),
            r#"{"event":"bot","timestamp":null,"text":"hey","data":null,"metadata":null}"#,
        ),
        (
            OutEvent::reminder("EXTERNAL_x", at)
                .with_entities(json!([{"entity": "e", "value": "v"}])),
            r#"{"event":"reminder","timestamp":null,"intent":"EXTERNAL_x","entities":[{"entity":"e","value":"v"}],"date_time":"2026-12-02T10:00:00+00:00","name":null,"kill_on_user_msg":true}"#,
        ),
        (
            OutEvent::cancel_reminder("r1"),
            r#"{"event":"cancel_reminder","timestamp":null,"intent":null,"entities":null,"name":"r1"}"#,
        ),
        (
            OutEvent::cancel_reminders_of("EXTERNAL_x", None),
            r#"{"event":"cancel_reminder","timestamp":null,"intent":"EXTERNAL_x","entities":null,"name":null}"#,
        ),
        (
            OutEvent::action_executed("action_x", Some("RulePolicy".into()), Some(1.0)),
            r#"{"event":"action","name":"action_x","policy":"RulePolicy","confidence":1.0,"timestamp":null}"#,
        ),
        (
            OutEvent::action_execution_rejected("action_x", None, None),
            r#"{"event":"action_execution_rejected","name":"action_x","policy":null,"confidence":null,"timestamp":null}"#,
        ),
        (
            OutEvent::agent_uttered(Some("a".into()), None),
            r#"{"event":"agent","text":"a","data":null,"timestamp":null}"#,
        ),
        (
            OutEvent::active_loop(Some("f".into())),
            r#"{"event":"active_loop","name":"f","timestamp":null}"#,
        ),
        (
            OutEvent::active_loop(None),
            r#"{"event":"active_loop","name":null,"timestamp":null}"#,
        ),
        (
            OutEvent::loop_interrupted(true),
            r#"{"event":"loop_interrupted","is_interrupted":true,"timestamp":null}"#,
        ),
        (
            OutEvent::slot("a", 1).at(2.5),
            r#"{"event":"slot","timestamp":2.5,"name":"a","value":1}"#,
        ),
    ];
    for (event, expected) in cases {
        assert_eq!(serde_json::to_string(&event).unwrap(), expected);
    }
}

#[test]
fn messages_carry_buttons_quick_replies_images_and_attachments() {
    let message = Message::text("Which plan?")
        .with_buttons([Button::new("Basic", "/choose{\"plan\": \"basic\"}")])
        .with_quick_replies([Button::new("No", "/deny")])
        .with_image("https://example.com/plan.png")
        .with_attachment("https://example.com/terms.pdf")
        .with_element(json!({"title": "card"}));
    assert_eq!(
        serde_json::to_value(&message).unwrap(),
        json!({"text": "Which plan?", "buttons": [{"title": "Basic", "payload": "/choose{\"plan\": \"basic\"}"}],
               "elements": [{"title": "card"}], "custom": {}, "template": null, "response": null,
               "image": "https://example.com/plan.png", "attachment": "https://example.com/terms.pdf",
               "quick_replies": [{"title": "No", "payload": "/deny"}]})
    );
    let entities = serde_json::from_value(json!({"plan": "pro"})).unwrap();
    assert_eq!(
        serde_json::to_value(
            Message::custom(json!({"x": 1}))
                .with_button(Button::intent("Pro", "choose", &entities))
        )
        .unwrap()["buttons"],
        json!([{"title": "Pro", "payload": "/choose{\"plan\":\"pro\"}"}])
    );
}

#[test]
fn the_tracker_answers_for_metadata_stack_user_id_and_the_last_event() {
    let mut chat = Conversation::new("ada");
    chat.session_start()
        .user(
            Utterance::new("hi")
                .intent("greet")
                .metadata(json!({"locale": "de"}))
                .entity_json(json!({"entity": "who", "value": "me", "role": "self"})),
        )
        .action("action_greet")
        .action("action_listen");
    let mut body = chat.request("action_x");
    body["tracker"]["stack"] = json!([{"type": "flow", "flow_id": "transfer"}]);
    body["tracker"]["user_id"] = json!("u-7");
    let text = body.to_string();
    let request = actionserver::WebhookRequest::parse(text.as_bytes())
        .unwrap()
        .unwrap();
    let tracker = request.tracker.unwrap();
    assert_eq!(
        tracker.latest_message_metadata(),
        Some(json!({"locale": "de"}))
    );
    assert_eq!(tracker.stack()[0]["flow_id"], "transfer");
    assert_eq!(tracker.user_id(), Some("u-7"));
    assert!(tracker.last_executed_action_has("action_greet", 0));
    assert!(tracker.last_executed_action_has("action_session_start", 1));
    assert_eq!(
        tracker.last_event_for("user", &[], 0).map(|e| e.name()),
        Some("user")
    );
    assert_eq!(tracker.intent_of_latest_message(true), Some("greet"));
    // As rasa-sdk: no role asked means no role.
    assert_eq!(tracker.latest_entity_values("who", None, None).count(), 0);
    assert_eq!(
        tracker
            .latest_entity_values("who", Some("self"), None)
            .count(),
        1
    );
}

/// Waits, then answers; its time budget is 50 ms, and it answers for itself when it is out.
struct Slow(Duration);

impl Action for Slow {
    fn name(&self) -> &'static str {
        "action_slow"
    }

    fn time_budget(&self) -> Option<Duration> {
        Some(Duration::from_millis(50))
    }

    fn timed_out(&self, dispatcher: &mut Dispatcher) -> ActionResult {
        dispatcher.utter(Message::text("Still looking; I'll get back to you."));
        Ok(vec![OutEvent::slot("pending", true)])
    }

    async fn run(&self, _call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
        dispatcher.utter(Message::text("sent before the budget ran out"));
        tokio::time::sleep(self.0).await;
        Ok(vec![OutEvent::slot("done", true)])
    }
}

/// Reads the shared greeting.
struct Greeting;

struct Greet(&'static str);

impl Action for Greeting {
    fn name(&self) -> &'static str {
        "action_greeting"
    }

    async fn run(&self, call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
        let greeting = call.state::<Greet>().map_or("(none)", |g| g.0);
        dispatcher.utter(Message::text(greeting));
        Ok(vec![])
    }
}

/// Never answers: only the server-wide budget stops it.
struct Stuck;

impl Action for Stuck {
    fn name(&self) -> &'static str {
        "action_stuck"
    }

    async fn run(&self, _call: ActionCall<'_>, _dispatcher: &mut Dispatcher) -> ActionResult {
        std::future::pending().await
    }
}

#[tokio::test]
async fn state_budgets_routes_and_middleware_over_http() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut registry = Registry::default();
    registry
        .register(Slow(Duration::from_secs(30)))
        .and_then(|r| r.register(Greeting))
        .and_then(|r| r.register(Stuck))
        .unwrap()
        .share(Greet("Grüezi"));
    let settings = ServerSettings {
        handle_signals: false,
        workers: 1,
        action_time_budget: Some(Duration::from_millis(100)),
        ..ServerSettings::default()
    };
    let extras = HttpExtras::default()
        .routes(|cfg| {
            cfg.route("/version", actix_web::web::get().to(|| async { "1.2.3" }));
        })
        .middleware(|req, next| async move {
            let refused = req.headers().contains_key("x-block");
            if refused {
                let res = actix_web::HttpResponse::Forbidden().finish();
                return Ok(req.into_response(res));
            }
            let mut res = next.call(req).await?;
            res.headers_mut().insert(
                actix_web::http::header::HeaderName::from_static("x-served-by"),
                actix_web::http::header::HeaderValue::from_static("actionserver"),
            );
            Ok(res)
        });
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let server = ActionServer::new(registry.clone(), settings)
        .http_with(listener, None, extras)
        .unwrap();
    let handle = server.handle();
    tokio::spawn(server);
    let http = reqwest::Client::new();
    let call = |action: &str| {
        let mut chat = Conversation::new("ada");
        chat.session_start().user_says("hi", "greet");
        http.post(format!("{url}/webhook"))
            .json(&chat.request(action))
            .send()
    };

    // The shared state reaches the action.
    let answer: Value = call("action_greeting").await.unwrap().json().await.unwrap();
    assert_eq!(answer["responses"][0]["text"], "Grüezi");
    // The action's own budget (50 ms) answers for it, in time, with its own words; what
    // it sent before is dropped.
    let started = std::time::Instant::now();
    let response = call("action_slow").await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(started.elapsed() < Duration::from_secs(5));
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["responses"].as_array().unwrap().len(), 1);
    assert_eq!(
        answer["responses"][0]["text"],
        "Still looking; I'll get back to you."
    );
    assert_eq!(
        answer["events"],
        json!([{"event": "slot", "timestamp": null, "name": "pending", "value": true}])
    );
    // The server's budget (100 ms), and the default answer: a JSON 500 naming the action.
    let response = call("action_stuck").await.unwrap();
    assert_eq!(response.status(), 500);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["action_name"], "action_stuck");
    assert_eq!(
        answer["error"],
        "the action ran past its time budget of 100 ms"
    );

    // The application's route, and its middleware around it and the webhook.
    let response = http.get(format!("{url}/version")).send().await.unwrap();
    assert_eq!(response.headers()["x-served-by"], "actionserver");
    assert_eq!(response.text().await.unwrap(), "1.2.3");
    let response = call("action_greeting").await.unwrap();
    assert_eq!(response.headers()["x-served-by"], "actionserver");
    let blocked = http
        .get(format!("{url}/health"))
        .header("x-block", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(blocked.status(), 403);
    // The server's own 404 still answers for the rest.
    let missing = http.get(format!("{url}/nothing")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(missing.json::<Value>().await.unwrap()["error"], "not found");

    // The test kit holds the action's budget too.
    let ran = run(&Slow(Duration::from_secs(30)), &chat_for_kit())
        .await
        .unwrap();
    assert_eq!(ran.texts(), ["Still looking; I'll get back to you."]);
    let ran = run(&Slow(Duration::ZERO), &chat_for_kit()).await.unwrap();
    assert_eq!(ran.slot("done"), Some(&json!(true)));
    // The test kit hands the same state to an action.
    let mut chat = Conversation::new("ada");
    chat.session_start();
    let ran = run_with(&Greeting, &chat, registry.state()).await.unwrap();
    assert_eq!(ran.texts(), ["Grüezi"]);
    handle.stop(false).await;
}

fn chat_for_kit() -> Conversation {
    let mut chat = Conversation::new("ada");
    chat.session_start();
    chat
}

#[path = "../../examples/http_api.rs"]
mod http_api;

/// The HTTP API example against a real HTTP server standing in for the shop: a known
/// order, an unknown one, and an id that would leave the path.
#[tokio::test]
async fn the_http_api_example_asks_the_shop() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let shop = actix_web::HttpServer::new(|| {
        actix_web::App::new().route(
            "/orders/{id}",
            actix_web::web::get().to(|id: actix_web::web::Path<String>| async move {
                match id.as_str() {
                    "A-1" => actix_web::HttpResponse::Ok().json(json!({"status": "shipped"})),
                    _ => actix_web::HttpResponse::NotFound().finish(),
                }
            }),
        )
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    let handle = shop.handle();
    tokio::spawn(shop);
    let mut registry = Registry::default();
    registry
        .register(http_api::OrderStatus)
        .unwrap()
        .share(http_api::Shop {
            base,
            http: reqwest::Client::new(),
        });
    let ask = |order: Option<&str>| {
        let mut chat = Conversation::new("ada");
        chat.session_start()
            .user_says("where is my order?", "order_status");
        if let Some(order) = order {
            chat.slot("order_id", order);
        }
        chat
    };
    let ran = run_with(&http_api::OrderStatus, &ask(Some("A-1")), registry.state())
        .await
        .unwrap();
    assert_eq!(ran.texts(), ["Order A-1 is shipped."]);
    assert_eq!(ran.slot("order_status"), Some(&json!("shipped")));
    let ran = run_with(
        &http_api::OrderStatus,
        &ask(Some("../admin")),
        registry.state(),
    )
    .await
    .unwrap();
    assert_eq!(ran.texts(), ["I can't find order ../admin."]);
    assert_eq!(ran.slot("order_id"), Some(&Value::Null));
    let ran = run_with(&http_api::OrderStatus, &ask(None), registry.state())
        .await
        .unwrap();
    assert_eq!(ran.responses(), ["utter_ask_order_id"]);
    handle.stop(false).await;
}
