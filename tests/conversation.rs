//! The conversation reader and the tracker's applied events, as pure functions over small
//! event lists (restart, rewind, undo, new sessions), like rasa-sdk's tracker tests.

use actiongate::conversation::{customer_messages, read};
use actiongate::protocol::{RawEvent, Tracker};
use serde_json::{json, Value};

/// A tracker over `events`. Trackers borrow the request body; a test's body lives for
/// the whole test run.
fn tracker(events: &[Value]) -> Tracker<'static> {
    let text = json!({"sender_id": "t", "events": events}).to_string();
    serde_json::from_str(Box::leak(text.into_boxed_str())).unwrap()
}

fn names(events: &[&RawEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let v: Value = serde_json::from_str(e.raw().get()).unwrap();
            v.get("name")
                .or(v.get("text"))
                .and_then(Value::as_str)
                .unwrap_or(e.name())
                .to_owned()
        })
        .collect()
}

fn user(text: &str) -> Value {
    json!({"event": "user", "text": text, "timestamp": 1.0})
}
fn action(name: &str) -> Value {
    json!({"event": "action", "name": name, "timestamp": 1.0})
}
fn bot(text: &str, utter: &str, t: f64) -> Value {
    json!({"event": "bot", "text": text, "metadata": {"utter_action": utter}, "timestamp": t})
}
fn slot(name: &str, value: &str) -> Value {
    json!({"event": "slot", "name": name, "value": value, "timestamp": 1.0})
}

#[test]
fn restart_clears_everything_before_it() {
    let t = tracker(&[
        user("a"),
        action("x"),
        json!({"event": "restart"}),
        user("b"),
    ]);
    assert_eq!(names(&t.applied_events()), ["b"]);
}

#[test]
fn undo_removes_back_to_and_including_the_previous_action() {
    let t = tracker(&[
        user("a"),
        action("x"),
        slot("s", "1"),
        json!({"event": "undo"}),
        action("y"),
    ]);
    assert_eq!(names(&t.applied_events()), ["a", "y"]);
}

#[test]
fn rewind_removes_the_user_message_and_the_listen_before_it() {
    let t = tracker(&[
        action("action_listen"),
        user("a"),
        action("action_listen"),
        user("b"),
        json!({"event": "rewind"}),
    ]);
    assert_eq!(names(&t.applied_events()), ["action_listen", "a"]);
}

#[test]
fn a_new_session_drops_the_old_one_for_the_session_view_only() {
    let t = tracker(&[
        user("old"),
        json!({"event": "session_started"}),
        user("new"),
    ]);
    assert_eq!(
        names(&t.applied_events()),
        ["old", "session_started", "new"]
    );
    assert_eq!(names(&t.session_events()), ["session_started", "new"]);
}

#[test]
fn many_undos_stay_linear_and_correct() {
    let mut events = Vec::new();
    for i in 0..5_000 {
        events.push(action(&format!("a{i}")));
        events.push(json!({"event": "undo"}));
    }
    events.push(user("kept"));
    assert_eq!(names(&tracker(&events).applied_events()), ["kept"]);
}

#[test]
fn slots_to_validate_are_the_trailing_slot_events() {
    let t = tracker(&[slot("a", "1"), action("x"), slot("b", "2"), slot("c", "3")]);
    let names: Vec<String> = t.slots_to_validate().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["b", "c"]);
}

const Q: &str = "utter_confirm_subscription_change";
const SELECT: &str = "select_subscription_change";

fn selected(tag: &str) -> Vec<Value> {
    vec![
        action(SELECT),
        slot("change_subscription", "S"),
        slot("change_label", "L"),
        slot("change_effective", "E"),
        slot("change_entitlements", "N"),
        slot("change_tag", tag),
    ]
}

#[test]
fn the_latest_question_and_the_customers_answer() {
    let mut events = selected("T1");
    events.extend([
        bot("first T1", Q, 10.0),
        user("/affirm"),
        bot("second T1", Q, 20.0),
        user("hmm"),
        user("yes"),
    ]);
    let t = tracker(&events);
    let c = read(&t.session_events(), Q, SELECT).unwrap();
    assert_eq!(c.question.as_ref().unwrap().text, "second T1");
    assert_eq!(c.question.unwrap().timestamp, Some(20.0));
    assert_eq!(c.answer.unwrap().text, "yes");
    assert_eq!(c.selected_memory.unwrap()["change_tag"], "T1");
}

