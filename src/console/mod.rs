//! The operator console: a web application on a port of its own (`--admin-port`, bound to
//! 127.0.0.1 unless told otherwise, never the port Rasa calls) for the people at the
//! business: the held changes to approve or reject, the outcomes pending verification, the
//! operations and a conversation's timeline, a CSV export. Operators sign in with passwords
//! whose argon2 hashes are configured; every form carries the session's token and must come
//! from the console's own origin; every decision goes through the guard and is audited with
//! the operator's name.

use std::collections::HashMap;
use std::net::TcpListener;
use std::time::Duration;

use actix_web::dev::Service as _;
use actix_web::http::header;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};

pub mod auth;
mod pages;

use crate::consent::Guard;
use crate::store::{now_ms, ApprovalState, OpState, OperationFilter, OperatorSession};

/// What the console runs with.
pub struct Console {
    pub guard: Guard,
    /// Name and argon2 hash of each operator.
    pub operators: Vec<(String, String)>,
    /// How long a sign-in lasts.
    pub session: Duration,
    /// The names it answers to besides the address it is bound to (`Host` header values,
    /// with or without the port); any other `Host` is answered 421.
    pub hosts: Vec<String>,
    /// Failed sign-ins by name and by peer.
    pub throttle: auth::Throttle,
    /// Sign-ins whose password is being checked at once (argon2 is slow on purpose): more
    /// are answered 429 at once, so signed-in operators' pages never wait behind them.
    pub checking: tokio::sync::Semaphore,
}

/// Sign-ins checked at once.
pub const CHECKS_AT_ONCE: usize = 2;

impl Console {
    pub fn new(
        guard: Guard,
        operators: Vec<(String, String)>,
        session: Duration,
        hosts: Vec<String>,
    ) -> Self {
        Self {
            guard,
            operators,
            session,
            hosts,
            throttle: auth::Throttle::default(),
            checking: tokio::sync::Semaphore::new(CHECKS_AT_ONCE),
        }
    }
}

/// The `Host` values the console answers to: loopback by name and number, the address it
/// is bound to, and the configured names; each with its port, and bare (as browsers send a
/// name on a default port).
fn allowed_hosts(bound: std::net::SocketAddr, configured: &[String]) -> Vec<String> {
    let port = bound.port();
    let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()];
    names.push(match bound.ip() {
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    });
    names.extend(configured.iter().map(|h| h.trim().to_ascii_lowercase()));
    let mut allowed = Vec::new();
    for name in names {
        let has_port = name.rsplit_once(':').is_some_and(|(host, p)| {
            !host.is_empty()
                && (host.ends_with(']') || !host.contains(':'))
                && p.parse::<u16>().is_ok()
        });
        if !has_port {
            allowed.push(format!("{name}:{port}"));
        }
        allowed.push(name);
    }
    allowed
}

