//! One turn's events (after the latest `user` event) checked against a test case's steps.

use super::*;

/// A bot or slot event of a turn, as read from the tracker.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    Bot {
        utter_action: Option<String>,
        text: Option<String>,
    },
    Slot {
        name: String,
        value: Value,
    },
}

impl TurnEvent {
    pub(super) fn describe(&self) -> String {
        match self {
            TurnEvent::Bot { utter_action, text } => format!(
                "bot   {}  {}",
                utter_action.as_deref().unwrap_or("(no utter_action)"),
                text.as_deref()
                    .map(|t| compact(&Value::String(t.to_owned())))
                    .unwrap_or_else(|| "(no text)".to_owned())
            ),
            TurnEvent::Slot { name, value } => format!("slot  {name} = {}", compact(value)),
        }
    }
}

/// The bot and slot events after the latest `user` event of a tracker's event list (all
/// of them when there is no `user` event yet).
pub fn latest_turn(events: &[Value]) -> Vec<TurnEvent> {
    let start = events
        .iter()
        .rposition(|e| e.get("event").and_then(Value::as_str) == Some("user"))
        .map(|i| i + 1)
        .unwrap_or(0);
    events[start..].iter().filter_map(turn_event).collect()
}

pub(super) fn turn_event(event: &Value) -> Option<TurnEvent> {
    match event.get("event").and_then(Value::as_str)? {
        "bot" => Some(TurnEvent::Bot {
            utter_action: event
                .get("metadata")
                .and_then(|m| m.get("utter_action"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            text: event.get("text").and_then(Value::as_str).map(str::to_owned),
        }),
        "slot" => Some(TurnEvent::Slot {
            name: event.get("name").and_then(Value::as_str)?.to_owned(),
            value: event.get("value").cloned().unwrap_or(Value::Null),
        }),
        _ => None,
    }
}

/// The result of checking one expected step against a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct StepMatch {
    pub step: String,
    pub ok: bool,
}

/// Checks the expected steps of one turn against its events.
pub fn match_turn(expected: &[&Step], turn: &[TurnEvent]) -> Vec<StepMatch> {
    let mut bot_cursor = 0usize;
    let mut checks = Vec::new();
    for step in expected {
        let ok = match step {
            Step::Bot(_) | Step::Utter(_) => {
                let found = (bot_cursor..turn.len()).find(|&i| match (&turn[i], step) {
                    (TurnEvent::Bot { text, .. }, Step::Bot(want)) => {
                        text.as_deref().map(str::trim) == Some(want.trim())
                    }
                    (TurnEvent::Bot { utter_action, .. }, Step::Utter(want)) => {
                        utter_action.as_deref() == Some(want.as_str())
                    }
                    _ => false,
                });
                match found {
                    Some(i) => {
                        bot_cursor = i;
                        true
                    }
                    None => false,
                }
            }
            Step::SlotWasSet { name, value } => {
                turn.iter().any(|event| slot_matches(event, name, value))
            }
            Step::SlotWasNotSet { name, value } => {
                !turn.iter().any(|event| slot_matches(event, name, value))
            }
            Step::User { .. } => true,
        };
        checks.push(StepMatch {
            step: step.describe(),
            ok,
        });
    }
    checks
}

pub(super) fn slot_matches(event: &TurnEvent, want_name: &str, want_value: &Option<Value>) -> bool {
    match event {
        TurnEvent::Slot { name, value } => {
            name == want_name && want_value.as_ref().is_none_or(|want| value_eq(want, value))
        }
        TurnEvent::Bot { .. } => false,
    }
}

/// JSON equality, except that numbers compare by value (`5` equals `5.0`).
pub(super) fn value_eq(want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::Number(a), Value::Number(b)) => a == b || a.as_f64() == b.as_f64(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| value_eq(x, y))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, x)| b.get(k).is_some_and(|y| value_eq(x, y)))
        }
        _ => want == got,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot(utter: &str, text: &str) -> TurnEvent {
        TurnEvent::Bot {
            utter_action: Some(utter.to_owned()),
            text: Some(text.to_owned()),
        }
    }

    fn slot(name: &str, value: Value) -> TurnEvent {
        TurnEvent::Slot {
            name: name.to_owned(),
            value,
        }
    }

    #[test]
    fn latest_turn_takes_events_after_the_last_user_event() {
        let events = vec![
            json!({"event": "bot", "text": "old", "metadata": {"utter_action": "utter_old"}}),
            json!({"event": "user", "text": "yes"}),
            json!({"event": "action", "name": "apply_subscription_change"}),
            json!({"event": "bot", "text": "Done", "metadata": {"utter_action": "utter_subscription_change_applied"}}),
            json!({"event": "slot", "name": "change_status", "value": "applied"}),
            json!({"event": "action", "name": "action_listen"}),
        ];
        assert_eq!(
            latest_turn(&events),
            vec![
                bot("utter_subscription_change_applied", "Done"),
                slot("change_status", json!("applied")),
            ]
        );
        let bare = vec![json!({"event": "bot", "text": "hi", "metadata": {}})];
        assert_eq!(
            latest_turn(&bare),
            vec![TurnEvent::Bot {
                utter_action: None,
                text: Some("hi".into())
            }]
        );
    }

    #[test]
    fn checks_bot_steps_in_order_and_slot_steps_in_any_order() {
        let turn = vec![
            bot(
                "utter_subscription_change_blocked",
                "I have not changed anything.",
            ),
            slot("change_status", json!("blocked")),
            slot("change_reason", json!("benefit_loss_hidden")),
            bot("utter_confirm_subscription_change", "Please confirm"),
        ];
        let steps = [
            Step::SlotWasSet {
                name: "change_reason".into(),
                value: Some(json!("benefit_loss_hidden")),
            },
            Step::Utter("utter_subscription_change_blocked".into()),
            Step::SlotWasSet {
                name: "change_status".into(),
                value: None,
            },
            Step::Bot("Please confirm".into()),
            Step::SlotWasNotSet {
                name: "change_status".into(),
                value: Some(json!("applied")),
            },
        ];
        let refs: Vec<&Step> = steps.iter().collect();
        assert!(match_turn(&refs, &turn).iter().all(|c| c.ok));

        // bot steps out of order fail
        let steps = [
            Step::Utter("utter_confirm_subscription_change".into()),
            Step::Utter("utter_subscription_change_blocked".into()),
        ];
        let refs: Vec<&Step> = steps.iter().collect();
        let checks = match_turn(&refs, &turn);
        assert!(checks[0].ok);
        assert!(!checks[1].ok);

        // an utter step and a bot step may both match the same message
        let steps = [
            Step::Utter("utter_confirm_subscription_change".into()),
            Step::Bot("Please confirm".into()),
        ];
        let refs: Vec<&Step> = steps.iter().collect();
        assert!(match_turn(&refs, &turn).iter().all(|c| c.ok));

        // wrong value, and a slot that was set
        let steps = [
            Step::SlotWasSet {
                name: "change_reason".into(),
                value: Some(json!("rate_limited")),
            },
            Step::SlotWasNotSet {
                name: "change_status".into(),
                value: None,
            },
        ];
        let refs: Vec<&Step> = steps.iter().collect();
        assert!(match_turn(&refs, &turn).iter().all(|c| !c.ok));
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(value_eq(&json!(5), &json!(5.0)));
        assert!(value_eq(&json!({"a": [1]}), &json!({"a": [1.0]})));
        assert!(!value_eq(&json!("5"), &json!(5)));
    }
}
