//! What the fuzz targets and the regression test (tests/fuzz_regressions.rs) both hold
//! the code to: the encodings and limits tried, a plain forward conversation reader to
//! compare the real one with, the guard's "approve only if every fact matches", and the
//! tracker helpers exercised on every parsed request. One copy, included by both with
//! `#[path]`.
#![allow(dead_code)]

use std::collections::HashMap;

use actiongate::consent::{question, ApplyInputs};
use actiongate::conversation::{
    self, change_memory, Conversation, Given, Meaning, Question, Reading, Reply, Signals,
    MANTLE_CONFIRMATION_TOOL,
};
use actiongate::subscriptions::model::{effective_text, Tag};
use actiongate::subscriptions::Subscription;
use actionserver::{EventKind, RawEvent, Tracker, WebhookRequest};
use serde_json::Value;

pub const CONFIRM: &str = "utter_confirm_subscription_change";
pub const SELECT: &str = "select_subscription_change";

/// The required six first, then other spellings the server accepts or refuses.
pub const ENCODINGS: [Option<&str>; 10] = [
    None,
    Some("deflate"),
    Some("DEFLATE"),
    Some("gzip"),
    Some("identity"),
    Some("br"),
    Some("x-gzip"),
    Some(" GZip "),
    Some(""),
    Some("gzip, deflate"),
];

pub fn limit(kind: u8, size: u16, len: usize) -> usize {
    match kind % 8 {
        0..=2 => usize::from(size),
        3 => len,
        4 => len.saturating_sub(1),
        5 => 0,
        6 => 1 << 20,
        _ => usize::MAX,
    }
}

/// The confirm slot the readers are also run with (CONTRACT.md section 3).
pub const CONFIRM_SLOT: &str = "confirm_change";

/// The two settings the reader is held to its reference with: NLU intents only, and Rasa
/// Pro CALM's confirm slot as well.
pub fn signal_settings() -> [Signals; 2] {
    [
        Signals::default(),
        Signals {
            confirm_slot: Some(CONFIRM_SLOT.to_owned()),
            ..Signals::default()
        },
    ]
}

/// A payload's intent: `None` for words, `Some(Some(name))` for a payload naming an intent
/// (a button: `/affirm`, `/deny{"x": 1}`, `/affirm@0.9`), `Some(None)` for any other payload
/// (a command, such as `/SetSlots(...)`).
pub fn payload_intent(said: &str) -> Option<Option<&str>> {
    said.strip_prefix('/').map(|rest| {
        let name = rest.split(['{', '@']).next().unwrap_or("").trim_end();
        let ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'));
        ok.then_some(name)
    })
}