/// The console on `listener`; the server runs until stopped.
/// At most `per_peer` connections are open at once from one address.
pub fn serve(
    listener: TcpListener,
    console: Console,
    per_peer: usize,
) -> std::io::Result<actix_web::dev::Server> {
    let hosts = std::sync::Arc::new(allowed_hosts(listener.local_addr()?, &console.hosts));
    let console = web::Data::new(console);
    let peers = actionserver::PeerLimit::new("console", per_peer);
    let pace = web::Data::new(actionserver::Pace::new(|| {
        HttpResponse::RequestTimeout().body("the request arrived too slowly")
    }));
    Ok(HttpServer::new(move || {
        let hosts = hosts.clone();
        App::new()
            .app_data(console.clone())
            .app_data(pace.clone())
            .wrap(actix_web::middleware::from_fn(actionserver::paced_bodies))
            .wrap(actix_web::middleware::from_fn(actionserver::refuse_over_cap))
            // DNS rebinding: a page on another name that resolves here is not the console.
            .wrap_fn(move |req, srv| {
                let host = req.connection_info().host().to_ascii_lowercase();
                let known = hosts.contains(&host);
                let call = known.then(|| srv.call(req));
                async move {
                    match call {
                        Some(call) => call.await,
                        None => Err(actix_web::error::InternalError::from_response(
                            "misdirected",
                            HttpResponse::MisdirectedRequest()
                                .body("this console does not answer to that name"),
                        )
                        .into()),
                    }
                }
            })
            .app_data(web::FormConfig::default().limit(16 * 1024))
            .wrap(
                actix_web::middleware::DefaultHeaders::new()
                    .add((header::X_FRAME_OPTIONS, "DENY"))
                    .add((header::CACHE_CONTROL, "no-store"))
                    .add(("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"))
                    .add(("Referrer-Policy", "same-origin")),
            )
            .route("/sign-in", web::get().to(sign_in_page))
            .route("/sign-in", web::post().to(sign_in))
            .route("/sign-out", web::post().to(sign_out))
            .route("/", web::get().to(held_page))
            .route("/held/{key}/approve", web::post().to(approve))
            .route("/held/{key}/reject", web::post().to(reject))
            .route("/pending", web::get().to(pending_page))
            .route("/pending/{key}/check", web::post().to(check_now))
            .route("/operations", web::get().to(operations_page))
            .route("/operations.csv", web::get().to(operations_csv))
            .route("/conversations/{sender}", web::get().to(timeline_page))
            .route("/mismatches", web::get().to(mismatches_page))
            .default_service(web::to(|| async { HttpResponse::NotFound().body("not found") }))
    })
    .workers(1)
    .disable_signals()
    .on_connect(peers.on_connect())
    .listen(listener)?
    .run())
}

fn html(markup: maud::Markup) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(markup.into_string())
}

fn see_other(to: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, to))
        .finish()
}

fn internal(e: impl std::fmt::Display) -> HttpResponse {
    tracing::error!(error = %e, "the console failed");
    HttpResponse::InternalServerError().body("the console failed; see the server's log")
}

/// The signed-in operator, or the answer for one who is not: pages redirect to sign-in,
/// forms get 401.
async fn operator(
    req: &HttpRequest,
    console: &Console,
    page: bool,
) -> Result<(String, OperatorSession), HttpResponse> {
    let refused = || {
        if page {
            see_other("/sign-in")
        } else {
            HttpResponse::Unauthorized().body("sign in first")
        }
    };
    let Some(cookie) = req.cookie(auth::SESSION_COOKIE) else {
        return Err(refused());
    };
    let digest = auth::digest(cookie.value());
    match console.guard.store().session(&digest).await {
        // Still the operator it was opened for, with the same password hash.
        Ok(Some(session))
            if auth::credential(&console.operators, &session.operator).as_deref()
                == Some(session.credential.as_str()) =>
        {
            Ok((digest, session))
        }
        Ok(Some(session)) => {
            tracing::info!(operator = %session.operator, "a console session ended: its operator was removed or their password changed");
            if let Err(e) = console.guard.store().close_session(&digest).await {
                return Err(internal(e));
            }
            Err(refused())
        }
        Ok(None) => Err(refused()),
        Err(e) => Err(internal(e)),
    }
}

/// A form's checks: a session, the console's own origin, the session's token.
async fn form_operator(
    req: &HttpRequest,
    console: &Console,
    form: &HashMap<String, String>,
) -> Result<(String, OperatorSession), HttpResponse> {
    if !auth::same_origin(req) {
        return Err(HttpResponse::Forbidden().body("this form was sent from another site"));
    }
    let (digest, session) = operator(req, console, false).await?;
    let given = form.get("csrf").map(String::as_str).unwrap_or("");
    if !auth::same(given, &session.csrf) {
        return Err(
            HttpResponse::Forbidden().body("this form is not from your session: reload the page")
        );
    }
    Ok((digest, session))
}

