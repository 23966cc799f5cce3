//! Hostile clients against a running actiongate, and how its real callers fare meanwhile:
//! `--per-kind` connections of each kind held open on loopback (silent ones on the webhook,
//! gRPC and console ports; uploads that declare 64 MiB and send nothing; bodies trickled a
//! byte every 5 s), each reopened as soon as the server closes it, for `--seconds`; while
//! they are held, a valid webhook call, a gRPC call and a console page, each on a new
//! connection as Rasa makes them, sampled in turn. Prints each caller's latency (p50, p99,
//! max) and errors, and how many hostile connections were open and how often the server
//! closed them. `scripts/starvation.sh` starts the server and runs this.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actionserver::grpc_proto::action_service_client::ActionServiceClient;
use actionserver::grpc_proto::ActionsRequest;
use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Parser)]
struct Args {
    /// The webhook's base URL.
    #[arg(long)]
    webhook: String,
    /// The gRPC port's URL.
    #[arg(long)]
    grpc: String,
    /// The console's base URL.
    #[arg(long)]
    console: String,
    /// Hostile connections held open of each kind.
    #[arg(long, default_value_t = 2000)]
    per_kind: usize,
    /// How long the hostile clients run.
    #[arg(long, default_value_t = 40)]
    seconds: u64,
    /// Calls sampled per caller.
    #[arg(long, default_value_t = 150)]
    samples: usize,
    /// Run only the hostile clients, or only the callers (the script runs the hostile ones
    /// in a process of their own, at the lowest CPU priority, as a remote attacker's CPU
    /// would not be this machine's).
    #[arg(long, value_enum)]
    only: Option<Role>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Role {
    Hostile,
    Callers,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    SilentWebhook,
    SilentGrpc,
    SilentConsole,
    DeclaredBody,
    Trickle,
}

const KINDS: [Kind; 5] = [
    Kind::SilentWebhook,
    Kind::SilentGrpc,
    Kind::SilentConsole,
    Kind::DeclaredBody,
    Kind::Trickle,
];

#[derive(Default)]
struct Counts {
    open: AtomicUsize,
    closed_by_server: AtomicUsize,
    refused: AtomicUsize,
}

fn addr(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned()
}

/// One hostile client, from a loopback address of its kind's (127.2.0.2 and up, so a
/// per-address cap tells it from the real callers on 127.0.0.1, as distinct hosts would
/// be): connects, misbehaves until the server closes it, again.
async fn hostile(
    kind: Kind,
    to: String,
    from: std::net::IpAddr,
    until: Instant,
    counts: Arc<Counts>,
) {
    let head = b"POST /webhook HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 67108864\r\n\r\n";
    while Instant::now() < until {
        let connect = async {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(std::net::SocketAddr::new(from, 0))?;
            let to: std::net::SocketAddr = to
                .parse()
                .map_err(|e| std::io::Error::other(format!("{e}")))?;
            socket.connect(to).await
        };
        let Ok(mut stream) = connect.await else {
            counts.refused.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        counts.open.fetch_add(1, Ordering::Relaxed);
        if matches!(kind, Kind::DeclaredBody | Kind::Trickle) {
            let _ = stream.write_all(head).await;
        }
        let mut buf = [0u8; 512];
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let wait = match kind {
                Kind::Trickle => Duration::from_secs(5).min(left),
                _ => left,
            };
            match tokio::time::timeout(wait, stream.read(&mut buf)).await {
                // The server answered or closed: this connection is done.
                Ok(Ok(0)) | Ok(Err(_)) => {
                    counts.closed_by_server.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Ok(Ok(_)) => continue,
                Err(_) if matches!(kind, Kind::Trickle) => {
                    if stream.write_all(b" ").await.is_err() {
                        counts.closed_by_server.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        counts.open.fetch_sub(1, Ordering::Relaxed);
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at]
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let counts: Vec<Arc<Counts>> = KINDS.iter().map(|_| Arc::default()).collect();
    let hostile_here = args.only != Some(Role::Callers);
    let callers_here = args.only != Some(Role::Hostile);
    for (k, (kind, counts)) in KINDS
        .iter()
        .zip(&counts)
        .enumerate()
        .filter(|_| hostile_here)
    {
        let to = match kind {
            Kind::SilentGrpc => addr(&args.grpc),
            Kind::SilentConsole => addr(&args.console),
            _ => addr(&args.webhook),
        };
        for n in 0..args.per_kind {
            // 50 clients an address, each kind from addresses of its own: under the
            // server's 256 a listener from one address, so what is measured is connections
            // held open, not a flood of reconnections refused by that cap.
            let from = std::net::IpAddr::V4(std::net::Ipv4Addr::new(
                127,
                2 + k as u8,
                (n / 50 / 250) as u8,
                2 + (n / 50 % 250) as u8,
            ));
            tokio::spawn(hostile(*kind, to.clone(), from, until, counts.clone()));
        }
    }
    if hostile_here {
        // Let them pile up before sampling.
        tokio::time::sleep(Duration::from_secs(6)).await;
    }
    let open_at_start: Vec<usize> = counts
        .iter()
        .map(|c| c.open.load(Ordering::Relaxed))
        .collect();
    if callers_here {
        sample(&args, until).await;
    } else {
        tokio::time::sleep_until(until.into()).await;
    }
    if !hostile_here {
        return;
    }
    println!(
        "hostile connections, {} of each kind asked for {} s:",
        args.per_kind, args.seconds
    );
    println!(
        "{:<16} {:>14} {:>14} {:>18} {:>10}",
        "kind", "open at 6 s", "open at end", "closed by server", "refused"
    );
    for ((kind, c), at_start) in KINDS.iter().zip(&counts).zip(&open_at_start) {
        println!(
            "{:<16} {:>14} {:>14} {:>18} {:>10}",
            format!("{kind:?}"),
            at_start,
            c.open.load(Ordering::Relaxed),
            c.closed_by_server.load(Ordering::Relaxed),
            c.refused.load(Ordering::Relaxed)
        );
    }
}

/// The real callers, each call on a new connection, until `until` or `--samples` rounds;
/// prints their latencies.
async fn sample(args: &Args, until: Instant) {
    let body = serde_json::json!({
        "next_action": "list_subscriptions", "sender_id": "starvation",
        "tracker": {"sender_id": "starvation",
                    "slots": {"session_started_metadata": {"account_id": "acct-7"}},
                    "events": []},
        "domain": {}});
    let mut times: [Vec<Duration>; 3] = Default::default();
    let mut errors = [0usize; 3];
    for _ in 0..args.samples {
        if Instant::now() >= until {
            break;
        }
        // A new connection each, as Rasa 3.6 and Rasa Pro make their calls.
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let started = Instant::now();
        let ok = http
            .post(format!("{}/webhook", args.webhook))
            .json(&body)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        times[0].push(started.elapsed());
        errors[0] += usize::from(!ok);
        let started = Instant::now();
        let ok = match tonic::transport::Channel::from_shared(args.grpc.clone())
            .unwrap()
            .connect_timeout(Duration::from_secs(10))
            .connect()
            .await
        {
            Ok(channel) => ActionServiceClient::new(channel)
                .actions(ActionsRequest {})
                .await
                .is_ok(),
            Err(_) => false,
        };
        times[1].push(started.elapsed());
        errors[1] += usize::from(!ok);
        let started = Instant::now();
        let ok = http
            .get(format!("{}/sign-in", args.console))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        times[2].push(started.elapsed());
        errors[2] += usize::from(!ok);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "\n{:<22} {:>8} {:>10} {:>10} {:>10} {:>8}",
        "caller (new connection)", "calls", "p50 ms", "p99 ms", "max ms", "errors"
    );
    for (name, (t, e)) in ["webhook (list)", "gRPC (Actions)", "console page"]
        .iter()
        .zip(times.iter_mut().zip(errors))
    {
        t.sort();
        let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1000.0);
        println!(
            "{:<22} {:>8} {:>10} {:>10} {:>10} {:>8}",
            name,
            t.len(),
            ms(percentile(t, 0.5)),
            ms(percentile(t, 0.99)),
            ms(t.last().copied().unwrap_or_default()),
            e
        );
    }
}
