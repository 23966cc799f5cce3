//! The guard's pure steps, `check_conversation` then `compare_facts`, on arbitrary inputs
//! and an arbitrary service record: they approve exactly when every fact matches, and
//! never panic.
//!
//! The generator first draws one consistent "world" (subscription, change type, revision,
//! account, terms) from small pools that hold the valid values, then each fact keeps the
//! world's value with probability 7/8 and is otherwise perturbed, so the approving path is
//! reached often. The share of inputs approved is printed as `guard-stats:` lines.
#![no_main]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use actiongate::consent::{
    check_conversation, compare_facts, ApplyInputs, ConsentConfig, Memory, Template,
};
use actiongate::conversation::{change_memory, Conversation, Given, Meaning, Question, Reply};
use actiongate::subscriptions::model::{change_tag, effective_text};
use actiongate::subscriptions::{ChangeOption, Note, Subscription};
use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

#[path = "../oracles.rs"]
mod oracles;
use oracles::every_fact_matches;

const SUBS: &[&str] = &["WS-SUB-3304", "WS-SUB-9", "", "WS SUB"];
const TYPES: &[&str] = &["stop_renewal", "downgrade", "", "stop_renewal r4"];
const REVISIONS: &[i64] = &[4, 5, 0, -1, i64::MAX, i64::MIN];
const ACCOUNTS: &[&str] = &["acct-1", "acct-2", ""];
const AT: &[&str] = &[
    "2027-01-01T00:00:00Z",
    "2027-01-01T01:30:00+01:00",
    "2027-01-01T00:00:59.999Z",
    "2027-02-30T00:00:00Z",
    "tomorrow",
    "",
    "9999-12-31T23:59:60Z",
];
const EFFECTIVE: &[&str] = &[
    "2027-01-01 00:00 UTC",
    "2027-01-01 00:30 UTC",
    "",
    "2027-01-01",
];
const ENTITLEMENTS: &[&str] = &["boxes ship as usual", "all benefits end", "", "r4", "UTC"];
const LABELS: &[&str] = &["stop the automatic renewal", "downgrade", ""];
const GAPS: &[f64] = &[0.0, 1.0, 599.5, 600.0, -1.0, -5.0];
const BAD_GAPS: &[f64] = &[
    600.000_001,
    601.0,
    -5.000_001,
    -6.0,
    1e9,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
];
const ASKED: f64 = 1_700_000_000.25;

static RUNS: AtomicU64 = AtomicU64::new(0);
static APPROVED: AtomicU64 = AtomicU64::new(0);

/// From the pool mostly; sometimes any string.
fn pick(u: &mut Unstructured, pool: &[&str]) -> Result<String> {
    if u.ratio(1, 16)? {
        u.arbitrary()
    } else {
        Ok((*u.choose(pool)?).to_owned())
    }
}

/// Keep the consistent value (7 times in 8)?
fn keep(u: &mut Unstructured) -> Result<bool> {
    u.ratio(7, 8)
}

fn maybe(u: &mut Unstructured, pool: &[&str]) -> Result<Option<String>> {
    Ok(if u.ratio(1, 4)? {
        None
    } else {
        Some(pick(u, pool)?)
    })
}

fn revision(u: &mut Unstructured) -> Result<i64> {
    if u.ratio(1, 8)? {
        u.arbitrary()
    } else {
        Ok(*u.choose(REVISIONS)?)
    }
}

fn timestamp(u: &mut Unstructured) -> Result<Option<f64>> {
    Ok(match u.int_in_range(0..=4u8)? {
        0 => None,
        1 => Some(f64::NAN),
        2 => Some(f64::NEG_INFINITY),
        3 => Some(f64::INFINITY),
        _ => Some(u.arbitrary()?),
    })
}

struct World {
    subscription: String,
    change_type: String,
    revision: i64,
    account: String,
    effective_at: String,
    effective: String,
    entitlements: String,
    label: String,
}

