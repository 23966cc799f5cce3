//! The body of `POST /webhook`.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

use super::Tracker;

/// What Rasa sends to run one action. Unknown top-level keys are ignored, as rasa-sdk
/// does; a wrong type in a known key is an error, and so is a body that is not an object.
#[derive(Debug, Deserialize)]
// The derived reading becomes an inherent function, which the trait impl below calls on
// objects only: serde's derived structs also read arrays by position, so `[]` would be a
// request without an action and `["a"]` one naming action `a`.
#[serde(remote = "Self")]
pub struct WebhookRequest<'a> {
    #[serde(default)]
    /// The action to run.
    pub next_action: Option<String>,
    #[serde(default)]
    /// The conversation's id.
    pub sender_id: Option<String>,
    #[serde(default, borrow)]
    /// The conversation.
    pub tracker: Option<Tracker<'a>>,
    /// Kept raw: only actions that read the domain pay for parsing it.
    #[serde(default, borrow)]
    pub domain: Option<&'a RawValue>,
    #[serde(default)]
    /// The domain's digest (Rasa Pro).
    pub domain_digest: Option<String>,
    #[serde(default)]
    /// Rasa's version.
    pub version: Option<String>,
}

impl<'de: 'a, 'a> Deserialize<'de> for WebhookRequest<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectOnly<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for ObjectOnly<'a> {
            type Value = WebhookRequest<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                WebhookRequest::deserialize(MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_map(ObjectOnly(PhantomData))
    }
}

impl<'a> WebhookRequest<'a> {
    /// Parses a body; `Ok(None)` for a body that is JSON `null`.
    ///
    /// A body that is valid UTF-8 as a whole (every body Rasa sends) is read as text, so the
    /// raw parts kept from it (events, tracker fields, the domain) are not checked for UTF-8
    /// again one by one; anything else is read as bytes, which accepts and refuses exactly
    /// the same bodies. The whole-body check is simdutf8's (SIMD, chosen at run time; it
    /// accepts exactly what the standard library's does): 20 µs against 35 to 46 µs on a
    /// 1,000-event body of Rasa Pro's shape (1.1 MiB), where the standard library's check
    /// was 5 % of the request's CPU.
    pub fn parse(body: &'a [u8]) -> Result<Option<Self>, serde_json::Error> {
        match simdutf8::basic::from_utf8(body) {
            Ok(text) => serde_json::from_str(text),
            Err(_) => serde_json::from_slice(body),
        }
    }
}

/// Only the action name, read from a body that failed to parse as a whole, so the error
/// can still name the action (Rasa reads `action_name` from every 400).
#[derive(Deserialize)]
pub struct ActionNameOnly {
    #[serde(default)]
    pub next_action: Option<Value>,
}

impl ActionNameOnly {
    pub fn read(body: &[u8]) -> Option<String> {
        // A derived struct reads an array by position too; only an object names an action.
        if !body.trim_ascii_start().starts_with(b"{") {
            return None;
        }
        let v: ActionNameOnly = serde_json::from_slice(body).ok()?;
        v.next_action?.as_str().map(str::to_owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACKER: &str =
        r#"{"sender_id": "s", "events": [{"event": "user", "timestamp": 1.5, "text": "hi"}]}"#;

    fn body(extra: &[u8]) -> Vec<u8> {
        let mut body = br#"{"next_action": "a", "#.to_vec();
        body.extend_from_slice(extra);
        body.extend_from_slice(br#", "tracker": "#);
        body.extend_from_slice(TRACKER.as_bytes());
        body.push(b'}');
        body
    }

    #[test]
    fn text_and_bytes_accept_the_same_bodies() {
        // Invalid UTF-8 where nothing is kept (an unknown key's value) is accepted when
        // reading bytes, so it is accepted here too.
        let ignored = body(b"\"x\": \"\xff\"");
        let request = WebhookRequest::parse(&ignored).unwrap().unwrap();
        assert_eq!(request.tracker.unwrap().events.len(), 1);
        assert!(serde_json::from_slice::<WebhookRequest>(&ignored).is_ok());
        // Where it would be kept (the domain), both refuse it.
        let kept = body(b"\"domain\": {\"a\": \"\xff\"}");
        assert!(WebhookRequest::parse(&kept).is_err());
        assert!(serde_json::from_slice::<WebhookRequest>(&kept).is_err());
        // Plain text, and `null`.
        let plain = body(b"\"version\": \"3.6.21\"");
        let request = WebhookRequest::parse(&plain).unwrap().unwrap();
        assert_eq!(request.version.as_deref(), Some("3.6.21"));
        assert_eq!(request.tracker.unwrap().events[0].timestamp(), Some(1.5));
        assert!(WebhookRequest::parse(b" null ").unwrap().is_none());
    }

    #[test]
    fn only_an_object_is_a_request() {
        for body in [
            &b"[]"[..],
            b"[\"a\"]",
            b"[null, null]",
            b"\"a\"",
            b"5",
            b"true",
        ] {
            let text = String::from_utf8_lossy(body);
            let e = WebhookRequest::parse(body).expect_err(&text);
            assert!(e.is_data(), "{text}: {e}");
            assert!(
                serde_json::from_slice::<WebhookRequest>(body).is_err(),
                "{text}"
            );
            assert_eq!(ActionNameOnly::read(body), None, "{text}");
        }
        let empty = WebhookRequest::parse(b"{}").unwrap().unwrap();
        assert!(empty.next_action.is_none() && empty.tracker.is_none());
        assert_eq!(
            ActionNameOnly::read(br#" {"next_action": "a", "tracker": 5}"#).as_deref(),
            Some("a")
        );
    }
}
