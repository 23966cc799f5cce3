//! `actiongate converse`: runs conversation tests, written in Rasa Pro's end-to-end test-case format, against a running Rasa.
//!
//! The files are the ones `rasa test e2e` reads (`test_cases:`, each a `test_case:` name
//! and `steps:` of `user`, `bot`, `utter`, `slot_was_set`, `slot_was_not_set`; top-level
//! `fixtures:` and `metadata:` sections), so the same files run unchanged under Rasa Pro.
//! Here they drive a real Rasa (3.x open source or Pro) from the outside:
//!
//! * every test case talks as a fresh sender through the REST channel
//!   (`POST /webhooks/rest/webhook` with `{"sender", "message", "metadata"}`), with the
//!   test case's metadata merged with the user step's, as Rasa Pro merges them;
//! * after each user message the runner reads the tracker Rasa keeps
//!   (`GET /conversations/{sender}/tracker`) and checks the steps that follow the user
//!   step against that turn's events (the events after the latest `user` event):
//!   `utter:` against a `bot` event's `metadata.utter_action`, `bot:` against its text,
//!   `slot_was_set:` / `slot_was_not_set:` against `slot` events. `bot`/`utter` steps must
//!   match the turn's bot messages in order (an `utter:` and a `bot:` step may both match
//!   the same message); slot steps may match in any order, as in Rasa Pro (Rasa renders a
//!   custom action's messages before it applies the action's slot events);
//! * fixtures are set before the first message by appending events to the tracker
//!   (`POST /conversations/{sender}/tracker/events`): a session start, the test case's
//!   metadata as the slot `session_started_metadata` (what the REST channel would have put
//!   there had the session started with the first message), then the fixture's slots;
//! * the facts can move at the subscription service mid-conversation: a metadata entry may
//!   carry the key `actiongate_service_put`, `{"path": "/v1/subscriptions/ID", "body":
//!   {...}}` (or a list of them). When a user step names such an entry in its
//!   `metadata:`, the runner sends each `PUT {service}{path}` before that message, and
//!   strips the key from the message metadata. Rasa Pro would pass the key on as inert
//!   message metadata, so the file stays valid for it;
//! * the service's record can be checked: a metadata entry may carry the key
//!   `actiongate_service_expect`, `{"path": "/v1/subscriptions/ID", "fields": {"revision":
//!   4, "status": "active"}}` (or a list of them). Named by a user step, the runner sends
//!   `GET {service}{path}` before that message (before the step's
//!   `actiongate_service_put`, so it sees what the earlier turns left) and fails the test
//!   case unless every named top-level field of the answer equals the given value
//!   (numbers by value). Named by the test case (its `metadata:`, which also goes with
//!   every message), it is checked once after the last step. Either way the key is left
//!   out of the message metadata, and Rasa Pro passes it on as inert metadata.
//!
//! A test case stops at its first failing turn; the failure is printed as a per-step diff
//! (expected steps, marked, and the turn's actual bot and slot events). The last line of
//! the output is `N passed, M failed`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The metadata key naming the service updates to make before a user message.
pub const SERVICE_PUT_KEY: &str = "actiongate_service_put";

/// The metadata key naming the service records to check: before a user message (on a
/// user step's entry) or after the last step (on the test case's entry).
pub const SERVICE_EXPECT_KEY: &str = "actiongate_service_expect";

/// What `actiongate converse` was asked to run.
#[derive(Debug, Clone)]
pub struct ConverseArgs {
    /// Test files in Rasa Pro's end-to-end format.
    pub files: Vec<PathBuf>,
    /// Base URL of Rasa's HTTP API (`rasa run --enable-api`), e.g. `http://127.0.0.1:5005`.
    pub rasa: String,
    /// Rasa's API token (`rasa run --auth-token`), sent as the `token` query parameter.
    pub rasa_token: Option<String>,
    /// Base URL of the subscription service, for `actiongate_service_put` steps.
    pub service: Option<String>,
    /// Bearer token for the subscription service, if it wants one.
    pub service_token: Option<String>,
    /// Timeout of each HTTP request, in seconds.
    pub timeout_secs: u64,
}

impl Default for ConverseArgs {
    fn default() -> Self {
        Self {
            files: Vec::new(),
            rasa: "http://127.0.0.1:5005".to_owned(),
            rasa_token: None,
            service: None,
            service_token: None,
            timeout_secs: 30,
        }
    }
}

/// How many test cases passed and failed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
}

impl Summary {
    /// True when no test case failed.
    pub fn success(&self) -> bool {
        self.failed == 0
    }
}

/// Why the tests could not be run at all (a failing test case is not an error).
#[derive(Debug, thiserror::Error)]
pub enum ConverseError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a valid test-case file: {message}")]
    Format { path: PathBuf, message: String },
    #[error("{path}: test case `{test_case}` moves or checks the facts at the service ({SERVICE_PUT_KEY}, {SERVICE_EXPECT_KEY}), but no --service URL was given")]
    ServiceRequired { path: PathBuf, test_case: String },
    #[error("no test cases in the given files")]
    NoTestCases,
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

