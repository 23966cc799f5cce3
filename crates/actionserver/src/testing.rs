//! The test kit: a [`Conversation`] recorded as Rasa 3.6 records it (a session start,
//! customer turns with their intent and entities, bot turns with `utter_action`, slots),
//! [`run`] to call an action on it without HTTP, and what it answered ([`Ran`]) to assert on.
//!
//! ```
//! use actionserver::testing::{run, Conversation, Utterance};
//! use actionserver::{Action, ActionCall, ActionResult, Dispatcher, Message, OutEvent};
//!
//! struct Greet;
//!
//! impl Action for Greet {
//!     fn name(&self) -> &'static str {
//!         "action_greet"
//!     }
//!
//!     async fn run(&self, call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
//!         let name = call.tracker.latest_entity_values("name", None, None).next();
//!         let name = name.and_then(|v| v.as_str()).unwrap_or("there");
//!         dispatcher.utter(Message::text(format!("Hello, {name}!")));
//!         Ok(vec![OutEvent::slot("greeted", true)])
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let mut chat = Conversation::new("ada");
//! chat.session_start()
//!     .user(Utterance::new("hi, I'm Ada").intent("greet").entity("name", "Ada"));
//! let ran = run(&Greet, &chat).await.expect("the action runs");
//! assert_eq!(ran.texts(), ["Hello, Ada!"]);
//! assert_eq!(ran.slot("greeted"), Some(&serde_json::json!(true)));
//! # }
//! ```
//!
//! The request an action gets is the body Rasa 3.6.21 sends, parsed by the server's own
//! parser, so an action tested here reads exactly what it reads behind the webhook.

use serde_json::{json, Map, Value};

use crate::action::{Action, ActionCall, ActionError, Dispatcher, State};
use crate::protocol::WebhookRequest;

/// A customer message: its text, and what NLU made of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Utterance {
    text: String,
    intent: Option<(String, f64)>,
    ranking: Vec<(String, f64)>,
    entities: Vec<Value>,
    metadata: Value,
    input_channel: String,
}

impl Utterance {
    /// A message with no intent yet.
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            intent: None,
            ranking: Vec::new(),
            entities: Vec::new(),
            metadata: json!({}),
            input_channel: "rest".to_owned(),
        }
    }

    /// The intent NLU chose, with confidence 1.0.
    pub fn intent(self, name: &str) -> Self {
        self.intent_with(name, 1.0)
    }

    /// The intent NLU chose, and how sure it was.
    pub fn intent_with(mut self, name: &str, confidence: f64) -> Self {
        self.intent = Some((name.to_owned(), confidence));
        self
    }

    /// Another intent in the ranking, after the chosen one.
    pub fn ranked(mut self, name: &str, confidence: f64) -> Self {
        self.ranking.push((name.to_owned(), confidence));
        self
    }

    /// An entity found in the text (value as a string).
    pub fn entity(self, entity: &str, value: &str) -> Self {
        self.entity_json(json!({"entity": entity, "value": value}))
    }

    /// An entity as NLU writes it (`entity`, `value`, and `role`, `group`, `extractor`, ...);
    /// `start`/`end` default to the whole text.
    pub fn entity_json(mut self, mut entity: Value) -> Self {
        if let Some(map) = entity.as_object_mut() {
            map.entry("start").or_insert(json!(0));
            map.entry("end").or_insert(json!(self.text.chars().count()));
            map.entry("extractor")
                .or_insert(json!("RegexEntityExtractor"));
        }
        self.entities.push(entity);
        self
    }

    /// The metadata the channel sent with the message.
    pub fn metadata(mut self, metadata: Value) -> Self {
        self.metadata = metadata;
        self
    }

    /// The channel (`rest` unless set).
    pub fn channel(mut self, channel: &str) -> Self {
        self.input_channel = channel.to_owned();
        self
    }
}

/// A conversation as Rasa records it: its events, its slots and its clock. Every event
/// advances the clock by half a second.
#[derive(Debug, Clone)]
pub struct Conversation {
    /// The conversation's id (`sender_id`).
    pub sender: String,
    /// The events, as Rasa would send them.
    pub events: Vec<Value>,
    /// The slots' current values.
    pub slots: Map<String, Value>,
    /// The clock, in epoch seconds.
    pub clock: f64,
    /// The latest customer message's parse data.
    pub latest_message: Value,
    /// What Rasa puts in every event's `metadata` (its model and assistant ids).
    pub event_metadata: Value,
    /// The active loop (form), if any.
    pub active_loop: Option<String>,
    /// The domain sent with each request (`None`: none is sent).
    pub domain: Option<Value>,
    /// Rasa's version, as it reports it.
    pub version: String,
    messages: u64,
}

impl Conversation {
    /// An empty conversation (no session yet).
    pub fn new(sender: &str) -> Self {
        Self {
            sender: sender.to_owned(),
            events: Vec::new(),
            slots: Map::new(),
            clock: 1_796_027_823.0,
            latest_message: json!({}),
            event_metadata: json!({"model_id": "0810b3c6a21946a3bd4a4bf112e5a73f", "assistant_id": "actionserver-testing"}),
            active_loop: None,
            domain: None,
            version: "3.6.21".to_owned(),
            messages: 0,
        }
    }

