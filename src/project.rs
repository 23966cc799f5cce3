//! `actiongate check` for the Rasa-side files: the confirmation template carries every
//! term, every response and tool named exists, and no change-memory field is
//! model-settable.

use std::collections::BTreeSet;
use std::path::Path;

use serde_yaml_ng::Value;

use crate::config::ConfigError;
use crate::conversation::CHANGE_MEMORY;

/// The tools (actions) this server serves.
pub const TOOLS: [&str; 4] = [
    "list_subscriptions",
    "select_subscription_change",
    "apply_subscription_change",
    "check_subscription_change",
];

/// The responses the actions dispatch.
pub const DISPATCHED: [&str; 6] = [
    "utter_subscription_change_applied",
    "utter_subscription_change_blocked",
    "utter_subscription_change_denied",
    "utter_subscription_change_pending",
    "utter_subscription_change_failed",
    "utter_list_subscriptions",
];

/// Every placeholder the confirmation question must carry.
pub const CONFIRMATION_TERMS: [&str; 4] = [
    "{change_label}",
    "{change_effective}",
    "{change_entitlements}",
    "{change_tag}",
];

/// Checks the project folder; returns every problem found.
pub fn check(project: &Path, confirm_response: &str) -> Vec<ConfigError> {
    let mut problems = Vec::new();
    let responses = read_responses(&project.join("responses"), &mut problems);
    match responses
        .iter()
        .find(|(name, _, _)| name == confirm_response)
    {
        None => problems.push(ConfigError::new(
            project.join("responses"),
            confirm_response,
            "the confirmation response is not defined",
        )),
        Some((_, texts, file)) => {
            for text in texts {
                for term in CONFIRMATION_TERMS {
                    if !text.contains(term) {
                        problems.push(ConfigError::new(
                            file,
                            format!("responses.{confirm_response}"),
                            format!("a variation lacks {term}: every term the customer agrees to must be in the question"),
                        ));
                    }
                }
            }
        }
    }
    let names: BTreeSet<&str> = responses.iter().map(|(n, _, _)| n.as_str()).collect();
    for name in DISPATCHED {
        if !names.contains(name) {
            problems.push(ConfigError::new(
                project.join("responses"),
                name,
                "dispatched by an action but not defined",
            ));
        }
    }
    let skill = project.join("skills/subscription_change/skill.md");
    if skill.exists() {
        check_skill(&skill, &names, confirm_response, &mut problems);
    }
    let memory = project.join("skills/subscription_change/memory.yml");
    if memory.exists() {
        check_memory(&memory, &mut problems);
    }
    problems
}

/// `(response name, its texts, the file)` from every YAML file under `responses/`.
fn read_responses(
    dir: &Path,
    problems: &mut Vec<ConfigError>,
) -> Vec<(String, Vec<String>, std::path::PathBuf)> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            problems.push(ConfigError::new(dir, "-", format!("cannot be read: {e}")));
            return out;
        }
    };
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yml" | "yaml")))
        .collect();
    files.sort();
    for file in files {
        let doc: Value = match std::fs::read_to_string(&file)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_yaml_ng::from_str(&t).map_err(|e| e.to_string()))
        {
            Ok(doc) => doc,
            Err(e) => {
                problems.push(ConfigError::new(&file, "-", e));
                continue;
            }
        };
        for key in doc.as_mapping().into_iter().flat_map(|m| m.keys()) {
            if !matches!(key.as_str(), Some("version" | "responses")) {
                problems.push(ConfigError::new(
                    &file,
                    format!("{key:?}"),
                    "unknown key (expected version, responses)",
                ));
            }
        }
        let Some(map) = doc.get("responses").and_then(Value::as_mapping) else {
            problems.push(ConfigError::new(
                &file,
                "responses",
                "missing or not a mapping",
            ));
            continue;
        };
        for (name, variations) in map {
            let Some(name) = name.as_str() else { continue };
            let texts = variations
                .as_sequence()
                .into_iter()
                .flatten()
                .filter_map(|v| v.get("text").and_then(Value::as_str).map(str::to_owned))
                .collect::<Vec<_>>();
            if texts.is_empty() {
                problems.push(ConfigError::new(
                    &file,
                    format!("responses.{name}"),
                    "has no text variation",
                ));
            }
            out.push((name.to_owned(), texts, file.clone()));
        }
    }
    out
}

