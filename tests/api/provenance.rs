//! Where the terms come from. The model (or NLU) may set only `subscription` and
//! `change_type`; every date, entitlement and revision must come from the change memory,
//! which only `select_subscription_change` writes and the guard checks against the
//! conversation's events. Two checks keep it so: every action, run against a conversation
//! whose every other slot (the domain's and names that look like terms) holds a planted
//! value, answers exactly as without them, and the service's record ends the same (a
//! behavioural check: however a slot is read, a read that matters shows); and a scan of
//! the actions' and the guard's source names the slots they read, so a new read (say, a
//! model-settable `effective_date`) cannot slip in unreviewed: a read whose name it cannot
//! see (`get_raw(name)`, `slots.iter()`) fails unless it is reviewed, with its reason.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{json, Value};

use common::{spawn_app, Chat, TestApp, STYLE_BOX};

/// Slots the actions may read, and why.
const ALLOWED: [&str; 8] = [
    "subscription", // which subscription (model-settable; an identifier, compared with the tag)
    "change_type",  // which change (model-settable; compared with the tag)
    "session_started_metadata", // the authenticated account (channel metadata, not model-settable)
    "change_subscription", // change memory: written by select only, checked against events
    "change_label",
    "change_effective",
    "change_entitlements",
    "change_tag",
];

/// Calls that read a slot by name: the SDK's accessors, and the guard's own reader `text`
/// (src/consent/inputs.rs), whose definition is reviewed below.
const READS: [&str; 5] = ["get_str(", "get_slot(", "slots.get(", "get_raw(", "text("];

/// Reads whose name is not written at the call, each reviewed: the file, the call, why.
const REVIEWED: [(&str, &str, &str); 2] = [
    (
        "src/consent/inputs.rs",
        "get_str(name)",
        "the definition of `text`, whose every call is scanned",
    ),
    (
        "src/consent/inputs.rs",
        "get_raw(name)",
        "the confirmation template's placeholders, to re-render the question as Rasa sent it \
         when the tracker's front was trimmed; compared with the question's text, never a term",
    ),
];

/// Slot accessors that read no name at all: any use in the actions or the guard fails.
const UNNAMED: [&str; 3] = ["slots.iter(", "slots.0", "slots_to_validate("];

/// The slot names read in `source` (the file `path`): string literals, the change memory's
/// named constants (`change_memory::TAG`, resolved through `memory`, src/conversation.rs),
/// and constants the file declares. A read whose name is none of these must be in
/// [`REVIEWED`]; otherwise the scan cannot say what it reads, and that is a failure.
fn slot_reads(path: &str, source: &str, memory: &str) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    for unnamed in UNNAMED {
        if source.contains(unnamed) {
            return Err(format!(
                "{path} reads slots without naming them (`{unnamed}`)"
            ));
        }
    }
    for call in READS {
        let mut offset = 0;
        while let Some(i) = source[offset..].find(call) {
            let at = offset + i;
            offset = at + call.len();
            // `text(` only as its own name, not the end of another (`effective_text(`).
            let before = source[..at].chars().next_back();
            if call == "text(" && before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &source[offset..];
            let argument = &rest[..rest.find(')').unwrap_or(rest.len())];
            if let Some(literal) = argument.strip_prefix('"') {
                found.push(literal.trim_end_matches('"').to_owned());
            } else if let Some(named) = argument.strip_prefix("change_memory::") {
                found.push(memory_slot(memory, named));
            } else if !argument.is_empty()
                && argument.chars().all(|c| c.is_ascii_uppercase() || c == '_')
            {
                found.push(file_const(source, argument).ok_or_else(|| {
                    format!(
                        "{path}: `{call}{argument})` names a constant the file does not declare"
                    )
                })?);
            } else if !REVIEWED.iter().any(|(file, reviewed, _)| {
                path == *file && format!("{call}{argument})") == *reviewed
            }) {
                return Err(format!(
                    "{path}: `{call}{argument})` reads a slot the scan cannot name; read it by a \
                     literal or a named constant, or review it in REVIEWED"
                ));
            }
        }
    }
    Ok(found)
}

/// The value of `pub const NAME: &str = "...";` in src/conversation.rs.
fn memory_slot(memory: &str, name: &str) -> String {
    file_const(memory, name).unwrap_or_else(|| panic!("change_memory::{name} is declared"))
}

