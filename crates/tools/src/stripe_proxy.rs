//! A proxy in front of localstripe, named as such: it counts the writes made through it
//! (the consent matrix's changes), and can misbehave on one, standing for a network that
//! loses Stripe's answer or for another writer that gets in between the provider's read and
//! its write (localstripe can do neither). Every other request is passed through unchanged.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does to a write (`POST` or `DELETE` of `/v1/subscriptions/{id}`).
#[derive(Clone)]
pub enum OnWrite {
    /// Passes it on, and its answer back.
    PassThrough,
    /// Passes it to localstripe, then closes the connection without its answer.
    LoseTheAnswer,
    /// First makes this other writer's update, then passes the write on.
    RaceWith(Vec<(String, String)>),
}

pub struct Proxy {
    pub url: String,
    writes: Arc<AtomicUsize>,
    made: Arc<AtomicUsize>,
    mode: Arc<Mutex<OnWrite>>,
}

impl Proxy {
    /// Writes localstripe answered with a 2xx: changes made.
    pub fn made(&self) -> usize {
        self.made.load(Ordering::SeqCst)
    }

    /// What the next writes meet.
    pub fn set(&self, on_write: OnWrite) {
        *self.mode.lock().unwrap() = on_write;
    }

    /// Writes that reached the proxy.
    pub fn writes(&self) -> usize {
        self.writes.load(Ordering::SeqCst)
    }
}

/// Starts the proxy in front of `upstream`. A rustls provider must be installed before
/// (the clients are built with `rustls-no-provider`).
pub async fn start(upstream: &str, on_write: OnWrite) -> Proxy {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let counts = Counts::default();
    let (writes, made) = (counts.writes.clone(), counts.made.clone());
    let mode = Arc::new(Mutex::new(on_write));
    let (upstream, shared) = (upstream.to_owned(), mode.clone());
    tokio::spawn(async move {
        let http = reqwest::Client::new();
        while let Ok((socket, _)) = listener.accept().await {
            let (http, upstream, mode, counts) = (
                http.clone(),
                upstream.clone(),
                shared.clone(),
                counts.clone(),
            );
            tokio::spawn(serve(socket, http, upstream, mode, counts));
        }
    });
    Proxy {
        url,
        writes,
        made,
        mode,
    }
}

/// What the proxy counts: writes received, and writes localstripe made.
#[derive(Clone, Default)]
struct Counts {
    writes: Arc<AtomicUsize>,
    made: Arc<AtomicUsize>,
}

/// One request's head and body, read off the connection.
struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

async fn read_request(socket: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Request> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let mut lines = head.split("\r\n");
            let mut first = lines.next()?.split(' ');
            let (method, path) = (first.next()?.to_owned(), first.next()?.to_owned());
            let headers: Vec<(String, String)> = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
                .collect();
            let length = headers
                .iter()
                .find(|(k, _)| k == "content-length")
                .and_then(|(_, v)| v.parse::<usize>().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + length {
                let mut chunk = [0u8; 4096];
                let n = socket.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = buf[end + 4..end + 4 + length].to_vec();
            buf.drain(..end + 4 + length);
            return Some(Request {
                method,
                path,
                headers,
                body,
            });
        }
        let mut chunk = [0u8; 4096];
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn serve(
    mut socket: TcpStream,
    http: reqwest::Client,
    upstream: String,
    mode: Arc<Mutex<OnWrite>>,
    counts: Counts,
) {
    let mut buf = Vec::new();
    while let Some(request) = read_request(&mut socket, &mut buf).await {
        let on_write = mode.lock().unwrap().clone();
        let write = matches!(request.method.as_str(), "POST" | "DELETE")
            && request.path.starts_with("/v1/subscriptions/");
        let auth = request
            .headers
            .iter()
            .find(|(k, _)| k == "authorization")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        if write {
            counts.writes.fetch_add(1, Ordering::SeqCst);
            if let OnWrite::RaceWith(form) = &on_write {
                let raced = http
                    .post(format!("{upstream}{}", request.path))
                    .header("authorization", &auth)
                    .form(form)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(raced.status(), 200, "{}", raced.text().await.unwrap());
            }
        }
        let mut forwarded = http.request(
            request.method.parse().unwrap(),
            format!("{upstream}{}", request.path),
        );
        for (k, v) in &request.headers {
            if !matches!(k.as_str(), "host" | "content-length" | "connection") {
                forwarded = forwarded.header(k, v);
            }
        }
        let answer = forwarded.body(request.body).send().await.unwrap();
        let status = answer.status().as_u16();
        let body = answer.bytes().await.unwrap();
        if write && answer_ok(status) {
            counts.made.fetch_add(1, Ordering::SeqCst);
        }
        if write && matches!(on_write, OnWrite::LoseTheAnswer) {
            // Made in localstripe; its answer never arrives.
            return;
        }
        let head = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        if socket.write_all(head.as_bytes()).await.is_err()
            || socket.write_all(&body).await.is_err()
        {
            return;
        }
    }
}

fn answer_ok(status: u16) -> bool {
    (200..300).contains(&status)
}
