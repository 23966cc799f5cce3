//! A service for the client's unit tests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the test service saw.
#[derive(Default)]
pub struct Seen {
    pub received: AtomicUsize,
    pub in_flight: AtomicUsize,
    pub most_in_flight: AtomicUsize,
}

/// A real HTTP/1.1 service on loopback that holds every request for `hold`, then
/// answers `status` with `body` (declaring `declared` bytes, or the body's length).
pub async fn service(
    hold: Duration,
    status: &'static str,
    body: &'static str,
    declared: Option<usize>,
) -> (String, Arc<Seen>) {
    listen(move |mut socket, seen| async move {
        let mut buf = vec![0u8; 16 * 1024];
        let mut len = 0;
        loop {
            // One request: headers (and, for these tests, a small body in the
            // same read). Keep-alive: loop for the next one.
            let Ok(n) = socket.read(&mut buf[len..]).await else {
                return;
            };
            if n == 0 {
                return;
            }
            len += n;
            if !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                continue;
            }
            len = 0;
            seen.received.fetch_add(1, Ordering::SeqCst);
            let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            seen.most_in_flight.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(hold).await;
            seen.in_flight.fetch_sub(1, Ordering::SeqCst);
            let head = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                declared.unwrap_or(body.len())
            );
            if socket.write_all(head.as_bytes()).await.is_err()
                || socket.write_all(body.as_bytes()).await.is_err()
            {
                return;
            }
        }
    })
    .await
}

/// A real HTTP/1.1 server on loopback: `serve` answers each connection, told what the
/// server saw so far. Its URL, and what it saw.
async fn listen<F, Served>(serve: F) -> (String, Arc<Seen>)
where
    F: Fn(TcpStream, Arc<Seen>) -> Served + Send + 'static,
    Served: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Seen::default());
    let counts = seen.clone();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            tokio::spawn(serve(socket, counts.clone()));
        }
    });
    (url, seen)
}

/// A real HTTP/1.1 server on loopback that answers every request `307 Temporary
/// Redirect` to the same path at `target` (a base URL), as a misrouted proxy or a moved
/// service would: a client that follows it sends the request there, body and all.
pub async fn redirecting(target: String) -> (String, Arc<Seen>) {
    listen(move |mut socket, seen| {
        let target = target.clone();
        async move {
            let mut buf = vec![0u8; 16 * 1024];
            let mut len = 0;
            while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                match socket.read(&mut buf[len..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => len += n,
                }
            }
            seen.received.fetch_add(1, Ordering::SeqCst);
            let head = String::from_utf8_lossy(&buf[..len]);
            let path = head.split(' ').nth(1).unwrap_or("/");
            let answer = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nlocation: {target}{path}\r\n\
                     content-length: 0\r\nconnection: close\r\n\r\n"
            );
            let _ = socket.write_all(answer.as_bytes()).await;
        }
    })
    .await
}
