//! A real HTTP subscription service that misbehaves on request: a TCP proxy in front of
//! the embedded service that can drop the connection after forwarding a command, answer
//! slowly, fail, or reset before reading. It counts the commands that reached the service.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does with a command (`POST`); reads always pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// Forward and answer.
    Pass,
    /// Forward the command, then close the connection without answering.
    DropAfterForwarding,
    /// Close the connection before reading the request: nothing reaches the service.
    ResetBeforeReading,
    /// Answer 500 without forwarding.
    Fail,
    /// Forward, then wait this long before answering.
    Slow(Duration),
    /// Move the record (a new revision) just before forwarding the command: the service
    /// answers 412.
    StaleAtLastMoment,
    /// Reads (`GET`) answer 500; commands pass.
    FailReads,
    /// Read a command, then close the connection without forwarding it (lost on the way):
    /// nothing reaches the service, and the client cannot tell. Reads pass.
    LoseCommands,
}

pub struct FaultyService {
    pub url: String,
    fault: Arc<Mutex<Fault>>,
    forwarded: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
}

impl FaultyService {
    pub fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    /// Commands that reached the real service.
    pub fn commands_forwarded(&self) -> usize {
        self.forwarded.load(Ordering::SeqCst)
    }

    /// Commands the real service answered 200 or 201.
    pub fn commands_accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    pub async fn start(upstream: &str, fault: Fault) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let fault = Arc::new(Mutex::new(fault));
        let forwarded = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let upstream = upstream.to_owned();
        let (f, n, a) = (fault.clone(), forwarded.clone(), accepted.clone());
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let (f, n, a, upstream) = (f.clone(), n.clone(), a.clone(), upstream.clone());
                tokio::spawn(async move {
                    let fault = *f.lock().unwrap();
                    let _ = handle(socket, &upstream, fault, &n, &a).await;
                });
            }
        });
        Self {
            url,
            fault,
            forwarded,
            accepted,
        }
    }
}

async fn read_request(
    socket: &mut TcpStream,
) -> std::io::Result<Option<(String, String, Vec<(String, String)>, Vec<u8>)>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let (method, path) = (
        first.next().unwrap_or("GET").to_owned(),
        first.next().unwrap_or("/").to_owned(),
    );
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            l.split_once(": ")
                .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
        })
        .collect();
    let length = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0usize);
    let mut body = buf[header_end..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok(Some((method, path, headers, body)))
}

async fn handle(
    mut socket: TcpStream,
    upstream: &str,
    fault: Fault,
    forwarded: &AtomicUsize,
    accepted: &AtomicUsize,
) -> std::io::Result<()> {
    if fault == Fault::ResetBeforeReading {
        // Read nothing: close at once; the client's request dies on a closed connection.
        drop(socket);
        return Ok(());
    }
    let Some((method, path, headers, body)) = read_request(&mut socket).await? else {
        return Ok(());
    };
    let command = method == "POST";
    if command && fault == Fault::LoseCommands {
        return Ok(());
    }
    if (command && fault == Fault::Fail) || (method == "GET" && fault == Fault::FailReads) {
        let body = br#"{"error":"internal","message":"the service failed"}"#;
        let head = format!("HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
        socket.write_all(head.as_bytes()).await?;
        socket.write_all(body).await?;
        return Ok(());
    }
    let http = reqwest::Client::new();
    if command && fault == Fault::StaleAtLastMoment {
        let id = path.split('/').nth(3).unwrap_or_default();
        let url = format!("{upstream}/v1/subscriptions/{id}");
        let mut record: serde_json::Value = http
            .get(&url)
            .send()
            .await
            .map_err(std::io::Error::other)?
            .json()
            .await
            .map_err(std::io::Error::other)?;
        record.as_object_mut().unwrap().remove("revision");
        record["notes"].as_array_mut().unwrap().push(
            serde_json::json!({"at": "2026-09-30T08:00:00Z", "text": "Moved at the last moment."}),
        );
        http.put(&url)
            .json(&record)
            .send()
            .await
            .map_err(std::io::Error::other)?;
    }
    let mut request = http
        .request(method.parse().unwrap(), format!("{upstream}{path}"))
        .body(body);
    for (k, v) in &headers {
        if k != "host" && k != "content-length" && k != "connection" {
            request = request.header(k.as_str(), v.as_str());
        }
    }
    let answer = request.send().await.map_err(std::io::Error::other)?;
    if command {
        forwarded.fetch_add(1, Ordering::SeqCst);
        if answer.status().is_success() {
            accepted.fetch_add(1, Ordering::SeqCst);
        }
    }
    let status = answer.status();
    let mut extra = String::new();
    for name in ["etag", "idempotent-replayed"] {
        if let Some(v) = answer.headers().get(name) {
            extra.push_str(&format!("{name}: {}\r\n", v.to_str().unwrap_or_default()));
        }
    }
    let bytes = answer.bytes().await.map_err(std::io::Error::other)?;
    match fault {
        Fault::DropAfterForwarding if command => return Ok(()),
        Fault::Slow(delay) if command => tokio::time::sleep(delay).await,
        _ => {}
    }
    let head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}connection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        bytes.len()
    );
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(&bytes).await?;
    socket.shutdown().await
}