/// The value of a `const NAME: &str = "...";` declared in `source`.
fn file_const(source: &str, name: &str) -> Option<String> {
    let declaration = format!("const {name}: &str = \"");
    let start = source.find(&declaration)? + declaration.len();
    Some(source[start..start + source[start..].find('"')?].to_owned())
}

/// The Rust files under `dir`, however deep.
fn rust_files(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn actions_read_terms_only_from_the_change_memory() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let memory = std::fs::read_to_string(root.join("src/conversation.rs")).unwrap();
    let mut read = BTreeSet::new();
    let mut files = Vec::new();
    for dir in ["src/actions", "src/consent"] {
        rust_files(&root.join(dir), &mut files);
    }
    for path in files {
        let source = std::fs::read_to_string(&path).unwrap();
        let relative = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for slot in slot_reads(&relative, &source, &memory).unwrap_or_else(|e| panic!("{e}")) {
            assert!(
                ALLOWED.contains(&slot.as_str()),
                "{relative} reads the slot `{slot}`, which is not in the reviewed list"
            );
            read.insert(slot);
        }
    }
    // Every reviewed read is still there (a review of code that is gone reviews nothing).
    for (file, call, _) in REVIEWED {
        let source = std::fs::read_to_string(root.join(file)).unwrap();
        assert!(source.contains(call), "{file} no longer has `{call}`");
    }
    // The scan sees the reads it must see (so it is not vacuous).
    assert!(
        read.contains("subscription")
            && read.contains("change_type")
            && read.contains("change_tag")
            && read.contains("session_started_metadata"),
        "{read:?}"
    );
    let conversation = std::fs::read_to_string(root.join("src/conversation.rs")).unwrap();
    for field in &ALLOWED[3..] {
        assert!(
            conversation.contains(&format!("\"{field}\"")),
            "the change memory lists {field}"
        );
    }
}

#[test]
fn the_scan_refuses_a_read_it_cannot_name() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let memory = std::fs::read_to_string(root.join("src/conversation.rs")).unwrap();
    let scan = |source: &str| slot_reads("src/actions/new.rs", source, &memory);
    // A name the scan cannot see, or no name at all: refused, not passed over.
    assert!(scan("let v = tracker.slots.get_raw(name);").is_err());
    assert!(scan("let v = tracker.get_slot(&format!(\"change_{x}\"));").is_err());
    assert!(scan("for (k, v) in tracker.slots.iter() {}").is_err());
    assert!(scan("tracker.get_slot(MISSING)").is_err());
    // The reviewed read is reviewed in its own file only.
    assert!(slot_reads("src/consent/inputs.rs", "slots.get_raw(name)", &memory).is_ok());
    // Names it can see, by literal, the change memory's constants and the file's own.
    let mut seen = scan(
        "const SLOT: &str = \"price\"; tracker.get_slot(SLOT); tracker.slots.get_str(\"a\"); \
         text(change_memory::TAG); effective_text(&x)",
    )
    .unwrap();
    seen.sort();
    assert_eq!(seen, ["a", "change_tag", "price"]);
}

#[test]
fn the_model_settable_slots_are_only_the_target() {
    // The Rasa domain maps every change-memory slot as `custom` (never from the model or
    // entities); only the target slots come from entities.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let domain: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(root.join("assistant/domain/subscription.yml")).unwrap(),
    )
    .unwrap();
    let slots = domain["slots"].as_mapping().unwrap();
    for (name, slot) in slots {
        let name = name.as_str().unwrap();
        let mappings: Vec<&str> = slot["mappings"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|m| m["type"].as_str().unwrap())
            .collect();
        if name == "subscription" || name == "change_type" {
            continue;
        }
        assert!(
            mappings.iter().all(|m| *m == "custom"),
            "slot {name} is filled by {mappings:?}"
        );
    }
}

