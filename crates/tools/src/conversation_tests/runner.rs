//! Running test cases: a fresh sender each, through Rasa's REST channel and HTTP API.

use super::*;

/// Every byte but RFC 3986's unreserved characters is percent-encoded.
const NOT_UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

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

    testkit::install_crypto();
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

pub(super) struct Runner<'a> {
    args: &'a ConverseArgs,
    client: reqwest::Client,
}

pub(super) static SENDER_COUNTER: AtomicU64 = AtomicU64::new(0);

pub(super) fn fresh_sender(case: &str) -> String {
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

pub(super) fn trim_base(url: &str) -> &str {
    url.trim_end_matches('/')
}

/// Percent-encodes a query parameter value (unreserved characters stay).
pub(super) fn encode_query(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, NOT_UNRESERVED).to_string()
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
                triggers,
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
                for trigger in triggers {
                    self.trigger_intent(&sender, trigger)
                        .await
                        .map_err(|e| format!("sender: {sender}\n  before user: {text}\n{e}"))?;
                }
                self.send(&sender, text, metadata).await?;
            }
            if expected.is_empty() {
                continue;
            }
            let events = self.tracker_events(&sender).await?;
            let turn = latest_turn(&events);
            let checks = match_turn(&expected, &turn);
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

    /// Triggers the intent in the conversation (Rasa's `trigger_intent`); with `utter`,
    /// checks that the bot answered it with that response. The error is a report.
    async fn trigger_intent(&self, sender: &str, trigger: &TriggerIntent) -> Result<(), String> {
        let path = format!(
            "/conversations/{}/trigger_intent",
            percent_encoding::utf8_percent_encode(sender, NOT_UNRESERVED)
        );
        let url = self.rasa_url(&path, &[]);
        let response = self
            .client
            .post(&url)
            .json(&trigger.body())
            .send()
            .await
            .map_err(|e| format!("  triggering {} failed: POST {url}: {e}", trigger.name))?;
        expect_success(
            &format!("  triggering {}", trigger.name),
            "POST",
            &url,
            response,
        )
        .await?;
        if trigger.utter.is_none() {
            return Ok(());
        }
        let events = self.tracker_events(sender).await?;
        triggered_turn_check(trigger, &latest_turn(&events))
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

/// With `utter`, the turn that followed a triggered intent must hold a bot message of that
/// response; the error is a report showing the turn.
pub(super) fn triggered_turn_check(
    trigger: &TriggerIntent,
    turn: &[TurnEvent],
) -> Result<(), String> {
    let Some(want) = &trigger.utter else {
        return Ok(());
    };
    let answered = turn.iter().any(|event| {
        matches!(event, TurnEvent::Bot { utter_action, .. }
            if utter_action.as_deref() == Some(want.as_str()))
    });
    if answered {
        return Ok(());
    }
    let mut report = format!(
        "  - MISSING {}\n  the bot's answer to it:\n",
        trigger.describe()
    );
    if turn.is_empty() {
        report.push_str("    (no bot or slot events)\n");
    }
    for event in turn {
        report.push_str(&format!("    {}\n", event.describe()));
    }
    Err(report.trim_end().to_owned())
}

pub(super) async fn expect_success(
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
    fn a_triggered_intent_must_be_answered_with_the_named_response() {
        let reminder = TriggerIntent {
            name: "EXTERNAL_still_there".into(),
            entities: None,
            utter: Some("utter_still_there".into()),
        };
        let answered = [TurnEvent::Bot {
            utter_action: Some("utter_still_there".into()),
            text: Some("Are you still there?".into()),
        }];
        assert!(triggered_turn_check(&reminder, &answered).is_ok());
        let silent: [TurnEvent; 0] = [];
        let report = triggered_turn_check(&reminder, &silent).unwrap_err();
        assert!(report.contains("MISSING actiongate_trigger_intent: EXTERNAL_still_there (answered by utter_still_there)"), "{report}");
        assert!(report.contains("(no bot or slot events)"), "{report}");
        let other = [TurnEvent::Bot {
            utter_action: Some("utter_default".into()),
            text: Some("Sorry".into()),
        }];
        assert!(triggered_turn_check(&reminder, &other)
            .unwrap_err()
            .contains("utter_default"));
        // without `utter`, nothing is required of the answer
        let unchecked = TriggerIntent {
            utter: None,
            ..reminder
        };
        assert!(triggered_turn_check(&unchecked, &silent).is_ok());
        assert_eq!(unchecked.body(), json!({"name": "EXTERNAL_still_there"}));
        let with_entities = TriggerIntent {
            entities: Some(json!({"change_status": "applied"})),
            ..unchecked
        };
        assert_eq!(
            with_entities.body(),
            json!({"name": "EXTERNAL_still_there", "entities": {"change_status": "applied"}})
        );
    }

    #[test]
    fn rasa_urls_carry_the_token() {
        let args = ConverseArgs {
            rasa: "http://127.0.0.1:5005/".into(),
            rasa_token: Some("s e".into()),
            ..ConverseArgs::default()
        };
        testkit::install_crypto();
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
