//! Chats as Rasa 3.6 records them, built event by event and played against a running
//! action server: what the consent matrix, the load drivers and the integration tests
//! drive the server with. Rasa's part (recording actions, rendering responses, filling
//! slots from entities) is done here as Rasa does it.

use serde::Serialize;
use serde_json::{json, Map, Value};

/// The responses shipped with the project; the confirmation question is rendered from
/// its template.
pub const RESPONSES: &str = include_str!("../../../responses/subscription_change.yml");

/// The responses as Rasa sends them in the domain (JSON), from [`RESPONSES`].
pub fn domain_responses() -> &'static Value {
    static RESPONSES_JSON: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    RESPONSES_JSON.get_or_init(|| {
        let doc: Value = serde_yaml_ng::from_str(RESPONSES).expect("the responses file is YAML");
        doc["responses"].clone()
    })
}

/// The confirmation template, from [`RESPONSES`] (read once).
pub fn confirmation_template() -> String {
    domain_responses()["utter_confirm_subscription_change"][0]["text"]
        .as_str()
        .expect("the confirmation response has a text")
        .to_owned()
}

/// Where the webhook is.
#[derive(Clone)]
pub struct Endpoint {
    pub http: reqwest::Client,
    pub url: String,
}

/// Anything that can take a webhook call.
pub trait Webhook {
    fn endpoint(&self) -> &Endpoint;
}

impl Webhook for Endpoint {
    fn endpoint(&self) -> &Endpoint {
        self
    }
}

impl Endpoint {
    pub fn new(url: &str) -> Self {
        Self::with_client(url, |b| b)
    }

    /// An endpoint whose client is built from `configure(reqwest::Client::builder())`.
    pub fn with_client(
        url: &str,
        configure: impl FnOnce(reqwest::ClientBuilder) -> reqwest::ClientBuilder,
    ) -> Self {
        crate::install_crypto();
        Self {
            http: configure(reqwest::Client::builder())
                .build()
                .expect("a client"),
            url: url.trim_end_matches('/').to_owned(),
        }
    }

    /// POSTs a webhook body; the status and the JSON answer (Null when not JSON).
    pub async fn webhook(&self, body: &Value) -> Result<(u16, Value), reqwest::Error> {
        self.webhook_bytes(serde_json::to_vec(body).expect("a JSON value serialises"))
            .await
    }

