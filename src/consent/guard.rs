//! The checks of CONTRACT.md section 4, their order, and the confirmed change they produce.
//!
//! Steps 1 to 10 read only the conversation ([`check_conversation`], pure). A repeat of a
//! confirmation already acted on is recognised right after step 10 and answered with the
//! first call's outcome. Step 11 reads the service; steps 12 and 13 compare
//! ([`compare_facts`], pure); step 14 spends the account's budget; step 15 sends, through
//! [`ConfirmedChange::send`], at most once per request key, and never while another
//! command for the same subscription has an unknown outcome.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::outcome::{Outcome, Reason, Status, Terms};
use super::question::{self, contains_whole};
use super::{ConsentConfig, QuestionCheck};
use crate::conversation::{
    self, change_memory, Conversation, Given, Meaning, Question, Reading, Reply,
};
use crate::store::{
    now_ms, Approval, ApprovalState, AuditEntry, Claim, OpState, Operation, Store, StoreError,
};
use crate::subscriptions::client::{self, ConfirmedCommand, KeyState};
use crate::subscriptions::model::{change_tag, effective_text, Tag};
use crate::subscriptions::{CommandOutcome, ServiceClient, Subscription};
use actionserver::{EventKind, Tracker};
use tracing::Instrument as _;

/// A step's span in the action call's trace: how long it took and, when it decided the
/// outcome, the status and reason (no message text, no terms).
macro_rules! step {
    ($name:literal) => {
        tracing::info_span!(
            target: crate::telemetry::SPAN_TARGET,
            $name,
            status = tracing::field::Empty,
            reason = tracing::field::Empty,
        )
    };
}

/// Records the outcome a step decided on its span.
fn decided(span: &tracing::Span, outcome: &Outcome) {
    span.record("status", outcome.status.as_str());
    if let Some(reason) = outcome.reason {
        span.record("reason", reason.as_str());
    }
}

/// The change memory as the tracker's slots hold it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Memory {
    pub subscription: Option<String>,
    pub label: Option<String>,
    pub effective: Option<String>,
    pub entitlements: Option<String>,
    pub tag: Option<String>,
}

impl Memory {
    /// Each field with the name of the slot it was read from.
    fn slots(&self) -> [(&'static str, &Option<String>); 5] {
        [
            (change_memory::SUBSCRIPTION, &self.subscription),
            (change_memory::LABEL, &self.label),
            (change_memory::EFFECTIVE, &self.effective),
            (change_memory::ENTITLEMENTS, &self.entitlements),
            (change_memory::TAG, &self.tag),
        ]
    }
}

/// The confirmation response as the customer could have read it: its text variations
/// (from the domain) and the slots' values when the question was sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Template {
    pub variations: Vec<String>,
    pub values: HashMap<String, Value>,
}

/// Everything `apply_subscription_change` decides on, read from the tracker once.
#[derive(Debug, Clone)]
pub struct ApplyInputs {
    pub sender_id: String,
    /// The authenticated account; `None` also when the identity was changed after the
    /// session's start.
    pub account: Option<String>,
    /// What the customer asked for (model-settable slots).
    pub requested_subscription: Option<String>,
    pub requested_change_type: Option<String>,
    pub memory: Memory,
    pub conversation: Conversation,
    /// The confirmation response's text, when the domain carries it and the question is
    /// checked against it (`consent.question: template`).
    pub template: Option<Template>,
    /// Whether the confirmation response shows `{change_subscription}` (known when the
    /// domain carries it): then the question must name the subscription as memory does.
    pub shows_subscription: bool,
}

impl ApplyInputs {
    /// Reads the inputs; `domain` is the domain Rasa sent (or the cached one), when known.
    pub fn from_tracker(
        tracker: &Tracker<'_>,
        domain: Option<&Value>,
        config: &ConsentConfig,
    ) -> Result<Self, conversation::MalformedEvent> {
        let events = tracker.session_events();
        let reading = Reading {
            confirm_response: &config.confirm_response,
            select_action: &config.select_action,
            signals: &config.signals,
        };
        let conversation = conversation::read(&events, &reading)?;
        let variations = domain.and_then(|d| question::variations(d, &config.confirm_response));
        let shows_subscription = variations.as_ref().is_some_and(|vs| {
            vs.iter()
                .any(|v| question::placeholders(v).contains(&change_memory::SUBSCRIPTION))
        });
        let template = match (&conversation.question, domain, config.question, variations) {
            (Some(asked), Some(domain), QuestionCheck::Template, Some(variations)) => {
                let values = values_when_asked(tracker, domain, &events, asked, &variations)?;
                Some(Template { variations, values })
            }
            _ => None,
        };
        let text = |name: &str| tracker.slots.get_str(name).map(str::to_owned);
        Ok(Self {
            sender_id: tracker.sender_id.clone(),
            account: super::identity::account(tracker, &config.identity)?,
            requested_subscription: text("subscription"),
            requested_change_type: text("change_type"),
            memory: Memory {
                subscription: text(change_memory::SUBSCRIPTION),
                label: text(change_memory::LABEL),
                effective: text(change_memory::EFFECTIVE),
                entitlements: text(change_memory::ENTITLEMENTS),
                tag: text(change_memory::TAG),
            },
            conversation,
            template,
            shows_subscription,
        })
    }
}

