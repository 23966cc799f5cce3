//! The question, the reply and its meaning (CONTRACT.md sections 2, 3 and 4) through the
//! running server and the embedded service: a no stays a no, only the first reply answers
//! the question, every term is bound, the question is the rendered template, identity
//! comes only from the session's start, keys survive trimming, and no command is sent
//! while another for the same subscription is unresolved. Each test checks the service's
//! record afterwards.

use crate::common;

use common::faults::{Fault, FaultyService};
use common::{
    asked, assert_outcome, assert_record, outcome_of, reword_question, slot_in, spawn_app,
    spawn_app_with, Chat, ChatExt, TestApp, STYLE_BOX,
};
use serde_json::{json, Value};

/// Nothing was sent: the record is where it was, still active.
async fn assert_untouched(app: &TestApp) {
    assert_record(app, STYLE_BOX, 4, "active").await;
}

/// The change was made exactly once.
async fn assert_changed_once(app: &TestApp) {
    assert_record(app, STYLE_BOX, 5, "ending").await;
}

/// The apply request, the domain carrying the project's responses (as Rasa 3.6 sends it).
fn with_responses(c: &Chat) -> Value {
    c.request("apply_subscription_change")
}

#[tokio::test]
async fn a_no_is_declined_and_nothing_changes() {
    let app = spawn_app().await;
    let mut c = asked(&app, "no").await;
    c.user("No, leave it", "deny", &[]);
    assert_outcome(&c.apply(&app).await, "blocked", Some("declined"));
    assert_untouched(&app).await;
}

/// The story: routing misfires and runs apply on "ok thanks" after a no.
#[tokio::test]
async fn no_then_ok_thanks_changes_nothing() {
    let app = spawn_app().await;
    let mut c = asked(&app, "no-then-ok").await;
    c.user("No, leave it", "deny", &[]);
    c.action("utter_change_not_made");
    c.bot(
        "OK, I have not changed anything.",
        Some("utter_change_not_made"),
    );
    c.action("action_listen");
    c.user("ok thanks", "affirm", &[]);
    let outcome = c.apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("declined"));
    assert_eq!(outcome["effects"], 0);
    // And again, however often a rule fires.
    c.user("yes", "affirm", &[]);
    assert_outcome(&c.apply(&app).await, "blocked", Some("declined"));
    assert_untouched(&app).await;
}

#[tokio::test]
async fn no_then_asked_again_then_yes_is_applied_once() {
    let app = spawn_app().await;
    let mut c = asked(&app, "no-asked-again").await;
    c.user("no", "deny", &[]);
    assert_outcome(&c.apply(&app).await, "blocked", Some("declined"));
    assert_untouched(&app).await;
    // The customer changes their mind: selected and asked again.
    c.request_change(&app, STYLE_BOX, "stop_renewal")
        .await
        .unwrap();
    assert_outcome(&c.say_yes_and_apply(&app).await, "applied", None);
    assert_changed_once(&app).await;
}

#[tokio::test]
async fn a_question_back_is_not_a_yes_and_the_question_must_be_asked_again() {
    let app = spawn_app().await;
    let mut c = asked(&app, "clarify").await;
    c.user("what happens to my October box?", "ask_question", &[]);
    c.bot("It ships as usual.", Some("utter_explain"));
    c.user("ok, yes", "affirm", &[]);
    assert_outcome(&c.apply(&app).await, "blocked", Some("not_confirmed"));
    assert_untouched(&app).await;
    // Asked again (a new question event): now the yes counts.
    c.ask_confirmation();
    assert_outcome(&c.say_yes_and_apply(&app).await, "applied", None);
    assert_changed_once(&app).await;
}

#[tokio::test]
async fn a_yes_to_a_later_unrelated_question_is_not_a_yes_to_this_one() {
    let app = spawn_app().await;
    let mut c = asked(&app, "other-question").await;
    c.user("hmm, let me think", "chitchat", &[]);
    c.bot(
        "Can I help with anything else?",
        Some("utter_anything_else"),
    );
    c.user("yes", "affirm", &[]);
    assert_outcome(&c.apply(&app).await, "blocked", Some("not_confirmed"));
    assert_untouched(&app).await;
}

#[tokio::test]
async fn rasas_own_events_and_commands_are_not_replies() {
    let app = spawn_app().await;
    let mut c = asked(&app, "external").await;
    // A reminder and a trigger_intent: Rasa's own user events.
    c.user("EXTERNAL: affirm", "affirm", &[]);
    c.user("yes", "affirm", &[]);
    let at = c.events.len() - 2;
    c.events[at]["metadata"]["is_external"] = json!(true);
    c.events[at]["text"] = json!("go ahead");
    // A command (no confirm slot is configured, so `/SetSlots(...)` is not a reply).
    c.user("/SetSlots(confirm_change=true)", "", &[]);
    assert_outcome(&c.apply(&app).await, "blocked", Some("not_answered"));
    assert_untouched(&app).await;
}

