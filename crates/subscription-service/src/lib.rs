//! The reference subscription service: a real HTTP implementation of the contract the
//! action server talks to (CONTRACT.md section 6) with its records in SQLite, the demo data,
//! and fault injection for soak and fault tests ([`embedded`]); and the records and
//! commands as that contract carries them ([`model`]), shared with the server's client; and
//! the signed change events it delivers ([`events`]); and SQLite's checkpoints off the
//! requests' connection ([`checkpoints`]), the service's and actiongate's store's.
//! `actiongate serve` starts it in-process unless a service URL is given;
//! `actiongate subscription-service` runs it alone.

pub mod checkpoints;
pub mod embedded;
// The records, commands and events are the contract's (crates/contract), re-exported where
// the service's callers have always found them.
pub use contract::{events, model};
