//! The subscription service as the actions see it: the [`provider`] trait they reach it
//! through and its first implementation, the client of section 6 ([`client`]); its
//! records and commands ([`model`]) and the embedded implementation of its HTTP contract
//! ([`embedded`]), which `actiongate serve` runs unless a service URL is given, come from the
//! `subscription-service` crate (crates/subscription-service/), as do the signed change events
//! it delivers ([`events`]).

pub mod client;
pub mod provider;
pub mod stripe;
pub use contract::{events, model};
pub use subscription_service::embedded;

pub use client::{ServiceClient, DEFAULT_MAX_IN_FLIGHT, MAX_ANSWER_BYTES};
pub use model::{Change, ChangeOption, Note, Subscription};
pub use provider::{CommandOutcome, KeyState, Provider, ServiceError};