async fn sign_in_page() -> HttpResponse {
    let csrf = auth::token();
    HttpResponse::Ok()
        .cookie(auth::cookie(
            auth::SIGN_IN_COOKIE,
            csrf.clone(),
            time::Duration::minutes(30),
        ))
        .content_type("text/html; charset=utf-8")
        .body(pages::sign_in(&csrf, None).into_string())
}

async fn sign_in(
    req: HttpRequest,
    console: web::Data<Console>,
    form: web::Form<HashMap<String, String>>,
) -> HttpResponse {
    if !auth::same_origin(&req) {
        return HttpResponse::Forbidden().body("this form was sent from another site");
    }
    let expected = req
        .cookie(auth::SIGN_IN_COOKIE)
        .map(|c| c.value().to_owned())
        .unwrap_or_default();
    let given = form.get("csrf").map(String::as_str).unwrap_or("");
    if expected.is_empty() || !auth::same(given, &expected) {
        return HttpResponse::Forbidden()
            .body("this form is not from this console: reload the sign-in page");
    }
    let name = form
        .get("name")
        .map(String::as_str)
        .unwrap_or("")
        .to_owned();
    let password = form
        .get("password")
        .map(String::as_str)
        .unwrap_or("")
        .to_owned();
    let peer = req
        .peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    let keys = [format!("name:{name}"), format!("peer:{peer}")];
    let too_many = |wait: Duration| {
        HttpResponse::TooManyRequests()
            .insert_header((header::RETRY_AFTER, wait.as_secs().max(1).to_string()))
            .body("too many sign-ins: wait, then try again")
    };
    if let Some(wait) = console.throttle.retry_after(&keys) {
        return too_many(wait);
    }
    // argon2 off the console's worker thread, and only a few at once.
    let Ok(_turn) = console.checking.try_acquire() else {
        return too_many(Duration::from_secs(1));
    };
    let operators = console.operators.clone();
    let checked = {
        let (name, password) = (name.clone(), password.clone());
        web::block(move || auth::check_password(&operators, &name, &password)).await
    };
    let Ok(signed_in) = checked else {
        return internal("the password check did not finish");
    };
    let name = name.as_str();
    if !signed_in {
        console.throttle.failed(&keys);
        // The name is logged only when it is an operator's: a password typed into the
        // name field must not land in the log.
        match auth::credential(&console.operators, name) {
            Some(_) => tracing::warn!(operator = name, "a console sign-in was refused"),
            None => {
                tracing::warn!("a console sign-in with a name that is no operator's was refused")
            }
        }
        let csrf = auth::token();
        return HttpResponse::Unauthorized()
            .cookie(auth::cookie(
                auth::SIGN_IN_COOKIE,
                csrf.clone(),
                time::Duration::minutes(30),
            ))
            .content_type("text/html; charset=utf-8")
            .body(
                pages::sign_in(&csrf, Some("That name and password do not match.")).into_string(),
            );
    }
    console.throttle.succeeded(&keys);
    let cookie = auth::token();
    let expires_at = now_ms() + console.session.as_millis() as i64;
    let credential = auth::credential(&console.operators, name).unwrap_or_default();
    if let Err(e) = console
        .guard
        .store()
        .open_session(
            &auth::digest(&cookie),
            name,
            &auth::token(),
            expires_at,
            &credential,
        )
        .await
    {
        return internal(e);
    }
    tracing::info!(operator = name, "an operator signed in to the console");
    let max_age = time::Duration::seconds(console.session.as_secs() as i64);
    let mut gone = auth::cookie(auth::SIGN_IN_COOKIE, String::new(), time::Duration::ZERO);
    gone.make_removal();
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, "/"))
        .cookie(auth::cookie(auth::SESSION_COOKIE, cookie, max_age))
        .cookie(gone)
        .finish()
}

