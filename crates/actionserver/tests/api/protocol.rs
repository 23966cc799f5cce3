//! The webhook protocol over real HTTP, against servers of this crate on port 0 serving
//! test actions: PROTOCOL.md section 11 as far as we keep it, the deliberate differences of
//! CONTRACT.md section 0, the real Rasa 3.6.21 requests (tests/fixtures/ at the workspace's
//! root), and hostile input (after which the server keeps serving).

use std::io::Write;
use std::net::TcpListener;

use actionserver::{
    Action, ActionCall, ActionError, ActionResult, Dispatcher, Message, OutEvent, Registry,
    ServerSettings, Tracker, WebhookRequest,
};
use serde_json::{json, Value};

/// Counts the events it was given and says so in a slot (and a message).
struct CountEvents;
impl Action for CountEvents {
    fn name(&self) -> &'static str {
        "count_events"
    }
    async fn run(&self, call: ActionCall<'_>, d: &mut Dispatcher) -> ActionResult {
        d.utter(Message::response("utter_count").with_var("n", call.tracker.events.len()));
        Ok(vec![OutEvent::slot(
            "event_count",
            call.tracker.events.len(),
        )])
    }
}

/// Reads the domain: takes part in the 449 exchange.
struct DomainReader;
impl Action for DomainReader {
    fn name(&self) -> &'static str {
        "read_domain"
    }
    fn reads_domain(&self) -> bool {
        true
    }
    async fn run(&self, call: ActionCall<'_>, _: &mut Dispatcher) -> ActionResult {
        let version = call
            .domain
            .and_then(|d| d.get("version"))
            .cloned()
            .unwrap_or(Value::Null);
        Ok(vec![OutEvent::slot("domain_version", version)])
    }
}

struct Rejects;
impl Action for Rejects {
    fn name(&self) -> &'static str {
        "rejects"
    }
    async fn run(&self, _: ActionCall<'_>, _: &mut Dispatcher) -> ActionResult {
        Err(ActionError::rejected("not today"))
    }
}

struct Breaks;
impl Action for Breaks {
    fn name(&self) -> &'static str {
        "breaks"
    }
    async fn run(&self, _: ActionCall<'_>, _: &mut Dispatcher) -> ActionResult {
        Err(ActionError::failed(std::io::Error::other("secret cause")))
    }
}

struct Slow;
impl Action for Slow {
    fn name(&self) -> &'static str {
        "slow"
    }
    async fn run(&self, _: ActionCall<'_>, _: &mut Dispatcher) -> ActionResult {
        tokio::time::sleep(std::time::Duration::from_millis(700)).await;
        Ok(vec![OutEvent::slot("slow", true)])
    }
}

/// Counts its runs, for tests that must show an action did not run.
static TOUCHED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
struct Touch;
impl Action for Touch {
    fn name(&self) -> &'static str {
        "touch"
    }
    async fn run(&self, _: ActionCall<'_>, _: &mut Dispatcher) -> ActionResult {
        TOUCHED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(vec![])
    }
}

struct Server {
    url: String,
    http: reqwest::Client,
    handle: actix_web::dev::ServerHandle,
}

async fn spawn(adjust: impl FnOnce(&mut ServerSettings)) -> Server {
    testkit::install_crypto();
    let mut settings = ServerSettings {
        handle_signals: false,
        workers: 2,
        ..ServerSettings::default()
    };
    adjust(&mut settings);
    let mut registry = Registry::default();
    registry
        .register(CountEvents)
        .and_then(|r| r.register(DomainReader))
        .and_then(|r| r.register(Rejects))
        .and_then(|r| r.register(Breaks))
        .and_then(|r| r.register(Slow))
        .and_then(|r| r.register(Touch))
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let server = actionserver::serve(listener, registry, settings, None).unwrap();
    let handle = server.handle();
    tokio::spawn(server);
    Server {
        url,
        http: reqwest::Client::new(),
        handle,
    }
}

fn body(action: &str) -> Value {
    json!({"next_action": action, "sender_id": "s1", "version": "3.6.21",
           "tracker": {"sender_id": "s1", "slots": {}, "events": [{"event": "action", "name": "action_listen", "timestamp": 1.0}]}})
}

impl Server {
    async fn post(
        &self,
        path: &str,
        bytes: impl Into<reqwest::Body>,
        headers: &[(&str, &str)],
    ) -> (u16, reqwest::header::HeaderMap, String) {
        let mut request = self.http.post(format!("{}{path}", self.url)).body(bytes);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = request.send().await.unwrap();
        (
            response.status().as_u16(),
            response.headers().clone(),
            response.text().await.unwrap(),
        )
    }

