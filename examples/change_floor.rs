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
//! lock, statements run on the caller's thread), the service is called through hyper's
//! pooled client with one client per worker thread, as `ServiceClient` does.
//!
//! With `--store actiongate` the two commits are actiongate's own store instead
//! (`actiongate::store::Store` on `DIR/actiongate.db`, its schema and statements): per
//! change the read before the claim (the key, the subscription's open operation and a held
//! change under the key, in one query), the claim and the budget's token in one
//! transaction, the outcome, and two audit entries (select's and apply's, through the
//! batched writer), as actiongate makes them for a new change. That row is the floor of
//! actiongate's store promises (the open operation per subscription, the budget, the
//! operations by sender, the audit trail) with still nothing of the guard.
//!
//! Usage: change_floor --service URL --data-dir DIR [--port PORT] [--workers N]
//! [--store bare|actiongate] (loopback only; PORT 0 or absent picks a free port, printed on
//! stdout as `listening on 127.0.0.1:PORT`; `GET /health` answers 200 once it listens; N
//! worker threads, by default one per core, as `actiongate serve --workers`; the store
//! `bare` by default).

use std::cell::OnceCell;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use actiongate::store::Store;
use actix_web::{web, App, HttpResponse, HttpServer};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use serde_json::{json, Value};

#[path = "shared/new_change.rs"]
mod new_change;
use new_change::{
    audit_entry, claim, commit_one, open_bare, record_outcome, BARE_CLAIM, BARE_OUTCOME,
};

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
    /// actiongate's store, with `--store actiongate`: then `db` is not written.
    store: Option<Store>,
}

type Http = hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>;

thread_local! {
    static HTTP: OnceCell<Http> = const { OnceCell::new() };
}

/// This thread's client of the service (plain HTTP here).
fn http() -> Http {
    HTTP.with(|cell| {
        cell.get_or_init(|| {
            let mut tcp = HttpConnector::new();
            tcp.set_nodelay(true);
            hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(tcp)
        })
        .clone()
    })
}

/// One call to the service: its status and its answer's JSON.
async fn call(request: http::Request<Full<Bytes>>) -> Result<(u16, Value), String> {
    let response = http().request(request).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    let json = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    Ok((status, json))
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
    let request = http::Request::get(url)
        .body(Full::default())
        .map_err(|e| e.to_string())?;
    let (_, record) = call(request).await?;
    record["revision"]
        .as_i64()
        .ok_or_else(|| "a record without a revision".to_owned())
}

async fn webhook(state: web::Data<State>, body: Bytes) -> HttpResponse {
    let request: Request = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return refuse(e),
    };
    let slots = request.tracker.slots;
    let (Some(subscription), Some(change_type)) = (slots.subscription, slots.change_type) else {
        return refuse("no subscription or change named");
    };
    let result = match request.next_action.as_str() {
        "select_subscription_change" => select(&state, &request.sender_id, &subscription).await,
        "apply_subscription_change" => {
            let tag = slots.change_tag.as_deref();
            apply(&state, &request.sender_id, &subscription, &change_type, tag).await
        }
        other => Err(format!("no action {other}")),
    };
    result.unwrap_or_else(refuse)
}

async fn select(state: &State, sender: &str, subscription: &str) -> Result<HttpResponse, String> {
    let revision = revision(state, subscription).await?;
    if let Some(store) = &state.store {
        store
            .audit(audit_entry(
                "select_subscription_change",
                sender,
                subscription,
                "selected",
                None,
            ))
            .await
            .map_err(|e| e.to_string())?;
    }
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
    if let Some(store) = &state.store {
        claim(store, &key, sender, subscription, change_type, selected).await?;
    } else {
        state.write(
            BARE_CLAIM,
            rusqlite::params![key, sender, subscription, change_type, selected],
        )?;
    }
    let url = format!("{}/v1/subscriptions/{subscription}/changes", state.service);
    let request = http::Request::post(url)
        .header("if-match", format!("\"r{selected}\""))
        .header("idempotency-key", &key)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(
            json!({"change_type": change_type}).to_string(),
        )))
        .map_err(|e| e.to_string())?;
    let (status, outcome) = call(request).await?;
    let made = status == 201;
    let status = if made { "applied" } else { "failed" };
    if let Some(store) = &state.store {
        record_outcome(store, &key, sender, subscription, selected, made).await?;
    } else {
        state.write(
            BARE_OUTCOME,
            rusqlite::params![key, status, outcome.to_string()],
        )?;
    }
    Ok(answer(json!([slot("change_status", status)])))
}

impl State {
    /// One statement in its own transaction, committed before it returns.
    fn write(&self, sql: &str, params: impl rusqlite::Params) -> Result<(), String> {
        let mut db = self.db.lock().unwrap();
        commit_one(&mut db, sql, params).map_err(|e| e.to_string())
    }
}

fn main() -> std::io::Result<()> {
    let (mut service, mut dir, mut port, mut workers) = (None, None, 0u16, 0usize);
    let mut actiongate_store = false;
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
            "--store" => {
                actiongate_store = match value.as_str() {
                    "actiongate" => true,
                    "bare" => false,
                    other => panic!("--store bare|actiongate, not {other}"),
                }
            }
            other => panic!("unknown flag {other}"),
        }
    }
    let dir = dir.expect("--data-dir");
    let service = service.expect("--service");
    actix_web::rt::System::new().block_on(async move {
        // The store's audit writer runs on this thread, as actiongate's does.
        let store = match actiongate_store {
            true => Some(
                Store::connect(&format!("sqlite:{dir}/actiongate.db"))
                    .await
                    .expect("actiongate's store opens"),
            ),
            false => None,
        };
        let state = web::Data::from(Arc::new(State {
            db: Mutex::new(open_bare(&dir).expect("the floor's database opens")),
            service,
            store,
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
        server.listen(listener)?.run().await
    })
}