/// The skill's frontmatter: every tool named in a constraint exists, and every response
/// named exists.
fn check_skill(
    path: &Path,
    responses: &BTreeSet<&str>,
    confirm_response: &str,
    problems: &mut Vec<ConfigError>,
) {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => return problems.push(ConfigError::new(path, "-", e.to_string())),
    };
    let Some(front) = text
        .strip_prefix("---\n")
        .and_then(|rest| rest.split_once("\n---").map(|(front, _)| front))
    else {
        return problems.push(ConfigError::new(
            path,
            "-",
            "no YAML frontmatter between --- lines",
        ));
    };
    let doc: Value = match serde_yaml_ng::from_str(front) {
        Ok(doc) => doc,
        Err(e) => return problems.push(crate::config::yaml_error(path, &e)),
    };
    let constraints = doc.get("tool_constraints").and_then(Value::as_sequence);
    let Some(constraints) = constraints else {
        return problems.push(ConfigError::new(path, "tool_constraints", "missing"));
    };
    let mut apply_confirmed = false;
    for constraint in constraints {
        for (tool, rules) in constraint.as_mapping().into_iter().flatten() {
            let tool = tool.as_str().unwrap_or_default();
            if !TOOLS.contains(&tool) {
                problems.push(ConfigError::new(
                    path,
                    format!("tool_constraints.{tool}"),
                    "no such tool",
                ));
            }
            for (key, _) in rules.as_mapping().into_iter().flatten() {
                if !matches!(key.as_str(), Some("requires" | "requires_confirmation")) {
                    problems.push(ConfigError::new(
                        path,
                        format!("tool_constraints.{tool}.{}", key.as_str().unwrap_or("?")),
                        "unknown key (expected requires, requires_confirmation)",
                    ));
                }
            }
            if let Some(confirmation) = rules.get("requires_confirmation") {
                for (key, _) in confirmation.as_mapping().into_iter().flatten() {
                    if !matches!(key.as_str(), Some("enabled" | "utter_for_confirmation")) {
                        problems.push(ConfigError::new(
                            path,
                            format!(
                                "tool_constraints.{tool}.requires_confirmation.{}",
                                key.as_str().unwrap_or("?")
                            ),
                            "unknown key (expected enabled, utter_for_confirmation)",
                        ));
                    }
                }
                if let Some(utter) = confirmation
                    .get("utter_for_confirmation")
                    .and_then(Value::as_str)
                {
                    if !responses.contains(utter) {
                        problems.push(ConfigError::new(
                            path,
                            format!("tool_constraints.{tool}.requires_confirmation.utter_for_confirmation"),
                            format!("response {utter} is not defined in responses/"),
                        ));
                    }
                    if tool == "apply_subscription_change"
                        && utter == confirm_response
                        && confirmation.get("enabled").and_then(Value::as_bool) == Some(true)
                    {
                        apply_confirmed = true;
                    }
                }
            }
        }
    }
    if !apply_confirmed {
        problems.push(ConfigError::new(
            path,
            "tool_constraints.apply_subscription_change",
            format!("must require confirmation with {confirm_response}"),
        ));
    }
}

/// No change-memory field may be settable by the model.
fn check_memory(path: &Path, problems: &mut Vec<ConfigError>) {
    let doc: Value = match std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_yaml_ng::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(doc) => doc,
        Err(e) => return problems.push(ConfigError::new(path, "-", e)),
    };
    let mut seen = BTreeSet::new();
    visit_fields(&doc, "", &mut |key, field| {
        if let Some(name) = CHANGE_MEMORY
            .iter()
            .find(|f| key.ends_with(&format!(".{f}")) || key == **f)
        {
            seen.insert(*name);
            if field.get("llm_settable").and_then(Value::as_bool) == Some(true) {
                problems.push(ConfigError::new(
                    path,
                    key,
                    "change memory must never be llm_settable",
                ));
            }
        }
    });
    for name in CHANGE_MEMORY {
        if !seen.contains(name) {
            problems.push(ConfigError::new(
                path,
                name,
                "change-memory field is not declared",
            ));
        }
    }
}

fn visit_fields(value: &Value, prefix: &str, f: &mut impl FnMut(&str, &Value)) {
    if let Some(map) = value.as_mapping() {
        for (key, child) in map {
            let key = key.as_str().unwrap_or_default();
            let path = if prefix.is_empty() {
                key.to_owned()
            } else {
                format!("{prefix}.{key}")
            };
            if child.is_mapping() {
                f(&path, child);
                visit_fields(child, &path, f);
            }
        }
    }
}
