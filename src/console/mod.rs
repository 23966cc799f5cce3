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
mod holds;
mod pages;
mod records;
mod sign_in;

use holds::{approve, check_now, held_page, pending_page, reject};
use records::{mismatches_page, operations_csv, operations_page, timeline_page};
use sign_in::{form_operator, operator, sign_in, sign_in_page, sign_out};

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