/// The values of the slots the variations name, as they were when the question was sent:
/// the latest slot event before it; when the session's start is not in the events (Rasa
/// trimmed the front) and nothing set the slot since, its value now; otherwise the
/// domain's initial value (null unless it says otherwise). A name the domain has no slot
/// for stays missing, as it is to Rasa, which then sends the template unrendered.
fn values_when_asked(
    tracker: &Tracker<'_>,
    domain: &Value,
    events: &[&actionserver::RawEvent<'_>],
    asked: &Question,
    variations: &[String],
) -> Result<HashMap<String, Value>, conversation::MalformedEvent> {
    let mut names: Vec<&str> = variations
        .iter()
        .flat_map(|v| question::placeholders(v))
        .collect();
    names.sort_unstable();
    names.dedup();
    let (mut values, reset) = conversation::slots_before(events, asked.position, &names)?;
    let trimmed = !reset
        && events
            .first()
            .is_none_or(|e| e.kind() != EventKind::SessionStarted);
    for name in names {
        if values.contains_key(name) {
            continue;
        }
        let declared = domain.get("slots").and_then(|s| s.get(name));
        if trimmed && !conversation::set_after(events, asked.position, name)? {
            if let Some(now) = tracker.slots.get_raw(name) {
                values.insert(name.to_owned(), now.clone());
                continue;
            }
        }
        if let Some(slot) = declared {
            let initial = slot.get("initial_value").cloned().unwrap_or(Value::Null);
            values.insert(name.to_owned(), initial);
        }
    }
    Ok(values)
}

/// A confirmation that passed steps 1 to 10: this customer was asked exactly these terms
/// and said yes, in time.
#[derive(Debug, Clone, PartialEq)]
pub struct Confirmation {
    pub account: String,
    pub tag: Tag,
    /// The subscription as the question named it (`change_subscription`), when known: it
    /// must still be the service's product and plan (step 13).
    pub subscription: Option<String>,
    pub terms: Terms,
    pub question: Question,
    pub reply: Reply,
    pub request_key: String,
}

/// Steps 1 to 10 of CONTRACT.md section 4: who asks, what is in memory and where it came
/// from, what was asked, what the customer replied and what it means, and when. The first
/// failing check decides.
pub fn check_conversation(
    inputs: &ApplyInputs,
    config: &ConsentConfig,
) -> Result<Confirmation, Outcome> {
    // 1. An authenticated account, as the session's start wrote it.
    let account = inputs
        .account
        .clone()
        .ok_or_else(Outcome::not_authenticated)?;
    // 2. A change in memory.
    let tag = inputs
        .memory
        .tag
        .as_deref()
        .and_then(Tag::parse)
        .ok_or(Outcome::blocked(Reason::NotSelected))?;
    // 3. The memory is what select_subscription_change wrote in this conversation.
    let written = inputs
        .conversation
        .selected_memory
        .as_ref()
        .ok_or(Outcome::blocked(Reason::MemoryUntrusted))?;
    let trusted = inputs
        .memory
        .slots()
        .iter()
        .all(|(name, value)| written.get(*name).and_then(Value::as_str) == value.as_deref());
    if !trusted {
        return Err(Outcome::blocked(Reason::MemoryUntrusted));
    }
    let terms = Terms {
        tag: inputs.memory.tag.clone().unwrap_or_default(),
        label: inputs.memory.label.clone().unwrap_or_default(),
        effective: inputs.memory.effective.clone().unwrap_or_default(),
        entitlements: inputs.memory.entitlements.clone().unwrap_or_default(),
    };
    // 4. The customer asked for this change.
    if inputs.requested_subscription.as_deref() != Some(tag.subscription.as_str())
        || inputs.requested_change_type.as_deref() != Some(tag.change_type.as_str())
    {
        return Err(Outcome::blocked(Reason::TargetMismatch));
    }
    // 5. The latest confirmation question carries this tag, as a whole; and when it was
    // rendered from the slots, from this tag (not a longer id that ends like it).
    let asked_with = |slot: &str, term: &str| {
        inputs.template.as_ref().is_none_or(|t| {
            t.values
                .get(slot)
                .is_none_or(|then| then.as_str() == Some(term))
        })
    };
    let question = inputs
        .conversation
        .question
        .clone()
        .filter(|q| {
            contains_whole(&q.text, &terms.tag) && asked_with(change_memory::TAG, &terms.tag)
        })
        .ok_or(Outcome::blocked(Reason::NotAsked))?;
    // 6. The customer replied to it, and to nothing else: a reply after another bot
    // message answers that message.
    let reply = inputs
        .conversation
        .reply
        .clone()
        .ok_or(Outcome::blocked(Reason::NotAnswered))?;
    if let Some(other) = &reply.after_other_message {
        tracing::debug!(%other, "another bot message came between the question and the reply");
        return Err(Outcome::blocked(Reason::NotAnswered).with_why(Some(
            "Your reply came after another message of mine, so I did not take it as the answer to my question."
                .to_owned(),
        )));
    }
    // 7 and 8. The reply is a yes: any no declines; no yes, no consent.
    match reply.meaning {
        Meaning::Yes => {}
        Meaning::No => return Err(Outcome::blocked(Reason::Declined)),
        Meaning::Unclear => return Err(Outcome::blocked(Reason::NotConfirmed)),
    }
    // 8. A typed yes says yes plainly in its own words: the words of the label and of the
    // subscription as the question named it may be repeated, nothing may refuse.
    if config.plain_yes && reply.given == Given::Typed {
        let named = inputs
            .memory
            .subscription
            .as_deref()
            .filter(|s| !s.is_empty() && question.text.contains(s));
        let question_words: Vec<&str> =
            std::iter::once(terms.label.as_str()).chain(named).collect();
        if let Err(not_plain) = config.reply_words.read(&reply.text, &question_words) {
            return Err(
                Outcome::blocked(Reason::NotConfirmed).with_why(Some(not_plain.to_string()))
            );
        }
    }
    // 9. The question read out every term, and is the confirmation response as Rasa
    // rendered it (when its text is known).
    let read_out = [&terms.label, &terms.effective, &terms.entitlements]
        .iter()
        .all(|term| !term.is_empty() && question.text.contains(term.as_str()));
    let rendered = inputs.template.as_ref().is_none_or(|template| {
        question::whole_number_readings(&template.values).any(|values| {
            template.variations.iter().any(|variation| {
                question::render(variation, &values)
                    .is_some_and(|text| text.trim_end() == question.text.trim_end())
            })
        })
    });
    let same_terms = asked_with(change_memory::LABEL, &terms.label)
        && asked_with(change_memory::EFFECTIVE, &terms.effective)
        && asked_with(change_memory::ENTITLEMENTS, &terms.entitlements);
    // The subscription as memory names it, when the response shows it: read out, and the
    // name the question was rendered with.
    let subscription = inputs.memory.subscription.clone().unwrap_or_default();
    let named = !inputs.shows_subscription
        || (!subscription.is_empty()
            && question.text.contains(subscription.as_str())
            && asked_with(change_memory::SUBSCRIPTION, &subscription));
    if !(read_out && rendered && same_terms && named) {
        return Err(Outcome::blocked(Reason::QuestionIncomplete));
    }
    // 10. The reply came within the window after the question; a little before it is
    // another replica's clock; unknown times fail closed.
    let fresh = match (question.timestamp, reply.timestamp) {
        (Some(asked), Some(replied)) => {
            replied - asked <= config.window.as_secs_f64()
                && asked - replied <= config.clock_skew.as_secs_f64()
        }
        _ => false,
    };
    if !fresh {
        return Err(Outcome::blocked(Reason::ConfirmationExpired));
    }
    let request_key = request_key(&inputs.sender_id, &terms.tag, &question, &reply);
    Ok(Confirmation {
        account,
        tag,
        subscription: Some(subscription).filter(|s| !s.is_empty()),
        terms,
        question,
        reply,
        request_key,
    })
}

/// The request key: derived from the conversation, the tag, the question (its text and
/// timestamp) and the reply (its message id, timestamp and text), so every delivery of the
/// same "yes" has the same key. Never from positions in the tracker: Rasa trims its front.
pub fn request_key(sender_id: &str, tag: &str, question: &Question, reply: &Reply) -> String {
    let mut hash = Sha256::new();
    for part in [
        sender_id,
        tag,
        &question
            .timestamp
            .map(f64::to_bits)
            .unwrap_or(0)
            .to_string(),
        &question.text,
        reply.message_id.as_deref().unwrap_or(""),
        &reply.timestamp.map(f64::to_bits).unwrap_or(0).to_string(),
        &reply.text,
    ] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    format!("ag-{}", &hex::encode(hash.finalize())[..32])
}

/// The service's terms for a change type on a record, as they would be read out now.
pub fn current_terms(record: &Subscription, change_type: &str) -> Option<Terms> {
    let option = record.option(change_type)?;
    Some(Terms {
        tag: change_tag(&record.id, change_type, record.revision),
        label: option.label.clone(),
        effective: effective_text(&option.effective_at)?,
        entitlements: option.entitlements.clone(),
    })
}

/// Steps 12 and 13: the record is the account's, and every confirmed term (revision,
/// label, date, entitlements) is still the service's. Returns the current terms.
pub fn compare_facts(
    confirmation: &Confirmation,
    record: Option<&Subscription>,
) -> Result<Terms, Outcome> {
    // 12. The account's own subscription; nothing about another's is revealed.
    let record = record
        .filter(|r| r.account == confirmation.account && r.id == confirmation.tag.subscription)
        .ok_or_else(Outcome::denied)?;
    // 13. Revision, label, date and entitlements unchanged.
    let current = current_terms(record, &confirmation.tag.change_type);
    let same_name = confirmation
        .subscription
        .as_ref()
        .is_none_or(|named| *named == record.display_name());
    let unchanged = record.revision == confirmation.tag.revision
        && same_name
        && current.as_ref().is_some_and(|now| {
            now.label == confirmation.terms.label
                && now.effective == confirmation.terms.effective
                && now.entitlements == confirmation.terms.entitlements
        });
    match current {
        Some(now) if unchanged => Ok(now),
        current => Err(Outcome::blocked(Reason::BenefitLossHidden)
            .with_current(current)
            .with_why(record.why_since(confirmation.tag.revision))),
    }
}

/// A change the guard approved and whose request key this call claimed. Only the guard
/// makes one; sending consumes it. The type can be named anywhere:
///
/// ```
/// use actiongate::subscriptions::client::ConfirmedCommand;
/// fn inspect(change: &actiongate::consent::ConfirmedChange) -> &str {
///     change.request_key()
/// }
/// ```
///
/// but nothing outside the guard can build one (its fields are private and it has no
/// constructor), so nothing else can reach the command:
///
/// ```compile_fail,E0451
/// use actiongate::consent::{Confirmation, ConfirmedChange, Terms};
/// fn forge(confirmation: Confirmation, current: Terms) -> ConfirmedChange {
///     ConfirmedChange { confirmation, current }
/// }
/// ```
#[derive(Debug)]
pub struct ConfirmedChange {
    confirmation: Confirmation,
    current: Terms,
}

impl client::sealed::Sealed for ConfirmedChange {}

impl ConfirmedCommand for ConfirmedChange {
    fn subscription(&self) -> &str {
        &self.confirmation.tag.subscription
    }

    fn change_type(&self) -> &str {
        &self.confirmation.tag.change_type
    }

    fn revision(&self) -> i64 {
        self.confirmation.tag.revision
    }

    fn request_key(&self) -> &str {
        &self.confirmation.request_key
    }
}

impl ConfirmedChange {
    /// Step 15: the command, with `If-Match` and `Idempotency-Key`; the outcome recorded.
    async fn send(self, client: &ServiceClient, store: &Store) -> Result<Outcome, StoreError> {
        let c = &self.confirmation;
        let key = &c.request_key;
        if !store.mark_sent(key).await? {
            // The claim was taken back meanwhile: nothing may be sent under it.
            tracing::warn!(request_key = %key, "the claim was taken back before sending; nothing sent");
            return Ok(Outcome::blocked(Reason::ServiceUnavailable));
        }
        let result = client.send_change(&self).await;
        let (state, outcome) = match result {
            CommandOutcome::Applied { .. } => (OpState::Applied, applied(&self.current)),
            CommandOutcome::Stale(record) => {
                let outcome = Outcome::blocked(Reason::StaleAtService)
                    .with_current(current_terms(&record, &c.tag.change_type))
                    .with_why(record.why_since(c.tag.revision));
                (OpState::Failed, outcome)
            }
            CommandOutcome::InFlight | CommandOutcome::Unknown(_) => {
                if let CommandOutcome::Unknown(why) = &result {
                    tracing::warn!(request_key = %key, %why, "the command's outcome is unknown");
                }
                (OpState::Unknown, pending())
            }
            CommandOutcome::Voided => (OpState::Failed, not_sent()),
            CommandOutcome::NotSent(why) => {
                tracing::warn!(request_key = %key, %why, "the command could not be sent");
                store.release(key).await?;
                return Ok(Outcome::blocked(Reason::ServiceUnavailable));
            }
            CommandOutcome::Rejected { status, message } => {
                tracing::warn!(request_key = %key, status, %message, "the service refused the command");
                let outcome = Outcome {
                    status: Status::Failed,
                    reason: Some(Reason::ServiceRejected),
                    effects: 0,
                    current: None,
                    why: Some(message),
                };
                (OpState::Failed, outcome)
            }
        };
        let json = serde_json::to_string(&outcome).expect("an outcome serialises");
        if !store.set_state(key, state, Some(&json)).await? {
            // A service event resolved it while the answer was awaited: that is the outcome.
            if let Some(op) = store.operation(key).await? {
                return Ok(recorded(&op));
            }
        }
        Ok(outcome)
    }
}

fn applied(terms: &Terms) -> Outcome {
    Outcome {
        status: Status::Applied,
        reason: None,
        effects: 1,
        current: Some(terms.clone()),
        why: None,
    }
}

fn held_outcome(terms: Terms) -> Outcome {
    Outcome {
        status: Status::Held,
        reason: Some(Reason::ApprovalRequired),
        effects: 0,
        current: Some(terms),
        why: None,
    }
}

fn pending() -> Outcome {
    Outcome {
        status: Status::PendingVerification,
        reason: Some(Reason::OutcomeUnknown),
        effects: 0,
        current: None,
        why: None,
    }
}

/// Runs the whole sequence for one call of `apply_subscription_change`. Its parts are
/// read through accessors only: nothing outside this module can swap the store or the
/// client a confirmed change is sent with.
#[derive(Clone)]
pub struct Guard {
    config: Arc<ConsentConfig>,
    client: ServiceClient,
    store: Store,
}

impl Guard {
    pub fn new(config: ConsentConfig, client: ServiceClient, store: Store) -> Self {
        Self {
            config: Arc::new(config),
            client,
            store,
        }
    }

    /// How consent is checked.
    pub fn config(&self) -> &ConsentConfig {
        &self.config
    }

    /// The subscription service's client (its reads; a command takes a
    /// [`ConfirmedChange`], which only this module makes).
    pub fn client(&self) -> &ServiceClient {
        &self.client
    }

    /// The store: operations, audit, rate limits.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Checks, and sends only when every check passes. Every call ends in exactly one
    /// outcome, which is also appended to the audit trail.
    pub async fn apply(&self, inputs: &ApplyInputs) -> Result<Outcome, StoreError> {
        let span = tracing::info_span!(
            target: crate::telemetry::SPAN_TARGET,
            "consent_guard",
            status = tracing::field::Empty,
            reason = tracing::field::Empty,
            request_key = tracing::field::Empty,
        );
        let outcome = self
            .apply_in(inputs, &span)
            .instrument(span.clone())
            .await?;
        decided(&span, &outcome);
        Ok(outcome)
    }

    async fn apply_in(
        &self,
        inputs: &ApplyInputs,
        span: &tracing::Span,
    ) -> Result<Outcome, StoreError> {
        // Steps 1 to 10 take microseconds and read only the tracker: one span, which says
        // which check refused by its reason.
        let checks = step!("guard.conversation_checks");
        let checked = checks.in_scope(|| check_conversation(inputs, &self.config));
        let (outcome, key) = match checked {
            Err(outcome) => {
                decided(&checks, &outcome);
                drop(checks);
                (outcome, None)
            }
            Ok(confirmation) => {
                drop(checks);
                let key = confirmation.request_key.clone();
                span.record("request_key", key.as_str());
                (self.decide(confirmation, inputs).await?, Some(key))
            }
        };
        self.store
            .audit(AuditEntry {
                at: now_ms(),
                action: "apply_subscription_change".into(),
                sender_id: inputs.sender_id.clone(),
                account: inputs.account.clone(),
                target: target(inputs),
                question_terms: inputs
                    .conversation
                    .question
                    .as_ref()
                    .map(|q| q.text.clone()),
                service_terms: outcome
                    .current
                    .as_ref()
                    .map(|t| serde_json::to_string(t).expect("terms serialise")),
                status: outcome.status.as_str().into(),
                reason: outcome.reason.map(|r| r.as_str().into()),
                request_key: key,
                ..AuditEntry::default()
            })
            .instrument(step!("guard.audit"))
            .await?;
        Ok(outcome)
    }

    /// Steps 11 to 15, once the conversation checks passed, with the repeat rules of
    /// CONTRACT.md section 4 where they apply:
    ///
    /// - R1. A repeat (the request key has an operation) gets the first call's outcome;
    ///   steps 11 to 14 are skipped, since the change itself has moved the record on.
    /// - R2. While another operation of this subscription has an unknown outcome, nothing
    ///   is sent for it: `pending_verification`.
    /// - R3. A repeat that raced this call to the claim (or applied the change, moving the
    ///   record on, while this call read it) is R1 after all.
    async fn decide(
        &self,
        confirmation: Confirmation,
        inputs: &ApplyInputs,
    ) -> Result<Outcome, StoreError> {
        // R1 and R2, right after step 10, in one query (the claim below enforces R2
        // atomically; asking here answers before the service is read).
        let key = &confirmation.request_key;
        let (mine, open) = self
            .store
            .operation_and_open(key, &confirmation.tag.subscription)
            .instrument(step!("guard.repeats"))
            .await?;
        if let Some(op) = mine {
            return self.replay(op).await;
        }
        // R1 for a held change: its state, or its decision's outcome.
        if let Some(held) = self.store.approval(key).await? {
            return self.approval_outcome(&held).await;
        }
        if open.is_some() {
            return Ok(pending());
        }
        // 11, 12, 13. The facts as they are now, compared; fail closed.
        let facts = step!("guard.facts");
        let compared = self
            .read_and_compare(&confirmation)
            .instrument(facts.clone())
            .await;
        if let Err(refusal) = &compared {
            decided(&facts, refusal);
        }
        // Each step's span ends with the step: the steps after it are its siblings.
        drop(facts);
        let (current, review) = match compared {
            Ok(current) => current,
            Err(refusal) => {
                // R3: another delivery of the same "yes" may have claimed and applied it
                // since the lookup above, moving the record on: then its outcome is the
                // answer.
                if let Some(op) = self.store.operation(key).await? {
                    return self.replay(op).await;
                }
                return Ok(refusal);
            }
        };
        let op = Operation {
            request_key: key.clone(),
            sender_id: inputs.sender_id.clone(),
            account: confirmation.account.clone(),
            subscription: confirmation.tag.subscription.clone(),
            change_type: confirmation.tag.change_type.clone(),
            revision: confirmation.tag.revision,
            terms: serde_json::to_string(&confirmation.terms).expect("terms serialise"),
            state: OpState::Claimed,
            outcome: None,
            created_at: now_ms(),
            updated_at: now_ms(),
        };
        // 14 and 15 for a change a person approves first (CONTRACT.md section 7): the budget
        // is looked at but not spent, and the change is stored as held; nothing is sent.
        let rules = &self.config.approval;
        if let Some(rule) = rules.holds(&confirmation.account, &op.change_type, review) {
            let rate = self.config.rate;
            if !self
                .store
                .token_available(&confirmation.account, rate.capacity, rate.per_second)
                .await?
            {
                return Ok(Outcome::blocked(Reason::RateLimited).with_current(Some(current)));
            }
            // One open hold per subscription, and a few per account, so a burst of holds
            // cannot bury the ones a person must decide (a redelivery of this very "yes" is
            // answered from its own hold, above).
            let (for_account, for_subscription, oldest) = self
                .store
                .open_holds(&confirmation.account, &op.subscription)
                .await?;
            if let Some(open) = oldest.filter(|h| {
                h.request_key != *key && for_subscription >= rules.max_open_per_subscription
            }) {
                return Ok(held_outcome(stored_terms(&open)).with_why(Some(
                    "A change to this subscription already waits for a colleague's approval; it must be decided or withdrawn first.".into(),
                )));
            }
            if for_account >= rules.max_open_per_account {
                return Ok(Outcome::blocked(Reason::RateLimited)
                    .with_current(Some(current))
                    .with_why(Some(
                        "Too many changes of this account already wait for a colleague's approval."
                            .into(),
                    )));
            }
            let now = now_ms();
            let held = Approval {
                request_key: key.clone(),
                sender_id: inputs.sender_id.clone(),
                account: confirmation.account.clone(),
                subscription: op.subscription.clone(),
                change_type: op.change_type.clone(),
                revision: op.revision,
                terms: serde_json::to_string(&current).expect("terms serialise"),
                question: confirmation.question.text.clone(),
                question_at: confirmation.question.timestamp,
                reply: confirmation.reply.text.clone(),
                reply_at: confirmation.reply.timestamp,
                reply_id: confirmation.reply.message_id.clone(),
                rule: rule.to_owned(),
                state: ApprovalState::Held,
                created_at: now,
                expires_at: now + rules.expiry.as_millis() as i64,
                decided_by: None,
                decided_at: None,
                note: None,
                outcome: None,
            };
            if !self.store.hold(&held).await? {
                // R3: another delivery of the same "yes" stored it first.
                if let Some(held) = self.store.approval(key).await? {
                    return self.approval_outcome(&held).await;
                }
            }
            tracing::info!(request_key = %key, rule, subscription = %op.subscription, "held for approval");
            return Ok(held_outcome(current));
        }
        self.claim_spend_send(op, confirmation, current).await
    }

    /// The request key claimed, the account's budget spent (step 14), the command sent
    /// (step 15): for a confirmation now, or a held one once approved.
    async fn claim_spend_send(
        &self,
        op: Operation,
        confirmation: Confirmation,
        current: Terms,
    ) -> Result<Outcome, StoreError> {
        let key = &confirmation.request_key;
        let claim = step!("guard.claim");
        let claimed = self.store.claim(&op).instrument(claim.clone()).await?;
        if matches!(claimed, Claim::SubscriptionBusy) {
            decided(&claim, &pending());
        }
        drop(claim);
        match claimed {
            Claim::Claimed => {}
            // R3: another delivery of the same "yes" got here first.
            Claim::KeyTaken => {
                let op = self.store.operation(key).await?.unwrap_or(op);
                return self.replay(op).await;
            }
            // R2: another confirmation's command for this subscription is unresolved.
            Claim::SubscriptionBusy => return Ok(pending()),
        }
        // 14. The account's budget.
        let rate = self.config.rate;
        if !self
            .store
            .take_token(&confirmation.account, rate.capacity, rate.per_second)
            .instrument(step!("guard.budget"))
            .await?
        {
            self.store.release(key).await?;
            return Ok(Outcome::blocked(Reason::RateLimited).with_current(Some(current)));
        }
        // 15. The command.
        let command = step!("guard.command");
        let outcome = ConfirmedChange {
            confirmation,
            current,
        }
        .send(&self.client, &self.store)
        .instrument(command.clone())
        .await?;
        decided(&command, &outcome);
        Ok(outcome)
    }

    /// Steps 11 to 13: reads the record and compares it with the confirmation; the current
    /// terms, and whether the service marks the option for review. When the
    /// read fails, nothing is sent; but if the service's events already said the record
    /// moved past the confirmed revision, step 13's answer is given from that record, so
    /// the customer hears what changed rather than only that the service is away.
    async fn read_and_compare(
        &self,
        confirmation: &Confirmation,
    ) -> Result<(Terms, bool), Outcome> {
        let record = match self.client.get(&confirmation.tag.subscription).await {
            Ok(record) => record,
            Err(e) => {
                tracing::warn!(error = %e, "the subscription could not be read");
                if let Ok(Some((revision, _, json))) = self
                    .store
                    .known_record(&confirmation.tag.subscription)
                    .await
                {
                    if revision > confirmation.tag.revision {
                        if let Ok(record) = serde_json::from_str::<Subscription>(&json) {
                            compare_facts(confirmation, Some(&record))?;
                        }
                    }
                }
                return Err(Outcome::blocked(Reason::ServiceUnavailable));
            }
        };
        let review = record
            .as_ref()
            .and_then(|r| r.option(&confirmation.tag.change_type))
            .is_some_and(|o| o.review);
        compare_facts(confirmation, record.as_ref()).map(|terms| (terms, review))
    }

    /// The outcome of an operation that already exists: final as recorded; in flight,
    /// waited for briefly; unknown, reconciled.
    async fn replay(&self, mut op: Operation) -> Result<Outcome, StoreError> {
        let deadline = tokio::time::Instant::now() + self.config.in_flight_wait;
        while matches!(op.state, OpState::Claimed | OpState::Sent)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(25)).await;
            match self.store.operation(&op.request_key).await? {
                Some(now) => op = now,
                // Released: nothing was sent; the confirmation may be tried again.
                None => return Ok(Outcome::blocked(Reason::ServiceUnavailable)),
            }
        }
        match op.state {
            OpState::Applied | OpState::Failed => Ok(recorded(&op)),
            OpState::Unknown => self.reconcile(&op).await,
            OpState::Claimed | OpState::Sent => Ok(pending()),
        }
    }

    /// Resolves an unknown operation by asking the service about its request key.
    pub async fn reconcile(&self, op: &Operation) -> Result<Outcome, StoreError> {
        if op.state.is_final() {
            return Ok(recorded(op));
        }
        if op.state == OpState::Claimed {
            // A fresh claim is another call's, about to send: leave it be.
            if now_ms() - op.updated_at < self.config.in_flight_wait.as_millis() as i64 {
                return Ok(pending());
            }
            // Claimed and left (the process stopped before sending): nothing was sent. Only
            // if it is still exactly as seen: a claim that moved on to sent is not touched.
            if self
                .store
                .release_stale_claim(&op.request_key, op.updated_at)
                .await?
            {
                return Ok(Outcome::blocked(Reason::ServiceUnavailable));
            }
            return match self.store.operation(&op.request_key).await? {
                Some(now) if now.state != OpState::Claimed => Box::pin(self.reconcile(&now)).await,
                _ => Ok(pending()),
            };
        }
        // Only the service's answer about the key resolves it (CONTRACT.md section 4):
        // made, in flight, or void and fenced. Never the time passed, nor a 404 from a
        // service that cannot fence the key.
        match self.client.change_by_key(&op.request_key).await {
            Ok(KeyState::Made(_change)) => {
                let terms: Terms = serde_json::from_str(&op.terms).expect("stored terms are valid");
                let outcome = applied(&terms);
                let json = serde_json::to_string(&outcome).expect("an outcome serialises");
                if !self
                    .store
                    .set_state(&op.request_key, OpState::Applied, Some(&json))
                    .await?
                {
                    // Resolved meanwhile: what was recorded stands.
                    if let Some(now) = self.store.operation(&op.request_key).await? {
                        return Ok(recorded(&now));
                    }
                }
                Ok(outcome)
            }
            Ok(KeyState::Void) => {
                let outcome = not_sent();
                let json = serde_json::to_string(&outcome).expect("an outcome serialises");
                if !self
                    .store
                    .set_state(&op.request_key, OpState::Failed, Some(&json))
                    .await?
                {
                    // Resolved meanwhile (an event said it was applied): that stands.
                    if let Some(now) = self.store.operation(&op.request_key).await? {
                        return Ok(recorded(&now));
                    }
                }
                Ok(outcome)
            }
            Ok(KeyState::InFlight | KeyState::NotFound) => Ok(pending()),
            Err(e) => {
                tracing::warn!(error = %e, request_key = %op.request_key, "could not reconcile");
                Ok(pending())
            }
        }
    }

    /// Resolves every operation left sent or unknown for longer than `min_age`.
    pub async fn reconcile_all(&self, min_age: Duration) -> Result<usize, StoreError> {
        let mut resolved = 0;
        for op in self.store.unresolved(min_age).await? {
            if self.reconcile(&op).await?.status != Status::PendingVerification {
                resolved += 1;
            }
        }
        Ok(resolved)
    }
}

