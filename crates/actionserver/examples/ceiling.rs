//! The transport ceiling for bench/run.sh: a bare actix-web server that reads each POST
//! body fully and answers a constant `{"events":[],"responses":[]}` (application/json).
//! No JSON parsing, no action: what actix-web itself costs for the same bodies.
//!
//! Usage: ceiling [PORT] [WORKERS] [CERT.pem KEY.pem]  (loopback only; PORT 0 picks a free
//! port, printed on stdout as `listening on 127.0.0.1:PORT`; WORKERS defaults to the number
//! of cores). With a certificate and its key it serves HTTPS on the settings actiongate
//! serves with (`actionserver::tls`), answers without Nagle's delay as actiongate does, and
//! is the ceiling of actix-web's own TLS path (bench/connections.sh).

use std::net::TcpListener;

use actix_web::http::header;
use actix_web::{web, App, Error, HttpRequest, HttpResponse, HttpServer};
use bytes::BytesMut;
use futures_util::StreamExt;

const ANSWER: &str = r#"{"events":[],"responses":[]}"#;
/// Same body limit as rasa-sdk (Sanic's default, 100 MB).
const LIMIT: usize = 100_000_000;

async fn answer(req: HttpRequest, mut payload: web::Payload) -> Result<HttpResponse, Error> {
    // Read the body fully into one buffer sized from Content-Length, as actiongate's body
    // reader does (actix-web's `Bytes` extractor grows its buffer instead, which costs
    // copies on multi-megabyte bodies and would make the ceiling lower than it is).
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(8 * 1024)
        .min(LIMIT);
    let mut body = BytesMut::with_capacity(declared);
    while let Some(chunk) = payload.next().await {
        let chunk = chunk?;
        if body.len() + chunk.len() > LIMIT {
            return Ok(HttpResponse::PayloadTooLarge().finish());
        }
        body.extend_from_slice(&chunk);
    }
    std::hint::black_box(body.len());
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(ANSWER))
}

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().map_or(0, |p| p.parse().expect("PORT"));
    let workers: usize = args.next().map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |w| w.parse().expect("WORKERS"),
    );
    let tls = args.next().map(|cert| {
        let key = args.next().expect("KEY.pem after CERT.pem");
        actionserver::tls::from_pem_files(cert.as_ref(), key.as_ref())
            .expect("the certificate and its key")
    });
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    println!("listening on {}", listener.local_addr()?);
    let server = HttpServer::new(|| {
        App::new().route("/webhook", web::post().to(answer)).route(
            "/health",
            web::get().to(|| async {
                HttpResponse::Ok()
                    .content_type("application/json")
                    .body(r#"{"status":"ok"}"#)
            }),
        )
    })
    .workers(workers)
    // As actiongate's listener: an answer is not held back behind the session tickets.
    .on_connect(|io, _| {
        if let Some(tls) =
            io.downcast_ref::<actix_tls::accept::rustls_0_23::TlsStream<actix_web::rt::net::TcpStream>>()
        {
            let _ = tls.get_ref().0.set_nodelay(true);
        }
    });
    match tls {
        Some(config) => server.listen_rustls_0_23(listener, config)?,
        None => server.listen(listener)?,
    }
    .run()
    .await
}