async fn sign_out(
    req: HttpRequest,
    console: web::Data<Console>,
    form: web::Form<HashMap<String, String>>,
) -> HttpResponse {
    let (digest, session) = match form_operator(&req, &console, &form).await {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    if let Err(e) = console.guard.store().close_session(&digest).await {
        return internal(e);
    }
    tracing::info!(operator = %session.operator, "an operator signed out");
    let mut gone = auth::cookie(auth::SESSION_COOKIE, String::new(), time::Duration::ZERO);
    gone.make_removal();
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, "/sign-in"))
        .cookie(gone)
        .finish()
}

#[derive(serde::Deserialize)]
struct Notice {
    #[serde(default)]
    notice: Option<String>,
}

async fn held_page(
    req: HttpRequest,
    console: web::Data<Console>,
    q: web::Query<Notice>,
) -> HttpResponse {
    let (_, session) = match operator(&req, &console, true).await {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    match console
        .guard
        .store()
        .approvals(Some(ApprovalState::Held))
        .await
    {
        Ok(items) => {
            let now = now_ms();
            let items: Vec<_> = items.into_iter().filter(|a| a.expires_at > now).collect();
            html(pages::held(
                (&session.operator, &session.csrf),
                &items,
                now,
                q.notice.as_deref(),
                console.guard.config().approval.max_open_per_account,
            ))
        }
        Err(e) => internal(e),
    }
}

fn describe(outcome: &crate::consent::Outcome) -> String {
    let mut text = outcome.status.as_str().replace('_', " ");
    if let Some(r) = outcome.reason {
        text.push_str(" (");
        text.push_str(&r.as_str().replace('_', " "));
        text.push(')');
    }
    text
}

fn with_notice(path: &str, notice: &str) -> String {
    format!(
        "{path}?notice={}",
        percent_encoding::utf8_percent_encode(notice, percent_encoding::NON_ALPHANUMERIC)
    )
}

async fn approve(
    req: HttpRequest,
    console: web::Data<Console>,
    key: web::Path<String>,
    form: web::Form<HashMap<String, String>>,
) -> HttpResponse {
    let (_, session) = match form_operator(&req, &console, &form).await {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    let note = form.get("note").map(|n| n.trim()).filter(|n| !n.is_empty());
    match console.guard.approve(&key, &session.operator, note).await {
        Ok(Some(d)) => {
            let what = if d.decided {
                format!("Approved: {}.", describe(&d.outcome))
            } else {
                format!(
                    "Already decided: {}. Nothing was done again.",
                    describe(&d.outcome)
                )
            };
            see_other(&with_notice("/", &what))
        }
        Ok(None) => HttpResponse::NotFound().body("no such held change"),
        Err(e) => internal(e),
    }
}

async fn reject(
    req: HttpRequest,
    console: web::Data<Console>,
    key: web::Path<String>,
    form: web::Form<HashMap<String, String>>,
) -> HttpResponse {
    let (_, session) = match form_operator(&req, &console, &form).await {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    let note = form.get("note").map(|n| n.trim()).unwrap_or("");
    if note.is_empty() {
        return see_other(&with_notice(
            "/",
            "A rejection needs a note: the customer is told it.",
        ));
    }
    match console.guard.reject(&key, &session.operator, note).await {
        Ok(Some(d)) => {
            let what = if d.decided {
                "Rejected; nothing was sent.".to_owned()
            } else {
                format!(
                    "Already decided: {}. Nothing was done again.",
                    describe(&d.outcome)
                )
            };
            see_other(&with_notice("/", &what))
        }
        Ok(None) => HttpResponse::NotFound().body("no such held change"),
        Err(e) => internal(e),
    }
}

async fn pending_page(
    req: HttpRequest,
    console: web::Data<Console>,
    q: web::Query<Notice>,
) -> HttpResponse {
    let (_, session) = match operator(&req, &console, true).await {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    match console.guard.store().unresolved(Duration::ZERO).await {
        Ok(ops) => {
            let ops: Vec<_> = ops
                .into_iter()
                .filter(|op| matches!(op.state, OpState::Sent | OpState::Unknown))
                .collect();
            html(pages::pending(
                (&session.operator, &session.csrf),
                &ops,
                q.notice.as_deref(),
            ))
        }
        Err(e) => internal(e),
    }
}

async fn check_now(
    req: HttpRequest,
    console: web::Data<Console>,
    key: web::Path<String>,
    form: web::Form<HashMap<String, String>>,
) -> HttpResponse {
    if let Err(refused) = form_operator(&req, &console, &form).await {
        return refused;
    }
    let store = console.guard.store();
    match store.operation(&key).await {
        Ok(Some(op)) => match console.guard.reconcile(&op).await {
            Ok(outcome) => see_other(&with_notice(
                "/pending",
                &format!("Checked: {}.", describe(&outcome)),
            )),
            Err(e) => internal(e),
        },
        Ok(None) => HttpResponse::NotFound().body("no such operation"),
        Err(e) => internal(e),
    }
}

fn search_from(q: &HashMap<String, String>) -> pages::Search {
    let get = |k: &str| q.get(k).map(|v| v.trim().to_owned()).unwrap_or_default();
    pages::Search {
        account: get("account"),
        conversation: get("conversation"),
        subscription: get("subscription"),
        outcome: get("outcome"),
        since: get("since"),
    }
}

type Found = (Vec<crate::store::Operation>, Vec<crate::store::Approval>);

async fn find(
    console: &Console,
    s: &pages::Search,
) -> Result<Result<Found, String>, crate::store::StoreError> {
    let since = if s.since.is_empty() {
        None
    } else {
        match time::Date::parse(
            &s.since,
            time::macros::format_description!("[year]-[month]-[day]"),
        ) {
            Ok(d) => Some((d.midnight().assume_utc().unix_timestamp_nanos() / 1_000_000) as i64),
            Err(_) => return Ok(Err(format!("“{}” is not a date like 2026-12-01.", s.since))),
        }
    };
    let some = |v: &str| (!v.is_empty()).then(|| v.to_owned());
    // An outcome of a held change names no operation state: then only holds match.
    let approval_state = [
        "held",
        "approved",
        "rejected",
        "expired",
        "blocked",
        "withdrawn",
    ]
    .contains(&s.outcome.as_str());
    let ops = if approval_state {
        Vec::new()
    } else {
        console
            .guard
            .store()
            .search_operations(&OperationFilter {
                account: some(&s.account),
                sender_id: some(&s.conversation),
                subscription: some(&s.subscription),
                state: some(&s.outcome),
                since,
                limit: 500,
            })
            .await?
    };
    let held = console
        .guard
        .store()
        .approvals(None)
        .await?
        .into_iter()
        .filter(|a| s.account.is_empty() || a.account == s.account)
        .filter(|a| s.conversation.is_empty() || a.sender_id == s.conversation)
        .filter(|a| s.subscription.is_empty() || a.subscription == s.subscription)
        .filter(|a| s.outcome.is_empty() || a.state.as_str() == s.outcome)
        .filter(|a| since.is_none_or(|t| a.created_at >= t))
        // An approved hold is shown by its operation.
        .filter(|a| a.state != ApprovalState::Approved || s.outcome == "approved")
        .collect();
    Ok(Ok((ops, held)))
}

async fn operations_page(
    req: HttpRequest,
    console: web::Data<Console>,
    q: web::Query<HashMap<String, String>>,
) -> HttpResponse {
    let (_, session) = match operator(&req, &console, true).await {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    let search = search_from(&q);
    match find(&console, &search).await {
        Ok(Ok((ops, held))) => html(pages::operations(
            (&session.operator, &session.csrf),
            &search,
            &ops,
            &held,
            None,
        )),
        Ok(Err(why)) => html(pages::operations(
            (&session.operator, &session.csrf),
            &search,
            &[],
            &[],
            Some(&why),
        )),
        Err(e) => internal(e),
    }
}

/// A CSV field, never read as a formula by a spreadsheet: prefixed with `'` when it
/// begins as a formula does. (The writer quotes every field, so no separator inside one,
/// `,` or `;`, starts a new cell.)
fn inert(field: String) -> String {
    if field.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{field}")
    } else {
        field
    }
}

async fn operations_csv(
    req: HttpRequest,
    console: web::Data<Console>,
    q: web::Query<HashMap<String, String>>,
) -> HttpResponse {
    if let Err(refused) = operator(&req, &console, false).await {
        return refused;
    }
    let search = search_from(&q);
    let (ops, held) = match find(&console, &search).await {
        Ok(Ok(found)) => found,
        Ok(Err(why)) => return HttpResponse::BadRequest().body(why),
        Err(e) => return internal(e),
    };
    let mut out = String::from(
        "created,account,subscription,change_type,outcome,decided_by,conversation,request_key\n",
    )
    .into_bytes();
    let mut rows = csv::WriterBuilder::new()
        .quote_style(csv::QuoteStyle::Always)
        .from_writer(&mut out);
    let ops = ops.iter().map(|op| {
        [
            pages::when(op.created_at),
            op.account.clone(),
            op.subscription.clone(),
            op.change_type.clone(),
            op.state.as_str().to_owned(),
            String::new(),
            op.sender_id.clone(),
            op.request_key.clone(),
        ]
    });
    let held = held.iter().map(|a| {
        [
            pages::when(a.created_at),
            a.account.clone(),
            a.subscription.clone(),
            a.change_type.clone(),
            a.state.as_str().to_owned(),
            a.decided_by.clone().unwrap_or_default(),
            a.sender_id.clone(),
            a.request_key.clone(),
        ]
    });
    for row in ops.chain(held) {
        if let Err(e) = rows.write_record(row.map(inert)) {
            return internal(e);
        }
    }
    if let Err(e) = rows.flush() {
        return internal(e);
    }
    drop(rows);
    HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .insert_header((
            header::CONTENT_DISPOSITION,
            "attachment; filename=\"operations.csv\"",
        ))
        .body(out)
}

async fn mismatches_page(req: HttpRequest, console: web::Data<Console>) -> HttpResponse {
    let (_, session) = match operator(&req, &console, true).await {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    let store = console.guard.store();
    let events = match store.received_events(Some("mismatch")).await {
        Ok(events) => events,
        Err(e) => return internal(e),
    };
    let mut items = Vec::new();
    for event in events {
        let op = match &event.request_key {
            Some(key) => match store.operation(key).await {
                Ok(op) => op,
                Err(e) => return internal(e),
            },
            None => None,
        };
        items.push((event, op));
    }
    html(pages::mismatches(
        (&session.operator, &session.csrf),
        &items,
    ))
}

async fn timeline_page(
    req: HttpRequest,
    console: web::Data<Console>,
    sender: web::Path<String>,
) -> HttpResponse {
    let (_, session) = match operator(&req, &console, true).await {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    let store = console.guard.store();
    let entries = match store.audit_entries(Some(&sender), None).await {
        Ok(e) => e,
        Err(e) => return internal(e),
    };
    let held = match store.approvals(None).await {
        Ok(all) => all
            .into_iter()
            .filter(|a| a.sender_id == *sender)
            .collect::<Vec<_>>(),
        Err(e) => return internal(e),
    };
    let mut with_outcomes = Vec::new();
    for a in held {
        match console.guard.approval_outcome(&a).await {
            Ok(outcome) => with_outcomes.push((a, outcome)),
            Err(e) => return internal(e),
        }
    }
    html(pages::timeline(
        (&session.operator, &session.csrf),
        &sender,
        &entries,
        &with_outcomes,
    ))
}