/// Slots a conversation may hold that no action may read: the domain's other slots, and
/// names a careless action might take terms from.
fn planted() -> Vec<(String, Value)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let domain: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(root.join("assistant/domain/subscription.yml")).unwrap(),
    )
    .unwrap();
    let mut names: Vec<String> = domain["slots"]
        .as_mapping()
        .unwrap()
        .keys()
        .filter_map(|k| k.as_str().map(str::to_owned))
        .filter(|name| !ALLOWED.contains(&name.as_str()))
        .collect();
    assert!(
        !names.is_empty(),
        "the domain has slots beyond the allowed ones"
    );
    for name in [
        "effective_date",
        "effective_at",
        "price",
        "amount",
        "revision",
        "change_revision",
        "label",
        "entitlements",
        "account",
        "account_id",
        "subscription_id",
        "change_id",
        "requested_slot",
        "confirmed",
        "confirmation",
        "change_confirmed",
        "tag",
    ] {
        names.push(name.to_owned());
    }
    names
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let value = match i % 4 {
                0 => json!("WS-SUB-9999 stop_renewal r99"),
                1 => json!("2099-12-31 00:00 UTC"),
                2 => json!(true),
                _ => json!(["acct-1", 99]),
            };
            (name, value)
        })
        .collect()
}

/// `body` with `plant` set on its tracker: the slots' values, and a `slot` event each
/// at the end, as Rasa records slots NLU or a rule set just before the action.
fn with_planted(mut body: Value, plant: &[(String, Value)]) -> Value {
    let t = body["tracker"]["latest_event_time"]
        .as_f64()
        .unwrap_or_default();
    for (name, value) in plant {
        body["tracker"]["slots"][name] = value.clone();
        body["tracker"]["events"]
            .as_array_mut()
            .unwrap()
            .push(json!({"event": "slot", "timestamp": t, "name": name, "value": value}));
    }
    body
}

/// The same conversation against two servers, one with `plant` in every call: each
/// answer of the second, and the second service's record of the Style Box afterwards.
/// Whether every answer and the record were the same.
async fn same_with_planted(plant: &[(String, Value)]) -> (bool, Vec<String>) {
    let (clean, planted) = (spawn_app().await, spawn_app().await);
    let mut differences = Vec::new();
    let mut c = Chat::new("provenance", Some("acct-7"));
    let mut call = async |c: &mut Chat, action: &str| {
        let body = c.request(action);
        let a = clean.webhook(&body).await;
        let b = planted.webhook(&with_planted(body, plant)).await;
        if a != b {
            differences.push(format!("{action}: {a:?} / {b:?}"));
        }
        if a.0 == 200 {
            c.record(action, &a.1);
        }
    };
    c.user("what do I have", "list_subscriptions", &[]);
    call(&mut c, "list_subscriptions").await;
    c.user(
        "stop renewing the style box",
        "request_change",
        &[("subscription", STYLE_BOX), ("change_type", "stop_renewal")],
    );
    call(&mut c, "select_subscription_change").await;
    c.ask_confirmation();
    c.user("yes", "affirm", &[]);
    call(&mut c, "apply_subscription_change").await;
    call(&mut c, "check_subscription_change").await;
    call(&mut c, "withdraw_subscription_change").await;
    let records = |app: &TestApp| {
        let service = app.service.clone();
        async move { service.record(STYLE_BOX).await }
    };
    // When a note was written is the two services' own clocks; the rest must agree.
    let unclocked = |mut record: Value| {
        for note in record["notes"].as_array_mut().into_iter().flatten() {
            note["at"] = Value::Null;
        }
        record
    };
    let (a, b) = (
        unclocked(records(&clean).await),
        unclocked(records(&planted).await),
    );
    assert_eq!(a["status"], "ending", "the change was made: {a}");
    if a != b {
        differences.push(format!("the record: {a} / {b}"));
    }
    clean.stop().await;
    planted.stop().await;
    (differences.is_empty(), differences)
}

#[tokio::test]
async fn slots_outside_the_list_change_nothing_an_action_answers_or_does() {
    let (same, differences) = same_with_planted(&planted()).await;
    assert!(same, "{differences:#?}");
    // Not vacuous: the same harness sees a slot that is read. A planted date in the change
    // memory is caught by the guard (memory not written by select), so the answers differ.
    let (same, differences) =
        same_with_planted(&[("change_effective".to_owned(), json!("2099-12-31 00:00 UTC"))]).await;
    assert!(!same, "a read slot must show");
    assert!(
        differences
            .iter()
            .any(|d| d.starts_with("apply_subscription_change")),
        "{differences:#?}"
    );
}