/// `failed`/`not_sent`: the service never received the command and has fenced its key, so
/// it never will.
fn not_sent() -> Outcome {
    Outcome {
        status: Status::Failed,
        reason: Some(Reason::NotSent),
        effects: 0,
        current: None,
        why: Some(
            "The subscription service never received this change, and will not make it; nothing was changed."
                .into(),
        ),
    }
}

fn recorded(op: &Operation) -> Outcome {
    op.outcome
        .as_deref()
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_else(pending)
}

fn target(inputs: &ApplyInputs) -> Option<String> {
    match (
        &inputs.requested_subscription,
        &inputs.requested_change_type,
    ) {
        (None, None) => None,
        (s, c) => Some(format!(
            "{} {}",
            s.as_deref().unwrap_or("?"),
            c.as_deref().unwrap_or("?")
        )),
    }
}

/// What an operator's approval or rejection did.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The held change's outcome now.
    pub outcome: Outcome,
    /// Whether this call decided it (`false`: it was decided already, by another click, another
    /// operator or another replica, or it expired: nothing was done again).
    pub decided: bool,
}

impl Guard {
    /// A held change's outcome as it stands: held; the operation's once approved; the
    /// decision's otherwise.
    pub async fn approval_outcome(&self, held: &Approval) -> Result<Outcome, StoreError> {
        match held.state {
            ApprovalState::Held if held.expires_at > now_ms() => {
                Ok(held_outcome(stored_terms(held)))
            }
            ApprovalState::Held => Ok(
                Outcome::blocked(Reason::ApprovalExpired).with_current(Some(stored_terms(held)))
            ),
            ApprovalState::Approved => match self.store.operation(&held.request_key).await? {
                Some(op) => Box::pin(self.replay(op)).await,
                // Approved, the command about to be claimed: still waiting.
                None => Ok(held_outcome(stored_terms(held))),
            },
            ApprovalState::Rejected
            | ApprovalState::Expired
            | ApprovalState::Blocked
            | ApprovalState::Withdrawn => Ok(held
                .outcome
                .as_deref()
                .and_then(|json| serde_json::from_str(json).ok())
                .unwrap_or_else(|| Outcome::blocked(Reason::ApprovalRejected))),
        }
    }

