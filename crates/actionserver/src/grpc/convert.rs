//! The protobuf messages as the JSON the webhook carries, both ways. A request becomes the
//! JSON that rasa-sdk's `MessageToDict(request, preserving_proto_field_name=True)` makes of
//! it (fields at their default are absent; the domain's intents, entities and actions stay
//! `{"string_value": ...}` objects), but with whole numbers as integers (see [`is_whole`]),
//! so an action sees over gRPC what it sees over HTTP; an answer's events and responses
//! become `Struct`s as `ParseDict` makes them.

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value as ProtoValue};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Number, Value};

use super::proto;

/// Whether a double is a whole number an `i64` holds exactly. Protobuf's `Struct` has only
/// doubles: Rasa's integers (a slot of 12, a count) arrive as 12.0 and are given back to the
/// actions as the integers they were, so a question Rasa rendered with "12" is rendered the
/// same here. (rasa-sdk's `MessageToDict` hands its actions 12.0.)
fn is_whole(n: f64) -> bool {
    n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0
}

/// A protobuf `Value` as JSON. A number that JSON cannot hold (NaN, infinities) is null.
pub fn value_to_json(value: &ProtoValue) -> Value {
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) if is_whole(*n) => Value::Number(Number::from(*n as i64)),
        Some(Kind::NumberValue(n)) => Number::from_f64(*n).map_or(Value::Null, Value::Number),
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::StructValue(s)) => Value::Object(struct_to_json(s)),
        Some(Kind::ListValue(list)) => {
            Value::Array(list.values.iter().map(value_to_json).collect())
        }
    }
}

/// A protobuf `Struct` as a JSON object.
pub fn struct_to_json(value: &Struct) -> Map<String, Value> {
    value
        .fields
        .iter()
        .map(|(k, v)| (k.clone(), value_to_json(v)))
        .collect()
}

/// JSON as a protobuf `Value` (numbers as doubles, as protobuf has them).
pub fn json_to_value(value: &Value) -> ProtoValue {
    let kind = match value {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(json_to_value).collect(),
        }),
        Value::Object(map) => Kind::StructValue(json_to_struct(map)),
    };
    ProtoValue { kind: Some(kind) }
}

/// A JSON object as a protobuf `Struct`.
pub fn json_to_struct(map: &Map<String, Value>) -> Struct {
    Struct {
        fields: map
            .iter()
            .map(|(k, v)| (k.clone(), json_to_value(v)))
            .collect(),
    }
}

/// Each JSON value that is an object, as a `Struct` (others are left out, as `ParseDict`
/// would refuse them).
fn structs(values: &[Value]) -> Vec<Struct> {
    values
        .iter()
        .filter_map(Value::as_object)
        .map(json_to_struct)
        .collect()
}

/// The request as the webhook's JSON body, written straight from the message (no JSON
/// tree in between): what the server parses. The same JSON as [`request_to_json`].
pub fn request_to_json_bytes(request: &proto::WebhookRequest) -> Vec<u8> {
    serde_json::to_vec(&AsJson(request)).expect("protobuf values serialise")
}

/// A message serialised as `MessageToDict` would write it.
struct AsJson<'a, T>(&'a T);

impl Serialize for AsJson<'_, ProtoValue> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0.kind {
            None | Some(Kind::NullValue(_)) => s.serialize_unit(),
            Some(Kind::NumberValue(n)) if is_whole(*n) => s.serialize_i64(*n as i64),
            Some(Kind::NumberValue(n)) if n.is_finite() => s.serialize_f64(*n),
            Some(Kind::NumberValue(_)) => s.serialize_unit(),
            Some(Kind::StringValue(v)) => s.serialize_str(v),
            Some(Kind::BoolValue(b)) => s.serialize_bool(*b),
            Some(Kind::StructValue(v)) => AsJson(v).serialize(s),
            Some(Kind::ListValue(list)) => {
                let mut seq = s.serialize_seq(Some(list.values.len()))?;
                for v in &list.values {
                    seq.serialize_element(&AsJson(v))?;
                }
                seq.end()
            }
        }
    }
}

