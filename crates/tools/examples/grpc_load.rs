//! The gRPC side of bench/run.sh: closed-loop load on an ActionService (`Webhook`), as wrk
//! drives the webhook. Each of `--connections` clients has its own HTTP/2 connection and
//! sends the same request (the webhook body in `--body`, converted once, as Rasa Pro's
//! `ParseDict` does) again as soon as the answer is in, gzip both ways as Rasa Pro's channel
//! has it.
//!
//! grpc_load --port PORT --body FILE [--duration SECS] [--connections N] [--threads N]
//!           [--gzip true|false]
//! grpc_load --port PORT --body FILE --check EXPECTED
//!
//! Prints `RESULT <requests/s> <p50 us> <p99 us> <requests> <errors> 0`, the line
//! bench/post_body.lua prints for wrk. With `--check`, one call whose answer must be
//! `SlotSet("event_count", EXPECTED)`, or the health of `ActionServer` until it serves.

use std::time::{Duration, Instant};

use actionserver::grpc_convert::{request_from_json, response_to_json};
use actionserver::grpc_proto::action_service_client::ActionServiceClient;
use tonic::codec::CompressionEncoding;
use tonic::transport::Channel;

struct Args {
    port: u16,
    body: String,
    duration: Duration,
    connections: usize,
    threads: usize,
    check: Option<u64>,
    gzip: bool,
}

fn args() -> Args {
    let mut a = Args {
        port: 0,
        body: String::new(),
        duration: Duration::from_secs(10),
        connections: 16,
        threads: 2,
        check: None,
        gzip: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--port" => a.port = value.parse().expect("--port"),
            "--body" => a.body = value,
            "--duration" => {
                a.duration = Duration::from_secs_f64(value.parse().expect("--duration"))
            }
            "--connections" => a.connections = value.parse().expect("--connections"),
            "--threads" => a.threads = value.parse().expect("--threads"),
            "--check" => a.check = Some(value.parse().expect("--check")),
            "--gzip" => a.gzip = value.parse().expect("--gzip true|false"),
            other => panic!("unknown flag {other}"),
        }
    }
    assert!(
        a.port != 0 && !a.body.is_empty(),
        "--port and --body are required"
    );
    a
}

async fn client(
    port: u16,
    gzip: bool,
) -> Result<ActionServiceClient<Channel>, tonic::transport::Error> {
    let channel = Channel::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("a URL")
        .initial_stream_window_size(Some(4 << 20))
        .initial_connection_window_size(Some(8 << 20))
        .connect()
        .await?;
    let client = ActionServiceClient::new(channel).max_decoding_message_size(256 << 20);
    Ok(if gzip {
        client
            .send_compressed(CompressionEncoding::Gzip)
            .accept_compressed(CompressionEncoding::Gzip)
    } else {
        client
    })
}

fn main() {
    let a = args();
    let body: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&a.body).expect("--body")).expect("JSON");
    let request = request_from_json(&body);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.threads)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        if let Some(expected) = a.check {
            let mut grpc = client(a.port, a.gzip).await.expect("the server accepts");
            let answer = grpc.webhook(request).await.expect("the call succeeds");
            let answer = response_to_json(answer.get_ref());
            let events = answer["events"].as_array().expect("events");
            assert_eq!(events.len(), 1, "{answer}");
            assert_eq!(events[0]["name"], "event_count", "{answer}");
            assert_eq!(
                events[0]["value"].as_f64(),
                Some(expected as f64),
                "{answer}"
            );
            println!("ok");
            return;
        }
        let deadline = Instant::now() + a.duration;
        let started = Instant::now();
        let workers = (0..a.connections).map(|_| {
            let request = request.clone();
            tokio::spawn(async move {
                let mut grpc = client(a.port, a.gzip).await.expect("the server accepts");
                let (mut latencies, mut errors) = (Vec::new(), 0u64);
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    match grpc.webhook(request.clone()).await {
                        Ok(_) => latencies.push(sent.elapsed().as_micros() as u64),
                        Err(_) => errors += 1,
                    }
                }
                (latencies, errors)
            })
        });
        let mut latencies = Vec::new();
        let mut errors = 0;
        for worker in futures_util::future::join_all(workers).await {
            let (l, e) = worker.expect("a worker");
            latencies.extend(l);
            errors += e;
        }
        let seconds = started.elapsed().as_secs_f64();
        latencies.sort_unstable();
        let pct = |p: f64| {
            latencies
                .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0)
        };
        println!(
            "RESULT {:.2} {} {} {} {} 0",
            latencies.len() as f64 / seconds,
            pct(0.50),
            pct(0.99),
            latencies.len(),
            errors
        );
    });
}
