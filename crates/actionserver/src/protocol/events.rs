//! Tracker events: the raw form kept from the wire, the typed form of every kind Rasa 3.6,
//! Rasa Pro and rasa-sdk emit, and the events an action returns.

use std::borrow::Cow;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::scan::RawJson;

/// The kinds of event the server distinguishes. Everything else is [`EventKind::Other`]
/// and passes through untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The `user` event.
    User,
    /// The `bot` event.
    Bot,
    /// The `action` event.
    Action,
    /// The `slot` event.
    Slot,
    /// The `session_started` event.
    SessionStarted,
    /// The `restart` event.
    Restart,
    /// The `rewind` event.
    Rewind,
    /// The `undo` event.
    Undo,
    /// The `other` event.
    Other,
}

impl EventKind {
    fn from_name(name: &str) -> Self {
        match name {
            "user" => Self::User,
            "bot" => Self::Bot,
            "action" => Self::Action,
            "slot" => Self::Slot,
            "session_started" => Self::SessionStarted,
            "restart" => Self::Restart,
            "rewind" => Self::Rewind,
            "undo" => Self::Undo,
            _ => Self::Other,
        }
    }
}

/// One event as it arrived: its raw JSON, borrowed from the request body (never copied),
/// plus its kind and timestamp read once (the timestamp's text, parsed when asked for).
#[derive(Debug, Clone)]
pub struct RawEvent<'a> {
    raw: RawJson<'a>,
    name: Cow<'a, str>,
    kind: EventKind,
    timestamp: Stamp<'a>,
}

/// An event's timestamp: the text of a plain decimal read off the front of the event
/// (finite by its shape), or what the full path read.
#[derive(Debug, Clone, Copy)]
enum Stamp<'a> {
    Text(&'a str),
    Read(Option<f64>),
}

/// What is read of every event while the tracker is parsed; the rest stays raw.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    event: Option<Cow<'a, str>>,
    #[serde(default)]
    timestamp: Option<f64>,
}

impl<'a> RawEvent<'a> {
    /// Reads the kind and timestamp of one raw event. An event without `event` is an error:
    /// Rasa never sends one, and nothing could be decided about it.
    pub fn from_raw(raw: RawJson<'a>) -> Result<Self, serde_json::Error> {
        // Serde's derived structs also read arrays, by position: an event must be an object.
        if !raw.get().trim_start().starts_with('{') {
            return Err(de::Error::custom("an event must be a JSON object"));
        }
        // Rasa writes `event` first and `timestamp` second; reading them off the front
        // spares a second pass over the event. Anything else takes the full path.
        let (name, timestamp) = match fast_head(raw.get()) {
            Some((name, timestamp)) => (Cow::Borrowed(name), Stamp::Text(timestamp)),
            None => {
                let head: Head = serde_json::from_str(raw.get())?;
                match head.event {
                    Some(name) if !name.is_empty() => {
                        (Cow::Owned(name.into_owned()), Stamp::Read(head.timestamp))
                    }
                    _ => return Err(de::Error::custom("an event has no `event` kind")),
                }
            }
        };
        Ok(Self {
            kind: EventKind::from_name(&name),
            name,
            timestamp,
            raw,
        })
    }

    /// The raw JSON text, exactly as received.
    pub fn raw(&self) -> RawJson<'a> {
        self.raw
    }

    /// The `event` field, e.g. `"user"` or `"flow_started"`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The event's kind.
    pub fn kind(&self) -> EventKind {
        self.kind
    }

    /// When it happened, in epoch seconds.
    pub fn timestamp(&self) -> Option<f64> {
        match self.timestamp {
            Stamp::Text(text) => text.parse().ok(),
            Stamp::Read(timestamp) => timestamp,
        }
    }

    /// Parses the event into its typed form.
    pub fn typed(&self) -> Result<Event, serde_json::Error> {
        Event::parse(&self.name, self.raw.get())
    }
}

