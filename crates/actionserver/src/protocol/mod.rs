//! The Rasa action-server wire types: the webhook request, the tracker, its events, and
//! the answer (`{events, responses}`), parsed once at the boundary.
//!
//! Trackers are large (Rasa sends the whole history on every call), so events are kept as
//! raw JSON and only their kind and timestamp are read up front; an event is parsed into
//! its typed form only when something asks for it. Re-serialising a tracker writes back
//! exactly the bytes that arrived.

pub mod events;
pub mod fields;
pub mod message;
pub mod request;
pub mod scan;
pub mod tracker;

pub use events::{Event, EventKind, OutEvent, RawEvent};
pub use fields::Fields;
pub use message::{ActionResponse, Button, Message};
pub use request::WebhookRequest;
pub use scan::RawJson;
pub use tracker::{Slots, Tracker};
