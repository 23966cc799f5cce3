//! The Stripe Billing provider (over 400 lines: the reads, the command and its resend share the re-read and the answer's check, read top to bottom).
//!
//! The Stripe Billing provider of CONTRACT.md section 8: accounts are customer ids, the
//! revision is a fingerprint of the fields that decide the terms, and since Stripe has no
//! conditional write, the command re-reads the record right before writing, writes under
//! the request key as `Idempotency-Key`, and checks the record Stripe answers with.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use reqwest::{header, StatusCode};
use tracing::Instrument as _;

use crate::store::Store;

use super::client::answer::{command_answer, error_message, read_capped, CommandAnswer};
use super::client::{answered, segment, service_span};
use super::model::{Change, Subscription};
use super::provider::{Call, CommandOutcome, ConfirmedCommand, KeyState, Provider, ServiceError};

pub mod record;
use record::{Facts, Offered, StripeSubscription, Write};

/// Stripe's API, where `api_base` is not given.
pub const STRIPE_API_BASE: &str = "https://api.stripe.com";

/// How many earlier readings of each subscription are kept to say what moved since.
const READINGS_KEPT: usize = 8;
/// How many product names are kept.
const PRODUCTS_KEPT: usize = 10_000;

/// Where Stripe is and what may be offered through it.
#[derive(Debug, Clone, PartialEq)]
pub struct StripeSettings {
    pub api_key: String,
    pub api_base: String,
    pub offered: Offered,
    pub timeout: Duration,
    /// The webhook endpoint's signing secret, when Stripe's events are received.
    pub webhook_secret: Option<String>,
}

/// Stripe Billing as a [`Provider`].
pub struct StripeProvider {
    http: reqwest::Client,
    base: String,
    key: String,
    offered: Offered,
    /// Product names by id (a product's name is in the terms).
    products: Mutex<HashMap<String, String>>,
    /// Where the facts read under each fingerprint are kept (the store: every replica's
    /// readings, across restarts): the `why` of a moved fingerprint is worked out from the
    /// reading the customer was shown.
    store: Store,
}