/// `{"event": "NAME", "timestamp": NUMBER` at the start of an event, with a plain name
/// (no escapes) and a plain decimal (no exponent, at most 300 characters, so always a
/// finite `f64`), returned as text; `None` sends the event down the full path. The event is
/// valid JSON already (serde checked it while keeping it raw), so this only has to recognise
/// the shape, byte by byte.
fn fast_head(json: &str) -> Option<(&str, &str)> {
    let mut at = Cursor {
        bytes: json.as_bytes(),
        at: 0,
    };
    at.eat(b"{")?;
    at.eat(b"\"event\"")?;
    at.eat(b":")?;
    at.eat(b"\"")?;
    let name_start = at.at;
    let name_len = at.bytes[name_start..]
        .iter()
        .position(|&b| b == b'"' || b == b'\\')?;
    if name_len == 0 || at.bytes[name_start + name_len] != b'"' {
        return None;
    }
    // Both ends are ASCII bytes, so these (and the number's) are char boundaries.
    let name = &json[name_start..name_start + name_len];
    at.at = name_start + name_len + 1;
    at.eat(b",")?;
    at.eat(b"\"timestamp\"")?;
    at.eat(b":")?;
    at.skip_whitespace();
    let number = at.at;
    let len = at.bytes[number..]
        .iter()
        .position(|&b| !matches!(b, b'0'..=b'9' | b'.' | b'-'))?;
    if len == 0 || len > 300 {
        return None;
    }
    at.at = number + len;
    // An exponent, `null` or anything unusual: the full path decides.
    if at.eat(b",").is_none() && at.eat(b"}").is_none() {
        return None;
    }
    Some((name, &json[number..number + len]))
}

/// A position in a JSON text, stepping over JSON whitespace.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn skip_whitespace(&mut self) {
        while matches!(self.bytes.get(self.at), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.at += 1;
        }
    }

    /// Skips whitespace, then `token` if it is next.
    #[inline(always)]
    fn eat(&mut self, token: &[u8]) -> Option<()> {
        self.skip_whitespace();
        if self.bytes[self.at..].starts_with(token) {
            self.at += token.len();
            Some(())
        } else {
            None
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for RawEvent<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = RawJson::deserialize(deserializer)?;
        RawEvent::from_raw(raw).map_err(de::Error::custom)
    }
}

impl Serialize for RawEvent<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

/// `user`: a customer message.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct UserUttered {
    #[serde(default)]
    /// When it happened, in epoch seconds.
    pub timestamp: Option<f64>,
    #[serde(default)]
    /// The message text.
    pub text: Option<String>,
    #[serde(default)]
    /// What NLU made of it (intent, entities, ...).
    pub parse_data: Option<Value>,
    #[serde(default)]
    /// The channel it came from.
    pub input_channel: Option<String>,
    #[serde(default)]
    /// The message's id.
    pub message_id: Option<String>,
    #[serde(default)]
    /// Its metadata (the channel's, Rasa's model and assistant ids, `utter_action`, ...).
    pub metadata: Option<Value>,
    #[serde(flatten)]
    /// Every other field, kept as it came.
    pub extra: Map<String, Value>,
}

/// `bot`: a message the assistant sent; `metadata.utter_action` names the response that
/// produced it.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct BotUttered {
    #[serde(default)]
    /// When it happened, in epoch seconds.
    pub timestamp: Option<f64>,
    #[serde(default)]
    /// The message text.
    pub text: Option<String>,
    #[serde(default)]
    /// Buttons, images and the rest of a rich message.
    pub data: Option<Value>,
    #[serde(default)]
    /// Its metadata (the channel's, Rasa's model and assistant ids, `utter_action`, ...).
    pub metadata: Option<Value>,
    #[serde(flatten)]
    /// Every other field, kept as it came.
    pub extra: Map<String, Value>,
}

impl BotUttered {
    /// The name of the response template that produced this message, if any.
    pub fn utter_action(&self) -> Option<&str> {
        self.metadata.as_ref()?.get("utter_action")?.as_str()
    }
}

