//! The consent matrix: scenarios (a conversation, the service's facts, and what happens
//! between question and answer), each labelled valid or violating with the number of
//! changes it may cause, replayed through the real server and the embedded service, once
//! with the guard and once with the naive baseline.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use super::baseline::NaiveApply;
use super::script::{Conversation, Endpoint};
use crate::actions::{subscription_actions, Registry, Subscriptions};
use crate::app::{self, Settings};

/// The matrix file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Matrix {
    pub version: u32,
    pub scenarios: Vec<Scenario>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Label {
    Valid,
    Violating,
}

/// One scenario.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub id: String,
    pub label: Label,
    pub category: String,
    #[serde(default)]
    pub account: Option<String>,
    /// Changes the service may make in this scenario (0, or 1: never twice).
    pub expect_changes: i64,
    /// Rasa Pro CALM's confirm slot, when the scenario's server reads one.
    #[serde(default)]
    pub confirm_slot: Option<String>,
    /// Each step a one-key map (`{say: "yes"}`) or, without data, a string (`apply`).
    #[serde(with = "serde_yaml_ng::with::singleton_map_recursive")]
    pub steps: Vec<Step>,
}

/// What happens, in order.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// The customer asks for a change; select runs; when it selected, Rasa asks.
    Request {
        subscription: String,
        change_type: String,
    },
    /// A customer message (intent `affirm`; one starting with `/` is a command).
    Say(String),
    /// A customer message with the intent Rasa's NLU gave it.
    SayIntent {
        text: String,
        intent: String,
    },
    /// A `slot` event with no action before it (as a flow's collect step writes one).
    Slot {
        name: String,
        value: Value,
    },
    /// Rasa Mantle's record of the customer's answer to the held tool call.
    MantleConfirmation(bool),
    /// The session's identity written again, after the customer spoke.
    SetIdentity(String),
    /// A customer message whose entities fill slots of the same names.
    SayEntities {
        text: String,
        entities: BTreeMap<String, String>,
    },
    /// Select runs on the current slots, without asking.
    SelectOnly,
    /// Rasa asks the confirmation question, rendered from the slots.
    Ask,
    /// Rasa asks a question lacking one term: `label`, `effective`, `entitlements` or `tag`.
    AskWithout(String),
    /// Rasa asks a question whose tag is glued to this prefix (inside a longer tag).
    AskGlued(String),
    /// Rasa asks a question with these words added (every term still there).
    AskWith(String),
    /// Rasa runs apply: one delivery.
    Apply,
    /// The last apply request, delivered again unchanged.
    Redeliver,
    /// The last apply request delivered again with its first N events trimmed (Rasa's
    /// `max_event_history`).
    RedeliverTrimmed(usize),
    /// Time passes (seconds).
    Wait(f64),
    /// The facts move at the service (administration route; the revision goes up).
    Move {
        subscription: String,
        #[serde(default)]
        entitlements: Option<String>,
        #[serde(default)]
        effective_at: Option<String>,
        #[serde(default)]
        label: Option<String>,
        #[serde(default)]
        note: Option<String>,
    },
    /// Another action sets a slot.
    SetSlot {
        name: String,
        value: Value,
    },
    /// The tracker's slot differs from its events (altered in transit).
    AlterSlot {
        name: String,
        value: Value,
    },
    Restart,
    NewSession,
    Rewind,
    /// An unrelated bot message.
    Bot(String),
}

/// Which `apply_subscription_change` the server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Guard,
    Baseline,
}

/// What one scenario did.
#[derive(Debug, Clone)]
pub struct Run {
    pub id: String,
    pub label: Label,
    pub expected: i64,
    pub changes: i64,
    pub outcomes: Vec<String>,
}

/// Scores of one variant over the matrix.
#[derive(Debug, Default, Clone)]
pub struct Score {
    pub violating: usize,
    pub unsafe_acceptances: usize,
    pub valid: usize,
    pub needless_blocks: usize,
    /// Scenarios whose changes differ from what their label allows.
    pub disagreements: Vec<Run>,
}

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{0}: {1}")]
    Read(String, String),
    #[error("the app could not start: {0}")]
    Start(#[from] app::StartError),
    #[error("HTTP: {0}")]
    Http(#[from] reqwest::Error),
    #[error("scenario {0}: {1}")]
    Scenario(String, String),
}

pub fn load(path: &Path) -> Result<Matrix, EvalError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| EvalError::Read(path.display().to_string(), e.to_string()))?;
    serde_yaml_ng::from_str(&text)
        .map_err(|e| EvalError::Read(path.display().to_string(), e.to_string()))
}