    /// An operator approves a held change. The service's record is read again: if the
    /// revision or any term moved, nothing is sent (`blocked`/`benefit_loss_hidden`); if the
    /// account's budget is spent by now, nothing is sent (`blocked`/`rate_limited`);
    /// otherwise the command goes out with the stored revision and the original request key,
    /// once however often this is called, by however many operators or replicas.
    pub async fn approve(
        &self,
        key: &str,
        operator: &str,
        note: Option<&str>,
    ) -> Result<Option<Decision>, StoreError> {
        let Some(held) = self.store.approval(key).await? else {
            return Ok(None);
        };
        let mine = match held.state {
            ApprovalState::Held => self.store.start_approval(key, operator, note).await?,
            // Approved by a process that stopped before claiming the operation: taken over
            // once the claim is surely not coming.
            ApprovalState::Approved => {
                let stalled = held.decided_at.is_some_and(|at| {
                    now_ms() - at > self.config.in_flight_wait.as_millis() as i64
                });
                stalled
                    && self.store.operation(key).await?.is_none()
                    && self
                        .store
                        .resume_approval(key, held.decided_at.unwrap_or_default())
                        .await?
            }
            _ => false,
        };
        if !mine {
            let now = self.store.approval(key).await?.unwrap_or(held);
            return Ok(Some(Decision {
                outcome: self.approval_outcome(&now).await?,
                decided: false,
            }));
        }
        let outcome = self.send_approved(&held).await?;
        self.audit_decision(
            &held,
            "approve_subscription_change",
            operator,
            &outcome,
            note,
        )
        .await?;
        self.notify(&held, &outcome).await;
        Ok(Some(Decision {
            outcome,
            decided: true,
        }))
    }

