//! The embedded subscription service: a real HTTP implementation of the service's
//! contract (CONTRACT.md section 6), with its records in SQLite so they survive a
//! restart. `actiongate serve` runs it in-process unless a service URL is given;
//! `actiongate subscription-service` runs it alone.

use std::net::TcpListener;
use std::time::Duration;

use actix_web::dev::Server;
use actix_web::http::{header, StatusCode};
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use rusqlite::OptionalExtension;
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

mod faults;
mod outbox;
mod records;

use crate::model::{Change, Note, Subscription};
use faults::inject_faults;
pub use faults::Faults;
pub use outbox::{DeliveryFaults, EventDelivery};
use records::{load, open, release_key, save, Db};

/// The demo records shipped with the project (`data/demo_subscriptions.json`).
pub const DEMO_DATA: &str = include_str!("../../../../data/demo_subscriptions.json");

/// How the embedded service is set up.
#[derive(Debug, Clone)]
pub struct ServiceSettings {
    /// The SQLite file holding the records (created when missing).
    pub database: std::path::PathBuf,
    /// Records to load when the database is empty (JSON array of subscriptions).
    pub seed: Option<String>,
    /// When set, every request must carry `Authorization: Bearer` with this token.
    pub token: Option<String>,
    /// How long a command stays in flight before it is checked and applied (demos of retries
    /// and time-outs; zero in normal use).
    pub command_delay: Duration,
    /// Injected misbehaviour, for soak and fault tests; none by default.
    pub faults: Faults,
    /// Where change events are delivered; none by default (then none are written).
    pub events: Option<EventDelivery>,
    /// Connections open at once from one address ([`PER_PEER`] unless a test bounds it
    /// lower to see the bound reached).
    pub per_peer: usize,
}

/// Connections open at once from one address. The service's one peer is normally the
/// action server itself (every replica behind one address, say), whose calls time out and
/// retry while slow ones still hold their connections here: well above what it opens,
/// and still a bound on what a stranger can hold.
pub const PER_PEER: usize = 4096;

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceStartError {
    #[error("the service's database could not be opened: {0}")]
    Database(#[from] rusqlite::Error),
    #[error("the seed data is invalid: {0}")]
    Seed(#[from] serde_json::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

struct State {
    db: std::sync::Arc<Db>,
    token: Option<String>,
    command_delay: Duration,
    faults: Faults,
    dice: std::sync::atomic::AtomicU64,
    /// Set when events are delivered: every change and `PUT` writes one to the outbox, and
    /// the delivery task is woken after the commit.
    events: Option<std::sync::Arc<tokio::sync::Notify>>,
    /// Each record as last read or written, serialised once, so a read is a lookup.
    cache: RecordCache,
}

/// Records by id with their JSON and revision. Only ever moved forward (a newer revision
/// replaces an older one, never the other way), so a read racing a write cannot leave an
/// old record behind; every write updates it right after its commit.
#[derive(Default)]
struct RecordCache {
    records: std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<Cached>>>,
}

struct Cached {
    revision: i64,
    body: web::Bytes,
}

impl RecordCache {
    fn get(&self, id: &str) -> Option<std::sync::Arc<Cached>> {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        records.get(id).cloned()
    }

    fn put(&self, record: &Subscription) -> std::sync::Arc<Cached> {
        let fresh = std::sync::Arc::new(Cached {
            revision: record.revision,
            body: serde_json::to_vec(record)
                .expect("a record serialises")
                .into(),
        });
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        match records.get(&record.id) {
            Some(known) if known.revision >= fresh.revision => known.clone(),
            _ => {
                records.insert(record.id.clone(), fresh.clone());
                fresh
            }
        }
    }
}

/// Starts the service on a bound listener.
pub async fn serve(
    listener: TcpListener,
    settings: ServiceSettings,
) -> Result<Server, ServiceStartError> {
    let db = std::sync::Arc::new(open(&settings)?);
    let events = settings.events.clone().map(|delivery| {
        let wake = std::sync::Arc::new(tokio::sync::Notify::new());
        let dice = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0x2545_F491_4F6C_DD1D));
        tokio::spawn(outbox::deliver(db.clone(), delivery, wake.clone(), dice));
        wake
    });
    let state = web::Data::new(State {
        db,
        token: settings.token.clone(),
        command_delay: settings.command_delay,
        faults: settings.faults,
        dice: std::sync::atomic::AtomicU64::new(0x9E37_79B9_7F4A_7C15),
        events,
        cache: RecordCache::default(),
    });
    let peers = actionserver::PeerLimit::new("subscription service", settings.per_peer);
    let pace = web::Data::new(actionserver::Pace::new(|| {
        error(
            StatusCode::REQUEST_TIMEOUT,
            "too_slow",
            "the request arrived too slowly",
        )
    }));
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(pace.clone())
            .wrap(actix_web::middleware::from_fn(actionserver::paced_bodies))
            .wrap(actix_web::middleware::from_fn(
                actionserver::refuse_over_cap,
            ))
            .wrap(actix_web::middleware::from_fn(inject_faults))
            .app_data(web::JsonConfig::default().error_handler(|err, _| {
                let message = err.to_string();
                actix_web::error::InternalError::from_response(
                    err,
                    error(StatusCode::BAD_REQUEST, "invalid_body", &message),
                )
                .into()
            }))
            .route("/v1/accounts/{account}/subscriptions", web::get().to(list))
            .route("/v1/subscriptions/{id}", web::get().to(get))
            .route("/v1/subscriptions/{id}", web::put().to(put))
            .route("/v1/subscriptions/{id}/changes", web::post().to(change))
            .route("/v1/changes/{key}", web::get().to(get_change))
            .default_service(web::to(|| async {
                error(StatusCode::NOT_FOUND, "not_found", "no such route")
            }))
    })
    .workers(2)
    .disable_signals()
    .on_connect(peers.on_connect())
    .listen(listener)?
    .run();
    Ok(server)
}