const SUBSCRIPTIONS: [&str; 4] = ["WS-SUB-3304", "WS-SUB-3310", "WS-SUB-4410", "WS-SUB-5120"];

/// Replays one scenario on a fresh app (its own store and embedded service).
pub async fn run_scenario(scenario: &Scenario, variant: Variant) -> Result<Run, EvalError> {
    let dir = tempdir()?;
    let mut settings = eval_settings(&dir)?;
    settings.consent.signals.confirm_slot = scenario.confirm_slot.clone();
    let started = app::start_with(&settings, |subs: Subscriptions| match variant {
        Variant::Guard => subscription_actions(subs),
        Variant::Baseline => {
            // The same actions, with the naive apply where the guarded one would be.
            let mut registry = Registry::default();
            (|| -> Result<(), crate::actions::DuplicateAction> {
                registry
                    .register(crate::actions::list::ListSubscriptions(subs.clone()))?
                    .register(crate::actions::select::SelectSubscriptionChange(
                        subs.clone(),
                    ))?
                    .register(NaiveApply {
                        subscriptions: subs.clone(),
                        http: reqwest::Client::new(),
                    })?
                    .register(crate::actions::check::CheckSubscriptionChange(subs))?;
                Ok(())
            })()
            .expect("four names");
            registry
        }
    })
    .await?;
    let handle = started.server.handle();
    tokio::spawn(started.server);
    let server = Endpoint::new(&format!("http://127.0.0.1:{}", started.port));
    let service = format!(
        "http://127.0.0.1:{}",
        started
            .embedded_port
            .expect("the eval runs the embedded service")
    );
    let result = play(scenario, &server, &service).await;
    handle.stop(false).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn tempdir() -> Result<std::path::PathBuf, EvalError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "actiongate-eval-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)
        .map_err(|e| EvalError::Read(dir.display().to_string(), e.to_string()))?;
    Ok(dir)
}

fn eval_settings(dir: &Path) -> Result<Settings, EvalError> {
    use clap::Parser;
    let endpoints = dir.join("endpoints.yml");
    std::fs::write(&endpoints, "")
        .map_err(|e| EvalError::Read(endpoints.display().to_string(), e.to_string()))?;
    let cli = crate::cli::Cli::parse_from([
        "actiongate",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--embedded-service-port",
        "0",
        "--quiet",
        "--data-dir",
        &dir.display().to_string(),
        "--endpoints",
        &endpoints.display().to_string(),
        "--rate-capacity",
        "100",
    ]);
    let mut settings = Settings::resolve(&cli.serve)
        .map_err(|e| EvalError::Read("settings".into(), e.to_string()))?;
    settings.server.handle_signals = false;
    settings.server.workers = 1;
    Ok(settings)
}

async fn revisions(http: &reqwest::Client, service: &str) -> Result<i64, EvalError> {
    let mut sum = 0;
    for id in SUBSCRIPTIONS {
        let record: Value = http
            .get(format!("{service}/v1/subscriptions/{id}"))
            .send()
            .await?
            .json()
            .await?;
        sum += record["revision"].as_i64().unwrap_or(0);
    }
    Ok(sum)
}