impl StripeProvider {
    pub fn new(settings: &StripeSettings, store: Store) -> Result<Self, reqwest::Error> {
        crate::telemetry::install_crypto();
        let http = reqwest::Client::builder()
            // As the service's client: a redirect is an answer, never followed.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout.min(Duration::from_secs(5)))
            .build()?;
        Ok(Self {
            http,
            base: settings.api_base.trim_end_matches('/').to_owned(),
            key: settings.api_key.clone(),
            offered: settings.offered,
            products: Mutex::default(),
            store,
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .header(header::AUTHORIZATION, format!("Bearer {}", self.key))
            .header(header::ACCEPT, "application/json")
    }

    /// `GET` a JSON answer, in `span`; `None` on 404.
    async fn read<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        span: tracing::Span,
    ) -> Result<Option<T>, ServiceError> {
        self.read_answer(path).instrument(span).await
    }

    async fn read_answer<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<Option<T>, ServiceError> {
        let response = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .map_err(|e| ServiceError::Unreachable(e.without_url().into()))?;
        answered(response.status().as_u16());
        let status = response.status();
        let body = read_capped(response)
            .await
            .map_err(|e| ServiceError::Invalid(e.to_string()))?;
        match status {
            StatusCode::OK => serde_json::from_slice(&body)
                .map(Some)
                .map_err(|e| ServiceError::Invalid(e.to_string())),
            StatusCode::NOT_FOUND => Ok(None),
            s => Err(ServiceError::Status {
                status: s.as_u16(),
                message: error_message(&body),
            }),
        }
    }

    async fn fetch(&self, id: &str) -> Result<Option<StripeSubscription>, ServiceError> {
        let span = service_span!("stripe.get_subscription", "GET", "/v1/subscriptions/{id}");
        self.read(&format!("/v1/subscriptions/{}", segment(id)), span)
            .await
    }

    async fn product_name(&self, id: &str) -> Result<String, ServiceError> {
        if let Some(name) = self.products.lock().expect("not poisoned").get(id) {
            return Ok(name.clone());
        }
        #[derive(serde::Deserialize)]
        struct Product {
            name: String,
        }
        let product: Product = self
            .read(
                &format!("/v1/products/{}", segment(id)),
                service_span!("stripe.get_product", "GET", "/v1/products/{id}"),
            )
            .await?
            .ok_or_else(|| ServiceError::Invalid(format!("no product {id}")))?;
        let mut products = self.products.lock().expect("not poisoned");
        if products.len() >= PRODUCTS_KEPT {
            products.clear();
        }
        products.insert(id.to_owned(), product.name.clone());
        Ok(product.name)
    }

    /// The record as the guard reads it, with a note for each earlier reading whose
    /// terms differ, so a moved fingerprint has its `why`.
    async fn subscription(&self, facts: Facts) -> Result<Subscription, ServiceError> {
        let product = self.product_name(&facts.lines[0].product).await?;
        let mut record = facts.subscription(&product, self.offered);
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        // The why is words beside the terms: a store that cannot be read leaves it out,
        // never the terms (which are Stripe's, read just now).
        let earlier = match self.store.stripe_readings(&facts.id, READINGS_KEPT).await {
            Ok(earlier) => earlier,
            Err(e) => {
                tracing::warn!(error = %e, "earlier readings could not be read; no why");
                return Ok(record);
            }
        };
        record.notes = earlier
            .iter()
            .filter(|(revision, _)| *revision != record.revision)
            .filter_map(|(_, text)| serde_json::from_str::<Facts>(text).ok())
            .filter_map(|earlier| facts.note_from(&earlier, now))
            .collect();
        if !earlier
            .iter()
            .any(|(revision, _)| *revision == record.revision)
        {
            let text = serde_json::to_string(&facts).expect("facts serialise");
            if let Err(e) = self
                .store
                .keep_stripe_reading(&facts.id, record.revision, &text, READINGS_KEPT)
                .await
            {
                tracing::warn!(error = %e, "a reading could not be kept");
            }
        }
        Ok(record)
    }

    async fn read_subscription(
        &self,
        raw: StripeSubscription,
    ) -> Result<Subscription, ServiceError> {
        let facts = raw
            .facts()
            .map_err(|e| ServiceError::Invalid(e.to_string()))?;
        self.subscription(facts).await
    }

    pub async fn list(&self, account: &str) -> Result<Vec<Subscription>, ServiceError> {
        #[derive(serde::Deserialize)]
        struct Page {
            data: Vec<StripeSubscription>,
        }
        let path = format!("/v1/subscriptions?customer={}&limit=100", segment(account));
        let span = service_span!("stripe.list_subscriptions", "GET", "/v1/subscriptions");
        let page: Page = match self.read(&path, span).await {
            Ok(Some(page)) => page,
            // An unknown customer has no subscriptions.
            Ok(None) | Err(ServiceError::Status { status: 400, .. }) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut records = Vec::new();
        for raw in page.data {
            let record = self.read_subscription(raw).await?;
            // Only the customer's own: whatever Stripe's filter did.
            if record.account == account {
                records.push(record);
            }
        }
        Ok(records)
    }

    pub async fn get(&self, id: &str) -> Result<Option<Subscription>, ServiceError> {
        match self.fetch(id).await? {
            Some(raw) => self.read_subscription(raw).await.map(Some),
            None => Ok(None),
        }
    }

    /// The record read again right before a write, as facts; or what to answer instead.
    async fn reread(&self, id: &str) -> Result<Facts, CommandOutcome> {
        match self.fetch(id).await {
            Ok(Some(raw)) => raw
                .facts()
                .map_err(|e| CommandOutcome::NotSent(e.to_string())),
            Ok(None) => Err(CommandOutcome::Rejected {
                status: 404,
                message: "no such subscription".into(),
            }),
            Err(e) => Err(CommandOutcome::NotSent(format!(
                "the record could not be read again: {e}"
            ))),
        }
    }

    /// A record moved since the customer's yes: nothing is sent, and the record as it is
    /// now is the answer.
    async fn moved(&self, facts: Facts) -> CommandOutcome {
        CommandOutcome::Stale(self.subscription(facts).await.ok().map(Box::new))
    }

    /// Section 8's command: read again, compare the fingerprint, write under the request
    /// key, check the answer.
    pub async fn send_change(&self, change: &(impl ConfirmedCommand + ?Sized)) -> CommandOutcome {
        let facts = match self.reread(change.subscription()).await {
            Ok(facts) => facts,
            Err(outcome) => return outcome,
        };
        if facts.fingerprint() != change.revision() {
            return self.moved(facts).await;
        }
        let Some(write) = facts.write_for(change.change_type(), self.offered) else {
            return self.not_offered(change);
        };
        self.write(change, &facts, write).await
    }

    /// Section 8's unknown outcome: the same write again under the same key, where the
    /// record is still the confirmed revision (the first write may not have been made) or
    /// is exactly it with this change made (Stripe replays the first answer; were the
    /// change another's, writing it again changes nothing), and only where the change is
    /// still offered on the confirmed record, as the first write was checked. A record
    /// moved otherwise is not written: the first write's outcome is left to a person.
    pub async fn resend(&self, change: &(impl ConfirmedCommand + ?Sized)) -> CommandOutcome {
        let facts = match self.reread(change.subscription()).await {
            Ok(facts) => facts,
            Err(outcome) => return outcome,
        };
        let Some(write) = Write::of(change.change_type()) else {
            return self.not_offered(change);
        };
        let before = if facts.fingerprint() == change.revision() {
            facts
        } else {
            let undone = facts.undone(write);
            match undone
                .into_iter()
                .find(|b| b.fingerprint() == change.revision())
            {
                Some(before) => before,
                None => return self.moved(facts).await,
            }
        };
        if before.write_for(change.change_type(), self.offered) != Some(write) {
            return self.not_offered(change);
        }
        self.write(change, &before, write).await
    }

    /// A change not offered on the record it would be written on: refused, nothing sent.
    fn not_offered(&self, change: &(impl ConfirmedCommand + ?Sized)) -> CommandOutcome {
        CommandOutcome::Rejected {
            status: 422,
            message: format!(
                "{} is not offered on this subscription",
                change.change_type()
            ),
        }
    }

    /// The write, under the request key as `Idempotency-Key`, and its answer checked
    /// against the record it was made on.
    async fn write(
        &self,
        change: &(impl ConfirmedCommand + ?Sized),
        before: &Facts,
        write: Write,
    ) -> CommandOutcome {
        let method = match write {
            Write::CancelAtPeriodEnd(_) => "POST",
            Write::CancelNow => "DELETE",
        };
        let span = service_span!(
            "stripe.update_subscription",
            method,
            "/v1/subscriptions/{id}"
        );
        self.write_answer(change, before, write)
            .instrument(span)
            .await
    }

    async fn write_answer(
        &self,
        change: &(impl ConfirmedCommand + ?Sized),
        before: &Facts,
        write: Write,
    ) -> CommandOutcome {
        let path = format!("/v1/subscriptions/{}", segment(change.subscription()));
        let request = match write {
            Write::CancelAtPeriodEnd(on) => self
                .request(reqwest::Method::POST, &path)
                .form(&[("cancel_at_period_end", if on { "true" } else { "false" })]),
            Write::CancelNow => self
                .request(reqwest::Method::DELETE, &path)
                .form(&[("prorate", "false")]),
        };
        let sent = request
            .header("Idempotency-Key", change.request_key())
            .send()
            .await;
        let CommandAnswer {
            status,
            replayed,
            body,
        } = match command_answer(sent, answered).await {
            Ok(answer) => answer,
            Err(outcome) => return outcome,
        };
        match status {
            200 => self.answered(change, before, write, &body, replayed),
            // Another request with this key is being processed.
            409 => CommandOutcome::InFlight,
            // Refused before anything was done: too many requests.
            429 => CommandOutcome::NotSent("Stripe answered 429".into()),
            s if s >= 500 => CommandOutcome::Unknown(format!("Stripe answered {s}")),
            s => CommandOutcome::Rejected {
                status: s,
                message: error_message(&body),
            },
        }
    }

    /// What Stripe's answer to the write says: the change stands if the record shows it;
    /// anything else moved beside it is another writer's, escalated for a person.
    fn answered(
        &self,
        change: &(impl ConfirmedCommand + ?Sized),
        before: &Facts,
        write: Write,
        body: &[u8],
        replayed: bool,
    ) -> CommandOutcome {
        let after = match serde_json::from_slice::<StripeSubscription>(body)
            .map_err(|e| e.to_string())
            .and_then(|raw| raw.facts().map_err(|e| e.to_string()))
        {
            Ok(after) => after,
            Err(e) => {
                return CommandOutcome::Unknown(format!("Stripe's answer could not be read: {e}"))
            }
        };
        if !write.shown_in(&after) || after.id != before.id || after.customer != before.customer {
            return CommandOutcome::Unknown("Stripe's answer does not show the change".into());
        }
        let contradiction = (!after.made_from(before, write)).then(|| {
            let expected = before.after(write, after.cancel_at);
            format!(
                "Stripe's record after the write is not the confirmed revision plus this change: another writer got in between the read and the write ({})",
                after
                    .why_from(&expected)
                    .unwrap_or_else(|| "a field that decides the terms moved".into())
            )
        });
        CommandOutcome::Applied {
            change: Change {
                request_key: change.request_key().to_owned(),
                subscription: after.id.clone(),
                change_type: change.change_type().to_owned(),
                status: match write {
                    Write::CancelAtPeriodEnd(true) => "scheduled",
                    _ => "applied",
                }
                .into(),
                effective_at: record::rfc3339(after.period_end),
                revision: after.fingerprint(),
            },
            replayed,
            contradiction,
        }
    }
}

impl Provider for StripeProvider {
    fn list<'a>(&'a self, account: &'a str) -> Call<'a, Result<Vec<Subscription>, ServiceError>> {
        Box::pin(Self::list(self, account))
    }

    fn get<'a>(&'a self, id: &'a str) -> Call<'a, Result<Option<Subscription>, ServiceError>> {
        Box::pin(Self::get(self, id))
    }

    /// Stripe keeps no change history by key: nothing is concluded from it, and an
    /// unknown outcome stays pending for a person (section 8).
    fn change_by_key<'a>(
        &'a self,
        _request_key: &'a str,
    ) -> Call<'a, Result<KeyState, ServiceError>> {
        Box::pin(async { Ok(KeyState::NotFound) })
    }

    fn send_change<'a>(&'a self, change: &'a dyn ConfirmedCommand) -> Call<'a, CommandOutcome> {
        Box::pin(Self::send_change(self, change))
    }

    fn resend<'a>(&'a self, change: &'a dyn ConfirmedCommand) -> Call<'a, Option<CommandOutcome>> {
        Box::pin(async move { Some(Self::resend(self, change).await) })
    }
}

#[cfg(test)]
mod tests;