    fn tick(&mut self) -> f64 {
        self.clock += 0.5;
        self.clock
    }

    /// Appends an event, stamped with the clock and the metadata Rasa stamps (unless it
    /// has its own).
    pub fn event(&mut self, mut event: Value) -> &mut Self {
        let t = self.tick();
        if let Some(map) = event.as_object_mut() {
            map.entry("timestamp").or_insert(json!(t));
            map.entry("metadata")
                .or_insert_with(|| self.event_metadata.clone());
        }
        self.events.push(event);
        self
    }

    /// As Rasa 3.6.21 starts a session: `action_session_start`, `session_started`,
    /// `action_listen`.
    pub fn session_start(&mut self) -> &mut Self {
        self.action("action_session_start");
        self.event(json!({"event": "session_started"}));
        self.action("action_listen")
    }

    /// An action Rasa ran.
    pub fn action(&mut self, name: &str) -> &mut Self {
        self.event(json!({"event": "action", "name": name, "policy": null, "confidence": 1.0, "action_text": null, "hide_rule_turn": false}))
    }

    /// A `slot` event, and the slot's new value.
    pub fn slot(&mut self, name: &str, value: impl Into<Value>) -> &mut Self {
        let value = value.into();
        self.slots.insert(name.to_owned(), value.clone());
        self.event(json!({"event": "slot", "name": name, "value": value}))
    }

    /// A customer message, as Rasa records it: the `user` event with its parse data (which
    /// becomes `latest_message`) and `user_featurization`.
    pub fn user(&mut self, said: Utterance) -> &mut Self {
        self.messages += 1;
        let message_id = format!("{:032x}", self.messages);
        let mut parse = json!({
            "intent": said.intent.as_ref().map_or(json!({"name": null, "confidence": 0.0}), |(n, c)| json!({"name": n, "confidence": c})),
            "entities": said.entities,
            "text": said.text,
            "message_id": message_id,
            "metadata": said.metadata,
        });
        if let Some((name, confidence)) = &said.intent {
            let mut ranking = vec![json!({"name": name, "confidence": confidence})];
            ranking.extend(
                said.ranking
                    .iter()
                    .map(|(n, c)| json!({"name": n, "confidence": c})),
            );
            parse["intent_ranking"] = Value::Array(ranking);
        }
        let mut metadata = self.event_metadata.clone();
        if let (Some(m), Some(given)) = (metadata.as_object_mut(), said.metadata.as_object()) {
            m.extend(given.clone());
        }
        self.event(json!({"event": "user", "metadata": metadata, "text": said.text, "parse_data": parse, "input_channel": said.input_channel, "message_id": message_id}));
        self.latest_message = parse;
        self.event(json!({"event": "user_featurization", "use_text_for_featurization": false}))
    }

    /// A customer message: its text and intent.
    pub fn user_says(&mut self, text: &str, intent: &str) -> &mut Self {
        self.user(Utterance::new(text).intent(intent))
    }

    /// A bot message; `utter_action` names the response that produced it.
    pub fn bot(&mut self, text: &str, utter_action: Option<&str>) -> &mut Self {
        let mut metadata = self.event_metadata.clone();
        if let Some(u) = utter_action {
            metadata["utter_action"] = json!(u);
        }
        self.event(json!({"event": "bot", "metadata": metadata, "text": text, "data": {"elements": null, "quick_replies": null, "buttons": null, "attachment": null, "image": null, "custom": null}}))
    }

    /// Rasa runs a response: the action, its message, and `action_listen`.
    pub fn respond(&mut self, response: &str, text: &str) -> &mut Self {
        self.action(response);
        self.bot(text, Some(response));
        self.action("action_listen")
    }

    /// A form (loop) becomes active (`Some`) or ends (`None`).
    pub fn loop_active(&mut self, name: Option<&str>) -> &mut Self {
        self.active_loop = name.map(str::to_owned);
        self.event(json!({"event": "active_loop", "name": name}))
    }

    /// The domain sent with each request.
    pub fn with_domain(&mut self, domain: Value) -> &mut Self {
        self.domain = Some(domain);
        self
    }

    /// The webhook body for `action`, as Rasa 3.6.21 sends it.
    pub fn request(&self, action: &str) -> Value {
        let mut body = json!({
            "next_action": action,
            "sender_id": self.sender,
            "tracker": {
                "sender_id": self.sender,
                "slots": self.slots,
                "latest_message": self.latest_message,
                "latest_event_time": self.clock,
                "followup_action": null,
                "paused": false,
                "events": self.events,
                "latest_input_channel": "rest",
                "active_loop": self.active_loop.as_ref().map_or(json!({}), |n| json!({"name": n, "is_interrupted": false, "rejected": false, "trigger_message": {}})),
                "latest_action": {"action_name": action},
                "latest_action_name": action,
            },
            "version": self.version,
        });
        if let Some(domain) = &self.domain {
            body["domain"] = domain.clone();
        }
        body
    }

