//! The soak driver behind scripts/soak.sh: mixed list / select / apply / health traffic at
//! a fixed rate for a bounded time, against a running server whose subscription service
//! is slow for some calls and failing for others. Every apply is delivered twice (a
//! retry). It reports throughput, error rate, latency percentiles and the server's RSS
//! over time, then checks that nothing failed unexpectedly, no change was made twice,
//! every `applied` is a change at the service, and the RSS stayed flat.
//!
//! It stands for many conversations from one address, so it keeps at most [`IN_FLIGHT`]
//! calls open at once: the server shuts a connection over its per-address cap
//! (`max_connections_per_peer`, 256 by default) as it opens, and a slower machine would
//! otherwise meet that cap instead of the faults. When the server cannot keep up, the rate
//! reached falls below the target (and is printed); nothing queues without bound.
//!
//! soak --server URL --service URL --pid PID [--duration SECS] [--rate PER_SEC]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::{outcome_of, Chat, Endpoint, Service};

const ACCOUNTS: usize = 20;

struct Args {
    server: String,
    service: String,
    pid: u32,
    duration: Duration,
    rate: f64,
}

fn args() -> Args {
    let mut a = Args {
        server: String::new(),
        service: String::new(),
        pid: 0,
        duration: Duration::from_secs(120),
        rate: 200.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--server" => a.server = value,
            "--service" => a.service = value,
            "--pid" => a.pid = value.parse().expect("--pid"),
            "--duration" => a.duration = Duration::from_secs(value.parse().expect("--duration")),
            "--rate" => a.rate = value.parse().expect("--rate"),
            other => panic!("unknown flag {other}"),
        }
    }
    assert!(
        !a.server.is_empty() && !a.service.is_empty() && a.pid > 0,
        "--server, --service and --pid are required"
    );
    a
}

#[derive(Default)]
struct Stats {
    latencies: BTreeMap<&'static str, Vec<f64>>,
    outcomes: BTreeMap<String, usize>,
    unexpected: Vec<String>,
    /// Records whose change was reported applied, and those left pending.
    applied: Vec<String>,
    pending: Vec<(String, Chat)>,
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse()
                    .unwrap_or(0)
            })
        })
        .unwrap_or(0)
}

/// An error with its causes: "error sending request" alone does not say whether the
/// connection was refused, reset or timed out.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

/// Calls open at once at most, below the server's default per-address cap of 256.
const IN_FLIGHT: usize = 192;

fn record_id(i: usize) -> String {
    format!("SOAK-{i:06}")
}

fn account(i: usize) -> String {
    format!("soak-{}", i % ACCOUNTS)
}

