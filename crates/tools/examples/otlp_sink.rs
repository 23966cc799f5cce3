//! An OTLP/gRPC collector that only counts, for bench/traces.sh: built from the
//! OpenTelemetry project's own protocol definitions (no collector installs here), it
//! accepts every export and prints `otlp_sink spans=N exports=M` once a second.
//!
//! otlp_sink --port N

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

#[derive(Default)]
struct Counts {
    spans: AtomicU64,
    exports: AtomicU64,
}

struct Sink(Arc<Counts>);

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans: usize = request
            .get_ref()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.0.spans.fetch_add(spans as u64, Ordering::Relaxed);
        self.0.exports.fetch_add(1, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let port: u16 = match (args.next().as_deref(), args.next()) {
        (Some("--port"), Some(port)) => port.parse().expect("a port number"),
        _ => {
            eprintln!("usage: otlp_sink --port N");
            std::process::exit(2);
        }
    };
    let counts = Arc::new(Counts::default());
    let shown = counts.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            println!(
                "otlp_sink spans={} exports={}",
                shown.spans.load(Ordering::Relaxed),
                shown.exports.load(Ordering::Relaxed)
            );
        }
    });
    tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(Sink(counts)))
        .serve(([127, 0, 0, 1], port).into())
        .await
        .expect("the sink serves");
}
