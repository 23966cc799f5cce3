//! The outcome of a subscription action: status, reason, effects, the service's current
//! terms and its explanation, returned as slots, a response and a `custom` payload.

use serde::{Deserialize, Serialize};

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Selected,
    Applied,
    Blocked,
    Denied,
    PendingVerification,
    /// Waiting for a person's approval (CONTRACT.md section 7): nothing sent yet.
    Held,
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Selected => "selected",
            Self::Applied => "applied",
            Self::Blocked => "blocked",
            Self::Denied => "denied",
            Self::PendingVerification => "pending_verification",
            Self::Held => "held",
            Self::Failed => "failed",
        }
    }

    /// The response dispatched for this status (CONTRACT.md section 5).
    pub fn response(self) -> Option<&'static str> {
        match self {
            Self::Selected => None,
            Self::Applied => Some("utter_subscription_change_applied"),
            Self::Blocked => Some("utter_subscription_change_blocked"),
            Self::Denied => Some("utter_subscription_change_denied"),
            Self::PendingVerification => Some("utter_subscription_change_pending"),
            Self::Held => Some("utter_subscription_change_held"),
            Self::Failed => Some("utter_subscription_change_failed"),
        }
    }
}

/// Why, as a code from CONTRACT.md section 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// No trusted account for the conversation (CONTRACT.md section 2).
    NotAuthenticated,
    NotOwner,
    NotSelected,
    MemoryUntrusted,
    TargetMismatch,
    NotAsked,
    NotAnswered,
    Declined,
    NotConfirmed,
    QuestionIncomplete,
    ConfirmationExpired,
    ServiceUnavailable,
    BenefitLossHidden,
    RateLimited,
    StaleAtService,
    OutcomeUnknown,
    ServiceRejected,
    UnknownSubscription,
    ChangeNotOffered,
    ApprovalRequired,
    ApprovalRejected,
    ApprovalExpired,
    /// The question was asked and the customer has not answered it with a yes or a no.
    AwaitingReply,
    /// An unknown outcome resolved: the service never received the command and fenced
    /// its key.
    NotSent,
    /// The customer took back a change held for approval.
    Withdrawn,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotAuthenticated => "not_authenticated",
            Self::NotOwner => "not_owner",
            Self::NotSelected => "not_selected",
            Self::MemoryUntrusted => "memory_untrusted",
            Self::TargetMismatch => "target_mismatch",
            Self::NotAsked => "not_asked",
            Self::NotAnswered => "not_answered",
            Self::Declined => "declined",
            Self::NotConfirmed => "not_confirmed",
            Self::QuestionIncomplete => "question_incomplete",
            Self::ConfirmationExpired => "confirmation_expired",
            Self::ServiceUnavailable => "service_unavailable",
            Self::BenefitLossHidden => "benefit_loss_hidden",
            Self::RateLimited => "rate_limited",
            Self::StaleAtService => "stale_at_service",
            Self::OutcomeUnknown => "outcome_unknown",
            Self::ServiceRejected => "service_rejected",
            Self::UnknownSubscription => "unknown_subscription",
            Self::ChangeNotOffered => "change_not_offered",
            Self::ApprovalRequired => "approval_required",
            Self::ApprovalRejected => "approval_rejected",
            Self::ApprovalExpired => "approval_expired",
            Self::AwaitingReply => "awaiting_reply",
            Self::NotSent => "not_sent",
            Self::Withdrawn => "withdrawn",
        }
    }

    /// A sentence for the customer.
    fn explanation(self) -> &'static str {
        match self {
            Self::NotAuthenticated => "I can't tell who you are in this conversation; please sign in again and I will carry on.",
            Self::NotOwner => "That subscription can't be changed from this conversation.",
            Self::NotSelected => "No change has been prepared yet; tell me which subscription and which change.",
            Self::MemoryUntrusted => "The change I have in mind was not prepared by me; let me look it up again.",
            Self::TargetMismatch => "The change you asked for is not the one I prepared; let me look it up again.",
            Self::NotAsked => "I have not asked you to confirm this exact change yet.",
            Self::NotAnswered => "I am still waiting for your answer to my question.",
            Self::Declined => "You said no to this change, so I have not made it. If you want it after all, I will ask you again.",
            Self::NotConfirmed => "I did not take your answer as a yes, so I have not made the change; I will ask you again.",
            Self::QuestionIncomplete => "My question did not show every term of the change; let me ask again properly.",
            Self::ConfirmationExpired => "Your confirmation is too old; let me check the terms and ask again.",
            Self::ServiceUnavailable => "I can't reach the subscription service right now, so I changed nothing. Please try again shortly.",
            Self::BenefitLossHidden => "The terms changed since I asked you.",
            Self::RateLimited => "Too many changes were made on this account in a short time; please try again later.",
            Self::StaleAtService => "The subscription changed at the last moment, so the service refused the change.",
            Self::OutcomeUnknown => "The service has not confirmed the change yet.",
            Self::ServiceRejected => "The subscription service refused the change.",
            Self::UnknownSubscription => "I can't find that subscription.",
            Self::ChangeNotOffered => "That change is not available on this subscription.",
            Self::ApprovalRequired => "This change needs a colleague's approval before I can make it; nothing has been changed yet.",
            Self::ApprovalRejected => "A colleague reviewed this change and did not approve it, so nothing was changed.",
            Self::ApprovalExpired => "The approval for this change was not given in time, so nothing was changed; I can ask for it again.",
            Self::AwaitingReply => "Nothing has been changed yet: I am waiting for your yes or no to the change I asked you about.",
            Self::NotSent => "The subscription service never received the change, so nothing was changed.",
            Self::Withdrawn => "You took the change back before it was approved, so nothing was changed.",
        }
    }
}

