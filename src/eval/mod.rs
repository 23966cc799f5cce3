//! Replaying conversations against the real server: the conversation builder
//! ([`script`]), and the consent matrix ([`matrix`]) with its naive baseline
//! ([`baseline`]).

pub mod baseline;
pub mod matrix;
pub mod script;
