//! Stripe's subscription record as CONTRACT.md section 8 reads it (over 400 lines: the reading, the fingerprint and the terms change together, and half of it is the terms' words):
//! the fields that decide the terms, their fingerprint (the revision in the tag), the options with their terms
//! worked out from the record and its prices, and the `why` when the fingerprint moved.
//! Pure: no I/O.

use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::subscriptions::model::{effective_text, ChangeOption, Note, Subscription};

/// A subscription as Stripe answers it; only what the terms depend on is read.
#[derive(Debug, Clone, Deserialize)]
pub struct StripeSubscription {
    pub id: String,
    /// The customer's id (or the customer, when expanded).
    pub customer: Value,
    pub status: String,
    #[serde(default)]
    pub cancel_at_period_end: bool,
    #[serde(default)]
    pub cancel_at: Option<i64>,
    /// At the top level in older API versions; on each item in newer ones.
    #[serde(default)]
    pub current_period_end: Option<i64>,
    pub items: Items,
    #[serde(default)]
    pub pause_collection: Option<Value>,
    #[serde(default)]
    pub latest_invoice: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Items {
    pub data: Vec<Item>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Item {
    #[serde(default)]
    pub price: Option<Price>,
    /// The legacy form of the price, which Stripe still returns beside it.
    #[serde(default)]
    pub plan: Option<Plan>,
    #[serde(default)]
    pub quantity: Option<i64>,
    #[serde(default)]
    pub current_period_end: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Price {
    pub id: String,
    #[serde(default)]
    pub unit_amount: Option<i64>,
    pub currency: String,
    #[serde(default)]
    pub recurring: Option<Recurring>,
    #[serde(default)]
    pub product: Value,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Recurring {
    pub interval: String,
    #[serde(default = "one")]
    pub interval_count: i64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Plan {
    pub id: String,
    #[serde(default)]
    pub amount: Option<i64>,
    pub currency: String,
    pub interval: String,
    #[serde(default = "one")]
    pub interval_count: i64,
    #[serde(default)]
    pub product: Value,
}

fn one() -> i64 {
    1
}

/// One item's price, from `price` or else the legacy `plan`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
pub struct Line {
    pub price: String,
    /// In the currency's smallest unit, for one unit.
    pub amount: i64,
    pub currency: String,
    pub interval: String,
    pub interval_count: i64,
    pub product: String,
    pub quantity: i64,
}

impl Item {
    fn line(&self) -> Option<Line> {
        let quantity = self.quantity.unwrap_or(1);
        if let Some(p) = &self.price {
            let recurring = p.recurring.as_ref()?;
            return Some(Line {
                price: p.id.clone(),
                amount: p.unit_amount?,
                currency: p.currency.to_ascii_uppercase(),
                interval: recurring.interval.clone(),
                interval_count: recurring.interval_count,
                product: id_of(&p.product)?,
                quantity,
            });
        }
        let p = self.plan.as_ref()?;
        Some(Line {
            price: p.id.clone(),
            amount: p.amount?,
            currency: p.currency.to_ascii_uppercase(),
            interval: p.interval.clone(),
            interval_count: p.interval_count,
            product: id_of(&p.product)?,
            quantity,
        })
    }
}

/// An id, or the id of an expanded object.
fn id_of(value: &Value) -> Option<String> {
    match value {
        Value::String(id) => Some(id.clone()),
        Value::Object(o) => o.get("id")?.as_str().map(str::to_owned),
        _ => None,
    }
}

/// What the terms are made of, read from a record: the same facts give the same terms.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
pub struct Facts {
    pub id: String,
    pub customer: String,
    pub status: String,
    pub cancel_at_period_end: bool,
    pub cancel_at: Option<i64>,
    pub period_end: i64,
    pub lines: Vec<Line>,
    pub paused: Option<String>,
    pub latest_invoice: Option<String>,
}

/// Why a record could not be read as section 8 needs it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("the Stripe subscription could not be read: {0}")]
pub struct Unreadable(pub String);

impl StripeSubscription {
    /// The facts, or why they cannot be told: a record without its period's end or its
    /// prices has no terms to read out, and the guard fails closed on it.
    pub fn facts(&self) -> Result<Facts, Unreadable> {
        let customer = id_of(&self.customer).ok_or_else(|| Unreadable("no customer".into()))?;
        let lines = self
            .items
            .data
            .iter()
            .map(|i| {
                i.line()
                    .ok_or_else(|| Unreadable("an item without a recurring price".into()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if lines.is_empty() {
            return Err(Unreadable("no items".into()));
        }
        let period_end = self
            .current_period_end
            .or_else(|| {
                self.items
                    .data
                    .iter()
                    .filter_map(|i| i.current_period_end)
                    .min()
            })
            .ok_or_else(|| Unreadable("no current period end".into()))?;
        Ok(Facts {
            id: self.id.clone(),
            customer,
            status: self.status.clone(),
            cancel_at_period_end: self.cancel_at_period_end,
            cancel_at: self.cancel_at,
            period_end,
            lines,
            paused: self
                .pause_collection
                .as_ref()
                .filter(|v| !v.is_null())
                .map(Value::to_string),
            latest_invoice: self.latest_invoice.as_ref().and_then(id_of),
        })
    }
}

/// Which options the business offers through the assistant (section 8: `cancel_now` only
/// where configured).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offered {
    pub stop_renewal: bool,
    pub resume_renewal: bool,
    pub cancel_now: bool,
}

impl Default for Offered {
    fn default() -> Self {
        Self {
            stop_renewal: true,
            resume_renewal: true,
            cancel_now: false,
        }
    }
}

/// The change types of section 8.
pub const STOP_RENEWAL: &str = "stop_renewal";
pub const RESUME_RENEWAL: &str = "resume_renewal";
pub const CANCEL_NOW: &str = "cancel_now";

/// What a change sends to Stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// `POST /v1/subscriptions/{id}` with `cancel_at_period_end`.
    CancelAtPeriodEnd(bool),
    /// `DELETE /v1/subscriptions/{id}`, without proration.
    CancelNow,
}

impl Facts {
    /// The revision: the first 10 hex digits (40 bits) of a digest of every field that
    /// decides the terms, each written with its length so no two records share a text.
    pub fn fingerprint(&self) -> i64 {
        let mut hash = Sha256::new();
        let mut part = |text: &str| {
            hash.update((text.len() as u64).to_be_bytes());
            hash.update(text.as_bytes());
        };
        part(&self.status);
        part(if self.cancel_at_period_end { "1" } else { "0" });
        part(&self.cancel_at.map(|t| t.to_string()).unwrap_or_default());
        part(&self.period_end.to_string());
        for l in &self.lines {
            part(&l.price);
            part(&l.amount.to_string());
            part(&l.currency);
            part(&l.interval);
            part(&l.interval_count.to_string());
            part(&l.product);
            part(&l.quantity.to_string());
        }
        part(self.paused.as_deref().unwrap_or(""));
        part(self.latest_invoice.as_deref().unwrap_or(""));
        let digest = hash.finalize();
        let mut bytes = [0u8; 8];
        bytes[3..].copy_from_slice(&digest[..5]);
        i64::from_be_bytes(bytes)
    }

    fn live(&self) -> bool {
        matches!(self.status.as_str(), "active" | "trialing" | "past_due")
    }

    /// It renews at the period's end (nothing set to end it).
    fn renews(&self) -> bool {
        self.live() && !self.cancel_at_period_end && self.cancel_at.is_none()
    }

    /// What `change_type` would send to Stripe now, if it is offered on this record.
    pub fn write_for(&self, change_type: &str, offered: Offered) -> Option<Write> {
        match change_type {
            STOP_RENEWAL if offered.stop_renewal && self.renews() => {
                Some(Write::CancelAtPeriodEnd(true))
            }
            RESUME_RENEWAL
                if offered.resume_renewal && self.live() && self.cancel_at_period_end =>
            {
                Some(Write::CancelAtPeriodEnd(false))
            }
            CANCEL_NOW if offered.cancel_now && self.live() && self.paused.is_none() => {
                Some(Write::CancelNow)
            }
            _ => None,
        }
    }

    /// The price of one period: `12.00 USD a month` (`× 2` for two units).
    pub fn price_text(&self) -> String {
        self.lines
            .iter()
            .map(|l| {
                let units = if l.quantity == 1 {
                    String::new()
                } else {
                    format!(" × {}", l.quantity)
                };
                format!(
                    "{}{units} {}",
                    money(l.amount, &l.currency),
                    every(&l.interval, l.interval_count)
                )
            })
            .collect::<Vec<_>>()
            .join(" + ")
    }

    /// The next charge, for every item: amount × quantity, in each currency.
    fn next_charge(&self) -> String {
        let mut totals: Vec<(String, i64)> = Vec::new();
        for l in &self.lines {
            match totals.iter_mut().find(|(c, _)| *c == l.currency) {
                Some((_, total)) => *total += l.amount * l.quantity,
                None => totals.push((l.currency.clone(), l.amount * l.quantity)),
            }
        }
        totals
            .iter()
            .map(|(c, a)| money(*a, c))
            .collect::<Vec<_>>()
            .join(" + ")
    }

    /// `monthly`, `yearly`, `every 3 months`: the plan as the record names it.
    pub fn plan_text(&self) -> String {
        let l = &self.lines[0];
        match (l.interval.as_str(), l.interval_count) {
            ("day", 1) => "daily".into(),
            ("week", 1) => "weekly".into(),
            ("month", 1) => "monthly".into(),
            ("month", 3) => "quarterly".into(),
            ("year", 1) => "yearly".into(),
            (interval, n) => format!("every {n} {interval}s"),
        }
    }

    /// The record as the guard reads it: the fingerprint as its revision and an option for
    /// each change offered on it now, with its terms.
    pub fn subscription(&self, product: &str, offered: Offered) -> Subscription {
        let end = rfc3339(self.period_end);
        let end_text = effective_text(&end).unwrap_or_default();
        let mut options = Vec::new();
        if self.write_for(STOP_RENEWAL, offered).is_some() {
            options.push(ChangeOption {
                change_type: STOP_RENEWAL.into(),
                label: "Stop renewal at the end of the current period".into(),
                effective_at: end.clone(),
                entitlements: format!(
                    "{product} stays until {end_text}; no further charge ({}) is made; nothing is refunded",
                    self.price_text()
                ),
                review: false,
            });
        }
        if self.write_for(RESUME_RENEWAL, offered).is_some() {
            options.push(ChangeOption {
                change_type: RESUME_RENEWAL.into(),
                label: "Resume renewal now".into(),
                // The date read out is the next charge's: the renewal itself resumes at
                // once, and "now" would move between the question and the yes.
                effective_at: end.clone(),
                entitlements: format!(
                    "{product} renews; the next charge is {} on {end_text}",
                    self.next_charge()
                ),
                review: false,
            });
        }
        if self.write_for(CANCEL_NOW, offered).is_some() {
            options.push(ChangeOption {
                change_type: CANCEL_NOW.into(),
                label: "Cancel now, without proration".into(),
                // The period's end is when access would have ended; it ends now instead.
                effective_at: end.clone(),
                entitlements: format!(
                    "{product} ends now instead of on {end_text}; access ends at once; nothing is refunded"
                ),
                review: false,
            });
        }
        Subscription {
            id: self.id.clone(),
            account: self.customer.clone(),
            product: product.to_owned(),
            plan: self.plan_text(),
            status: self.status.clone(),
            revision: self.fingerprint(),
            options,
            notes: Vec::new(),
        }
    }

    /// What moved from `earlier` to these facts, in words: each field of the fingerprint
    /// that moved; `None` when none did.
    pub fn why_from(&self, earlier: &Facts) -> Option<String> {
        let mut moved = Vec::new();
        if earlier.period_end != self.period_end {
            moved.push(format!(
                "the period's end moved from {} to {}",
                when(earlier.period_end),
                when(self.period_end)
            ));
        }
        if earlier.price_text() != self.price_text() {
            moved.push(format!(
                "the price changed from {} to {}",
                earlier.price_text(),
                self.price_text()
            ));
        }
        if earlier.status != self.status {
            moved.push(format!(
                "the status changed from {} to {}",
                earlier.status, self.status
            ));
        }
        if earlier.cancel_at_period_end != self.cancel_at_period_end
            || earlier.cancel_at != self.cancel_at
        {
            moved.push(
                if self.cancel_at_period_end || self.cancel_at.is_some() {
                    "the subscription was set to end"
                } else {
                    "the subscription was set to renew"
                }
                .to_owned(),
            );
        }
        if earlier.paused != self.paused {
            moved.push("its payment collection was paused or resumed".into());
        }
        // The rest of the fingerprint, in words too: every move of it is a new revision the
        // customer must hear about (CONTRACT.md section 8, `why`).
        let same_items = |a: &Line, b: &Line| a.price == b.price && a.product == b.product;
        if earlier.price_text() == self.price_text()
            && (earlier.lines.len() != self.lines.len()
                || !earlier
                    .lines
                    .iter()
                    .zip(&self.lines)
                    .all(|(a, b)| same_items(a, b)))
        {
            moved.push("its items changed to another price or product at the same amount".into());
        }
        if earlier.latest_invoice != self.latest_invoice {
            moved.push(match &self.latest_invoice {
                Some(invoice) => format!("a new invoice was issued ({invoice})"),
                None => "its latest invoice changed".into(),
            });
        }
        if moved.is_empty() {
            return None;
        }
        let mut text = moved.join("; ");
        text[..1].make_ascii_uppercase();
        text.push('.');
        Some(text)
    }

    /// The note explaining the move from `earlier`, under `earlier`'s revision.
    pub fn note_from(&self, earlier: &Facts, at: i64) -> Option<Note> {
        Some(Note {
            revision: earlier.fingerprint(),
            at: rfc3339(at),
            text: self.why_from(earlier)?,
        })
    }
}

/// Currencies Stripe counts in whole units.
const ZERO_DECIMAL: &[&str] = &[
    "BIF", "CLP", "DJF", "GNF", "JPY", "KMF", "KRW", "MGA", "PYG", "RWF", "UGX", "VND", "VUV",
    "XAF", "XOF", "XPF",
];

/// `1200`, `USD` → `12.00 USD`; `500`, `JPY` → `500 JPY`.
pub fn money(amount: i64, currency: &str) -> String {
    if ZERO_DECIMAL.contains(&currency) {
        return format!("{amount} {currency}");
    }
    let sign = if amount < 0 { "-" } else { "" };
    let a = amount.unsigned_abs();
    format!("{sign}{}.{:02} {currency}", a / 100, a % 100)
}

fn every(interval: &str, count: i64) -> String {
    if count == 1 {
        format!("a {interval}")
    } else {
        format!("every {count} {interval}s")
    }
}

/// A Unix time as RFC 3339, UTC.
pub fn rfc3339(unix: i64) -> String {
    OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

/// A Unix time as the contract reads dates out.
fn when(unix: i64) -> String {
    effective_text(&rfc3339(unix)).unwrap_or_default()
}

mod writes;

#[cfg(test)]
mod tests;
