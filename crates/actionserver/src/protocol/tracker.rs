//! The tracker as Rasa sends it, with the reading helpers rasa-sdk's `Tracker` offers.
//!
//! Every key is kept as the raw JSON that arrived (so the tracker serialises back without
//! losing a field); the keys the server reads are also parsed once into typed fields.

use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use super::events::{EventKind, RawEvent};
use super::scan::RawJson;

/// Slot values by name. Duplicate names are refused: a second `change_tag` in one
/// request is an attack, not a conversation.
#[derive(Default, Clone, PartialEq)]
pub struct Slots(HashMap<String, Value>);

impl fmt::Debug for Slots {
    /// By name, so two readings of one tracker print the same.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut slots: Vec<_> = self.0.iter().collect();
        slots.sort_unstable_by_key(|(name, _)| *name);
        f.debug_tuple("Slots").field(&slots).finish()
    }
}

impl Slots {
    /// The slot's value, `None` when unset or null.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    /// The slot's value as sent, null included (`None` only when the slot is absent).
    pub fn get_raw(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    /// The slot as a string, if it is one.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.get(name)?.as_str()
    }

    /// Every slot and its value.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.0.iter()
    }

    /// Slots from names and values.
    pub fn from_pairs<I: IntoIterator<Item = (String, Value)>>(pairs: I) -> Self {
        Self(pairs.into_iter().collect())
    }
}

impl<'de> Deserialize<'de> for Slots {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SlotsVisitor;
        impl<'de> Visitor<'de> for SlotsVisitor {
            type Value = Slots;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of slot values")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Slots, E> {
                Ok(Slots::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Slots, A::Error> {
                // Room for a small domain's slots from the start; one hash of each name.
                let mut slots = HashMap::with_capacity(map.size_hint().unwrap_or(16).min(256));
                while let Some((key, value)) = map.next_entry::<String, Value>()? {
                    match slots.entry(key) {
                        Entry::Occupied(taken) => {
                            return Err(de::Error::custom(format!(
                                "duplicate slot `{}`",
                                taken.key()
                            )));
                        }
                        Entry::Vacant(free) => {
                            free.insert(value);
                        }
                    }
                }
                Ok(Slots(slots))
            }
        }
        deserializer.deserialize_any(SlotsVisitor)
    }
}

/// The active loop (form), as Rasa sends it.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
pub struct ActiveLoop {
    #[serde(default)]
    /// The name it carries (an action, a slot, a loop, ...).
    pub name: Option<String>,
    #[serde(default)]
    /// Whether the loop is interrupted.
    pub is_interrupted: Option<bool>,
    #[serde(default)]
    /// Whether the loop rejected the last value.
    pub rejected: Option<bool>,
    #[serde(default)]
    /// The message that started the loop.
    pub trigger_message: Option<Value>,
}

/// The conversation state Rasa sends with every call, borrowing its raw parts from the
/// request body.
#[derive(Debug)]
pub struct Tracker<'a> {
    /// The conversation's id.
    pub sender_id: String,
    /// The slots' values.
    pub slots: Slots,
    /// Parse data of the latest user message (`{}` when absent or null).
    pub latest_message: Value,
    /// The events, as received.
    pub events: Vec<RawEvent<'a>>,
    /// The action Rasa runs next, when set.
    pub followup_action: Option<String>,
    /// Whether the conversation is paused.
    pub paused: bool,
    /// The active loop (form).
    pub active_loop: ActiveLoop,
    /// The latest action Rasa ran.
    pub latest_action_name: Option<String>,
    /// Rasa Pro's dialogue stack (`[]` when absent or null).
    stack: Vec<Value>,
    /// The customer's id, where the channel gives one (Rasa Pro).
    user_id: Option<String>,
    /// Every key as received, in order; `None` marks where `events` was.
    fields: Vec<(Cow<'a, str>, Option<RawJson<'a>>)>,
}

/// A tracker key, borrowed from the body unless it has escapes (serde's `Cow<str>` always
/// copies).
struct Key<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for KeyVisitor<'a> {
            type Value = Key<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'a>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'a>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'a>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor(std::marker::PhantomData))
    }
}

fn parse_field<T: de::DeserializeOwned>(key: &str, raw: RawJson) -> Result<T, String> {
    serde_json::from_str(raw.get()).map_err(|e| format!("tracker.{key}: {e}"))
}

