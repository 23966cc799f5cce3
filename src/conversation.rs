//! The conversation read from its events (over 400 lines: one backwards scan whose states must be read together).
//!
//! What the conversation says, read from the applied events of the current session
//! (CONTRACT.md section 3): the latest confirmation question, the customer's reply to it
//! and what that reply means, and what `select_subscription_change` wrote into memory.
//! Pure functions over events.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use serde_json::Value;

use actionserver::{EventKind, Fields, RawEvent};

/// The change-memory slots, written only by `select_subscription_change`: each by name,
/// and [`ALL`](change_memory::ALL) of them.
pub mod change_memory {
    /// The subscription as the customer knows it (product and id).
    pub const SUBSCRIPTION: &str = "change_subscription";
    pub const LABEL: &str = "change_label";
    pub const EFFECTIVE: &str = "change_effective";
    pub const ENTITLEMENTS: &str = "change_entitlements";
    /// `SUBSCRIPTION CHANGE_TYPE rREVISION`, what the question binds the yes to.
    pub const TAG: &str = "change_tag";
    pub const ALL: [&str; 5] = [SUBSCRIPTION, LABEL, EFFECTIVE, ENTITLEMENTS, TAG];
}

/// The text Rasa gives the `user` events it creates itself (reminders, `trigger_intent`).
const EXTERNAL_PREFIX: &str = "EXTERNAL: ";

/// The engine tool through which Rasa's Mantle records the customer's answer to a tool
/// call held for confirmation (`requires_confirmation`): a `tool_executed` event whose
/// `arguments.confirmed` is the answer.
pub const MANTLE_CONFIRMATION_TOOL: &str = "resolve_tool_confirmation";

/// The confirmation question as Rasa sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub text: String,
    pub timestamp: Option<f64>,
    /// Position among the session's applied events, for reading what came before it.
    /// Never part of the request key: Rasa may trim the front of a tracker.
    pub position: usize,
}

/// What a reply says, read from the signals the tracker records (never from its text:
/// whether a typed yes is also a plain yes is the guard's to read, [`crate::consent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meaning {
    /// A signal says yes and none says no.
    Yes,
    /// A signal says no (any no wins).
    No,
    /// No signal says yes: a question, something else, a yes below the confidence floor,
    /// or nothing recorded.
    Unclear,
}

/// How the reply was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Given {
    /// The customer's own words, typed.
    Typed,
    /// A button's payload (`/affirm`, or `/SetSlots(...)` with a confirm slot).
    Payload,
}

/// The customer's reply: the first customer message or button payload after the question,
/// and what it means.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub text: String,
    pub timestamp: Option<f64>,
    pub message_id: Option<String>,
    pub meaning: Meaning,
    pub given: Given,
    /// Another bot message that came between the question and the reply, the latest of
    /// them (its response's name, or `"a message"` when no response produced it): then the
    /// reply answers that message, not the question.
    pub after_other_message: Option<String>,
}

/// Where a reply's meaning is read (CONTRACT.md section 3, "The reply's meaning").
#[derive(Debug, Clone)]
pub struct Signals {
    /// NLU intents that mean yes (default `affirm`).
    pub affirm_intents: Vec<String>,
    /// NLU intents that mean no (default `deny`).
    pub deny_intents: Vec<String>,
    /// The least confidence at which a yes intent says yes (default 0.8); a no intent says
    /// no at any confidence.
    pub min_confidence: f64,
    /// Rasa Pro CALM's boolean confirmation slot, when the flow collects one. With it set,
    /// a `/SetSlots(...)` button payload after the question is a reply too.
    pub confirm_slot: Option<String>,
}

impl Default for Signals {
    fn default() -> Self {
        Self {
            affirm_intents: vec!["affirm".to_owned()],
            deny_intents: vec!["deny".to_owned()],
            min_confidence: 0.8,
            confirm_slot: None,
        }
    }
}