// ---------------------------------------------------------------------------------------
// The file format
// ---------------------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    fixtures: Vec<BTreeMap<String, Vec<BTreeMap<String, Value>>>>,
    #[serde(default)]
    metadata: Vec<BTreeMap<String, Map<String, Value>>>,
    test_cases: Vec<RawTestCase>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTestCase {
    test_case: String,
    #[serde(default)]
    fixtures: Vec<String>,
    #[serde(default)]
    metadata: Option<String>,
    steps: Vec<RawStep>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    user: Option<String>,
    metadata: Option<String>,
    bot: Option<String>,
    utter: Option<String>,
    slot_was_set: Option<Vec<RawSlot>>,
    slot_was_not_set: Option<Vec<RawSlot>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawSlot {
    Name(String),
    Value(BTreeMap<String, Value>),
}

/// One parsed test file.
#[derive(Debug, Clone, PartialEq)]
pub struct TestFile {
    pub path: PathBuf,
    pub cases: Vec<TestCase>,
}

/// One test case, with fixture and metadata names resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct TestCase {
    pub name: String,
    /// Slots to set before the first message, in order.
    pub fixture_slots: Vec<(String, Value)>,
    /// The test case's own metadata (sent with every message), without
    /// `actiongate_service_expect`.
    pub metadata: Map<String, Value>,
    pub steps: Vec<Step>,
    /// Service records to check after the last step.
    pub final_expects: Vec<ServiceExpect>,
}

impl TestCase {
    /// True when the test case reads or writes the subscription service.
    pub fn uses_service(&self) -> bool {
        !self.final_expects.is_empty()
            || self.steps.iter().any(|s| {
                matches!(s, Step::User { service_puts, service_expects, .. }
                    if !service_puts.is_empty() || !service_expects.is_empty())
            })
    }
}

/// A service update to make before a user message.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServicePut {
    /// Path under the service's base URL, e.g. `/v1/subscriptions/WS-SUB-3304`.
    pub path: String,
    /// The JSON body.
    pub body: Value,
}

/// A check of a service record: `GET {service}{path}` answers a JSON object in which
/// every one of `fields` has the given value.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceExpect {
    /// Path under the service's base URL, e.g. `/v1/subscriptions/WS-SUB-3304`.
    pub path: String,
    /// Top-level fields of the answer and their expected values, e.g. `revision: 4`.
    pub fields: Map<String, Value>,
}

impl ServiceExpect {
    /// The fields of `record` that differ from the expected ones, as
    /// `(name, expected, actual)`; a missing field is `null`.
    pub fn mismatches(&self, record: &Value) -> Vec<(String, Value, Value)> {
        self.fields
            .iter()
            .filter_map(|(name, want)| {
                let got = record.get(name).cloned().unwrap_or(Value::Null);
                (!value_eq(want, &got)).then(|| (name.clone(), want.clone(), got))
            })
            .collect()
    }

    fn describe(&self) -> String {
        format!(
            "{SERVICE_EXPECT_KEY}: GET {} {}",
            self.path,
            compact(&Value::Object(self.fields.clone()))
        )
    }
}

/// One step of a test case.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    User {
        text: String,
        /// Test-case metadata merged with the step's (the step wins), without
        /// `actiongate_service_put` and `actiongate_service_expect`.
        metadata: Map<String, Value>,
        /// Service records to check before the message (and before `service_puts`).
        service_expects: Vec<ServiceExpect>,
        /// Service updates to make before sending the message.
        service_puts: Vec<ServicePut>,
    },
    Bot(String),
    Utter(String),
    SlotWasSet {
        name: String,
        value: Option<Value>,
    },
    SlotWasNotSet {
        name: String,
        value: Option<Value>,
    },
}

impl Step {
    fn describe(&self) -> String {
        match self {
            Step::User { text, .. } => format!("user: {text}"),
            Step::Bot(text) => format!("bot: {text}"),
            Step::Utter(name) => format!("utter: {name}"),
            Step::SlotWasSet { name, value } => match value {
                Some(v) => format!("slot_was_set: {name}: {}", compact(v)),
                None => format!("slot_was_set: {name}"),
            },
            Step::SlotWasNotSet { name, value } => match value {
                Some(v) => format!("slot_was_not_set: {name}: {}", compact(v)),
                None => format!("slot_was_not_set: {name}"),
            },
        }
    }
}

fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| value.to_string())
}

