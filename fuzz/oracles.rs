//! What the fuzz targets and the regression test (tests/fuzz_regressions.rs) both hold
//! the code to: the encodings and limits tried, a plain forward conversation reader to
//! compare the real one with, the guard's "approve only if every fact matches", and the
//! tracker helpers exercised on every parsed request. One copy, included by both with
//! `#[path]`.
#![allow(dead_code)]

use std::collections::HashMap;

use actiongate::consent::ApplyInputs;
use actiongate::conversation::{self, Answer, Conversation, Question, CHANGE_MEMORY};
use actiongate::protocol::{Event, EventKind, RawEvent, Tracker, WebhookRequest};
use actiongate::subscriptions::model::{effective_text, Tag};
use actiongate::subscriptions::Subscription;
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

/// The reader's meaning, written out plainly (forwards, over `serde_json::Value`): the
/// latest confirmation question, the latest customer message after it, and the change
/// memory when every field was last set by the latest run of the select action. `None`
/// when an event it reads has a field of the wrong type (the reader refuses those).
pub fn reference(session: &[&RawEvent]) -> Option<Conversation> {
    fn text<'a>(event: &'a Value, key: &str) -> Option<Option<&'a str>> {
        match event.get(key) {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(s)) => Some(Some(s)),
            Some(_) => None,
        }
    }
    let mut conversation = Conversation::default();
    let mut current_action: Option<String> = None;
    let mut runs = 0usize;
    // Field -> (value, the select run that set it, or None for anything else).
    let mut memory: HashMap<&str, (Value, Option<usize>)> = HashMap::new();
    for (position, event) in session.iter().enumerate() {
        let kind = event.kind();
        if !matches!(
            kind,
            EventKind::User | EventKind::Bot | EventKind::Action | EventKind::Slot
        ) {
            continue;
        }
        let json: Value = serde_json::from_str(event.raw().get()).ok()?;
        if !json.is_object() {
            return None;
        }
        match kind {
            EventKind::User => {
                current_action = None;
                let said = text(&json, "text")?.unwrap_or("");
                let message_id = text(&json, "message_id")?;
                if said.starts_with('/') {
                    continue;
                }
                if conversation.question.is_some() {
                    conversation.answer = Some(Answer {
                        text: said.to_owned(),
                        timestamp: event.timestamp(),
                        message_id: message_id.map(str::to_owned),
                    });
                }
            }
            EventKind::Bot => {
                let said = text(&json, "text")?.unwrap_or("");
                let utter = match json.get("metadata") {
                    None | Some(Value::Null) => None,
                    Some(m @ Value::Object(_)) => text(m, "utter_action")?,
                    Some(_) => return None,
                };
                if utter == Some(CONFIRM) {
                    conversation.question = Some(Question {
                        text: said.to_owned(),
                        timestamp: event.timestamp(),
                        position,
                    });
                    conversation.answer = None;
                }
            }
            EventKind::Action => {
                let name = text(&json, "name")?;
                if name == Some(SELECT) {
                    runs += 1;
                }
                current_action = name.map(str::to_owned);
            }
            _ => {
                let name = text(&json, "name")?.unwrap_or("");
                if let Some(field) = CHANGE_MEMORY.iter().find(|f| **f == name) {
                    let setter = (current_action.as_deref() == Some(SELECT)).then_some(runs);
                    let value = json.get("value").cloned().unwrap_or(Value::Null);
                    memory.insert(field, (value, setter));
                }
            }
        }
    }
    if runs > 0
        && CHANGE_MEMORY.iter().all(|f| {
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
    if !CHANGE_MEMORY
        .iter()
        .zip(values)
        .all(|(name, value)| written.get(*name).and_then(Value::as_str) == value.as_deref())
    {
        return false;
    }
    let (Some(effective), Some(entitlements)) =
        (memory.effective.as_deref(), memory.entitlements.as_deref())
    else {
        return false;
    };
    if effective.is_empty() || entitlements.is_empty() {
        return false;
    }
    let Some(question) = inputs.conversation.question.as_ref() else {
        return false;
    };
    if !(question.text.contains(tag_text)
        && question.text.contains(effective)
        && question.text.contains(entitlements))
    {
        return false;
    }
    let Some(answer) = inputs.conversation.answer.as_ref() else {
        return false;
    };
    let (Some(asked), Some(answered)) = (question.timestamp, answer.timestamp) else {
        return false;
    };
    // Written so that NaN fails, as in the guard.
    let fresh = answered >= asked && answered - asked <= 600.0;
    if !fresh {
        return false;
    }
    if record.account != account || record.id != tag.subscription || record.revision != tag.revision
    {
        return false;
    }
    let Some(option) = record.option(&tag.change_type) else {
        return false;
    };
    effective_text(&option.effective_at).as_deref() == Some(effective)
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
    let Ok(conversation) = conversation::read(&session, CONFIRM, SELECT) else {
        return;
    };
    if let Some(expected) = reference(&session) {
        assert_eq!(
            conversation, expected,
            "the reader and its reference differ\n{events}"
        );
    }
    if let Some(question) = &conversation.question {
        let event = session
            .get(question.position)
            .unwrap_or_else(|| panic!("the question's position is outside the session\n{events}"));
        assert_eq!(event.kind(), EventKind::Bot, "not a bot event\n{events}");
        assert_eq!(question.timestamp, event.timestamp(), "{events}");
        match event.typed() {
            Ok(Event::Bot(bot)) => {
                assert_eq!(bot.utter_action(), Some(CONFIRM), "{events}");
                assert_eq!(bot.text.as_deref().unwrap_or(""), question.text, "{events}");
            }
            other => panic!("the question's event reads as {other:?}\n{events}"),
        }
    } else {
        assert!(
            conversation.answer.is_none(),
            "an answer without a question\n{events}"
        );
    }
    if let Some(answer) = &conversation.answer {
        assert!(
            !answer.text.starts_with('/'),
            "a command counted as an answer\n{events}"
        );
    }
    if let Some(memory) = &conversation.selected_memory {
        assert_eq!(memory.len(), CHANGE_MEMORY.len(), "{events}");
        assert!(
            CHANGE_MEMORY.iter().all(|f| memory.contains_key(*f)),
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
            let events = |r: &Option<WebhookRequest>| {
                r.as_ref().and_then(|r| r.tracker.as_ref()).map(|t| {
                    t.events
                        .iter()
                        .map(|e| e.raw().get().to_owned())
                        .collect::<Vec<_>>()
                })
            };
            assert_eq!(events(a), events(b), "text and bytes read different events");
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