async fn play(scenario: &Scenario, server: &Endpoint, service: &str) -> Result<Run, EvalError> {
    let http = &server.http;
    let fail = |why: String| EvalError::Scenario(scenario.id.clone(), why);
    let before = revisions(http, service).await?;
    let mut moves = 0;
    let mut c = Conversation::new(&scenario.id, scenario.account.as_deref());
    let mut last_apply: Option<Value> = None;
    let mut outcomes = Vec::new();
    for step in &scenario.steps {
        match step {
            Step::Request {
                subscription,
                change_type,
            } => {
                c.request_change(server, subscription, change_type).await?;
            }
            Step::Say(text) => c.user(text, "affirm", &[]),
            Step::SayIntent { text, intent } => c.user(text, intent, &[]),
            Step::Slot { name, value } => c.slot(name, value.clone()),
            Step::MantleConfirmation(confirmed) => c.events.push(json!({
                "event": "tool_executed", "timestamp": c.t, "tool_name": "resolve_tool_confirmation",
                "arguments": {"confirmed": confirmed}, "result": "{}", "is_error": false,
            })),
            Step::SetIdentity(account) => {
                c.slot("session_started_metadata", json!({"account_id": account}))
            }
            Step::SayEntities { text, entities } => {
                let pairs: Vec<(&str, &str)> = entities
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                c.user(text, "request_change", &pairs);
            }
            Step::SelectOnly => {
                c.run(server, "select_subscription_change").await?;
            }
            Step::Ask => c.ask_confirmation(),
            Step::AskWithout(term) => {
                let slot = match term.as_str() {
                    "label" => "change_label",
                    "effective" => "change_effective",
                    "entitlements" => "change_entitlements",
                    "tag" => "change_tag",
                    other => return Err(fail(format!("ask_without: unknown term {other}"))),
                };
                let value = c
                    .slots
                    .get(slot)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let text = c.confirmation_text().replace(&value, "(see your account)");
                c.ask(&text);
            }
            Step::AskGlued(prefix) => {
                let tag = c
                    .slots
                    .get("change_tag")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let text = c
                    .confirmation_text()
                    .replace(&tag, &format!("{prefix}{tag}"));
                c.ask(&text);
            }
            Step::AskWith(words) => {
                let text = format!("{}{words}", c.confirmation_text());
                c.ask(&text);
            }
            Step::Apply => {
                let request = c.request("apply_subscription_change");
                let (status, body) = server.webhook(&request).await?;
                outcomes.push(format!("{status} {}", outcome_summary(&body)));
                if status == 200 {
                    c.record("apply_subscription_change", &body);
                }
                last_apply = Some(request);
            }
            Step::Redeliver => {
                let request = last_apply
                    .clone()
                    .ok_or_else(|| fail("redeliver before apply".into()))?;
                let (status, body) = server.webhook(&request).await?;
                outcomes.push(format!("{status} {} (redelivered)", outcome_summary(&body)));
            }
            Step::RedeliverTrimmed(n) => {
                let mut request = last_apply
                    .clone()
                    .ok_or_else(|| fail("redeliver before apply".into()))?;
                if let Some(events) = request["tracker"]["events"].as_array_mut() {
                    events.drain(..(*n).min(events.len()));
                }
                let (status, body) = server.webhook(&request).await?;
                outcomes.push(format!("{status} {} (trimmed by {n})", outcome_summary(&body)));
            }
            Step::Wait(seconds) => c.wait(*seconds),
            Step::Move {
                subscription,
                entitlements,
                effective_at,
                label,
                note,
            } => {
                let url = format!("{service}/v1/subscriptions/{subscription}");
                let mut record: Value = http.get(&url).send().await?.json().await?;
                record.as_object_mut().map(|r| r.remove("revision"));
                for option in record["options"].as_array_mut().into_iter().flatten() {
                    if let Some(e) = entitlements {
                        option["entitlements"] = json!(e);
                    }
                    if let Some(at) = effective_at {
                        option["effective_at"] = json!(at);
                    }
                    if let Some(label) = label {
                        option["label"] = json!(label);
                    }
                }
                if let Some(text) = note {
                    if let Some(notes) = record["notes"].as_array_mut() {
                        notes.push(json!({"at": "2026-09-30T08:00:00Z", "text": text}));
                    }
                }
                let answer = http.put(&url).json(&record).send().await?;
                if !answer.status().is_success() {
                    return Err(fail(format!(
                        "move: the service answered {}",
                        answer.status()
                    )));
                }
                moves += 1;
            }
            Step::SetSlot { name, value } => {
                c.action("action_other");
                c.slot(name, value.clone());
            }
            Step::AlterSlot { name, value } => {
                c.slots.insert(name.clone(), value.clone());
            }
            Step::Restart => c.marker("restart"),
            Step::NewSession => {
                let metadata = c
                    .slots
                    .get("session_started_metadata")
                    .cloned()
                    .unwrap_or(json!({}));
                c.session_start(metadata);
            }
            Step::Rewind => c.marker("rewind"),
            Step::Bot(text) => c.bot(text, Some("utter_chitchat")),
        }
    }
    // Let any command still in flight land before counting.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let after = revisions(http, service).await?;
    Ok(Run {
        id: scenario.id.clone(),
        label: scenario.label,
        expected: scenario.expect_changes,
        changes: after - before - moves,
        outcomes,
    })
}