/// `action`: an action was executed (`action_execution_rejected` has the same shape).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct ActionExecuted {
    #[serde(default)]
    /// When it happened, in epoch seconds.
    pub timestamp: Option<f64>,
    #[serde(default)]
    /// The name it carries (an action, a slot, a loop, ...).
    pub name: Option<String>,
    #[serde(default)]
    /// The policy that chose the action.
    pub policy: Option<String>,
    #[serde(default)]
    /// How sure that policy was.
    pub confidence: Option<f64>,
    #[serde(default)]
    /// The text of an end-to-end action.
    pub action_text: Option<String>,
    #[serde(flatten)]
    /// Every other field, kept as it came.
    pub extra: Map<String, Value>,
}

/// `slot`: a slot was set.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct SlotSet {
    #[serde(default)]
    /// When it happened, in epoch seconds.
    pub timestamp: Option<f64>,
    /// The name it carries (an action, a slot, a loop, ...).
    pub name: String,
    #[serde(default)]
    /// The slot's value.
    pub value: Value,
    #[serde(flatten)]
    /// Every other field, kept as it came.
    pub extra: Map<String, Value>,
}

/// An event with only a timestamp and, at most, metadata (`restart`, `undo`, ...).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct Marker {
    #[serde(default)]
    /// When it happened, in epoch seconds.
    pub timestamp: Option<f64>,
    #[serde(flatten)]
    /// Every other field, kept as it came.
    pub extra: Map<String, Value>,
}

/// An event that names something (`active_loop`, `followup`, flow events, ...).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct Named {
    #[serde(default)]
    /// When it happened, in epoch seconds.
    pub timestamp: Option<f64>,
    #[serde(default)]
    /// The name it carries (an action, a slot, a loop, ...).
    pub name: Option<String>,
    #[serde(flatten)]
    /// Every other field, kept as it came.
    pub extra: Map<String, Value>,
}

/// `reminder` and `cancel_reminder`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct Reminder {
    #[serde(default)]
    /// When it happened, in epoch seconds.
    pub timestamp: Option<f64>,
    #[serde(default)]
    /// The intent.
    pub intent: Option<String>,
    #[serde(default)]
    /// The entities.
    pub entities: Option<Value>,
    #[serde(default)]
    /// When, in ISO 8601.
    pub date_time: Option<String>,
    #[serde(default)]
    /// The name it carries (an action, a slot, a loop, ...).
    pub name: Option<String>,
    #[serde(default)]
    /// Whether a customer message cancels it.
    pub kill_on_user_msg: Option<bool>,
    #[serde(flatten)]
    /// Every other field, kept as it came.
    pub extra: Map<String, Value>,
}

/// `loop_interrupted` (and the old `form_validation`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct LoopInterrupted {
    #[serde(default)]
    /// When it happened, in epoch seconds.
    pub timestamp: Option<f64>,
    #[serde(default)]
    /// Whether the loop is interrupted.
    pub is_interrupted: Option<bool>,
    #[serde(flatten)]
    /// Every other field, kept as it came.
    pub extra: Map<String, Value>,
}

/// `entities`: entities added without a message.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct EntitiesAdded {
    #[serde(default)]
    /// When it happened, in epoch seconds.
    pub timestamp: Option<f64>,
    #[serde(default)]
    /// The entities.
    pub entities: Vec<Value>,
    #[serde(flatten)]
    /// Every other field, kept as it came.
    pub extra: Map<String, Value>,
}

