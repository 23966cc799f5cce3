//! Stripe's webhooks received (CONTRACT.md section 8): `POST /v1/stripe-events` on the
//! events port, `Stripe-Signature` checked with the endpoint's secret within the tolerance,
//! each event id taken once, and a subscription's event weighed against the operation whose
//! request key Stripe names as the request's `idempotency_key`: an unknown outcome resolved,
//! a contradiction kept for a person.

use serde::Deserialize;
use serde_json::{json, Value};

use super::{Inbox, Named, Received, Refused, Verdict};
use crate::store::{OpState, Operation, StoreError};
use crate::subscriptions::stripe::record::{Facts, StripeSubscription, Write};

/// The header Stripe signs its deliveries in (`t=…,v1=…`, the scheme of docs/EVENTS.md).
pub const SIGNATURE_HEADER: &str = "Stripe-Signature";

/// The prefix of the request keys the guard makes: a key without it is another writer's
/// (the Dashboard, another integration), never one of our operations.
const OUR_KEYS: &str = "ag-";

/// A Stripe event, as far as it is read.
#[derive(Deserialize)]
struct StripeEvent {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    data: EventData,
    /// `{"id": "req_…", "idempotency_key": "…"}`; a bare request id in older API
    /// versions; absent for changes Stripe made itself (a period renewed).
    #[serde(default)]
    request: Option<Value>,
}

#[derive(Deserialize)]
struct EventData {
    object: Value,
    /// The fields that changed, with their values before (`.updated` events).
    #[serde(default)]
    previous_attributes: Option<Value>,
}

/// How an event with our request key contradicts its operation.
enum Contradiction {
    /// It is not this operation's change (another subscription, account or change): not
    /// acted on.
    Foreign(String),
    /// Stripe made the change under the key, on a record that had moved from the confirmed
    /// one (another writer got in between the read and the write): the change stands, and
    /// a person is told.
    Raced(String),
}

impl Inbox {
    /// Checks one delivery of Stripe's and acts on it, as [`Inbox::receive`] does for the
    /// service's: nothing read before the signature verified, nothing recorded for a
    /// refused one; an event about something other than a subscription is answered and
    /// ignored.
    pub async fn receive_stripe(
        &self,
        signature: Option<&str>,
        body: &[u8],
    ) -> Result<Received, Refused> {
        self.verified(signature, body)?;
        let event: StripeEvent = serde_json::from_slice(body).map_err(|e| {
            self.malformed(format!(
                "not a Stripe event (line {}, column {})",
                e.line(),
                e.column()
            ))
        })?;
        if !event.kind.starts_with("customer.subscription.") {
            self.counters
                .ignored
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(Received::Ignored);
        }
        let facts = serde_json::from_value::<StripeSubscription>(event.data.object.clone())
            .map_err(|e| e.to_string())
            .and_then(|raw| raw.facts().map_err(|e| e.to_string()))
            .map_err(|e| self.malformed(format!("the event's subscription: {e}")))?;
        let before = match &event.data.previous_attributes {
            Some(Value::Object(previous)) if !previous.is_empty() => {
                let mut earlier = event.data.object.clone();
                for (key, value) in previous {
                    earlier[key] = value.clone();
                }
                serde_json::from_value::<StripeSubscription>(earlier)
                    .ok()
                    .and_then(|raw| raw.facts().ok())
            }
            _ => None,
        };
        let request_key = event
            .request
            .as_ref()
            .and_then(|r| r.get("idempotency_key"))
            .and_then(Value::as_str)
            .filter(|key| key.starts_with(OUR_KEYS))
            .map(str::to_owned);
        let named = Named {
            id: event.id.clone(),
            kind: event.kind.clone(),
            subscription: facts.id.clone(),
            account: facts.customer.clone(),
            revision: facts.fingerprint(),
            request_key: request_key.clone(),
            change: json!({
                "type": event.kind,
                "status": facts.status,
                "cancel_at_period_end": facts.cancel_at_period_end,
                "previous_attributes": event.data.previous_attributes,
            }),
        };
        let weigh = self.weigh_stripe(request_key, facts, before);
        self.settle(named, body, weigh).await
    }

    /// What a subscription's event means: one under a request key of ours proves that
    /// operation's outcome, in whatever order it arrives (Stripe made the write the key
    /// names); any other is another writer's, recorded.
    async fn weigh_stripe(
        &self,
        request_key: Option<String>,
        facts: Facts,
        before: Option<Facts>,
    ) -> Result<(Verdict, Option<Operation>), StoreError> {
        let Some(key) = request_key else {
            return Ok((Verdict::Recorded, None));
        };
        let Some(op) = self.guard.store().operation(&key).await? else {
            let why = "a change under a request key that no operation of ours has";
            return Ok((Verdict::Mismatch(why.into()), None));
        };
        let raced = match contradiction(&facts, before.as_ref(), &op) {
            Some(Contradiction::Foreign(why)) => return Ok((Verdict::Mismatch(why), Some(op))),
            Some(Contradiction::Raced(why)) => Some(why),
            None => None,
        };
        let (verdict, op) = match op.state {
            OpState::Sent | OpState::Unknown => self.resolve_made(op, "Stripe").await?,
            OpState::Applied => (Verdict::Confirmed, Some(op)),
            OpState::Claimed | OpState::Failed => {
                return Ok((
                    Verdict::Mismatch(format!(
                        "Stripe reports the change made; the operation is {}",
                        op.state.as_str()
                    )),
                    Some(op),
                ))
            }
        };
        // Made on another record than the confirmed one: applied, and a person is told.
        Ok(match (verdict, raced) {
            (Verdict::Mismatch(why), _) | (_, Some(why)) => (Verdict::Mismatch(why), op),
            (verdict, None) => (verdict, op),
        })
    }
}

/// What in an event under the operation's key contradicts it: another subscription,
/// customer or change, a record that does not show the change, or one made from another
/// record than the confirmed revision (from the event's earlier attributes when Stripe
/// sends them, otherwise from the records the change could have been made on).
fn contradiction(facts: &Facts, before: Option<&Facts>, op: &Operation) -> Option<Contradiction> {
    if facts.id != op.subscription || facts.customer != op.account {
        return Some(Contradiction::Foreign(format!(
            "the event is {} of {}; the operation changed {} of {}",
            facts.id, facts.customer, op.subscription, op.account
        )));
    }
    let Some(write) = Write::of(&op.change_type).filter(|w| w.shown_in(facts)) else {
        return Some(Contradiction::Foreign(format!(
            "the event's subscription does not show {}, which the customer confirmed",
            op.change_type
        )));
    };
    let made_on_the_confirmed_record = match before {
        Some(before) => before.fingerprint() == op.revision && facts.made_from(before, write),
        None => facts.made_from_revision(op.revision, write),
    };
    (!made_on_the_confirmed_record).then(|| {
        Contradiction::Raced(format!(
            "Stripe made {} under the operation's key on a record other than the confirmed revision: another writer got in between the read and the write",
            op.change_type
        ))
    })
}