/// Parses one file's text. `path` is only used in error messages.
pub fn parse_test_file(path: &Path, text: &str) -> Result<TestFile, ConverseError> {
    let format = |message: String| ConverseError::Format {
        path: path.to_path_buf(),
        message,
    };
    let raw: RawFile = serde_yaml_ng::from_str(text).map_err(|e| format(e.to_string()))?;

    let mut fixtures: BTreeMap<String, Vec<(String, Value)>> = BTreeMap::new();
    for entry in raw.fixtures {
        for (name, slots) in entry {
            let mut pairs = Vec::new();
            for slot_map in slots {
                pairs.extend(slot_map);
            }
            if fixtures.insert(name.clone(), pairs).is_some() {
                return Err(format(format!("fixture `{name}` is defined twice")));
            }
        }
    }
    let mut metadata: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for entry in raw.metadata {
        for (name, values) in entry {
            if metadata.insert(name.clone(), values).is_some() {
                return Err(format(format!("metadata `{name}` is defined twice")));
            }
        }
    }

    let mut cases = Vec::new();
    for raw_case in raw.test_cases {
        let case_name = raw_case.test_case;
        let mut fixture_slots = Vec::new();
        for name in &raw_case.fixtures {
            let slots = fixtures.get(name).ok_or_else(|| {
                format(format!(
                    "test case `{case_name}` names fixture `{name}`, which the file does not define"
                ))
            })?;
            fixture_slots.extend(slots.iter().cloned());
        }
        let (case_metadata, final_expects) = match &raw_case.metadata {
            None => (Map::new(), Vec::new()),
            Some(name) => {
                let values = metadata.get(name).ok_or_else(|| {
                    format(format!(
                        "test case `{case_name}` names metadata `{name}`, which the file does not define"
                    ))
                })?;
                if values.contains_key(SERVICE_PUT_KEY) {
                    return Err(format(format!(
                        "test case `{case_name}`: metadata `{name}` carries {SERVICE_PUT_KEY}; \
                         name it on the user step before which the service changes, not on the test case"
                    )));
                }
                let mut values = values.clone();
                let expects = match values.remove(SERVICE_EXPECT_KEY) {
                    None => Vec::new(),
                    Some(value) => parse_service_expects(&value).map_err(|e| {
                        format(format!(
                            "test case `{case_name}`: metadata `{name}`: {SERVICE_EXPECT_KEY}: {e}"
                        ))
                    })?,
                };
                (values, expects)
            }
        };

        let mut steps = Vec::new();
        for (index, raw_step) in raw_case.steps.into_iter().enumerate() {
            let step = convert_step(raw_step, &case_metadata, &metadata)
                .map_err(|m| format(format!("test case `{case_name}`, step {}: {m}", index + 1)))?;
            steps.extend(step);
        }
        if steps.is_empty() {
            return Err(format(format!("test case `{case_name}` has no steps")));
        }
        cases.push(TestCase {
            name: case_name,
            fixture_slots,
            metadata: case_metadata,
            steps,
            final_expects,
        });
    }
    Ok(TestFile {
        path: path.to_path_buf(),
        cases,
    })
}

fn convert_step(
    raw: RawStep,
    case_metadata: &Map<String, Value>,
    metadata: &BTreeMap<String, Map<String, Value>>,
) -> Result<Vec<Step>, String> {
    let kinds = [
        raw.user.is_some(),
        raw.bot.is_some(),
        raw.utter.is_some(),
        raw.slot_was_set.is_some(),
        raw.slot_was_not_set.is_some(),
    ]
    .iter()
    .filter(|k| **k)
    .count();
    if kinds != 1 {
        return Err(
            "a step must have exactly one of user, bot, utter, slot_was_set, slot_was_not_set"
                .to_owned(),
        );
    }
    if raw.metadata.is_some() && raw.user.is_none() {
        return Err("only a user step may name metadata".to_owned());
    }
    if let Some(text) = raw.user {
        let mut merged = case_metadata.clone();
        let mut service_puts = Vec::new();
        let mut service_expects = Vec::new();
        if let Some(name) = &raw.metadata {
            let values = metadata.get(name).ok_or_else(|| {
                format!("names metadata `{name}`, which the file does not define")
            })?;
            for (key, value) in values {
                if key == SERVICE_PUT_KEY {
                    service_puts = parse_service_puts(value)
                        .map_err(|e| format!("metadata `{name}`: {SERVICE_PUT_KEY}: {e}"))?;
                } else if key == SERVICE_EXPECT_KEY {
                    service_expects = parse_service_expects(value)
                        .map_err(|e| format!("metadata `{name}`: {SERVICE_EXPECT_KEY}: {e}"))?;
                } else {
                    merged.insert(key.clone(), value.clone());
                }
            }
        }
        return Ok(vec![Step::User {
            text,
            metadata: merged,
            service_expects,
            service_puts,
        }]);
    }
    if let Some(text) = raw.bot {
        return Ok(vec![Step::Bot(text)]);
    }
    if let Some(name) = raw.utter {
        return Ok(vec![Step::Utter(name)]);
    }
    let (slots, set) = match (raw.slot_was_set, raw.slot_was_not_set) {
        (Some(slots), _) => (slots, true),
        (None, Some(slots)) => (slots, false),
        (None, None) => unreachable!("counted above"),
    };
    if slots.is_empty() {
        return Err("an empty slot list".to_owned());
    }
    let mut steps = Vec::new();
    for slot in slots {
        let pairs: Vec<(String, Option<Value>)> = match slot {
            RawSlot::Name(name) => vec![(name, None)],
            RawSlot::Value(map) => map.into_iter().map(|(k, v)| (k, Some(v))).collect(),
        };
        for (name, value) in pairs {
            steps.push(if set {
                Step::SlotWasSet { name, value }
            } else {
                Step::SlotWasNotSet { name, value }
            });
        }
    }
    Ok(steps)
}