/// Every event kind that Rasa 3.6, Rasa Pro and rasa-sdk emit, typed; anything else is
/// kept whole as [`Event::Other`].
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The `user` event.
    User(UserUttered),
    /// The `bot` event.
    Bot(BotUttered),
    /// The `agent` event.
    Agent(BotUttered),
    /// The `action` event.
    Action(ActionExecuted),
    /// The `action_execution_rejected` event.
    ActionExecutionRejected(ActionExecuted),
    /// The `slot` event.
    Slot(SlotSet),
    /// The `session_started` event.
    SessionStarted(Marker),
    /// The `session_ended` event.
    SessionEnded(Marker),
    /// The `restart` event.
    Restart(Marker),
    /// The `rewind` event.
    Rewind(Marker),
    /// The `undo` event.
    Undo(Marker),
    /// The `pause` event.
    Pause(Marker),
    /// The `resume` event.
    Resume(Marker),
    /// The `reset_slots` event.
    ResetSlots(Marker),
    /// The `export` event.
    Export(Marker),
    /// The `user_featurization` event.
    UserFeaturization(Marker),
    /// The `active_loop` event.
    ActiveLoop(Named),
    /// The `loop_interrupted` event.
    LoopInterrupted(LoopInterrupted),
    /// The `followup` event.
    Followup(Named),
    /// The `reminder` event.
    Reminder(Reminder),
    /// The `cancel_reminder` event.
    CancelReminder(Reminder),
    /// The `entities` event.
    Entities(EntitiesAdded),
    /// Rasa Pro's CALM events (`flow_started`, `stack`, ...): the kind and the fields.
    Calm {
        /// The event's kind.
        kind: String,
        /// Its fields.
        fields: Named,
    },
    /// A kind this server does not know; kept as it came.
    Other(Value),
}

const CALM_KINDS: &[&str] = &[
    "flow_started",
    "flow_completed",
    "flow_interrupted",
    "flow_resumed",
    "flow_cancelled",
    "stack",
    "dialogue_stack_updated",
    "routing_session_ended",
    "session_ended",
];

impl Event {
    /// Parses the JSON text of an event whose `event` field is `kind`.
    pub fn parse(kind: &str, json: &str) -> Result<Self, serde_json::Error> {
        use serde_json::from_str as p;
        Ok(match kind {
            "user" => Self::User(p(json)?),
            "bot" => Self::Bot(p(json)?),
            "agent" => Self::Agent(p(json)?),
            "action" => Self::Action(p(json)?),
            "action_execution_rejected" => Self::ActionExecutionRejected(p(json)?),
            "slot" => Self::Slot(p(json)?),
            "session_started" => Self::SessionStarted(p(json)?),
            "session_ended" => Self::SessionEnded(p(json)?),
            "restart" => Self::Restart(p(json)?),
            "rewind" => Self::Rewind(p(json)?),
            "undo" => Self::Undo(p(json)?),
            "pause" => Self::Pause(p(json)?),
            "resume" => Self::Resume(p(json)?),
            "reset_slots" => Self::ResetSlots(p(json)?),
            "export" => Self::Export(p(json)?),
            "user_featurization" => Self::UserFeaturization(p(json)?),
            "active_loop" | "form" => Self::ActiveLoop(p(json)?),
            "loop_interrupted" | "form_validation" => Self::LoopInterrupted(p(json)?),
            "followup" => Self::Followup(p(json)?),
            "reminder" => Self::Reminder(p(json)?),
            "cancel_reminder" => Self::CancelReminder(p(json)?),
            "entities" => Self::Entities(p(json)?),
            k if CALM_KINDS.contains(&k) => Self::Calm {
                kind: k.to_owned(),
                fields: p(json)?,
            },
            _ => Self::Other(p(json)?),
        })
    }
}