/// The reader's meaning, written out plainly (forwards, over `serde_json::Value`): the
/// latest confirmation question; the first customer message or intent payload after it
/// (or, with a confirm slot, any `/` payload), with the yes and no that its intent (a yes at
/// the confidence floor or above), the confirm slot and Mantle's `resolve_tool_confirmation`
/// recorded before the next `user` event, and the other bot message before it if any; and
/// the change memory
/// when every field was last set by the latest run of the select action. `None` when an
/// event it reads has a field of the wrong type (the reader refuses those).
pub fn reference(session: &[&RawEvent], signals: &Signals) -> Option<Conversation> {
    fn text<'a>(event: &'a Value, key: &str) -> Option<Option<&'a str>> {
        match event.get(key) {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(s)) => Some(Some(s)),
            Some(_) => None,
        }
    }
    let mut conversation = Conversation::default();
    let mut current_action: Option<String> = None;
    // How many of select's slots the current action has written, in select's order.
    let mut answered = 0;
    let mut runs = 0usize;
    // Field -> (value, the select run that set it, or None for anything else).
    let mut memory: HashMap<&str, (Value, Option<usize>)> = HashMap::new();
    // The reply so far, the yes and no heard for it, and whether its signals still come.
    let mut reply: Option<(Reply, bool, bool)> = None;
    let mut listening = false;
    // Another bot message after the question, before the reply.
    let mut other_message: Option<String> = None;
    for (position, event) in session.iter().enumerate() {
        let kind = event.kind();
        let tool = kind == EventKind::Other && event.name() == "tool_executed";
        if !tool
            && !matches!(
                kind,
                EventKind::User | EventKind::Bot | EventKind::Action | EventKind::Slot
            )
        {
            continue;
        }
        let json: Value = serde_json::from_str(event.raw().get()).ok()?;
        if !json.is_object() {
            return None;
        }
        let hear = |answer: Option<bool>, reply: &mut Option<(Reply, bool, bool)>| {
            if let Some((_, yes, no)) = reply.as_mut() {
                match answer {
                    Some(true) => *yes = true,
                    Some(false) => *no = true,
                    None => {}
                }
            }
        };
        match kind {
            EventKind::User => {
                current_action = None;
                listening = false;
                let said = text(&json, "text")?.unwrap_or("");
                let message_id = text(&json, "message_id")?;
                let external = |v: Option<&Value>| {
                    v.and_then(|m| m.get("is_external")) == Some(&Value::Bool(true))
                };
                let by_rasa = said.is_empty()
                    || said.starts_with("EXTERNAL: ")
                    || external(json.get("metadata"))
                    || external(json.get("parse_data").and_then(|p| p.get("metadata")));
                // A payload naming an intent (`/affirm`, `/deny{"x": 1}`, `/affirm@0.9`) is a
                // button; any other payload (`/SetSlots(...)`) replies only with a confirm slot.
                let named = payload_intent(said);
                let replies = !by_rasa
                    && match named {
                        None => true,
                        Some(Some(_)) => true,
                        Some(None) => signals.confirm_slot.is_some(),
                    };
                let parsed = json.get("parse_data").and_then(|p| p.get("intent"));
                let given = said
                    .split_once('@')
                    .and_then(|(_, rest)| rest.split('{').next())
                    .and_then(|c| c.trim().parse::<f64>().ok());
                let (intent, confidence) = match named {
                    Some(Some(name)) => (Some(name), Some(given.unwrap_or(1.0))),
                    Some(None) => (None, None),
                    None => (
                        parsed.and_then(|i| i.get("name")).and_then(Value::as_str),
                        parsed
                            .and_then(|i| i.get("confidence"))
                            .and_then(Value::as_f64),
                    ),
                };
                if conversation.question.is_some() && reply.is_none() && replies {
                    let no = intent.is_some_and(|i| signals.deny_intents.iter().any(|d| d == i));
                    let yes = !no
                        && intent.is_some_and(|i| signals.affirm_intents.iter().any(|a| a == i))
                        && confidence.is_some_and(|c| c >= signals.min_confidence);
                    reply = Some((
                        Reply {
                            text: said.to_owned(),
                            timestamp: event.timestamp(),
                            message_id: message_id.map(str::to_owned),
                            meaning: Meaning::Unclear,
                            given: if named.is_some() {
                                Given::Payload
                            } else {
                                Given::Typed
                            },
                            after_other_message: other_message.take(),
                        },
                        yes,
                        no,
                    ));
                    listening = true;
                }
            }
            EventKind::Bot => {
                let said = text(&json, "text")?.unwrap_or("");
                let utter = json
                    .get("metadata")
                    .and_then(|m| m.get("utter_action"))
                    .and_then(Value::as_str);
                if utter == Some(CONFIRM) {
                    conversation.question = Some(Question {
                        text: said.to_owned(),
                        timestamp: event.timestamp(),
                        position,
                    });
                    reply = None;
                    listening = false;
                    other_message = None;
                } else if conversation.question.is_some() && reply.is_none() {
                    other_message = Some(utter.unwrap_or("a message").to_owned());
                }
            }
            EventKind::Action => {
                let name = text(&json, "name")?;
                if name == Some(SELECT) {
                    runs += 1;
                }
                current_action = name.map(str::to_owned);
                answered = 0;
            }
            EventKind::Slot => {
                let name = text(&json, "name")?.unwrap_or("");
                let value = json.get("value").cloned().unwrap_or(Value::Null);
                if listening && signals.confirm_slot.as_deref() == Some(name) {
                    hear(value.as_bool(), &mut reply);
                }
                if let Some(field) = change_memory::ALL.iter().find(|f| **f == name) {
                    // Select's own: its five slots, once each, in the order it writes them.
                    let setter = (current_action.as_deref() == Some(SELECT)
                        && change_memory::ALL.get(answered) == Some(field))
                    .then_some(runs);
                    answered = if setter.is_some() {
                        answered + 1
                    } else {
                        change_memory::ALL.len()
                    };
                    memory.insert(field, (value, setter));
                }
            }
            _ => {
                let name = text(&json, "tool_name")?;
                if listening && name == Some(MANTLE_CONFIRMATION_TOOL) {
                    let confirmed = json
                        .get("arguments")
                        .and_then(|a| a.get("confirmed"))
                        .and_then(Value::as_bool);
                    hear(confirmed, &mut reply);
                }
            }
        }
    }
    conversation.reply = reply.map(|(mut reply, yes, no)| {
        reply.meaning = if no {
            Meaning::No
        } else if yes {
            Meaning::Yes
        } else {
            Meaning::Unclear
        };
        reply
    });
    if runs > 0
        && change_memory::ALL.iter().all(|f| {
            memory
                .get(f)
                .is_some_and(|(_, setter)| *setter == Some(runs))
        })
    {
        conversation.selected_memory = Some(
            memory
                .into_iter()
                .map(|(k, (v, _))| (k.to_owned(), v))
                .collect(),
        );
    }
    Some(conversation)
}

