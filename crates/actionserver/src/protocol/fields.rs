//! What an action commonly reads of an event, in one lenient pass over its raw JSON
//! without building it: [`Fields`], through [`RawEvent::fields`]. Rasa's metadata is
//! untrusted (a channel or a customer's client writes it) and trackers are large, so only
//! the fields named here are read; any other key is skipped (checked to be JSON), and a
//! value of an unexpected type reads as nothing rather than making the event malformed.
//! Only malformed JSON, an event given twice the same `event` or `timestamp` key, and a
//! bot message naming two responses (`utter_action` twice: which one the customer saw is
//! unknowable) are errors.

use std::borrow::Cow;

use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use super::events::RawEvent;
use super::scan::{RawJson, Scan};

/// The fields of `user`, `bot`, `action`, `slot` and `tool_executed` events an action
/// commonly reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fields<'a> {
    /// `text`: what the customer typed (`user`) or the bot said (`bot`).
    pub text: Option<Cow<'a, str>>,
    /// `message_id` of a `user` event.
    pub message_id: Option<Cow<'a, str>>,
    /// `name`: the action (`action`) or the slot (`slot`).
    pub name: Option<Cow<'a, str>>,
    /// `value` of a `slot` event, whole.
    pub value: Option<Value>,
    /// `parse_data.intent.name`, when it is a string.
    pub intent: Option<Cow<'a, str>>,
    /// `parse_data.intent.confidence`, when it is a number.
    pub confidence: Option<f64>,
    /// `metadata.utter_action` of a `bot` event: the response it rendered, when a string.
    pub utter_action: Option<Cow<'a, str>>,
    /// Whether Rasa marked the message its own (`is_external: true` in `metadata` or in
    /// `parse_data.metadata`): reminders and `trigger_intent`, never the customer.
    pub is_external: bool,
    /// `tool_name` of a `tool_executed` event (Rasa's Mantle).
    pub tool_name: Option<Cow<'a, str>>,
    /// `arguments` of a `tool_executed` event, whole.
    pub arguments: Option<Value>,
}

impl<'a> RawEvent<'a> {
    /// The event's [`Fields`], read in one lenient pass over its raw JSON: walked as Rasa
    /// writes events ([`walk`]), and by serde where the walk leaves the judgement to it.
    pub fn fields(&self) -> Result<Fields<'a>, serde_json::Error> {
        match walk(self.raw()) {
            Some(fields) => Ok(fields),
            None => self.fields_by_serde(),
        }
    }

    /// [`RawEvent::fields`] as serde reads them: the reading every answer of [`walk`]
    /// agrees with.
    fn fields_by_serde(&self) -> Result<Fields<'a>, serde_json::Error> {
        let lite: Lite<'a> = serde_json::from_str(self.raw().get())?;
        let parse = lite.parse_data.map(|p| p.0).unwrap_or_default();
        let metadata = lite.metadata.map(|m| m.0).unwrap_or_default();
        Ok(Fields {
            text: lite.text,
            message_id: lite.message_id,
            name: lite.name,
            value: lite.value,
            intent: parse.intent.name,
            confidence: parse.intent.confidence,
            utter_action: metadata.utter_action,
            is_external: metadata.external || parse.external,
            tool_name: lite.tool_name,
            arguments: lite.arguments,
        })
    }
}

/// The top-level keys [`walk`] reads, each at most once.
const KEYS: [&str; 10] = [
    "event",
    "timestamp",
    "text",
    "message_id",
    "metadata",
    "parse_data",
    "name",
    "value",
    "tool_name",
    "arguments",
];

