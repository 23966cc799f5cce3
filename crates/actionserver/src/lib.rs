//! A Rasa-compatible custom action server, in Rust: the wire types Rasa sends and expects
//! ([`WebhookRequest`], [`Tracker`] and its [`RawEvent`]s, [`OutEvent`], [`Message`]), the
//! [`Action`] trait an action implements with a plain `async fn`, the [`Registry`] of
//! actions, and the HTTP server ([`serve`], [`ServerSettings`]) that speaks the
//! action-server protocol as rasa-sdk does (body decoding, the domain-digest exchange,
//! authentication, CORS, TLS, metrics, graceful shutdown, and JSON errors in one place) and,
//! with the `grpc` feature, Rasa Pro's gRPC ActionService from the same [`ActionServer`]. It
//! knows nothing of what the actions do. Everything public is re-exported here; the modules
//! behind it are private.
//!
//! ```no_run
//! use actionserver::{Action, ActionCall, ActionResult, Dispatcher, Message, OutEvent, Registry};
//!
//! struct Greet;
//!
//! impl Action for Greet {
//!     fn name(&self) -> &'static str {
//!         "action_greet"
//!     }
//!
//!     async fn run(&self, call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
//!         let name = call.tracker.get_slot("name").and_then(|v| v.as_str()).unwrap_or("there");
//!         dispatcher.utter(Message::text(format!("Hello, {name}!")));
//!         Ok(vec![OutEvent::slot("greeted", true)])
//!     }
//! }
//!
//! # async fn start() -> std::io::Result<()> {
//! let mut registry = Registry::default();
//! registry.register(Greet).expect("one action, one name");
//! let listener = std::net::TcpListener::bind("0.0.0.0:5055")?;
//! actionserver::serve(listener, registry, Default::default(), None)?.await
//! # }
//! ```

#![deny(missing_docs)]

mod action;
mod allocator;
mod forms;
#[cfg(feature = "grpc")]
mod grpc;
mod otel;
mod protocol;
mod server;
pub mod testing;

pub use action::{
    Action, ActionCall, ActionError, ActionResult, Dispatcher, DuplicateAction, RegisteredAction,
    Registry, State,
};
pub use allocator::keep_freed_memory;
pub use forms::{
    SlotContext, SlotValidator, SlotValues, ValidateForm, ValidateSlotMappings,
    ACTION_VALIDATE_SLOT_MAPPINGS, REQUESTED_SLOT,
};
#[cfg(feature = "grpc")]
pub use grpc::{
    convert as grpc_convert, proto as grpc_proto, status_of as grpc_status_of, GrpcError, GrpcTls,
    HEALTH_SERVICE_NAME,
};
pub use otel::SPAN_TARGET as TRACE_SPAN_TARGET;
#[cfg(feature = "otel")]
pub use otel::{current_traceparent, layer as trace_layer, TraceExport, Traces, TracesError};
pub use protocol::events::{
    ActionExecuted, BotUttered, EntitiesAdded, LoopInterrupted, Marker, Named, Reminder, SlotSet,
    UserUttered,
};
pub use protocol::tracker::ActiveLoop;
pub use protocol::{
    ActionResponse, Button, Event, EventKind, Fields, Message, OutEvent, RawEvent, RawJson, Slots,
    Tracker, WebhookRequest,
};
pub use server::body::decode as decode_body;
pub use server::tls;
pub use server::{
    paced_bodies, refuse_over_cap, serve, ActionServer, ApiError, BodyBudget, BodyLimits,
    CorsPolicy, HttpExtras, Pace, PeerLimit, ReadinessCheck, ServerSettings, DEFAULT_BODY_BUDGET,
};
