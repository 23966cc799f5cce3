//! The bottom of the workspace: what both sides of the subscription service agree on
//! (CONTRACT.md section 6: records, options, changes, tags, the effective text, change
//! events and their signature: [`model`], [`events`]) and the vocabulary actiongate
//! persists and answers with (terms, outcome, status, reason: [`outcome`]; an operation's
//! state: [`operation`]). The product and the reference service both depend on it; neither
//! depends on the other for these.

pub mod events;
pub mod model;
pub mod operation;
pub mod outcome;