    /// POSTs a webhook body already written as JSON; the status and the JSON answer (Null
    /// when not JSON).
    pub async fn webhook_bytes(&self, body: Vec<u8>) -> Result<(u16, Value), reqwest::Error> {
        let response = self
            .http
            .post(format!("{}/webhook", self.url))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await?;
        Ok((
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    }
}

/// A chat as Rasa 3.6 records it: the events, the slots, the clock.
#[derive(Clone, Debug)]
pub struct Chat {
    pub sender: String,
    pub events: Vec<Value>,
    pub slots: Map<String, Value>,
    /// The clock, in epoch seconds; every event advances it half a second.
    pub t: f64,
    pub latest_message: Value,
    messages: u64,
}

fn meta() -> Value {
    json!({"model_id": "0810b3c6a21946a3bd4a4bf112e5a73f", "assistant_id": "subscription-change-probe"})
}

impl Chat {
    /// A new session; `account` goes into `session_started_metadata`, where Rasa puts the
    /// REST channel's metadata.
    pub fn new(sender: &str, account: Option<&str>) -> Self {
        let mut c = Self {
            sender: sender.to_owned(),
            events: Vec::new(),
            slots: Map::new(),
            t: 1_796_027_823.0,
            latest_message: json!({}),
            messages: 0,
        };
        c.session_start(account.map_or_else(|| json!({}), |a| json!({"account_id": a})));
        c
    }

    fn tick(&mut self) -> f64 {
        self.t += 0.5;
        self.t
    }

    /// As Rasa 3.6.21 starts a session with metadata (read off a real tracker): the
    /// metadata slot, `action_session_start`, `session_started`, the metadata slot again,
    /// `action_listen`.
    pub fn session_start(&mut self, metadata: Value) {
        if metadata.as_object().is_some_and(|m| !m.is_empty()) {
            self.slot("session_started_metadata", metadata.clone());
        }
        let t = self.tick();
        self.events.push(json!({"event": "action", "timestamp": t, "metadata": meta(), "name": "action_session_start", "policy": null, "confidence": 1.0, "action_text": null, "hide_rule_turn": false}));
        let t = self.tick();
        self.events
            .push(json!({"event": "session_started", "timestamp": t, "metadata": meta()}));
        self.slot("session_started_metadata", metadata);
        self.action("action_listen");
    }

    /// A bare event (`restart`, `rewind`, `undo`, ...).
    pub fn marker(&mut self, kind: &str) {
        let t = self.tick();
        self.events.push(json!({"event": kind, "timestamp": t}));
    }

    pub fn action(&mut self, name: &str) {
        let t = self.tick();
        self.events.push(json!({"event": "action", "timestamp": t, "metadata": meta(), "name": name, "policy": "RulePolicy", "confidence": 1.0, "action_text": null, "hide_rule_turn": false}));
    }

    /// A `slot` event, and the slot's value.
    pub fn slot(&mut self, name: &str, value: Value) {
        let t = self.tick();
        self.events.push(json!({"event": "slot", "timestamp": t, "metadata": meta(), "name": name, "value": value}));
        self.slots.insert(name.to_owned(), value);
    }

    /// A customer message; its entities fill slots of the same name, as Rasa's
    /// `from_entity` mappings do.
    pub fn user(&mut self, text: &str, intent: &str, entities: &[(&str, &str)]) {
        let t = self.tick();
        self.messages += 1;
        let message_id = format!("{:032x}", self.messages * 7919 + t as u64);
        let ents: Vec<Value> = entities
            .iter()
            .map(|(e, v)| json!({"entity": e, "start": 0, "end": 1, "value": v, "extractor": "RegexEntityExtractor"}))
            .collect();
        let parse = json!({"intent": {"name": intent, "confidence": 1.0}, "entities": ents, "text": text, "message_id": message_id, "metadata": {}, "text_tokens": [[0, 3]]});
        self.events.push(json!({"event": "user", "timestamp": t, "metadata": meta(), "text": text, "parse_data": parse, "input_channel": "rest", "message_id": message_id}));
        self.latest_message = parse;
        let t = self.tick();
        self.events.push(json!({"event": "user_featurization", "timestamp": t, "use_text_for_featurization": false}));
        for (e, v) in entities {
            self.slot(e, json!(v));
        }
    }

    /// A bot message, with `utter_action` stamped when a response produced it.
    pub fn bot(&mut self, text: &str, utter_action: Option<&str>) {
        let t = self.tick();
        let mut metadata = meta();
        if let Some(u) = utter_action {
            metadata["utter_action"] = json!(u);
        }
        self.events.push(json!({"event": "bot", "timestamp": t, "metadata": metadata, "text": text, "data": {"elements": null, "quick_replies": null, "buttons": null, "attachment": null, "image": null, "custom": null}}));
    }

    /// The confirmation question as Rasa renders it from the slots.
    pub fn confirmation_text(&self) -> String {
        let mut text = confirmation_template();
        for (k, v) in &self.slots {
            if let Some(s) = v.as_str() {
                text = text.replace(&format!("{{{k}}}"), s);
            }
        }
        text
    }

    /// Rasa runs the confirmation response, with `text` as the rendered question.
    pub fn ask(&mut self, text: &str) {
        self.action("utter_confirm_subscription_change");
        self.bot(text, Some("utter_confirm_subscription_change"));
        self.action("action_listen");
    }

    /// Rasa runs the confirmation response, rendered from the slots.
    pub fn ask_confirmation(&mut self) {
        let text = self.confirmation_text();
        self.ask(&text);
    }

    /// Advances the clock.
    pub fn wait(&mut self, seconds: f64) {
        self.t += seconds;
    }

    /// The webhook body for `action`, as Rasa 3.6.21 sends it: the domain carries the
    /// project's responses, so the question is held to the rendered template.
    pub fn request(&self, action: &str) -> Value {
        json!({
            "next_action": action,
            "sender_id": self.sender,
            "tracker": {
                "sender_id": self.sender,
                "slots": self.slots,
                "latest_message": self.latest_message,
                "latest_event_time": self.t,
                "followup_action": null,
                "paused": false,
                "events": self.events,
                "latest_input_channel": "rest",
                "active_loop": {},
                "latest_action": {"action_name": action},
                "latest_action_name": action,
            },
            "version": "3.6.21",
            "domain": {"version": "3.1", "intents": ["affirm", "deny"], "responses": domain_responses(), "actions": []},
        })
    }

    /// The body of [`Chat::request`], written straight to JSON from the chat (its events
    /// are not copied into a new tree first): what [`Chat::run`] and a load send.
    pub fn request_bytes(&self, action: &str) -> Vec<u8> {
        #[derive(Serialize)]
        struct Body<'a> {
            next_action: &'a str,
            sender_id: &'a str,
            tracker: Tracker<'a>,
            version: &'static str,
            domain: Domain,
        }
        #[derive(Serialize)]
        struct Tracker<'a> {
            sender_id: &'a str,
            slots: &'a Map<String, Value>,
            latest_message: &'a Value,
            latest_event_time: f64,
            followup_action: Option<()>,
            paused: bool,
            events: RasaOrder<'a>,
            latest_input_channel: &'static str,
            active_loop: Map<String, Value>,
            latest_action: LatestAction<'a>,
            latest_action_name: &'a str,
        }
        #[derive(Serialize)]
        struct LatestAction<'a> {
            action_name: &'a str,
        }
        #[derive(Serialize)]
        struct Domain {
            version: &'static str,
            intents: [&'static str; 2],
            responses: &'static Value,
            actions: [(); 0],
        }
        serde_json::to_vec(&Body {
            next_action: action,
            sender_id: &self.sender,
            tracker: Tracker {
                sender_id: &self.sender,
                slots: &self.slots,
                latest_message: &self.latest_message,
                latest_event_time: self.t,
                followup_action: None,
                paused: false,
                events: RasaOrder(&self.events),
                latest_input_channel: "rest",
                active_loop: Map::new(),
                latest_action: LatestAction {
                    action_name: action,
                },
                latest_action_name: action,
            },
            version: "3.6.21",
            domain: Domain {
                version: "3.1",
                intents: ["affirm", "deny"],
                responses: domain_responses(),
                actions: [],
            },
        })
        .expect("a chat's request serialises")
    }

