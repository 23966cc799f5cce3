//! The subscription service as the actions see it: the client they use ([`client`]); its
//! records and commands ([`model`]) and the embedded implementation of its HTTP contract
//! ([`embedded`]), which `actiongate serve` runs unless a service URL is given, come from the
//! `subscription-service` crate (crates/subscription-service/), as do the signed change events
//! it delivers ([`events`]).

pub mod client;
pub use subscription_service::{embedded, events, model};

pub use client::{
    CommandOutcome, ServiceClient, ServiceError, DEFAULT_MAX_IN_FLIGHT, MAX_ANSWER_BYTES,
};
pub use model::{Change, ChangeOption, Note, Subscription};