fn world(u: &mut Unstructured) -> Result<World> {
    let effective_at = pick(u, AT)?;
    let effective = match effective_text(&effective_at) {
        Some(text) => text,
        None => pick(u, EFFECTIVE)?,
    };
    Ok(World {
        subscription: pick(u, SUBS)?,
        change_type: pick(u, TYPES)?,
        revision: revision(u)?,
        account: pick(u, ACCOUNTS)?,
        effective_at,
        effective,
        entitlements: pick(u, ENTITLEMENTS)?,
        label: pick(u, LABELS)?,
    })
}

fn field(u: &mut Unstructured, good: &str, pool: &[&str]) -> Result<Option<String>> {
    if keep(u)? {
        Ok(Some(good.to_owned()))
    } else {
        maybe(u, pool)
    }
}

fn question_text(u: &mut Unstructured, parts: [&str; 4]) -> Result<String> {
    let mut pieces: Vec<String> = Vec::new();
    for part in parts {
        if u.ratio(15, 16)? {
            pieces.push(part.to_owned());
        } else if u.arbitrary()? {
            // Glued to a longer id or revision: `GIFT` + the tag, or the tag + `2`.
            pieces.push(if u.arbitrary()? {
                format!("GIFT{part}")
            } else {
                format!("{part}2")
            });
        } else if u.arbitrary()? {
            // A near miss: the part cut short.
            let cut = part
                .char_indices()
                .nth(part.chars().count() / 2)
                .map_or(0, |(i, _)| i);
            pieces.push(part[..cut].to_owned());
        }
    }
    if u.arbitrary()? {
        pieces.push(u.arbitrary()?);
    }
    if u.arbitrary()? {
        pieces.reverse();
    }
    Ok(pieces.join(if u.arbitrary()? { " " } else { "" }))
}

