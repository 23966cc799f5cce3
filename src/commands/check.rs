//! `actiongate check` (over 400 lines: one check after another over the Rasa-side files, each short, kept in the order they report).
//!
//! `actiongate check`: the settings validated, and a lint of the Rasa-side files: the confirmation template carries every
//! term, every response and tool named exists, no change-memory field is model-settable,
//! and the signal the reply's yes or no is read from (CONTRACT.md section 3) exists in the
//! domain: the affirm and deny intents, or the confirm slot.

use std::collections::BTreeSet;
use std::path::Path;

use serde_yaml_ng::Value;

use crate::config::ConfigError;
use crate::conversation::{change_memory, Signals};

/// Prints `report`: problems on standard error, notes on standard output; exit code 1 when
/// there is a problem.
pub fn report(report: &Report) -> std::process::ExitCode {
    for problem in &report.problems {
        eprintln!("{problem}");
    }
    for note in &report.notes {
        println!("{note}");
    }
    if report.problems.is_empty() {
        println!("configuration OK");
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

/// `actiongate check`: every problem in the configuration and the Rasa-side files, and
/// notes on what each deployment style needs.
pub fn run(args: &crate::cli::CheckArgs) -> Report {
    let serve = crate::cli::ServeArgs {
        endpoints: args.endpoints.clone(),
        ..crate::cli::Cli::default_serve_args()
    };
    let required = args.endpoints != Path::new("endpoints.yml");
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let consent = match crate::config::load_endpoints(&args.endpoints, required) {
        Err(e) => {
            problems.push(e);
            crate::consent::ConsentConfig::default()
        }
        Ok(file) => {
            let file = file.unwrap_or_default();
            for section in &file.unknown_sections {
                notes.push(format!(
                    "{}: `{section}` is not a section Rasa or actiongate is known to read; left alone (a misspelled `actiongate:`?)",
                    args.endpoints.display()
                ));
            }
            match crate::config::Settings::from_parts(&serve, &file, &args.endpoints) {
                Ok(settings) => {
                    if let Some(traces) = settings.traces.as_ref().filter(|t| !t.exports.is_empty())
                    {
                        let to: Vec<String> = traces.exports.iter().map(|e| e.url()).collect();
                        notes.push(format!(
                            "{}: traces are exported as `{}` to {}",
                            args.endpoints.display(),
                            traces.service_name,
                            to.join(", ")
                        ));
                    }
                    for note in settings.traces.iter().flat_map(|t| &t.notes) {
                        notes.push(note.clone());
                    }
                    settings.consent
                }
                Err(e) => {
                    problems.push(e);
                    crate::consent::ConsentConfig::default()
                }
            }
        }
    };
    let mut report = lint(&args.project, &consent.confirm_response, &consent.signals);
    problems.append(&mut report.problems);
    report.problems = problems;
    notes.append(&mut report.notes);
    report.notes = notes;
    report
}

/// The tools (actions) this server serves.
pub const TOOLS: [&str; 4] = [
    "list_subscriptions",
    "select_subscription_change",
    "apply_subscription_change",
    "check_subscription_change",
];

/// The responses the actions dispatch.
pub const DISPATCHED: [&str; 7] = [
    "utter_subscription_change_applied",
    "utter_subscription_change_held",
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

/// What `check` found: the problems, and what a reader should know (which signal each
/// deployment style needs, and where it was found).
#[derive(Debug, Default)]
pub struct Report {
    pub problems: Vec<ConfigError>,
    pub notes: Vec<String>,
}

/// Checks the project folder against the consent settings.
pub fn lint(project: &Path, confirm_response: &str, signals: &Signals) -> Report {
    let mut problems = Vec::new();
    let domain = read_domain(project, &mut problems);
    let responses = if project.join("responses").is_dir() || domain.is_none() {
        read_responses(&project.join("responses"), &mut problems)
    } else {
        domain
            .as_ref()
            .map(|d| d.responses.clone())
            .unwrap_or_default()
    };
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
                // Rendered as Rasa renders it, each placeholder standing for itself: a term
                // that is escaped (`{{change_tag}}`) or garbled is not read out.
                let stand_ins: std::collections::HashMap<String, serde_json::Value> =
                    crate::consent::question::placeholders(text)
                        .into_iter()
                        .map(|name| (name.to_owned(), format!("\u{1}{name}\u{1}").into()))
                        .collect();
                let rendered =
                    crate::consent::question::render(text, &stand_ins).unwrap_or_default();
                for term in CONFIRMATION_TERMS {
                    let name = term.trim_matches(|c| c == '{' || c == '}');
                    if !rendered.contains(&format!("\u{1}{name}\u{1}")) {
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
    let notes = check_signals(domain.as_ref(), signals, &mut problems);
    Report { problems, notes }
}

/// The YAML files of a folder, sorted.
fn yaml_files(entries: std::fs::ReadDir) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yml" | "yaml")))
        .collect();
    files.sort();
    files
}

/// A YAML file, or `None` with the problem recorded.
fn read_yaml(file: &Path, problems: &mut Vec<ConfigError>) -> Option<Value> {
    let doc = std::fs::read_to_string(file)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_yaml_ng::from_str(&t).map_err(|e| e.to_string()));
    doc.map_err(|e| problems.push(ConfigError::new(file, "-", e)))
        .ok()
}

/// The texts of a response's variations.
fn texts_of(variations: &Value) -> Vec<String> {
    variations
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("text").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// What the project's Rasa domain declares (`domain.yml`, or every file in `domain/`).
#[derive(Debug, Default)]
struct Domain {
    /// Where it was read.
    path: std::path::PathBuf,
    intents: BTreeSet<String>,
    /// Slot name to its `type`.
    slots: std::collections::BTreeMap<String, String>,
    responses: Vec<(String, Vec<String>, std::path::PathBuf)>,
}

fn read_domain(project: &Path, problems: &mut Vec<ConfigError>) -> Option<Domain> {
    let single = project.join("domain.yml");
    let dir = project.join("domain");
    let (path, files) = if single.is_file() {
        (single.clone(), vec![single])
    } else if let Ok(entries) = std::fs::read_dir(&dir) {
        (dir, yaml_files(entries))
    } else {
        return None;
    };
    let mut domain = Domain {
        path,
        ..Domain::default()
    };
    for file in files {
        let Some(doc) = read_yaml(&file, problems) else {
            continue;
        };
        for intent in doc
            .get("intents")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
        {
            // `- affirm`, or `- affirm: {use_entities: ...}`.
            let name = intent.as_str().map(str::to_owned).or_else(|| {
                intent
                    .as_mapping()
                    .and_then(|m| m.keys().next())
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
            domain.intents.extend(name);
        }
        for (name, slot) in doc
            .get("slots")
            .and_then(Value::as_mapping)
            .into_iter()
            .flatten()
        {
            if let Some(name) = name.as_str() {
                let kind = slot.get("type").and_then(Value::as_str).unwrap_or("");
                domain.slots.insert(name.to_owned(), kind.to_owned());
            }
        }
        for (name, variations) in doc
            .get("responses")
            .and_then(Value::as_mapping)
            .into_iter()
            .flatten()
        {
            let Some(name) = name.as_str() else { continue };
            let texts = texts_of(variations);
            domain
                .responses
                .push((name.to_owned(), texts, file.clone()));
        }
    }
    Some(domain)
}

/// The reply's yes or no must be readable: with a confirm slot, a boolean slot of that
/// name; otherwise the affirm and deny intents. Returns what each deployment style needs.
fn check_signals(
    domain: Option<&Domain>,
    signals: &Signals,
    problems: &mut Vec<ConfigError>,
) -> Vec<String> {
    let list = |names: &[String]| names.join(", ");
    let mut notes = vec![
        "the reply's yes or no is read from what the tracker records (CONTRACT.md section 3):".to_owned(),
        format!(
            "  Rasa 3.x with NLU: the reply's intent (yes: {}; no: {}), in actiongate.consent.affirm_intents / deny_intents",
            list(&signals.affirm_intents),
            list(&signals.deny_intents)
        ),
        format!(
            "  Rasa Pro CALM: the boolean slot the confirmation flow collects, --confirm-slot / actiongate.consent.confirm_slot ({})",
            signals.confirm_slot.as_deref().map_or("not set".to_owned(), |s| format!("set: {s}"))
        ),
        "  Rasa Mantle: the engine's record of the held call (resolve_tool_confirmation), nothing to configure".to_owned(),
    ];
    let Some(domain) = domain else {
        notes.push("no Rasa domain in the project (domain.yml or domain/): the intents and the slot were not checked".to_owned());
        return notes;
    };
    match &signals.confirm_slot {
        Some(slot) => match domain.slots.get(slot) {
            Some(kind) if kind == "bool" => notes.push(format!(
                "the confirm slot {slot} is a bool slot in {}",
                domain.path.display()
            )),
            Some(kind) => problems.push(ConfigError::new(
                &domain.path,
                format!("slots.{slot}"),
                format!("the confirm slot must be of type bool, not {kind:?}"),
            )),
            None => problems.push(ConfigError::new(
                &domain.path,
                "actiongate.consent.confirm_slot",
                format!("the confirm slot {slot} is not a slot of the domain"),
            )),
        },
        None => {
            let before = problems.len();
            for (key, names) in [
                ("actiongate.consent.affirm_intents", &signals.affirm_intents),
                ("actiongate.consent.deny_intents", &signals.deny_intents),
            ] {
                if names.is_empty() {
                    problems.push(ConfigError::new(&domain.path, key, "no intent given"));
                }
                for name in names.iter().filter(|n| !domain.intents.contains(*n)) {
                    problems.push(ConfigError::new(
                        &domain.path,
                        key,
                        format!("intent {name} is not an intent of the domain, so no reply could be read as it"),
                    ));
                }
            }
            if problems.len() == before {
                notes.push(format!("the intents are in {}", domain.path.display()));
            }
        }
    }
    notes
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
    let files = yaml_files(entries);
    for file in files {
        let Some(doc) = read_yaml(&file, problems) else {
            continue;
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
            let texts = texts_of(variations);
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
    let Some(doc) = read_yaml(path, problems) else {
        return;
    };
    let mut seen = BTreeSet::new();
    visit_fields(&doc, "", &mut |key, field| {
        if let Some(name) = change_memory::ALL
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
    for name in change_memory::ALL {
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
