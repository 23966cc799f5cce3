//! The new-change path's floor, for bench/new_changes.sh: a bare server that makes the
//! calls and the durable writes a new change needs and nothing else, so
//! `apply_load` can drive it exactly as it drives `actiongate serve`.
//!
//! - `select_subscription_change`: the request's JSON checked (serde_json, every value
//!   skipped but three slots), the record read from the service, an answer of slots (the
//!   memory, as actiongate keeps it in the tracker; its revision in `change_tag`).
//! - `apply_subscription_change`: the JSON checked likewise, the revision read back from
//!   the slots, the record read again and its revision compared, the operation claimed
//!   (one transaction, committed before the command), the command sent with `If-Match` and
//!   an `Idempotency-Key`, its outcome written (one transaction, before the answer), an
//!   answer of slots.
//!
//! What it leaves out is what actiongate adds on top: the conversation's reading (the
//! latest question, the reply, the plain-yes check), the terms' comparison, the templates,
//! the audit, the budget, the hold rules, metrics, and every refusal path. SQLite is opened
//! as actiongate's store opens it (WAL, `synchronous = NORMAL`, one connection behind one
//! lock, statements run on the caller's thread), the service is called through reqwest with
//! one client per worker thread, as `ServiceClient` does.
//!
//! Usage: change_floor --service URL --data-dir DIR [--port PORT] [--workers N] (loopback
//! only; PORT 0 or absent picks a free port, printed on stdout as `listening on
//! 127.0.0.1:PORT`; `GET /health` answers 200 once it listens; N worker threads, by default
//! one per core, as `actiongate serve --workers`).

use std::cell::OnceCell;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use actix_web::{web, App, HttpResponse, HttpServer};
use serde::Deserialize;
use serde_json::{json, Value};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What is read of a webhook body; serde_json checks and skips everything else.
#[derive(Deserialize)]
struct Request {
    next_action: String,
    sender_id: String,
    tracker: Tracker,
}

#[derive(Deserialize)]
struct Tracker {
    slots: Slots,
}

#[derive(Deserialize)]
struct Slots {
    subscription: Option<String>,
    change_type: Option<String>,
    /// The revision select read, as actiongate keeps it: in the tracker's slots.
    change_tag: Option<String>,
}

struct State {
    db: Mutex<rusqlite::Connection>,
    service: String,
}

thread_local! {
    static HTTP: OnceCell<reqwest::Client> = const { OnceCell::new() };
}

fn http() -> reqwest::Client {
    HTTP.with(|cell| cell.get_or_init(reqwest::Client::new).clone())
}

fn answer(events: Value) -> HttpResponse {
    HttpResponse::Ok().json(json!({"events": events, "responses": []}))
}

fn refuse(why: impl std::fmt::Display) -> HttpResponse {
    HttpResponse::BadRequest().json(json!({"error": why.to_string(), "action_name": null}))
}

fn slot(name: &str, value: impl Into<Value>) -> Value {
    json!({"event": "slot", "timestamp": null, "name": name, "value": value.into()})
}

/// The record's revision as the service gives it now.
async fn revision(state: &State, subscription: &str) -> Result<i64, String> {
    let url = format!("{}/v1/subscriptions/{subscription}", state.service);
    let response = http().get(url).send().await.map_err(|e| e.to_string())?;
    let record: Value = response.json().await.map_err(|e| e.to_string())?;
    record["revision"]
        .as_i64()
        .ok_or_else(|| "a record without a revision".to_owned())
}

async fn webhook(state: web::Data<State>, body: web::Bytes) -> HttpResponse {
    let request: Request = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return refuse(e),
    };
    let slots = request.tracker.slots;
    let (Some(subscription), Some(change_type)) = (slots.subscription, slots.change_type) else {
        return refuse("no subscription or change named");
    };
    let result = match request.next_action.as_str() {
        "select_subscription_change" => select(&state, &subscription).await,
        "apply_subscription_change" => {
            let tag = slots.change_tag.as_deref();
            apply(&state, &request.sender_id, &subscription, &change_type, tag).await
        }
        other => Err(format!("no action {other}")),
    };
    result.unwrap_or_else(refuse)
}

