//! How the product reaches a billing system: the [`Provider`] trait (read an account's
//! subscriptions, read a record with its revision and terms, ask what became of a request
//! key, send a confirmed change under its key with its precondition) and what its answers
//! mean for the customer ([`CommandOutcome`], [`KeyState`], [`ServiceError`]). The client of
//! CONTRACT.md section 6 ([`ServiceClient`](super::ServiceClient)) is the first provider.

use std::future::Future;
use std::pin::Pin;

use super::model::{Change, Subscription};

/// A provider's answer, to be awaited: boxed, so the guard holds any provider as
/// `dyn Provider`.
pub type Call<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A billing system as the guard and the actions use it. Every method fails closed: an
/// answer that cannot be read is an error, never a guess.
pub trait Provider: Send + Sync + 'static {
    /// The account's subscriptions (an unknown account has none).
    fn list<'a>(&'a self, account: &'a str) -> Call<'a, Result<Vec<Subscription>, ServiceError>>;

    /// The record with its revision and the terms of each option; `None` when there is no
    /// such record.
    fn get<'a>(&'a self, id: &'a str) -> Call<'a, Result<Option<Subscription>, ServiceError>>;

    /// What became of the command sent (or not) under `request_key`.
    fn change_by_key<'a>(
        &'a self,
        request_key: &'a str,
    ) -> Call<'a, Result<KeyState, ServiceError>>;

    /// Sends a change the guard confirmed, under its request key and with the revision the
    /// customer confirmed as its precondition.
    fn send_change<'a>(&'a self, change: &'a dyn ConfirmedCommand) -> Call<'a, CommandOutcome>;

    /// Sends a command whose outcome is unknown again, under the same request key, for a
    /// provider without a change history to ask (section 8: Stripe replays the first
    /// answer under an `Idempotency-Key`). `None`: this provider does not resend, and
    /// [`Provider::change_by_key`] is all there is.
    fn resend<'a>(&'a self, _change: &'a dyn ConfirmedCommand) -> Call<'a, Option<CommandOutcome>> {
        Box::pin(async { None })
    }
}

/// What a command is sent for: a change the customer confirmed. Only consent's guard makes
/// one (`ConfirmedChange`, and the operation it claimed for one, resent), and the trait is sealed, so no type outside this crate can be
/// one and [`Provider::send_change`] cannot be reached around the guard. A provider
/// knows what a command needs, not where it comes from.
///
/// ```compile_fail,E0603
/// use actiongate::subscriptions::provider::{sealed::Sealed, ConfirmedCommand};
/// struct Forged;
/// impl Sealed for Forged {}
/// ```
///
/// ```compile_fail,E0277
/// use actiongate::subscriptions::provider::ConfirmedCommand;
/// struct Forged;
/// impl ConfirmedCommand for Forged {
///     fn subscription(&self) -> &str { "WS-SUB-3304" }
///     fn change_type(&self) -> &str { "stop_renewal" }
///     fn revision(&self) -> i64 { 4 }
///     fn request_key(&self) -> &str { "forged" }
/// }
/// ```
pub trait ConfirmedCommand: sealed::Sealed + Send + Sync {
    fn subscription(&self) -> &str;
    fn change_type(&self) -> &str;
    /// The revision the customer confirmed (sent as `If-Match`).
    fn revision(&self) -> i64;
    /// The request key (sent as `Idempotency-Key`).
    fn request_key(&self) -> &str;
}

/// The seal on [`ConfirmedCommand`]: nameable only inside this crate.
pub(crate) mod sealed {
    pub trait Sealed {}
}

/// Why the service's facts could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("the subscription service could not be reached: {0}")]
    Unreachable(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("the subscription service answered {status}: {message}")]
    Status { status: u16, message: String },
    #[error("the subscription service sent an answer that could not be read: {0}")]
    Invalid(String),
    /// Every turn stayed taken for the whole timeout: the call was never made.
    #[error("the subscription service is busy: {0} calls were in flight for the whole timeout")]
    Busy(usize),
}

/// What became of a command.
#[derive(Debug, Clone, PartialEq)]
pub enum CommandOutcome {
    /// 201, or 200 replayed: the change is made. `contradiction`: the record the
    /// provider answered with shows more than this change (another writer got in between
    /// a read and a write that could not be conditional, section 8): it stands, and a
    /// person is told.
    Applied {
        change: Change,
        replayed: bool,
        contradiction: Option<String>,
    },
    /// 412: the record moved; nothing happened. The current record, when it could be read
    /// (a 412 whose body is not a record, a moved Stripe record whose product could not be
    /// read: still stale, its terms unknown).
    Stale(Option<Box<Subscription>>),
    /// 409: a command with this key is still in flight.
    InFlight,
    /// The command was sent and no answer came back (timeout, lost connection, 5xx): it
    /// may have been applied.
    Unknown(String),
    /// The command never left (connection refused): nothing can have happened.
    NotSent(String),
    /// 410: the key was voided by an earlier `GET /v1/changes/{key}` that found nothing:
    /// nothing happened, and nothing will under this key.
    Voided,
    /// Refused for another reason (404, 422, 428, other 4xx): nothing happened.
    Rejected { status: u16, message: String },
}

/// What the service says happened to a request key (CONTRACT.md section 6,
/// `GET /v1/changes/{key}`).
#[derive(Debug, Clone, PartialEq)]
pub enum KeyState {
    /// 200: the change made under the key.
    Made(Change),
    /// 202: a command with the key is being processed.
    InFlight,
    /// 404 `{"status": "void"}`: no command with the key was received, and none will be
    /// (the service fenced it).
    Void,
    /// 404 without the fence: a service that cannot promise the command will not still be
    /// made. Nothing is concluded from it.
    NotFound,
}
