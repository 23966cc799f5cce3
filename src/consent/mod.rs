//! The guard: the checks of CONTRACT.md section 4, in order, in one place; the only
//! maker of a [`ConfirmedChange`], which is the only way to send a command. Along its
//! story: [`inputs`] (the tracker read once), [`checks`] (the pure checks), [`guard`]
//! (the orchestration and the repeats R1–R3), [`send`] (step 15), [`lifecycle`] (an
//! operation's moves, claimed to applied, failed or unknown, and nowhere else), [`approvals`]
//! (changes a person approves), [`reconcile`] (unknown outcomes, by the facts) and
//! [`notify`] (telling Rasa of a decision).

mod approvals;
mod checks;
mod guard;
pub mod identity;
mod inputs;
mod lifecycle;
mod notify;
pub use contract::outcome;
pub mod plain_yes;
pub mod question;
mod reconcile;
mod send;

pub use crate::conversation::Signals;
pub use approvals::Decision;
pub use checks::{check_conversation, compare_facts, current_terms, request_key, Confirmation};
pub use guard::Guard;
pub use identity::IdentityConfig;
pub use inputs::{ApplyInputs, Memory, Template};
pub use outcome::{Outcome, Reason, Status, Terms};
pub use send::ConfirmedChange;

use crate::subscriptions::model::RevisionFormat;
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

/// How the question is held to what the customer read (CONTRACT.md section 3).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Deserialize,
    serde::Serialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum QuestionCheck {
    /// The question must be one of the confirmation response's text variations rendered
    /// with the slots' values when it was sent (when the domain carries the response), and
    /// carry every term.
    #[default]
    Template,
    /// The question must carry every term; its wording around them is free (for assistants
    /// that rephrase the question).
    Terms,
}

/// How consent is established and checked.
#[derive(Debug, Clone)]
pub struct ConsentConfig {
    /// The response whose `bot` events are the confirmation question.
    pub confirm_response: String,
    /// The action whose slot events are the change memory.
    pub select_action: String,
    /// Where the reply's yes or no is read.
    pub signals: Signals,
    /// Whether a typed yes must also be a plain yes in its own words (CONTRACT.md
    /// section 3; on by default).
    pub plain_yes: bool,
    /// The words a plain yes is read with.
    pub reply_words: plain_yes::ReplyWords,
    pub question: QuestionCheck,
    /// How long after the question a "yes" still counts.
    pub window: Duration,
    /// How much earlier than the question a reply may be timestamped (Rasa replicas'
    /// clocks differ) and still count.
    pub clock_skew: Duration,
    pub identity: IdentityConfig,
    pub rate: RateLimit,
    /// How long a repeated call waits for the first call's outcome: as long as the first
    /// call's command may take, plus a margin.
    pub in_flight_wait: Duration,
    /// Which confirmed changes a person approves first (CONTRACT.md section 7).
    pub approval: ApprovalRules,
    /// How the provider's revisions are written in change tags (integers for section 6,
    /// fingerprints for Stripe, section 8).
    pub revision_format: RevisionFormat,
}

/// The rules of endpoints.yml `actiongate.approval`: a confirmed change is held when its
/// change type or its account is listed, or (unless `review` is off) when the service marks
/// the option `"review": true`.
#[derive(Debug, Clone)]
pub struct ApprovalRules {
    pub change_types: Vec<String>,
    pub accounts: Vec<String>,
    pub review: bool,
    /// How long a hold waits for a decision.
    pub expiry: Duration,
    /// Rasa's base URL: a decision triggers an intent in the conversation
    /// (`POST /conversations/{sender}/trigger_intent`).
    pub notify_rasa_url: Option<String>,
    /// Rasa's API token for that call.
    pub notify_rasa_token: Option<String>,
    /// Open holds an account may have at once; one more is `blocked`/`rate_limited`.
    pub max_open_per_account: usize,
    /// Open holds a subscription may have at once (default 1); one more is answered with
    /// the oldest that waits, and nothing new is stored.
    pub max_open_per_subscription: usize,
}

impl Default for ApprovalRules {
    fn default() -> Self {
        Self {
            change_types: Vec::new(),
            accounts: Vec::new(),
            review: true,
            expiry: Duration::from_secs(24 * 3600),
            notify_rasa_url: None,
            notify_rasa_token: None,
            max_open_per_account: 5,
            max_open_per_subscription: 1,
        }
    }
}

impl ApprovalRules {
    /// The rule that holds this change, if one does.
    pub fn holds(&self, account: &str, change_type: &str, review: bool) -> Option<&'static str> {
        if self.change_types.iter().any(|c| c == change_type) {
            Some("change_type")
        } else if self.accounts.iter().any(|a| a == account) {
            Some("account")
        } else if self.review && review {
            Some("review")
        } else {
            None
        }
    }
}

impl Default for ConsentConfig {
    fn default() -> Self {
        Self {
            confirm_response: "utter_confirm_subscription_change".to_owned(),
            select_action: "select_subscription_change".to_owned(),
            signals: Signals::default(),
            plain_yes: true,
            reply_words: plain_yes::ReplyWords::default(),
            question: QuestionCheck::Template,
            window: Duration::from_secs(600),
            clock_skew: Duration::from_secs(5),
            identity: IdentityConfig::default(),
            rate: RateLimit::default(),
            in_flight_wait: Duration::from_secs(10),
            approval: ApprovalRules::default(),
            revision_format: RevisionFormat::Decimal,
        }
    }
}