/// GET with retries: the service fails some calls on purpose.
async fn get_record(http: &reqwest::Client, service: &str, id: &str) -> Value {
    for _ in 0..50 {
        if let Ok(r) = http
            .get(format!("{service}/v1/subscriptions/{id}"))
            .send()
            .await
        {
            if r.status().is_success() {
                return r.json().await.unwrap_or(Value::Null);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{id} could not be read");
}

async fn create_record(http: &reqwest::Client, service: &str, i: usize) {
    Service {
        url: service.to_owned(),
        http: http.clone(),
    }
    .put_stop_renewal_record(&record_id(i), &account(i), "Soak Box")
    .await;
}

fn summary(body: &Value) -> String {
    let o = outcome_of(body);
    match (o["status"].as_str(), o["reason"].as_str()) {
        (Some(s), Some(r)) => format!("{s}/{r}"),
        (Some(s), None) => s.to_owned(),
        _ => "selected".to_owned(),
    }
}

const EXPECTED_APPLY: [&str; 6] = [
    "applied",
    "pending_verification/outcome_unknown",
    // An unknown outcome the service resolved: it never received the command (an injected
    // failure answered before it), and fenced the key.
    "failed/not_sent",
    "blocked/service_unavailable",
    "blocked/stale_at_service",
    "blocked/benefit_loss_hidden",
];

#[tokio::main]
async fn main() {
    let args = args();
    // Idle connections are dropped before the server's 30 s keep-alive closes them, so no
    // call is sent on a connection the server is closing.
    let server = Endpoint::with_client(&args.server, |b| {
        b.pool_idle_timeout(Duration::from_secs(10))
    });
    let in_flight = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let http = server.http.clone();
    let total = (args.rate * args.duration.as_secs_f64()) as usize;
    let applies = total * 40 / 100 + 16;
    eprintln!("soak: creating {applies} subscription records");
    for chunk in (0..applies).collect::<Vec<_>>().chunks(32) {
        futures_util::future::join_all(
            chunk
                .iter()
                .map(|&i| create_record(&http, &args.service, i)),
        )
        .await;
    }
    let stats = Arc::new(Mutex::new(Stats::default()));
    let next_record = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut rss = vec![(0u64, rss_kib(args.pid))];
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate));
    // Ticks missed while waiting for room are not made up in a burst.
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tasks = Vec::with_capacity(total);
    let mut last_sample = Instant::now();
    for n in 0..total {
        ticker.tick().await;
        if last_sample.elapsed() >= Duration::from_secs(5) {
            rss.push((started.elapsed().as_secs(), rss_kib(args.pid)));
            last_sample = Instant::now();
        }
        let (server, stats, next_record, service) = (
            server.clone(),
            stats.clone(),
            next_record.clone(),
            args.service.clone(),
        );
        let permit = in_flight
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        tasks.push(tokio::spawn(async move {
            let _permit = permit;
            let t = Instant::now();
            let (kind, result): (&'static str, Result<String, String>) = match n % 20 {
                0..=2 => (
                    "health",
                    match server
                        .http
                        .get(format!("{}/health", server.url))
                        .send()
                        .await
                    {
                        Ok(r) if r.status() == 200 => Ok("ok".into()),
                        Ok(r) => Err(format!("health: {}", r.status())),
                        Err(e) => Err(format!("health: {}", chain(&e))),
                    },
                ),
                3..=6 => {
                    let mut c = Chat::new(&format!("list-{n}"), Some(&account(n)));
                    c.user("what do I have?", "list_subscriptions", &[]);
                    (
                        "list",
                        match c.run(&server, "list_subscriptions").await {
                            Ok((200, body)) => Ok(summary(&body).replace("selected", "listed")),
                            Ok(other) => Err(format!("list: {other:?}")),
                            Err(e) => Err(format!("list: {}", chain(&e))),
                        },
                    )
                }
                7..=11 => {
                    let i = n % 16; // records 0..16 are read-only targets for selects
                    let mut c = Chat::new(&format!("select-{n}"), Some(&account(i)));
                    match c
                        .request_change(&server, &record_id(i), "stop_renewal")
                        .await
                    {
                        Ok(body) => ("select", Ok(summary(&body))),
                        Err(e) => ("select", Err(format!("select: {}", chain(&e)))),
                    }
                }
                _ => {
                    let i = 16 + next_record.fetch_add(1, Ordering::Relaxed);
                    let mut c = Chat::new(&format!("apply-{n}"), Some(&account(i)));
                    let flow = async {
                        c.request_change(&server, &record_id(i), "stop_renewal")
                            .await
                            .map_err(|e| chain(&e))?;
                        if c.slots.get("change_status") != Some(&json!("selected")) {
                            return Ok::<_, String>(format!(
                                "select {}",
                                c.slots
                                    .get("change_reason")
                                    .and_then(Value::as_str)
                                    .or_else(|| c
                                        .slots
                                        .get("change_status")
                                        .and_then(Value::as_str))
                                    .unwrap_or("?")
                            ));
                        }
                        c.user("yes", "affirm", &[]);
                        let request = c.request("apply_subscription_change");
                        let (s1, b1) = server.webhook(&request).await.map_err(|e| chain(&e))?;
                        let (s2, b2) = server.webhook(&request).await.map_err(|e| chain(&e))?;
                        if s1 != 200 || s2 != 200 {
                            return Err(format!("apply answered {s1}/{s2}"));
                        }
                        let (first, retry) = (summary(&b1), summary(&b2));
                        for o in [&first, &retry] {
                            if !EXPECTED_APPLY.contains(&o.as_str()) {
                                return Err(format!("apply: unexpected outcome {o}"));
                            }
                        }
                        if first == "applied" && retry != "applied" {
                            return Err(format!(
                                "apply: the retry of an applied change answered {retry}"
                            ));
                        }
                        c.record("apply_subscription_change", &b1);
                        let mut s = stats.lock().unwrap();
                        if first == "applied" || retry == "applied" {
                            s.applied.push(record_id(i));
                        } else if first.starts_with("pending") || retry.starts_with("pending") {
                            s.pending.push((record_id(i), c.clone()));
                        }
                        Ok(first)
                    };
                    ("apply", flow.await)
                }
            };
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            let mut s = stats.lock().unwrap();
            s.latencies.entry(kind).or_default().push(ms);
            match result {
                Ok(outcome) => *s.outcomes.entry(format!("{kind} {outcome}")).or_default() += 1,
                Err(e) => s.unexpected.push(e),
            }
            let _ = service;
        }));
    }
    for task in tasks {
        task.await.expect("a task panicked");
    }
    let elapsed = started.elapsed();
    rss.push((elapsed.as_secs(), rss_kib(args.pid)));

    // Resolve the pending ones whose change the service made, as the customer asking "did
    // it go through?" would: all at once, in rounds, until each has been reported. A
    // command the service never made stays pending until its grace period, which is fine;
    // asking about those too only crowded the rounds (each call meets the injected faults)
    // and let the deadline pass with made changes still unasked.
    let pending = std::mem::take(&mut stats.lock().unwrap().pending);
    // A command the client gave up on may still be at the service (its injected delay is
    // 2.5 s): let every one land before telling made from never made.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let reads = pending
        .iter()
        .map(|(id, _)| get_record(&http, &args.service, id));
    let made: Vec<bool> = futures_util::future::join_all(reads)
        .await
        .iter()
        .map(|record| record["revision"].as_i64() == Some(2))
        .collect();
    let (made, never_made): (Vec<_>, Vec<_>) =
        pending.into_iter().zip(made).partition(|(_, made)| *made);
    let mut pending: Vec<(String, Chat)> = made.into_iter().map(|(p, _)| p).collect();
    let mut resolved = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !pending.is_empty() && Instant::now() < deadline {
        let rounds = pending.into_iter().map(|(id, mut c)| {
            let (server, in_flight) = (server.clone(), in_flight.clone());
            async move {
                let _permit = in_flight.acquire().await.expect("never closed");
                c.user("did it go through?", "check", &[]);
                let applied = matches!(c.run(&server, "check_subscription_change").await, Ok((200, body)) if summary(&body) == "applied");
                (id, c, applied)
            }
        });
        let mut still = Vec::new();
        for (id, c, applied) in futures_util::future::join_all(rounds).await {
            if applied {
                stats.lock().unwrap().applied.push(id);
                resolved += 1;
            } else {
                still.push((id, c));
            }
        }
        pending = still;
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let unresolved = pending.len() + never_made.len();

    // No change made twice; every `applied` is a change at the service.
    let used = next_record.load(Ordering::Relaxed);
    // Read every record used, many at a time: the service still answers one call in twenty
    // 2.5 s late, so nearly every batch waits that long once; 512 at a time keeps the reads
    // to about twenty such waits (64 at a time took over five minutes).
    let ids: Vec<String> = (16..16 + used).map(record_id).collect();
    let mut revisions: BTreeMap<String, i64> = BTreeMap::new();
    for chunk in ids.chunks(512) {
        let reads = chunk.iter().map(|id| get_record(&http, &args.service, id));
        for (id, record) in chunk
            .iter()
            .zip(futures_util::future::join_all(reads).await)
        {
            revisions.insert(id.clone(), record["revision"].as_i64().unwrap_or(0));
        }
    }
    let changed = revisions.values().filter(|r| **r == 2).count();
    let doubled: Vec<String> = revisions
        .iter()
        .filter(|(_, r)| **r > 2)
        .map(|(id, r)| format!("{id} at r{r}"))
        .collect();
    let s = std::mem::take(&mut *stats.lock().unwrap());
    let unchanged_applied: Vec<&String> = s
        .applied
        .iter()
        .filter(|id| revisions.get(*id) != Some(&2))
        .collect();

    let requests: usize = s.latencies.values().map(Vec::len).sum();
    println!(
        "soak: {requests} requests in {:.0} s ({:.1}/s; target {}/s)",
        elapsed.as_secs_f64(),
        requests as f64 / elapsed.as_secs_f64(),
        args.rate
    );
    println!(
        "{:<8} {:>8} {:>9} {:>9} {:>9}",
        "kind", "count", "p50 ms", "p99 ms", "max ms"
    );
    for (kind, l) in &s.latencies {
        let mut l = l.clone();
        l.sort_by(f64::total_cmp);
        let q = |p: f64| l[((l.len() as f64 - 1.0) * p) as usize];
        println!(
            "{kind:<8} {:>8} {:>9.1} {:>9.1} {:>9.1}",
            l.len(),
            q(0.5),
            q(0.99),
            q(1.0)
        );
    }
    println!("outcomes:");
    for (k, n) in &s.outcomes {
        println!("  {n:>6}  {k}");
    }
    println!(
        "unexpected: {} ({:.2}% of requests)",
        s.unexpected.len(),
        100.0 * s.unexpected.len() as f64 / requests.max(1) as f64
    );
    for e in s.unexpected.iter().take(10) {
        println!("  {e}");
    }
    println!(
        "changes at the service: {changed} over {used} confirmations; reported applied: {} ({resolved} after a check; {unresolved} still pending, never made); doubled: {}",
        s.applied.len(),
        doubled.len()
    );
    println!(
        "server RSS over time (s: MiB): {}",
        rss.iter()
            .map(|(t, k)| format!("{t}: {:.1}", *k as f64 / 1024.0))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let half = rss.len() / 2;
    let first_max = rss[1.min(rss.len() - 1)..=half.max(1).min(rss.len() - 1)]
        .iter()
        .map(|(_, k)| *k)
        .max()
        .unwrap_or(0);
    let second_max = rss[half..].iter().map(|(_, k)| *k).max().unwrap_or(0);
    let flat = second_max as f64 <= first_max as f64 * 1.25 + 8.0 * 1024.0;
    let checks = [
        ("nothing failed unexpectedly", s.unexpected.is_empty()),
        ("no change made twice", doubled.is_empty()),
        (
            "every applied outcome is a change",
            unchanged_applied.is_empty(),
        ),
        ("every change was reported", changed == s.applied.len()),
        ("RSS flat", flat),
    ];
    let failed = checks.iter().filter(|(_, ok)| !ok).count();
    for (name, ok) in checks {
        println!("{} {name}", if ok { "ok    " } else { "FAILED" });
    }
    println!("{} passed, {} failed", checks.len() - failed, failed);
    std::process::exit(i32::from(failed > 0));
}
