//! Properties: the guard approves if and only if every fact matches, whatever the
//! perturbation; applied events equal rasa-sdk's algorithm on arbitrary event lists.

use std::collections::HashMap;

use proptest::prelude::*;
use serde_json::{json, Value};

use actiongate::consent::{check_conversation, compare_facts, ApplyInputs, ConsentConfig, Memory};
use actiongate::conversation::{Conversation, Given, Meaning, Question, Reading, Reply, Signals};
use actiongate::subscriptions::{ChangeOption, Subscription};
use actionserver::Tracker;

const TAG: &str = "WS-SUB-3304 stop_renewal r4";
const EFFECTIVE: &str = "2027-01-01 00:00 UTC";
const ENTITLEMENTS: &str = "October to December boxes ship as usual; no charge on 2027-01-01";

/// What may be wrong with a confirmation; each flag breaks one fact.
#[derive(Debug, Clone)]
struct Perturbation {
    no_account: bool,
    tag: u8,          // 0 ok, 1 empty, 2 malformed
    untrusted: u8,    // 0 ok, 1 nothing written, 2 a field differs
    other_target: u8, // 0 ok, 1 other subscription, 2 other change type, 3 missing
    question: u8,     // 0 ok, 1 none, 2 without tag, 3 without date, 4 without entitlements,
    // 5 without label, 6 the tag inside a longer one
    unanswered: bool,
    meaning: u8, // 0 yes, 1 no, 2 unclear
    gap: f64,    // seconds between question and reply (negative: the reply's clock is behind)
    missing_time: bool,
}

fn perturbation() -> impl Strategy<Value = Perturbation> {
    (
        any::<bool>(),
        0u8..3,
        0u8..3,
        0u8..4,
        0u8..7,
        any::<bool>(),
        prop_oneof![3 => Just(0u8), 1 => 1u8..3],
        -10.0f64..1200.0,
        any::<bool>(),
    )
        .prop_map(
            |(
                no_account,
                tag,
                untrusted,
                other_target,
                question,
                unanswered,
                meaning,
                gap,
                missing_time,
            )| Perturbation {
                no_account,
                tag,
                untrusted,
                other_target,
                question,
                unanswered,
                meaning,
                gap,
                missing_time,
            },
        )
}

fn inputs(p: &Perturbation) -> ApplyInputs {
    let tag = match p.tag {
        0 => TAG.to_owned(),
        1 => String::new(),
        _ => "WS-SUB-3304 stop_renewal".to_owned(),
    };
    let memory = Memory {
        subscription: Some("WS-SUB-3304 (Style Box, monthly)".into()),
        label: Some("Stop renewal".into()),
        effective: Some(EFFECTIVE.into()),
        entitlements: Some(ENTITLEMENTS.into()),
        tag: Some(tag.clone()).filter(|t| !t.is_empty()),
    };
    let mut written: HashMap<String, Value> = HashMap::from([
        (
            "change_subscription".into(),
            json!("WS-SUB-3304 (Style Box, monthly)"),
        ),
        ("change_label".into(), json!("Stop renewal")),
        ("change_effective".into(), json!(EFFECTIVE)),
        ("change_entitlements".into(), json!(ENTITLEMENTS)),
        (
            "change_tag".into(),
            if tag.is_empty() {
                Value::Null
            } else {
                json!(tag)
            },
        ),
    ]);
    if p.untrusted == 2 {
        written.insert("change_entitlements".into(), json!("something else"));
    }
    let question_text = match p.question {
        2 => format!("Confirm: Stop renewal, {EFFECTIVE}; {ENTITLEMENTS}."),
        3 => format!("Confirm {TAG}: Stop renewal; {ENTITLEMENTS}."),
        4 => format!("Confirm {TAG}: Stop renewal, {EFFECTIVE}."),
        5 => format!("Confirm {TAG}: {EFFECTIVE}; {ENTITLEMENTS}."),
        6 => format!("Confirm GIFT{TAG}: Stop renewal, {EFFECTIVE}; {ENTITLEMENTS}."),
        _ => format!("Confirm {TAG}: Stop renewal, {EFFECTIVE}; {ENTITLEMENTS}."),
    };
    let question = (p.question != 1).then_some(Question {
        text: question_text,
        timestamp: Some(100.0),
        position: 7,
    });
    let reply = (!p.unanswered && question.is_some()).then(|| Reply {
        text: "yes".into(),
        timestamp: if p.missing_time {
            None
        } else {
            Some(100.0 + p.gap)
        },
        message_id: Some("m1".into()),
        meaning: [Meaning::Yes, Meaning::No, Meaning::Unclear][usize::from(p.meaning)],
        given: Given::Typed,
        after_other_message: None,
    });
    let (sub, change) = match p.other_target {
        0 => (Some("WS-SUB-3304"), Some("stop_renewal")),
        1 => (Some("WS-SUB-3310"), Some("stop_renewal")),
        2 => (Some("WS-SUB-3304"), Some("skip_next_box")),
        _ => (None, None),
    };
    ApplyInputs {
        sender_id: "prop".into(),
        account: (!p.no_account).then(|| "acct-7".into()),
        requested_subscription: sub.map(str::to_owned),
        requested_change_type: change.map(str::to_owned),
        memory,
        conversation: Conversation {
            question,
            reply,
            selected_memory: (p.untrusted != 1).then_some(written),
        },
        template: None,
        shows_subscription: false,
    }
}

