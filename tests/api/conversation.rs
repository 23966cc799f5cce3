//! The conversation reader and the tracker's applied events, as pure functions over small
//! event lists (restart, rewind, undo, new sessions), like rasa-sdk's tracker tests.

use actiongate::conversation::{
    customer_messages, read, Conversation, Given, Meaning, Reading, Signals,
};
use actionserver::{RawEvent, Tracker};
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

/// A customer message with the intent Rasa's NLU gave it.
fn said(text: &str, intent: &str, t: f64) -> Value {
    json!({"event": "user", "text": text, "timestamp": t, "message_id": format!("m{t}"),
           "parse_data": {"intent": {"name": intent, "confidence": 1.0}, "text": text}})
}

fn set(name: &str, value: Value) -> Value {
    json!({"event": "slot", "name": name, "value": value, "timestamp": 1.0})
}

fn signals(confirm_slot: Option<&str>) -> Signals {
    Signals {
        confirm_slot: confirm_slot.map(str::to_owned),
        ..Signals::default()
    }
}

fn read_with(events: &[Value], signals: &Signals) -> Conversation {
    let t = tracker(events);
    let reading = Reading {
        confirm_response: Q,
        select_action: SELECT,
        signals,
    };
    read(&t.session_events(), &reading).unwrap()
}

fn read_default(events: &[Value]) -> Conversation {
    read_with(events, &Signals::default())
}

/// The reply's text and meaning.
fn reply_of(c: &Conversation) -> Option<(String, Meaning)> {
    c.reply.as_ref().map(|r| (r.text.clone(), r.meaning))
}

fn asked_then(tail: &[Value]) -> Vec<Value> {
    let mut events = selected("T1");
    events.push(bot("q T1", Q, 10.0));
    events.extend_from_slice(tail);
    events
}

#[test]
fn the_reply_is_the_first_customer_message_after_the_latest_question() {
    let mut events = selected("T1");
    events.extend([
        bot("first T1", Q, 10.0),
        said("yes", "affirm", 11.0),
        bot("second T1", Q, 20.0),
        said("hmm", "inform", 21.0),
        said("yes", "affirm", 22.0),
    ]);
    let c = read_default(&events);
    assert_eq!(c.question.as_ref().unwrap().text, "second T1");
    assert_eq!(c.question.as_ref().unwrap().timestamp, Some(20.0));
    assert_eq!(reply_of(&c), Some(("hmm".into(), Meaning::Unclear)));
    assert_eq!(c.reply.unwrap().message_id.as_deref(), Some("m21"));
    assert_eq!(c.selected_memory.unwrap()["change_tag"], "T1");
}

#[test]
fn a_no_stays_a_no_whatever_follows() {
    let c = read_default(&asked_then(&[
        said("No, leave it", "deny", 11.0),
        bot(
            "OK, I have not changed anything.",
            "utter_change_not_made",
            12.0,
        ),
        said("ok thanks", "affirm", 13.0),
    ]));
    assert_eq!(reply_of(&c), Some(("No, leave it".into(), Meaning::No)));
}

#[test]
fn a_yes_to_a_later_question_is_not_a_yes_to_this_one() {
    let c = read_default(&asked_then(&[
        said("what does that mean?", "ask", 11.0),
        bot("Anything else I can do?", "utter_anything_else", 12.0),
        said("yes", "affirm", 13.0),
    ]));
    assert_eq!(
        reply_of(&c),
        Some(("what does that mean?".into(), Meaning::Unclear))
    );
}

#[test]
fn asked_again_the_new_reply_counts() {
    let mut events = asked_then(&[said("what does that mean?", "ask", 11.0)]);
    events.extend([bot("q T1", Q, 20.0), said("yes please", "affirm", 21.0)]);
    let c = read_default(&events);
    assert_eq!(reply_of(&c), Some(("yes please".into(), Meaning::Yes)));
    assert_eq!(c.question.unwrap().timestamp, Some(20.0));
}