/// A tracker being read key by key: what serde's reading and the webhook body's walk
/// (`WebhookRequest::parse`) share, so both keep and refuse the same.
pub(crate) struct Reading<'a> {
    sender_id: Option<String>,
    slots: Slots,
    latest_message: Value,
    events: Option<Vec<RawEvent<'a>>>,
    followup_action: Option<String>,
    paused: bool,
    active_loop: ActiveLoop,
    active_form: Option<ActiveLoop>,
    latest_action_name: Option<String>,
    stack: Vec<Value>,
    user_id: Option<String>,
    fields: Vec<(Cow<'a, str>, Option<RawJson<'a>>)>,
}

impl<'a> Reading<'a> {
    pub(crate) fn new() -> Self {
        Self {
            sender_id: None,
            slots: Slots::default(),
            latest_message: Value::Object(Default::default()),
            events: None,
            followup_action: None,
            paused: false,
            active_loop: ActiveLoop::default(),
            active_form: None,
            latest_action_name: None,
            stack: Vec::new(),
            user_id: None,
            fields: Vec::new(),
        }
    }

    /// Refuses a key the tracker already has.
    pub(crate) fn check_key(&self, key: &str) -> Result<(), String> {
        if self.fields.iter().any(|(k, _)| *k == key) {
            return Err(format!("duplicate key tracker.{key}"));
        }
        Ok(())
    }

    /// The `events` key (null reads as none).
    pub(crate) fn events(&mut self, key: Cow<'a, str>, events: Option<Vec<RawEvent<'a>>>) {
        self.events = Some(events.unwrap_or_default());
        self.fields.push((key, None));
    }

    /// Any other key: kept raw, and parsed when the server reads it.
    pub(crate) fn field(&mut self, key: Cow<'a, str>, raw: RawJson<'a>) -> Result<(), String> {
        match &*key {
            "sender_id" => self.sender_id = parse_field::<Option<String>>(&key, raw)?,
            "slots" => self.slots = parse_field(&key, raw)?,
            "latest_message" => {
                let v: Value = parse_field(&key, raw)?;
                if !(v.is_object() || v.is_null()) {
                    return Err("tracker.latest_message: expected an object".to_owned());
                }
                if v.is_object() {
                    self.latest_message = v;
                }
            }
            "followup_action" => self.followup_action = parse_field(&key, raw)?,
            "paused" => self.paused = parse_field::<Option<bool>>(&key, raw)?.unwrap_or(false),
            "active_loop" => {
                self.active_loop = parse_field::<Option<ActiveLoop>>(&key, raw)?.unwrap_or_default()
            }
            "active_form" => self.active_form = parse_field::<Option<ActiveLoop>>(&key, raw)?,
            "latest_action_name" => self.latest_action_name = parse_field(&key, raw)?,
            "stack" => {
                self.stack = parse_field::<Option<Vec<Value>>>(&key, raw)?.unwrap_or_default()
            }
            "user_id" => self.user_id = parse_field(&key, raw)?,
            "latest_event_time" => {
                parse_field::<Option<f64>>(&key, raw)?;
            }
            "latest_input_channel" => {
                parse_field::<Option<String>>(&key, raw)?;
            }
            _ => {}
        }
        self.fields.push((key, Some(raw)));
        Ok(())
    }

    /// The tracker read; refused without a `sender_id`.
    pub(crate) fn finish(self) -> Result<Tracker<'a>, String> {
        let sender_id = self
            .sender_id
            .ok_or_else(|| "tracker.sender_id is missing".to_owned())?;
        let mut active_loop = self.active_loop;
        if active_loop.name.is_none() {
            if let Some(form) = self.active_form {
                active_loop = form;
            }
        }
        Ok(Tracker {
            sender_id,
            slots: self.slots,
            latest_message: self.latest_message,
            events: self.events.unwrap_or_default(),
            followup_action: self.followup_action,
            paused: self.paused,
            active_loop,
            latest_action_name: self.latest_action_name,
            stack: self.stack,
            user_id: self.user_id,
            fields: self.fields,
        })
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Tracker<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TrackerVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for TrackerVisitor<'a> {
            type Value = Tracker<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a tracker object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tracker<'a>, A::Error> {
                let mut reading = Reading::new();
                while let Some(Key(key)) = map.next_key::<Key<'a>>()? {
                    reading.check_key(&key).map_err(de::Error::custom)?;
                    if key == "events" {
                        let list: Option<Vec<RawEvent>> = map
                            .next_value()
                            .map_err(|e| de::Error::custom(format!("tracker.events: {e}")))?;
                        reading.events(key, list);
                        continue;
                    }
                    let raw: RawJson<'de> = map.next_value()?;
                    reading.field(key, raw).map_err(de::Error::custom)?;
                }
                reading.finish().map_err(de::Error::custom)
            }
        }
        deserializer.deserialize_map(TrackerVisitor(std::marker::PhantomData))
    }
}