fn parse_service_puts(value: &Value) -> Result<Vec<ServicePut>, String> {
    let items: Vec<Value> = match value {
        Value::Array(items) => items.clone(),
        other => vec![other.clone()],
    };
    let mut puts = Vec::new();
    for item in items {
        let put: ServicePut = serde_json::from_value(item).map_err(|e| e.to_string())?;
        if !put.path.starts_with('/') {
            return Err(format!("path `{}` must start with /", put.path));
        }
        puts.push(put);
    }
    Ok(puts)
}

fn parse_service_expects(value: &Value) -> Result<Vec<ServiceExpect>, String> {
    let items: Vec<Value> = match value {
        Value::Array(items) => items.clone(),
        other => vec![other.clone()],
    };
    if items.is_empty() {
        return Err("an empty list".to_owned());
    }
    let mut expects = Vec::new();
    for item in items {
        let expect: ServiceExpect = serde_json::from_value(item).map_err(|e| e.to_string())?;
        if !expect.path.starts_with('/') {
            return Err(format!("path `{}` must start with /", expect.path));
        }
        if expect.fields.is_empty() {
            return Err(format!("path `{}`: no fields to check", expect.path));
        }
        expects.push(expect);
    }
    Ok(expects)
}

// ---------------------------------------------------------------------------------------
// Matching a turn
// ---------------------------------------------------------------------------------------

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
    fn describe(&self) -> String {
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

fn turn_event(event: &Value) -> Option<TurnEvent> {
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
pub struct StepCheck {
    pub step: String,
    pub ok: bool,
}

/// Checks the expected steps of one turn against its events.
pub fn check_turn(expected: &[&Step], turn: &[TurnEvent]) -> Vec<StepCheck> {
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
        checks.push(StepCheck {
            step: step.describe(),
            ok,
        });
    }
    checks
}

fn slot_matches(event: &TurnEvent, want_name: &str, want_value: &Option<Value>) -> bool {
    match event {
        TurnEvent::Slot { name, value } => {
            name == want_name && want_value.as_ref().is_none_or(|want| value_eq(want, value))
        }
        TurnEvent::Bot { .. } => false,
    }
}

/// JSON equality, except that numbers compare by value (`5` equals `5.0`).
fn value_eq(want: &Value, got: &Value) -> bool {
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

// ---------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------

/// Reads and parses the files, runs every test case against Rasa, prints the results, and
/// returns the counts. The last line printed is `N passed, M failed`.
pub async fn run(args: ConverseArgs) -> Result<Summary, ConverseError> {
    let mut files = Vec::new();
    for path in &args.files {
        let text = std::fs::read_to_string(path).map_err(|source| ConverseError::Read {
            path: path.clone(),
            source,
        })?;
        files.push(parse_test_file(path, &text)?);
    }
    if files.iter().all(|f| f.cases.is_empty()) {
        return Err(ConverseError::NoTestCases);
    }
    if args.service.is_none() {
        for file in &files {
            for case in &file.cases {
                if case.uses_service() {
                    return Err(ConverseError::ServiceRequired {
                        path: file.path.clone(),
                        test_case: case.name.clone(),
                    });
                }
            }
        }
    }

    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(args.timeout_secs.max(1)))
        .build()
        .map_err(ConverseError::Client)?;
    let runner = Runner {
        args: &args,
        client,
    };

    let mut summary = Summary::default();
    for file in &files {
        for case in &file.cases {
            let label = format!("{} :: {}", file.path.display(), case.name);
            match runner.run_case(case).await {
                Ok(()) => {
                    summary.passed += 1;
                    println!("PASS {label}");
                }
                Err(failure) => {
                    summary.failed += 1;
                    println!("FAIL {label}");
                    for line in failure.lines() {
                        println!("    {line}");
                    }
                }
            }
        }
    }
    println!("{} passed, {} failed", summary.passed, summary.failed);
    Ok(summary)
}

struct Runner<'a> {
    args: &'a ConverseArgs,
    client: reqwest::Client,
}

static SENDER_COUNTER: AtomicU64 = AtomicU64::new(0);

fn fresh_sender(case: &str) -> String {
    let slug: String = case
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = SENDER_COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("e2e-{slug}-{}-{nanos:x}-{n}", std::process::id())
}

fn trim_base(url: &str) -> &str {
    url.trim_end_matches('/')
}

/// Percent-encodes a query parameter value (unreserved characters stay).
fn encode_query(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, crate::subscriptions::client::NOT_UNRESERVED)
        .to_string()
}

