//! The pure checks of CONTRACT.md section 4: steps 1 to 10 on the conversation
//! ([`check_conversation`]), the request key, and steps 12 and 13 on the service's record
//! ([`compare_facts`]). No I/O: a newcomer changing a check reads only this file.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::inputs::ApplyInputs;
use super::outcome::{Outcome, Reason, Terms};
use super::question::{self, contains_whole};
use super::ConsentConfig;
use crate::conversation::{change_memory, Given, Meaning, Question, Reply};
use crate::subscriptions::model::{change_tag_as, effective_text, RevisionFormat, Tag};
use crate::subscriptions::Subscription;

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
    /// How the provider writes revisions in tags.
    pub revision_format: RevisionFormat,
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
        .and_then(|tag| Tag::parse_as(tag, config.revision_format))
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
        revision_format: config.revision_format,
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
pub fn current_terms(
    record: &Subscription,
    change_type: &str,
    format: RevisionFormat,
) -> Option<Terms> {
    let option = record.option(change_type)?;
    Some(Terms {
        tag: change_tag_as(&record.id, change_type, record.revision, format),
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
    let format = confirmation.revision_format;
    let current = current_terms(record, &confirmation.tag.change_type, format);
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
            .with_why(record.why_since_as(confirmation.tag.revision, format))),
    }
}
