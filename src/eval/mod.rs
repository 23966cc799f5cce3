//! Replaying conversations against the real server: the conversation builder
//! ([`script`]) and the consent matrix with its naive baseline ([`matrix`]).

pub mod script;
