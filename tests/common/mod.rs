//! Shared test helpers: a fresh app per test (its own ports, SQLite files and embedded
//! subscription service), and a builder for trackers shaped like the ones Rasa 3.6.21
//! sends (see tests/fixtures/rasa-3.6.21/).
#![allow(dead_code)]

pub mod faults;

use std::path::PathBuf;

use clap::Parser;
use serde_json::{json, Map, Value};

use actiongate::app::{self, Settings};
use actiongate::cli::Cli;

/// A running app: the action server and its embedded subscription service.
pub struct TestApp {
    pub url: String,
    pub service_url: String,
    pub http: reqwest::Client,
    pub dir: tempfile::TempDir,
    pub handle: actix_web::dev::ServerHandle,
    pub store: actiongate::store::Store,
}

/// Settings for a test: loopback, port 0, a temp data dir, no endpoints file.
pub fn test_settings(dir: &std::path::Path, extra: &[&str]) -> Settings {
    let endpoints = dir.join("endpoints.yml");
    std::fs::write(&endpoints, "").unwrap();
    let data = dir.join("data");
    let mut args = vec![
        "actiongate".to_owned(),
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        "0".into(),
        "--embedded-service-port".into(),
        "0".into(),
        "--data-dir".into(),
        data.display().to_string(),
        "--endpoints".into(),
        endpoints.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let cli = Cli::parse_from(args);
    let mut settings = Settings::resolve(&cli.serve).unwrap();
    settings.server.handle_signals = false;
    settings.server.workers = 2;
    settings
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(&[], |_| {}).await
}

pub async fn spawn_app_with(extra: &[&str], adjust: impl FnOnce(&mut Settings)) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = test_settings(dir.path(), extra);
    adjust(&mut settings);
    spawn_settings(settings, dir).await
}

pub async fn spawn_settings(settings: Settings, dir: tempfile::TempDir) -> TestApp {
    let started = app::start(&settings).await.expect("the app starts");
    let handle = started.server.handle();
    tokio::spawn(started.server);
    let service_url = match started.embedded_port {
        Some(port) => format!("http://127.0.0.1:{port}"),
        None => settings.subscriptions_url.clone().unwrap(),
    };
    TestApp {
        url: format!("http://127.0.0.1:{}", started.port),
        service_url,
        http: reqwest::Client::new(),
        dir,
        handle,
        store: started.store,
    }
}