fn outcome_summary(body: &Value) -> String {
    let outcome = super::script::outcome_of(body);
    match (outcome["status"].as_str(), outcome["reason"].as_str()) {
        (Some(s), Some(r)) => format!("{s}/{r}"),
        (Some(s), None) => s.to_owned(),
        _ => body["error"].as_str().unwrap_or("?").to_owned(),
    }
}

/// Scores runs: an unsafe acceptance is a violating scenario with more changes than it
/// allows; a needless block is a valid scenario with fewer.
pub fn score(runs: &[Run]) -> Score {
    let mut score = Score::default();
    for run in runs {
        match run.label {
            Label::Violating => {
                score.violating += 1;
                if run.changes > run.expected {
                    score.unsafe_acceptances += 1;
                }
            }
            Label::Valid => {
                score.valid += 1;
                if run.changes < run.expected {
                    score.needless_blocks += 1;
                }
            }
        }
        if run.changes != run.expected {
            score.disagreements.push(run.clone());
        }
    }
    score
}

/// Replays the matrix through both variants and prints the figures; `Ok(true)` when the
/// guard scores 0 and 0 and the baseline's unsafe acceptances are above 0.
pub async fn eval(path: &Path, out: &mut impl std::io::Write) -> Result<bool, EvalError> {
    let matrix = load(path)?;
    let mut scores = Vec::new();
    for variant in [Variant::Guard, Variant::Baseline] {
        let mut runs = Vec::with_capacity(matrix.scenarios.len());
        for chunk in matrix.scenarios.chunks(4) {
            let batch = chunk.iter().map(|s| run_scenario(s, variant));
            for run in futures_util::future::join_all(batch).await {
                runs.push(run?);
            }
        }
        scores.push((variant, score(&runs)));
    }
    let pct = |n: usize, d: usize| {
        if d == 0 {
            0.0
        } else {
            100.0 * n as f64 / d as f64
        }
    };
    let (_, guard) = &scores[0];
    let _ = writeln!(
        out,
        "consent matrix {} (version {}): {} scenarios, {} valid, {} violating",
        path.display(),
        matrix.version,
        matrix.scenarios.len(),
        guard.valid,
        guard.violating
    );
    let _ = writeln!(
        out,
        "{:<16} {:>24} {:>24}",
        "", "unsafe acceptances", "needless blocks"
    );
    for (variant, s) in &scores {
        let name = if *variant == Variant::Guard {
            "guard"
        } else {
            "naive baseline"
        };
        let _ = writeln!(
            out,
            "{name:<16} {:>24} {:>24}",
            format!(
                "{}/{} ({:.1}%)",
                s.unsafe_acceptances,
                s.violating,
                pct(s.unsafe_acceptances, s.violating)
            ),
            format!(
                "{}/{} ({:.1}%)",
                s.needless_blocks,
                s.valid,
                pct(s.needless_blocks, s.valid)
            ),
        );
    }
    for (variant, s) in &scores {
        let name = if *variant == Variant::Guard {
            "guard"
        } else {
            "naive baseline"
        };
        let _ = writeln!(
            out,
            "\n{name}: {} scenario(s) disagree with their label",
            s.disagreements.len()
        );
        for run in s.disagreements.iter().take(if *variant == Variant::Guard {
            usize::MAX
        } else {
            15
        }) {
            let _ = writeln!(
                out,
                "  {} ({:?}): {} change(s), {} allowed; outcomes: {}",
                run.id,
                run.label,
                run.changes,
                run.expected,
                run.outcomes.join(", ")
            );
        }
    }
    let baseline = &scores[1].1;
    let ok = guard.unsafe_acceptances == 0
        && guard.needless_blocks == 0
        && guard.disagreements.is_empty()
        && baseline.unsafe_acceptances > 0;
    let _ = writeln!(
        out,
        "\n{}",
        if ok {
            "eval: the guard scores 0 and 0; the baseline does not"
        } else {
            "eval: FAILED"
        }
    );
    Ok(ok)
}
