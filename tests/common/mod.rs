//! Shared test helpers: a fresh app per test (its own ports, SQLite files and embedded
//! subscription service), and a builder for trackers shaped like the ones Rasa 3.6.21
//! sends (see tests/fixtures/rasa-3.6.21/).
#![allow(dead_code)]

pub mod faults;

use clap::Parser;
use serde_json::{json, Value};

use actiongate::app::{self, Settings};
use actiongate::cli::Cli;
#[allow(unused_imports)] // each test binary uses its own part
pub use actiongate::eval::script::{outcome_of, slot_in, Conversation, Endpoint, Webhook};

/// A running app: the action server and its embedded subscription service.
pub struct TestApp {
    pub url: String,
    pub endpoint: Endpoint,
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
    let url = format!("http://127.0.0.1:{}", started.port);
    TestApp {
        endpoint: Endpoint::new(&url),
        url,
        service_url,
        http: reqwest::Client::new(),
        dir,
        handle,
        store: started.store,
    }
}

impl Webhook for TestApp {
    fn endpoint(&self) -> &Endpoint {
        &self.endpoint
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

pub const STYLE_BOX: &str = "WS-SUB-3304";

/// A conversation of acct-7 that selected stop_renewal on the Style Box (r4) and was asked.
pub async fn asked(app: &TestApp, sender: &str) -> Conversation {
    let mut c = Conversation::new(sender, Some("acct-7"));
    let body = c
        .request_change(app, STYLE_BOX, "stop_renewal")
        .await
        .unwrap();
    assert_eq!(
        slot_in(&body, "change_tag"),
        Some(json!("WS-SUB-3304 stop_renewal r4")),
        "{body}"
    );
    c
}

pub fn assert_outcome(outcome: &Value, status: &str, reason: Option<&str>) {
    assert_eq!(outcome["status"], status, "{outcome}");
    assert_eq!(outcome["reason"], json!(reason), "{outcome}");
}

/// The record's revision and status at the service are these.
pub async fn assert_record(app: &TestApp, id: &str, revision: i64, status: &str) {
    let record = app.record(id).await;
    assert_eq!(
        (record["revision"].as_i64(), record["status"].as_str()),
        (Some(revision), Some(status)),
        "{id} at the service"
    );
}

/// Rewrites the text of the latest bot message (the question, after `asked`).
pub fn reword_question(c: &mut Conversation, reword: impl FnOnce(&str) -> String) {
    let question = c
        .events
        .iter_mut()
        .rev()
        .find(|e| e["event"] == "bot")
        .expect("a question was asked");
    let text = reword(question["text"].as_str().unwrap_or_default());
    question["text"] = json!(text);
}

pub const STYLE_BOX_WHY: &str =
    "The October Style Box was charged early, on 2026-09-30, while this chat was open.";

/// What the tests add to the library's conversation builder.
pub trait ConversationExt {
    /// The customer says yes; apply runs. Returns the outcome (the custom payload).
    async fn say_yes_and_apply(&mut self, app: &TestApp) -> Value;
    /// Apply runs; returns the outcome.
    async fn apply(&mut self, app: &TestApp) -> Value;
}

impl ConversationExt for Conversation {
    async fn say_yes_and_apply(&mut self, app: &TestApp) -> Value {
        self.user("yes", "affirm", &[]);
        self.apply(app).await
    }

    async fn apply(&mut self, app: &TestApp) -> Value {
        let (status, body) = self.run(app, "apply_subscription_change").await.unwrap();
        assert_eq!(status, 200, "{body}");
        outcome_of(&body)
    }
}
