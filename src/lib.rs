//! actiongate: a Rasa-compatible custom action server that will not let an assistant act
//! on an outdated confirmation.
//!
//! One request travels: the generic `actionserver` crate (crates/actionserver/: HTTP, body
//! decoding, auth, errors, the wire types; it knows nothing of subscriptions) → an action
//! from [`actions`] → for a subscription change:
//! [`conversation`] (what the customer was asked and answered), [`consent`] (the guard,
//! the only maker of a confirmed change), [`subscriptions`] (the service's client, and
//! the embedded service) and [`store`] (operations, audit, rate limits) → events and
//! responses back to Rasa. Beside it, [`events`] receives what the service says happened
//! (signed change events) on a port of its own.

pub mod actions;
pub mod app;
pub mod cli;
pub mod commands;
pub mod config;
pub mod consent;
pub mod console;
pub mod conversation;
pub mod events;
pub mod store;
pub mod subscriptions;
pub mod telemetry;