/// An event an action returns, serialised exactly as rasa-sdk's constructor of the same
/// name writes it (its keys, in its order, `"timestamp": null` unless set). Build them with
/// the constructors below ([`OutEvent::slot`], [`OutEvent::reminder`], ...), one per event
/// rasa-sdk's `rasa_sdk.events` offers; [`OutEvent::Raw`] passes anything else through.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(untagged)]
pub enum OutEvent {
    /// `SlotSet`.
    Slot {
        /// `"slot"`.
        event: &'static str,
        /// When it happened (`None`: Rasa stamps it).
        timestamp: Option<f64>,
        /// The slot.
        name: String,
        /// Its new value (`null` resets it).
        value: Value,
    },
    /// `FollowupAction`.
    Followup {
        /// `"followup"`.
        event: &'static str,
        /// When it happened (`None`: Rasa stamps it).
        timestamp: Option<f64>,
        /// The action Rasa runs next.
        name: String,
    },
    /// An event with nothing but its kind: `Restarted`, `SessionStarted`,
    /// `UserUtteranceReverted`, `AllSlotsReset`, `ActionReverted`, `StoryExported`,
    /// `ConversationPaused`, `ConversationResumed`.
    Bare {
        /// Its kind (`"restart"`, `"pause"`, ...).
        event: &'static str,
        /// When it happened (`None`: Rasa stamps it).
        timestamp: Option<f64>,
    },
    /// `SessionEnded`, with its metadata.
    SessionEnded {
        /// `"session_ended"`.
        event: &'static str,
        /// When it happened (`None`: Rasa stamps it).
        timestamp: Option<f64>,
        /// Why or how the session ended, for whoever reads the tracker.
        metadata: Option<Value>,
    },
    /// `UserUttered`: a message put in the customer's mouth.
    User {
        /// `"user"`.
        event: &'static str,
        /// When it happened (`None`: Rasa stamps it).
        timestamp: Option<f64>,
        /// The message.
        text: Option<String>,
        /// Its intent and entities, as NLU writes them.
        parse_data: Option<Value>,
        /// The channel it is said to come from.
        input_channel: Option<String>,
    },
    /// `BotUttered`: a message recorded as sent (not sent: use the dispatcher for that).
    Bot {
        /// `"bot"`.
        event: &'static str,
        /// When it happened (`None`: Rasa stamps it).
        timestamp: Option<f64>,
        /// The message.
        text: Option<String>,
        /// Buttons, images and the rest of a rich message.
        data: Option<Value>,
        /// Metadata, such as `utter_action`.
        metadata: Option<Value>,
    },
    /// `ReminderScheduled`: Rasa triggers `intent` at `date_time`.
    Reminder {
        /// `"reminder"`.
        event: &'static str,
        /// When it happened (`None`: Rasa stamps it).
        timestamp: Option<f64>,
        /// The intent Rasa triggers.
        intent: String,
        /// Entities that come with it.
        entities: Option<Value>,
        /// When, in ISO 8601 as Python's `isoformat()` writes it.
        date_time: String,
        /// The reminder's name, to cancel it by.
        name: Option<String>,
        /// Whether a message from the customer before then cancels it.
        kill_on_user_msg: bool,
    },
    /// `ReminderCancelled`: by name, or by intent and entities.
    CancelReminder {
        /// `"cancel_reminder"`.
        event: &'static str,
        /// When it happened (`None`: Rasa stamps it).
        timestamp: Option<f64>,
        /// The intent of the reminders to cancel.
        intent: Option<String>,
        /// The entities of the reminders to cancel.
        entities: Option<Value>,
        /// The name of the reminder to cancel.
        name: Option<String>,
    },
    /// `ActionExecuted` and `ActionExecutionRejected` (rasa-sdk writes the timestamp last).
    Action {
        /// `"action"` or `"action_execution_rejected"`.
        event: &'static str,
        /// The action.
        name: String,
        /// The policy that chose it.
        policy: Option<String>,
        /// How sure that policy was.
        confidence: Option<f64>,
        /// When it happened (`None`: Rasa stamps it).
        timestamp: Option<f64>,
    },
    /// `AgentUttered`.
    Agent {
        /// `"agent"`.
        event: &'static str,
        /// The message.
        text: Option<String>,
        /// Its data.
        data: Option<Value>,
        /// When it happened (`None`: Rasa stamps it).
        timestamp: Option<f64>,
    },
    /// `ActiveLoop`: a form or loop starts (`Some`) or ends (`None`).
    ActiveLoop {
        /// `"active_loop"`.
        event: &'static str,
        /// The loop, or `None` to end the active one.
        name: Option<String>,
        /// When it happened (`None`: Rasa stamps it).
        timestamp: Option<f64>,
    },
    /// `LoopInterrupted`.
    LoopInterrupted {
        /// `"loop_interrupted"`.
        event: &'static str,
        /// Whether the loop is interrupted.
        is_interrupted: bool,
        /// When it happened (`None`: Rasa stamps it).
        timestamp: Option<f64>,
    },
    /// Any other event, passed through as given.
    Raw(Value),
}