#[test]
fn a_question_is_unanswered_until_a_customer_message_follows() {
    let mut events = selected("T1");
    events.extend([
        said("yes", "affirm", 5.0),
        bot("q T1", Q, 10.0),
        user("/SetSlots(confirm_change=true)"),
    ]);
    let c = read_default(&events);
    assert!(c.question.is_some());
    assert!(
        c.reply.is_none(),
        "a command naming no intent is not a reply without a confirm slot; the yes came before"
    );
}

#[test]
fn rasas_own_messages_and_empty_ones_are_not_replies() {
    let c = read_default(&asked_then(&[
        // A reminder or trigger_intent, by its text and by its metadata.
        said("EXTERNAL: affirm", "affirm", 11.0),
        json!({"event": "user", "text": "yes", "timestamp": 12.0, "metadata": {"is_external": true},
               "parse_data": {"intent": {"name": "affirm", "confidence": 1.0}}}),
        json!({"event": "user", "text": "yes", "timestamp": 12.5,
               "parse_data": {"intent": {"name": "affirm", "confidence": 1.0}, "metadata": {"is_external": true}}}),
        json!({"event": "user", "text": null, "timestamp": 13.0, "parse_data": {"intent": {"name": "affirm", "confidence": 1.0}}}),
        json!({"event": "user", "text": "", "timestamp": 13.5, "parse_data": {"intent": {"name": "affirm", "confidence": 1.0}}}),
    ]));
    assert_eq!(reply_of(&c), None);
    let c = read_default(&asked_then(&[
        said("EXTERNAL: affirm", "affirm", 11.0),
        said("no", "deny", 12.0),
    ]));
    assert_eq!(reply_of(&c), Some(("no".into(), Meaning::No)));
}

#[test]
fn an_intent_outside_both_lists_is_not_a_yes() {
    for intent in ["inform", "nlu_fallback", ""] {
        let c = read_default(&asked_then(&[said("sure, why not", intent, 11.0)]));
        assert_eq!(reply_of(&c).unwrap().1, Meaning::Unclear, "{intent}");
    }
    // No parse data at all (a channel that records none).
    let c = read_default(&asked_then(&[user("yes")]));
    assert_eq!(reply_of(&c).unwrap().1, Meaning::Unclear);
    // The lists are configurable.
    let custom = Signals {
        affirm_intents: vec!["confirm".into()],
        deny_intents: vec!["reject".into()],
        confirm_slot: None,
        ..Signals::default()
    };
    let c = read_with(&asked_then(&[said("yes", "affirm", 11.0)]), &custom);
    assert_eq!(reply_of(&c).unwrap().1, Meaning::Unclear);
    let c = read_with(&asked_then(&[said("go", "confirm", 11.0)]), &custom);
    assert_eq!(reply_of(&c).unwrap().1, Meaning::Yes);
    let c = read_with(&asked_then(&[said("stop", "reject", 11.0)]), &custom);
    assert_eq!(reply_of(&c).unwrap().1, Meaning::No);
}