impl Serialize for AsJson<'_, Struct> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.fields.len()))?;
        for (k, v) in &self.0.fields {
            map.serialize_entry(k, &AsJson(v))?;
        }
        map.end()
    }
}

/// A list of structs.
struct Structs<'a>(&'a [Struct]);

impl Serialize for Structs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for v in self.0 {
            seq.serialize_element(&AsJson(v))?;
        }
        seq.end()
    }
}

/// An intent, entity or action of the domain.
struct Either<'a>(&'a str, &'a Option<Struct>);

impl Serialize for Either<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        if !self.0.is_empty() {
            map.serialize_entry("string_value", self.0)?;
        }
        if let Some(d) = self.1 {
            map.serialize_entry("dict_value", &AsJson(d))?;
        }
        map.end()
    }
}

impl Serialize for AsJson<'_, proto::Tracker> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut map = s.serialize_map(None)?;
        if !t.sender_id.is_empty() {
            map.serialize_entry("sender_id", &t.sender_id)?;
        }
        if let Some(v) = &t.slots {
            map.serialize_entry("slots", &AsJson(v))?;
        }
        if let Some(v) = &t.latest_message {
            map.serialize_entry("latest_message", &AsJson(v))?;
        }
        if !t.events.is_empty() {
            map.serialize_entry("events", &Structs(&t.events))?;
        }
        if t.paused {
            map.serialize_entry("paused", &true)?;
        }
        if let Some(v) = &t.followup_action {
            map.serialize_entry("followup_action", v)?;
        }
        if !t.active_loop.is_empty() {
            let sorted: std::collections::BTreeMap<_, _> = t.active_loop.iter().collect();
            map.serialize_entry("active_loop", &sorted)?;
        }
        if let Some(v) = &t.latest_action_name {
            map.serialize_entry("latest_action_name", v)?;
        }
        if !t.stack.is_empty() {
            map.serialize_entry("stack", &Structs(&t.stack))?;
        }
        if let Some(v) = &t.user_id {
            map.serialize_entry("user_id", v)?;
        }
        map.end()
    }
}

impl Serialize for AsJson<'_, proto::Domain> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let d = self.0;
        let mut map = s.serialize_map(None)?;
        let mut put = |key: &str, v: &Option<Struct>| match v {
            Some(v) => map.serialize_entry(key, &AsJson(v)),
            None => Ok(()),
        };
        put("config", &d.config)?;
        put("session_config", &d.session_config)?;
        if !d.intents.is_empty() {
            let items: Vec<_> = d
                .intents
                .iter()
                .map(|i| Either(&i.string_value, &i.dict_value))
                .collect();
            map.serialize_entry("intents", &items)?;
        }
        if !d.entities.is_empty() {
            let items: Vec<_> = d
                .entities
                .iter()
                .map(|i| Either(&i.string_value, &i.dict_value))
                .collect();
            map.serialize_entry("entities", &items)?;
        }
        if let Some(v) = &d.slots {
            map.serialize_entry("slots", &AsJson(v))?;
        }
        if let Some(v) = &d.responses {
            map.serialize_entry("responses", &AsJson(v))?;
        }
        if !d.actions.is_empty() {
            let items: Vec<_> = d
                .actions
                .iter()
                .map(|i| Either(&i.string_value, &i.dict_value))
                .collect();
            map.serialize_entry("actions", &items)?;
        }
        if let Some(v) = &d.forms {
            map.serialize_entry("forms", &AsJson(v))?;
        }
        if !d.e2e_actions.is_empty() {
            map.serialize_entry("e2e_actions", &Structs(&d.e2e_actions))?;
        }
        map.end()
    }
}

