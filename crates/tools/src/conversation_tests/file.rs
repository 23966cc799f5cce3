//! The test-case files: Rasa Pro's end-to-end format, read into test cases and steps.

use super::*;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    #[serde(default)]
    fixtures: Vec<BTreeMap<String, Vec<BTreeMap<String, Value>>>>,
    #[serde(default)]
    metadata: Vec<BTreeMap<String, Map<String, Value>>>,
    test_cases: Vec<RawTestCase>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTestCase {
    test_case: String,
    #[serde(default)]
    fixtures: Vec<String>,
    #[serde(default)]
    metadata: Option<String>,
    steps: Vec<RawStep>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStep {
    user: Option<String>,
    metadata: Option<String>,
    bot: Option<String>,
    utter: Option<String>,
    slot_was_set: Option<Vec<RawSlot>>,
    slot_was_not_set: Option<Vec<RawSlot>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawSlot {
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

/// An intent to trigger before a user message: `POST
/// {rasa}/conversations/{sender}/trigger_intent` with `{"name", "entities"}`, as a reminder
/// or another system would (Rasa records it as an external `user` event, not the
/// customer's, and runs what its rules answer).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerIntent {
    /// The intent, e.g. `EXTERNAL_still_there`; it must be in the assistant's domain.
    pub name: String,
    /// Entities to pass along (a mapping of entity to value, or Rasa's list form).
    #[serde(default)]
    pub entities: Option<Value>,
    /// The response the bot must answer the intent with, e.g. `utter_still_there`.
    #[serde(default)]
    pub utter: Option<String>,
}

impl TriggerIntent {
    /// The request body for Rasa's `trigger_intent`.
    pub(super) fn body(&self) -> Value {
        let mut body = json!({ "name": self.name });
        if let Some(entities) = &self.entities {
            body["entities"] = entities.clone();
        }
        body
    }

    pub(super) fn describe(&self) -> String {
        match &self.utter {
            Some(utter) => format!("{TRIGGER_INTENT_KEY}: {} (answered by {utter})", self.name),
            None => format!("{TRIGGER_INTENT_KEY}: {}", self.name),
        }
    }
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

    pub(super) fn describe(&self) -> String {
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
        /// `actiongate_service_put`, `actiongate_service_expect` and
        /// `actiongate_trigger_intent`.
        metadata: Map<String, Value>,
        /// Service records to check before the message (and before `service_puts`).
        service_expects: Vec<ServiceExpect>,
        /// Service updates to make before sending the message.
        service_puts: Vec<ServicePut>,
        /// Intents to trigger after `service_puts`, right before the message.
        triggers: Vec<TriggerIntent>,
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
    pub(super) fn describe(&self) -> String {
        match self {
            Step::User { text, triggers, .. } if !triggers.is_empty() => {
                let names: Vec<&str> = triggers.iter().map(|t| t.name.as_str()).collect();
                format!(
                    "user: {text} (after {TRIGGER_INTENT_KEY}: {})",
                    names.join(", ")
                )
            }
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

pub(super) fn compact(value: &Value) -> String {
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
                if values.contains_key(TRIGGER_INTENT_KEY) {
                    return Err(format(format!(
                        "test case `{case_name}`: metadata `{name}` carries {TRIGGER_INTENT_KEY}; \
                         name it on the user step before which the bot is to speak, not on the test case"
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

pub(super) fn convert_step(
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
        let mut triggers = Vec::new();
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
                } else if key == TRIGGER_INTENT_KEY {
                    triggers = parse_triggers(value)
                        .map_err(|e| format!("metadata `{name}`: {TRIGGER_INTENT_KEY}: {e}"))?;
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
            triggers,
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

pub(super) fn parse_service_puts(value: &Value) -> Result<Vec<ServicePut>, String> {
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

pub(super) fn parse_triggers(value: &Value) -> Result<Vec<TriggerIntent>, String> {
    let items: Vec<Value> = match value {
        Value::Array(items) => items.clone(),
        other => vec![other.clone()],
    };
    if items.is_empty() {
        return Err("an empty list".to_owned());
    }
    let mut triggers = Vec::new();
    for item in items {
        let trigger: TriggerIntent = serde_json::from_value(item).map_err(|e| e.to_string())?;
        if trigger.name.trim().is_empty() {
            return Err("no intent name".to_owned());
        }
        if let Some(entities) = &trigger.entities {
            if !(entities.is_object() || entities.is_array()) {
                return Err(format!(
                    "intent `{}`: entities must be a mapping or a list",
                    trigger.name
                ));
            }
        }
        triggers.push(trigger);
    }
    Ok(triggers)
}

pub(super) fn parse_service_expects(value: &Value) -> Result<Vec<ServiceExpect>, String> {
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
                triggers,
            } => {
                assert_eq!(text, "Please stop the renewal of WS-SUB-3304");
                assert!(service_expects.is_empty());
                assert!(triggers.is_empty());
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
    fn intents_to_trigger_before_a_user_message() {
        let text = r#"
metadata:
  - acct_7:
      account_id: acct-7
  - reminded:
      actiongate_trigger_intent: {name: EXTERNAL_still_there, utter: utter_still_there}
      actiongate_service_expect: {path: /v1/subscriptions/A, fields: {revision: 4}}
      channel: web
  - twice:
      actiongate_trigger_intent:
        - {name: EXTERNAL_still_there}
        - {name: subscription_change_decided, entities: {change_status: applied}}
test_cases:
  - test_case: t
    metadata: acct_7
    steps:
      - user: "Please stop the renewal of WS-SUB-3304"
      - user: "yes"
        metadata: reminded
      - user: "yes"
        metadata: twice
"#;
        let file = parse(text).expect("parses");
        let users: Vec<_> = file.cases[0]
            .steps
            .iter()
            .map(|s| match s {
                Step::User {
                    metadata,
                    service_expects,
                    triggers,
                    ..
                } => (metadata, service_expects, triggers),
                other => panic!("not a user step: {other:?}"),
            })
            .collect();
        assert!(users[0].2.is_empty());
        assert_eq!(
            users[1].2,
            &vec![TriggerIntent {
                name: "EXTERNAL_still_there".into(),
                entities: None,
                utter: Some("utter_still_there".into()),
            }]
        );
        // the other keys of the entry still work, and the key is not sent along
        assert_eq!(users[1].1.len(), 1);
        assert_eq!(users[1].0.get("channel"), Some(&json!("web")));
        assert_eq!(users[1].0.get("account_id"), Some(&json!("acct-7")));
        assert!(!users[1].0.contains_key(TRIGGER_INTENT_KEY));
        assert_eq!(users[2].2.len(), 2);
        assert_eq!(
            users[2].2[1].entities,
            Some(json!({"change_status": "applied"}))
        );
        assert_eq!(
            file.cases[0].steps[1].describe(),
            "user: yes (after actiongate_trigger_intent: EXTERNAL_still_there)"
        );
        // a trigger alone does not need the service
        let alone = "metadata:\n  - m:\n      actiongate_trigger_intent: {name: EXTERNAL_x}\ntest_cases:\n  - test_case: t\n    steps:\n      - user: hi\n        metadata: m\n";
        assert!(!parse(alone).expect("parses").cases[0].uses_service());

        let on_step = |trigger: &str| {
            format!(
                "metadata:\n  - m:\n      actiongate_trigger_intent: {trigger}\ntest_cases:\n  - test_case: t\n    steps:\n      - user: hi\n        metadata: m\n"
            )
        };
        let bad = [
            // no name
            "{utter: utter_still_there}",
            "{name: \"  \"}",
            // an unknown key
            "{name: EXTERNAL_x, text: hi}",
            // entities neither a mapping nor a list
            "{name: EXTERNAL_x, entities: applied}",
            // an empty list
            "[]",
            // not an object
            "EXTERNAL_x",
        ];
        for trigger in bad {
            let text = on_step(trigger);
            assert!(
                matches!(parse(&text), Err(ConverseError::Format { .. })),
                "accepted: {text}"
            );
        }
        // on the test case's metadata (which goes with every message): refused
        let on_case = "metadata:\n  - m:\n      actiongate_trigger_intent: {name: EXTERNAL_x}\ntest_cases:\n  - test_case: t\n    metadata: m\n    steps:\n      - user: hi\n";
        assert!(matches!(parse(on_case), Err(ConverseError::Format { .. })));
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
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/conversations");
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("the project's conversations, {}: {e}", dir.display()));
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
}