#[test]
fn calms_confirm_slot_after_the_reply_says_yes_or_no() {
    let calm = signals(Some("confirm_change"));
    // A typed reply; the flow's collect step set the slot from it.
    let yes = asked_then(&[
        said("sounds good", "", 11.0),
        set("confirm_change", json!(true)),
    ]);
    assert_eq!(reply_of(&read_with(&yes, &calm)).unwrap().1, Meaning::Yes);
    // Without the confirm slot configured, the slot says nothing.
    assert_eq!(reply_of(&read_default(&yes)).unwrap().1, Meaning::Unclear);
    let no = asked_then(&[
        said("hm, no", "", 11.0),
        set("confirm_change", json!(false)),
    ]);
    assert_eq!(reply_of(&read_with(&no, &calm)).unwrap().1, Meaning::No);
    // A button's payload is a reply too, with the slot it set.
    let button = asked_then(&[
        user("/SetSlots(confirm_change=true)"),
        set("confirm_change", json!(true)),
    ]);
    let c = read_with(&button, &calm);
    assert_eq!(
        reply_of(&c),
        Some(("/SetSlots(confirm_change=true)".into(), Meaning::Yes))
    );
    // Any no wins: an affirm intent with the slot set false.
    let mixed = asked_then(&[
        said("yes", "affirm", 11.0),
        set("confirm_change", json!(false)),
    ]);
    assert_eq!(reply_of(&read_with(&mixed, &calm)).unwrap().1, Meaning::No);
    // Only the slot event before the next user event counts; a string is not a boolean.
    let late = asked_then(&[
        said("hmm", "", 11.0),
        said("whatever", "", 12.0),
        set("confirm_change", json!(true)),
    ]);
    assert_eq!(
        reply_of(&read_with(&late, &calm)).unwrap().1,
        Meaning::Unclear
    );
    let text = asked_then(&[said("ok", "", 11.0), set("confirm_change", json!("true"))]);
    assert_eq!(
        reply_of(&read_with(&text, &calm)).unwrap().1,
        Meaning::Unclear
    );
    // Set before the question: not an answer to it.
    let mut before = selected("T1");
    before.extend([
        set("confirm_change", json!(true)),
        bot("q T1", Q, 10.0),
        said("hmm", "", 11.0),
    ]);
    assert_eq!(
        reply_of(&read_with(&before, &calm)).unwrap().1,
        Meaning::Unclear
    );
}

#[test]
fn mantles_record_of_the_held_call_says_yes_or_no() {
    let resolved = |confirmed: Value| {
        json!({"event": "tool_executed", "timestamp": 11.5, "tool_name": "resolve_tool_confirmation",
               "arguments": {"confirmed": confirmed}, "result": "{}", "is_error": false})
    };
    let yes = asked_then(&[said("yes", "", 11.0), resolved(json!(true))]);
    assert_eq!(reply_of(&read_default(&yes)).unwrap().1, Meaning::Yes);
    let no = asked_then(&[said("yes", "affirm", 11.0), resolved(json!(false))]);
    assert_eq!(reply_of(&read_default(&no)).unwrap().1, Meaning::No);
    // Another tool's record says nothing.
    let other = asked_then(&[
        said("yes", "", 11.0),
        json!({"event": "tool_executed", "tool_name": "lookup", "arguments": {"confirmed": true}}),
    ]);
    assert_eq!(reply_of(&read_default(&other)).unwrap().1, Meaning::Unclear);
}

#[test]
fn a_customers_own_metadata_never_makes_the_request_malformed() {
    for metadata in [
        json!({"utter_action": 5}),
        json!(["x"]),
        json!("text"),
        json!({"utter_action": Q}),
    ] {
        let c = read_default(&asked_then(&[
            json!({"event": "user", "text": "yes", "timestamp": 11.0,
            "metadata": metadata, "parse_data": {"intent": {"name": "affirm", "confidence": 1.0}, "metadata": metadata}}),
        ]));
        assert_eq!(reply_of(&c).unwrap().1, Meaning::Yes, "{metadata}");
        assert_eq!(c.question.unwrap().text, "q T1");
    }
    // A bot event whose utter_action is not a string is not the question.
    let mut events = asked_then(&[]);
    events.push(
        json!({"event": "bot", "text": "q T1", "timestamp": 12.0, "metadata": {"utter_action": 7}}),
    );
    assert_eq!(
        read_default(&events).question.unwrap().timestamp,
        Some(10.0)
    );
}