/// Whether `tag` stands in `text` on its own, written independently of the guard's: some
/// occurrence has no id character right before it and no id character (nor a full stop
/// followed by one) right after it.
pub fn tag_stands_alone(text: &str, tag: &str) -> bool {
    let id_char = |c: char| c.is_alphanumeric() || "-_./:".contains(c);
    !tag.is_empty()
        && (0..text.len()).any(|at| {
            if !text.is_char_boundary(at) || !text[at..].starts_with(tag) {
                return false;
            }
            let before_ok = !text[..at].chars().last().is_some_and(id_char);
            let after: Vec<char> = text[at + tag.len()..].chars().take(2).collect();
            let after_ok = match after.as_slice() {
                [] => true,
                ['.', next, ..] => !next.is_alphanumeric(),
                ['.'] => true,
                [c, ..] => !(c.is_alphanumeric() || *c == '-' || *c == '_'),
            };
            before_ok && after_ok
        })
}

/// Every fact the guard must have checked before approving, written out independently.
pub fn every_fact_matches(inputs: &ApplyInputs, record: &Subscription) -> bool {
    let Some(account) = inputs.account.as_deref() else {
        return false;
    };
    let memory = &inputs.memory;
    let Some(tag_text) = memory.tag.as_deref() else {
        return false;
    };
    let Some(tag) = Tag::parse(tag_text) else {
        return false;
    };
    if inputs.requested_subscription.as_deref() != Some(tag.subscription.as_str())
        || inputs.requested_change_type.as_deref() != Some(tag.change_type.as_str())
    {
        return false;
    }
    let Some(written) = inputs.conversation.selected_memory.as_ref() else {
        return false;
    };
    let values = [
        &memory.subscription,
        &memory.label,
        &memory.effective,
        &memory.entitlements,
        &memory.tag,
    ];
    if !change_memory::ALL
        .iter()
        .zip(values)
        .all(|(name, value)| written.get(*name).and_then(Value::as_str) == value.as_deref())
    {
        return false;
    }
    let (Some(label), Some(effective), Some(entitlements)) = (
        memory.label.as_deref(),
        memory.effective.as_deref(),
        memory.entitlements.as_deref(),
    ) else {
        return false;
    };
    if label.is_empty() || effective.is_empty() || entitlements.is_empty() {
        return false;
    }
    let Some(question) = inputs.conversation.question.as_ref() else {
        return false;
    };
    if !(tag_stands_alone(&question.text, tag_text)
        && question.text.contains(label)
        && question.text.contains(effective)
        && question.text.contains(entitlements))
    {
        return false;
    }
    // The question as Rasa rendered the confirmation response, when its text is known:
    // rendered from these very terms, and to this text.
    if let Some(template) = &inputs.template {
        let then = |slot: &str, now: &str| {
            template
                .values
                .get(slot)
                .is_none_or(|v| v.as_str() == Some(now))
        };
        if !(then("change_tag", tag_text)
            && (!inputs.shows_subscription
                || then(
                    "change_subscription",
                    memory.subscription.as_deref().unwrap_or(""),
                ))
            && then("change_label", label)
            && then("change_effective", effective)
            && then("change_entitlements", entitlements))
        {
            return false;
        }
        // Whole numbers read as integers or as floats (gRPC carries only doubles).
        let rendered = question::whole_number_readings(&template.values).any(|values| {
            template.variations.iter().any(|v| {
                question::render(v, &values).map(|t| t.trim_end().to_owned())
                    == Some(question.text.trim_end().to_owned())
            })
        });
        if !rendered {
            return false;
        }
    }
    // The subscription as memory names it, when the response shows it.
    let named = memory.subscription.as_deref().unwrap_or("");
    if inputs.shows_subscription && (named.is_empty() || !question.text.contains(named)) {
        return false;
    }
    let Some(reply) = inputs.conversation.reply.as_ref() else {
        return false;
    };
    // The reply answers the question only: no other bot message came between them.
    if reply.after_other_message.is_some() || reply.meaning != Meaning::Yes {
        return false;
    }
    // A typed yes is a plain yes in its own words. The replies the fuzz targets write are
    // "yes", "no", "/affirm" and "No, don't do it"; of the typed ones only "yes" is plain
    // (the reader itself has its own tests and the reply corpus).
    if reply.given == Given::Typed && reply.text != "yes" {
        return false;
    }
    let (Some(asked), Some(replied)) = (question.timestamp, reply.timestamp) else {
        return false;
    };
    // Written so that NaN fails, as in the guard: at most 600 s after, 5 s before.
    let fresh = replied - asked <= 600.0 && asked - replied <= 5.0;
    if !fresh {
        return false;
    }
    if record.account != account || record.id != tag.subscription || record.revision != tag.revision
    {
        return false;
    }
    if !named.is_empty() && named != record.display_name() {
        return false;
    }
    let Some(option) = record.option(&tag.change_type) else {
        return false;
    };
    option.label == label
        && effective_text(&option.effective_at).as_deref() == Some(effective)
        && option.entitlements == entitlements
}

