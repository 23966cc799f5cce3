//! Telling Rasa a held change was decided: `POST /conversations/{id}/trigger_intent`
//! with `subscription_change_decided` (best effort; `check_subscription_change` reports
//! the decision whatever Rasa answers).

use std::time::Duration;

use super::outcome::Outcome;
use super::ApprovalRules;
use crate::store::Approval;

/// Rasa's HTTP API, where decisions are told: built once from the approval rules
/// (`notify_rasa_url`, `notify_rasa_token`), with its own client and timeout.
#[derive(Debug)]
pub(super) struct RasaNotifier {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl RasaNotifier {
    /// `None` when no URL is configured: decisions are then only reported by
    /// `check_subscription_change`.
    pub(super) fn new(rules: &ApprovalRules) -> Option<Self> {
        let base = rules
            .notify_rasa_url
            .as_deref()?
            .trim_end_matches('/')
            .to_owned();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(
                |e| tracing::warn!(error = %e, "no client for Rasa's API; decisions are not told"),
            )
            .ok()?;
        Some(Self {
            base,
            token: rules.notify_rasa_token.clone(),
            http,
        })
    }

    /// Tells the conversation the decision: `POST {notify_rasa_url}/conversations/{sender}/
    /// trigger_intent` with the intent `subscription_change_decided` and the outcome as
    /// entities. Best effort: the decision stands whatever Rasa answers.
    pub(super) async fn decided(&self, held: &Approval, outcome: &Outcome) {
        let mut url = format!(
            "{}/conversations/{}/trigger_intent",
            self.base,
            percent_encoding::utf8_percent_encode(&held.sender_id, PATH_SEGMENT)
        );
        if let Some(token) = &self.token {
            url.push_str("?token=");
            url.push_str(
                &percent_encoding::utf8_percent_encode(token, percent_encoding::NON_ALPHANUMERIC)
                    .to_string(),
            );
        }
        let body = serde_json::json!({
            "name": "subscription_change_decided",
            "entities": {
                "change_status": outcome.status.as_str(),
                "change_reason": outcome.reason.map(|r| r.as_str()),
            },
        });
        match self.http.post(&url).json(&body).send().await {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => {
                tracing::warn!(status = r.status().as_u16(), sender = %held.sender_id, "Rasa refused the decision's intent")
            }
            Err(e) => {
                tracing::warn!(error = %e.without_url(), sender = %held.sender_id, "the decision's intent could not reach Rasa")
            }
        }
    }
}

impl super::Guard {
    /// Tells the conversation a person's decision, when Rasa's API is configured.
    pub(super) async fn tell_rasa(&self, held: &Approval, outcome: &Outcome) {
        if let Some(rasa) = &self.notifier {
            rasa.decided(held, outcome).await;
        }
    }
}

/// What a sender id must have escaped to be one path segment: Rasa reads the segment as
/// written, so nothing else is encoded (an id of letters, digits, `-` and `_` goes as is).
const PATH_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');
