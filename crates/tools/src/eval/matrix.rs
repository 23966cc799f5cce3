//! The consent matrix and its replay (over 400 lines: the scenario format, its replay and its score are one story).
//!
//! The consent matrix: scenarios (a conversation, the service's facts, and what happens
//! between question and answer), each labelled valid or violating with the number of
//! changes it may cause, replayed through a real server and its subscription service, once
//! with the guard and once with the naive baseline's apply.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use testkit::{outcome_of, Chat, Endpoint};

use super::baseline::NaiveApply;
use super::stripe::StripeWorld;

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
    /// A customer message with the intent Rasa's NLU gave it (at `confidence`, default 1).
    SayIntent {
        text: String,
        intent: String,
        #[serde(default)]
        confidence: Option<f64>,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
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
    #[error("the server under test could not start: {0}")]
    Start(String),
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

/// Where a scenario is replayed: a fresh actiongate (its own store and subscription
/// service, nothing left from another scenario), started by whoever runs the matrix.
pub trait Arena {
    /// Starts one, reading Rasa Pro CALM's confirm slot `confirm_slot` when given.
    fn start(
        &self,
        confirm_slot: Option<&str>,
    ) -> impl std::future::Future<Output = Result<Running, EvalError>>;

    /// Whether the scenario applies to this arena's billing system (Stripe offers fewer
    /// changes than the demo service).
    fn applies(&self, _scenario: &Scenario) -> bool {
        true
    }
}

/// A started actiongate, stopped when dropped.
pub struct Running {
    /// The action server's base URL.
    pub server: String,
    /// Its subscription service's base URL.
    pub service: String,
    /// Stops the action server.
    pub handle: actix_web::dev::ServerHandle,
    /// What must live as long as the server (its data directory, say).
    pub keep: Box<dyn std::any::Any>,
    /// Awaited once the server has stopped and before `keep` is dropped: what must end
    /// before the server's data goes (its store closed, its queued audit committed first, so
    /// nothing of it writes to a directory no longer there).
    pub close: Option<futures_util::future::BoxFuture<'static, ()>>,
    /// With Stripe as the billing system: the scenario's world there, whose changes are
    /// counted instead of the service's revisions.
    pub stripe: Option<StripeWorld>,
}

/// Replays one scenario on a fresh actiongate from `arena`. With [`Variant::Baseline`]
/// the apply calls go to a naive server of their own; every other call to actiongate.
pub async fn run_scenario(
    scenario: &Scenario,
    variant: Variant,
    arena: &impl Arena,
) -> Result<Run, EvalError> {
    let running = arena.start(scenario.confirm_slot.as_deref()).await?;
    let server = Endpoint::new(&running.server);
    let mut naive = None;
    let apply = match variant {
        Variant::Guard => server.clone(),
        Variant::Baseline => {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")
                .map_err(|e| EvalError::Start(e.to_string()))?;
            let port = listener
                .local_addr()
                .map_err(|e| EvalError::Start(e.to_string()))?
                .port();
            let settings = actionserver::ServerSettings {
                workers: 1,
                handle_signals: false,
                ..Default::default()
            };
            let registry = match &running.stripe {
                Some(world) => NaiveApply::stripe_registry(&world.proxy.url, &world.key),
                None => NaiveApply::registry(&running.service),
            };
            let started = actionserver::serve(listener, registry, settings, None)
                .map_err(|e| EvalError::Start(e.to_string()))?;
            naive = Some(started.handle());
            tokio::spawn(started);
            Endpoint::new(&format!("http://127.0.0.1:{port}"))
        }
    };
    let result = play(
        scenario,
        &server,
        &apply,
        &running.service,
        running.stripe.as_ref(),
    )
    .await;
    if let Some(naive) = naive {
        naive.stop(false).await;
    }
    running.handle.stop(false).await;
    if let Some(close) = running.close {
        close.await;
    }
    drop(running.keep);
    result
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

/// Changes made so far: the service's revisions, or the writes Stripe made.
async fn made(
    http: &reqwest::Client,
    service: &str,
    stripe: Option<&StripeWorld>,
) -> Result<i64, EvalError> {
    match stripe {
        Some(world) => Ok(world.changes()),
        None => revisions(http, service).await,
    }
}

async fn play(
    scenario: &Scenario,
    server: &Endpoint,
    apply: &Endpoint,
    service: &str,
    stripe: Option<&StripeWorld>,
) -> Result<Run, EvalError> {
    let http = &server.http;
    let fail = |why: String| EvalError::Scenario(scenario.id.clone(), why);
    let before = made(http, service, stripe).await?;
    let mut moves = 0;
    let account = match (stripe, &scenario.account) {
        (Some(world), Some(account)) => Some(world.translate(account)),
        (_, account) => account.clone(),
    };
    let mut c = Chat::new(&scenario.id, account.as_deref());
    let mut last_apply: Option<Value> = None;
    let mut outcomes = Vec::new();
    let steps: Vec<Step> = match stripe {
        Some(world) => scenario
            .steps
            .iter()
            .map(|s| world.translate_step(s))
            .collect(),
        None => scenario.steps.clone(),
    };
    for step in &steps {
        match step {
            Step::Request {
                subscription,
                change_type,
            } => {
                c.request_change(server, subscription, change_type).await?;
            }
            Step::Say(text) => c.user(text, "affirm", &[]),
            Step::SayIntent {
                text,
                intent,
                confidence,
            } => {
                c.user(text, intent, &[]);
                if let Some(confidence) = confidence {
                    let said = c.events.iter_mut().rev().find(|e| e["event"] == "user");
                    if let Some(said) = said {
                        said["parse_data"]["intent"]["confidence"] = json!(confidence);
                    }
                }
            }
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
                let (status, body) = apply.webhook(&request).await?;
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
                let (status, body) = apply.webhook(&request).await?;
                outcomes.push(format!("{status} {} (redelivered)", outcome_summary(&body)));
            }
            Step::RedeliverTrimmed(n) => {
                let mut request = last_apply
                    .clone()
                    .ok_or_else(|| fail("redeliver before apply".into()))?;
                if let Some(events) = request["tracker"]["events"].as_array_mut() {
                    events.drain(..(*n).min(events.len()));
                }
                let (status, body) = apply.webhook(&request).await?;
                outcomes.push(format!("{status} {} (trimmed by {n})", outcome_summary(&body)));
            }
            Step::Wait(seconds) => c.wait(*seconds),
            Step::Move { subscription, .. } if stripe.is_some() => {
                // Stripe's facts move by a new price; the write is not through the count.
                stripe
                    .expect("matched")
                    .move_terms(subscription)
                    .await?;
            }
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
    let after = made(http, service, stripe).await?;
    Ok(Run {
        id: scenario.id.clone(),
        label: scenario.label,
        expected: scenario.expect_changes,
        changes: after - before - moves,
        outcomes,
    })
}

fn outcome_summary(body: &Value) -> String {
    let outcome = outcome_of(body);
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
pub async fn eval(
    path: &Path,
    arena: &impl Arena,
    out: &mut impl std::io::Write,
) -> Result<bool, EvalError> {
    let mut matrix = load(path)?;
    let all = matrix.scenarios.len();
    matrix.scenarios.retain(|s| arena.applies(s));
    let mut scores = Vec::new();
    for variant in [Variant::Guard, Variant::Baseline] {
        let mut runs = Vec::with_capacity(matrix.scenarios.len());
        for chunk in matrix.scenarios.chunks(4) {
            let batch = chunk.iter().map(|s| run_scenario(s, variant, arena));
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
    if matrix.scenarios.len() < all {
        let _ = writeln!(
            out,
            "({} of the {all} apply to this billing system: the others ask for changes it does not offer)",
            matrix.scenarios.len()
        );
    }
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