impl Serialize for Tracker<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.fields.len()))?;
        for (key, raw) in &self.fields {
            match raw {
                Some(raw) => map.serialize_entry(key, raw)?,
                None => map.serialize_entry(key, &self.events)?,
            }
        }
        map.end()
    }
}

impl<'a> Tracker<'a> {
    /// `get_slot(name)`: the slot's value, `None` when unset or null.
    pub fn get_slot(&self, name: &str) -> Option<&Value> {
        self.slots.get(name)
    }

    /// The events as Rasa applies them, like rasa-sdk's `applied_events()`: a `restart`
    /// drops everything before it, `undo` removes back to and including the previous
    /// `action`, `rewind` removes back to the previous `user` and then the previous
    /// `action`. Linear in the number of events: every event is pushed and popped at most
    /// once.
    pub fn applied_events(&self) -> Vec<&RawEvent<'a>> {
        applied(&self.events, false)
    }

    /// The applied events of the current session: like [`Self::applied_events`], and a
    /// `session_started` also drops everything before it.
    pub fn session_events(&self) -> Vec<&RawEvent<'a>> {
        applied(&self.events, true)
    }

    /// Events after the latest `restart`, as rasa-sdk's `events_after_latest_restart()`.
    pub fn events_after_latest_restart(&self) -> &[RawEvent<'a>] {
        let start = self
            .events
            .iter()
            .rposition(|e| e.kind() == EventKind::Restart)
            .map_or(0, |i| i + 1);
        &self.events[start..]
    }

    /// The parse data of the latest user message.
    pub fn latest_message(&self) -> &Value {
        &self.latest_message
    }

    /// The intent of the latest message: the first of `intent_ranking` that is not
    /// `nlu_fallback`, else `intent.name`.
    pub fn latest_intent(&self) -> Option<&str> {
        let msg = &self.latest_message;
        if let Some(ranking) = msg.get("intent_ranking").and_then(Value::as_array) {
            if let Some(name) = ranking
                .iter()
                .filter_map(|i| i.get("name").and_then(Value::as_str))
                .find(|n| *n != "nlu_fallback")
            {
                return Some(name);
            }
        }
        msg.get("intent")?.get("name")?.as_str()
    }

    /// `get_latest_entity_values(entity_type, role, group)`: the values of the latest
    /// message's entities of that type, role and group; as in rasa-sdk, `None` asks for
    /// an entity *without* a role (or group), not for any.
    pub fn latest_entity_values<'s>(
        &'s self,
        entity_type: &'s str,
        role: Option<&'s str>,
        group: Option<&'s str>,
    ) -> impl Iterator<Item = &'s Value> + 's {
        self.latest_message
            .get("entities")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(move |e| {
                e.get("entity").and_then(Value::as_str) == Some(entity_type)
                    && same(e.get("role"), role)
                    && same(e.get("group"), group)
            })
            .filter_map(|e| e.get("value"))
    }

    /// `slots_to_validate()`: the trailing run of `slot` events (the candidates Rasa's
    /// form appends before it calls a validation action), as slot name and value; a slot
    /// set twice in the run keeps its first place and its last value, as rasa-sdk's dict.
    pub fn slots_to_validate(&self) -> Vec<(String, Value)> {
        let start = self
            .events
            .iter()
            .rposition(|e| e.kind() != EventKind::Slot)
            .map_or(0, |i| i + 1);
        let mut out: Vec<(String, Value)> = Vec::new();
        for event in &self.events[start..] {
            if let Ok(crate::protocol::Event::Slot(slot)) = event.typed() {
                match out.iter_mut().find(|(name, _)| *name == slot.name) {
                    Some((_, value)) => *value = slot.value,
                    None => out.push((slot.name, slot.value)),
                }
            }
        }
        out
    }

    /// `active_loop_name`: `None` when no loop is active (or it is `should_not_be_set`).
    pub fn active_loop_name(&self) -> Option<&str> {
        self.active_loop
            .name
            .as_deref()
            .filter(|n| *n != "should_not_be_set")
    }

    /// `get_latest_input_channel()`: the channel of the latest `user` event.
    pub fn latest_input_channel(&self) -> Option<String> {
        let event = self
            .events
            .iter()
            .rev()
            .find(|e| e.kind() == EventKind::User)?;
        match event.typed().ok()? {
            crate::protocol::Event::User(user) => user.input_channel,
            _ => None,
        }
    }

    /// Whether the conversation is paused (`ConversationPaused`).
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// `get_intent_of_latest_message(skip_fallback_intent)`, as rasa-sdk reads it: the
    /// first of `intent_ranking` (the second when the first is `nlu_fallback` and
    /// `skip_fallback` is set), `None` without a ranking. [`Self::latest_intent`] also
    /// falls back to `intent.name`.
    pub fn intent_of_latest_message(&self, skip_fallback: bool) -> Option<&str> {
        let ranking = self
            .latest_message
            .get("intent_ranking")?
            .as_array()
            .filter(|r| !r.is_empty())?;
        let name = |i: usize| ranking.get(i)?.get("name")?.as_str();
        match name(0)? {
            "nlu_fallback" if skip_fallback => name(1),
            first => Some(first),
        }
    }

    /// The metadata the latest customer message came with (what the channel sent beside
    /// the text): the latest message's `metadata`, else the latest `user` event's.
    pub fn latest_message_metadata(&self) -> Option<Value> {
        if let Some(metadata) = self.latest_message.get("metadata").filter(|m| !m.is_null()) {
            return Some(metadata.clone());
        }
        let event = self
            .events
            .iter()
            .rev()
            .find(|e| e.kind() == EventKind::User)?;
        match event.typed().ok()? {
            crate::protocol::Event::User(user) => user.metadata.filter(|m| !m.is_null()),
            _ => None,
        }
    }

    /// Rasa Pro's dialogue stack (the flows in progress), `[]` without one.
    pub fn stack(&self) -> &[Value] {
        &self.stack
    }

    /// The customer's id, where the channel gives one (Rasa Pro's `user_id`).
    pub fn user_id(&self) -> Option<&str> {
        self.user_id.as_deref()
    }

    /// `get_last_event_for(kind, exclude, skip)`: the latest applied event of this kind
    /// (`"action"`, `"user"`, `"slot"`, ...), passing over `skip` of them and over
    /// actions named in `exclude`.
    pub fn last_event_for(
        &self,
        kind: &str,
        exclude: &[&str],
        skip: usize,
    ) -> Option<&RawEvent<'a>> {
        self.applied_events()
            .into_iter()
            .rev()
            .filter(|e| e.name() == kind)
            .filter(|e| {
                e.kind() != EventKind::Action
                    || !matches!(e.typed(), Ok(crate::protocol::Event::Action(a))
                        if a.name.as_deref().is_some_and(|n| exclude.contains(&n)))
            })
            .nth(skip)
    }

    /// `last_executed_action_has(name, skip)`: whether the latest action other than
    /// `action_listen` (passing over `skip` of them) is `name`.
    pub fn last_executed_action_has(&self, name: &str, skip: usize) -> bool {
        self.last_event_for("action", &["action_listen"], skip)
            .and_then(|e| match e.typed().ok()? {
                crate::protocol::Event::Action(a) => a.name,
                _ => None,
            })
            .is_some_and(|n| n == name)
    }
}

/// rasa-sdk's `x.get("role") == role`: an absent (or null) field matches only `None`.
fn same(field: Option<&Value>, wanted: Option<&str>) -> bool {
    match (field.filter(|v| !v.is_null()), wanted) {
        (None, None) => true,
        (Some(v), Some(w)) => v.as_str() == Some(w),
        _ => false,
    }
}

fn applied<'e, 'a>(events: &'e [RawEvent<'a>], session: bool) -> Vec<&'e RawEvent<'a>> {
    fn undo_till(done: &mut Vec<&RawEvent<'_>>, kind: EventKind) {
        while let Some(event) = done.pop() {
            if event.kind() == kind {
                break;
            }
        }
    }
    let mut done: Vec<&RawEvent<'a>> = Vec::with_capacity(events.len());
    for event in events {
        match event.kind() {
            EventKind::Restart => done.clear(),
            EventKind::SessionStarted if session => {
                done.clear();
                done.push(event);
            }
            EventKind::Undo => undo_till(&mut done, EventKind::Action),
            EventKind::Rewind => {
                undo_till(&mut done, EventKind::User);
                undo_till(&mut done, EventKind::Action);
            }
            _ => done.push(event),
        }
    }
    done
}