impl Runner<'_> {
    fn rasa_url(&self, path: &str, query: &[(&str, &str)]) -> String {
        let mut url = format!("{}{path}", trim_base(&self.args.rasa));
        let mut params: Vec<(String, String)> = query
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        if let Some(token) = &self.args.rasa_token {
            params.push(("token".to_owned(), token.clone()));
        }
        for (i, (k, v)) in params.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(k);
            url.push('=');
            url.push_str(&encode_query(v));
        }
        url
    }

    async fn run_case(&self, case: &TestCase) -> Result<(), String> {
        let sender = fresh_sender(&case.name);
        if !case.fixture_slots.is_empty() {
            self.set_fixtures(&sender, case).await?;
        }

        // Group: the assertion steps before the first user message, then each user
        // message with the assertion steps that follow it.
        let mut turns: Vec<(Option<&Step>, Vec<&Step>)> = vec![(None, Vec::new())];
        for step in &case.steps {
            match step {
                Step::User { .. } => turns.push((Some(step), Vec::new())),
                _ => turns
                    .last_mut()
                    .expect("turns starts non-empty")
                    .1
                    .push(step),
            }
        }

        for (user, expected) in turns {
            if let Some(Step::User {
                text,
                metadata,
                service_expects,
                service_puts,
            }) = user
            {
                for expect in service_expects {
                    self.service_expect(expect)
                        .await
                        .map_err(|e| format!("sender: {sender}\n  before user: {text}\n{e}"))?;
                }
                for put in service_puts {
                    self.service_put(put).await?;
                }
                self.send(&sender, text, metadata).await?;
            }
            if expected.is_empty() {
                continue;
            }
            let events = self.tracker_events(&sender).await?;
            let turn = latest_turn(&events);
            let checks = check_turn(&expected, &turn);
            if checks.iter().any(|c| !c.ok) {
                let mut report = String::new();
                report.push_str(&format!("sender: {sender}\n"));
                match user {
                    Some(step) => report.push_str(&format!("  {}\n", step.describe())),
                    None => report.push_str("  (before the first user message)\n"),
                }
                for check in &checks {
                    let mark = if check.ok {
                        "    ok      "
                    } else {
                        "  - MISSING "
                    };
                    report.push_str(&format!("{mark}{}\n", check.step));
                }
                report.push_str("  actual turn:\n");
                if turn.is_empty() {
                    report.push_str("    (no bot or slot events)\n");
                }
                for event in &turn {
                    report.push_str(&format!("    {}\n", event.describe()));
                }
                return Err(report.trim_end().to_owned());
            }
        }
        for expect in &case.final_expects {
            self.service_expect(expect)
                .await
                .map_err(|e| format!("sender: {sender}\n  after the last step\n{e}"))?;
        }
        Ok(())
    }

    /// Reads the record and compares the named fields; the error is a report.
    async fn service_expect(&self, expect: &ServiceExpect) -> Result<(), String> {
        let base = self.args.service.as_deref().ok_or_else(|| {
            "a step checks the service's record, but no --service URL was given".to_owned()
        })?;
        let url = format!("{}{}", trim_base(base), expect.path);
        let mut request = self.client.get(&url);
        if let Some(token) = &self.args.service_token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("checking the service's record failed: GET {url}: {e}"))?;
        let body = expect_success("checking the service's record", "GET", &url, response).await?;
        let record: Value = serde_json::from_str(&body)
            .map_err(|e| format!("checking the service's record: GET {url}: not JSON: {e}"))?;
        let mismatches = expect.mismatches(&record);
        if mismatches.is_empty() {
            return Ok(());
        }
        let mut report = format!("  - MISMATCH {}\n", expect.describe());
        for (name, want, got) in &mismatches {
            report.push_str(&format!(
                "      {name}: expected {}, service has {}\n",
                compact(want),
                compact(got)
            ));
        }
        let shown: String = compact(&record).chars().take(500).collect();
        report.push_str(&format!("  the record: {shown}"));
        Err(report)
    }

    async fn set_fixtures(&self, sender: &str, case: &TestCase) -> Result<(), String> {
        let mut events = vec![
            json!({"event": "action", "name": "action_session_start"}),
            json!({"event": "session_started"}),
        ];
        if !case.metadata.is_empty() {
            events.push(json!({"event": "slot", "name": "session_started_metadata",
                               "value": Value::Object(case.metadata.clone())}));
        }
        for (name, value) in &case.fixture_slots {
            events.push(json!({"event": "slot", "name": name, "value": value}));
        }
        events.push(json!({"event": "action", "name": "action_listen"}));
        let url = self.rasa_url(&format!("/conversations/{sender}/tracker/events"), &[]);
        let response = self
            .client
            .post(&url)
            .json(&events)
            .send()
            .await
            .map_err(|e| format!("setting the fixtures failed: POST {url}: {e}"))?;
        expect_success("setting the fixtures", "POST", &url, response)
            .await
            .map(|_| ())
    }

    async fn service_put(&self, put: &ServicePut) -> Result<(), String> {
        let base =
            self.args.service.as_deref().ok_or_else(|| {
                "a step moves the facts, but no --service URL was given".to_owned()
            })?;
        let url = format!("{}{}", trim_base(base), put.path);
        let mut request = self.client.put(&url).json(&put.body);
        if let Some(token) = &self.args.service_token {
            request = request.bearer_auth(token);
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("moving the facts failed: PUT {url}: {e}"))?;
        expect_success("moving the facts", "PUT", &url, response)
            .await
            .map(|_| ())
    }

    async fn send(
        &self,
        sender: &str,
        text: &str,
        metadata: &Map<String, Value>,
    ) -> Result<(), String> {
        let url = self.rasa_url("/webhooks/rest/webhook", &[]);
        let body = json!({"sender": sender, "message": text, "metadata": metadata});
        let response = self
            .client
            .post(&url)
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("user: {text}\n  sending the message failed: POST {url}: {e}"))?;
        expect_success(
            &format!("user: {text}\n  sending the message"),
            "POST",
            &url,
            response,
        )
        .await
        .map(|_| ())
    }

    async fn tracker_events(&self, sender: &str) -> Result<Vec<Value>, String> {
        let url = self.rasa_url(
            &format!("/conversations/{sender}/tracker"),
            &[("include_events", "ALL")],
        );
        let response = self
            .client
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("reading the tracker failed: GET {url}: {e}"))?;
        let body = expect_success("reading the tracker", "GET", &url, response).await?;
        let tracker: Value = serde_json::from_str(&body)
            .map_err(|e| format!("reading the tracker: GET {url}: not JSON: {e}"))?;
        Ok(tracker
            .get("events")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default())
    }
}