/// An event's [`Fields`] read with the request's own scanner ([`Scan`]), which steps over
/// what is not read (a `user` event's `parse_data` is mostly entities and a ranking of
/// intents) with less work than serde's derived reading: a fifth fewer instructions for the
/// events' fields of a new change (`bench/instructions_new_changes.sh`, "the events' fields
/// read"). `None` for anything it leaves to serde, which then decides:
/// a key with escapes, a known key given twice, a string with escapes, a value of a type
/// serde refuses, a number serde may not read, a value nested deep enough to meet serde's
/// limit. So where it answers, its answer is serde's (tested against it:
/// `the_walk_agrees_with_serde`).
fn walk(raw: RawJson<'_>) -> Option<Fields<'_>> {
    let mut scan = Scan::checked(raw);
    let mut fields = Fields::default();
    let mut seen = [false; KEYS.len()];
    let (mut metadata_external, mut parse_external) = (false, false);
    scan.object(|scan, key| {
        let Some(at) = KEYS.iter().position(|k| *k == key) else {
            return step_over(scan);
        };
        if std::mem::replace(&mut seen[at], true) {
            return None;
        }
        match key {
            "text" => fields.text = string_or_null(scan.value()?.get())?,
            "message_id" => fields.message_id = string_or_null(scan.value()?.get())?,
            "name" => fields.name = string_or_null(scan.value()?.get())?,
            "tool_name" => fields.tool_name = string_or_null(scan.value()?.get())?,
            "value" => fields.value = whole(scan.value()?.get())?,
            "arguments" => fields.arguments = whole(scan.value()?.get())?,
            "metadata" => {
                let mut seen_utter_action = false;
                lenient_object(scan, |key, scan| match key {
                    "utter_action" => {
                        if std::mem::replace(&mut seen_utter_action, true) {
                            return None;
                        }
                        fields.utter_action = lenient_string(scan.value()?.get())?;
                        Some(())
                    }
                    "is_external" => {
                        metadata_external |= truth(scan.value()?.get())?;
                        Some(())
                    }
                    _ => step_over(scan),
                })?;
            }
            "parse_data" => lenient_object(scan, |key, scan| match key {
                "intent" => {
                    let (mut name, mut confidence) = (None, None);
                    lenient_object(scan, |key, scan| {
                        match key {
                            "name" => name = lenient_string(scan.value()?.get())?,
                            "confidence" => confidence = lenient_number(scan.value()?.get())?,
                            _ => step_over(scan)?,
                        }
                        Some(())
                    })?;
                    (fields.intent, fields.confidence) = (name, confidence);
                    Some(())
                }
                "metadata" => {
                    parse_external = false;
                    lenient_object(scan, |key, scan| match key {
                        "is_external" => {
                            parse_external = truth(scan.value()?.get())?;
                            Some(())
                        }
                        _ => step_over(scan),
                    })
                }
                _ => step_over(scan),
            })?,
            // `event` and `timestamp`: only their being given once is read here.
            _ => step_over(scan)?,
        }
        Some(())
    })?;
    fields.is_external = metadata_external || parse_external;
    scan.at_end().then_some(fields)
}

/// Steps over the value that comes next.
fn step_over(scan: &mut Scan<'_>) -> Option<()> {
    scan.value().map(drop)
}

/// A value serde reads as `Option<Cow<str>>`: `null` or a string without escapes (the
/// rest is serde's: escapes decoded, other types refused).
fn string_or_null(raw: &str) -> Option<Option<Cow<'_, str>>> {
    if raw == "null" {
        return Some(None);
    }
    plain_string(raw).map(|s| Some(Cow::Borrowed(s)))
}

/// The text of a string value without escapes.
fn plain_string(raw: &str) -> Option<&str> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    (!inner.contains('\\')).then_some(inner)
}

/// A value [`Str`] reads: a string (without escapes, or serde decodes it), and nothing
/// for a value of any other type.
fn lenient_string(raw: &str) -> Option<Option<Cow<'_, str>>> {
    if raw.starts_with('"') {
        plain_string(raw).map(|s| Some(Cow::Borrowed(s)))
    } else {
        lenient_number(raw).map(|_| None)
    }
}

