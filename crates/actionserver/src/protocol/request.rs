//! The body of `POST /webhook`.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::scan::{RawJson, Scan};
use super::tracker::Reading;
use super::{RawEvent, Tracker};

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
    pub domain: Option<RawJson<'a>>,
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
    ///
    /// Text is walked first ([`Scan`]): it checks the whole body as serde_json would, and
    /// hands only the values the server reads to serde_json. Anything the walk does not
    /// take as it comes (a malformed body, a wrong type, an escaped or repeated key) is
    /// read again by serde, which decides: the errors are serde's, word for word.
    pub fn parse(body: &'a [u8]) -> Result<Option<Self>, serde_json::Error> {
        match simdutf8::basic::from_utf8(body) {
            Ok(text) => match Self::walk(text) {
                Some(request) => Ok(request),
                None => serde_json::from_str(text),
            },
            Err(_) => serde_json::from_slice(body),
        }
    }

    /// The walk over a body as Rasa writes it: `None` sends it to serde.
    fn walk(text: &'a str) -> Option<Option<Self>> {
        let mut scan = Scan::new(text);
        if scan.eat("null") {
            return scan.at_end().then_some(None);
        }
        let mut request = WebhookRequest {
            next_action: None,
            sender_id: None,
            tracker: None,
            domain: None,
            domain_digest: None,
            version: None,
        };
        const KEYS: [&str; 6] = [
            "next_action",
            "sender_id",
            "tracker",
            "domain",
            "domain_digest",
            "version",
        ];
        let mut seen = [false; KEYS.len()];
        scan.object(|scan, key| {
            let Some(at) = KEYS.iter().position(|k| *k == key) else {
                return scan.value().map(drop);
            };
            // A key given twice: serde refuses it.
            if std::mem::replace(&mut seen[at], true) {
                return None;
            }
            match key {
                "next_action" => request.next_action = typed(scan.value()?)?,
                "sender_id" => request.sender_id = typed(scan.value()?)?,
                "tracker" => request.tracker = walk_tracker(scan)?,
                "domain" => request.domain = Some(scan.value()?).filter(|d| d.get() != "null"),
                "domain_digest" => request.domain_digest = typed(scan.value()?)?,
                _ => request.version = typed(scan.value()?)?,
            }
            Some(())
        })?;
        scan.at_end().then_some(Some(request))
    }
}

/// One value the walk kept, read as serde reads it.
fn typed<T: DeserializeOwned>(raw: RawJson) -> Option<T> {
    serde_json::from_str(raw.get()).ok()
}

/// The tracker, `null` or an object, as the walk reads it: every key through the same
/// [`Reading`] as serde's, the events one by one.
fn walk_tracker<'a>(scan: &mut Scan<'a>) -> Option<Option<Tracker<'a>>> {
    if scan.next_byte()? == b'n' {
        return scan.eat("null").then_some(None);
    }
    let mut reading = Reading::new();
    scan.object(|scan, key| {
        reading.check_key(key).ok()?;
        if key != "events" {
            let raw = scan.value()?;
            return reading.field(Cow::Borrowed(key), raw).ok();
        }
        let events = if scan.next_byte()? == b'n' {
            if !scan.eat("null") {
                return None;
            }
            None
        } else {
            let mut events = Vec::new();
            scan.array(|scan| {
                events.push(RawEvent::from_raw(scan.value()?).ok()?);
                Some(())
            })?;
            Some(events)
        };
        reading.events(Cow::Borrowed(key), events);
        Some(())
    })?;
    reading.finish().ok().map(Some)
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

    /// What serde makes of a body, and what the walk makes of it when it takes it.
    fn both(text: &str) -> (Option<String>, Result<String, String>) {
        let walked = WebhookRequest::walk(text).map(|r| format!("{r:?}"));
        let read = serde_json::from_str::<Option<WebhookRequest>>(text)
            .map(|r| format!("{r:?}"))
            .map_err(|e| e.to_string());
        (walked, read)
    }

    #[test]
    fn the_walk_reads_what_serde_reads_and_leaves_the_rest_to_it() {
        let plain = br#" {"next_action": "a", "sender_id": "s", "version": "3.6.21",
            "domain": {"intents": ["affirm"]}, "domain_digest": null, "x": [1, {"y": 2}],
            "tracker": {"sender_id": "s", "slots": {"k": 1}, "latest_message": {"text": "hi"},
            "events": [{"event": "user", "timestamp": 1.5, "text": "hi"},
                       {"timestamp": 2, "event": "bot"}], "paused": false,
            "active_form": {"name": "f"}, "stack": [], "user_id": "u"}} "#;
        let text = std::str::from_utf8(plain).unwrap();
        let (walked, read) = both(text);
        assert_eq!(walked.as_deref(), Some(read.as_deref().unwrap()));
        // Bodies the walk hands to serde: each still reads (or fails) as serde has it.
        for text in [
            r#"{"next_action": "a", "next_action": "b"}"#,
            r#"{"next_\u0061ction": "a"}"#,
            r#"{"next_action": 5}"#,
            r#"{"tracker": {"sender_id": "s", "events": {}}}"#,
            r#"{"tracker": {"sender_id": "s", "events": [[]]}}"#,
            r#"{"tracker": {"events": []}}"#,
            r#"{"tracker": {"sender_id": "s", "paused": 1}}"#,
            r#"{"tracker": {"sender_id": "s", "slots": {}, "slots": {}}}"#,
            r#"{"tracker": 5}"#,
            r#"{"a": 1} x"#,
            r#"{"a": 01}"#,
            "[]",
        ] {
            let (walked, read) = both(text);
            assert_eq!(walked, None, "{text}");
            assert_eq!(
                WebhookRequest::parse(text.as_bytes())
                    .map(|r| format!("{r:?}"))
                    .map_err(|e| e.to_string()),
                read,
                "{text}"
            );
        }
        // Null, as a body, a tracker, its events and the domain.
        for text in [
            " null ",
            r#"{"tracker": null, "domain": null}"#,
            r#"{"tracker": {"sender_id": "s", "events": null}}"#,
        ] {
            let (walked, read) = both(text);
            assert_eq!(walked.as_deref(), Some(read.as_deref().unwrap()), "{text}");
        }
        // Every one-byte change of the plain body: the walk takes it only where serde
        // reads the same request from it.
        let mut taken = 0;
        for (body, what) in crate::protocol::scan::one_byte_changes(plain, b"\"}],n1") {
            let text = std::str::from_utf8(&body).unwrap();
            let (walked, read) = both(text);
            if let Some(walked) = walked {
                assert_eq!(Ok(walked), read, "{what}");
                taken += 1;
            }
        }
        assert!(taken > plain.len(), "the walk took {taken} changed bodies");
    }
}
