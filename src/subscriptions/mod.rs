//! The subscription service: its records and commands ([`model`]), the client the
//! actions use ([`client`]), and the embedded implementation of its HTTP contract
//! ([`embedded`]) that `actiongate serve` runs unless a service URL is given.

pub mod client;
pub mod embedded;
pub mod model;

pub use client::{
    CommandOutcome, ServiceClient, ServiceError, DEFAULT_MAX_IN_FLIGHT, MAX_ANSWER_BYTES,
};
pub use model::{Change, ChangeOption, Note, Subscription};