/// A value [`True`] reads: whether it is `true`.
fn truth(raw: &str) -> Option<bool> {
    lenient_number(raw).map(|_| raw == "true")
}

/// A value read as a [`Shape`], as a number: serde reads any number it meets there, and
/// refuses one out of a float's range (`1e400`), so such a number is left to it. Nothing
/// for a value of any other type.
fn lenient_number(raw: &str) -> Option<Option<f64>> {
    if raw.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        serde_json::from_str(raw).ok().map(Some)
    } else {
        Some(None)
    }
}

/// A value serde reads as `Option<Value>`. Parsed inside the event, a value starts a level
/// deeper than alone, so one that could meet serde's nesting limit (128) is left to serde.
fn whole(raw: &str) -> Option<Option<Value>> {
    if raw == "null" {
        return Some(None);
    }
    const NEAR_THE_LIMIT: usize = 100;
    if raw.len() > NEAR_THE_LIMIT
        && raw.bytes().filter(|b| matches!(b, b'[' | b'{')).count() > NEAR_THE_LIMIT
    {
        return None;
    }
    serde_json::from_str(raw).ok().map(Some)
}

/// The value that comes next, read as a [`Shape`]: an object is walked, each `entry`
/// given its key and reading the key's value; any other value has no entries.
fn lenient_object<'r>(
    scan: &mut Scan<'r>,
    mut entry: impl FnMut(&'r str, &mut Scan<'r>) -> Option<()>,
) -> Option<()> {
    if scan.next_byte()? == b'{' {
        scan.object(|scan, key| entry(key, scan))
    } else {
        lenient_number(scan.value()?.get()).map(drop)
    }
}

/// The fields [`Fields`] takes, as serde reads them. Metadata is read leniently (only bot events' `utter_action` and the `is_external`
/// flag mean anything here), so a customer's own message metadata can't make a request
/// malformed.
#[derive(Deserialize)]
struct Lite<'a> {
    // Declared so that a duplicate `event` or `timestamp` key is refused, not guessed at.
    #[serde(default, rename = "event")]
    _event: Option<IgnoredAny>,
    #[serde(default, rename = "timestamp")]
    _timestamp: Option<IgnoredAny>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    metadata: Option<Lenient<LiteMetadata<'a>>>,
    #[serde(borrow, default)]
    parse_data: Option<Lenient<LiteParse<'a>>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    value: Option<Value>,
    #[serde(borrow, default)]
    tool_name: Option<Cow<'a, str>>,
    #[serde(default)]
    arguments: Option<Value>,
}

/// What is read of an event's metadata: `utter_action` when it is a string, and whether
/// `is_external` is `true`. Anything else (another shape, other types) reads as nothing.
#[derive(Default)]
struct LiteMetadata<'a> {
    utter_action: Option<Cow<'a, str>>,
    seen_utter_action: bool,
    external: bool,
}

impl<'de: 'a, 'a> Shape<'de> for LiteMetadata<'a> {
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "utter_action" => {
                // Two names for the response: which one the customer saw is unknowable,
                // so the request is refused.
                if self.seen_utter_action {
                    return Err(serde::de::Error::duplicate_field("utter_action"));
                }
                self.seen_utter_action = true;
                self.utter_action = value_as::<Str, _>(map)?.0;
            }
            "is_external" => self.external |= value_as::<True, _>(map)?.0,
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// The parts of a `user` event's `parse_data` that are read: the intent's name and
/// confidence, and the metadata (where Rasa also writes `is_external`). Parse data is Rasa's own, but read
/// leniently all the same: a shape it would never write only means there is no intent to
/// read. Of a key given twice the last counts, as for any JSON object read whole.
#[derive(Default)]
struct LiteParse<'a> {
    intent: Intent<'a>,
    external: bool,
}

