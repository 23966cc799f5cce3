//! The naive baseline: an `apply_subscription_change` that applies whatever the memory
//! says, as a tool without a guard would, served by an action server of its own beside the
//! one under test. It exists to prove the consent matrix bites: replayed through it,
//! violating scenarios change the record. It is built from the SDK and an HTTP client
//! alone; nothing in actiongate's library can send a change this way.

use std::sync::atomic::{AtomicU64, Ordering};

use actionserver::{Action, ActionCall, ActionResult, Dispatcher, Message, OutEvent, Registry};
use serde_json::{json, Value};

/// Applies the change the `change_tag` slot names at the record's revision of the moment,
/// under a fresh key per call.
pub struct NaiveApply {
    /// The subscription service's base URL, or Stripe's.
    pub service: String,
    pub http: reqwest::Client,
    /// Stripe's API key, when the billing system is Stripe.
    pub stripe_key: Option<String>,
}

impl NaiveApply {
    /// A registry holding only the naive apply.
    pub fn registry(service: &str) -> Registry {
        let mut registry = Registry::default();
        registry
            .register(NaiveApply {
                service: service.trim_end_matches('/').to_owned(),
                http: reqwest::Client::new(),
                stripe_key: None,
            })
            .expect("one action, one name");
        registry
    }

    /// A registry holding only the naive apply, writing to Stripe at `api`.
    pub fn stripe_registry(api: &str, key: &str) -> Registry {
        let mut registry = Registry::default();
        registry
            .register(NaiveApply {
                service: api.trim_end_matches('/').to_owned(),
                http: reqwest::Client::new(),
                stripe_key: Some(key.to_owned()),
            })
            .expect("one action, one name");
        registry
    }

    /// Stripe's update for the change, with no look at the record: what a tool calling
    /// Stripe's API directly would send.
    async fn apply_at_stripe(
        &self,
        key: &str,
        subscription: &str,
        change_type: &str,
    ) -> Result<(), &'static str> {
        let url = format!("{}/v1/subscriptions/{subscription}", self.service);
        let request = match change_type {
            "stop_renewal" => self
                .http
                .post(&url)
                .form(&[("cancel_at_period_end", "true")]),
            "resume_renewal" => self
                .http
                .post(&url)
                .form(&[("cancel_at_period_end", "false")]),
            "cancel_now" => self.http.delete(&url),
            _ => return Err("service_rejected"),
        };
        match request.bearer_auth(key).send().await {
            Ok(a) if a.status().is_success() => Ok(()),
            _ => Err("service_rejected"),
        }
    }

    async fn apply(&self, subscription: &str, change_type: &str) -> Result<(), &'static str> {
        if let Some(key) = &self.stripe_key {
            return self.apply_at_stripe(key, subscription, change_type).await;
        }
        let url = format!("{}/v1/subscriptions/{subscription}", self.service);
        let record: Value = async { self.http.get(&url).send().await?.json().await }
            .await
            .map_err(|_| "service_unavailable")?;
        // Whatever revision the record has now: no comparison with what was asked.
        let revision = record["revision"].as_i64().ok_or("service_unavailable")?;
        // A fresh key per call: a retry is a new change.
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let key = format!(
            "naive-{}-{}",
            std::process::id(),
            CALLS.fetch_add(1, Ordering::Relaxed)
        );
        let answer = self
            .http
            .post(format!("{url}/changes"))
            .header("If-Match", format!("\"r{revision}\""))
            .header("Idempotency-Key", key)
            .json(&json!({"change_type": change_type}))
            .send()
            .await;
        match answer {
            Ok(a) if a.status().is_success() => Ok(()),
            _ => Err("service_rejected"),
        }
    }
}

impl Action for NaiveApply {
    fn name(&self) -> &'static str {
        "apply_subscription_change"
    }

    async fn run(&self, call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
        // The tag select wrote: "SUBSCRIPTION CHANGE_TYPE rREVISION".
        let tag = call.tracker.slots.get_str("change_tag").unwrap_or_default();
        let mut words = tag.split(' ');
        let outcome = match (words.next(), words.next()) {
            (Some(subscription), Some(change_type)) if !subscription.is_empty() => {
                match self.apply(subscription, change_type).await {
                    Ok(()) => json!({"status": "applied", "reason": null}),
                    Err(reason) => json!({"status": "failed", "reason": reason}),
                }
            }
            _ => json!({"status": "blocked", "reason": "not_selected"}),
        };
        let status = outcome["status"].clone();
        dispatcher
            .utter(Message::response("utter_subscription_change_outcome").with_custom(outcome));
        Ok(vec![OutEvent::slot("change_status", status)])
    }
}
