//! `conversation::read` over the session of a tracker built from fuzz input: it never
//! panics, and what it reports points at events that are really there.
//!
//! Byte 0 picks the form: even, the rest of the input is the tracker's `events` array as
//! is; odd, the rest drives a generator of user/bot/action/slot/restart/rewind/undo/
//! session_started events (and a few others: Mantle's `tool_executed`, CALM's confirm slot,
//! Rasa's external messages) with texts, intents, names, values and timestamps drawn
//! mostly from the ones the reader looks for. It is checked with and without a confirm
//! slot (oracles.rs `check_reader`).
#![no_main]

use actionserver::Tracker;
use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

#[path = "../oracles.rs"]
mod oracles;
use oracles::check_reader;

const CONFIRM: &str = "utter_confirm_subscription_change";
const SELECT: &str = "select_subscription_change";

const KINDS: &[&str] = &[
    "user",
    "bot",
    "action",
    "slot",
    "restart",
    "rewind",
    "undo",
    "session_started",
    "user",
    "bot",
    "action",
    "slot",
    "active_loop",
    "flow_started",
    "action_execution_rejected",
    "tool_executed",
    "user",
];
const TEXTS: &[&str] = &[
    "yes",
    "/affirm",
    "/restart",
    "",
    "Stop the renewal of WS-SUB-3304 stop_renewal r4 from 2027-01-01 00:00 UTC? Boxes ship.",
    "no",
    "ok thanks",
    "EXTERNAL: affirm",
    "/SetSlots(confirm_change=true)",
    "/deny",
];
const INTENTS: &[&str] = &["affirm", "deny", "affirm", "inform", ""];
const NAMES: &[&str] = &[
    SELECT,
    SELECT,
    "action_listen",
    "apply_subscription_change",
    CONFIRM,
    "change_subscription",
    "change_label",
    "change_effective",
    "change_entitlements",
    "change_tag",
    "subscription",
    "confirm_change",
    "confirm_change",
];
const UTTER: &[&str] = &[CONFIRM, CONFIRM, "utter_greet", ""];

fn pick<'a>(u: &mut Unstructured<'a>, pool: &[&'a str]) -> Result<String> {
    // Mostly from the pool; sometimes anything.
    if u.ratio(1, 8)? {
        Ok(u.arbitrary::<String>()?)
    } else {
        Ok((*u.choose(pool)?).to_owned())
    }
}

fn string(s: &str) -> String {
    Value::from(s).to_string()
}

/// A JSON number as Rasa (or an attacker) might write it.
fn number(u: &mut Unstructured) -> Result<String> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 => "1700000000.5".into(),
        1 => "1700000600.5".into(),
        2 => "0".into(),
        3 => "-1e308".into(),
        4 => "1e400".into(),
        5 => "1700000000".into(),
        _ => {
            let f: f64 = u.arbitrary()?;
            if f.is_finite() {
                format!("{f:?}")
            } else {
                "null".into()
            }
        }
    })
}

fn value(u: &mut Unstructured, depth: u8) -> Result<String> {
    Ok(match u.int_in_range(0..=6u8)? {
        0 | 1 => string(&pick(
            u,
            &["WS-SUB-3304 stop_renewal r4", "WS-SUB-3304", "x"],
        )?),
        2 => "null".into(),
        3 => number(u)?,
        4 => "true".into(),
        5 if depth == 0 && u.arbitrary()? => "false".into(),
        5 if depth < 3 => format!("[{}]", value(u, depth + 1)?),
        _ if depth < 3 => format!("{{\"k\":{}}}", value(u, depth + 1)?),
        _ => "{}".into(),
    })
}

