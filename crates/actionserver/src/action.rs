//! Custom actions: the [`Action`] trait (a plain `async fn run`), what an action is given
//! ([`ActionCall`]), where its messages go ([`Dispatcher`]), how it refuses or fails
//! ([`ActionError`]), and the [`Registry`] the webhook looks names up in.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use crate::protocol::{Message, OutEvent, Tracker};

/// What an action is given: a read-only view of the conversation and, for actions that
/// read it, the domain.
pub struct ActionCall<'a> {
    pub tracker: &'a Tracker<'a>,
    pub domain: Option<&'a Value>,
    /// Rasa's version, as it reported it.
    pub version: Option<&'a str>,
}

/// Collects the messages an action sends, like rasa-sdk's `CollectingDispatcher`.
#[derive(Debug, Default)]
pub struct Dispatcher {
    messages: Vec<Message>,
}

impl Dispatcher {
    pub fn utter(&mut self, message: Message) {
        self.messages.push(message);
    }

    pub fn into_messages(self) -> Vec<Message> {
        self.messages
    }
}

/// Why an action did not produce events.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// The action refuses to run on this request (HTTP 400, Rasa treats it as a
    /// rejection).
    #[error("{message}")]
    Rejected { message: String },
    /// Something broke (HTTP 500); the cause is logged, never sent to the caller.
    #[error("the action failed")]
    Failed(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl ActionError {
    pub fn rejected(message: impl Into<String>) -> Self {
        Self::Rejected {
            message: message.into(),
        }
    }

    pub fn failed(cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Failed(Box::new(cause))
    }
}

/// What an action answers: the events for the tracker, or why there are none.
pub type ActionResult = Result<Vec<OutEvent>, ActionError>;

/// A custom action, registered under its name. Write `run` as a plain `async fn`.
pub trait Action: Send + Sync + 'static {
    /// The name Rasa calls it by (`next_action`).
    fn name(&self) -> &'static str;

    /// Whether the action reads the domain. Only such actions take part in the
    /// domain-digest exchange (HTTP 449); the others run without a domain.
    fn reads_domain(&self) -> bool {
        false
    }

    /// Runs the action: messages go to the dispatcher, events are returned.
    fn run(
        &self,
        call: ActionCall<'_>,
        dispatcher: &mut Dispatcher,
    ) -> impl Future<Output = ActionResult> + Send;
}

type Running<'a> = Pin<Box<dyn Future<Output = ActionResult> + Send + 'a>>;

/// [`Action`] behind a pointer: the registry holds actions of different types, so their
/// futures are boxed here, once, instead of in every action.
trait ErasedAction: Send + Sync {
    fn name(&self) -> &'static str;
    fn reads_domain(&self) -> bool;
    fn run<'a>(&'a self, call: ActionCall<'a>, dispatcher: &'a mut Dispatcher) -> Running<'a>;
}

impl<A: Action> ErasedAction for A {
    fn name(&self) -> &'static str {
        Action::name(self)
    }

    fn reads_domain(&self) -> bool {
        Action::reads_domain(self)
    }

    fn run<'a>(&'a self, call: ActionCall<'a>, dispatcher: &'a mut Dispatcher) -> Running<'a> {
        Box::pin(Action::run(self, call, dispatcher))
    }
}

/// A registered action, as the registry hands it out.
#[derive(Clone)]
pub struct RegisteredAction(Arc<dyn ErasedAction>);

impl RegisteredAction {
    pub fn name(&self) -> &'static str {
        self.0.name()
    }

    pub fn reads_domain(&self) -> bool {
        self.0.reads_domain()
    }

    pub async fn run(&self, call: ActionCall<'_>, dispatcher: &mut Dispatcher) -> ActionResult {
        self.0.run(call, dispatcher).await
    }
}

/// Two actions registered under one name.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("an action named `{0}` is registered already")]
pub struct DuplicateAction(pub &'static str);

/// The actions the server serves, in registration order.
#[derive(Default, Clone)]
pub struct Registry {
    order: Vec<&'static str>,
    by_name: HashMap<&'static str, RegisteredAction>,
}

impl Registry {
    /// Registers an action. A second action of the same name is an error, never a silent
    /// replacement (rasa-sdk lets a later class win; here that would let anything take an
    /// action's place unnoticed).
    pub fn register(&mut self, action: impl Action) -> Result<&mut Self, DuplicateAction> {
        let name = action.name();
        if self.by_name.contains_key(name) {
            return Err(DuplicateAction(name));
        }
        self.by_name
            .insert(name, RegisteredAction(Arc::new(action)));
        self.order.push(name);
        Ok(self)
    }

    pub fn get(&self, name: &str) -> Option<&RegisteredAction> {
        self.by_name.get(name)
    }

    /// The names, in registration order (what `GET /actions` lists).
    pub fn names(&self) -> &[&'static str] {
        &self.order
    }
}