impl<'de: 'a, 'a> Shape<'de> for LiteParse<'a> {
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "intent" => self.intent = value_as::<Intent, _>(map)?,
            "metadata" => self.external = value_as::<ExternalOnly, _>(map)?.0,
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// An intent's `name` when it is a string, and its `confidence` when it is a number (the
/// last of each given).
#[derive(Default)]
struct Intent<'a> {
    name: Option<Cow<'a, str>>,
    confidence: Option<f64>,
}

impl<'de: 'a, 'a> Shape<'de> for Intent<'a> {
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "name" => self.name = value_as::<Str, _>(map)?.0,
            "confidence" => self.confidence = value_as::<Number, _>(map)?.0,
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// A number, as a float.
#[derive(Default)]
struct Number(Option<f64>);

impl Shape<'_> for Number {
    fn number(&mut self, n: f64) {
        self.0 = Some(n);
    }
}

/// Whether an object's `is_external` is `true` (the last one given).
#[derive(Default)]
struct ExternalOnly(bool);

impl<'de> Shape<'de> for ExternalOnly {
    fn entry<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "is_external" => self.0 = value_as::<True, _>(map)?.0,
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// A string, borrowed from the body when it has no escapes; nothing for any other value.
#[derive(Default)]
struct Str<'a>(Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Shape<'de> for Str<'a> {
    fn string(&mut self, s: Cow<'de, str>) {
        self.0 = Some(s);
    }
}

/// Whether the value is `true`.
#[derive(Default)]
struct True(bool);

impl Shape<'_> for True {
    fn truth(&mut self) {
        self.0 = true;
    }
}

/// How a value of any JSON type is read, in one pass and without building it: an object
/// key by key (`entry`; what it does not read it skips), a string, `true` or a number where
/// kept, anything else as the default. Only malformed JSON is an error, and what an `entry`
/// refuses.
trait Shape<'de>: Default {
    fn entry<A: MapAccess<'de>>(&mut self, _key: &str, map: &mut A) -> Result<(), A::Error> {
        skip(map)
    }
    fn string(&mut self, _: Cow<'de, str>) {}
    fn truth(&mut self) {}
    fn number(&mut self, _: f64) {}
}

/// The next value of `map`, read as `T`.
fn value_as<'de, T: Shape<'de>, A: MapAccess<'de>>(map: &mut A) -> Result<T, A::Error> {
    Ok(map.next_value::<Lenient<T>>()?.0)
}

/// Skips the next value of `map` (checking it is JSON).
fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(drop)
}

/// A [`Shape`] as serde reads it.
struct Lenient<T>(T);