impl Signals {
    /// What an intent says, at the confidence the NLU gave it (`None` when unknown: then
    /// it cannot say yes).
    fn intent(&self, name: &str, confidence: Option<f64>) -> Option<bool> {
        if self.deny_intents.iter().any(|d| d == name) {
            Some(false)
        } else if self.affirm_intents.iter().any(|a| a == name)
            && confidence.is_some_and(|c| c >= self.min_confidence)
        {
            Some(true)
        } else {
            None
        }
    }
}

/// What the conversation reader looks for.
#[derive(Debug, Clone, Copy)]
pub struct Reading<'c> {
    /// The response whose `bot` events are the confirmation question.
    pub confirm_response: &'c str,
    /// The action whose slot events are the change memory.
    pub select_action: &'c str,
    pub signals: &'c Signals,
}

/// Everything the guard needs to know about the conversation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversation {
    /// The latest bot message produced by the confirmation response.
    pub question: Option<Question>,
    /// The reply to that question, if any.
    pub reply: Option<Reply>,
    /// The change memory as the latest `select_subscription_change` wrote it, or `None`
    /// when any change-memory slot was last set by something else.
    pub selected_memory: Option<HashMap<String, Value>>,
}

/// A typed event that could not be read: the request is refused rather than guessed at.
#[derive(Debug, thiserror::Error)]
#[error("event {position} (`{kind}`) is malformed: {source}")]
pub struct MalformedEvent {
    pub position: usize,
    pub kind: String,
    #[source]
    pub source: serde_json::Error,
}

/// Who set a change-memory slot last.
#[derive(Clone, Copy, PartialEq)]
enum Setter {
    /// The latest run of the select action.
    Select,
    Other,
}

/// The yes and no that a signal recorded after one `user` event, before the next.
#[derive(Debug, Clone, Copy, Default)]
struct Said {
    yes: bool,
    no: bool,
}

impl Said {
    fn record(&mut self, answer: Option<bool>) {
        match answer {
            Some(true) => self.yes = true,
            Some(false) => self.no = true,
            None => {}
        }
    }
}

/// A `user` event, as far as the reply is concerned.
enum UserMessage<'t> {
    /// A customer's own words.
    Customer,
    /// A `/intent` payload (a button): the intent it names, and the confidence it gives
    /// (`/affirm@0.4`), if it gives one.
    Intent(&'t str, Option<f64>),
    /// Any other payload, such as Rasa Pro's `/SetSlots(...)` (a button, or a command).
    Command,
    /// Written by Rasa itself (reminders, `trigger_intent`), or without text.
    NotTheCustomer,
}

fn classify(text: &str, external: bool) -> UserMessage<'_> {
    if text.is_empty() || external || text.starts_with(EXTERNAL_PREFIX) {
        UserMessage::NotTheCustomer
    } else if let Some(payload) = text.strip_prefix('/') {
        // Rasa's payload syntax: `/intent`, then optionally `{entities}` or `@confidence`.
        let name = payload
            .split(['{', '@'])
            .next()
            .unwrap_or_default()
            .trim_end();
        let an_intent = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if an_intent {
            let confidence = payload
                .split_once('@')
                .and_then(|(_, rest)| rest.split('{').next())
                .and_then(|c| c.trim().parse::<f64>().ok());
            UserMessage::Intent(name, confidence)
        } else {
            UserMessage::Command
        }
    } else {
        UserMessage::Customer
    }
}

/// The fields of an event, read through the SDK's lenient one-pass reader.
fn lite<'a>(position: usize, event: &RawEvent<'a>) -> Result<Fields<'a>, MalformedEvent> {
    event.fields().map_err(|source| MalformedEvent {
        position,
        kind: event.name().to_owned(),
        source,
    })
}

/// The fields of the events one call's readers parse, each event read once however many
/// of them look: the guard reads the conversation and then the slots as the question was
/// asked, over the same events. Keyed by where the event lies in the tracker, which is the
/// same event whichever slice of it a reader is given (ordered, not hashed: a key is an
/// address, and SipHash on each lookup cost more than the few comparisons).
#[derive(Default)]
pub struct Fieldbook<'a> {
    read: RefCell<BTreeMap<usize, Rc<Fields<'a>>>>,
}