impl OutEvent {
    /// `SlotSet(name, value)`.
    pub fn slot(name: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::Slot {
            event: "slot",
            timestamp: None,
            name: name.into(),
            value: value.into(),
        }
    }

    /// `FollowupAction(name)`.
    pub fn followup(name: impl Into<String>) -> Self {
        Self::Followup {
            event: "followup",
            timestamp: None,
            name: name.into(),
        }
    }

    /// An event of this kind with no fields of its own; prefer the named constructors
    /// ([`OutEvent::restarted`], ...), which cannot misspell the kind.
    pub fn bare(event: &'static str) -> Self {
        Self::Bare {
            event,
            timestamp: None,
        }
    }

    /// `Restarted()`: Rasa forgets the conversation so far.
    pub fn restarted() -> Self {
        Self::bare("restart")
    }

    /// `SessionStarted()`.
    pub fn session_started() -> Self {
        Self::bare("session_started")
    }

    /// `SessionEnded(metadata)`: the session ends and cannot be resumed.
    pub fn session_ended(metadata: Option<Value>) -> Self {
        Self::SessionEnded {
            event: "session_ended",
            timestamp: None,
            metadata,
        }
    }

    /// `UserUtteranceReverted()`: the last customer message and what followed it are undone.
    pub fn user_utterance_reverted() -> Self {
        Self::bare("rewind")
    }

    /// `AllSlotsReset()`.
    pub fn all_slots_reset() -> Self {
        Self::bare("reset_slots")
    }

    /// `ActionReverted()`: the last action is undone.
    pub fn action_reverted() -> Self {
        Self::bare("undo")
    }

    /// `StoryExported()`.
    pub fn story_exported() -> Self {
        Self::bare("export")
    }

    /// `ConversationPaused()`: Rasa stops predicting actions until resumed.
    pub fn conversation_paused() -> Self {
        Self::bare("pause")
    }

    /// `ConversationResumed()`.
    pub fn conversation_resumed() -> Self {
        Self::bare("resume")
    }

    /// `UserUttered(text, parse_data, input_channel)`.
    pub fn user_uttered(
        text: Option<String>,
        parse_data: Option<Value>,
        input_channel: Option<String>,
    ) -> Self {
        Self::User {
            event: "user",
            timestamp: None,
            text,
            parse_data,
            input_channel,
        }
    }

    /// `BotUttered(text, data, metadata)`.
    pub fn bot_uttered(text: Option<String>, data: Option<Value>, metadata: Option<Value>) -> Self {
        Self::Bot {
            event: "bot",
            timestamp: None,
            text,
            data,
            metadata,
        }
    }

    /// `ReminderScheduled(intent, at)`: Rasa triggers `intent` at `at`; a message from
    /// the customer before then cancels it (set `kill_on_user_msg` to keep it). Name it
    /// with [`OutEvent::named`] to cancel it by name later.
    pub fn reminder(intent: impl Into<String>, at: time::OffsetDateTime) -> Self {
        Self::Reminder {
            event: "reminder",
            timestamp: None,
            intent: intent.into(),
            entities: None,
            date_time: isoformat(at),
            name: None,
            kill_on_user_msg: true,
        }
    }

    /// `ReminderCancelled(name=name)`.
    pub fn cancel_reminder(name: impl Into<String>) -> Self {
        Self::CancelReminder {
            event: "cancel_reminder",
            timestamp: None,
            intent: None,
            entities: None,
            name: Some(name.into()),
        }
    }

    /// `ReminderCancelled(intent_name=intent, entities=entities)`: every reminder of that
    /// intent (and those entities, when given).
    pub fn cancel_reminders_of(intent: impl Into<String>, entities: Option<Value>) -> Self {
        Self::CancelReminder {
            event: "cancel_reminder",
            timestamp: None,
            intent: Some(intent.into()),
            entities,
            name: None,
        }
    }

