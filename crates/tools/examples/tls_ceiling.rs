//! The TLS ceiling of bench/connections.sh: a bare server that, on each connection, makes
//! the TLS handshake with the certificate and rustls settings actiongate serves with, reads
//! one HTTP request and answers `200 {}` without looking at it, then closes. What it costs
//! per connection is the floor of any TLS server on this machine with these settings: the
//! handshake, the record layer, the accept and the close.
//!
//! ```text
//! cargo run --release -p tools --example tls_ceiling -- --port 8443 \
//!     --certificate cert.pem --key key.pem [--threads 2]
//! ```

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use clap::Parser;

#[derive(Parser)]
struct Args {
    #[arg(long)]
    port: u16,
    #[arg(long)]
    certificate: PathBuf,
    #[arg(long)]
    key: PathBuf,
    /// Threads accepting connections, each serving one at a time.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

/// Connections served with a full handshake and with a resumed one, reported on stderr
/// every 1,000 connections: a client that resumes does not measure the handshake.
static FULL: AtomicU64 = AtomicU64::new(0);
static RESUMED: AtomicU64 = AtomicU64::new(0);

const ANSWER: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}";

fn main() {
    let args = Args::parse();
    // The settings actiongate serves with (rustls's defaults on ring, AES-128-GCM chosen).
    let config = actionserver::tls::from_pem_files(&args.certificate, &args.key)
        .expect("the certificate and its key");
    let config = Arc::new(config);
    let listener = TcpListener::bind(("127.0.0.1", args.port)).expect("the port is free");
    let workers: Vec<_> = (0..args.threads.max(1))
        .map(|_| {
            let listener = listener.try_clone().expect("the listener");
            let config = config.clone();
            std::thread::spawn(move || loop {
                if let Ok((stream, _)) = listener.accept() {
                    // A failed handshake or a dropped connection ends that connection only.
                    let _ = serve(stream, config.clone());
                }
            })
        })
        .collect();
    for worker in workers {
        let _ = worker.join();
    }
}

/// The handshake, one request read to its end, the answer, the close.
fn serve(mut tcp: TcpStream, config: Arc<rustls::ServerConfig>) -> std::io::Result<()> {
    tcp.set_nodelay(true)?;
    let connection = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(connection, &mut tcp);
    let mut request = Vec::with_capacity(16 * 1024);
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = tls.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        request.extend_from_slice(&chunk[..n]);
        let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        if request.len() >= end + 4 + length {
            break;
        }
    }
    let counter = match tls.conn.handshake_kind() {
        Some(rustls::HandshakeKind::Resumed) => &RESUMED,
        _ => &FULL,
    };
    if (counter.fetch_add(1, Ordering::Relaxed) + 1) % 1000 == 0 {
        eprintln!(
            "tls_ceiling: {} full handshakes, {} resumed",
            FULL.load(Ordering::Relaxed),
            RESUMED.load(Ordering::Relaxed)
        );
    }
    tls.write_all(ANSWER)?;
    tls.conn.send_close_notify();
    tls.flush()?;
    Ok(())
}