/// The terms of a change as the service states them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Terms {
    pub tag: String,
    pub label: String,
    pub effective: String,
    pub entitlements: String,
}

/// The terms as JSON, as the store keeps them and the audit trail shows them.
impl std::fmt::Display for Terms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&serde_json::to_string(self).map_err(|_| std::fmt::Error)?)
    }
}

/// The whole outcome object, as sent in the `custom` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub status: Status,
    pub reason: Option<Reason>,
    pub effects: u8,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub current: Option<Terms>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub why: Option<String>,
}

impl Outcome {
    pub fn blocked(reason: Reason) -> Self {
        Self {
            status: Status::Blocked,
            reason: Some(reason),
            effects: 0,
            current: None,
            why: None,
        }
    }

    /// Step 12: the subscription is not the account's.
    pub fn denied() -> Self {
        Self::denied_for(Reason::NotOwner)
    }

    /// Step 1: no trusted account.
    pub fn not_authenticated() -> Self {
        Self::denied_for(Reason::NotAuthenticated)
    }

    fn denied_for(reason: Reason) -> Self {
        Self {
            status: Status::Denied,
            reason: Some(reason),
            effects: 0,
            current: None,
            why: None,
        }
    }

    pub fn with_current(mut self, current: Option<Terms>) -> Self {
        self.current = current;
        self
    }

    pub fn with_why(mut self, why: Option<String>) -> Self {
        self.why = why;
        self
    }

    /// The response dispatched for this outcome (CONTRACT.md section 5): the status's, and
    /// for a question still waiting for its reply, one that says so.
    pub fn response(&self) -> Option<&'static str> {
        match (self.status, self.reason) {
            (Status::Selected, Some(Reason::AwaitingReply)) => {
                Some("utter_subscription_change_awaiting_reply")
            }
            (status, _) => status.response(),
        }
    }

    /// A sentence for the blocked response: the reason, the service's why, and the terms
    /// as they are now.
    pub fn explanation(&self) -> String {
        let mut parts = Vec::new();
        if let Some(reason) = self.reason {
            parts.push(reason.explanation().to_owned());
        }
        if let Some(why) = &self.why {
            parts.push(why.clone());
        }
        if let Some(current) = &self.current {
            parts.push(format!(
                "Now the change would be: {}, effective {}. What changes for you: {}.",
                current.label, current.effective, current.entitlements
            ));
        }
        parts.join(" ")
    }
}