fn error(status: StatusCode, code: &str, message: &str) -> HttpResponse {
    HttpResponse::build(status).json(json!({"error": code, "message": message}))
}

fn internal(e: rusqlite::Error) -> HttpResponse {
    tracing::error!(error = %e, "the embedded service's database failed");
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "the service's database failed",
    )
}

impl State {
    fn authorized(&self, req: &HttpRequest) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        req.headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| {
                use subtle::ConstantTimeEq;
                let a: [u8; 32] = Sha256::digest(given.as_bytes()).into();
                let b: [u8; 32] = Sha256::digest(token.as_bytes()).into();
                bool::from(a.ct_eq(&b))
            })
    }
}

macro_rules! authorize {
    ($state:expr, $req:expr) => {
        if !$state.authorized(&$req) {
            return error(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "a valid token is required",
            );
        }
    };
}

async fn list(
    req: HttpRequest,
    state: web::Data<State>,
    account: web::Path<String>,
) -> HttpResponse {
    authorize!(state, req);
    match state.db.with(|db| records::list(db, &account)) {
        Ok(records) => HttpResponse::Ok().json(records),
        Err(e) => internal(e),
    }
}

fn with_etag(record: &Subscription, status: StatusCode) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header((header::ETAG, format!("\"r{}\"", record.revision)))
        .json(record)
}

async fn get(req: HttpRequest, state: web::Data<State>, id: web::Path<String>) -> HttpResponse {
    authorize!(state, req);
    let cached = match state.cache.get(&id) {
        Some(cached) => cached,
        None => match state.db.with(|db| load(db, &id)) {
            Ok(Some(record)) => state.cache.put(&record),
            Ok(None) => {
                return error(
                    StatusCode::NOT_FOUND,
                    "unknown_subscription",
                    "no such subscription",
                )
            }
            Err(e) => return internal(e),
        },
    };
    HttpResponse::Ok()
        .insert_header((header::ETAG, format!("\"r{}\"", cached.revision)))
        .content_type("application/json")
        .body(cached.body.clone())
}

/// The administration route: create or replace a record; the service sets the revision.
async fn put(
    req: HttpRequest,
    state: web::Data<State>,
    id: web::Path<String>,
    body: web::Json<Subscription>,
) -> HttpResponse {
    authorize!(state, req);
    let mut record = body.into_inner();
    if record.id != *id {
        return error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "id_mismatch",
            "the body's id is not the path's",
        );
    }
    let result = state.db.transaction(|tx| {
        let revision = load(tx, &id)?.map_or(1, |old| old.revision + 1);
        record.revision = revision;
        for note in &mut record.notes {
            if note.revision == 0 {
                note.revision = revision;
            }
        }
        save(tx, &record)?;
        if state.events.is_some() {
            outbox::write(tx, &record, None)?;
        }
        Ok(record)
    });
    if let Some(wake) = &state.events {
        wake.notify_one();
    }
    if let Ok(record) = &result {
        state.cache.put(record);
    }
    match result {
        Ok(record) => with_etag(&record, StatusCode::OK),
        Err(e) => internal(e),
    }
}

#[derive(Deserialize)]
struct ChangeRequest {
    change_type: String,
}