fn inputs(u: &mut Unstructured, w: &World) -> Result<ApplyInputs> {
    let good_tag = change_tag(&w.subscription, &w.change_type, w.revision);
    let tag = if keep(u)? {
        Some(good_tag.clone())
    } else {
        match u.int_in_range(0..=3u8)? {
            0 => None,
            1 => Some(format!("{good_tag} x")),
            2 => Some(change_tag(&pick(u, SUBS)?, &pick(u, TYPES)?, revision(u)?)),
            _ => Some(u.arbitrary()?),
        }
    };
    let memory = Memory {
        subscription: field(u, &w.subscription, SUBS)?,
        label: field(u, &w.label, LABELS)?,
        effective: field(u, &w.effective, EFFECTIVE)?,
        entitlements: field(u, &w.entitlements, ENTITLEMENTS)?,
        tag,
    };
    let written = [
        &memory.subscription,
        &memory.label,
        &memory.effective,
        &memory.entitlements,
        &memory.tag,
    ];
    let selected_memory = if keep(u)? || keep(u)? {
        let mut map: HashMap<String, Value> = change_memory::ALL
            .iter()
            .zip(written)
            .filter_map(|(name, value)| Some(((*name).to_owned(), Value::from(value.clone()?))))
            .collect();
        if !keep(u)? {
            let name = change_memory::ALL[u.choose_index(change_memory::ALL.len())?].to_owned();
            match u.int_in_range(0..=4u8)? {
                0 => {
                    map.remove(&name);
                }
                1 => {
                    map.insert(name, Value::Null);
                }
                2 => {
                    map.insert(name, Value::from(4));
                }
                3 => {
                    map.insert(name, Value::from(pick(u, SUBS)?));
                }
                _ => {
                    map.insert("subscription".into(), Value::from("WS-SUB-9"));
                }
            }
        }
        Some(map)
    } else {
        None
    };
    let asked = if keep(u)? { Some(ASKED) } else { timestamp(u)? };
    let question = if keep(u)? {
        Some(Question {
            text: question_text(u, [&good_tag, &w.label, &w.effective, &w.entitlements])?,
            timestamp: asked,
            position: u.arbitrary()?,
        })
    } else if u.arbitrary()? {
        Some(Question {
            text: u.arbitrary()?,
            timestamp: asked,
            position: u.arbitrary()?,
        })
    } else {
        None
    };
    let answered = match asked {
        Some(t) if keep(u)? => Some(t + *u.choose(GAPS)?),
        Some(t) if u.arbitrary()? => Some(t + *u.choose(BAD_GAPS)?),
        _ => timestamp(u)?,
    };
    let reply = if keep(u)? {
        let text = pick(u, &["yes", "no", "/affirm", "No, don't do it"])?;
        Some(Reply {
            // As the regression cases read it back: a payload starts with `/`.
            given: if text.starts_with('/') {
                Given::Payload
            } else {
                Given::Typed
            },
            text,
            timestamp: answered,
            message_id: maybe(u, &["m1", "m2"])?,
            meaning: if keep(u)? {
                Meaning::Yes
            } else {
                *u.choose(&[Meaning::No, Meaning::Unclear])?
            },
            after_other_message: maybe(u, &["utter_still_there"])?,
        })
    } else {
        None
    };
    // The confirmation response's text, sometimes: the question itself (so it renders to
    // it), a placeholder for one term, or something else.
    let template = match (u.int_in_range(0..=5u8)?, &question) {
        (0, Some(q)) => Some(Template {
            variations: vec![q.text.replace('{', "{{").replace('}', "}}")],
            values: HashMap::new(),
        }),
        (1, Some(q)) if !w.label.is_empty() && q.text.contains(&w.label) => Some(Template {
            variations: vec![q
                .text
                .replace('{', "{{")
                .replace('}', "}}")
                .replacen(&w.label, "{change_label}", 1)],
            values: HashMap::from([(
                "change_label".to_owned(),
                Value::from(if keep(u)? { w.label.clone() } else { pick(u, LABELS)? }),
            )]),
        }),
        (2, _) => Some(Template {
            variations: vec![u.arbitrary()?],
            values: HashMap::new(),
        }),
        _ => None,
    };
    Ok(ApplyInputs {
        sender_id: pick(u, &["sender-1", "sender-2"])?,
        account: if keep(u)? {
            Some(w.account.clone())
        } else {
            maybe(u, ACCOUNTS)?
        },
        requested_subscription: field(u, &w.subscription, SUBS)?,
        requested_change_type: field(u, &w.change_type, TYPES)?,
        memory,
        conversation: Conversation {
            question,
            reply,
            selected_memory,
        },
        template,
        shows_subscription: u.arbitrary()?,
    })
}

fn option(u: &mut Unstructured, w: &World) -> Result<ChangeOption> {
    Ok(ChangeOption {
        change_type: if keep(u)? {
            w.change_type.clone()
        } else {
            pick(u, TYPES)?
        },
        label: if keep(u)? {
            w.label.clone()
        } else {
            pick(u, LABELS)?
        },
        effective_at: if keep(u)? {
            w.effective_at.clone()
        } else {
            pick(u, AT)?
        },
        entitlements: if keep(u)? {
            w.entitlements.clone()
        } else {
            pick(u, ENTITLEMENTS)?
        },
        // A review mark changes whether a person approves, never what the guard decides
        // about the facts.
        review: u.arbitrary()?,
    })
}