/// One event as JSON text, and whether it is one the tracker must accept.
fn event(u: &mut Unstructured) -> Result<(String, bool)> {
    let kind = pick(u, KINDS)?;
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut valid = true;
    let escaped = u.ratio(1, 16)?;
    fields.push((
        "event".into(),
        if escaped && !kind.is_empty() {
            // The same name with its first character escaped: the slow path.
            let mut chars = kind.chars();
            let first = chars.next().unwrap() as u32;
            if first <= 0xffff {
                // `string` gives `"rest"`: its opening quote is replaced.
                format!("\"\\u{first:04x}{}", &string(chars.as_str())[1..])
            } else {
                string(&kind)
            }
        } else {
            string(&kind)
        },
    ));
    valid &= !kind.is_empty();
    match u.int_in_range(0..=7u8)? {
        0 => {}
        1 => fields.push(("timestamp".into(), "null".into())),
        2 => {
            fields.push(("timestamp".into(), "\"soon\"".into()));
            valid = false;
        }
        _ => {
            let n = number(u)?;
            valid &= n != "1e400";
            fields.push(("timestamp".into(), n));
        }
    }
    match kind.as_str() {
        "user" => {
            fields.push(("text".into(), string(&pick(u, TEXTS)?)));
            if u.arbitrary()? {
                fields.push(("message_id".into(), string(&pick(u, &["m1", "m2"])?)));
            }
            if u.arbitrary()? {
                fields.push((
                    "input_channel".into(),
                    string(&pick(u, &["rest", "socketio"])?),
                ));
            }
            if u.ratio(3, 4)? {
                let external = if u.ratio(1, 8)? {
                    ",\"metadata\":{\"is_external\":true}"
                } else {
                    ""
                };
                fields.push((
                    "parse_data".into(),
                    format!(
                        "{{\"intent\":{{\"name\":{}}}{external}}}",
                        string(&pick(u, INTENTS)?)
                    ),
                ));
            }
            // The customer's own metadata: anything at all, never read as the question.
            match u.int_in_range(0..=5u8)? {
                0 => fields.push(("metadata".into(), "{\"is_external\":true}".into())),
                1 => fields.push(("metadata".into(), "{\"utter_action\":5}".into())),
                2 => fields.push(("metadata".into(), value(u, 0)?)),
                _ => {}
            }
        }
        "bot" => {
            fields.push(("text".into(), string(&pick(u, TEXTS)?)));
            match u.int_in_range(0..=5u8)? {
                0 => {}
                1 => fields.push(("metadata".into(), "null".into())),
                2 => fields.push(("metadata".into(), "[1]".into())),
                3 => fields.push(("metadata".into(), format!("[{}]", string(CONFIRM)))),
                _ => fields.push((
                    "metadata".into(),
                    format!("{{\"utter_action\":{}}}", string(&pick(u, UTTER)?)),
                )),
            }
        }
        "slot" => {
            fields.push(("name".into(), string(&pick(u, NAMES)?)));
            fields.push(("value".into(), value(u, 0)?));
        }
        "tool_executed" => {
            fields.push((
                "tool_name".into(),
                string(&pick(
                    u,
                    &["resolve_tool_confirmation", "apply_subscription_change"],
                )?),
            ));
            fields.push((
                "arguments".into(),
                format!("{{\"confirmed\":{}}}", value(u, 0)?),
            ));
        }
        _ => {
            if u.arbitrary()? {
                fields.push(("name".into(), string(&pick(u, NAMES)?)));
            }
        }
    }
    // Now and then: a field of the wrong type, a duplicate key, or another key order.
    match u.int_in_range(0..=15u8)? {
        0 => {
            let key = pick(u, &["text", "name", "message_id", "metadata", "value"])?;
            // A second `event` or `timestamp` is refused, rightly.
            valid &= key != "event" && key != "timestamp";
            fields.push((key, "17".into()));
        }
        1 => {
            let i = u.choose_index(fields.len())?;
            let dup = fields[i].clone();
            fields.push(dup);
            // Refused or not depending on the path that reads it.
            valid = false;
        }
        2 => fields.rotate_left(1),
        3 => fields.reverse(),
        _ => {}
    }
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{v}", string(k)))
        .collect();
    Ok((format!("{{{}}}", body.join(",")), valid))
}

fn generated(data: &[u8]) -> Result<(Vec<u8>, bool)> {
    let mut u = Unstructured::new(data);
    let mut events = Vec::new();
    let mut valid = true;
    u.arbitrary_loop(None, Some(64), |u| {
        let (e, ok) = event(u)?;
        events.push(e);
        valid &= ok;
        Ok(std::ops::ControlFlow::Continue(()))
    })?;
    Ok((format!("[{}]", events.join(",")).into_bytes(), valid))
}

fuzz_target!(|data: &[u8]| {
    let Some((&form, rest)) = data.split_first() else {
        return;
    };
    let (events, must_parse) = if form & 1 == 0 {
        (rest.to_vec(), false)
    } else {
        match generated(rest) {
            Ok(made) => made,
            Err(_) => return,
        }
    };
    let mut json = b"{\"sender_id\":\"fuzz\",\"events\":".to_vec();
    json.extend_from_slice(&events);
    json.push(b'}');
    let tracker: Tracker = match serde_json::from_slice(&json) {
        Ok(t) => t,
        Err(e) if must_parse => panic!(
            "a well-formed tracker was refused: {e}\n{}",
            String::from_utf8_lossy(&json)
        ),
        Err(_) => return,
    };
    check_reader(&tracker, &events);
});