    /// Steps 11 to 15 again for an approved change, with the terms stored at the hold.
    async fn send_approved(&self, held: &Approval) -> Result<Outcome, StoreError> {
        let key = &held.request_key;
        let terms = stored_terms(held);
        let confirmation = Confirmation {
            account: held.account.clone(),
            tag: Tag {
                subscription: held.subscription.clone(),
                change_type: held.change_type.clone(),
                revision: held.revision,
            },
            // The hold's stored terms and revision bind it; the name is not stored.
            subscription: None,
            terms: terms.clone(),
            question: Question {
                text: held.question.clone(),
                timestamp: held.question_at,
                position: 0,
            },
            reply: Reply {
                text: held.reply.clone(),
                timestamp: held.reply_at,
                message_id: held.reply_id.clone(),
                meaning: Meaning::Yes,
                given: Given::Typed,
                after_other_message: None,
            },
            request_key: key.clone(),
        };
        let (current, _) = match self.read_and_compare(&confirmation).await {
            Ok(current) => current,
            Err(refusal) => {
                if refusal.reason == Some(Reason::ServiceUnavailable) {
                    // Nothing sent and nothing known: the approval stands and may be given
                    // again once the service answers (it is taken over after a while).
                    return Ok(refusal);
                }
                let json = serde_json::to_string(&refusal).expect("an outcome serialises");
                self.store.block_approval(key, &json).await?;
                return Ok(refusal);
            }
        };
        let op = Operation {
            request_key: key.clone(),
            sender_id: held.sender_id.clone(),
            account: held.account.clone(),
            subscription: held.subscription.clone(),
            change_type: held.change_type.clone(),
            revision: held.revision,
            terms: held.terms.clone(),
            state: OpState::Claimed,
            outcome: None,
            created_at: now_ms(),
            updated_at: now_ms(),
        };
        let outcome = self.claim_spend_send(op, confirmation, current).await?;
        if outcome.reason == Some(Reason::RateLimited) {
            // The budget was spent by the time of approval: the hold ends, nothing sent.
            let json = serde_json::to_string(&outcome).expect("an outcome serialises");
            self.store.block_approval(key, &json).await?;
        }
        Ok(outcome)
    }