    /// Records what an action answered, as Rasa does: the action, its events (slots take
    /// their values), and a bot event per message.
    pub fn record(&mut self, action: &str, ran: &Ran) -> &mut Self {
        self.action(action);
        for event in &ran.events {
            if event["event"] == "slot" {
                if let Some(name) = event["name"].as_str() {
                    self.slots.insert(name.to_owned(), event["value"].clone());
                }
            }
            if event["event"] == "active_loop" {
                self.active_loop = event["name"].as_str().map(str::to_owned);
            }
            self.event(event.clone());
        }
        for message in &ran.messages {
            let name = message["response"].as_str();
            let text = message["text"].as_str().unwrap_or("(rendered)").to_owned();
            self.bot(&text, name);
        }
        self
    }
}

/// What an action answered: its events and messages, as the webhook would send them.
#[derive(Debug, Clone, PartialEq)]
pub struct Ran {
    /// The events, as JSON.
    pub events: Vec<Value>,
    /// The messages, as JSON (rasa-sdk's eight keys and any extra).
    pub messages: Vec<Value>,
}

impl Ran {
    /// The value the last `slot` event for `name` sets (`Some(Null)` when it resets it).
    pub fn slot(&self, name: &str) -> Option<&Value> {
        self.events
            .iter()
            .rev()
            .find(|e| e["event"] == "slot" && e["name"] == name)
            .map(|e| &e["value"])
    }

    /// Every slot the events set, in order.
    pub fn slots(&self) -> Vec<(&str, &Value)> {
        self.events
            .iter()
            .filter(|e| e["event"] == "slot")
            .filter_map(|e| Some((e["name"].as_str()?, &e["value"])))
            .collect()
    }

    /// The events of one kind (`"slot"`, `"followup"`, `"reminder"`, ...).
    pub fn events_of(&self, kind: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["event"] == kind).collect()
    }

    /// The messages' texts (messages without text left out).
    pub fn texts(&self) -> Vec<&str> {
        self.messages
            .iter()
            .filter_map(|m| m["text"].as_str())
            .collect()
    }

    /// The domain responses the messages name, in order.
    pub fn responses(&self) -> Vec<&str> {
        self.messages
            .iter()
            .filter_map(|m| m["response"].as_str())
            .collect()
    }
}

/// Runs `action` on the conversation as the webhook would (the body Rasa sends, parsed by
/// the server's parser; the domain given when the action reads it; its time budget, with
/// [`Action::timed_out`] past it), without HTTP.
///
/// # Panics
///
/// When the action reads the domain and the conversation has none (Rasa would be asked for
/// it: give one with [`Conversation::with_domain`]).
pub async fn run<A: Action>(action: &A, conversation: &Conversation) -> Result<Ran, ActionError> {
    run_request(
        action,
        &conversation.request(action.name()),
        &State::default(),
    )
    .await
}

/// [`run`], with what the application shares with its actions (say, a registry's
/// [`state`](crate::Registry::state)).
pub async fn run_with<A: Action>(
    action: &A,
    conversation: &Conversation,
    state: &State,
) -> Result<Ran, ActionError> {
    run_request(action, &conversation.request(action.name()), state).await
}

/// Runs `action` on a webhook body of your own making.
///
/// # Panics
///
/// When the body is not a request the server would accept (so the test is wrong, not the
/// action), or when the action reads the domain and the body has none.
pub async fn run_request<A: Action>(
    action: &A,
    body: &Value,
    state: &State,
) -> Result<Ran, ActionError> {
    let text = body.to_string();
    let request = WebhookRequest::parse(text.as_bytes())
        .unwrap_or_else(|e| panic!("the server would refuse this body: {e}"))
        .expect("the body is a request, not null");
    let tracker = request.tracker.as_ref().expect("the body has a tracker");
    let domain: Option<Value> = if action.reads_domain() {
        let raw = request
            .domain
            .expect("the action reads the domain: give the conversation one (with_domain)");
        Some(serde_json::from_str(raw.get()).expect("the domain is JSON"))
    } else {
        None
    };
    let call = ActionCall {
        tracker,
        domain: domain.as_ref(),
        version: request.version.as_deref(),
        state,
    };
    let mut dispatcher = Dispatcher::default();
    // The action's own time budget holds here as behind the webhook.
    let events = match action.time_budget() {
        None => action.run(call, &mut dispatcher).await?,
        Some(budget) => match tokio::time::timeout(budget, action.run(call, &mut dispatcher)).await
        {
            Ok(ran) => ran?,
            Err(_) => {
                dispatcher = Dispatcher::default();
                action.timed_out(&mut dispatcher)?
            }
        },
    };
    let events = events.iter().map(to_json).collect();
    let messages = dispatcher.into_messages().iter().map(to_json).collect();
    Ok(Ran { events, messages })
}

/// Events and messages serialise whatever they hold (their fields are JSON already).
fn to_json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).expect("events and messages serialise")
}
