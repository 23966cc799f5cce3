//! The apply path end to end, for bench/run.sh: closed-loop load in which every iteration is
//! one real change. A worker takes a fresh subscription record, sends
//! `select_subscription_change` (which asks the service for the offer), records the
//! confirmation question and the customer's "yes" as Rasa would, then sends
//! `apply_subscription_change` (which reads the record again, compares, and sends the
//! command). Every apply must answer `applied`; the service must hold exactly one change per
//! record afterwards.
//!
//! apply_load --server URL[,URL...] --service URL [--duration SECS] [--concurrency N]
//!            [--records N] [--first-record N] [--cpu-pid PID[,PID...]]
//!            [--service-pid PID]
//!
//! With more than one server (replicas of one store), each change is selected on one and
//! applied on the next, so every "yes" lands on a replica that did not ask the question.
//! Prints one line a step, `apply_load STEP count=N per_s=R p50_ms=A p99_ms=B cpu_us=C`,
//! for `select`, `apply` and `pair` (select then apply; C is the CPU time the processes
//! `--cpu-pid` used together per pair, 0 without it; the pair's line also gives the CPU the
//! service's process (`--service-pid`) and this load used per pair, `service_cpu_us=S
//! load_cpu_us=L`, so what the machine spends on a change is read in one run), and exits
//! non-zero on any unexpected answer.
//! Records (numbered from `--first-record`, so runs against one service don't meet) are
//! created before the clock starts (`--records`, default 12,000); a run that uses them all
//! up stops early and says so.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::{Chat, Endpoint, Service};

struct Args {
    servers: Vec<String>,
    service: String,
    duration: Duration,
    concurrency: usize,
    records: usize,
    first_record: usize,
    cpu_pids: Vec<u32>,
    service_pid: Option<u32>,
}

fn args() -> Args {
    let mut a = Args {
        servers: Vec::new(),
        service: String::new(),
        duration: Duration::from_secs(10),
        concurrency: 16,
        records: 12_000,
        first_record: 0,
        cpu_pids: Vec::new(),
        service_pid: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--server" => a.servers = value.split(',').map(str::to_owned).collect(),
            "--service" => a.service = value,
            "--duration" => a.duration = Duration::from_secs(value.parse().expect("--duration")),
            "--concurrency" => a.concurrency = value.parse().expect("--concurrency"),
            "--records" => a.records = value.parse().expect("--records"),
            "--first-record" => a.first_record = value.parse().expect("--first-record"),
            "--cpu-pid" => {
                a.cpu_pids = value
                    .split(',')
                    .map(|p| p.parse().expect("--cpu-pid"))
                    .collect()
            }
            "--service-pid" => a.service_pid = Some(value.parse().expect("--service-pid")),
            other => panic!("unknown flag {other}"),
        }
    }
    assert!(
        !a.servers.is_empty() && !a.service.is_empty(),
        "--server and --service are required"
    );
    a
}

fn record_id(i: usize) -> String {
    format!("LOAD-{i:06}")
}

fn account(i: usize) -> String {
    format!("load-{}", i % 50)
}

async fn create_record(http: &reqwest::Client, service: &str, i: usize) {
    Service {
        url: service.to_owned(),
        http: http.clone(),
    }
    .put_stop_renewal_record(&record_id(i), &account(i), "Load Box")
    .await;
}

/// Changes the service holds for a record (its revision counts them: 1 when untouched).
async fn revision(http: &reqwest::Client, service: &str, i: usize) -> i64 {
    let r = http
        .get(format!("{service}/v1/subscriptions/{}", record_id(i)))
        .send()
        .await
        .expect("the service answers");
    let body: Value = r.json().await.expect("a record");
    body["revision"].as_i64().unwrap_or(-1)
}

#[derive(Default)]
struct Timings {
    select: Vec<f64>,
    apply: Vec<f64>,
    pair: Vec<f64>,
    unexpected: Vec<String>,
}

/// User + system CPU time of a process, in microseconds.
fn cpu_us(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces) start at state (field 3).
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<f64>().ok())
        .sum();
    // Linux reports these in USER_HZ, 100 per second on every platform it runs on.
    ticks * 10_000.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// One iteration: select on one server, then apply on another (or the same, when there is
