//! Rasa Pro's gRPC ActionService (`action_endpoint.url: grpc://host:port`), as rasa-sdk
//! 3.21.1 serves it with `--grpc`: `Webhook`, `WebhookStream`, `AckStreamChunks`,
//! `Actions`, and the standard health service with `ActionServer` serving. Every call goes
//! through the same executor as the HTTP webhook ([`ActionServer`]): the protobuf request
//! becomes the webhook's JSON, then one path runs the action. Errors are the statuses
//! Rasa reads: `NOT_FOUND` with a `ResourceNotFound` body (`resource_type` `ACTION` or
//! `DOMAIN`) in the status message, `INTERNAL` with `{action_name, message}` for a
//! rejection, `INVALID_ARGUMENT` for a malformed request, `UNAUTHENTICATED` without the
//! token. Nothing echoes the request.

pub mod convert;
mod incoming;
#[allow(clippy::all, unused_qualifications)]
pub mod proto;

use std::future::Future;
use std::net::TcpListener;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::Stream;
use prost::Message as _;
use serde_json::json;
use tonic::codec::{CompressionEncoding, SingleMessageCompressionOverride};
use tonic::metadata::MetadataMap;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic::{Request, Response, Status};

use crate::otel;
use crate::protocol::WebhookRequest;
use crate::server::body::Held;
use crate::server::{ActionServer, ApiError, Core};
use proto::action_service_server::{ActionService, ActionServiceServer};

/// The name rasa-sdk registers with the health service.
pub const HEALTH_SERVICE_NAME: &str = "ActionServer";

/// TLS for the gRPC listener, as PEM: the server's certificate chain and key, and, for
/// mutual TLS, the CA whose certificates clients must present (rasa-sdk's
/// `--ssl-ca-file`; Rasa's `ssl_client_cert`/`ssl_client_key`).
#[derive(Debug, Clone)]
pub struct GrpcTls {
    pub certificate: Vec<u8>,
    pub key: Vec<u8>,
    pub client_ca: Option<Vec<u8>>,
}

/// Why the gRPC server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum GrpcError {
    #[error("the gRPC listener: {0}")]
    Io(#[from] std::io::Error),
    #[error("the gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
}

impl ActionServer {
    /// Serves the ActionService on a bound listener until `shutdown` completes; then it
    /// stops accepting and lets calls in flight finish. A message is bounded by the
    /// settings' decompressed limit, as decoded (gzip is accepted and sent, as Rasa sends
    /// it), and its JSON form takes its share of the body budget while it is served.
    pub async fn grpc(
        &self,
        listener: TcpListener,
        tls: Option<GrpcTls>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), GrpcError> {
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let settings = &self.core.settings;
        let incoming = incoming::incoming(
            listener,
            incoming::ConnectionLimits {
                per_listener: settings.max_connections_per_worker,
                per_peer: settings.max_connections_per_peer,
                first_bytes: settings.first_bytes,
            },
        );
        // One limit in gRPC: on the message as decoded (decompressed), and on its frame.
        let limit = self.core.settings.limits.max_decompressed;
        // The token is checked on the call's metadata before its message is read.
        let gate = self.core.clone();
        let service = ActionServiceServer::from_arc(Arc::new(Grpc {
            core: self.core.clone(),
        }))
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(limit)
        .max_encoding_message_size(usize::MAX);
        let service = tonic::service::interceptor::InterceptedService::new(
            service,
            move |request: Request<()>| {
                authorize(&gate, request.metadata()).inspect_err(|status| {
                    gate.metrics
                        .record("grpc", "", http_status(status.code()), Duration::ZERO);
                    tracing::info!(code = ?status.code(), "refused: no valid token");
                })?;
                Ok(request)
            },
        );
        // NOT_SERVING until the readiness check first passes, whenever it fails, and from
        // the moment the server starts stopping; checked every second.
        let (health, health_service) = tonic_health::server::health_reporter();
        let status = |ready: bool| {
            if ready {
                tonic_health::ServingStatus::Serving
            } else {
                tonic_health::ServingStatus::NotServing
            }
        };
        for name in [HEALTH_SERVICE_NAME, ""] {
            health.set_service_status(name, status(false)).await;
        }
        let poll = {
            let core = self.core.clone();
            let health = health.clone();
            tokio::spawn(async move {
                let mut last = None;
                loop {
                    let ready = core.readiness.now().await;
                    if last != Some(ready.is_ok()) {
                        if let Err(reason) = &ready {
                            tracing::info!(%reason, "gRPC health: NOT_SERVING");
                        }
                        for name in [HEALTH_SERVICE_NAME, ""] {
                            health.set_service_status(name, status(ready.is_ok())).await;
                        }
                        last = Some(ready.is_ok());
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            })
        };
        let _poll = AbortOnDrop(poll);
        let core = self.core.clone();
        let shutdown = async move {
            shutdown.await;
            core.readiness.drain();
            for name in [HEALTH_SERVICE_NAME, ""] {
                health.set_service_status(name, status(false)).await;
            }
        };
        // Windows large enough that a tracker of thousands of events arrives without a
        // round trip per 64 KiB; they bound what a client may send ahead, not memory held.
        // Idle connections do not stay for good: pings a client must answer, and every
        // connection closed (after its calls finish) once it is five minutes old.
        let mut builder = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(60)))
            .http2_keepalive_timeout(Some(Duration::from_secs(20)))
            .max_connection_age(Duration::from_secs(300))
            .max_connection_age_grace(Duration::from_secs(30))
            .initial_stream_window_size(Some(4 << 20))
            .initial_connection_window_size(Some(8 << 20))
            .tcp_nodelay(true);
        if let Some(tls) = tls {
            let mut config =
                ServerTlsConfig::new().identity(Identity::from_pem(&tls.certificate, &tls.key));
            if let Some(ca) = &tls.client_ca {
                config = config.client_ca_root(Certificate::from_pem(ca));
            }
            builder = builder.tls_config(config)?;
        }
        builder
            .add_service(health_service)
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await?;
        Ok(())
    }
}