    async fn webhook(&self, value: &Value) -> (u16, Value) {
        let (status, _, text) = self
            .post(
                "/webhook",
                value.to_string(),
                &[("content-type", "application/json")],
            )
            .await;
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// The server still serves a valid request.
    async fn still_serves(&self) {
        let (status, answer) = self.webhook(&body("count_events")).await;
        assert_eq!(status, 200);
        assert_eq!(answer["events"][0]["value"], 1);
    }
}

fn json_error(text: &str) -> Value {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    assert!(v["error"].is_string(), "{v}");
    assert!(v.get("action_name").is_some(), "{v}");
    v
}

#[test]
fn a_second_action_of_the_same_name_is_an_error() {
    let mut registry = Registry::default();
    registry.register(CountEvents).unwrap();
    let err = registry.register(CountEvents).map(|_| ()).unwrap_err();
    assert_eq!(err.0, "count_events");
    assert_eq!(registry.names(), ["count_events"]);
}

#[tokio::test]
async fn routes_health_actions_and_trailing_slashes() {
    let s = spawn(|_| {}).await;
    for path in ["/health", "/health/"] {
        let r = s.http.get(format!("{}{path}", s.url)).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.json::<Value>().await.unwrap(), json!({"status": "ok"}));
    }
    let r: Value = s
        .http
        .get(format!("{}/actions/", s.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r[0], json!({"name": "count_events"}));
    let (status, _, _) = s
        .post("/webhook/", body("count_events").to_string(), &[])
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_successful_answer_is_json_with_events_and_eight_key_messages() {
    let s = spawn(|_| {}).await;
    let (status, headers, text) = s
        .post(
            "/webhook",
            body("count_events").to_string(),
            &[("content-type", "text/plain")],
        )
        .await;
    assert_eq!(status, 200, "the body is JSON whatever the content type");
    assert_eq!(headers["content-type"], "application/json");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        answer["events"][0],
        json!({"event": "slot", "timestamp": null, "name": "event_count", "value": 1})
    );
    let message = answer["responses"][0].as_object().unwrap();
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
        assert!(message.contains_key(key), "{key}");
    }
    assert_eq!(message["template"], "utter_count");
    assert_eq!(message["response"], "utter_count");
    assert_eq!(message["buttons"], json!([]));
    assert_eq!(message["custom"], json!({}));
    assert!(
        text.starts_with(r#"{"events":[{"event":"slot","timestamp":null,"name":"event_count""#),
        "{text}"
    );
}

#[tokio::test]
async fn without_next_action_the_answer_is_null() {
    let s = spawn(|_| {}).await;
    for value in [
        json!({}),
        json!({"sender_id": "s"}),
        json!({"next_action": ""}),
        json!({"next_action": null}),
    ] {
        let (status, answer) = s.webhook(&value).await;
        assert_eq!((status, answer), (200, Value::Null));
    }
}

#[tokio::test]
async fn error_precedence_and_json_errors() {
    let s = spawn(|_| {}).await;
    // 404 wins over everything else, even a broken tracker.
    let (status, _, text) = s
        .post("/webhook", r#"{"next_action":"nope","tracker":5}"#, &[])
        .await;
    assert_eq!(status, 404);
    let e = json_error(&text);
    assert_eq!(e["action_name"], "nope");
    assert_eq!(e["error"], "No registered action found for name 'nope'.");
    // Missing tracker: 400 naming the action (rasa-sdk: 500).
    let (status, v) = s.webhook(&json!({"next_action": "count_events"})).await;
    assert_eq!(
        (status, v["action_name"].as_str()),
        (400, Some("count_events"))
    );
    // Missing tracker beats the missing domain.
    let (status, _) = s.webhook(&json!({"next_action": "read_domain"})).await;
    assert_eq!(status, 400);
    // The missing domain (449) beats the missing sender_id.
    let (status, v) = s
        .webhook(&json!({"next_action": "read_domain", "tracker": {"slots": {}}}))
        .await;
    assert_eq!(status, 400, "sender_id is read with the tracker: {v}");
    let (status, v) = s
        .webhook(&json!({"next_action": "read_domain", "tracker": {"sender_id": "x"}}))
        .await;
    assert_eq!(
        (status, v["action_name"].as_str()),
        (449, Some("read_domain"))
    );
    // Rejection: 400 with the action's message.
    let (status, v) = s.webhook(&body("rejects")).await;
    assert_eq!(
        (status, v),
        (400, json!({"error": "not today", "action_name": "rejects"}))
    );
    // Failure: 500 JSON, the cause never sent, the request never echoed.
    let (status, _, text) = s.post("/webhook", body("breaks").to_string(), &[]).await;
    assert_eq!(status, 500);
    assert!(
        !text.contains("secret cause") && !text.contains("tracker"),
        "{text}"
    );
    assert_eq!(json_error(&text)["action_name"], "breaks");
    s.still_serves().await;
}

#[tokio::test]
async fn wrong_methods_and_unknown_paths() {
    let s = spawn(|_| {}).await;
    let r = s
        .http
        .get(format!("{}/webhook", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "POST");
    json_error(&r.text().await.unwrap());
    let r = s
        .http
        .post(format!("{}/health", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.headers()["allow"].to_str().unwrap()),
        (405, "GET")
    );
    let r = s
        .http
        .delete(format!("{}/actions", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    let r = s
        .http
        .get(format!("{}/no/such/path", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        json_error(&r.text().await.unwrap())["action_name"],
        Value::Null
    );
    let r = s
        .http
        .request(reqwest::Method::OPTIONS, format!("{}/anything", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "OPTIONS is always answered");
}

#[tokio::test]
async fn the_domain_digest_exchange_only_for_actions_that_read_the_domain() {
    let s = spawn(|_| {}).await;
    let mut request = body("read_domain");
    request["domain_digest"] = json!("D1");
    // Rasa Pro's first try: digest only → 449.
    let (status, v) = s.webhook(&request).await;
    assert_eq!(status, 449);
    assert_eq!(v["action_name"], "read_domain");
    // The retry with the domain is served and cached under its digest.
    request["domain"] = json!({"version": "3.1", "intents": ["affirm"]});
    let (status, v) = s.webhook(&request).await;
    assert_eq!((status, &v["events"][0]["value"]), (200, &json!("3.1")));
    // Then the digest alone is enough; `domain: null` too, and `domain: {}`.
    for domain in [None, Some(Value::Null), Some(json!({}))] {
        let mut again = body("read_domain");
        again["domain_digest"] = json!("D1");
        if let Some(d) = domain {
            again["domain"] = d;
        }
        let (status, v) = s.webhook(&again).await;
        assert_eq!((status, &v["events"][0]["value"]), (200, &json!("3.1")));
    }
    // An unknown digest asks again.
    let mut other = body("read_domain");
    other["domain_digest"] = json!("D2");
    assert_eq!(s.webhook(&other).await.0, 449);
    // Actions that do not read the domain never get a 449.
    let mut count = body("count_events");
    count["domain_digest"] = json!("D9");
    assert_eq!(s.webhook(&count).await.0, 200);
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn raw_deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[tokio::test]
async fn compressed_bodies_deflate_raw_deflate_and_gzip_any_case() {
    let s = spawn(|_| {}).await;
    let plain = body("count_events").to_string().into_bytes();
    for (encoding, bytes) in [
        ("deflate", zlib(&plain)),
        ("Deflate", zlib(&plain)),
        ("deflate", raw_deflate(&plain)),
        ("gzip", gzip(&plain)),
        ("GZIP", gzip(&plain)),
    ] {
        let (status, _, text) = s
            .post("/webhook", bytes, &[("content-encoding", encoding)])
            .await;
        assert_eq!(status, 200, "{encoding}: {text}");
    }
    let (status, _, text) = s
        .post("/webhook", plain.clone(), &[("content-encoding", "br")])
        .await;
    assert_eq!(
        status, 400,
        "an encoding it cannot read is an invalid request"
    );
    json_error(&text);
}

/// A name, the body, its headers, the expected status.
type HostileCase = (
    &'static str,
    Vec<u8>,
    Vec<(&'static str, &'static str)>,
    u16,
);

#[tokio::test]
async fn hostile_input_gets_a_4xx_json_error_and_the_server_keeps_serving() {
    let s = spawn(|settings| {
        settings.limits.max_body = 64 * 1024;
        settings.limits.max_decompressed = 1024 * 1024;
    })
    .await;
    let mut nested = String::from(
        r#"{"next_action":"count_events","sender_id":"s","tracker":{"sender_id":"s","slots":{"x":"#,
    );
    nested.push_str(&"[".repeat(5000));
    nested.push_str(&"]".repeat(5000));
    nested.push_str("}}}");
    let bomb = zlib(&vec![b' '; 50 * 1024 * 1024]);
    let mut invalid_utf8 = br#"{"next_action":"count_events","tracker":{"sender_id":"s"#.to_vec();
    invalid_utf8.extend_from_slice(&[0xff, 0xfe]);
    invalid_utf8.extend_from_slice(br#""}}"#);
    let cases: Vec<HostileCase> = vec![
        ("malformed JSON", b"{\"next_action\": ".to_vec(), vec![], 400),
        ("not an object: a list", b"[1, 2]".to_vec(), vec![], 400),
        ("not an object: an empty list", b"[]".to_vec(), vec![], 400),
        ("not an object: a list of nulls", b"[null, null]".to_vec(), vec![], 400),
        ("not an object: a list naming an action", br#"["count_events", "s", {"sender_id": "s"}]"#.to_vec(), vec![], 400),
        ("not an object: a string", b"\"count_events\"".to_vec(), vec![], 400),
        ("not an object: a number", b"5".to_vec(), vec![], 400),
        ("not an object: a boolean", b" true ".to_vec(), vec![], 400),
        ("null", b"null".to_vec(), vec![], 400),
        ("empty", b"".to_vec(), vec![], 400),
        ("missing tracker", br#"{"next_action":"count_events"}"#.to_vec(), vec![], 400),
        ("missing sender_id", br#"{"next_action":"count_events","tracker":{"slots":{}}}"#.to_vec(), vec![], 400),
        ("next_action a number", br#"{"next_action":5,"tracker":{"sender_id":"s"}}"#.to_vec(), vec![], 400),
        ("sender_id a number", br#"{"next_action":"count_events","sender_id":5,"tracker":{"sender_id":"s"}}"#.to_vec(), vec![], 400),
        ("tracker a list", br#"{"next_action":"count_events","tracker":[]}"#.to_vec(), vec![], 400),
        ("tracker.sender_id a list", br#"{"next_action":"count_events","tracker":{"sender_id":[]}}"#.to_vec(), vec![], 400),
        ("slots a list", br#"{"next_action":"count_events","tracker":{"sender_id":"s","slots":[]}}"#.to_vec(), vec![], 400),
        ("events an object", br#"{"next_action":"count_events","tracker":{"sender_id":"s","events":{}}}"#.to_vec(), vec![], 400),
        ("paused a string", br#"{"next_action":"count_events","tracker":{"sender_id":"s","paused":"no"}}"#.to_vec(), vec![], 400),
        ("latest_message a number", br#"{"next_action":"count_events","tracker":{"sender_id":"s","latest_message":3}}"#.to_vec(), vec![], 400),
        ("active_loop a number", br#"{"next_action":"count_events","tracker":{"sender_id":"s","active_loop":3}}"#.to_vec(), vec![], 400),
        ("followup_action a number", br#"{"next_action":"count_events","tracker":{"sender_id":"s","followup_action":3}}"#.to_vec(), vec![], 400),
        ("latest_event_time a string", br#"{"next_action":"count_events","tracker":{"sender_id":"s","latest_event_time":"x"}}"#.to_vec(), vec![], 400),
        ("version a number", br#"{"next_action":"count_events","version":3,"tracker":{"sender_id":"s"}}"#.to_vec(), vec![], 400),
        ("domain_digest a list", br#"{"next_action":"count_events","domain_digest":[],"tracker":{"sender_id":"s"}}"#.to_vec(), vec![], 400),
        ("event timestamp a string", br#"{"next_action":"count_events","tracker":{"sender_id":"s","events":[{"event":"user","timestamp":"x"}]}}"#.to_vec(), vec![], 400),
        ("an event without event", br#"{"next_action":"count_events","tracker":{"sender_id":"s","events":[{"timestamp":1.0}]}}"#.to_vec(), vec![], 400),
        ("an event that is not an object", br#"{"next_action":"count_events","tracker":{"sender_id":"s","events":[5]}}"#.to_vec(), vec![], 400),
        ("duplicate top-level keys", br#"{"next_action":"count_events","next_action":"rejects","tracker":{"sender_id":"s"}}"#.to_vec(), vec![], 400),
        ("duplicate tracker keys", br#"{"next_action":"count_events","tracker":{"sender_id":"s","sender_id":"t"}}"#.to_vec(), vec![], 400),
        ("duplicate slots", br#"{"next_action":"count_events","tracker":{"sender_id":"s","slots":{"a":1,"a":2}}}"#.to_vec(), vec![], 400),
        ("duplicate event kinds", br#"{"next_action":"count_events","tracker":{"sender_id":"s","events":[{"event":"user","event":"bot"}]}}"#.to_vec(), vec![], 400),
        ("mismatched senders", br#"{"next_action":"count_events","sender_id":"a","tracker":{"sender_id":"b"}}"#.to_vec(), vec![], 400),
        ("deeply nested arrays", nested.into_bytes(), vec![], 400),
        ("invalid UTF-8", invalid_utf8, vec![], 400),
        ("trailing data", br#"{"next_action":"count_events","tracker":{"sender_id":"s"}} x"#.to_vec(), vec![], 400),
        ("over the body limit", vec![b' '; 65 * 1024], vec![], 413),
        ("a deflate bomb", bomb, vec![("content-encoding", "deflate")], 413),
        ("broken deflate", b"\x78\x9cgarbage".to_vec(), vec![("content-encoding", "deflate")], 400),
        ("gzip header, not gzip", b"plain".to_vec(), vec![("content-encoding", "gzip")], 400),
    ];
    for (name, bytes, headers, expected) in cases {
        let (status, _, text) = s.post("/webhook", bytes, &headers).await;
        assert_eq!(status, expected, "{name}: {text}");
        let error = json_error(&text);
        if expected == 400 && name.contains("tracker") && !name.contains("list") {
            assert_eq!(error["action_name"], "count_events", "{name}");
        }
        if name.starts_with("not an object") {
            // Only an object names an action, even a list whose first item is one.
            assert_eq!(error["action_name"], Value::Null, "{name}");
            let message = error["error"].as_str().unwrap();
            assert!(
                message.contains("must be a JSON object"),
                "{name}: {message}"
            );
        }
        s.still_serves().await;
    }
}

#[tokio::test]
async fn authentication_by_rasa_token_parameter_or_bearer() {
    let s = spawn(|settings| settings.auth_token = Some("t0ken".into())).await;
    let (status, _, text) = s
        .post("/webhook", body("count_events").to_string(), &[])
        .await;
    assert_eq!(status, 401);
    json_error(&text);
    assert_eq!(
        s.post(
            "/webhook?token=wrong",
            body("count_events").to_string(),
            &[]
        )
        .await
        .0,
        401
    );
    assert_eq!(
        s.post(
            "/webhook?token=t0ken",
            body("count_events").to_string(),
            &[]
        )
        .await
        .0,
        200
    );
    // The scheme's name in any letter case; another scheme, or the wrong token, is refused.
    for (value, status) in [
        ("Bearer t0ken", 200),
        ("bearer t0ken", 200),
        ("BEARER t0ken", 200),
        ("Basic t0ken", 401),
        ("Bearer t0ke", 401),
        ("Bearert0ken", 401),
    ] {
        let bearer = [("authorization", value)];
        assert_eq!(
            s.post("/webhook", body("count_events").to_string(), &bearer)
                .await
                .0,
            status,
            "{value}"
        );
    }
    let r = s
        .http
        .get(format!("{}/actions", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = s
        .http
        .get(format!("{}/actions?token=t0ken", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = s
        .http
        .get(format!("{}/health", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "/health stays open");
    let named = spawn(|settings| {
        settings.auth_token = Some("t0ken".into());
        settings.token_name = "key".into();
    })
    .await;
    assert_eq!(
        named
            .post("/webhook?key=t0ken", body("count_events").to_string(), &[])
            .await
            .0,
        200
    );
    assert_eq!(
        named
            .post(
                "/webhook?token=t0ken",
                body("count_events").to_string(),
                &[]
            )
            .await
            .0,
        401
    );
}

#[tokio::test]
async fn cors_follows_rasa_sdks_matching_rules() {
    let s = spawn(|settings| {
        settings.cors = actionserver::CorsPolicy::new(&["https://*.corp.example".into()]).unwrap()
    })
    .await;
    let get = |origin: &'static str| {
        let http = s.http.clone();
        let url = format!("{}/health", s.url);
        async move { http.get(url).header("origin", origin).send().await.unwrap() }
    };
    let r = get("https://app.corp.example").await;
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://app.corp.example"
    );
    assert_eq!(r.headers()["vary"], "Origin");
    let r = get("https://x.corp.example.attacker.example").await;
    assert!(r.headers().get("access-control-allow-origin").is_none());
    let r = s
        .http
        .request(reqwest::Method::OPTIONS, format!("{}/webhook", s.url))
        .header("origin", "https://app.corp.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "X-Foo, content-type")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["access-control-allow-methods"],
        "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"
    );
    assert_eq!(
        r.headers()["access-control-allow-headers"],
        "X-Foo, content-type"
    );
}

#[tokio::test]
async fn metrics_count_requests_and_latency() {
    let s = spawn(|_| {}).await;
    s.still_serves().await;
    // Names the server doesn't have share one label: a caller can't grow the metrics.
    for name in ["nope", "nope-1", "nope-2"] {
        s.webhook(&body(name)).await;
    }
    let text = s
        .http
        .get(format!("{}/metrics", s.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains(
            r#"actiongate_requests_total{route="/webhook",action="count_events",status="200"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"actiongate_requests_total{route="/webhook",action="<unknown>",status="404"} 3"#
        ),
        "{text}"
    );
    assert!(!text.contains("nope"), "{text}");
    assert!(
        text.contains(r#"actiongate_request_duration_seconds_count{route="/webhook"} 4"#),
        "{text}"
    );
}

#[tokio::test]
async fn shutdown_lets_in_flight_requests_finish_and_refuses_new_ones() {
    let s = spawn(|settings| settings.shutdown_timeout = 5).await;
    let http = s.http.clone();
    let url = format!("{}/webhook", s.url);
    let in_flight = tokio::spawn(async move {
        http.post(url)
            .body(body("slow").to_string())
            .send()
            .await
            .unwrap()
            .status()
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let stopping = tokio::spawn({
        let handle = s.handle.clone();
        async move { handle.stop(true).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let fresh = reqwest::Client::new()
        .get(format!("{}/health", s.url))
        .send()
        .await;
    assert!(fresh.is_err(), "new connections are refused while stopping");
    assert_eq!(
        in_flight.await.unwrap(),
        200,
        "the in-flight request finished"
    );
    stopping.await.unwrap();
}

#[test]
fn the_real_rasa_requests_parse_and_serialise_back_without_loss() {
    for name in ["select_request.json", "apply_request.json"] {
        let path = format!(
            "{}/../../tests/fixtures/rasa-3.6.21/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(path).unwrap();
        let request: WebhookRequest = serde_json::from_str(&text).unwrap();
        let original: Value = serde_json::from_str(&text).unwrap();
        let tracker = request.tracker.as_ref().unwrap();
        assert_eq!(tracker.sender_id, "probe-user-1");
        let back: Value = serde_json::to_value(tracker).unwrap();
        assert_eq!(
            back, original["tracker"],
            "{name}: the tracker serialises back unchanged"
        );
        // Every event parses into its typed form.
        for event in &tracker.events {
            let typed = event.typed().unwrap();
            assert!(
                !matches!(typed, actionserver::Event::Other(_)),
                "{}",
                event.name()
            );
        }
        assert_eq!(
            tracker.slots.get_str("change_tag"),
            original["tracker"]["slots"]["change_tag"].as_str()
        );
    }
    let text = std::fs::read_to_string(format!(
        "{}/../../tests/fixtures/rasa-3.6.21/apply_request.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let apply: WebhookRequest = serde_json::from_str(&text).unwrap();
    let tracker: &Tracker = apply.tracker.as_ref().unwrap();
    assert_eq!(tracker.latest_intent(), Some("affirm"));
    assert_eq!(tracker.latest_input_channel().as_deref(), Some("rest"));
}

#[tokio::test]
async fn a_tracker_of_ten_thousand_events_is_served() {
    let s = spawn(|_| {}).await;
    let mut c = testkit::Chat::new("big", Some("acct-7"));
    while c.events.len() < 10_000 {
        c.user("tell me more", "chitchat", &[]);
        c.action("utter_chitchat");
        c.bot("Sure, here is more.", Some("utter_chitchat"));
        c.action("action_listen");
    }
    c.events.truncate(10_000);
    let (status, answer) = s.webhook(&c.request("count_events")).await;
    assert_eq!(status, 200);
    assert_eq!(answer["events"][0]["value"], 10_000);
}

/// A body padded to about `size` bytes with a key the server ignores.
fn padded(size: usize) -> String {
    let mut value = body("count_events");
    value["padding"] = json!(" ".repeat(size));
    value.to_string()
}

/// Posts a padded body of about `size` bytes, gzipped or not; its status and text.
async fn post_padded(s: &Server, size: usize, gzipped: bool) -> (u16, String) {
    let plain = padded(size);
    let (status, _, text) = if gzipped {
        s.post(
            "/webhook",
            gzip(plain.as_bytes()),
            &[
                ("content-type", "application/json"),
                ("content-encoding", "gzip"),
            ],
        )
        .await
    } else {
        s.post("/webhook", plain, &[("content-type", "application/json")])
            .await
    };
    (status, text)
}

#[tokio::test]
async fn bodies_past_the_budget_get_503_and_the_budget_comes_back() {
    use tokio::io::AsyncWriteExt;
    let s = spawn(|settings| {
        settings.limits.max_body = 1024 * 1024;
        settings.body_budget = 1024 * 1024;
    })
    .await;
    // A client sends 900 KB of a 950 KB body and stalls: the server holds room for what
    // arrived (never for what is only declared).
    let addr = s.url.trim_start_matches("http://").to_owned();
    let mut stalled = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stalled
        .write_all(b"POST /webhook HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 950000\r\n\r\n")
        .await
        .unwrap();
    stalled.write_all(&vec![b' '; 900_000]).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // Another 300 KB does not fit beside it: 503, a JSON error, nothing run.
    let (status, text) = post_padded(&s, 300_000, false).await;
    assert_eq!(status, 503, "{text}");
    assert!(json_error(&text)["error"]
        .as_str()
        .unwrap()
        .contains("as many request bodies as it may"));
    // A gzip body that would inflate past the room left is refused the same way, while
    // decompressing, long before its own limit.
    let (status, text) = post_padded(&s, 600_000, true).await;
    assert_eq!(status, 503, "{text}");
    json_error(&text);
    // Small requests still fit, and are served.
    s.still_serves().await;
    // When the stalled request goes away, its room comes back.
    drop(stalled);
    let mut served = false;
    for _ in 0..50 {
        if post_padded(&s, 300_000, false).await.0 == 200 {
            served = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        served,
        "the room held by the dropped request never came back"
    );
    assert_eq!(post_padded(&s, 600_000, true).await.0, 200);
}

/// A length that is only declared holds nothing: idle uploads that declare 64 MiB and send
/// nothing do not take the budget from the requests that do arrive (issue 24).
#[tokio::test]
async fn a_declared_length_that_never_comes_holds_no_budget() {
    use tokio::io::AsyncWriteExt;
    let s = spawn(|settings| {
        settings.body_budget = 128 * 1024 * 1024;
    })
    .await;
    let addr = s.url.trim_start_matches("http://").to_owned();
    let mut idle = Vec::new();
    for _ in 0..4 {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        stream
            .write_all(b"POST /webhook HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 67108864\r\n\r\n")
            .await
            .unwrap();
        idle.push(stream);
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let (status, text) = post_padded(&s, 300_000, false).await;
    assert_eq!(status, 200, "{text}");
    drop(idle);
}

/// A body past the first 64 KiB is given its declared length at once: one sent in small
/// pieces, and one sent whole, arrive intact.
#[tokio::test]
async fn a_large_body_in_small_pieces_arrives_whole() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = spawn(|_| {}).await;
    let addr = s.url.trim_start_matches("http://").to_owned();
    let mut c = testkit::Chat::new("pieces", Some("acct-7"));
    while c.events.len() < 2_000 {
        c.user("tell me more", "chitchat", &[]);
        c.action("action_listen");
    }
    let body = serde_json::to_vec(&c.request("count_events")).unwrap();
    assert!(body.len() > 200_000, "{} bytes", body.len());
    for piece in [8 * 1024, body.len()] {
        let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST /webhook HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        for part in body.chunks(piece) {
            stream.write_all(part).await.unwrap();
            stream.flush().await.unwrap();
            tokio::task::yield_now().await;
        }
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{piece}: {answer}");
        let json: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(json["events"][0]["value"], c.events.len(), "{piece}");
    }
}

/// A body trickled below the minimum rate, after the grace, is cut off with 408 and a JSON
/// error; nothing runs, and the server keeps serving.
#[tokio::test]
async fn a_body_trickled_below_the_minimum_rate_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = spawn(|settings| {
        settings.limits.grace = std::time::Duration::from_millis(300);
        settings.limits.min_rate = 1000;
    })
    .await;
    let addr = s.url.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(b"POST /webhook HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{")
        .await
        .unwrap();
    let trickle = async {
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            if stream.write_all(b" ").await.is_err() {
                break;
            }
        }
    };
    let mut answer = Vec::new();
    tokio::select! {
        () = trickle => {}
        () = tokio::time::sleep(std::time::Duration::from_secs(10)) => panic!("never cut off"),
    }
    let _ = stream.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("arrived too slowly"), "{text}");
    s.still_serves().await;
}

/// A connection from `from` (any loopback address) to `addr`.
async fn connect_from(from: &str, addr: &str) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(addr.parse().unwrap()).await.unwrap()
}

/// What a `GET /health` on `stream` gets: the status line, or `None` when the server
/// closes the connection without an answer.
async fn health_on(mut stream: tokio::net::TcpStream) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = stream
        .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await;
    let mut answer = Vec::new();
    // A reset reads as an error: the answer is what arrived before it, if anything.
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.read_to_end(&mut answer),
    )
    .await
    .expect("the server neither answered nor closed");
    let text = String::from_utf8_lossy(&answer);
    text.lines().next().map(str::to_owned)
}

/// One address may hold only so many connections (issue 24): one more is closed as it
/// opens, unanswered, while another address is served; when one closes, its place returns.
#[tokio::test]
async fn connections_from_one_address_are_capped() {
    let s = spawn(|settings| settings.max_connections_per_peer = 4).await;
    let addr = s.url.trim_start_matches("http://").to_owned();
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(connect_from("127.0.0.1", &addr).await);
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let fifth = connect_from("127.0.0.1", &addr).await;
    assert_eq!(
        health_on(fifth).await,
        None,
        "a fifth connection was answered"
    );
    // A call sent with the connection, before the server shut it, is refused unrun.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let call = body("touch").to_string();
        let mut sixth = connect_from("127.0.0.1", &addr).await;
        let _ = sixth
            .write_all(
                format!(
                    "POST /webhook HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{call}",
                    call.len()
                )
                .as_bytes(),
            )
            .await;
        let mut answer = Vec::new();
        let _ = sixth.read_to_end(&mut answer).await;
        assert_eq!(
            TOUCHED.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "an action ran on a connection over the cap"
        );
    }
    let other = connect_from("127.0.0.2", &addr).await;
    assert_eq!(health_on(other).await.as_deref(), Some("HTTP/1.1 200 OK"));
    held.pop();
    let mut served = false;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        if health_on(connect_from("127.0.0.1", &addr).await)
            .await
            .is_some()
        {
            served = true;
            break;
        }
    }
    assert!(served, "the closed connection's place never came back");
    drop(held);
}

/// [`actionserver::paced_bodies`] on a listener of one's own: a body trickled below its pace
/// gets the listener's own 408 and the connection closed; a body that keeps pace is read.
#[tokio::test]
async fn paced_bodies_cut_off_a_trickle_on_any_listener() {
    use actix_web::{web, App, HttpResponse, HttpServer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    testkit::install_crypto();
    let pace = web::Data::new(actionserver::Pace {
        grace: std::time::Duration::from_millis(300),
        min_rate: 1000,
        answer: || HttpResponse::RequestTimeout().body("too slow for this listener"),
    });
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(pace.clone())
            .wrap(actix_web::middleware::from_fn(actionserver::paced_bodies))
            .route(
                "/",
                web::post().to(|body: web::Bytes| async move { format!("{} bytes", body.len()) }),
            )
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    let handle = server.handle();
    tokio::spawn(server);

    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\nx")
        .await
        .unwrap();
    let trickle = async {
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            if stream.write_all(b"x").await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        () = trickle => {}
        () = tokio::time::sleep(std::time::Duration::from_secs(10)) => panic!("never cut off"),
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 408"), "{text}");
    assert!(text.contains("connection: close"), "{text}");
    assert!(text.contains("too slow for this listener"), "{text}");

    let answer = reqwest::Client::new()
        .post(format!("http://{addr}/"))
        .body(vec![b'y'; 5000])
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.text().await.unwrap(), "5000 bytes");
    handle.stop(false).await;
}

/// `GET /ready` (issue 27): open as `/health` is; 200 while the application's check passes,
/// 503 with its reason when it fails, and 503 from the moment the server drains; `/health`
/// answers 200 throughout.
#[tokio::test]
async fn ready_follows_the_applications_check_and_the_drain() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    testkit::install_crypto();
    let server = actionserver::ActionServer::new(
        Registry::default(),
        ServerSettings {
            handle_signals: false,
            workers: 1,
            auth_token: Some("s3cret".into()),
            ..ServerSettings::default()
        },
    );
    let healthy = Arc::new(AtomicBool::new(true));
    let flag = healthy.clone();
    server.set_readiness(move || {
        let ok = flag.load(Ordering::SeqCst);
        Box::pin(async move {
            if ok {
                Ok(())
            } else {
                Err("the store cannot be reached".to_owned())
            }
        })
    });
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let running = server.http(listener, None).unwrap();
    let handle = running.handle();
    tokio::spawn(running);
    let get = |path: &'static str| {
        let url = url.clone();
        async move {
            let answer = reqwest::get(format!("{url}{path}")).await.unwrap();
            let status = answer.status().as_u16();
            (status, answer.json::<Value>().await.unwrap())
        }
    };
    assert_eq!(get("/ready").await, (200, json!({"status": "ready"})));
    // An answer is reused for up to a second: each change is read after that.
    let reused = std::time::Duration::from_millis(1100);
    healthy.store(false, Ordering::SeqCst);
    tokio::time::sleep(reused).await;
    assert_eq!(
        get("/ready").await,
        (
            503,
            json!({"status": "not_ready", "reason": "the store cannot be reached"})
        )
    );
    healthy.store(true, Ordering::SeqCst);
    tokio::time::sleep(reused).await;
    assert_eq!(get("/ready/").await.0, 200);
    server.drain();
    assert_eq!(
        get("/ready").await,
        (
            503,
            json!({"status": "not_ready", "reason": "the server is stopping"})
        )
    );
    assert_eq!(get("/health").await.0, 200);
    handle.stop(false).await;
}