impl<'a> Fieldbook<'a> {
    /// The event's fields, from the book when a reader read them already.
    fn fields(
        &self,
        position: usize,
        event: &RawEvent<'a>,
    ) -> Result<Rc<Fields<'a>>, MalformedEvent> {
        let at = std::ptr::from_ref(event).addr();
        if let Some(read) = self.read.borrow().get(&at) {
            return Ok(Rc::clone(read));
        }
        let read = Rc::new(lite(position, event)?);
        self.read.borrow_mut().insert(at, Rc::clone(&read));
        Ok(read)
    }
}

/// Reads the conversation from the session's applied events.
///
/// It reads from the end and stops once it has found both the latest question and the
/// latest run of the select action, so in a long conversation only the last few events
/// are parsed (and only the fields it needs).
pub fn read(
    events: &[&RawEvent<'_>],
    reading: &Reading<'_>,
) -> Result<Conversation, MalformedEvent> {
    read_with(events, reading, &Fieldbook::default())
}

/// [`read`], keeping the events' fields in `book` for the readers after it.
pub fn read_with<'a>(
    events: &[&RawEvent<'a>],
    reading: &Reading<'_>,
    book: &Fieldbook<'a>,
) -> Result<Conversation, MalformedEvent> {
    let signals = reading.signals;
    let mut conversation = Conversation::default();
    // Scanning back: what the signals said after the user event not yet reached, and the
    // earliest reply candidate after the question found so far.
    let mut said = Said::default();
    let mut candidate: Option<(Reply, Said)> = None;
    // A bot message seen (scanning back) since the latest reply candidate: it came between
    // that candidate and the question, unless an earlier candidate is found.
    let mut other_message: Option<String> = None;
    let mut select_found = false;
    // The latest setter of each change-memory field, and the slot events not yet assigned
    // to the action (or user message) they follow.
    let mut memory: HashMap<&'static str, (Value, Setter)> = HashMap::new();
    let mut unassigned: Vec<(&'static str, Value)> = Vec::new();
    for (position, event) in events.iter().enumerate().rev() {
        let asked = conversation.question.is_some();
        if asked && select_found {
            break;
        }
        match event.kind() {
            EventKind::User => {
                // Slot events right after a user message were set from it, not by select.
                assign(&mut memory, &mut unassigned, Setter::Other);
                if asked {
                    continue;
                }
                let user = book.fields(position, event)?;
                let text = user.text.clone().unwrap_or_default();
                let external = user.is_external;
                let mut heard = std::mem::take(&mut said);
                let given = match classify(&text, external) {
                    UserMessage::Customer => {
                        if let Some(name) = user.intent.as_deref() {
                            heard.record(signals.intent(name, user.confidence));
                        }
                        Given::Typed
                    }
                    // A button: the intent it names, as Rasa reads it (at full confidence
                    // unless the payload gives one).
                    UserMessage::Intent(name, confidence) => {
                        heard.record(signals.intent(name, Some(confidence.unwrap_or(1.0))));
                        Given::Payload
                    }
                    UserMessage::Command if signals.confirm_slot.is_some() => Given::Payload,
                    UserMessage::Command | UserMessage::NotTheCustomer => continue,
                };
                let reply = Reply {
                    text: text.into_owned(),
                    timestamp: event.timestamp(),
                    message_id: user.message_id.as_deref().map(str::to_owned),
                    meaning: Meaning::Unclear,
                    given,
                    after_other_message: None,
                };
                candidate = Some((reply, heard));
                other_message = None;
            }
            EventKind::Bot if !asked => {
                let bot = book.fields(position, event)?;
                let utter_action = bot.utter_action.as_deref();
                if utter_action == Some(reading.confirm_response) {
                    conversation.question = Some(Question {
                        text: bot.text.as_deref().unwrap_or_default().to_owned(),
                        timestamp: event.timestamp(),
                        position,
                    });
                    conversation.reply = candidate.take().map(|(mut reply, said)| {
                        reply.meaning = match (said.yes, said.no) {
                            (_, true) => Meaning::No,
                            (true, false) => Meaning::Yes,
                            (false, false) => Meaning::Unclear,
                        };
                        reply.after_other_message = other_message.take();
                        reply
                    });
                } else if candidate.is_some() && other_message.is_none() {
                    // Read from the end, the first met is the one the reply came after.
                    other_message = Some(utter_action.unwrap_or("a message").to_owned());
                }
            }
            EventKind::Action if !select_found => {
                let action = book.fields(position, event)?;
                if action.name.as_deref() == Some(reading.select_action) {
                    assign_to_select(&mut memory, &mut unassigned);
                    select_found = true;
                } else {
                    assign(&mut memory, &mut unassigned, Setter::Other);
                }
            }
            EventKind::Slot => {
                let wanted_by_memory = !select_found;
                let wanted_by_reply = !asked && signals.confirm_slot.is_some();
                if !(wanted_by_memory || wanted_by_reply) {
                    continue;
                }
                let slot = book.fields(position, event)?;
                let name = slot.name.as_deref().unwrap_or_default();
                let value = slot.value.as_ref();
                if wanted_by_reply && signals.confirm_slot.as_deref() == Some(name) {
                    said.record(value.and_then(Value::as_bool));
                }
                if wanted_by_memory {
                    if let Some(field) = change_memory::ALL.iter().find(|f| **f == name) {
                        unassigned.push((field, value.cloned().unwrap_or(Value::Null)));
                    }
                }
            }
            EventKind::Other if !asked && event.name() == "tool_executed" => {
                let tool = book.fields(position, event)?;
                if tool.tool_name.as_deref() == Some(MANTLE_CONFIRMATION_TOOL) {
                    let confirmed = tool
                        .arguments
                        .as_ref()
                        .and_then(|a| a.get("confirmed"))
                        .and_then(Value::as_bool);
                    said.record(confirmed);
                }
            }
            _ => {}
        }
    }
    if select_found
        && change_memory::ALL.iter().all(|f| {
            memory
                .get(f)
                .is_some_and(|(_, setter)| *setter == Setter::Select)
        })
    {
        conversation.selected_memory = Some(
            memory
                .into_iter()
                .map(|(k, (v, _))| (k.to_owned(), v))
                .collect(),
        );
    }
    Ok(conversation)
}

/// Gives the slot events seen since the last boundary to their setter. Scanning from the
/// end, the first value seen for a field is its latest, so an existing entry is kept.
fn assign(
    memory: &mut HashMap<&'static str, (Value, Setter)>,
    unassigned: &mut Vec<(&'static str, Value)>,
    setter: Setter,
) {
    for (field, value) in unassigned.drain(..) {
        memory.entry(field).or_insert((value, setter));
    }
}

/// Gives the slot events that followed a run of the select action to it as far as they are
/// what it answers: its five change-memory slots, once each, in the order it writes them
/// ([`change_memory::ALL`]). Any change-memory slot event after those (a flow's
/// `set_slots`, the tracker-events API, both appending right after select's own events)
/// was set by something else.
fn assign_to_select(
    memory: &mut HashMap<&'static str, (Value, Setter)>,
    unassigned: &mut Vec<(&'static str, Value)>,
) {
    // Scanning back, `unassigned` holds the slot events last first.
    let answered = unassigned
        .iter()
        .rev()
        .zip(change_memory::ALL)
        .take_while(|((field, _), expected)| field == expected)
        .count();
    let others = unassigned.len() - answered;
    for (field, value) in unassigned.drain(..others) {
        memory.entry(field).or_insert((value, Setter::Other));
    }
    assign(memory, unassigned, Setter::Select);
}

/// The values the named slots had when the event at `position` was sent: each one's latest
/// `slot` event before it. A slot that no event before it sets is missing from the map;
/// the flag says whether a `reset_slots` came before it (then it had its initial value).
pub fn slots_before(
    events: &[&RawEvent<'_>],
    position: usize,
    names: &[&str],
) -> Result<(HashMap<String, Value>, bool), MalformedEvent> {
    slots_before_with(events, position, names, &Fieldbook::default())
}

/// [`slots_before`], with the fields `book` holds already.
pub fn slots_before_with<'a>(
    events: &[&RawEvent<'a>],
    position: usize,
    names: &[&str],
    book: &Fieldbook<'a>,
) -> Result<(HashMap<String, Value>, bool), MalformedEvent> {
    let mut found: HashMap<String, Value> = HashMap::new();
    for (at, event) in events[..position.min(events.len())]
        .iter()
        .enumerate()
        .rev()
    {
        if found.len() == names.len() {
            break;
        }
        if event.name() == "reset_slots" {
            return Ok((found, true));
        }
        if event.kind() != EventKind::Slot {
            continue;
        }
        let slot = book.fields(at, event)?;
        let name = slot.name.as_deref().unwrap_or_default();
        if names.contains(&name) && !found.contains_key(name) {
            found.insert(name.to_owned(), slot.value.clone().unwrap_or(Value::Null));
        }
    }
    Ok((found, false))
}

/// Whether a `slot` event for `name` comes after `position`.
pub fn set_after(
    events: &[&RawEvent<'_>],
    position: usize,
    name: &str,
) -> Result<bool, MalformedEvent> {
    set_after_with(events, position, name, &Fieldbook::default())
}

/// [`set_after`], with the fields `book` holds already.
pub fn set_after_with<'a>(
    events: &[&RawEvent<'a>],
    position: usize,
    name: &str,
    book: &Fieldbook<'a>,
) -> Result<bool, MalformedEvent> {
    for (at, event) in events.iter().enumerate().skip(position + 1) {
        if event.kind() == EventKind::Slot && book.fields(at, event)?.name.as_deref() == Some(name)
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Who the customer is, as the current session's events say (CONTRACT.md section 2).
#[derive(Debug, Clone, PartialEq)]
pub enum SessionIdentity {
    /// The value the current session's start wrote (its latest write), or `None` when no
    /// write of it is in view (Rasa trimmed the front of the tracker).
    Started(Option<Value>),
    /// The slot was written somewhere else in the current session: nothing about it is
    /// trusted for the rest of the session.
    Rewritten,
}

/// Reads the slot `name` (`session_started_metadata`) as the current session's start wrote
/// it. The current session begins at the latest `session_started` (a `restart` does not end
/// it: Rasa 3.x runs no `action_session_start` after `/restart`, so the start's write
/// still stands). Rasa writes the session's metadata right before it runs
/// `action_session_start`, and again between `session_started` and the `action_listen`
/// that ends the start; those are the session's start. Any other write in the session is a
/// rewrite; a write in an earlier session does not reach this one, unless this session's
/// start wrote no value of its own (it only carried the earlier one over). With no
/// `session_started` in view (trimmed), the window's first events count as the start as
/// long as they are only slot events (carried over, or the metadata itself) and
/// `action_session_start`. Only slot events whose raw text may name the slot (it does, or
/// has an escape) are parsed.
pub fn session_identity(
    events: &[RawEvent<'_>],
    name: &str,
) -> Result<SessionIdentity, MalformedEvent> {
    let started = events
        .iter()
        .rposition(|e| e.kind() == EventKind::SessionStarted);
    // The start's events are looked at more than once (its own write, then the walk).
    let book = Fieldbook::default();
    let action_named = |at: usize, wanted: &str| -> Result<bool, MalformedEvent> {
        Ok(match events.get(at) {
            Some(event) if event.kind() == EventKind::Action => {
                book.fields(at, event)?.name.as_deref() == Some(wanted)
            }
            _ => false,
        })
    };
    // A start that wrote the metadata itself: the channel's write right before
    // `action_session_start`.
    let wrote_own = |s: usize| -> Result<bool, MalformedEvent> {
        Ok(s >= 2
            && action_named(s - 1, "action_session_start")?
            && events[s - 2].kind() == EventKind::Slot
            && book.fields(s - 2, &events[s - 2])?.name.as_deref() == Some(name))
    };
    // Whether a start carried a value over: a write of the slot inside it (after
    // `session_started`, before its `action_listen` or the next customer message).
    let carried = |s: usize| -> Result<bool, MalformedEvent> {
        for (at, event) in events.iter().enumerate().skip(s + 1) {
            match event.kind() {
                EventKind::Slot if book.fields(at, event)?.name.as_deref() == Some(name) => {
                    return Ok(true)
                }
                EventKind::Action if action_named(at, "action_listen")? => return Ok(false),
                EventKind::User => return Ok(false),
                _ => {}
            }
        }
        Ok(false)
    };
    let mut start = started;
    let from = match started {
        // The current start wrote nothing, of its own or carried over (slots not carried
        // to new sessions): only what it wrote counts, which is nothing; an earlier
        // session's value does not reach it.
        Some(s) if !wrote_own(s)? && !carried(s)? => s,
        _ => {
            // A start that wrote none of its own only carried the earlier session's value
            // over (with whatever rewrote it there): read from the earlier start, until one
            // wrote its own.
            while let Some(s) = start {
                if wrote_own(s)? {
                    break;
                }
                start = events[..s]
                    .iter()
                    .rposition(|e| e.kind() == EventKind::SessionStarted);
            }
            // Where the session's events begin: its pre-start write (the search above stops
            // only at a start that wrote its own, two events after the write), or the
            // window's first.
            start.map_or(0, |s| s - 2)
        }
    };
    // Inside the start (after `session_started`, before its `action_listen`), and, in a
    // trimmed window, still among its first slot events.
    let mut starting = false;
    let mut window_start = start.is_none();
    let mut value = None;
    for (at, event) in events.iter().enumerate().skip(from) {
        match event.kind() {
            EventKind::SessionStarted => starting = true,
            EventKind::User => {
                starting = false;
                window_start = false;
            }
            EventKind::Action if starting || window_start => {
                let action = book.fields(at, event)?;
                let name = action.name.as_deref();
                if name == Some("action_listen") {
                    starting = false;
                }
                window_start &= name == Some("action_session_start");
            }
            EventKind::Slot => {
                let raw = event.raw().get();
                if !(raw.contains(name) || raw.contains('\\')) {
                    continue;
                }
                let slot = book.fields(at, event)?;
                if slot.name.as_deref() != Some(name) {
                    continue;
                }
                let at_the_start =
                    starting || window_start || action_named(at + 1, "action_session_start")?;
                if !at_the_start {
                    return Ok(SessionIdentity::Rewritten);
                }
                value = Some(slot.value.clone().unwrap_or(Value::Null));
            }
            EventKind::Action => {}
            EventKind::Bot
            | EventKind::Restart
            | EventKind::Rewind
            | EventKind::Undo
            | EventKind::Other => window_start = false,
        }
    }
    Ok(SessionIdentity::Started(value))
}

/// The customer's own messages, in order (CONTRACT.md section 3, "Customer messages").
pub fn customer_messages(events: &[&RawEvent<'_>]) -> Result<Vec<String>, MalformedEvent> {
    let mut messages = Vec::new();
    for (position, event) in events.iter().enumerate() {
        if event.kind() != EventKind::User {
            continue;
        }
        let user = lite(position, event)?;
        let external = user.is_external;
        let text = user.text.unwrap_or_default();
        if matches!(classify(&text, external), UserMessage::Customer) {
            messages.push(text.into_owned());
        }
    }
    Ok(messages)
}