/// The facts of the service, each possibly moved.
#[derive(Debug, Clone)]
struct Facts {
    other_account: bool,
    revision: i64,
    effective_at: &'static str,
    entitlements_changed: bool,
    label_changed: bool,
    offered: bool,
}

fn facts() -> impl Strategy<Value = Facts> {
    (
        any::<bool>(),
        3i64..6,
        prop_oneof![
            Just("2027-01-01T00:00:00Z"),
            Just("2027-01-01T00:00:01Z"),
            Just("2026-12-31T00:00:00Z")
        ],
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(
                other_account,
                revision,
                effective_at,
                entitlements_changed,
                label_changed,
                offered,
            )| {
                Facts {
                    other_account,
                    revision,
                    effective_at,
                    entitlements_changed,
                    label_changed,
                    offered,
                }
            },
        )
}

fn record(f: &Facts) -> Subscription {
    Subscription {
        id: "WS-SUB-3304".into(),
        account: if f.other_account {
            "acct-9".into()
        } else {
            "acct-7".into()
        },
        product: "Style Box".into(),
        plan: "monthly".into(),
        status: "active".into(),
        revision: f.revision,
        options: if f.offered {
            vec![ChangeOption {
                change_type: "stop_renewal".into(),
                label: if f.label_changed {
                    "Cancel now".into()
                } else {
                    "Stop renewal".into()
                },
                effective_at: f.effective_at.into(),
                entitlements: if f.entitlements_changed {
                    "no refund".into()
                } else {
                    ENTITLEMENTS.into()
                },
                review: false,
            }]
        } else {
            vec![]
        },
        notes: vec![],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_guard_approves_if_and_only_if_every_fact_matches(p in perturbation(), f in facts()) {
        let config = ConsentConfig::default();
        let conversation_ok = !p.no_account && p.tag == 0 && p.untrusted == 0 && p.other_target == 0
            && p.question == 0 && !p.unanswered && p.meaning == 0 && !p.missing_time
            && p.gap <= 600.0 && p.gap >= -5.0;
        let checked = check_conversation(&inputs(&p), &config);
        prop_assert_eq!(checked.is_ok(), conversation_ok, "{:?}", checked);
        if let Ok(confirmation) = checked {
            let facts_ok = !f.other_account && f.revision == 4 && f.offered
                && f.effective_at == "2027-01-01T00:00:00Z" && !f.entitlements_changed
                && !f.label_changed;
            let compared = compare_facts(&confirmation, Some(&record(&f)));
            prop_assert_eq!(compared.is_ok(), facts_ok, "{:?}", compared);
            if let Err(outcome) = compared {
                if f.other_account {
                    prop_assert!(outcome.current.is_none() && outcome.why.is_none(), "nothing revealed");
                }
            }
            prop_assert!(compare_facts(&confirmation, None).is_err(), "an unknown record never approves");
        }
    }
}

/// rasa-sdk's `applied_events`, as written there (quadratic on purpose: the reference).
fn reference(events: &[&str]) -> Vec<usize> {
    let mut done: Vec<usize> = Vec::new();
    let undo_till = |done: &mut Vec<usize>, kind: &str| {
        while let Some(i) = done.pop() {
            if events[i] == kind {
                break;
            }
        }
    };
    for (i, kind) in events.iter().enumerate() {
        match *kind {
            "restart" => done.clear(),
            "undo" => undo_till(&mut done, "action"),
            "rewind" => {
                undo_till(&mut done, "user");
                undo_till(&mut done, "action");
            }
            _ => done.push(i),
        }
    }
    done
}

proptest! {
    #[test]
    fn applied_events_match_rasa_sdk(kinds in proptest::collection::vec(prop_oneof![
        Just("user"), Just("action"), Just("bot"), Just("slot"), Just("restart"), Just("undo"), Just("rewind"), Just("session_started")
    ], 0..60)) {
        let events: Vec<Value> = kinds.iter().enumerate().map(|(i, k)| json!({"event": k, "timestamp": i as f64, "name": format!("e{i}")})).collect();
        let text = json!({"sender_id": "p", "events": events}).to_string();
        let tracker: Tracker = serde_json::from_str(&text).unwrap();
        let ours: Vec<f64> = tracker.applied_events().iter().map(|e| e.timestamp().unwrap()).collect();
        let expected: Vec<f64> = reference(&kinds).into_iter().map(|i| i as f64).collect();
        prop_assert_eq!(&ours, &expected);
        prop_assert!(tracker.applied_events().iter().all(|e| !matches!(e.name(), "restart" | "undo" | "rewind")));
        let session = tracker.session_events();
        prop_assert!(session.iter().skip(1).all(|e| e.name() != "session_started"), "a session view holds one session");
    }
}

/// The question (text, position), the reply's text and meaning, and the trusted memory,
/// sorted.
type Read = (
    Option<(String, usize)>,
    Option<(String, Meaning, bool)>,
    Option<Vec<(String, Value)>>,
);

/// The conversation reader's plain forward form: the reference the reverse scan must
/// agree with (CONTRACT.md section 3, written out as it reads), with the confirm slot
/// `confirm_change` when `calm`.
fn read_forward(events: &[Value], calm: bool) -> Read {
    let mut question: Option<(String, usize)> = None;
    let mut reply: Option<(String, bool, bool, bool)> = None;
    let mut listening = false;
    // Another bot message after the question and before the reply.
    let mut other = false;
    let mut current: Option<String> = None;
    // How many of select's slots the current action has written, in select's order.
    let mut answered = 0;
    let mut runs = 0;
    let mut setters: HashMap<String, (Value, Option<usize>)> = Default::default();
    for (i, e) in events.iter().enumerate() {
        match e["event"].as_str().unwrap() {
            "user" => {
                current = None;
                listening = false;
                let text = e["text"].as_str().unwrap_or("");
                // `/affirm` and `/deny` name an intent (a button); `/SetSlots(...)` is a
                // command, a reply only with the confirm slot.
                let command = text.starts_with('/') && text.contains('(');
                let counts =
                    !text.is_empty() && !text.starts_with("EXTERNAL: ") && (calm || !command);
                let intent = match text.strip_prefix('/') {
                    Some(named) if !command => Some(named),
                    Some(_) => None,
                    None => e["parse_data"]["intent"]["name"].as_str(),
                };
                if counts && question.is_some() && reply.is_none() {
                    reply = Some((
                        text.to_owned(),
                        intent == Some("affirm"),
                        intent == Some("deny"),
                        std::mem::take(&mut other),
                    ));
                    listening = true;
                }
            }
            "bot" if e["metadata"]["utter_action"] == "utter_confirm_subscription_change" => {
                question = Some((e["text"].as_str().unwrap().to_owned(), i));
                reply = None;
                listening = false;
                other = false;
            }
            "bot" => other |= question.is_some() && reply.is_none(),
            "action" => {
                let name = e["name"].as_str().unwrap().to_owned();
                if name == "select_subscription_change" {
                    runs += 1;
                }
                current = Some(name);
                answered = 0;
            }
            "slot" => {
                let name = e["name"].as_str().unwrap();
                if calm && listening && name == "confirm_change" {
                    if let (Some((_, yes, no, _)), Some(b)) = (reply.as_mut(), e["value"].as_bool())
                    {
                        if b {
                            *yes = true
                        } else {
                            *no = true
                        }
                    }
                }
                if actiongate::conversation::change_memory::ALL.contains(&name) {
                    // Select's own: its five slots, once each, in the order it writes them.
                    let all = actiongate::conversation::change_memory::ALL;
                    let by = (current.as_deref() == Some("select_subscription_change")
                        && all.get(answered) == Some(&name))
                    .then_some(runs);
                    answered = if by.is_some() {
                        answered + 1
                    } else {
                        all.len()
                    };
                    setters.insert(name.to_owned(), (e["value"].clone(), by));
                }
            }
            _ => {}
        }
    }
    let memory = (runs > 0
        && actiongate::conversation::change_memory::ALL
            .iter()
            .all(|f| setters.get(*f).is_some_and(|(_, by)| *by == Some(runs))))
    .then(|| {
        let mut m: Vec<(String, Value)> = setters.into_iter().map(|(k, (v, _))| (k, v)).collect();
        m.sort_by(|a, b| a.0.cmp(&b.0));
        m
    });
    let reply = reply.map(|(text, yes, no, other)| {
        let meaning = match (yes, no) {
            (_, true) => Meaning::No,
            (true, false) => Meaning::Yes,
            _ => Meaning::Unclear,
        };
        (text, meaning, other)
    });
    (question, reply, memory)
}

fn event_strategy() -> impl Strategy<Value = Value> {
    let field = prop_oneof![
        Just("change_tag"),
        Just("change_effective"),
        Just("change_label"),
        Just("change_subscription"),
        Just("change_entitlements"),
        Just("other")
    ];
    prop_oneof![
        prop_oneof![
            Just(("yes", "affirm")),
            Just(("/affirm", "affirm")),
            Just(("/deny", "deny")),
            Just(("/SetSlots(confirm_change=true)", "")),
            Just(("no", "deny")),
            Just(("ok thanks", "affirm")),
            Just(("what?", "ask")),
            Just(("EXTERNAL: remind", "affirm")),
            Just(("", "affirm")),
        ]
        .prop_map(
            |(t, i)| json!({"event": "user", "text": t, "parse_data": {"intent": {"name": i, "confidence": 1.0}}})
        ),
        prop_oneof![Just(json!(true)), Just(json!(false)), Just(json!("yes"))]
            .prop_map(|v| json!({"event": "slot", "name": "confirm_change", "value": v})),
        prop_oneof![
            Just("utter_confirm_subscription_change"),
            Just("utter_other")
        ]
        .prop_map(
            |u| json!({"event": "bot", "text": format!("q {u}"), "metadata": {"utter_action": u}})
        ),
        prop_oneof![
            Just("select_subscription_change"),
            Just("action_listen"),
            Just("action_other")
        ]
        .prop_map(|n| json!({"event": "action", "name": n})),
        (field, 0u8..3)
            .prop_map(|(f, v)| json!({"event": "slot", "name": f, "value": format!("v{v}")})),
        Just(json!({"event": "user_featurization"})),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn the_reverse_reader_agrees_with_a_forward_read(events in proptest::collection::vec(event_strategy(), 0..40)) {
        let stamped: Vec<Value> = events.iter().enumerate().map(|(i, e)| { let mut e = e.clone(); e["timestamp"] = json!(i as f64); e }).collect();
        let text = json!({"sender_id": "p", "events": stamped}).to_string();
        let tracker: Tracker = serde_json::from_str(&text).unwrap();
        for calm in [false, true] {
            let signals = Signals { confirm_slot: calm.then(|| "confirm_change".to_owned()), ..Signals::default() };
            let reading = Reading { confirm_response: "utter_confirm_subscription_change", select_action: "select_subscription_change", signals: &signals };
            let ours = actiongate::conversation::read(&tracker.session_events(), &reading).unwrap();
            let (question, reply, memory) = read_forward(&stamped, calm);
            prop_assert_eq!(ours.question.map(|q| (q.text, q.position)), question);
            prop_assert_eq!(ours.reply.map(|r| (r.text, r.meaning, r.after_other_message.is_some())), reply);
            let mut mine: Option<Vec<(String, Value)>> = ours.selected_memory.map(|m| m.into_iter().collect());
            if let Some(m) = mine.as_mut() { m.sort_by(|a, b| a.0.cmp(&b.0)); }
            prop_assert_eq!(mine, memory);
        }
    }
}