fn record(u: &mut Unstructured, w: &World) -> Result<Subscription> {
    let mut options = Vec::new();
    if keep(u)? {
        options.push(option(u, w)?);
    }
    for _ in 0..u.int_in_range(0..=2u8)? {
        let other = option(u, w)?;
        if u.arbitrary()? {
            options.insert(0, other);
        } else {
            options.push(other);
        }
    }
    let notes = (0..u.int_in_range(0..=2u8)?)
        .map(|_| {
            Ok(Note {
                revision: revision(u)?,
                at: pick(u, AT)?,
                text: pick(u, &["the date moved", "entitlements changed"])?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Subscription {
        id: if keep(u)? {
            w.subscription.clone()
        } else {
            pick(u, SUBS)?
        },
        account: if keep(u)? {
            w.account.clone()
        } else {
            pick(u, ACCOUNTS)?
        },
        product: pick(u, &["Style Box"])?,
        plan: pick(u, &["monthly"])?,
        status: pick(u, &["active", "cancelled"])?,
        revision: if keep(u)? { w.revision } else { revision(u)? },
        options,
        notes,
    })
}

/// A time as JSON: a number, or `"NaN"`, `"inf"`, `"-inf"`, or null.
fn time(t: Option<f64>) -> Value {
    match t {
        None => Value::Null,
        Some(t) if t.is_nan() => "NaN".into(),
        Some(t) if t.is_infinite() => if t > 0.0 { "inf" } else { "-inf" }.into(),
        Some(t) => t.into(),
    }
}

/// The case in the form tests/fuzz_regressions.rs replays.
fn as_json(inputs: &ApplyInputs, record: &Subscription) -> Value {
    let c = &inputs.conversation;
    serde_json::json!({
        "sender_id": inputs.sender_id,
        "account": inputs.account,
        "requested_subscription": inputs.requested_subscription,
        "requested_change_type": inputs.requested_change_type,
        "memory": {
            "subscription": inputs.memory.subscription,
            "label": inputs.memory.label,
            "effective": inputs.memory.effective,
            "entitlements": inputs.memory.entitlements,
            "tag": inputs.memory.tag,
        },
        "question": c.question.as_ref().map(|q| serde_json::json!({
            "text": q.text, "timestamp": time(q.timestamp), "position": q.position,
        })),
        "reply": c.reply.as_ref().map(|r| serde_json::json!({
            "text": r.text, "timestamp": time(r.timestamp), "message_id": r.message_id,
            "meaning": format!("{:?}", r.meaning).to_lowercase(),
            "after_other_message": r.after_other_message,
        })),
        "shows_subscription": inputs.shows_subscription,
        "template": inputs.template.as_ref().map(|t| serde_json::json!({
            "variations": t.variations, "values": t.values,
        })),
        "selected_memory": c.selected_memory,
        "record": record,
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(w) = world(&mut u) else { return };
    let Ok(inputs) = inputs(&mut u, &w) else {
        return;
    };
    let Ok(record) = record(&mut u, &w) else {
        return;
    };
    let config = ConsentConfig::default();

    let approved = match check_conversation(&inputs, &config) {
        Err(_) => false,
        Ok(confirmation) => {
            assert_eq!(Some(&confirmation.account), inputs.account.as_ref());
            assert!(
                compare_facts(&confirmation, None).is_err(),
                "approved without a record"
            );
            compare_facts(&confirmation, Some(&record)).is_ok()
        }
    };
    let expected = every_fact_matches(&inputs, &record);
    assert_eq!(
        approved,
        expected,
        "the guard {} although {}; as tests/fuzz_regressions/guard/ keeps it:\n{}",
        if approved { "approved" } else { "refused" },
        if expected {
            "every fact matches"
        } else {
            "a fact differs"
        },
        serde_json::to_string_pretty(&as_json(&inputs, &record)).unwrap(),
    );

    let runs = RUNS.fetch_add(1, Ordering::Relaxed) + 1;
    let yes = APPROVED.fetch_add(u64::from(approved), Ordering::Relaxed) + u64::from(approved);
    if runs.is_power_of_two() && runs >= 1024 || runs.is_multiple_of(1_000_000) {
        eprintln!(
            "guard-stats: {runs} inputs, {yes} approved ({:.1}%)",
            100.0 * yes as f64 / runs as f64
        );
    }
});
