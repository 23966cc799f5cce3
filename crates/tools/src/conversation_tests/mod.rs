//! The conversation-test runner behind `actiongate-dev converse`: Rasa Pro's end-to-end test
//! cases, run against a running Rasa.
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
//!   out of the message metadata, and Rasa Pro passes it on as inert metadata;
//! * the bot can be made to say something between two user messages, as a reminder or
//!   another system does: a metadata entry may carry the key `actiongate_trigger_intent`,
//!   `{"name": "EXTERNAL_still_there", "entities": {...}, "utter": "utter_still_there"}`
//!   (or a list of them; `entities` and `utter` optional). Named by a user step, the
//!   runner sends `POST /conversations/{sender}/trigger_intent` with the name and the
//!   entities before that message (after the step's `actiongate_service_expect` and
//!   `actiongate_service_put`), so Rasa records the intent as an external `user` event
//!   (`EXTERNAL: ...`, not the customer's) and runs what its rules answer; with `utter`,
//!   the test case fails unless that answer holds a bot message of the response. The key
//!   is left out of the message metadata (Rasa Pro passes it on as inert metadata, and
//!   would not trigger anything).
//!
//! A test case stops at its first failing turn; the failure is printed as a per-step diff
//! (expected steps, marked, and the turn's actual bot and slot events). The last line of
//! the output is `N passed, M failed`.

mod file;
mod runner;
mod turn;

pub use file::{
    parse_test_file, ServiceExpect, ServicePut, Step, TestCase, TestFile, TriggerIntent,
};
pub use runner::run;
pub use turn::{latest_turn, match_turn, StepMatch, TurnEvent};
#[allow(unused_imports)] // what the sibling modules share through `super::*`
use {file::*, runner::*, turn::*};

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

/// The metadata key naming the intents to trigger (Rasa's `trigger_intent`) before a user
/// message.
pub const TRIGGER_INTENT_KEY: &str = "actiongate_trigger_intent";

/// What `actiongate-dev converse` was asked to run.
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