/// `POST /v1/subscriptions/{id}/changes`: If-Match and Idempotency-Key required.
async fn change(
    req: HttpRequest,
    state: web::Data<State>,
    id: web::Path<String>,
    body: web::Json<ChangeRequest>,
) -> HttpResponse {
    authorize!(state, req);
    let header_str = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let (Some(if_match), Some(key)) = (header_str("if-match"), header_str("idempotency-key"))
    else {
        return error(
            StatusCode::PRECONDITION_REQUIRED,
            "precondition_required",
            "If-Match and Idempotency-Key are required",
        );
    };
    let body_hash = hex::encode(Sha256::digest(format!("{}\n{}", *id, body.change_type)));
    let change_type = body.change_type.as_str();
    match begin_change(&state.db, &id, &key, &body_hash, &if_match, change_type) {
        Ok(Begin::Proceed) => {}
        Ok(Begin::Answer(response)) => return response,
        Err(e) => return internal(e),
    }
    // The delay sits between the claim and the one step that checks and applies, so
    // whatever moves the record meanwhile is seen by that step.
    if !state.command_delay.is_zero() {
        tokio::time::sleep(state.command_delay).await;
    }
    let events = state.events.is_some();
    match finish_change(&state.db, &id, &key, &if_match, change_type, events) {
        Ok(Finish::Made((change, record))) => {
            state.cache.put(&record);
            if let Some(wake) = &state.events {
                wake.notify_one();
            }
            HttpResponse::Created().json(change)
        }
        Ok(Finish::Refused(response)) => response,
        Err(e) => {
            // The transaction rolled back, so nothing was made: free the key for a retry
            // rather than leave it answering 409 for good.
            if let Err(release) = state.db.with(|db| release_key(db, &key)) {
                tracing::error!(error = %release, "an in-flight key could not be released");
            }
            internal(e)
        }
    }
}

enum Begin {
    Proceed,
    Answer(HttpResponse),
}

enum Finish {
    /// The change, and the record it made.
    Made((Change, Subscription)),
    /// Nothing changed and the key was released: the record moved (412), went away
    /// (404) or no longer offers the change (422).
    Refused(HttpResponse),
}

/// Why a command may not be applied to `record` as it now is, if it may not.
fn refusal(
    record: Option<&Subscription>,
    id: &str,
    if_match: &str,
    change_type: &str,
) -> Option<HttpResponse> {
    let Some(record) = record else {
        return Some(error(
            StatusCode::NOT_FOUND,
            "unknown_subscription",
            "no such subscription",
        ));
    };
    if if_match.trim_matches('"') != format!("r{}", record.revision) {
        return Some(with_etag(record, StatusCode::PRECONDITION_FAILED));
    }
    if record.option(change_type).is_none() {
        return Some(error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "change_not_offered",
            &format!("{change_type} is not offered on {id}"),
        ));
    }
    None
}

/// Claims the key (a short transaction), so a second request with it is answered at
/// once. The record is checked here too, only to refuse a stale command early without
/// claiming the key; that check decides nothing, `finish_change` makes it again.
fn begin_change(
    db: &Db,
    id: &str,
    key: &str,
    body_hash: &str,
    if_match: &str,
    change_type: &str,
) -> rusqlite::Result<Begin> {
    db.transaction(|tx| {
        let claimed_as = |tx: &rusqlite::Connection| {
            tx.prepare_cached(
                "SELECT body_hash, state, response FROM changes WHERE request_key = ?1",
            )?
            .query_row([key], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                ))
            })
            .optional()
        };
        if let Some((hash, state, response)) = claimed_as(tx)? {
            return Ok(Begin::Answer(answer_for_claimed(
                &hash, &state, response, body_hash,
            )));
        }
        let record = load(tx, id)?;
        if let Some(answer) = refusal(record.as_ref(), id, if_match, change_type) {
            return Ok(Begin::Answer(answer));
        }
        // A lookup may fence the key at the same moment: whichever writes first decides.
        let claimed = tx
            .prepare_cached(
                "INSERT INTO changes (request_key, body_hash, state) VALUES (?1, ?2, 'in_flight') \
                 ON CONFLICT (request_key) DO NOTHING",
            )?
            .execute([key, body_hash])?
            == 1;
        if !claimed {
            let (hash, state, response) =
                claimed_as(tx)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
            return Ok(Begin::Answer(answer_for_claimed(
                &hash, &state, response, body_hash,
            )));
        }
        Ok(Begin::Proceed)
    })
}

