//! The actiongate side of bench/run.sh and of the gRPC conformance suite: this crate's
//! server with `count_events`, which answers `SlotSet("event_count", len(tracker.events))`,
//! and, for the suite, `read_domain` and `rejects` — the same actions bench/rasa_sdk_actions
//! serves with rasa-sdk.
//!
//! Usage:
//!   bench_server [PORT] [WORKERS] [--grpc]
//!                                   serve on 127.0.0.1 (PORT 0 picks a free port, printed on
//!                                   stdout as `listening on 127.0.0.1:PORT`; WORKERS 0 or
//!                                   absent: one per core); --grpc: Rasa Pro's gRPC
//!                                   ActionService instead of the webhook
//!   bench_server --parse BODY [N]   time parsing BODY as a webhook request N times (default:
//!                                   ~2 s worth) on one thread; prints `parse_us <median CPU us>`,
//!                                   then `check_us <median CPU us>`: serde_json checking that
//!                                   BODY is JSON and nothing else (into `IgnoredAny`), which
//!                                   the parse's own walk (protocol/scan.rs) now undercuts
//!
//! No tracing subscriber is installed, so nothing is logged per request (rasa-sdk logs
//! nothing per request either).

use std::net::TcpListener;
use std::time::Instant;

use actionserver::{
    Action, ActionCall, ActionError, ActionResult, ActionServer, Dispatcher, Message, OutEvent,
    Registry, ServerSettings, WebhookRequest,
};

struct CountEvents;

impl Action for CountEvents {
    fn name(&self) -> &'static str {
        "count_events"
    }

    async fn run(&self, call: ActionCall<'_>, _: &mut Dispatcher) -> ActionResult {
        Ok(vec![OutEvent::slot(
            "event_count",
            call.tracker.events.len(),
        )])
    }
}

/// Reads the domain (so it takes part in the digest exchange) and says its responses'
/// names: the conformance suite's domain case.
struct ReadDomain;

impl Action for ReadDomain {
    fn name(&self) -> &'static str {
        "read_domain"
    }

    fn reads_domain(&self) -> bool {
        true
    }

    async fn run(&self, call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
        let mut names: Vec<&str> = call
            .domain
            .and_then(|d| d.get("responses"))
            .and_then(|r| r.as_object())
            .map(|r| r.keys().map(String::as_str).collect())
            .unwrap_or_default();
        names.sort_unstable();
        dispatcher.utter(Message::text(names.join(",")));
        Ok(vec![OutEvent::slot("responses", names.len())])
    }
}

/// Refuses to run: the conformance suite's rejection case.
struct Rejects;

impl Action for Rejects {
    fn name(&self) -> &'static str {
        "rejects"
    }

    async fn run(&self, _: ActionCall<'_>, _: &mut Dispatcher) -> ActionResult {
        Err(ActionError::rejected("not today"))
    }
}

/// CPU time this thread has used, in nanoseconds (first field of /proc/thread-self/schedstat),
/// so the timing holds up when other work shares the cores; wall time where that is missing.
fn thread_cpu_ns(wall: Instant) -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| wall.elapsed().as_nanos() as u64)
}

/// Median CPU time of one `once()`, in microseconds, over batches of ~50 ms.
fn time_cpu(once: impl Fn(), n: Option<usize>) -> f64 {
    let origin = Instant::now();
    // Warm up, and size the batches.
    let started = thread_cpu_ns(origin);
    let mut warm = 0u32;
    while warm < 3 || thread_cpu_ns(origin) - started < 200_000_000 {
        once();
        warm += 1;
    }
    let per = (thread_cpu_ns(origin) - started) as f64 / 1e9 / f64::from(warm);
    let batch = ((0.05 / per) as usize).max(1);
    let batches = n.map_or(40, |n| n.div_ceil(batch).max(1));
    let mut samples: Vec<f64> = (0..batches)
        .map(|_| {
            let t = thread_cpu_ns(origin);
            for _ in 0..batch {
                once();
            }
            (thread_cpu_ns(origin) - t) as f64 / 1e3 / batch as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() -> std::io::Result<()> {
    actionserver::keep_freed_memory();
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--parse") {
        let path = args.get(1).expect("--parse BODY [N]");
        let n = args.get(2).map(|n| n.parse().expect("N"));
        let body = std::fs::read(path).expect("BODY");
        let parse = || {
            let request = WebhookRequest::parse(&body)
                .expect("a webhook request")
                .expect("not null");
            std::hint::black_box(&request);
        };
        println!("parse_us {:.1}", time_cpu(parse, n));
        let check = || {
            let checked: serde::de::IgnoredAny = serde_json::from_slice(&body).expect("JSON");
            std::hint::black_box(checked);
        };
        println!("check_us {:.1}", time_cpu(check, n));
        return Ok(());
    }
    let grpc = args.iter().any(|a| a == "--grpc");
    args.retain(|a| a != "--grpc");
    let port: u16 = args.first().map_or(0, |p| p.parse().expect("PORT"));
    let workers: usize = args.get(1).map_or(0, |w| w.parse().expect("WORKERS"));
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    println!("listening on {}", listener.local_addr()?);
    let mut registry = Registry::default();
    registry
        .register(CountEvents)
        .and_then(|r| r.register(ReadDomain))
        .and_then(|r| r.register(Rejects))
        .expect("three actions, three names");
    let settings = ServerSettings {
        workers,
        shutdown_timeout: 1,
        ..ServerSettings::default()
    };
    let server = ActionServer::new(registry, settings);
    if grpc {
        // gRPC on a tokio runtime of its own: one worker thread per core, as the HTTP
        // server has.
        let mut runtime = tokio::runtime::Builder::new_multi_thread();
        if workers > 0 {
            runtime.worker_threads(workers);
        }
        return runtime.enable_all().build()?.block_on(async {
            server
                .grpc(listener, None, async {
                    let _ = tokio::signal::ctrl_c().await;
                })
                .await
                .map_err(std::io::Error::other)
        });
    }
    actix_web::rt::System::new().block_on(async { server.http(listener, None)?.await })
}