async fn select(state: &State, subscription: &str) -> Result<HttpResponse, String> {
    let revision = revision(state, subscription).await?;
    Ok(answer(json!([
        slot("change_status", "selected"),
        slot("change_subscription", subscription),
        slot("change_tag", format!("r{revision}")),
    ])))
}

async fn apply(
    state: &State,
    sender: &str,
    subscription: &str,
    change_type: &str,
    tag: Option<&str>,
) -> Result<HttpResponse, String> {
    let selected: i64 = tag
        .and_then(|t| t.strip_prefix('r')?.parse().ok())
        .ok_or("nothing selected")?;
    if revision(state, subscription).await? != selected {
        return Ok(answer(json!([slot("change_status", "blocked")])));
    }
    let key = format!("{sender}:{subscription}:{change_type}:r{selected}");
    state.write(
        "INSERT INTO operations (request_key, sender_id, subscription, change_type, revision, state) \
         VALUES (?1, ?2, ?3, ?4, ?5, 'sent')",
        rusqlite::params![key, sender, subscription, change_type, selected],
    )?;
    let url = format!("{}/v1/subscriptions/{subscription}/changes", state.service);
    let response = http()
        .post(url)
        .header("if-match", format!("\"r{selected}\""))
        .header("idempotency-key", &key)
        .json(&json!({"change_type": change_type}))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let made = response.status().as_u16() == 201;
    let outcome: Value = response.json().await.map_err(|e| e.to_string())?;
    let status = if made { "applied" } else { "failed" };
    state.write(
        "UPDATE operations SET state = ?2, outcome = ?3 WHERE request_key = ?1",
        rusqlite::params![key, status, outcome.to_string()],
    )?;
    Ok(answer(json!([slot("change_status", status)])))
}

impl State {
    /// One statement in its own transaction, committed before it returns.
    fn write(&self, sql: &str, params: impl rusqlite::Params) -> Result<(), String> {
        let mut db = self.db.lock().unwrap();
        let tx = db.transaction().map_err(|e| e.to_string())?;
        tx.prepare_cached(sql)
            .and_then(|mut s| s.execute(params))
            .map_err(|e| e.to_string())?;
        tx.commit().map_err(|e| e.to_string())
    }
}

fn open(dir: &str) -> rusqlite::Connection {
    std::fs::create_dir_all(dir).expect("the data directory");
    let conn = rusqlite::Connection::open(format!("{dir}/floor.db")).expect("SQLite opens");
    conn.pragma_update(None, "journal_mode", "WAL")
        .expect("WAL");
    conn.pragma_update(None, "synchronous", "NORMAL")
        .expect("synchronous");
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS operations (request_key TEXT PRIMARY KEY, sender_id TEXT NOT NULL, \
           subscription TEXT NOT NULL, change_type TEXT NOT NULL, revision INTEGER NOT NULL, \
           state TEXT NOT NULL, outcome TEXT);",
    )
    .expect("the tables");
    conn
}

fn main() -> std::io::Result<()> {
    let (mut service, mut dir, mut port, mut workers) = (None, None, 0u16, 0usize);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--service" => service = Some(value.trim_end_matches('/').to_owned()),
            "--data-dir" => dir = Some(value),
            "--port" => port = value.parse().expect("--port"),
            "--workers" => workers = value.parse().expect("--workers"),
            other => panic!("unknown flag {other}"),
        }
    }
    // reqwest is built without a default TLS provider; the service is plain HTTP here, but
    // a client is not built without one.
    actiongate::telemetry::install_crypto();
    let state = web::Data::from(Arc::new(State {
        db: Mutex::new(open(&dir.expect("--data-dir"))),
        service: service.expect("--service"),
    }));
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    println!("listening on {}", listener.local_addr()?);
    let mut server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(web::PayloadConfig::new(1 << 20))
            .route("/webhook", web::post().to(webhook))
            .route("/health", web::get().to(HttpResponse::Ok))
    });
    if workers > 0 {
        server = server.workers(workers);
    }
    actix_web::rt::System::new().block_on(server.listen(listener)?.run())
}