#[tokio::test]
async fn the_label_is_a_term() {
    let app = spawn_app().await;
    // The question did not read the label out.
    let mut c = asked(&app, "no-label").await;
    reword_question(&mut c, |text| {
        text.replace("Stop renewal at the end of the current period", "a change")
    });
    assert_outcome(
        &c.say_yes_and_apply(&app).await,
        "blocked",
        Some("question_incomplete"),
    );
    assert_untouched(&app).await;
    // The service relabelled the change (same date, same entitlements) while the chat
    // was open.
    let mut c = asked(&app, "relabelled").await;
    let mut record = app.record(STYLE_BOX).await;
    record.as_object_mut().unwrap().remove("revision");
    record["options"][0]["label"] = json!("Cancel at once, keep paying until the period ends");
    app.put_record(&record).await;
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("benefit_loss_hidden"));
    assert_eq!(
        outcome["current"]["label"],
        "Cancel at once, keep paying until the period ends"
    );
    assert_record(&app, STYLE_BOX, 5, "active").await;
}

/// `BOX-7 stop_renewal r1` is not in a question about `GIFTBOX-7 stop_renewal r1`.
#[tokio::test]
async fn a_tag_inside_a_longer_tag_was_not_asked() {
    let app = spawn_app().await;
    for id in ["BOX-7", "GIFTBOX-7"] {
        let record = json!({"id": id, "account": "acct-7", "product": "Gift Box", "plan": "monthly",
            "status": "active", "options": [{"change_type": "stop_renewal", "label": "Stop renewal",
            "effective_at": "2027-03-01T00:00:00Z", "entitlements": "February box ships as usual"}],
            "notes": []});
        app.put_record(&record).await;
    }
    let mut c = Chat::new("substring", Some("acct-7"));
    c.request_change(&app, "GIFTBOX-7", "stop_renewal")
        .await
        .unwrap();
    // Then BOX-7 is selected, and no new question is asked.
    c.user(
        "no, the other one",
        "request_change",
        &[("subscription", "BOX-7")],
    );
    c.run(&app, "select_subscription_change").await.unwrap();
    assert_eq!(c.slots["change_tag"], "BOX-7 stop_renewal r1");
    let outcome = c.say_yes_and_apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("not_asked"));
    for id in ["BOX-7", "GIFTBOX-7"] {
        assert_record(&app, id, 1, "active").await;
    }
}

#[tokio::test]
async fn the_question_must_be_the_confirmation_response_as_rasa_rendered_it() {
    let app = spawn_app().await;
    // Reworded around the terms: every term is there, but the customer read something
    // else ("no refund" became a promise).
    let mut c = asked(&app, "reworded").await;
    reword_question(&mut c, |text| {
        text.replace(
            "Shall I make this change?",
            "You will get a full refund. Shall I make this change?",
        )
    });
    c.user("yes", "affirm", &[]);
    let (status, body) = app.webhook(&with_responses(&c)).await;
    assert_eq!(status, 200, "{body}");
    assert_outcome(&outcome_of(&body), "blocked", Some("question_incomplete"));
    assert_untouched(&app).await;
    // `consent.question: terms` relaxes it, for assistants that rephrase.
    let relaxed = spawn_app_with(&["--consent-question", "terms"], |_| {}).await;
    let mut c = asked(&relaxed, "rephrased").await;
    reword_question(&mut c, |text| format!("In other words: {}", text));
    c.user("yes", "affirm", &[]);
    let (_, body) = relaxed.webhook(&with_responses(&c)).await;
    assert_outcome(&outcome_of(&body), "applied", None);
    assert_changed_once(&relaxed).await;
    // The question exactly as rendered: applied.
    let mut c = asked(&app, "rendered").await;
    c.user("yes", "affirm", &[]);
    let (_, body) = app.webhook(&with_responses(&c)).await;
    assert_outcome(&outcome_of(&body), "applied", None);
    assert_changed_once(&app).await;
    // When the domain does not carry the confirmation response, only the terms can be
    // held: the reworded question then passes (what `actiongate check` warns about).
    let bare = spawn_app().await;
    let mut c = asked(&bare, "no-template").await;
    reword_question(&mut c, |text| {
        format!("{} You will get a full refund.", text)
    });
    c.user("yes", "affirm", &[]);
    let mut body = c.request("apply_subscription_change");
    body["domain"]["responses"] = json!({});
    let (_, body) = bare.webhook(&body).await;
    assert_outcome(&outcome_of(&body), "applied", None);
}

/// The question is rendered with the slots' values when it was sent, not now.
#[tokio::test]
async fn the_template_is_rendered_with_the_slots_as_they_were_when_asked() {
    let app = spawn_app().await;
    let mut c = asked(&app, "slots-then").await;
    // A slot the template reads changes after the question (as if set later): the
    // question still matches its own moment.
    c.slots
        .insert("change_subscription".into(), json!("something else"));
    c.user("yes", "affirm", &[]);
    let (_, body) = app.webhook(&with_responses(&c)).await;
    // The memory no longer matches what select wrote, so memory_untrusted decides first;
    // what matters is that the template check did not use today's slot.
    assert_outcome(&outcome_of(&body), "blocked", Some("memory_untrusted"));
    assert_untouched(&app).await;
}