impl TestApp {
    /// POSTs a webhook body; returns status and JSON (Null for a non-JSON body).
    pub async fn webhook(&self, body: &Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}/webhook", self.url))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let json = response.json().await.unwrap_or(Value::Null);
        (status, json)
    }

    /// POSTs raw bytes with the given headers.
    pub async fn post_raw(
        &self,
        path: &str,
        body: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        let mut request = self.http.post(format!("{}{path}", self.url)).body(body);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let json = response.json().await.unwrap_or(Value::Null);
        (status, headers, json)
    }

    /// The record as the service holds it now.
    pub async fn record(&self, id: &str) -> Value {
        self.http
            .get(format!("{}/v1/subscriptions/{id}", self.service_url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub async fn revision(&self, id: &str) -> i64 {
        self.record(id).await["revision"].as_i64().unwrap()
    }

    /// Moves the facts mid-conversation, through the administration route.
    pub async fn put_record(&self, record: &Value) -> Value {
        let id = record["id"].as_str().unwrap();
        let response = self
            .http
            .put(format!("{}/v1/subscriptions/{id}", self.service_url))
            .json(record)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    /// The October box charged early: WS-SUB-3304 moves to r5 with new entitlements and a note.
    pub async fn charge_october_box_early(&self) -> Value {
        let mut record = self.record("WS-SUB-3304").await;
        record.as_object_mut().unwrap().remove("revision");
        record["options"][0]["entitlements"] =
            json!("October box ships 2026-10-05 (paid); no charge on 2027-01-01; no refund");
        record["notes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"at": "2026-09-30T08:00:00Z", "text": STYLE_BOX_WHY}));
        self.put_record(&record).await
    }

    pub async fn stop(&self) {
        self.handle.stop(false).await;
    }
}

pub const STYLE_BOX_WHY: &str =
    "The October Style Box was charged early, on 2026-09-30, while this chat was open.";

/// The responses file, for rendering questions as Rasa would.
pub fn confirmation_template() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("responses/subscription_change.yml");
    let doc: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    doc["responses"]["utter_confirm_subscription_change"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A conversation as Rasa 3.6 records it, built event by event.
#[derive(Clone)]
pub struct Conversation {
    pub sender: String,
    pub events: Vec<Value>,
    pub slots: Map<String, Value>,
    pub t: f64,
    pub latest_message: Value,
    n: u64,
}

fn meta() -> Value {
    json!({"model_id": "0810b3c6a21946a3bd4a4bf112e5a73f", "assistant_id": "subscription-change-probe"})
}

impl Conversation {
    /// A new session; `account` goes into session_started_metadata as the REST channel
    /// metadata would put it.
    pub fn new(sender: &str, account: Option<&str>) -> Self {
        let mut c = Self {
            sender: sender.to_owned(),
            events: Vec::new(),
            slots: Map::new(),
            t: 1_796_027_823.0,
            latest_message: json!({}),
            n: 0,
        };
        let metadata = match account {
            Some(a) => json!({"account_id": a}),
            None => json!({}),
        };
        c.session_start(metadata);
        c
    }

    fn tick(&mut self) -> f64 {
        self.t += 0.5;
        self.t
    }

    pub fn session_start(&mut self, metadata: Value) {
        let t = self.tick();
        self.events.push(json!({"event": "action", "timestamp": t, "metadata": meta(), "name": "action_session_start", "policy": null, "confidence": 1.0, "action_text": null, "hide_rule_turn": false}));
        let t = self.tick();
        self.events
            .push(json!({"event": "session_started", "timestamp": t, "metadata": meta()}));
        self.slot("session_started_metadata", metadata);
        self.action("action_listen");
    }

    pub fn action(&mut self, name: &str) {
        let t = self.tick();
        self.events.push(json!({"event": "action", "timestamp": t, "metadata": meta(), "name": name, "policy": "RulePolicy", "confidence": 1.0, "action_text": null, "hide_rule_turn": false}));
    }

    pub fn slot(&mut self, name: &str, value: Value) {
        let t = self.tick();
        self.events.push(json!({"event": "slot", "timestamp": t, "metadata": meta(), "name": name, "value": value}));
        self.slots.insert(name.to_owned(), value);
    }

    /// A customer message; entities fill the `subscription` and `change_type` slots as
    /// Rasa's slot mappings would.
    pub fn user(&mut self, text: &str, intent: &str, entities: &[(&str, &str)]) {
        let t = self.tick();
        self.n += 1;
        let message_id = format!("{:032x}", self.n * 7919 + t as u64);
        let ents: Vec<Value> = entities
            .iter()
            .map(|(e, v)| json!({"entity": e, "start": 0, "end": 1, "value": v, "extractor": "RegexEntityExtractor"}))
            .collect();
        let parse = json!({"intent": {"name": intent, "confidence": 1.0}, "entities": ents, "text": text, "message_id": message_id, "metadata": {}, "text_tokens": [[0, 3]]});
        self.events.push(json!({"event": "user", "timestamp": t, "metadata": meta(), "text": text, "parse_data": parse, "input_channel": "rest", "message_id": message_id}));
        self.latest_message = parse;
        let t = self.tick();
        self.events.push(json!({"event": "user_featurization", "timestamp": t, "use_text_for_featurization": false}));
        for (e, v) in entities {
            self.slot(e, json!(v));
        }
    }

    pub fn bot(&mut self, text: &str, utter_action: Option<&str>) {
        let t = self.tick();
        let mut metadata = meta();
        if let Some(u) = utter_action {
            metadata["utter_action"] = json!(u);
        }
        self.events.push(json!({"event": "bot", "timestamp": t, "metadata": metadata, "text": text, "data": {"elements": null, "quick_replies": null, "buttons": null, "attachment": null, "image": null, "custom": null}}));
    }

    /// Rasa runs the confirmation response: the template rendered from the slots.
    pub fn ask_confirmation(&mut self) {
        let mut text = confirmation_template();
        for (k, v) in &self.slots {
            if let Some(s) = v.as_str() {
                text = text.replace(&format!("{{{k}}}"), s);
            }
        }
        self.action("utter_confirm_subscription_change");
        self.bot(&text, Some("utter_confirm_subscription_change"));
        self.action("action_listen");
    }

    /// Advances the clock (for expiry).
    pub fn wait(&mut self, seconds: f64) {
        self.t += seconds;
    }

    /// The webhook body for `action`, as Rasa 3.6.21 sends it.
    pub fn request(&self, action: &str) -> Value {
        json!({
            "next_action": action,
            "sender_id": self.sender,
            "tracker": {
                "sender_id": self.sender,
                "slots": self.slots,
                "latest_message": self.latest_message,
                "latest_event_time": self.t,
                "followup_action": null,
                "paused": false,
                "events": self.events,
                "latest_input_channel": "rest",
                "active_loop": {},
                "latest_action": {"action_name": action},
                "latest_action_name": action,
            },
            "version": "3.6.21",
            "domain": {"version": "3.1", "intents": ["affirm"], "responses": {}, "actions": []},
        })
    }

    /// Rasa runs the action and records it: the action event, its events, and a bot event
    /// for each response (with `utter_action` stamped for named responses).
    pub async fn run(&mut self, app: &TestApp, action: &str) -> (u16, Value) {
        let (status, body) = app.webhook(&self.request(action)).await;
        if status == 200 {
            self.action(action);
            for event in body["events"].as_array().unwrap() {
                if event["event"] == "slot" {
                    self.slot(event["name"].as_str().unwrap(), event["value"].clone());
                }
            }
            for response in body["responses"].as_array().unwrap() {
                let name = response["response"].as_str();
                self.bot(&format!("(rendered {})", name.unwrap_or("text")), name);
            }
        }
        (status, body)
    }

    /// "I want to stop the renewal of WS-SUB-3304" → select → the question.
    pub async fn request_change(
        &mut self,
        app: &TestApp,
        subscription: &str,
        change_type: &str,
    ) -> Value {
        self.user(
            &format!("please {change_type} on {subscription}"),
            "request_change",
            &[("subscription", subscription), ("change_type", change_type)],
        );
        let (status, body) = self.run(app, "select_subscription_change").await;
        assert_eq!(status, 200, "{body}");
        if self.slots.get("change_status") == Some(&json!("selected")) {
            self.ask_confirmation();
        }
        body
    }

    /// The customer says yes; apply runs. Returns the outcome (the custom payload).
    pub async fn say_yes_and_apply(&mut self, app: &TestApp) -> Value {
        self.user("yes", "affirm", &[]);
        self.apply(app).await
    }

    pub async fn apply(&mut self, app: &TestApp) -> Value {
        let (status, body) = self.run(app, "apply_subscription_change").await;
        assert_eq!(status, 200, "{body}");
        outcome_of(&body)
    }
}

/// The outcome object in an action's answer.
pub fn outcome_of(body: &Value) -> Value {
    body["responses"][0]["custom"].clone()
}

/// The value of a slot event in an action's answer.
pub fn slot_in(body: &Value, name: &str) -> Option<Value> {
    body["events"]
        .as_array()?
        .iter()
        .rev()
        .find(|e| e["event"] == "slot" && e["name"] == name)
        .map(|e| e["value"].clone())
}
