//! The naive baseline: an `apply_subscription_change` that applies whatever the memory
//! says, as a tool without a guard would. It exists to prove the consent matrix bites:
//! replayed through it, violating scenarios change the record.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;

use crate::actions::{outcome_events, Action, ActionCall, ActionResult, Dispatcher, Subscriptions};
use crate::consent::{Outcome, Reason, Status};
use crate::subscriptions::model::Tag;

pub struct NaiveApply {
    pub subscriptions: Subscriptions,
    pub http: reqwest::Client,
}

impl Action for NaiveApply {
    fn name(&self) -> &'static str {
        "apply_subscription_change"
    }

    async fn run(&self, call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
        let Some(tag) = call
            .tracker
            .slots
            .get_str("change_tag")
            .and_then(Tag::parse)
        else {
            return Ok(outcome_events(
                &Outcome::blocked(Reason::NotSelected),
                dispatcher,
            ));
        };
        let client = &self.subscriptions.guard.client();
        // Whatever revision the record has now: no comparison with what was asked.
        let revision = match client.get(&tag.subscription).await {
            Ok(Some(record)) => record.revision,
            _ => {
                return Ok(outcome_events(
                    &Outcome::blocked(Reason::ServiceUnavailable),
                    dispatcher,
                ))
            }
        };
        // A fresh key per call: a retry is a new change.
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let key = format!(
            "naive-{}-{}",
            crate::store::now_ms(),
            CALLS.fetch_add(1, Ordering::Relaxed)
        );
        let answer = self
            .http
            .post(format!(
                "{}/v1/subscriptions/{}/changes",
                client.base_url(),
                tag.subscription
            ))
            .header("If-Match", format!("\"r{revision}\""))
            .header("Idempotency-Key", key)
            .json(&json!({"change_type": tag.change_type}))
            .send()
            .await;
        let applied = answer.is_ok_and(|a| a.status().is_success());
        let outcome = if applied {
            Outcome {
                status: Status::Applied,
                reason: None,
                effects: 1,
                current: None,
                why: None,
            }
        } else {
            Outcome {
                status: Status::Failed,
                reason: Some(Reason::ServiceRejected),
                effects: 0,
                current: None,
                why: None,
            }
        };
        Ok(outcome_events(&outcome, dispatcher))
    }
}