#[tokio::test]
async fn apply_takes_part_in_the_domain_digest_exchange() {
    let app = spawn_app().await;
    let mut c = asked(&app, "digest").await;
    c.user("yes", "affirm", &[]);
    // Rasa Pro's first try: a digest, no domain.
    let mut body = with_responses(&c);
    let domain = body.as_object_mut().unwrap().remove("domain").unwrap();
    body["domain_digest"] = json!("D-42");
    let (status, answer) = app.webhook(&body).await;
    assert_eq!(status, 449, "{answer}");
    assert_eq!(answer["action_name"], "apply_subscription_change");
    assert_untouched(&app).await;
    // The retry with the domain: applied.
    body["domain"] = domain;
    let (status, answer) = app.webhook(&body).await;
    assert_eq!(status, 200, "{answer}");
    assert_outcome(&outcome_of(&answer), "applied", None);
    assert_changed_once(&app).await;
    // Later calls send the digest only: the cached domain holds the question to the
    // template (a reworded question is refused without another 449).
    let mut c = Chat::new("digest-2", Some("acct-7"));
    c.request_change(&app, "WS-SUB-3310", "switch_to_monthly")
        .await
        .unwrap();
    reword_question(&mut c, |text| format!("{} Free of charge!", text));
    c.user("yes", "affirm", &[]);
    let mut body = c.request("apply_subscription_change");
    body.as_object_mut().unwrap().remove("domain");
    body["domain_digest"] = json!("D-42");
    let (status, answer) = app.webhook(&body).await;
    assert_eq!(status, 200, "{answer}");
    assert_outcome(&outcome_of(&answer), "blocked", Some("question_incomplete"));
    assert_eq!(app.revision("WS-SUB-3310").await, 2);
}