/// Stops a task when the server that spawned it returns.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The ActionService over the shared core.
struct Grpc {
    core: Arc<Core>,
}

/// Answers smaller than this go uncompressed even to a client that accepts gzip: setting up
/// a gzip stream (its window and tables, a few hundred KiB zeroed) costs more CPU than the
/// bytes it saves, for the few hundred bytes most answers are.
const COMPRESS_ABOVE: usize = 16 * 1024;

/// A response, compressed only when it is large enough to gain from it.
fn answer<T>(message: T, size: usize) -> Response<T> {
    let mut response = Response::new(message);
    if size < COMPRESS_ABOVE {
        response
            .extensions_mut()
            .insert(SingleMessageCompressionOverride::Disable);
    }
    response
}

/// The route label of each method in the metrics.
const WEBHOOK_ROUTE: &str = "grpc:Webhook";
const STREAM_ROUTE: &str = "grpc:WebhookStream";
const ACTIONS_ROUTE: &str = "grpc:Actions";
const ACK_ROUTE: &str = "grpc:AckStreamChunks";

/// The token, from the metadata Rasa sends as the endpoint's `headers:`: the token name
/// (`token` by default) or `authorization: Bearer`.
fn authorize(core: &Core, metadata: &MetadataMap) -> Result<(), Status> {
    let named = metadata
        .get(core.settings.token_name.to_ascii_lowercase().as_str())
        .and_then(|v| v.to_str().ok());
    let bearer = metadata
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    if core.token_accepted([named, bearer].into_iter().flatten()) {
        Ok(())
    } else {
        Err(Status::unauthenticated("a valid token is required"))
    }
}

impl Grpc {
    /// Decodes, runs, answers: the webhook's one path, from the protobuf request.
    async fn run(
        &self,
        call: &Request<proto::WebhookRequest>,
    ) -> Result<Option<proto::WebhookResponse>, ApiError> {
        let request = call.get_ref();
        let body = convert::request_to_json_bytes(request);
        // The decoded request's share of the body budget, held until the answer is made.
        let mut held = Held::default();
        self.core.budget.cover(&mut held, body.len())?;
        let parsed = match WebhookRequest::parse(&body) {
            Ok(Some(parsed)) => parsed,
            Ok(None) => return Err(ApiError::bad_request("Invalid body request", None)),
            Err(e) => {
                let name = Some(request.next_action.clone()).filter(|n| !n.is_empty());
                if let Some(name) = &name {
                    if self.core.registry.get(name).is_none() {
                        return Err(ApiError::UnknownAction(name.clone()));
                    }
                }
                return Err(ApiError::bad_request(
                    format!("invalid request: {}", crate::server::errors::describe(&e)),
                    name,
                ));
            }
        };
        let metadata = |key: &str| call.metadata().get(key).and_then(|v| v.to_str().ok());
        let from = otel::Carrier {
            traceparent: metadata(otel::TRACEPARENT),
            tracestate: metadata(otel::TRACESTATE),
        };
        let answer = self
            .core
            .execute(&parsed, otel::Transport::Grpc, from)
            .await?;
        Ok(answer.map(|answer| {
            convert::response_from_json(
                &serde_json::to_value(answer).expect("an answer serialises"),
            )
        }))
    }

    fn record(
        &self,
        route: &'static str,
        action: &str,
        status: &Result<(), Status>,
        started: Instant,
    ) {
        let code = match status {
            Ok(()) => tonic::Code::Ok,
            Err(s) => s.code(),
        };
        let action = self.core.call_info(action).action;
        self.core
            .metrics
            .record(route, action, http_status(code), started.elapsed());
        tracing::info!(route, action, code = ?code, ms = started.elapsed().as_secs_f64() * 1000.0, "served");
    }
}