/// The answer to a command whose key is already known: voided by a lookup (410), used
/// with another body (422), in flight (409), or done (its first answer, replayed).
fn answer_for_claimed(
    hash: &str,
    state: &str,
    response: Option<String>,
    body_hash: &str,
) -> HttpResponse {
    if state == "void" {
        error(
            StatusCode::GONE,
            "key_voided",
            "this Idempotency-Key was voided by a lookup that found no command; nothing happened",
        )
    } else if hash != body_hash {
        error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "key_reused",
            "this Idempotency-Key was used with a different request",
        )
    } else if state == "in_flight" {
        error(
            StatusCode::CONFLICT,
            "in_flight",
            "a request with this Idempotency-Key is in flight",
        )
    } else {
        HttpResponse::Ok()
            .insert_header(("Idempotent-Replayed", "true"))
            .content_type("application/json")
            .body(response.unwrap_or_default())
    }
}

/// The atomic step: in one transaction, re-reads the record, checks If-Match and the
/// option, and applies the change (a new revision, the option consumed, a note saying
/// why) and marks the key done. When the check fails the key's claim is dropped instead,
/// since nothing happened and the same key may be tried again.
fn finish_change(
    db: &Db,
    id: &str,
    key: &str,
    if_match: &str,
    change_type: &str,
    events: bool,
) -> rusqlite::Result<Finish> {
    db.transaction(|tx| {
        let record = load(tx, id)?;
        if let Some(answer) = refusal(record.as_ref(), id, if_match, change_type) {
            release_key(tx, key)?;
            return Ok(Finish::Refused(answer));
        }
        let mut record = record.expect("refusal answers a missing record");
        let effective_at = record
            .option(change_type)
            .expect("refusal answers an option not offered")
            .effective_at
            .clone();
        record.revision += 1;
        let now = OffsetDateTime::now_utc()
            .format(&Rfc3339)
            .expect("now formats");
        record.options.retain(|o| o.change_type != change_type);
        if change_type == "stop_renewal" {
            record.status = "ending".to_owned();
            record.options.clear();
        }
        record.notes.push(Note {
            revision: record.revision,
            at: now,
            text: format!("{change_type} scheduled for {effective_at} at the customer's request."),
        });
        save(tx, &record)?;
        let change = Change {
            request_key: key.to_owned(),
            subscription: id.to_owned(),
            change_type: change_type.to_owned(),
            status: "scheduled".to_owned(),
            effective_at,
            revision: record.revision,
        };
        tx.prepare_cached(
            "UPDATE changes SET state = 'done', response = ?1 WHERE request_key = ?2",
        )?
        .execute([
            serde_json::to_string(&change).expect("a change serialises"),
            key.to_owned(),
        ])?;
        if events {
            outbox::write(tx, &record, Some(&change))?;
        }
        Ok(Finish::Made((change, record)))
    })
}

/// `GET /v1/changes/{key}`: the change made under the key (200); a command with it still
/// being processed (202 `in_flight`); or, when no command with it was received, 404
/// `void`, and the key is fenced in the same transaction, so a command arriving later with
/// it answers 410 and changes nothing.
async fn get_change(
    req: HttpRequest,
    state: web::Data<State>,
    key: web::Path<String>,
) -> HttpResponse {
    authorize!(state, req);
    match look_up_or_fence(&state.db, key.as_str()) {
        Ok((state, response)) => match state.as_str() {
            "done" => HttpResponse::Ok()
                .content_type("application/json")
                .body(response.unwrap_or_default()),
            "in_flight" => {
                HttpResponse::Accepted().json(serde_json::json!({"status": "in_flight"}))
            }
            _ => HttpResponse::NotFound().json(serde_json::json!({
                "status": "void",
                "error": "unknown_change",
                "message": "no command with this key was received; from now on none will be",
            })),
        },
        Err(e) => internal(e),
    }
}

/// The key's state and stored answer, fencing it first when nothing holds it.
fn look_up_or_fence(db: &Db, key: &str) -> rusqlite::Result<(String, Option<String>)> {
    db.transaction(|tx| {
        tx.prepare_cached(
            "INSERT INTO changes (request_key, body_hash, state) VALUES (?1, '', 'void') \
             ON CONFLICT (request_key) DO NOTHING",
        )?
        .execute([key])?;
        tx.prepare_cached("SELECT state, response FROM changes WHERE request_key = ?1")?
            .query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))
    })
}

/// The running embedded service: its port, and a handle to stop it.
pub struct Running {
    pub port: u16,
    pub handle: actix_web::dev::ServerHandle,
}

/// Binds `127.0.0.1:port` (0 picks a free port) and starts the service in the background.
pub async fn start(port: u16, settings: ServiceSettings) -> Result<Running, ServiceStartError> {
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    let port = listener.local_addr()?.port();
    let server = serve(listener, settings).await?;
    let handle = server.handle();
    tokio::spawn(server);
    Ok(Running { port, handle })
}