impl Serialize for AsJson<'_, proto::WebhookRequest> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let mut map = s.serialize_map(None)?;
        if !r.next_action.is_empty() {
            map.serialize_entry("next_action", &r.next_action)?;
        }
        if !r.sender_id.is_empty() {
            map.serialize_entry("sender_id", &r.sender_id)?;
        }
        if let Some(t) = &r.tracker {
            map.serialize_entry("tracker", &AsJson(t))?;
        }
        if let Some(d) = &r.domain {
            map.serialize_entry("domain", &AsJson(d))?;
        }
        if !r.version.is_empty() {
            map.serialize_entry("version", &r.version)?;
        }
        if let Some(d) = &r.domain_digest {
            map.serialize_entry("domain_digest", d)?;
        }
        map.end()
    }
}

/// The request as the webhook's JSON body, as a JSON value (for clients and tests; the
/// server parses [`request_to_json_bytes`]).
pub fn request_to_json(request: &proto::WebhookRequest) -> Value {
    serde_json::from_slice(&request_to_json_bytes(request)).expect("the bytes are JSON")
}

/// A webhook JSON body as the request Rasa Pro would send (`ParseDict` with unknown fields
/// ignored): for clients, tests and benchmarks.
pub fn request_from_json(body: &Value) -> proto::WebhookRequest {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    let object = |v: &Value, key: &str| v.get(key).and_then(Value::as_object).map(json_to_struct);
    let list = |v: &Value, key: &str| {
        v.get(key)
            .and_then(Value::as_array)
            .map(|items| structs(items))
            .unwrap_or_default()
    };
    let tracker = body
        .get("tracker")
        .filter(|t| t.is_object())
        .map(|t| proto::Tracker {
            sender_id: text(t, "sender_id").unwrap_or_default(),
            slots: object(t, "slots"),
            latest_message: object(t, "latest_message"),
            events: list(t, "events"),
            paused: t.get("paused").and_then(Value::as_bool).unwrap_or(false),
            followup_action: text(t, "followup_action"),
            active_loop: t
                .get("active_loop")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                        .collect()
                })
                .unwrap_or_default(),
            latest_action_name: text(t, "latest_action_name"),
            stack: list(t, "stack"),
            user_id: text(t, "user_id"),
        });
    let domain = body.get("domain").filter(|d| d.is_object()).map(|d| {
        let names = |key: &str| -> Vec<(String, Option<Struct>)> {
            d.get(key)
                .and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .map(|item| match item {
                            Value::String(s) => (s.clone(), None),
                            Value::Object(m) => (String::new(), Some(json_to_struct(m))),
                            _ => (String::new(), None),
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        proto::Domain {
            config: object(d, "config"),
            session_config: object(d, "session_config"),
            intents: names("intents")
                .into_iter()
                .map(|(string_value, dict_value)| proto::Intent {
                    string_value,
                    dict_value,
                })
                .collect(),
            entities: names("entities")
                .into_iter()
                .map(|(string_value, dict_value)| proto::Entity {
                    string_value,
                    dict_value,
                })
                .collect(),
            slots: object(d, "slots"),
            responses: object(d, "responses"),
            actions: names("actions")
                .into_iter()
                .map(|(string_value, dict_value)| proto::Action {
                    string_value,
                    dict_value,
                })
                .collect(),
            forms: object(d, "forms"),
            e2e_actions: list(d, "e2e_actions"),
        }
    });
    proto::WebhookRequest {
        next_action: text(body, "next_action").unwrap_or_default(),
        sender_id: text(body, "sender_id").unwrap_or_default(),
        tracker,
        domain,
        version: text(body, "version").unwrap_or_default(),
        domain_digest: text(body, "domain_digest"),
    }
}

/// An answer (`{"events", "responses"}`, as JSON) as the protobuf response.
pub fn response_from_json(answer: &Value) -> proto::WebhookResponse {
    let list = |key: &str| {
        answer
            .get(key)
            .and_then(Value::as_array)
            .map(|items| structs(items))
            .unwrap_or_default()
    };
    proto::WebhookResponse {
        events: list("events"),
        responses: list("responses"),
    }
}

/// The protobuf response as JSON (`{"events", "responses"}`), as Rasa Pro reads it.
pub fn response_to_json(response: &proto::WebhookResponse) -> Value {
    let list = |items: &[Struct]| {
        Value::Array(
            items
                .iter()
                .map(|s| Value::Object(struct_to_json(s)))
                .collect(),
        )
    };
    serde_json::json!({"events": list(&response.events), "responses": list(&response.responses)})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_goes_through_protobuf_and_back_as_rasa_sdk_reads_it() {
        let body = json!({
            "next_action": "count_events", "sender_id": "s1", "version": "3.21.0",
            "domain_digest": "abc",
            "tracker": {"sender_id": "s1", "slots": {"n": 3, "flag": null},
                        "events": [{"event": "action", "name": "action_listen", "timestamp": 1.5}],
                        "paused": false, "active_loop": {}, "latest_action_name": "action_listen"},
            "domain": {"intents": ["affirm", {"deny": {"use_entities": true}}],
                       "responses": {"utter_q": [{"text": "Sure?"}]}}
        });
        let back = request_to_json(&request_from_json(&body));
        assert_eq!(
            back,
            json!({
                "next_action": "count_events", "sender_id": "s1", "version": "3.21.0",
                "domain_digest": "abc",
                "tracker": {"sender_id": "s1", "slots": {"n": 3, "flag": null},
                            "events": [{"event": "action", "name": "action_listen", "timestamp": 1.5}],
                            "latest_action_name": "action_listen"},
                "domain": {"intents": [{"string_value": "affirm"},
                                       {"dict_value": {"deny": {"use_entities": true}}}],
                           "responses": {"utter_q": [{"text": "Sure?"}]}}
            })
        );
    }

    #[test]
    fn every_field_rasa_pro_sends_is_written() {
        let body = json!({
            "next_action": "x", "sender_id": "s", "version": "3.21.0",
            "tracker": {"sender_id": "s", "slots": {"a": [1, "b", {"c": true}]},
                        "events": [{"event": "user", "text": "hi", "timestamp": 2.5}],
                        "paused": true, "followup_action": "f", "active_loop": {"name": "form"},
                        "stack": [{"frame_id": "1"}], "user_id": "u"},
            "domain": {"intents": ["affirm"], "entities": ["e"], "actions": ["a"],
                       "forms": {"form": {}}, "e2e_actions": [{"x": 1}], "config": {"k": 1}}
        });
        let mut expected = body.clone();
        expected["domain"]["intents"] = json!([{"string_value": "affirm"}]);
        expected["domain"]["entities"] = json!([{"string_value": "e"}]);
        expected["domain"]["actions"] = json!([{"string_value": "a"}]);
        assert_eq!(request_to_json(&request_from_json(&body)), expected);
    }

    #[test]
    fn whole_numbers_come_back_as_integers_and_fractions_as_they_were() {
        let request = request_from_json(&json!({"tracker": {"slots": {
            "months": 12, "ratio": 0.5, "big": 1e300, "negative": -3, "timestamp": 1796027823.5}}}));
        let bytes: Value = serde_json::from_slice(&request_to_json_bytes(&request)).unwrap();
        assert_eq!(
            bytes["tracker"]["slots"],
            json!({"months": 12, "ratio": 0.5, "big": 1e300, "negative": -3, "timestamp": 1796027823.5})
        );
        assert_eq!(bytes["tracker"]["slots"]["months"].to_string(), "12");
        assert_eq!(
            request_to_json(&request)["tracker"]["slots"],
            bytes["tracker"]["slots"]
        );
    }

    #[test]
    fn numbers_json_cannot_hold_become_null() {
        let nan = ProtoValue {
            kind: Some(Kind::NumberValue(f64::NAN)),
        };
        assert_eq!(value_to_json(&nan), Value::Null);
    }
}