pub fn exercise(tracker: &Tracker) {
    let applied = tracker.applied_events();
    let session = tracker.session_events();
    assert!(applied.len() <= tracker.events.len());
    // The session's events are the applied events less those before its start.
    assert!(session.len() <= applied.len());
    let tail = &applied[applied.len() - session.len()..];
    assert!(
        tail.iter().zip(&session).all(|(a, b)| std::ptr::eq(*a, *b)),
        "the session's events are not a suffix of the applied events"
    );
    let _ = tracker.slots_to_validate();
    let _ = tracker.latest_intent();
    let _ = tracker.latest_input_channel();
    let _ = tracker.events_after_latest_restart();
    let _ = tracker.active_loop_name();
    for event in &tracker.events {
        let _ = event.typed();
    }
}

/// `events` is the tracker's events array as JSON text, shown when a check fails (it is
/// what tests/fuzz_regressions/conversation_read/ keeps).
pub fn check_reader(tracker: &Tracker, events: &[u8]) {
    let events = String::from_utf8_lossy(events);
    let session = tracker.session_events();
    for signals in signal_settings() {
        let reading = Reading {
            confirm_response: CONFIRM,
            select_action: SELECT,
            signals: &signals,
        };
        if let Ok(conversation) = conversation::read(&session, &reading) {
            check_conversation(&session, &conversation, &signals, &events);
        }
    }
}