#[tokio::test]
async fn an_identity_written_outside_a_sessions_start_is_denied_everywhere() {
    let app = spawn_app().await;
    let mut c = asked(&app, "switched").await;
    // Something writes the session's metadata again mid-conversation.
    c.slot("session_started_metadata", json!({"account_id": "acct-7"}));
    c.user("yes", "affirm", &[]);
    assert_outcome(&c.apply(&app).await, "denied", Some("not_authenticated"));
    for action in [
        "list_subscriptions",
        "select_subscription_change",
        "check_subscription_change",
    ] {
        let (status, body) = app.webhook(&c.request(action)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(outcome_of(&body)["status"], "denied", "{action}: {body}");
    }
    assert_untouched(&app).await;
    // Written outside a session's start, even before the customer's first words (after a
    // button's payload): not the session's start, not trusted.
    let mut c = Chat::new("restated", Some("acct-7"));
    c.user("/greet", "greet", &[]);
    c.slot("session_started_metadata", json!({"account_id": "acct-7"}));
    let (_, body) = app.webhook(&c.request("list_subscriptions")).await;
    assert_eq!(outcome_of(&body)["status"], "denied", "{body}");
    // The rewrite is confined to its own session: a later session whose start writes the
    // metadata again is trusted (CONTRACT.md section 2).
    c.session_start(json!({"account_id": "acct-7"}));
    let (_, body) = app.webhook(&c.request("list_subscriptions")).await;
    assert_eq!(
        slot_in(&body, "subscriptions").map(|s| s.is_array()),
        Some(true),
        "{body}"
    );
    assert_untouched(&app).await;
    // A new session's start writing the metadata: trusted.
    let mut c = Chat::new("new-session", Some("acct-9"));
    c.user("hello", "greet", &[]);
    c.session_start(json!({"account_id": "acct-7"}));
    c.request_change(&app, STYLE_BOX, "stop_renewal")
        .await
        .unwrap();
    assert_outcome(&c.say_yes_and_apply(&app).await, "applied", None);
    assert_changed_once(&app).await;
}

/// Rasa trims the front of long trackers (`max_event_history`): the same "yes" delivered
/// again with fewer events keeps its request key and replays the first outcome.
#[tokio::test]
async fn a_trimmed_redelivery_replays_the_first_outcome() {
    let app = spawn_app().await;
    let mut c = asked(&app, "trimmed").await;
    c.user("yes", "affirm", &[]);
    let first = c.request("apply_subscription_change");
    let (_, body) = app.webhook(&first).await;
    assert_outcome(&outcome_of(&body), "applied", None);
    let mut trimmed = first.clone();
    let events = trimmed["tracker"]["events"].as_array_mut().unwrap();
    events.drain(..4); // the session's start is gone
    let (status, body) = app.webhook(&trimmed).await;
    assert_eq!(status, 200, "{body}");
    let outcome = outcome_of(&body);
    assert_outcome(&outcome, "applied", None);
    assert_eq!(outcome["effects"], 1, "the first call's outcome, replayed");
    assert_changed_once(&app).await;
}

#[tokio::test]
async fn a_reply_timestamped_a_little_before_the_question_is_not_expired() {
    let app = spawn_app().await;
    // 3 s before: another replica's clock.
    let mut c = asked(&app, "skew").await;
    c.wait(-4.0);
    assert_outcome(&c.say_yes_and_apply(&app).await, "applied", None);
    assert_changed_once(&app).await;
    // 7 s before: past the allowance.
    let app = spawn_app().await;
    let mut c = asked(&app, "skew-far").await;
    c.wait(-8.0);
    assert_outcome(
        &c.say_yes_and_apply(&app).await,
        "blocked",
        Some("confirmation_expired"),
    );
    assert_untouched(&app).await;
    // The allowance is configurable.
    let app = spawn_app_with(&["--clock-skew", "10"], |_| {}).await;
    let mut c = asked(&app, "skew-wide").await;
    c.wait(-8.0);
    assert_outcome(&c.say_yes_and_apply(&app).await, "applied", None);
    assert_changed_once(&app).await;
}

#[tokio::test]
async fn a_customers_own_message_metadata_does_not_break_apply() {
    for metadata in [
        json!({"utter_action": 5}),
        json!(["a", "list"]),
        json!("text"),
    ] {
        let app = spawn_app().await;
        let mut c = asked(&app, "meta").await;
        c.user("yes", "affirm", &[]);
        let at = c.events.len() - 2;
        c.events[at]["metadata"] = metadata.clone();
        let (status, body) = app.webhook(&c.request("apply_subscription_change")).await;
        assert_eq!(status, 200, "{metadata}: {body}");
        assert_outcome(&outcome_of(&body), "applied", None);
        assert_changed_once(&app).await;
    }
}

#[tokio::test]
async fn no_command_is_sent_while_another_for_the_subscription_is_unresolved() {
    let base = spawn_app().await;
    let faulty = FaultyService::start(&base.service_url, Fault::DropAfterForwarding).await;
    let app = spawn_app_with(&["--subscriptions-url", &faulty.url], |_| {}).await;
    let mut first = Chat::new("unresolved-1", Some("acct-7"));
    first
        .request_change(&app, STYLE_BOX, "skip_next_box")
        .await
        .unwrap();
    assert_outcome(
        &first.say_yes_and_apply(&app).await,
        "pending_verification",
        Some("outcome_unknown"),
    );
    assert_eq!(faulty.commands_forwarded(), 1);
    // The command was applied at the service (r5); its answer was lost.
    assert_eq!(base.revision(STYLE_BOX).await, 5);
    // Another confirmation for the same subscription, in another conversation, on the
    // record as it is now, before the first is resolved: nothing is sent.
    faulty.set(Fault::Pass);
    let mut second = Chat::new("unresolved-2", Some("acct-7"));
    second
        .request_change(&app, STYLE_BOX, "stop_renewal")
        .await
        .unwrap();
    assert_eq!(second.slots["change_tag"], "WS-SUB-3304 stop_renewal r5");
    second.user("yes", "affirm", &[]);
    let outcome = second.apply(&app).await;
    assert_outcome(&outcome, "pending_verification", Some("outcome_unknown"));
    assert_eq!(outcome["effects"], 0);
    assert_eq!(faulty.commands_forwarded(), 1, "nothing else was sent");
    assert_record(&base, STYLE_BOX, 5, "active").await;
    // Resolved (check_subscription_change asks the service about the first key): then
    // the subscription takes commands again, and the same "yes" goes through once.
    let (_, body) = first.run(&app, "check_subscription_change").await.unwrap();
    assert_outcome(&outcome_of(&body), "applied", None);
    assert!(app.store.open_operation(STYLE_BOX).await.unwrap().is_none());
    let (_, body) = app
        .webhook(&second.request("apply_subscription_change"))
        .await;
    assert_outcome(&outcome_of(&body), "applied", None);
    assert_eq!(faulty.commands_forwarded(), 2);
    assert_record(&base, STYLE_BOX, 6, "ending").await;
}

#[tokio::test]
async fn calms_confirm_slot_is_the_reply_when_configured() {
    let app = spawn_app_with(&["--confirm-slot", "confirm_change"], |_| {}).await;
    // A button's payload and the slot it set: no.
    let mut c = asked(&app, "calm-no").await;
    c.user("/SetSlots(confirm_change=false)", "", &[]);
    c.slot("confirm_change", json!(false));
    assert_outcome(&c.apply(&app).await, "blocked", Some("declined"));
    assert_untouched(&app).await;
    // Typed "sure" that the flow's collect step read as true: yes.
    let mut c = asked(&app, "calm-yes").await;
    c.user("sure thing", "", &[]);
    c.slot("confirm_change", json!(true));
    assert_outcome(&c.apply(&app).await, "applied", None);
    assert_changed_once(&app).await;
}

#[tokio::test]
async fn mantles_record_of_the_held_call_is_read() {
    let app = spawn_app().await;
    let resolved = |confirmed: bool| {
        json!({"event": "tool_executed", "timestamp": null, "tool_name": "resolve_tool_confirmation",
               "arguments": {"confirmed": confirmed}, "result": "{}", "is_error": false,
               "metadata": {"source": "llm"}})
    };
    // The engine recorded a decline, whatever the words.
    let mut c = asked(&app, "mantle-no").await;
    c.user("yes but no", "", &[]);
    c.events.push(resolved(false));
    assert_outcome(&c.apply(&app).await, "blocked", Some("declined"));
    assert_untouched(&app).await;
    let mut c = asked(&app, "mantle-yes").await;
    c.user("go on then", "", &[]);
    c.events.push(resolved(true));
    assert_outcome(&c.apply(&app).await, "applied", None);
    assert_changed_once(&app).await;
}

/// Ids may hold spaces, so `BOX 7 stop_renewal r1` stands as a whole inside a question
/// about `GIFT BOX 7 stop_renewal r1`. When the question was rendered from the slots, what
/// it was rendered from decides: a question about another tag was not this one's.
#[test]
fn a_question_rendered_from_another_tag_was_not_asked() {
    use actiongate::consent::{check_conversation, ApplyInputs, ConsentConfig, Memory, Template};
    use actiongate::conversation::{Conversation as Read, Given, Meaning, Question, Reply};
    let terms = ("Stop renewal", "2027-03-01 00:00 UTC", "February box ships");
    let question = |tag: &str| format!("{}, {}: {}. (Change {tag}.)", terms.0, terms.1, terms.2);
    let inputs = |asked_tag: &str, template: bool| {
        let memory: Vec<(&str, &str)> = vec![
            ("change_subscription", "BOX 7"),
            ("change_label", terms.0),
            ("change_effective", terms.1),
            ("change_entitlements", terms.2),
            ("change_tag", "BOX 7 stop_renewal r1"),
        ];
        ApplyInputs {
            sender_id: "s".into(),
            account: Some("acct-7".into()),
            requested_subscription: Some("BOX 7".into()),
            requested_change_type: Some("stop_renewal".into()),
            memory: Memory {
                subscription: Some("BOX 7".into()),
                label: Some(terms.0.into()),
                effective: Some(terms.1.into()),
                entitlements: Some(terms.2.into()),
                tag: Some("BOX 7 stop_renewal r1".into()),
            },
            conversation: Read {
                question: Some(Question {
                    text: question(asked_tag),
                    timestamp: Some(10.0),
                    position: 0,
                }),
                reply: Some(Reply {
                    text: "yes".into(),
                    timestamp: Some(11.0),
                    message_id: Some("m".into()),
                    meaning: Meaning::Yes,
                    given: Given::Typed,
                    after_other_message: None,
                }),
                selected_memory: Some(
                    memory
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), json!(v)))
                        .collect(),
                ),
            },
            template: template.then(|| Template {
                variations: vec![
                    "{change_label}, {change_effective}: {change_entitlements}. (Change {change_tag}.)"
                        .into(),
                ],
                values: [
                    ("change_label", terms.0),
                    ("change_effective", terms.1),
                    ("change_entitlements", terms.2),
                    ("change_tag", asked_tag),
                ]
                .iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect(),
            }),
            shows_subscription: false,
        }
    };
    let config = ConsentConfig::default();
    let outcome = check_conversation(&inputs("GIFT BOX 7 stop_renewal r1", true), &config)
        .expect_err("another tag was asked");
    assert_eq!(outcome.reason.map(|r| r.as_str()), Some("not_asked"));
    assert!(check_conversation(&inputs("BOX 7 stop_renewal r1", true), &config).is_ok());
    // Held to the terms alone, the longer id can't be told apart (README: prefer ids
    // without spaces, or the template check).
    assert!(check_conversation(&inputs("GIFT BOX 7 stop_renewal r1", false), &config).is_ok());
}

