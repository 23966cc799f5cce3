//! The load of bench/connections.sh: calls made as Rasa 3.6 makes them, each on a new
//! connection (Rasa's HTTP executor opens a new client session per action call), and with
//! TLS a full handshake every time (a new session has no ticket to resume with; wrk resumes,
//! so it cannot show this). Closed loop: `--concurrency` workers post `--body` to
//! `--url`/webhook for `--duration` seconds.
//!
//! ```text
//! connect_load --url https://127.0.0.1:5056 --body select-10.json [--ca cert.pem]
//!              [--concurrency 16] [--duration 8]
//! ```
//!
//! Prints `RESULT <calls/s> <p50 µs> <p99 µs> <calls> <non-2xx> <failed>`, the line
//! bench/post_body.lua prints for wrk.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

#[derive(Parser)]
struct Args {
    #[arg(long)]
    url: String,
    #[arg(long)]
    body: PathBuf,
    /// The server's certificate, trusted as the only root (for `https://` URLs).
    #[arg(long)]
    ca: Option<PathBuf>,
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    #[arg(long, default_value_t = 8)]
    duration: u64,
}

/// What one worker saw: each call's time, the non-2xx answers, the failed calls.
#[derive(Default)]
struct Seen {
    micros: Vec<u32>,
    non_2xx: u64,
    failed: u64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
    let args = Args::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = &args.ca {
        for cert in CertificateDer::pem_file_iter(ca).expect("the certificate file") {
            roots
                .add(cert.expect("a certificate"))
                .expect("a usable root");
        }
    }
    let mut tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    // As a new aiohttp session: nothing to resume with, HTTP/1.1.
    tls.resumption = rustls::client::Resumption::disabled();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        // No connection is kept: every call connects (and shakes hands) anew.
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("a client");
    let body = bytes_of(&args.body);
    let url = format!("{}/webhook", args.url.trim_end_matches('/'));
    let deadline = Instant::now() + Duration::from_secs(args.duration);
    let started = Instant::now();
    let workers: Vec<_> = (0..args.concurrency.max(1))
        .map(|_| {
            let (client, body, url) = (client.clone(), body.clone(), url.clone());
            tokio::spawn(async move {
                let mut seen = Seen::default();
                while Instant::now() < deadline {
                    let at = Instant::now();
                    let answer = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(reqwest::Body::from(body.as_ref().clone()))
                        .send()
                        .await;
                    match answer {
                        Ok(answer) => {
                            let ok = answer.status().is_success();
                            if answer.bytes().await.is_err() {
                                seen.failed += 1;
                                continue;
                            }
                            seen.non_2xx += u64::from(!ok);
                            seen.micros.push(at.elapsed().as_micros() as u32);
                        }
                        Err(e) => {
                            if seen.failed == 0 {
                                eprintln!("connect_load: a call failed: {e:?}");
                            }
                            seen.failed += 1
                        }
                    }
                }
                seen
            })
        })
        .collect();
    let mut all = Seen::default();
    for worker in workers {
        let seen = worker.await.expect("a worker");
        all.micros.extend(seen.micros);
        all.non_2xx += seen.non_2xx;
        all.failed += seen.failed;
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.micros.sort_unstable();
    let at = |q: f64| {
        all.micros
            .get(((all.micros.len() as f64 * q) as usize).min(all.micros.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "RESULT {:.2} {} {} {} {} {}",
        all.micros.len() as f64 / elapsed,
        at(0.5),
        at(0.99),
        all.micros.len(),
        all.non_2xx,
        all.failed
    );
}

fn bytes_of(path: &PathBuf) -> Arc<Vec<u8>> {
    Arc::new(std::fs::read(path).expect("the body file"))
}
