//! Traces: each action call's span, continuing the W3C trace context Rasa sends (the HTTP
//! `traceparent` header, the same key in gRPC metadata), and, with the `otel` feature, the
//! layer that exports spans with OTLP over gRPC.
//!
//! A span is exported when its target ends in `::otel` ([`SPAN_TARGET`] is this crate's),
//! so an application adds its own spans to the call's trace with
//! `tracing::info_span!(target: "myapp::otel", ...)`; warnings and errors logged inside
//! such a span become its events. Everything else stays a log line only.

use tracing::Span;

use crate::protocol::WebhookRequest;

/// The target of the action call's span.
pub const SPAN_TARGET: &str = "actionserver::otel";

/// The header (and gRPC metadata key) that carries the caller's trace, and its companion.
pub(crate) const TRACEPARENT: &str = "traceparent";
pub(crate) const TRACESTATE: &str = "tracestate";

/// The trace context a call arrived with.
#[derive(Debug, Default, Clone, Copy)]
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(crate) struct Carrier<'a> {
    pub traceparent: Option<&'a str>,
    pub tracestate: Option<&'a str>,
}

/// How a call arrived: its span's name and transport attributes, as rasa-sdk names them
/// for HTTP and OpenTelemetry's RPC conventions for gRPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Http,
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))]
    Grpc,
}

/// The action call's span: `next_action`, `sender_id`, Rasa's `version` and the latest
/// message's `message_id`, as rasa-sdk records them; its parent the caller's span when the
/// call carried one. A disabled span (no exporter) costs only the check.
pub(crate) fn call_span(transport: Transport, request: &WebhookRequest<'_>, from: Carrier) -> Span {
    let next_action = request.next_action.as_deref().unwrap_or_default();
    let sender_id = request
        .tracker
        .as_ref()
        .map(|t| t.sender_id.as_str())
        .or(request.sender_id.as_deref())
        .unwrap_or_default();
    let version = request.version.as_deref().unwrap_or_default();
    let span = match transport {
        Transport::Http => tracing::info_span!(
            target: SPAN_TARGET,
            "create_app.webhook",
            otel.kind = "server",
            http.method = "POST",
            http.route = "/webhook",
            next_action,
            version,
            sender_id,
            message_id = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        ),
        Transport::Grpc => tracing::info_span!(
            target: SPAN_TARGET,
            "action_server_webhook.ActionService/Webhook",
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.service = "action_server_webhook.ActionService",
            rpc.method = "Webhook",
            next_action,
            version,
            sender_id,
            message_id = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        ),
    };
    if span.is_disabled() {
        return span;
    }
    if let Some(id) = request
        .tracker
        .as_ref()
        .and_then(|t| t.latest_message.get("message_id"))
        .and_then(|v| v.as_str())
    {
        span.record("message_id", id);
    }
    #[cfg(feature = "otel")]
    export::continue_trace(&span, from);
    #[cfg(not(feature = "otel"))]
    let _ = from;
    span
}

/// Marks the call's span failed, with the answer's reason.
pub(crate) fn failed(span: &Span, description: &str) {
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_description", description);
}

#[cfg(feature = "otel")]
pub use export::{current_traceparent, layer, TraceExport, Traces, TracesError};

#[cfg(feature = "otel")]
mod export {
    use std::collections::HashMap;
    use std::time::Duration;

    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use opentelemetry_sdk::Resource;
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    use tracing_subscriber::filter::filter_fn;
    use tracing_subscriber::registry::LookupSpan;
    use tracing_subscriber::Layer;

    use super::{Carrier, TRACEPARENT, TRACESTATE};