/// The customer's last user event, to adjust what the NLU recorded for it.
fn last_user(c: &mut Chat) -> &mut Value {
    c.events
        .iter_mut()
        .rev()
        .find(|e| e["event"] == "user")
        .expect("a user event")
}

/// Issue 22's story: a keyword NLU reads a no, a hesitation and a question back as
/// `affirm`; the reply's own words are not a plain yes, so nothing is sent.
#[tokio::test]
async fn a_yes_intent_for_words_that_are_not_a_plain_yes_is_not_confirmed() {
    let app = spawn_app().await;
    for (sender, reply, named) in [
        ("negated", "No, don't do it", "\"no\" negates"),
        ("hesitant", "I'm not sure", "\"not\" negates"),
        ("asks-back", "Can I do it later?", "\"can\" asks a question"),
        ("ok-question", "ok?", "it asks a question (\"?\")"),
        ("refund", "yes, refund me", "\"refund\" is neither a yes"),
    ] {
        let mut c = asked(&app, sender).await;
        c.user(reply, "affirm", &[]);
        let outcome = c.apply(&app).await;
        assert_outcome(&outcome, "blocked", Some("not_confirmed"));
        let why = outcome["why"].as_str().unwrap_or_default();
        assert!(why.contains(named), "{reply:?}: {why}");
        assert_untouched(&app).await;
    }
    // Asked again, a plain yes that repeats the label's words is a yes.
    let mut c = asked(&app, "plain").await;
    c.user("Yes, stop the renewal 👍", "affirm", &[]);
    assert_outcome(&c.apply(&app).await, "applied", None);
    assert_changed_once(&app).await;
}