async fn expect_success(
    what: &str,
    method: &str,
    url: &str,
    response: reqwest::Response,
) -> Result<String, String> {
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|e| format!("{what} failed: {method} {url}: reading the answer: {e}"))?;
    if status.is_success() {
        Ok(body)
    } else {
        let shown: String = body.chars().take(500).collect();
        Err(format!(
            "{what} failed: {method} {url} answered {status}: {shown}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
fixtures:
  - known_target:
      - subscription: WS-SUB-3310
      - change_type: switch_to_monthly
metadata:
  - acct_7:
      account_id: acct-7
  - charged_early:
      actiongate_service_put:
        path: /v1/subscriptions/WS-SUB-3304
        body:
          id: WS-SUB-3304
          revision_note: ignored by the runner
      channel: web
test_cases:
  - test_case: race
    metadata: acct_7
    steps:
      - utter: utter_greet
      - user: "Please stop the renewal of WS-SUB-3304"
      - utter: utter_confirm_subscription_change
      - slot_was_set:
          - change_tag: "WS-SUB-3304 stop_renewal r4"
          - change_status
      - user: "yes"
        metadata: charged_early
      - bot: "I have not changed anything."
      - slot_was_not_set:
          - change_status: applied
  - test_case: with fixtures
    fixtures:
      - known_target
    steps:
      - user: go ahead
"#;

    fn parse(text: &str) -> Result<TestFile, ConverseError> {
        parse_test_file(Path::new("t.yml"), text)
    }

    #[test]
    fn parses_rasa_pro_test_case_format() {
        let file = parse(SAMPLE).expect("parses");
        assert_eq!(file.cases.len(), 2);
        let race = &file.cases[0];
        assert_eq!(race.name, "race");
        assert_eq!(race.metadata.get("account_id"), Some(&json!("acct-7")));
        assert_eq!(race.steps.len(), 8);
        assert_eq!(race.steps[0], Step::Utter("utter_greet".into()));
        match &race.steps[1] {
            Step::User {
                text,
                metadata,
                service_puts,
                service_expects,
            } => {
                assert_eq!(text, "Please stop the renewal of WS-SUB-3304");
                assert!(service_expects.is_empty());
                assert_eq!(metadata.get("account_id"), Some(&json!("acct-7")));
                assert!(service_puts.is_empty());
            }
            other => panic!("not a user step: {other:?}"),
        }
        assert_eq!(
            race.steps[3],
            Step::SlotWasSet {
                name: "change_tag".into(),
                value: Some(json!("WS-SUB-3304 stop_renewal r4"))
            }
        );
        assert_eq!(
            race.steps[4],
            Step::SlotWasSet {
                name: "change_status".into(),
                value: None
            }
        );
        match &race.steps[5] {
            Step::User {
                text,
                metadata,
                service_puts,
                ..
            } => {
                assert_eq!(text, "yes");
                // merged: the test case's and the step's, the service key stripped
                assert_eq!(metadata.get("account_id"), Some(&json!("acct-7")));
                assert_eq!(metadata.get("channel"), Some(&json!("web")));
                assert!(!metadata.contains_key(SERVICE_PUT_KEY));
                assert_eq!(service_puts.len(), 1);
                assert_eq!(service_puts[0].path, "/v1/subscriptions/WS-SUB-3304");
                assert_eq!(service_puts[0].body["id"], json!("WS-SUB-3304"));
            }
            other => panic!("not a user step: {other:?}"),
        }
        assert_eq!(
            race.steps[6],
            Step::Bot("I have not changed anything.".into())
        );
        assert_eq!(
            race.steps[7],
            Step::SlotWasNotSet {
                name: "change_status".into(),
                value: Some(json!("applied"))
            }
        );

        let fixtures = &file.cases[1];
        assert_eq!(
            fixtures.fixture_slots,
            vec![
                ("subscription".to_owned(), json!("WS-SUB-3310")),
                ("change_type".to_owned(), json!("switch_to_monthly")),
            ]
        );
        assert!(fixtures.metadata.is_empty());
        assert!(race.final_expects.is_empty());
        assert!(!fixtures.uses_service());
        assert!(race.uses_service());
    }

    const EXPECTING: &str = r#"
metadata:
  - acct_7_record_untouched:
      account_id: acct-7
      actiongate_service_expect:
        path: /v1/subscriptions/WS-SUB-3304
        fields: {revision: 4, status: active}
  - record_still_at_r4:
      actiongate_service_expect:
        - {path: /v1/subscriptions/WS-SUB-3304, fields: {revision: 4}}
        - {path: /v1/subscriptions/WS-SUB-3310, fields: {status: active, plan: quarterly}}
      channel: web
  - checked_then_moved:
      actiongate_service_expect: {path: /v1/subscriptions/WS-SUB-3304, fields: {revision: 4}}
      actiongate_service_put: {path: /v1/subscriptions/WS-SUB-3304, body: {id: WS-SUB-3304}}
test_cases:
  - test_case: no_then_ok
    metadata: acct_7_record_untouched
    steps:
      - user: "Please stop the renewal of WS-SUB-3304"
      - user: "No, leave it"
        metadata: record_still_at_r4
      - user: "ok thanks"
        metadata: checked_then_moved
"#;

    #[test]
    fn service_expectations_on_user_steps_and_test_cases() {
        let file = parse(EXPECTING).expect("parses");
        let case = &file.cases[0];
        // the test case's entry: checked after the last step, stripped from the metadata
        // sent with every message
        assert_eq!(case.metadata.get("account_id"), Some(&json!("acct-7")));
        assert!(!case.metadata.contains_key(SERVICE_EXPECT_KEY));
        assert_eq!(
            case.final_expects,
            vec![ServiceExpect {
                path: "/v1/subscriptions/WS-SUB-3304".into(),
                fields: json!({"revision": 4, "status": "active"})
                    .as_object()
                    .cloned()
                    .unwrap(),
            }]
        );
        assert!(case.uses_service());
        let users: Vec<_> = case
            .steps
            .iter()
            .map(|s| match s {
                Step::User {
                    metadata,
                    service_expects,
                    service_puts,
                    ..
                } => (metadata, service_expects, service_puts),
                other => panic!("not a user step: {other:?}"),
            })
            .collect();
        assert!(users[0].1.is_empty());
        assert!(!users[0].0.contains_key(SERVICE_EXPECT_KEY));
        // a list, in order; the other keys of the entry are merged
        assert_eq!(users[1].1.len(), 2);
        assert_eq!(users[1].1[0].path, "/v1/subscriptions/WS-SUB-3304");
        assert_eq!(users[1].1[1].fields.get("plan"), Some(&json!("quarterly")));
        assert_eq!(users[1].0.get("channel"), Some(&json!("web")));
        assert_eq!(users[1].0.get("account_id"), Some(&json!("acct-7")));
        assert!(!users[1].0.contains_key(SERVICE_EXPECT_KEY));
        // an entry may both check and move
        assert_eq!(users[2].1.len(), 1);
        assert_eq!(users[2].2.len(), 1);
        assert!(!users[2].0.contains_key(SERVICE_EXPECT_KEY));
        assert!(!users[2].0.contains_key(SERVICE_PUT_KEY));
    }

    #[test]
    fn a_service_expectation_compares_the_named_fields_only() {
        let expect = ServiceExpect {
            path: "/v1/subscriptions/WS-SUB-3304".into(),
            fields: json!({"revision": 4, "status": "active"})
                .as_object()
                .cloned()
                .unwrap(),
        };
        let record =
            json!({"id": "WS-SUB-3304", "revision": 4.0, "status": "active", "plan": "monthly"});
        assert!(expect.mismatches(&record).is_empty());
        let moved = json!({"id": "WS-SUB-3304", "revision": 5, "status": "ending"});
        assert_eq!(
            expect.mismatches(&moved),
            vec![
                ("revision".to_owned(), json!(4), json!(5)),
                ("status".to_owned(), json!("active"), json!("ending")),
            ]
        );
        // a missing field is null
        assert_eq!(
            expect.mismatches(&json!({"status": "active"})),
            vec![("revision".to_owned(), json!(4), Value::Null)]
        );
    }

    #[test]
    fn rejects_malformed_service_expectations() {
        let on_step = |expect: &str| {
            format!(
                "metadata:\n  - m:\n      actiongate_service_expect: {expect}\ntest_cases:\n  - test_case: t\n    steps:\n      - user: hi\n        metadata: m\n"
            )
        };
        let on_case = |expect: &str| {
            format!(
                "metadata:\n  - m:\n      actiongate_service_expect: {expect}\ntest_cases:\n  - test_case: t\n    metadata: m\n    steps:\n      - user: hi\n"
            )
        };
        let bad = [
            // no leading slash
            "{path: v1/subscriptions/A, fields: {revision: 4}}",
            // nothing to check
            "{path: /v1/subscriptions/A, fields: {}}",
            // no fields key
            "{path: /v1/subscriptions/A}",
            // an unknown key
            "{path: /v1/subscriptions/A, fields: {revision: 4}, body: {}}",
            // fields not a mapping
            "{path: /v1/subscriptions/A, fields: [revision]}",
            // an empty list
            "[]",
            // not an object
            "/v1/subscriptions/A",
        ];
        for expect in bad {
            for text in [on_step(expect), on_case(expect)] {
                assert!(
                    matches!(parse(&text), Err(ConverseError::Format { .. })),
                    "accepted: {text}"
                );
            }
        }
        assert!(parse(&on_step("{path: /a, fields: {revision: 4}}")).is_ok());
        assert!(parse(&on_case("{path: /a, fields: {revision: 4}}")).is_ok());
    }

    #[test]
    fn a_list_of_service_puts_is_accepted() {
        let text = r#"
metadata:
  - two_moves:
      actiongate_service_put:
        - {path: /v1/subscriptions/A, body: {id: A}}
        - {path: /v1/subscriptions/B, body: {id: B}}
test_cases:
  - test_case: t
    steps:
      - user: hi
        metadata: two_moves
"#;
        let file = parse(text).expect("parses");
        match &file.cases[0].steps[0] {
            Step::User { service_puts, .. } => assert_eq!(service_puts.len(), 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rejects_what_rasa_pro_would_reject_or_the_runner_cannot_honour() {
        let cases = [
            // unknown step key
            "test_cases:\n  - test_case: t\n    steps:\n      - usr: hi\n",
            // two kinds in one step
            "test_cases:\n  - test_case: t\n    steps:\n      - user: hi\n        utter: utter_x\n",
            // metadata on a bot step
            "metadata:\n  - m:\n      a: 1\ntest_cases:\n  - test_case: t\n    steps:\n      - utter: x\n        metadata: m\n",
            // unknown fixture
            "test_cases:\n  - test_case: t\n    fixtures: [nope]\n    steps:\n      - user: hi\n",
            // unknown metadata on a step
            "test_cases:\n  - test_case: t\n    steps:\n      - user: hi\n        metadata: nope\n",
            // service moves on the test case's metadata
            "metadata:\n  - m:\n      actiongate_service_put: {path: /x, body: {}}\ntest_cases:\n  - test_case: t\n    metadata: m\n    steps:\n      - user: hi\n",
            // a service path without a leading slash
            "metadata:\n  - m:\n      actiongate_service_put: {path: x, body: {}}\ntest_cases:\n  - test_case: t\n    steps:\n      - user: hi\n        metadata: m\n",
            // no steps
            "test_cases:\n  - test_case: t\n    steps: []\n",
            // no test_cases key
            "fixtures: []\n",
            // unknown key on the test case
            "test_cases:\n  - test_case: t\n    stepz: []\n",
        ];
        for text in cases {
            assert!(
                matches!(parse(text), Err(ConverseError::Format { .. })),
                "accepted: {text}"
            );
        }
    }

    #[test]
    fn the_project_conversations_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conversations");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        let mut seen = 0;
        for entry in entries {
            let path = entry.expect("dir entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("yml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("readable");
            let file =
                parse_test_file(&path, &text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(!file.cases.is_empty(), "{}", path.display());
            seen += 1;
        }
        assert!(seen > 0, "no conversation files in {}", dir.display());
    }

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
        assert!(check_turn(&refs, &turn).iter().all(|c| c.ok));

        // bot steps out of order fail
        let steps = [
            Step::Utter("utter_confirm_subscription_change".into()),
            Step::Utter("utter_subscription_change_blocked".into()),
        ];
        let refs: Vec<&Step> = steps.iter().collect();
        let checks = check_turn(&refs, &turn);
        assert!(checks[0].ok);
        assert!(!checks[1].ok);

        // an utter step and a bot step may both match the same message
        let steps = [
            Step::Utter("utter_confirm_subscription_change".into()),
            Step::Bot("Please confirm".into()),
        ];
        let refs: Vec<&Step> = steps.iter().collect();
        assert!(check_turn(&refs, &turn).iter().all(|c| c.ok));

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
        assert!(check_turn(&refs, &turn).iter().all(|c| !c.ok));
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(value_eq(&json!(5), &json!(5.0)));
        assert!(value_eq(&json!({"a": [1]}), &json!({"a": [1.0]})));
        assert!(!value_eq(&json!("5"), &json!(5)));
    }

    #[test]
    fn sender_ids_are_fresh_and_url_safe() {
        let a = fresh_sender("Style Box race / r5");
        let b = fresh_sender("Style Box race / r5");
        assert_ne!(a, b);
        assert!(
            a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
            "{a}"
        );
        assert_eq!(encode_query("a b&c"), "a%20b%26c");
    }

    #[test]
    fn rasa_urls_carry_the_token() {
        let args = ConverseArgs {
            rasa: "http://127.0.0.1:5005/".into(),
            rasa_token: Some("s e".into()),
            ..ConverseArgs::default()
        };
        let _ = rustls::crypto::ring::default_provider().install_default();
        let runner = Runner {
            args: &args,
            client: reqwest::Client::new(),
        };
        assert_eq!(
            runner.rasa_url("/conversations/x/tracker", &[("include_events", "ALL")]),
            "http://127.0.0.1:5005/conversations/x/tracker?include_events=ALL&token=s%20e"
        );
    }
}