    /// `ActionExecuted(name, policy, confidence)`.
    pub fn action_executed(
        name: impl Into<String>,
        policy: Option<String>,
        confidence: Option<f64>,
    ) -> Self {
        Self::Action {
            event: "action",
            name: name.into(),
            policy,
            confidence,
            timestamp: None,
        }
    }

    /// `ActionExecutionRejected(name, policy, confidence)`.
    pub fn action_execution_rejected(
        name: impl Into<String>,
        policy: Option<String>,
        confidence: Option<f64>,
    ) -> Self {
        Self::Action {
            event: "action_execution_rejected",
            name: name.into(),
            policy,
            confidence,
            timestamp: None,
        }
    }

    /// `AgentUttered(text, data)`.
    pub fn agent_uttered(text: Option<String>, data: Option<Value>) -> Self {
        Self::Agent {
            event: "agent",
            text,
            data,
            timestamp: None,
        }
    }

    /// `ActiveLoop(name)`: `Some` starts the loop (form), `None` ends the active one.
    pub fn active_loop(name: Option<String>) -> Self {
        Self::ActiveLoop {
            event: "active_loop",
            name,
            timestamp: None,
        }
    }

    /// `LoopInterrupted(is_interrupted)`.
    pub fn loop_interrupted(is_interrupted: bool) -> Self {
        Self::LoopInterrupted {
            event: "loop_interrupted",
            is_interrupted,
            timestamp: None,
        }
    }

    /// Sets the timestamp (Rasa stamps events that have none). No effect on [`OutEvent::Raw`].
    pub fn at(mut self, at: f64) -> Self {
        match &mut self {
            Self::Slot { timestamp, .. }
            | Self::Followup { timestamp, .. }
            | Self::Bare { timestamp, .. }
            | Self::SessionEnded { timestamp, .. }
            | Self::User { timestamp, .. }
            | Self::Bot { timestamp, .. }
            | Self::Reminder { timestamp, .. }
            | Self::CancelReminder { timestamp, .. }
            | Self::Action { timestamp, .. }
            | Self::Agent { timestamp, .. }
            | Self::ActiveLoop { timestamp, .. }
            | Self::LoopInterrupted { timestamp, .. } => *timestamp = Some(at),
            Self::Raw(_) => {}
        }
        self
    }

    /// Names a reminder (to cancel it by name). No effect on other events.
    pub fn named(mut self, reminder: impl Into<String>) -> Self {
        if let Self::Reminder { name, .. } = &mut self {
            *name = Some(reminder.into());
        }
        self
    }

    /// Sets a reminder's entities. No effect on other events.
    pub fn with_entities(mut self, given: Value) -> Self {
        if let Self::Reminder { entities, .. } = &mut self {
            *entities = Some(given);
        }
        self
    }

    /// Whether a customer message before the reminder's time cancels it (`true` unless
    /// set). No effect on other events.
    pub fn kill_on_user_message(mut self, kill: bool) -> Self {
        if let Self::Reminder {
            kill_on_user_msg, ..
        } = &mut self
        {
            *kill_on_user_msg = kill;
        }
        self
    }

    /// The event's kind, as it goes on the wire (`None` for a raw event without one).
    pub fn kind(&self) -> Option<&str> {
        match self {
            Self::Slot { event, .. }
            | Self::Followup { event, .. }
            | Self::Bare { event, .. }
            | Self::SessionEnded { event, .. }
            | Self::User { event, .. }
            | Self::Bot { event, .. }
            | Self::Reminder { event, .. }
            | Self::CancelReminder { event, .. }
            | Self::Action { event, .. }
            | Self::Agent { event, .. }
            | Self::ActiveLoop { event, .. }
            | Self::LoopInterrupted { event, .. } => Some(event),
            Self::Raw(value) => value.get("event").and_then(Value::as_str),
        }
    }
}