/// The rule is what blocks those: with `--plain-yes false` the guard trusts the intent
/// (an operator's choice, for an NLU they trust), and the same words make the change.
#[tokio::test]
async fn plain_yes_is_on_by_default_and_can_be_turned_off() {
    let app = spawn_app_with(&["--plain-yes", "false"], |_| {}).await;
    let mut c = asked(&app, "trusting").await;
    c.user("No, don't do it", "affirm", &[]);
    assert_outcome(&c.apply(&app).await, "applied", None);
    assert_changed_once(&app).await;
}

#[tokio::test]
async fn a_yes_intent_below_the_confidence_floor_is_not_a_yes() {
    let app = spawn_app().await;
    let mut c = asked(&app, "unsure-model").await;
    c.user("yes", "affirm", &[]);
    last_user(&mut c)["parse_data"]["intent"]["confidence"] = json!(0.62);
    assert_outcome(&c.apply(&app).await, "blocked", Some("not_confirmed"));
    assert_untouched(&app).await;
    // A no is a no at any confidence.
    let mut c = asked(&app, "unsure-no").await;
    c.user("no", "deny", &[]);
    last_user(&mut c)["parse_data"]["intent"]["confidence"] = json!(0.3);
    assert_outcome(&c.apply(&app).await, "blocked", Some("declined"));
    assert_untouched(&app).await;
    // At the floor, a yes.
    let mut c = asked(&app, "sure-model").await;
    c.user("yes", "affirm", &[]);
    last_user(&mut c)["parse_data"]["intent"]["confidence"] = json!(0.8);
    assert_outcome(&c.apply(&app).await, "applied", None);
    assert_changed_once(&app).await;
}

/// A click on the question's Yes button is recorded as the payload `/affirm`: the reply,
/// meaning what the intent means; a click on No declines.
#[tokio::test]
async fn a_button_click_is_the_reply() {
    let app = spawn_app().await;
    let mut c = asked(&app, "no-button").await;
    c.user("/deny", "deny", &[]);
    assert_outcome(&c.apply(&app).await, "blocked", Some("declined"));
    assert_untouched(&app).await;
    let mut c = asked(&app, "yes-button").await;
    c.user("/affirm", "affirm", &[]);
    let request = with_responses(&c);
    assert_outcome(&c.apply(&app).await, "applied", None);
    assert_changed_once(&app).await;
    // The same click delivered again: the first outcome, no second change.
    let (_, again) = app.webhook(&request).await;
    assert_outcome(&outcome_of(&again), "applied", None);
    assert_changed_once(&app).await;
}

/// A reminder (or an offer) sent after the question: a yes after it answers that message.
#[tokio::test]
async fn a_yes_after_another_bot_message_answers_that_message() {
    let app = spawn_app().await;
    let mut c = asked(&app, "reminded").await;
    c.action("utter_still_there");
    c.bot(
        "Are you still there? Shall we carry on?",
        Some("utter_still_there"),
    );
    c.action("action_listen");
    c.user("yes", "affirm", &[]);
    let outcome = c.apply(&app).await;
    assert_outcome(&outcome, "blocked", Some("not_answered"));
    assert!(outcome["why"].as_str().unwrap().contains("another message"));
    assert_untouched(&app).await;
    // Asked again: the yes right after the question counts.
    c.ask_confirmation();
    assert_outcome(&c.say_yes_and_apply(&app).await, "applied", None);
    assert_changed_once(&app).await;
}