/// Parse data is read in one pass, key by key: what it means is what the object read
/// whole would say (of a key given twice, the last), and a shape Rasa never writes only
/// means no intent, never a malformed request.
#[test]
fn parse_data_reads_as_the_whole_object_would() {
    let yes = |parse_data: Value| {
        let c = read_default(&asked_then(&[json!({"event": "user", "text": "yes",
            "timestamp": 11.0, "parse_data": parse_data})]));
        reply_of(&c).map(|(_, meaning)| meaning)
    };
    let ranking: Vec<Value> = (0..50)
        .map(|i| json!({"name": format!("intent_{i}"), "confidence": 0.01}))
        .collect();
    let cases = [
        (
            json!({"intent": {"name": "affirm", "confidence": 1.0}}),
            Some(Meaning::Yes),
        ),
        (
            json!({"intent": {"name": "affirm", "confidence": 0.9}, "intent_ranking": ranking,
                   "entities": [{"entity": "x", "value": {"nested": [1, 2, {"a": null}]}}],
                   "text": "yes \"quoted\" \u{e9} \\ \n"}),
            Some(Meaning::Yes),
        ),
        (json!({"intent": {"name": "deny"}}), Some(Meaning::No)),
        (json!({"intent": {"name": 5}}), Some(Meaning::Unclear)),
        (json!({"intent": "affirm"}), Some(Meaning::Unclear)),
        (json!({"intent": ["affirm"]}), Some(Meaning::Unclear)),
        (json!({"intent": null}), Some(Meaning::Unclear)),
        (json!(["affirm"]), Some(Meaning::Unclear)),
        (json!("affirm"), Some(Meaning::Unclear)),
        (json!(true), Some(Meaning::Unclear)),
        (json!(1.5), Some(Meaning::Unclear)),
        (Value::Null, Some(Meaning::Unclear)),
        // Rasa's mark of a message it made itself: not the customer's, so not a reply.
        (
            json!({"intent": {"name": "affirm", "confidence": 1.0}, "metadata": {"is_external": true}}),
            None,
        ),
        (
            json!({"intent": {"name": "affirm", "confidence": 1.0}, "metadata": {"is_external": false}}),
            Some(Meaning::Yes),
        ),
        (
            json!({"intent": {"name": "affirm", "confidence": 1.0}, "metadata": {"is_external": "true"}}),
            Some(Meaning::Yes),
        ),
        (
            json!({"intent": {"name": "affirm", "confidence": 1.0}, "metadata": [{"is_external": true}]}),
            Some(Meaning::Yes),
        ),
    ];
    for (parse_data, meaning) in cases {
        assert_eq!(yes(parse_data.clone()), meaning, "{parse_data}");
    }
    // Repeated keys, written as raw text (a JSON value keeps one of each): the last counts.
    let raw = |parse_data: &str| {
        let text = format!(
            r#"{{"sender_id": "t", "events": [{}, {{"event": "user", "text": "yes", "timestamp": 11.0, "parse_data": {parse_data}}}]}}"#,
            asked_then(&[])
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        let t: Tracker<'static> = serde_json::from_str(Box::leak(text.into_boxed_str())).unwrap();
        let signals = Signals::default();
        let reading = Reading {
            confirm_response: Q,
            select_action: SELECT,
            signals: &signals,
        };
        read(&t.session_events(), &reading).map(|c| reply_of(&c).map(|(_, m)| m))
    };
    assert_eq!(
        raw(r#"{"intent": {"name": "deny"}, "intent": {"name": "affirm", "confidence": 1.0}}"#)
            .unwrap(),
        Some(Meaning::Yes)
    );
    assert_eq!(
        raw(r#"{"intent": {"name": "affirm", "name": "deny"}}"#).unwrap(),
        Some(Meaning::No)
    );
    assert_eq!(
        raw(r#"{"intent": {"name": "affirm", "confidence": 1.0}, "metadata": {"is_external": true, "is_external": false}}"#).unwrap(),
        Some(Meaning::Yes)
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
    assert!(read_default(&events).selected_memory.is_none());
    // Selected, then one field changed by another action.
    let mut events = selected("T");
    events.extend([action("action_other"), slot("change_tag", "T2")]);
    assert!(read_default(&events).selected_memory.is_none());
    // Two selects: only the latest counts, and it must have written every field.
    let mut events = selected("T1");
    events.extend([action(SELECT), slot("change_tag", "T2")]);
    assert!(read_default(&events).selected_memory.is_none());
}

#[test]
fn a_malformed_event_is_an_error_not_a_guess() {
    let events = vec![json!({"event": "bot", "text": 5, "metadata": {"utter_action": Q}})];
    let reading = Reading {
        confirm_response: Q,
        select_action: SELECT,
        signals: &Signals::default(),
    };
    assert!(read(&tracker(&events).session_events(), &reading).is_err());
    // Duplicate keys in an event the reader uses: refused, though its head was read fast.
    for raw in [
        r#"{"event": "user", "timestamp": 1.0, "text": "yes", "timestamp": 9.0}"#,
        r#"{"event": "user", "timestamp": 1.0, "event": "bot", "text": "yes"}"#,
    ] {
        let text = format!(r#"{{"sender_id": "t", "events": [{raw}]}}"#);
        let t: Tracker = serde_json::from_str(&text).unwrap();
        assert!(read(&t.session_events(), &reading).is_err(), "{raw}");
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
        user("EXTERNAL: remind_me"),
        json!({"event": "user", "text": "yes", "metadata": {"is_external": true}}),
        json!({"event": "user", "text": null}),
        user("yes"),
    ]);
    assert_eq!(
        customer_messages(&t.session_events()).unwrap(),
        ["stop my box", "yes"]
    );
}

#[test]
fn a_button_is_the_reply_with_the_meaning_of_the_intent_it_names() {
    let button = |payload: &str, t: f64| {
        json!({"event": "user", "text": payload, "timestamp": t,
               "parse_data": {"intent": {"name": "whatever", "confidence": 0.1}}})
    };
    for (payload, meaning) in [
        ("/affirm", Meaning::Yes),
        ("/deny", Meaning::No),
        ("/affirm{\"subscription\": \"WS-SUB-3304\"}", Meaning::Yes),
        ("/affirm@0.9", Meaning::Yes),
        // The payload's own confidence, when it gives one, is held to the floor too.
        ("/affirm@0.2", Meaning::Unclear),
        ("/greet", Meaning::Unclear),
    ] {
        let c = read_default(&asked_then(&[button(payload, 11.0)]));
        let reply = c.reply.unwrap();
        assert_eq!(
            (reply.meaning, reply.given),
            (meaning, Given::Payload),
            "{payload}"
        );
    }
    // The first reply counts, button or words; a button after it answers nothing.
    let c = read_default(&asked_then(&[
        button("/deny", 11.0),
        said("yes", "affirm", 13.0),
    ]));
    assert_eq!(reply_of(&c), Some(("/deny".into(), Meaning::No)));
    let c = read_default(&asked_then(&[
        said("yes", "affirm", 11.0),
        button("/deny", 12.0),
    ]));
    assert_eq!(reply_of(&c), Some(("yes".into(), Meaning::Yes)));
    assert_eq!(c.reply.unwrap().given, Given::Typed);
}

#[test]
fn a_yes_intent_below_the_confidence_floor_is_not_a_yes() {
    let at = |confidence: Value, intent: &str| {
        let c = read_default(&asked_then(&[
            json!({"event": "user", "text": "yes", "timestamp": 11.0,
            "parse_data": {"intent": {"name": intent, "confidence": confidence}}}),
        ]));
        reply_of(&c).unwrap().1
    };
    assert_eq!(at(json!(0.8), "affirm"), Meaning::Yes);
    assert_eq!(at(json!(1), "affirm"), Meaning::Yes);
    assert_eq!(at(json!(0.79), "affirm"), Meaning::Unclear);
    assert_eq!(at(json!(null), "affirm"), Meaning::Unclear);
    assert_eq!(at(json!("0.99"), "affirm"), Meaning::Unclear);
    // A no is a no at any confidence.
    assert_eq!(at(json!(0.05), "deny"), Meaning::No);
    // The floor is configurable.
    let lenient = Signals {
        min_confidence: 0.5,
        ..Signals::default()
    };
    let c = read_with(
        &asked_then(&[json!({"event": "user", "text": "yes", "timestamp": 11.0,
            "parse_data": {"intent": {"name": "affirm", "confidence": 0.6}}})]),
        &lenient,
    );
    assert_eq!(reply_of(&c).unwrap().1, Meaning::Yes);
}

#[test]
fn another_bot_message_between_the_question_and_the_reply_is_named() {
    // A reminder between the question and the yes: the yes answers the reminder.
    let c = read_default(&asked_then(&[
        bot(
            "Are you still there? Shall we carry on?",
            "utter_still_there",
            11.0,
        ),
        said("yes", "affirm", 12.0),
    ]));
    let reply = c.reply.unwrap();
    assert_eq!(reply.meaning, Meaning::Yes);
    assert_eq!(
        reply.after_other_message.as_deref(),
        Some("utter_still_there")
    );
    // Of two, the one the reply came right after is named (fuzzing found the earlier one
    // named: tests/fuzz_regressions/conversation_read/two-messages-before-the-reply.json).
    let c = read_default(&asked_then(&[
        bot("By the way, we have news.", "utter_news", 11.0),
        bot("Are you still there?", "utter_still_there", 11.5),
        said("yes", "affirm", 12.0),
    ]));
    assert_eq!(
        c.reply.unwrap().after_other_message.as_deref(),
        Some("utter_still_there")
    );
    // A message no response produced is another message too.
    let mut plain = bot("Would you like the Coffee Club too?", Q, 11.0);
    plain["metadata"] = json!({});
    let c = read_default(&asked_then(&[plain, said("yes", "affirm", 12.0)]));
    assert_eq!(
        c.reply.unwrap().after_other_message.as_deref(),
        Some("a message")
    );
    // The confirmation response's own bot events are not other messages: the latest is
    // the question.
    let c = read_default(&asked_then(&[
        bot("q T1", Q, 11.0),
        said("yes", "affirm", 12.0),
    ]));
    assert_eq!(c.reply.unwrap().after_other_message, None);
    // A bot message after the reply changes nothing.
    let c = read_default(&asked_then(&[
        said("yes", "affirm", 11.0),
        bot("Anything else?", "utter_anything_else", 12.0),
    ]));
    assert_eq!(c.reply.unwrap().after_other_message, None);
}

#[test]
fn slots_before_the_question_stop_at_a_reset() {
    use actiongate::conversation::slots_before;
    let events = [
        set("change_tag", json!("old")),
        json!({"event": "reset_slots", "timestamp": 2.0}),
        set("change_label", json!("L")),
        bot("q", Q, 10.0),
        set("change_tag", json!("after")),
    ];
    let t = tracker(&events);
    let session = t.session_events();
    let (values, reset) = slots_before(&session, 3, &["change_tag", "change_label"]).unwrap();
    assert!(reset, "a reset came before: the tag had its initial value");
    assert_eq!(values.get("change_label"), Some(&json!("L")));
    assert_eq!(values.get("change_tag"), None);
}

/// The guard's readers sharing one book of the events' fields (the conversation, then the
/// slots as the question was asked) read what each reads alone, including the events both
/// parse and a slot the first never parsed.
#[test]
fn readers_sharing_a_book_of_fields_read_what_each_reads_alone() {
    use actiongate::conversation::{
        read_with, set_after, set_after_with, slots_before, slots_before_with, Fieldbook,
    };
    let events = [
        set("change_label", json!("Early")),
        action("select_subscription_change"),
        set("change_tag", json!("A r4")),
        set("change_label", json!("Stop renewal")),
        bot("Shall I stop renewal?", Q, 10.0),
        said("yes", "affirm", 11.0),
        set("change_tag", json!("after")),
    ];
    let t = tracker(&events);
    let session = t.session_events();
    let reading = Reading {
        confirm_response: Q,
        select_action: "select_subscription_change",
        signals: &Signals::default(),
    };
    let book = Fieldbook::default();
    let shared = read_with(&session, &reading, &book).unwrap();
    assert_eq!(shared, read(&session, &reading).unwrap());
    let asked = shared.question.as_ref().unwrap().position;
    let names = ["change_label", "change_tag", "change_subscription"];
    assert_eq!(
        slots_before_with(&session, asked, &names, &book).unwrap(),
        slots_before(&session, asked, &names).unwrap()
    );
    let (values, _) = slots_before_with(&session, asked, &names, &book).unwrap();
    assert_eq!(values.get("change_label"), Some(&json!("Stop renewal")));
    assert_eq!(values.get("change_tag"), Some(&json!("A r4")));
    assert_eq!(
        set_after_with(&session, asked, "change_tag", &book).unwrap(),
        set_after(&session, asked, "change_tag").unwrap()
    );
}

#[test]
fn an_identity_written_outside_a_sessions_start_is_seen_however_it_is_spelled() {
    use actiongate::conversation::{session_identity, SessionIdentity};
    let meta = |account: &str| set("session_started_metadata", json!({"account_id": account}));
    let identity = |events: &[Value]| {
        let t = tracker(events);
        session_identity(&t.events, "session_started_metadata").unwrap()
    };
    let started = |account: &str| SessionIdentity::Started(Some(json!({"account_id": account})));
    let start = |account: &str| {
        vec![
            meta(account),
            action("action_session_start"),
            json!({"event": "session_started", "timestamp": 1.0}),
            meta(account),
            action("action_listen"),
        ]
    };
    // Rasa 3.6.21 over the REST channel writes the metadata right before it runs
    // action_session_start, then again inside the start (as read off a real tracker).
    assert_eq!(identity(&start("a")), started("a"));
    for rewrite in [
        r#"{"event": "slot", "timestamp": 3.0, "name": "session_started_metadata", "value": {"account_id": "b"}}"#,
        r#"{"event": "slot", "timestamp": 3.0, "name": "session_started_metadat\u0061", "value": {"account_id": "b"}}"#,
    ] {
        // Written as raw JSON so the escape survives.
        let raw = format!(
            r#"{{"sender_id": "t", "events": [{}, {}, {}]}}"#,
            serde_json::to_string(&start("a"))
                .unwrap()
                .trim_matches(|c| c == '[' || c == ']'),
            r#"{"event": "user", "text": "hi", "timestamp": 2.0}"#,
            rewrite
        );
        let t: Tracker = serde_json::from_str(Box::leak(raw.into_boxed_str())).unwrap();
        assert_eq!(
            session_identity(&t.events, "session_started_metadata").unwrap(),
            SessionIdentity::Rewritten,
            "{rewrite}"
        );
    }
    // A rewrite by an action (no customer message first) is a rewrite too.
    let mut by_action = start("a");
    by_action.extend([action("action_other"), meta("b")]);
    assert_eq!(identity(&by_action), SessionIdentity::Rewritten);
    // A restart does not end the session: the start's write stands (Rasa resets the
    // slot, but runs no action_session_start after /restart).
    let mut restarted = start("a");
    restarted.extend([
        user("/restart"),
        action("action_restart"),
        json!({"event": "restart"}),
        user("hi"),
    ]);
    assert_eq!(identity(&restarted), started("a"));
    // An earlier session's rewrite does not reach a later session that wrote it again.
    let mut later = start("a");
    later.extend([user("hi"), meta("b")]);
    later.extend(start("a"));
    assert_eq!(identity(&later), started("a"));
    // A later start that wrote no metadata of its own only carries the rewritten value
    // over (a reminder or trigger_intent after the session expired): still untrusted.
    let mut carried = start("a");
    carried.extend([
        user("hi"),
        meta("b"),
        action("action_listen"),
        action("action_session_start"),
        json!({"event": "session_started", "timestamp": 5.0}),
        meta("b"),
        action("action_listen"),
    ]);
    assert_eq!(identity(&carried), SessionIdentity::Rewritten);
    // A later start that wrote nothing at all (slots not carried to new sessions, no
    // metadata with the message): it has no account, whatever the earlier session had;
    // and the same when the window begins at that start.
    let mut nothing = start("a");
    let later_start = [
        action("action_session_start"),
        json!({"event": "session_started", "timestamp": 5.0}),
        action("action_listen"),
        user("yes"),
    ];
    nothing.extend([user("hi"), action("action_listen")]);
    nothing.extend(later_start.clone());
    assert_eq!(identity(&nothing), SessionIdentity::Started(None));
    assert_eq!(identity(&later_start), SessionIdentity::Started(None));
    // ... and a rewrite in that session is still a rewrite.
    nothing.push(meta("b"));
    assert_eq!(identity(&nothing), SessionIdentity::Rewritten);
    // ... but a rewrite before a restart of the same session still counts.
    let mut before_restart = start("a");
    before_restart.extend([user("hi"), meta("b"), json!({"event": "restart"})]);
    assert_eq!(identity(&before_restart), SessionIdentity::Rewritten);
    // Trimmed so the window starts at the start's own write, or among a later session's
    // carried-over slots: the value stands.
    assert_eq!(
        identity(&[meta("a"), action("action_listen"), user("hi")]),
        started("a")
    );
    assert_eq!(identity(&[meta("a"), user("hi")]), started("a"));
    assert_eq!(
        identity(&[
            set("change_tag", json!("T")),
            meta("a"),
            action("action_listen"),
            user("hi")
        ]),
        started("a")
    );
    // Trimmed, with a rewrite in view after a customer message: not trusted.
    assert_eq!(
        identity(&[meta("a"), user("hi"), meta("b")]),
        SessionIdentity::Rewritten
    );
    assert_eq!(
        identity(&[action("action_other"), meta("b"), user("hi")]),
        SessionIdentity::Rewritten
    );
    // Trimmed with no metadata event in view: nothing read (the slot's value stands).
    assert_eq!(
        identity(&[user("hi"), action("action_listen")]),
        SessionIdentity::Started(None)
    );
}

/// The same reading over a conversation as the SDK's test kit records it (every field
/// Rasa 3.6.21 writes: metadata, `user_featurization`, message ids, intent rankings, the
/// listen after the question).
#[test]
fn a_conversation_recorded_as_rasa_records_it_reads_the_same() {
    use actionserver::testing::{Conversation as Recorded, Utterance};
    let mut chat = Recorded::new("ada");
    chat.session_start()
        .user_says("stop my renewal", "request_stop_renewal")
        .action(SELECT);
    for (name, value) in [
        ("change_subscription", "S"),
        ("change_label", "L"),
        ("change_effective", "E"),
        ("change_entitlements", "N"),
        ("change_tag", "T1"),
    ] {
        chat.slot(name, value);
    }
    chat.respond(Q, "q T1").user(
        Utterance::new("yes please")
            .intent_with("affirm", 0.97)
            .ranked("deny", 0.02),
    );
    let body = chat.request("apply_subscription_change");
    let c = read_default(body["tracker"]["events"].as_array().unwrap());
    assert_eq!(c.question.as_ref().unwrap().text, "q T1");
    assert_eq!(reply_of(&c), Some(("yes please".into(), Meaning::Yes)));
    assert_eq!(c.selected_memory.unwrap()["change_tag"], "T1");
    // And a no, recorded the same way, stays a no.
    let mut no = chat.clone();
    no.respond(Q, "q T1").user_says("No, don't do it", "deny");
    let body = no.request("apply_subscription_change");
    let c = read_default(body["tracker"]["events"].as_array().unwrap());
    assert_eq!(reply_of(&c).map(|(_, m)| m), Some(Meaning::No));
}