/// one) for record `i`; the two latencies, in ms.
async fn change(servers: &[Endpoint], i: usize) -> Result<(f64, f64), String> {
    let server = &servers[i % servers.len()];
    let mut c = Chat::new(&format!("load-{i}"), Some(&account(i)));
    let t = Instant::now();
    c.request_change(server, &record_id(i), "stop_renewal")
        .await
        .map_err(|e| format!("select: {e}"))?;
    let select_ms = t.elapsed().as_secs_f64() * 1000.0;
    if c.slots.get("change_status") != Some(&json!("selected")) {
        return Err(format!("select of {} answered {:?}", record_id(i), c.slots));
    }
    c.user("yes", "affirm", &[]);
    let request = c.request_bytes("apply_subscription_change");
    let server = &servers[(i + 1) % servers.len()];
    let t = Instant::now();
    let (status, body) = server
        .webhook_bytes(request)
        .await
        .map_err(|e| format!("apply: {e}"))?;
    let apply_ms = t.elapsed().as_secs_f64() * 1000.0;
    let applied = body["events"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|e| e["name"] == "change_status" && e["value"] == "applied");
    if status != 200 || !applied {
        return Err(format!(
            "apply of {} answered {status}: {body}",
            record_id(i)
        ));
    }
    Ok((select_ms, apply_ms))
}

// The load shares the machine's cores with the server it measures and the service, so it
// spends as little of them as it can: one thread (16 customers wait on sockets, not on CPU)
// and actiongate's allocator. On tokio's multi-threaded runtime with glibc's malloc it
// spent 165–186 µs a change on 2 cores; like this 103–118, and the servers beside it got
// the difference.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = args();
    let servers: Arc<[Endpoint]> = args.servers.iter().map(|s| Endpoint::new(s)).collect();
    let http = servers[0].http.clone();
    let range = args.first_record..args.first_record + args.records;
    eprintln!("apply_load: creating {} subscription records", args.records);
    for chunk in range.clone().collect::<Vec<_>>().chunks(64) {
        futures_util::future::join_all(
            chunk
                .iter()
                .map(|&i| create_record(&http, &args.service, i)),
        )
        .await;
    }
    let timings = Arc::new(Mutex::new(Timings::default()));
    let next = Arc::new(AtomicUsize::new(range.start));
    let cpu_of = |pids: &[u32]| pids.iter().map(|&p| cpu_us(p)).sum::<f64>();
    let others = |pid: Option<u32>| [pid.map_or(0.0, cpu_us), cpu_us(std::process::id())];
    let cpu_before = cpu_of(&args.cpu_pids);
    let others_before = others(args.service_pid);
    let started = Instant::now();
    let workers: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let (servers, timings, next) = (servers.clone(), timings.clone(), next.clone());
            let (duration, end) = (args.duration, range.end);
            tokio::spawn(async move {
                while started.elapsed() < duration {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= end {
                        break;
                    }
                    let result = change(&servers, i).await;
                    let mut t = timings.lock().unwrap();
                    match result {
                        Ok((select, apply)) => {
                            t.select.push(select);
                            t.apply.push(apply);
                            t.pair.push(select + apply);
                        }
                        Err(e) => t.unexpected.push(e),
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("a worker panicked");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_of(&args.cpu_pids) - cpu_before;
    let others_after = others(args.service_pid);
    let (service_cpu, load_cpu) = (
        others_after[0] - others_before[0],
        others_after[1] - others_before[1],
    );
    let used = next.load(Ordering::Relaxed).min(range.end);
    if used >= range.end {
        eprintln!(
            "apply_load: all {} records used after {elapsed:.1} s",
            args.records
        );
    }
    let mut t = std::mem::take(&mut *timings.lock().unwrap());

    // Exactly one change per record that answered `applied`, none on the others.
    let (mut doubled, mut changed) = (0, 0);
    for chunk in (range.start..used).collect::<Vec<_>>().chunks(64) {
        let revisions = futures_util::future::join_all(
            chunk.iter().map(|&i| revision(&http, &args.service, i)),
        )
        .await;
        doubled += revisions.iter().filter(|&&r| r > 2).count();
        changed += revisions.iter().filter(|&&r| r == 2).count();
    }
    if changed != t.apply.len() {
        t.unexpected.push(format!(
            "{} applies answered `applied`, the service made {changed} changes",
            t.apply.len()
        ));
    }
    for (name, samples) in [
        ("select", &mut t.select),
        ("apply", &mut t.apply),
        ("pair", &mut t.pair),
    ] {
        samples.sort_by(f64::total_cmp);
        let per = |total: f64| total / samples.len().max(1) as f64;
        let others = if name == "pair" {
            format!(
                " service_cpu_us={:.0} load_cpu_us={:.0}",
                per(service_cpu),
                per(load_cpu)
            )
        } else {
            String::new()
        };
        println!(
            "apply_load {name} count={} per_s={:.1} p50_ms={:.2} p99_ms={:.2} cpu_us={:.0}{others}",
            samples.len(),
            samples.len() as f64 / elapsed,
            percentile(samples, 0.50),
            percentile(samples, 0.99),
            per(cpu),
        );
    }
    for e in t.unexpected.iter().take(5) {
        eprintln!("apply_load: unexpected: {e}");
    }
    if !t.unexpected.is_empty() || doubled > 0 {
        eprintln!(
            "apply_load: {} unexpected answers, {doubled} records changed more than once",
            t.unexpected.len()
        );
        std::process::exit(1);
    }
}