/// The HTTP status a gRPC code stands for (as gRPC's HTTP gateways map them), so the
/// metrics' `status` label means the same for both transports: alerts on 4xx and 5xx count
/// gRPC failures too.
fn http_status(code: tonic::Code) -> u16 {
    use tonic::Code::*;
    match code {
        Ok => 200,
        InvalidArgument | FailedPrecondition | OutOfRange => 400,
        Unauthenticated => 401,
        PermissionDenied => 403,
        NotFound => 404,
        AlreadyExists | Aborted => 409,
        ResourceExhausted => 429,
        Cancelled => 499,
        Unimplemented => 501,
        Unavailable => 503,
        DeadlineExceeded => 504,
        Unknown | Internal | DataLoss => 500,
    }
}

/// An error as the status rasa-sdk sends for it.
pub fn status_of(error: &ApiError) -> Status {
    let not_found = |name: &str, kind: &str| {
        Status::not_found(
            json!({"action_name": name, "message": error.to_string(), "resource_type": kind})
                .to_string(),
        )
    };
    match error {
        ApiError::UnknownAction(name) => not_found(name, "ACTION"),
        ApiError::DomainMissing(name) => not_found(name, "DOMAIN"),
        ApiError::Rejected {
            message,
            action_name,
        } => Status::internal(json!({"action_name": action_name, "message": message}).to_string()),
        ApiError::ActionFailed { action_name, .. } | ApiError::TimedOut { action_name, .. } => {
            Status::internal(
                json!({"action_name": action_name, "message": error.to_string()}).to_string(),
            )
        }
        ApiError::Unauthorized => Status::unauthenticated(error.to_string()),
        ApiError::TooLarge { .. } | ApiError::Busy(_) => {
            Status::resource_exhausted(error.to_string())
        }
        ApiError::Unavailable => Status::unavailable(error.to_string()),
        ApiError::TooSlow => Status::deadline_exceeded(error.to_string()),
        ApiError::BadRequest { .. }
        | ApiError::UnsupportedEncoding(_)
        | ApiError::NotFound
        | ApiError::MethodNotAllowed(_) => Status::invalid_argument(error.to_string()),
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<proto::WebhookStreamEvent, Status>> + Send>>;

#[tonic::async_trait]
impl ActionService for Grpc {
    async fn webhook(
        &self,
        request: Request<proto::WebhookRequest>,
    ) -> Result<Response<proto::WebhookResponse>, Status> {
        let started = Instant::now();
        let result = self
            .run(&request)
            .await
            .map(Option::unwrap_or_default)
            .map_err(|e| status_of(&e));
        let outcome = result.as_ref().map(|_| ()).map_err(Clone::clone);
        self.record(
            WEBHOOK_ROUTE,
            &request.get_ref().next_action,
            &outcome,
            started,
        );
        result.map(|message| {
            let size = message.encoded_len();
            answer(message, size)
        })
    }

    type WebhookStreamStream = EventStream;

    /// Our actions do not stream: as rasa-sdk answers for a non-streaming action, the
    /// stream carries the final result (its events and responses), or one error event
    /// and then the error's status.
    async fn webhook_stream(
        &self,
        request: Request<proto::WebhookRequest>,
    ) -> Result<Response<EventStream>, Status> {
        use proto::webhook_stream_event::Event;
        let started = Instant::now();
        let name = request.get_ref().next_action.clone();
        let items: Vec<Result<proto::WebhookStreamEvent, Status>> = match self.run(&request).await {
            Ok(Some(answer)) => vec![Ok(proto::WebhookStreamEvent {
                event: Some(Event::FinalResult(answer)),
            })],
            Ok(None) => Vec::new(),
            Err(e) => {
                let status = status_of(&e);
                let error = proto::StreamError {
                    action_name: name.clone(),
                    message: e.to_string(),
                };
                vec![
                    Ok(proto::WebhookStreamEvent {
                        event: Some(Event::Error(error)),
                    }),
                    Err(status),
                ]
            }
        };
        let outcome = match items.last() {
            Some(Err(status)) => Err(status.clone()),
            _ => Ok(()),
        };
        self.record(STREAM_ROUTE, &name, &outcome, started);
        let size = items
            .iter()
            .map(|i| i.as_ref().map_or(0, |e| e.encoded_len()))
            .sum();
        Ok(answer(Box::pin(futures_util::stream::iter(items)), size))
    }

    /// Nothing streams, so there is nothing to stop: the acknowledgement succeeds.
    async fn ack_stream_chunks(
        &self,
        _: Request<proto::StreamChunkAck>,
    ) -> Result<Response<()>, Status> {
        self.record(ACK_ROUTE, "", &Ok(()), Instant::now());
        Ok(answer((), 0))
    }

    async fn actions(
        &self,
        _: Request<proto::ActionsRequest>,
    ) -> Result<Response<proto::ActionsResponse>, Status> {
        let actions: Vec<_> = self
            .core
            .registry
            .names()
            .iter()
            .map(|name| {
                convert::json_to_struct(json!({"name": name}).as_object().expect("an object"))
            })
            .collect();
        self.record(ACTIONS_ROUTE, "", &Ok(()), Instant::now());
        let message = proto::ActionsResponse { actions };
        let size = message.encoded_len();
        Ok(answer(message, size))
    }
}