    /// Rasa runs the action and records it: the action event, its slot events, and a bot
    /// event per response (with `utter_action` for named responses).
    pub async fn run(
        &mut self,
        app: &impl Webhook,
        action: &str,
    ) -> Result<(u16, Value), reqwest::Error> {
        let (status, body) = app
            .endpoint()
            .webhook_bytes(self.request_bytes(action))
            .await?;
        if status == 200 {
            self.record(action, &body);
        }
        Ok((status, body))
    }

    /// Records an action's answer as Rasa would.
    pub fn record(&mut self, action: &str, body: &Value) {
        self.action(action);
        for event in body["events"].as_array().into_iter().flatten() {
            if event["event"] == "slot" {
                if let Some(name) = event["name"].as_str() {
                    self.slot(name, event["value"].clone());
                }
            }
        }
        for response in body["responses"].as_array().into_iter().flatten() {
            let name = response["response"].as_str();
            self.bot(&format!("(rendered {})", name.unwrap_or("text")), name);
        }
    }

    /// "Please change X on Y" → select → (when selected) the question.
    pub async fn request_change(
        &mut self,
        app: &impl Webhook,
        subscription: &str,
        change_type: &str,
    ) -> Result<Value, reqwest::Error> {
        self.user(
            &format!("please {change_type} on {subscription}"),
            "request_change",
            &[("subscription", subscription), ("change_type", change_type)],
        );
        let (_, body) = self.run(app, "select_subscription_change").await?;
        if self.slots.get("change_status") == Some(&json!("selected")) {
            self.ask_confirmation();
        }
        Ok(body)
    }
}