    /// An operator rejects a held change: `blocked`/`approval_rejected`, the note as `why`.
    pub async fn reject(
        &self,
        key: &str,
        operator: &str,
        note: &str,
    ) -> Result<Option<Decision>, StoreError> {
        let Some(held) = self.store.approval(key).await? else {
            return Ok(None);
        };
        let outcome = Outcome::blocked(Reason::ApprovalRejected)
            .with_current(Some(stored_terms(&held)))
            .with_why(Some(note.to_owned()).filter(|n| !n.trim().is_empty()));
        let json = serde_json::to_string(&outcome).expect("an outcome serialises");
        if !self
            .store
            .reject_approval(key, operator, note, &json)
            .await?
        {
            let now = self.store.approval(key).await?.unwrap_or(held);
            return Ok(Some(Decision {
                outcome: self.approval_outcome(&now).await?,
                decided: false,
            }));
        }
        self.audit_decision(
            &held,
            "reject_subscription_change",
            operator,
            &outcome,
            Some(note),
        )
        .await?;
        self.notify(&held, &outcome).await;
        Ok(Some(Decision {
            outcome,
            decided: true,
        }))
    }

    /// The customer takes back their held change before it is decided (CONTRACT.md
    /// section 7): `blocked`/`withdrawn`, audited, and nothing is sent, then or on a later
    /// approval. `None` when it was no longer held (decided meanwhile).
    pub async fn withdraw(&self, held: &Approval) -> Result<Option<Outcome>, StoreError> {
        let outcome = Outcome::blocked(Reason::Withdrawn).with_current(Some(stored_terms(held)));
        let json = serde_json::to_string(&outcome).expect("an outcome serialises");
        if !self
            .store
            .withdraw_approval(&held.request_key, &json)
            .await?
        {
            return Ok(None);
        }
        self.audit_decision(
            held,
            "withdraw_subscription_change",
            "customer",
            &outcome,
            None,
        )
        .await?;
        Ok(Some(outcome))
    }

