//! The guard: the checks of CONTRACT.md section 4, in order, in one place; the only
//! maker of a [`ConfirmedChange`], which is the only way to send a command.

mod guard;
pub mod identity;
pub mod outcome;

pub use guard::{
    check_conversation, compare_facts, current_terms, request_key, ApplyInputs, Confirmation,
    ConfirmedChange, Guard, Memory,
};
pub use identity::IdentityConfig;
pub use outcome::{Outcome, Reason, Status, Terms};

use std::time::Duration;

/// The per-account budget for irreversible changes.
#[derive(Debug, Clone, Copy)]
pub struct RateLimit {
    /// Changes allowed in a burst.
    pub capacity: f64,
    /// Tokens added per second.
    pub per_second: f64,
}

impl Default for RateLimit {
    fn default() -> Self {
        Self {
            capacity: 5.0,
            per_second: 5.0 / 3600.0,
        }
    }
}

/// How consent is established and checked.
#[derive(Debug, Clone)]
pub struct ConsentConfig {
    /// The response whose `bot` events are the confirmation question.
    pub confirm_response: String,
    /// The action whose slot events are the change memory.
    pub select_action: String,
    /// How long after the question a "yes" still counts.
    pub window: Duration,
    pub identity: IdentityConfig,
    pub rate: RateLimit,
    /// How long a repeated call waits for the first call's outcome: as long as the first
    /// call's command may take, plus a margin.
    pub in_flight_wait: Duration,
    /// How long an unknown outcome stays unknown when the service has no change under
    /// its key; after that the change is taken as not made.
    pub unknown_grace: Duration,
}

impl Default for ConsentConfig {
    fn default() -> Self {
        Self {
            confirm_response: "utter_confirm_subscription_change".to_owned(),
            select_action: "select_subscription_change".to_owned(),
            window: Duration::from_secs(600),
            identity: IdentityConfig::default(),
            rate: RateLimit::default(),
            in_flight_wait: Duration::from_secs(10),
            unknown_grace: Duration::from_secs(300),
        }
    }
}