/// `datetime.isoformat()`: `YYYY-MM-DDTHH:MM:SS`, `.ffffff` only when there are
/// microseconds, and the offset as `+HH:MM` (`+HH:MM:SS` when it has seconds).
fn isoformat(at: time::OffsetDateTime) -> String {
    let mut out = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    );
    if at.microsecond() != 0 {
        out.push_str(&format!(".{:06}", at.microsecond()));
    }
    let offset = at.offset();
    let (h, m, s) = offset.as_hms();
    let sign = if offset.is_negative() { '-' } else { '+' };
    out.push_str(&format!(
        "{sign}{:02}:{:02}",
        h.unsigned_abs(),
        m.unsigned_abs()
    ));
    if s != 0 {
        out.push_str(&format!(":{:02}", s.unsigned_abs()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The full path's reading, for comparison.
    fn slow_head(json: &str) -> (String, Option<f64>) {
        let head: Head = serde_json::from_str(json).unwrap();
        (head.event.unwrap().into_owned(), head.timestamp)
    }

    #[test]
    fn the_head_rasa_writes_is_read_off_the_front() {
        for json in [
            r#"{"event": "user", "timestamp": 1796027823.273176, "text": "yes"}"#,
            r#"{"event":"bot","timestamp":1700000000}"#,
            "{ \"event\" :\n\"action\" ,\t\"timestamp\" : -1500.5 , \"name\": \"x\"}",
            r#"{"event": "slot", "timestamp": 0}"#,
            r#"{"event": "flow_started", "timestamp": 12.0, "metadata": {"a": [1, 2]}}"#,
            r#"{"event": "bøt", "timestamp": 100.25}"#,
        ] {
            let (name, timestamp) = fast_head(json).unwrap_or_else(|| panic!("{json}"));
            let timestamp = timestamp.parse::<f64>().ok();
            assert_eq!((name.to_owned(), timestamp), slow_head(json), "{json}");
            let raw: RawJson = serde_json::from_str(json).unwrap();
            let event = RawEvent::from_raw(raw).unwrap();
            assert_eq!((event.name(), event.timestamp()), (name, timestamp));
        }
    }

    #[test]
    fn anything_else_takes_the_full_path() {
        for json in [
            r#"{"timestamp": 1.0, "event": "user"}"#,
            r#"{"event": "us\u0065r", "timestamp": 1.0}"#,
            r#"{"event": "user", "timestamp": null}"#,
            r#"{"event": "user", "timestamp": 1e999}"#,
            r#"{"event": "user", "timestamp": 1E+2}"#,
            r#"{"event": "user"}"#,
            r#"{"event": "", "timestamp": 1.0}"#,
            r#"{"event": "user", "timestamp": "1.0"}"#,
        ] {
            assert_eq!(fast_head(json), None, "{json}");
        }
        // And the full path reads them as serde does.
        let raw: RawJson =
            serde_json::from_str(r#"{"timestamp": 2.5, "event": "us\u0065r"}"#).unwrap();
        let event = RawEvent::from_raw(raw).unwrap();
        assert_eq!(
            (event.name(), event.kind(), event.timestamp()),
            ("user", EventKind::User, Some(2.5))
        );
        // A timestamp no f64 can hold is refused, as before.
        let raw: RawJson =
            serde_json::from_str(r#"{"event": "user", "timestamp": 1e999}"#).unwrap();
        assert!(RawEvent::from_raw(raw).is_err());
    }

    #[test]
    fn reminders_write_dates_as_pythons_isoformat() {
        use time::macros::datetime;
        assert_eq!(
            isoformat(datetime!(2026-12-02 10:00:00 UTC)),
            "2026-12-02T10:00:00+00:00"
        );
        assert_eq!(
            isoformat(datetime!(2026-01-05 09:03:07.25 -05:30)),
            "2026-01-05T09:03:07.250000-05:30"
        );
        let event = OutEvent::reminder("EXTERNAL_dry_plant", datetime!(2026-12-02 10:00 UTC))
            .named("water")
            .kill_on_user_message(false);
        assert_eq!(
            serde_json::to_string(&event).unwrap(),
            r#"{"event":"reminder","timestamp":null,"intent":"EXTERNAL_dry_plant","entities":null,"date_time":"2026-12-02T10:00:00+00:00","name":"water","kill_on_user_msg":false}"#
        );
    }
}