impl<'de, T: Shape<'de>> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Any<T>(std::marker::PhantomData<T>);
        impl<'de, T: Shape<'de>> Visitor<'de> for Any<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
                let mut value = T::default();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    value.entry(&key, &mut map)?;
                }
                Ok(value)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(T::default())
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<T, E> {
                let mut value = T::default();
                value.string(Cow::Borrowed(v));
                Ok(value)
            }
            fn visit_str<E>(self, v: &str) -> Result<T, E> {
                let mut value = T::default();
                value.string(Cow::Owned(v.to_owned()));
                Ok(value)
            }
            fn visit_bool<E>(self, v: bool) -> Result<T, E> {
                let mut value = T::default();
                if v {
                    value.truth();
                }
                Ok(value)
            }
            fn visit_unit<E>(self) -> Result<T, E> {
                Ok(T::default())
            }
            fn visit_i64<E>(self, v: i64) -> Result<T, E> {
                Ok(number(v as f64))
            }
            fn visit_u64<E>(self, v: u64) -> Result<T, E> {
                Ok(number(v as f64))
            }
            fn visit_f64<E>(self, v: f64) -> Result<T, E> {
                Ok(number(v))
            }
        }
        fn number<'de, T: Shape<'de>>(n: f64) -> T {
            let mut value = T::default();
            value.number(n);
            value
        }
        let value = deserializer.deserialize_any(Any::<T>(std::marker::PhantomData))?;
        Ok(Lenient(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::RawJson;

    fn fields(json: &str) -> Result<Fields<'_>, serde_json::Error> {
        let raw: RawJson = serde_json::from_str(json).unwrap();
        RawEvent::from_raw(raw).unwrap().fields()
    }

    #[test]
    fn reads_what_an_action_reads() {
        let user = fields(
            r#"{"event": "user", "timestamp": 1.5, "text": "yes", "message_id": "m1",
                "parse_data": {"intent": {"name": "affirm", "confidence": 0.97},
                               "entities": [{"entity": "x", "extractor": "DIETClassifier"}],
                               "intent_ranking": [{"name": "deny", "confidence": 0.01}]},
                "metadata": {"channel": {"nested": [1, 2, {"deep": true}]}}}"#,
        )
        .unwrap();
        assert_eq!(user.text.as_deref(), Some("yes"));
        assert_eq!(user.message_id.as_deref(), Some("m1"));
        assert_eq!(user.intent.as_deref(), Some("affirm"));
        assert_eq!(user.confidence, Some(0.97));
        assert!(!user.is_external);
        let bot = fields(
            r#"{"event": "bot", "text": "Sure \"now\"?", "metadata": {"utter_action": "utter_ask"}}"#,
        )
        .unwrap();
        assert_eq!(bot.text.as_deref(), Some("Sure \"now\"?"));
        assert_eq!(bot.utter_action.as_deref(), Some("utter_ask"));
        let slot = fields(r#"{"event": "slot", "name": "plan", "value": {"a": [1]}}"#).unwrap();
        assert_eq!(slot.name.as_deref(), Some("plan"));
        assert_eq!(slot.value, Some(serde_json::json!({"a": [1]})));
        let tool = fields(
            r#"{"event": "tool_executed", "tool_name": "t", "arguments": {"confirmed": true}}"#,
        )
        .unwrap();
        assert_eq!(tool.tool_name.as_deref(), Some("t"));
        assert_eq!(tool.arguments, Some(serde_json::json!({"confirmed": true})));
    }

    #[test]
    fn untrusted_metadata_of_any_shape_reads_as_nothing() {
        for metadata in [
            r#"[1, 2]"#,
            r#""text""#,
            r#"{"utter_action": 7, "is_external": "yes"}"#,
            r#"{"utter_action": null, "is_external": 1}"#,
            r#"{"utter_action": ["a"], "is_external": {"x": true}}"#,
        ] {
            let event = format!(r#"{{"event": "bot", "text": "hi", "metadata": {metadata}}}"#);
            let bot = fields(&event).unwrap();
            assert_eq!(bot.utter_action, None, "{metadata}");
            assert!(!bot.is_external, "{metadata}");
        }
        let odd_intent = fields(
            r#"{"event": "user", "parse_data": {"intent": {"name": 3, "confidence": "high"}}}"#,
        )
        .unwrap();
        assert_eq!((odd_intent.intent, odd_intent.confidence), (None, None));
    }

    #[test]
    fn rasas_own_messages_are_marked_wherever_rasa_marks_them() {
        for event in [
            r#"{"event": "user", "text": "EXTERNAL: x", "metadata": {"is_external": true}}"#,
            r#"{"event": "user", "text": "EXTERNAL: x", "parse_data": {"metadata": {"is_external": true}}}"#,
        ] {
            assert!(fields(event).unwrap().is_external, "{event}");
        }
    }

    /// Values of every type and of the shapes the fields read, some of them given
    /// twice, escaped, or of a type serde refuses.
    const VALUES: [&str; 24] = [
        r#""plain""#,
        r#""esc\"aped \u00e9""#,
        r#""""#,
        "null",
        "true",
        "false",
        "0",
        "-2.5e3",
        "0.97",
        "1e400",
        "18446744073709551616",
        "[]",
        r#"[1, {"a": [true]}]"#,
        "{}",
        r#"{"utter_action": "utter_ask", "is_external": true}"#,
        r#"{"utter_action": 7, "is_external": "yes"}"#,
        r#"{"utter_action": "a", "utter_action": "b"}"#,
        r#"{"utter_action": "a\nb", "is_external": false, "is_external": true}"#,
        r#"{"utter\u005faction": "a"}"#,
        r#"{"intent": {"name": "affirm", "confidence": 0.97}, "entities": [{"entity": "x"}]}"#,
        r#"{"intent": {"name": "x", "name": 3, "confidence": 1}, "intent": {"confidence": "high"}}"#,
        r#"{"intent": [], "metadata": {"is_external": true}, "metadata": {"is_external": 1}}"#,
        r#"{"metadata": {"is_external": true}, "intent": {"name": "deny", "confidence": -0.0}}"#,
        r#"{"confirmed": true, "plan": {"deep": [[[["x"]]]]}}"#,
    ];
    const KEYS: [&str; 13] = [
        "event",
        "timestamp",
        "text",
        "message_id",
        "name",
        "value",
        "tool_name",
        "arguments",
        "metadata",
        "parse_data",
        "policy",
        "te\\u0078t",
        "",
    ];

    /// The walk's reading of an event, checked against serde's: where the walk answers,
    /// serde reads the same fields.
    fn agrees(json: &str) -> bool {
        let raw: RawJson = serde_json::from_str(json).unwrap();
        // An event without a kind or time it can read is refused before its fields are.
        let (Ok(event), Some(walked)) = (RawEvent::from_raw(raw), walk(raw)) else {
            return false;
        };
        let by_serde = event.fields_by_serde();
        assert_eq!(by_serde.as_ref().ok(), Some(&walked), "{json}");
        true
    }

    #[test]
    fn the_walk_agrees_with_serde() {
        let mut answered = 0;
        let mut events = 0;
        for (k1, v1) in KEYS.iter().flat_map(|k| VALUES.iter().map(move |v| (k, v))) {
            for (k2, v2) in KEYS.iter().flat_map(|k| VALUES.iter().map(move |v| (k, v))) {
                let event = format!(r#"{{"event": "user", "{k1}": {v1}, "{k2}": {v2}}}"#);
                events += 1;
                answered += usize::from(agrees(&event));
            }
        }
        // Both readings are exercised: about a fifth of these are the walk's (the rest have
        // an escape, a key twice, a type serde refuses, or no time from_raw reads).
        assert!(answered * 10 > events, "{answered} of {events}");
        // Deep values: serde's limit is met inside the event one level sooner.
        for depth in [1, 100, 126, 127, 128, 200] {
            let deep = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
            for key in ["value", "arguments", "metadata", "policy"] {
                let answered = agrees(&format!(r#"{{"event": "slot", "{key}": {deep}}}"#));
                assert!(answered || depth > 100, "{key} at {depth}");
            }
        }
    }

    #[test]
    fn the_walk_reads_every_event_rasa_sent() {
        let text = include_str!("../../../../tests/fixtures/rasa-3.6.21/apply_request.json");
        let request = crate::WebhookRequest::parse(text.as_bytes())
            .unwrap()
            .unwrap();
        let events = &request.tracker.unwrap().events;
        assert!(events.len() > 10);
        for event in events {
            assert!(agrees(event.raw().get()), "{}", event.raw().get());
        }
    }

    #[test]
    fn what_cannot_be_read_one_way_is_refused() {
        // Two names for the response: which one the customer saw is unknowable.
        assert!(fields(
            r#"{"event": "bot", "metadata": {"utter_action": "a", "utter_action": "b"}}"#
        )
        .is_err());
        // The kind or the time given twice.
        assert!(fields(r#"{"event": "bot", "timestamp": 1, "timestamp": 2}"#).is_err());
    }
}