    /// One OTLP/gRPC collector to export spans to.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct TraceExport {
        /// `host:port` or a URL; without a scheme, `http://` when `insecure`, else
        /// `https://`.
        pub endpoint: String,
        /// Plain HTTP/2, no TLS.
        pub insecure: bool,
        /// PEM certificates the collector's TLS certificate must chain to; the system's
        /// roots are not consulted.
        pub root_certificates: Option<Vec<u8>>,
        /// Sent as `authorization: Basic …` with every export.
        pub basic_auth: Option<(String, String)>,
    }

    impl TraceExport {
        /// The endpoint with its scheme: its own when it has one (`insecure` must agree),
        /// else `http://` when `insecure` and `https://` when not.
        pub fn url(&self) -> String {
            if self.endpoint.contains("://") {
                self.endpoint.clone()
            } else if self.insecure {
                format!("http://{}", self.endpoint)
            } else {
                format!("https://{}", self.endpoint)
            }
        }
    }

    /// Why traces could not be set up.
    #[derive(Debug, thiserror::Error)]
    #[error("tracing: {0}")]
    pub struct TracesError(String);

    /// The exporting side: flush and stop it with [`Traces::shutdown`] before the process
    /// ends, or the last second's spans are lost.
    #[derive(Debug, Clone)]
    pub struct Traces {
        provider: SdkTracerProvider,
    }

    impl Traces {
        /// Sends what is queued and stops exporting; waits at most `timeout`.
        pub fn shutdown(&self, timeout: Duration) {
            if let Err(e) = self.provider.shutdown_with_timeout(timeout) {
                tracing::warn!(error = %e, "tracing: the last spans could not be exported");
            }
        }
    }

    /// The layer that exports spans whose target ends in `::otel` (and the warnings and
    /// errors logged inside them) to every collector in `exports`, under `service_name`,
    /// in batches. Call it inside a Tokio runtime: the gRPC channels live there.
    pub fn layer<S>(
        service_name: &str,
        exports: &[TraceExport],
    ) -> Result<(impl Layer<S> + Send + Sync + 'static, Traces), TracesError>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let mut provider = SdkTracerProvider::builder().with_resource(
            Resource::builder()
                .with_service_name(service_name.to_owned())
                .build(),
        );
        for export in exports {
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(export.url())
                .with_timeout(Duration::from_secs(10));
            // Over TLS, the collector's certificate chains to the given CA only, as
            // rasa-sdk's exporter has it, or else to one of the public roots.
            if !export.insecure {
                let tls = tonic::transport::ClientTlsConfig::new();
                builder = builder.with_tls_config(match &export.root_certificates {
                    Some(pem) => tls.ca_certificate(tonic::transport::Certificate::from_pem(pem)),
                    None => tls.with_webpki_roots(),
                });
            }
            if let Some((user, password)) = &export.basic_auth {
                use base64::Engine as _;
                let credentials =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                let mut metadata = tonic::metadata::MetadataMap::new();
                let value = format!("Basic {credentials}")
                    .parse()
                    .map_err(|_| TracesError("the username or password is not ASCII".into()))?;
                metadata.insert("authorization", value);
                builder = builder.with_metadata(metadata);
            }
            let exporter = builder
                .build()
                .map_err(|e| TracesError(format!("{}: {e}", export.endpoint)))?;
            provider = provider.with_batch_exporter(exporter);
        }
        let provider = provider.build();
        let tracer = provider.tracer("actionserver");
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_filter(
                filter_fn(|meta| {
                    if meta.is_span() {
                        meta.target().ends_with("::otel")
                    } else {
                        *meta.level() <= tracing::Level::WARN
                    }
                })
                .with_max_level_hint(tracing::Level::INFO),
            );
        Ok((layer, Traces { provider }))
    }

    /// Makes the caller's span the parent of `span`, when the call carried a valid one.
    pub(super) fn continue_trace(span: &Span, from: Carrier) {
        let Some(traceparent) = from.traceparent else {
            return;
        };
        let mut carrier = HashMap::with_capacity(2);
        carrier.insert(TRACEPARENT.to_owned(), traceparent.to_owned());
        if let Some(state) = from.tracestate {
            carrier.insert(TRACESTATE.to_owned(), state.to_owned());
        }
        let parent = TraceContextPropagator::new().extract(&carrier);
        let _ = span.set_parent(parent);
    }

    /// The current span's trace context as a `traceparent` value, for a call this one makes
    /// (so the service called continues the trace); `None` when nothing is traced.
    pub fn current_traceparent() -> Option<String> {
        let span = Span::current();
        if span.is_disabled() {
            return None;
        }
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(&span.context(), &mut carrier);
        carrier.remove(TRACEPARENT)
    }
}
