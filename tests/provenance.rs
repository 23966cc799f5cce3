//! Where the terms come from. The model (or NLU) may set only `subscription` and
//! `change_type`; every date, entitlement and revision must come from the change memory,
//! which only `select_subscription_change` writes and the guard checks against the
//! conversation's events. This test reads the actions' and the guard's source and fails
//! when any of them reads a slot outside that list, so a new slot read (say, a
//! model-settable `effective_date`) cannot slip in unreviewed.

use std::collections::BTreeSet;
use std::path::Path;

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

/// The slot names read in `source`: string literals, and the change memory's named
/// constants (`change_memory::TAG`), resolved through `memory` (src/conversation.rs).
fn slot_reads(source: &str, memory: &str) -> Vec<String> {
    let mut found = Vec::new();
    for call in ["get_str(", "get_slot(", "slots.get(", "text("] {
        let mut rest = source;
        while let Some(i) = rest.find(call) {
            rest = &rest[i + call.len()..];
            if let Some(literal) = rest.strip_prefix('"') {
                if let Some(end) = literal.find('"') {
                    found.push(literal[..end].to_owned());
                }
            } else if let Some(named) = rest.strip_prefix("change_memory::") {
                let end = named
                    .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
                    .unwrap_or(named.len());
                found.push(memory_slot(memory, &named[..end]));
            }
        }
    }
    found
}

/// The value of `pub const NAME: &str = "...";` in src/conversation.rs.
fn memory_slot(memory: &str, name: &str) -> String {
    let declaration = format!("pub const {name}: &str = \"");
    let start = memory
        .find(&declaration)
        .unwrap_or_else(|| panic!("change_memory::{name} is declared"))
        + declaration.len();
    memory[start..start + memory[start..].find('"').unwrap()].to_owned()
}

#[test]
fn actions_read_terms_only_from_the_change_memory() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let memory = std::fs::read_to_string(root.join("src/conversation.rs")).unwrap();
    let mut read = BTreeSet::new();
    for dir in ["src/actions", "src/consent"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let source = std::fs::read_to_string(&path).unwrap();
            for slot in slot_reads(&source, &memory) {
                assert!(
                    ALLOWED.contains(&slot.as_str()),
                    "{} reads the slot `{slot}`, which is not in the reviewed list",
                    path.display()
                );
                read.insert(slot);
            }
        }
    }
    // The scan sees the reads it must see (so it is not vacuous).
    assert!(
        read.contains("subscription")
            && read.contains("change_type")
            && read.contains("change_tag"),
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