    /// Ends the holds past their expiry (`blocked`/`approval_expired`); how many.
    pub async fn expire_holds(&self) -> Result<usize, StoreError> {
        let outcome = Outcome::blocked(Reason::ApprovalExpired);
        let json = serde_json::to_string(&outcome).expect("an outcome serialises");
        let keys = self.store.expire_approvals(&json).await?;
        for key in &keys {
            if let Some(held) = self.store.approval(key).await? {
                self.audit_decision(&held, "expire_subscription_change", "-", &outcome, None)
                    .await?;
                self.notify(&held, &outcome).await;
            }
        }
        Ok(keys.len())
    }

    async fn audit_decision(
        &self,
        held: &Approval,
        action: &str,
        operator: &str,
        outcome: &Outcome,
        note: Option<&str>,
    ) -> Result<(), StoreError> {
        tracing::info!(request_key = %held.request_key, operator, action, status = outcome.status.as_str(), "a held change was decided");
        self.store
            .audit(AuditEntry {
                at: now_ms(),
                action: action.into(),
                sender_id: held.sender_id.clone(),
                account: Some(held.account.clone()),
                target: Some(format!("{} {}", held.subscription, held.change_type)),
                question_terms: Some(held.question.clone()),
                service_terms: Some(held.terms.clone()),
                status: outcome.status.as_str().into(),
                reason: match (outcome.reason, note) {
                    (Some(r), Some(n)) if !n.is_empty() => Some(format!("{}: {n}", r.as_str())),
                    (Some(r), _) => Some(r.as_str().into()),
                    (None, Some(n)) if !n.is_empty() => Some(n.to_owned()),
                    (None, _) => None,
                },
                request_key: Some(held.request_key.clone()),
                operator: Some(operator.to_owned()),
                ..AuditEntry::default()
            })
            .await
    }

