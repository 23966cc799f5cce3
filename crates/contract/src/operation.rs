//! Where an operation (one confirmed change under its request key) is in its life, as the
//! store records it and the guard moves it.

use serde::Serialize;

/// Where an operation is: claimed → sent → applied | failed | unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpState {
    Claimed,
    Sent,
    Applied,
    Failed,
    Unknown,
}

impl OpState {
    /// The state as the store writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Claimed => "claimed",
            Self::Sent => "sent",
            Self::Applied => "applied",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
        }
    }

    /// The state the store wrote; anything else reads as unknown (nothing is assumed done
    /// or undone that the store does not say).
    pub fn parse(s: &str) -> Self {
        match s {
            "claimed" => Self::Claimed,
            "sent" => Self::Sent,
            "applied" => Self::Applied,
            "failed" => Self::Failed,
            _ => Self::Unknown,
        }
    }

    /// Whether the operation has its final outcome.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Applied | Self::Failed)
    }
}

#[cfg(test)]
mod tests {
    use super::OpState;

    #[test]
    fn every_state_reads_back_as_written_and_anything_else_as_unknown() {
        for s in [
            OpState::Claimed,
            OpState::Sent,
            OpState::Applied,
            OpState::Failed,
            OpState::Unknown,
        ] {
            assert_eq!(OpState::parse(s.as_str()), s);
        }
        assert_eq!(OpState::parse("APPLIED"), OpState::Unknown);
        assert_eq!(OpState::parse(""), OpState::Unknown);
    }
}