fn check_conversation(
    session: &[&RawEvent],
    conversation: &Conversation,
    signals: &Signals,
    events: &str,
) {
    if let Some(expected) = reference(session, signals) {
        assert_eq!(
            *conversation, expected,
            "the reader and its reference differ ({signals:?})\n{events}"
        );
    }
    if let Some(question) = &conversation.question {
        let event = session
            .get(question.position)
            .unwrap_or_else(|| panic!("the question's position is outside the session\n{events}"));
        assert_eq!(event.kind(), EventKind::Bot, "not a bot event\n{events}");
        assert_eq!(question.timestamp, event.timestamp(), "{events}");
        // Only the fields the question is made of: a field the reader never reads (a
        // lone surrogate in a key of `data`, say) does not change what the customer read.
        #[derive(serde::Deserialize)]
        struct Utter {
            #[serde(default)]
            utter_action: Option<Value>,
        }
        #[derive(serde::Deserialize)]
        struct BotFields {
            #[serde(default)]
            text: Option<String>,
            #[serde(default)]
            metadata: Option<Utter>,
        }
        match serde_json::from_str::<BotFields>(event.raw().get()) {
            Ok(bot) => {
                let utter = bot.metadata.and_then(|m| m.utter_action);
                assert_eq!(
                    utter.as_ref().and_then(Value::as_str),
                    Some(CONFIRM),
                    "{events}"
                );
                assert_eq!(bot.text.as_deref().unwrap_or(""), question.text, "{events}");
            }
            Err(e) => panic!("the question's event reads as {e}\n{events}"),
        }
    } else {
        assert!(
            conversation.reply.is_none(),
            "a reply without a question\n{events}"
        );
    }
    if let Some(reply) = &conversation.reply {
        assert!(
            !reply.text.is_empty() && !reply.text.starts_with("EXTERNAL: "),
            "Rasa's own event counted as a reply\n{events}"
        );
        // A button names an intent; any other payload is a command, a reply only where a
        // confirm slot is read.
        assert!(
            signals.confirm_slot.is_some() || payload_intent(&reply.text) != Some(None),
            "a command counted as a reply\n{events}"
        );
    }
    if let Some(memory) = &conversation.selected_memory {
        assert_eq!(memory.len(), change_memory::ALL.len(), "{events}");
        assert!(
            change_memory::ALL.iter().all(|f| memory.contains_key(*f)),
            "{events}"
        );
        assert!(
            session.iter().any(|e| e.kind() == EventKind::Action),
            "memory trusted without the select action in the session\n{events}"
        );
    }
}

/// The webhook_parse checks on one body: the server's reading (as text when the body is
/// UTF-8) accepts exactly what reading the bytes accepts, with the same events, and only
/// objects; every tracker helper runs; a tracker serialises back to JSON that parses again
/// with the same events, and to the same bytes a second time.
pub fn check_webhook(data: &[u8]) {
    let parsed = WebhookRequest::parse(data);
    let as_bytes = serde_json::from_slice::<Option<WebhookRequest>>(data);
    match (&parsed, &as_bytes) {
        (Ok(a), Ok(b)) => {
            // The walk over text and serde's reading of bytes keep the same request, raw
            // parts and all.
            assert_eq!(
                format!("{a:?}"),
                format!("{b:?}"),
                "text and bytes read different requests"
            );
        }
        (Err(_), Err(_)) => {}
        _ => panic!(
            "text and bytes disagree: {:?} vs {:?}",
            parsed.as_ref().err(),
            as_bytes.as_ref().err()
        ),
    }
    let Ok(Some(request)) = parsed else {
        return;
    };
    // Serde's derived structs also read a list by position; only an object is a request.
    assert_eq!(
        data.iter().find(|b| !b.is_ascii_whitespace()),
        Some(&b'{'),
        "a body that is not an object was read as a request"
    );
    let Some(tracker) = request.tracker.as_ref() else {
        return;
    };
    exercise(tracker);
    let once = serde_json::to_vec(tracker).expect("a parsed tracker serialises");
    let again: Tracker = serde_json::from_slice(&once).unwrap_or_else(|e| {
        panic!(
            "a re-serialised tracker does not parse: {e}\n{}",
            String::from_utf8_lossy(&once)
        )
    });
    assert_eq!(again.events.len(), tracker.events.len());
    assert_eq!(again.sender_id, tracker.sender_id);
    assert_eq!(
        once,
        serde_json::to_vec(&again).unwrap(),
        "serialising is not stable"
    );
}