    /// Tells the conversation the decision through Rasa's HTTP API, when configured:
    /// `POST {notify_rasa_url}/conversations/{sender}/trigger_intent` with the intent
    /// `subscription_change_decided` and the outcome as entities. Best effort: the decision
    /// stands whatever Rasa answers, and `check_subscription_change` reports it.
    async fn notify(&self, held: &Approval, outcome: &Outcome) {
        let Some(base) = &self.config.approval.notify_rasa_url else {
            return;
        };
        let mut url = format!(
            "{}/conversations/{}/trigger_intent",
            base.trim_end_matches('/'),
            percent_encoding::utf8_percent_encode(&held.sender_id, PATH_SEGMENT)
        );
        if let Some(token) = &self.config.approval.notify_rasa_token {
            url.push_str("?token=");
            url.push_str(
                &percent_encoding::utf8_percent_encode(token, percent_encoding::NON_ALPHANUMERIC)
                    .to_string(),
            );
        }
        let body = serde_json::json!({
            "name": "subscription_change_decided",
            "entities": {
                "change_status": outcome.status.as_str(),
                "change_reason": outcome.reason.map(|r| r.as_str()),
            },
        });
        static RASA: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
        let http = RASA.get_or_init(|| {
            reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("an HTTP client builds")
        });
        match http.post(&url).json(&body).send().await {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => {
                tracing::warn!(status = r.status().as_u16(), sender = %held.sender_id, "Rasa refused the decision's intent")
            }
            Err(e) => {
                tracing::warn!(error = %e, sender = %held.sender_id, "the decision's intent could not reach Rasa")
            }
        }
    }
}

/// What a sender id must have escaped to be one path segment: Rasa reads the segment as
/// written, so nothing else is encoded (an id of letters, digits, `-` and `_` goes as is).
const PATH_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// The service's terms a hold stored at step 13.
fn stored_terms(held: &Approval) -> Terms {
    serde_json::from_str(&held.terms).expect("stored terms are valid")
}