/// Check between the question and its reply (CONTRACT.md section 4): with no reply yet (a
/// check triggered from outside, as `trigger_intent` writes it), waiting for a yes or a no
/// to the terms in memory; after "Did it go through?" typed right after the question (the
/// reply, and not a yes: section 3), the confirmation's outcome, `not_confirmed`. Either
/// way nothing is sent and check asks the question again (Rasa renders it from memory), and
/// the yes to that question counts.
#[tokio::test]
async fn check_between_the_question_and_its_reply_says_it_is_waiting() {
    let app = spawn_app().await;
    let mut c = asked(&app, "did-it").await;
    let followup = |body: &Value| {
        body["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["event"] == "followup")
            .map(|e| e["name"].clone())
    };
    c.user("EXTERNAL: check_change", "check_change", &[]);
    let (status, body) = c.run(&app, "check_subscription_change").await.unwrap();
    assert_eq!(status, 200, "{body}");
    let outcome = outcome_of(&body);
    assert_outcome(&outcome, "selected", Some("awaiting_reply"));
    assert_eq!(outcome["current"]["tag"], "WS-SUB-3304 stop_renewal r4");
    assert_eq!(
        body["responses"][0]["response"],
        "utter_subscription_change_awaiting_reply"
    );
    // The question again, as the next action Rasa runs (it renders it from memory).
    assert_eq!(
        followup(&body),
        Some(json!("utter_confirm_subscription_change"))
    );
    assert_untouched(&app).await;
    // Typed by the customer, the same words are the question's reply: not a yes.
    let mut c = asked(&app, "did-it-typed").await;
    c.user("did it go through?", "check_change", &[]);
    let (_, body) = c.run(&app, "check_subscription_change").await.unwrap();
    let outcome = outcome_of(&body);
    assert_outcome(&outcome, "blocked", Some("not_confirmed"));
    assert_eq!(
        body["responses"][0]["response"],
        "utter_subscription_change_blocked"
    );
    assert_eq!(
        followup(&body),
        Some(json!("utter_confirm_subscription_change"))
    );
    assert_untouched(&app).await;
    // The yes to the question asked again counts.
    c.ask_confirmation();
    assert_outcome(&c.say_yes_and_apply(&app).await, "applied", None);
    // After the yes, check reports the outcome, not the wait; it names no change of its own,
    // so requested-target slots emptied since (as Mantle's tool passes none) change nothing.
    let (_, body) = c.run(&app, "check_subscription_change").await.unwrap();
    assert_outcome(&outcome_of(&body), "applied", None);
    c.slot("subscription", Value::Null);
    c.slot("change_type", Value::Null);
    let (_, body) = c.run(&app, "check_subscription_change").await.unwrap();
    assert_outcome(&outcome_of(&body), "applied", None);
    assert_changed_once(&app).await;
}

/// Check reports the conversation's latest change, never an earlier one's outcome in its
/// place: a "no" to a second change is `declined`, a "yes" the service's facts refuse is
/// that refusal, though the first change was applied in the same conversation.
#[tokio::test]
async fn check_reports_the_latest_change_not_an_earlier_ones_outcome() {
    let app = spawn_app().await;
    let mut c = Chat::new("two-changes", Some("acct-7"));
    c.request_change(&app, "WS-SUB-3310", "stop_renewal")
        .await
        .unwrap();
    assert_outcome(&c.say_yes_and_apply(&app).await, "applied", None);
    // The second change is declined.
    c.request_change(&app, "WS-SUB-3304", "stop_renewal")
        .await
        .unwrap();
    c.user("no", "deny", &[]);
    assert_outcome(&c.apply(&app).await, "blocked", Some("declined"));
    let (_, body) = c.run(&app, "check_subscription_change").await.unwrap();
    assert_outcome(&outcome_of(&body), "blocked", Some("declined"));
    // Asked again and confirmed, but the record moved before the apply: blocked, and check
    // says so (with the terms as they are now), not the first change's `applied`.
    c.ask_confirmation();
    c.user("yes", "affirm", &[]);
    app.service.charge_october_box_early().await;
    assert_outcome(&c.apply(&app).await, "blocked", Some("benefit_loss_hidden"));
    let (_, body) = c.run(&app, "check_subscription_change").await.unwrap();
    let outcome = outcome_of(&body);
    assert_outcome(&outcome, "blocked", Some("benefit_loss_hidden"));
    assert_eq!(
        outcome["current"]["tag"], "WS-SUB-3304 stop_renewal r5",
        "{outcome}"
    );
    assert_eq!(
        app.revision("WS-SUB-3304").await,
        5,
        "only the service's own change"
    );
}

/// `consent.reply_words` adds words: another language's yes.
#[tokio::test]
async fn added_reply_words_count() {
    let default = spawn_app().await;
    let mut c = asked(&default, "ja-default").await;
    c.user("ja, bitte", "affirm", &[]);
    assert_outcome(&c.apply(&default).await, "blocked", Some("not_confirmed"));
    assert_untouched(&default).await;
    let app = spawn_app_with(&[], |s| {
        s.consent.reply_words = actiongate::consent::plain_yes::ReplyWords::new(
            &actiongate::consent::plain_yes::ExtraWords {
                affirm: vec!["ja".into()],
                filler: vec!["bitte".into()],
                refuse: vec!["nein".into()],
            },
        )
    })
    .await;
    let mut c = asked(&app, "nein").await;
    c.user("ja... nein", "affirm", &[]);
    assert_outcome(&c.apply(&app).await, "blocked", Some("not_confirmed"));
    assert_untouched(&app).await;
    let mut c = asked(&app, "ja").await;
    c.user("ja, bitte", "affirm", &[]);
    assert_outcome(&c.apply(&app).await, "applied", None);
    assert_changed_once(&app).await;
}

/// Rasa 3.6 runs no `action_session_start` after `/restart` and resets the slots: the
/// identity the session's start wrote still stands.
#[tokio::test]
async fn a_restart_keeps_the_identity_the_sessions_start_wrote() {
    let app = spawn_app().await;
    let mut c = Chat::new("restarted", Some("acct-7"));
    c.user("/restart", "restart", &[]);
    c.action("action_restart");
    c.marker("restart");
    c.slots.clear();
    c.action("action_listen");
    let (_, body) = app.webhook(&c.request("list_subscriptions")).await;
    assert_eq!(
        slot_in(&body, "subscriptions").map(|s| s.is_array()),
        Some(true),
        "{body}"
    );
    c.request_change(&app, STYLE_BOX, "stop_renewal")
        .await
        .unwrap();
    assert_outcome(&c.say_yes_and_apply(&app).await, "applied", None);
    assert_changed_once(&app).await;
}

/// Rasa's `max_event_history` trims the front of the tracker: a window starting at the
/// session start's own metadata slot, or among a new session's carried-over slots, keeps
/// the identity it shows.
#[tokio::test]
async fn a_tracker_trimmed_at_the_sessions_start_keeps_its_identity() {
    let app = spawn_app().await;
    let mut c = asked(&app, "trimmed-start").await;
    c.user("yes", "affirm", &[]);
    let mut request = c.request("apply_subscription_change");
    // [metadata, action_session_start, session_started, metadata, action_listen, ...]:
    // the window starts at the second metadata slot.
    let events = request["tracker"]["events"].as_array_mut().unwrap();
    assert_eq!(events[3]["name"], "session_started_metadata");
    events.drain(..3);
    let (status, body) = app.webhook(&request).await;
    assert_eq!(status, 200, "{body}");
    assert_outcome(&outcome_of(&body), "applied", None);
    assert_changed_once(&app).await;
    // A later session's carried-over slots, the metadata among them, at the window's start.
    let mut c = Chat::new("trimmed-carried", Some("acct-7"));
    c.user("hi", "greet", &[]);
    c.session_start(json!({"account_id": "acct-7"}));
    let mut request = c.request("list_subscriptions");
    let events = request["tracker"]["events"].as_array_mut().unwrap();
    let start = events
        .iter()
        .position(|e| e["event"] == "session_started")
        .unwrap();
    events.drain(..=start);
    events.insert(
        0,
        json!({"event": "slot", "timestamp": 1.0, "name": "change_status", "value": null}),
    );
    let (_, body) = app.webhook(&request).await;
    assert_eq!(
        slot_in(&body, "subscriptions").map(|s| s.is_array()),
        Some(true),
        "{body}"
    );
}

/// The subscription's name is a term (issue 23): written by select alone, and named by
/// the question as memory names it.
#[tokio::test]
async fn the_subscription_as_the_question_names_it_is_bound() {
    let app = spawn_app().await;
    let wine_club = json!("WS-SUB-7001 (Wine Club, quarterly)");
    // A flow's set_slots (or the tracker-events API) right after select's own slot
    // events, with no action between: not select's.
    let mut c = Chat::new("renamed-after-select", Some("acct-7"));
    c.user(
        "please stop_renewal on WS-SUB-3304",
        "request_change",
        &[("subscription", STYLE_BOX), ("change_type", "stop_renewal")],
    );
    c.run(&app, "select_subscription_change").await.unwrap();
    c.slot("change_subscription", wine_club.clone());
    c.ask_confirmation();
    assert!(c.confirmation_text().contains("Wine Club"));
    assert_outcome(
        &c.say_yes_and_apply(&app).await,
        "blocked",
        Some("memory_untrusted"),
    );
    assert_untouched(&app).await;
    // Set by another action before the question, then select runs again before the
    // yes: the memory is select's again, but the question named the Wine Club.
    let mut c = Chat::new("renamed-before-question", Some("acct-7"));
    c.user(
        "please stop_renewal on WS-SUB-3304",
        "request_change",
        &[("subscription", STYLE_BOX), ("change_type", "stop_renewal")],
    );
    c.run(&app, "select_subscription_change").await.unwrap();
    c.action("action_other");
    c.slot("change_subscription", wine_club);
    c.ask_confirmation();
    c.run(&app, "select_subscription_change").await.unwrap();
    assert_outcome(
        &c.say_yes_and_apply(&app).await,
        "blocked",
        Some("question_incomplete"),
    );
    assert_untouched(&app).await;
    // Named as select wrote it: the change is made.
    let mut c = asked(&app, "named").await;
    assert_outcome(&c.say_yes_and_apply(&app).await, "applied", None);
    assert_changed_once(&app).await;
}