#[test]
fn a_question_is_unanswered_until_a_customer_message_follows() {
    let mut events = selected("T1");
    events.extend([user("yes"), bot("q T1", Q, 10.0), user("/affirm")]);
    let c = read(&tracker(&events).session_events(), Q, SELECT).unwrap();
    assert!(c.question.is_some());
    assert!(
        c.answer.is_none(),
        "a /command is not the customer's words; the yes came before"
    );
}

#[test]
fn memory_set_outside_the_latest_select_is_not_trusted() {
    // Set by the customer's entities (slot events after a user event).
    let events = vec![
        user("x"),
        slot("change_subscription", "S"),
        slot("change_label", "L"),
        slot("change_effective", "E"),
        slot("change_entitlements", "N"),
        slot("change_tag", "T"),
    ];
    assert!(read(&tracker(&events).session_events(), Q, SELECT)
        .unwrap()
        .selected_memory
        .is_none());
    // Selected, then one field changed by another action.
    let mut events = selected("T");
    events.extend([action("action_other"), slot("change_tag", "T2")]);
    assert!(read(&tracker(&events).session_events(), Q, SELECT)
        .unwrap()
        .selected_memory
        .is_none());
    // Two selects: only the latest counts, and it must have written every field.
    let mut events = selected("T1");
    events.extend([action(SELECT), slot("change_tag", "T2")]);
    assert!(read(&tracker(&events).session_events(), Q, SELECT)
        .unwrap()
        .selected_memory
        .is_none());
}

#[test]
fn a_malformed_event_is_an_error_not_a_guess() {
    let events = vec![json!({"event": "bot", "text": 5, "metadata": {"utter_action": Q}})];
    assert!(read(&tracker(&events).session_events(), Q, SELECT).is_err());
    // Duplicate keys in an event the reader uses: refused, though its head was read fast.
    for raw in [
        r#"{"event": "user", "timestamp": 1.0, "text": "yes", "timestamp": 9.0}"#,
        r#"{"event": "user", "timestamp": 1.0, "event": "bot", "text": "yes"}"#,
    ] {
        let text = format!(r#"{{"sender_id": "t", "events": [{raw}]}}"#);
        let t: Tracker = serde_json::from_str(&text).unwrap();
        assert!(read(&t.session_events(), Q, SELECT).is_err(), "{raw}");
    }
}

#[test]
fn event_heads_read_fast_or_fully_agree() {
    for (raw, kind, timestamp) in [
        (
            r#"{"event": "user", "timestamp": 1796027823.2790322, "text": "x"}"#,
            "user",
            Some(1796027823.2790322),
        ),
        (r#"{"event":"bot","timestamp":5}"#, "bot", Some(5.0)),
        (
            r#"{"event": "slot", "timestamp": null, "name": "a"}"#,
            "slot",
            None,
        ),
        (
            r#"{"name": "a", "event": "action", "timestamp": 2.5}"#,
            "action",
            Some(2.5),
        ),
        (
            r#"{"event": "fl\u006fw_started", "timestamp": 1e3}"#,
            "flow_started",
            Some(1000.0),
        ),
    ] {
        let e: RawEvent = serde_json::from_str(raw).unwrap();
        assert_eq!((e.name(), e.timestamp()), (kind, timestamp), "{raw}");
    }
    for bad in [
        r#"{"timestamp": 1.0}"#,
        r#"{"event": "", "timestamp": 1.0}"#,
        r#"{"event": 5}"#,
        r#"{"event": "user", "timestamp": "x"}"#,
    ] {
        assert!(serde_json::from_str::<RawEvent>(bad).is_err(), "{bad}");
    }
}

#[test]
fn the_customers_messages_are_their_words_not_commands() {
    let t = tracker(&[
        user("/session_start"),
        user("stop my box"),
        bot("sure", "utter_x", 1.0),
        user("/affirm"),
        user("yes"),
    ]);
    assert_eq!(
        customer_messages(&t.session_events()).unwrap(),
        ["stop my box", "yes"]
    );
}
