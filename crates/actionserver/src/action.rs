//! Custom actions: the [`Action`] trait (a plain `async fn run`), what an action is given
//! ([`ActionCall`]), where its messages go ([`Dispatcher`]), how it refuses or fails
//! ([`ActionError`]), the [`State`] actions share, and the [`Registry`] the webhook looks
//! names up in.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::protocol::{Message, OutEvent, Tracker};

/// What an action is given: a read-only view of the conversation and, for actions that
/// read it, the domain.
pub struct ActionCall<'a> {
    /// The conversation so far.
    pub tracker: &'a Tracker<'a>,
    /// The domain, for actions whose [`Action::reads_domain`] is true.
    pub domain: Option<&'a Value>,
    /// Rasa's version, as it reported it.
    pub version: Option<&'a str>,
    /// What the application shares with its actions ([`Registry::share`]).
    pub state: &'a State,
}

impl ActionCall<'_> {
    /// The shared value of type `T` ([`Registry::share`]), if one was shared.
    pub fn state<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.state.get()
    }
}

/// Values the application shares with every action (a client, a pool, settings), one per
/// type, handed to each call as [`ActionCall::state`].
#[derive(Clone, Default)]
pub struct State(HashMap<TypeId, Arc<dyn Any + Send + Sync>>);

impl State {
    /// The value of type `T`, if there is one.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.0.get(&TypeId::of::<T>())?.downcast_ref()
    }

    /// Shares `value`, replacing the value of its type shared before.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.0.insert(TypeId::of::<T>(), Arc::new(value));
    }
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "State({} values)", self.0.len())
    }
}

/// Collects the messages an action sends, like rasa-sdk's `CollectingDispatcher`.
#[derive(Debug, Default)]
pub struct Dispatcher {
    messages: Vec<Message>,
}

impl Dispatcher {
    /// Sends a message (`dispatcher.utter_message(...)`).
    pub fn utter(&mut self, message: Message) {
        self.messages.push(message);
    }

    /// The messages sent, in order.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The messages sent, in order.
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
    Rejected {
        /// Why, for Rasa's log (it is sent as the error).
        message: String,
    },
    /// Something broke (HTTP 500); the cause is logged, never sent to the caller.
    #[error("the action failed")]
    Failed(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The action ran past its time budget (HTTP 500).
    #[error("the action ran past its time budget")]
    TimedOut,
}

impl ActionError {
    /// A rejection: Rasa's policies pick another action.
    pub fn rejected(message: impl Into<String>) -> Self {
        Self::Rejected {
            message: message.into(),
        }
    }

    /// A failure, with its cause (logged, never sent).
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

    /// How long the action may run before the server answers for it with
    /// [`Action::timed_out`] (`None`: the server's `action_time_budget`). Set it below
    /// Rasa's own timeout for the endpoint, so Rasa hears an answer rather than nothing.
    fn time_budget(&self) -> Option<Duration> {
        None
    }

    /// The answer when `run` went past its time budget: `run`'s future has been dropped
    /// (so do nothing in `run` that must not stop halfway: hand such work to a task of its
    /// own), and what it sent is discarded. By default an error (HTTP 500, gRPC
    /// `INTERNAL`); answer with a message and events instead to tell the customer.
    fn timed_out(&self, dispatcher: &mut Dispatcher) -> ActionResult {
        let _ = dispatcher;
        Err(ActionError::TimedOut)
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
    fn time_budget(&self) -> Option<Duration>;
    fn timed_out(&self, dispatcher: &mut Dispatcher) -> ActionResult;
    fn run<'a>(&'a self, call: ActionCall<'a>, dispatcher: &'a mut Dispatcher) -> Running<'a>;
}

impl<A: Action> ErasedAction for A {
    fn name(&self) -> &'static str {
        Action::name(self)
    }

    fn reads_domain(&self) -> bool {
        Action::reads_domain(self)
    }

    fn time_budget(&self) -> Option<Duration> {
        Action::time_budget(self)
    }

    fn timed_out(&self, dispatcher: &mut Dispatcher) -> ActionResult {
        Action::timed_out(self, dispatcher)
    }

    fn run<'a>(&'a self, call: ActionCall<'a>, dispatcher: &'a mut Dispatcher) -> Running<'a> {
        Box::pin(Action::run(self, call, dispatcher))
    }
}

/// A registered action, as the registry hands it out.
#[derive(Clone)]
pub struct RegisteredAction(Arc<dyn ErasedAction>);

impl RegisteredAction {
    /// [`Action::name`].
    pub fn name(&self) -> &'static str {
        self.0.name()
    }

    /// [`Action::reads_domain`].
    pub fn reads_domain(&self) -> bool {
        self.0.reads_domain()
    }

    /// [`Action::time_budget`].
    pub fn time_budget(&self) -> Option<Duration> {
        self.0.time_budget()
    }

    /// [`Action::timed_out`].
    pub fn timed_out(&self, dispatcher: &mut Dispatcher) -> ActionResult {
        self.0.timed_out(dispatcher)
    }

    /// [`Action::run`].
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
    state: State,
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

    /// Shares `value` with every action (one value per type; a second replaces the
    /// first): actions read it with [`ActionCall::state`].
    pub fn share<T: Send + Sync + 'static>(&mut self, value: T) -> &mut Self {
        self.state.insert(value);
        self
    }

    /// What the actions share.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The action of this name.
    pub fn get(&self, name: &str) -> Option<&RegisteredAction> {
        self.by_name.get(name)
    }

    /// The names, in registration order (what `GET /actions` lists).
    pub fn names(&self) -> &[&'static str] {
        &self.order
    }
}
