//! testkit: what actiongate's integration tests, its consent matrix and its load drivers
//! drive the server with. [`Chat`] builds a tracker event by event as Rasa 3.6.21
//! records it and plays it against a running action server ([`Endpoint`]); [`Service`]
//! reads and moves the subscription service's records; [`faults`] puts a misbehaving
//! proxy in front of the service. It knows the wire, not actiongate's insides: it never
//! links the product, so the tools that use it stay outside the library.

mod chat;
pub mod faults;
mod service;

use serde_json::{json, Value};

pub use chat::{
    confirmation_template, domain_responses, outcome_of, slot_in, Chat, Endpoint, Webhook,
    RESPONSES,
};
pub use service::{assert_record, Service, STYLE_BOX, STYLE_BOX_WHY};

/// Installs rustls' crypto provider (ring) once: the workspace builds reqwest without one.
pub fn install_crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A chat of acct-7 that selected stop_renewal on the Style Box (r4) and was asked.
pub async fn asked(server: &impl Webhook, sender: &str) -> Chat {
    let mut c = Chat::new(sender, Some("acct-7"));
    let body = c
        .request_change(server, STYLE_BOX, "stop_renewal")
        .await
        .expect("the server answers");
    assert_eq!(
        slot_in(&body, "change_tag"),
        Some(json!("WS-SUB-3304 stop_renewal r4")),
        "{body}"
    );
    c
}

/// The outcome's status and reason are these.
pub fn assert_outcome(outcome: &Value, status: &str, reason: Option<&str>) {
    assert_eq!(outcome["status"], status, "{outcome}");
    assert_eq!(outcome["reason"], json!(reason), "{outcome}");
}

/// Rewrites the text of the latest bot message (the question, after [`asked`]).
pub fn reword_question(c: &mut Chat, reword: impl FnOnce(&str) -> String) {
    let question = c
        .events
        .iter_mut()
        .rev()
        .find(|e| e["event"] == "bot")
        .expect("a question was asked");
    let text = reword(question["text"].as_str().unwrap_or_default());
    question["text"] = json!(text);
}

/// The customer's yes and the apply, in one step.
#[allow(async_fn_in_trait)] // called on one task at a time: no `Send` bound wanted
pub trait ChatExt {
    /// The customer says yes; apply runs. Returns the outcome (the custom payload).
    async fn say_yes_and_apply(&mut self, server: &impl Webhook) -> Value;
    /// Apply runs; returns the outcome.
    async fn apply(&mut self, server: &impl Webhook) -> Value;
}

impl ChatExt for Chat {
    async fn say_yes_and_apply(&mut self, server: &impl Webhook) -> Value {
        self.user("yes", "affirm", &[]);
        self.apply(server).await
    }

    async fn apply(&mut self, server: &impl Webhook) -> Value {
        let (status, body) = self
            .run(server, "apply_subscription_change")
            .await
            .expect("the server answers");
        assert_eq!(status, 200, "{body}");
        outcome_of(&body)
    }
}