/// The outcome object in an action's answer (the first response's `custom` payload).
pub fn outcome_of(body: &Value) -> Value {
    body["responses"][0]["custom"].clone()
}

/// The value of the last slot event named `name` in an action's answer.
pub fn slot_in(body: &Value, name: &str) -> Option<Value> {
    body["events"]
        .as_array()?
        .iter()
        .rev()
        .find(|e| e["event"] == "slot" && e["name"] == name)
        .map(|e| e["value"].clone())
}

/// Events written as Rasa writes them: `event` and `timestamp` first (every event's
/// `as_dict` starts with them, as tests/fixtures/rasa-3.6.21 shows), then the rest. A
/// `Value`'s own keys come out sorted, an order Rasa never sends.
struct RasaOrder<'a>(&'a [Value]);

impl Serialize for RasaOrder<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(RasaEvent))
    }
}

/// One event of [`RasaOrder`].
struct RasaEvent<'a>(&'a Value);

impl Serialize for RasaEvent<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        const HEAD: [&str; 2] = ["event", "timestamp"];
        let Some(fields) = self.0.as_object() else {
            return self.0.serialize(serializer);
        };
        let mut map = serializer.serialize_map(Some(fields.len()))?;
        for key in HEAD {
            if let Some(value) = fields.get(key) {
                map.serialize_entry(key, value)?;
            }
        }
        for (key, value) in fields.iter().filter(|(k, _)| !HEAD.contains(&k.as_str())) {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes a chat sends are the body [`Chat::request`] builds.
    #[test]
    fn the_request_bytes_are_the_request() {
        let mut c = Chat::new("s", Some("acct-7"));
        c.user(
            "please stop_renewal on WS-SUB-3304",
            "request_change",
            &[("subscription", "WS-SUB-3304")],
        );
        c.slot("change_tag", json!("WS-SUB-3304 stop_renewal r4"));
        c.bot("Shall I?", Some("utter_confirm_subscription_change"));
        let action = "apply_subscription_change";
        let sent: Value = serde_json::from_slice(&c.request_bytes(action)).unwrap();
        assert_eq!(sent, c.request(action));
    }

    /// Each event in the bytes opens with `event` and `timestamp`, as in the Rasa 3.6.21
    /// fixture's events.
    #[test]
    fn the_request_bytes_open_each_event_as_rasa_does() {
        let mut c = Chat::new("s", Some("acct-7"));
        c.user("yes", "affirm", &[]);
        c.bot("Shall I?", None);
        let bytes = c.request_bytes("apply_subscription_change");
        let text = std::str::from_utf8(&bytes).unwrap();
        let events = &text[text.find("\"events\":[").unwrap()..];
        let opens: Vec<&str> = events.split("{\"event\":").skip(1).collect();
        assert_eq!(opens.len(), c.events.len(), "{events}");
        for open in opens {
            let after_kind = &open[open.find(',').unwrap() + 1..];
            assert!(after_kind.starts_with("\"timestamp\":"), "{open}");
        }
        // The fixture, as Rasa wrote it (with a space after each separator).
        let fixture = include_str!("../../../tests/fixtures/rasa-3.6.21/apply_request.json");
        let opens: Vec<&str> = fixture.split("{\"event\": ").skip(1).collect();
        assert!(opens.len() > 5);
        for open in opens {
            let after_kind = &open[open.find(',').unwrap() + 1..];
            assert!(after_kind.starts_with(" \"timestamp\": "), "{open}");
        }
    }
}
