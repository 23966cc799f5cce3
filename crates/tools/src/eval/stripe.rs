//! The consent matrix against Stripe (CONTRACT.md section 8): each scenario's subscriptions
//! and accounts in localstripe (a stateful stand-in for Stripe's API), written through a
//! [proxy](crate::stripe_proxy) that counts the changes made, the facts moved by switching
//! the price, and the naive apply writing straight to Stripe. Worlds are made once and
//! set back to their first state before each scenario that takes one: localstripe slows
//! down as its objects grow (it saves all of them on every write).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::matrix::{EvalError, Scenario, Step};
use crate::stripe_proxy::{self, OnWrite, Proxy};

/// The demo data's subscriptions with their accounts, as the matrix names them.
const SUBSCRIPTIONS: [(&str, &str); 4] = [
    ("WS-SUB-3304", "acct-7"),
    ("WS-SUB-3310", "acct-7"),
    ("WS-SUB-4410", "acct-9"),
    ("WS-SUB-5120", "acct-12"),
];

/// The prices each move switches to in turn (tests/stripe/seed.py makes them): every move
/// is a new price, never one seen before, so each moves the fingerprint and the terms.
const MOVES: [&str; 4] = [
    "plan_box_monthly_v2",
    "plan_box_monthly_v3",
    "plan_box_monthly_v4",
    "plan_box_monthly_v5",
];

/// The price every subscription starts on.
const FIRST: &str = "plan_box_monthly";

/// Whether a scenario applies to Stripe: every change it asks for is one Stripe offers on
/// a renewing subscription (`stop_renewal`), or none at all.
pub fn applies(scenario: &Scenario) -> bool {
    scenario.steps.iter().all(|step| match step {
        Step::Request { change_type, .. } => {
            matches!(change_type.as_str(), "stop_renewal" | "something_else")
        }
        _ => true,
    })
}

/// The worlds made so far, free for the next scenario.
pub struct Worlds {
    api: String,
    key: String,
    free: Arc<Mutex<Vec<World>>>,
}

impl Worlds {
    pub fn new(api: &str, key: &str) -> Self {
        Self {
            api: api.to_owned(),
            key: key.to_owned(),
            free: Arc::default(),
        }
    }

    /// A world for one scenario, as it was first made: a free one set back, or a new one.
    pub async fn take(&self) -> Result<StripeWorld, EvalError> {
        let free = self.free.lock().expect("not poisoned").pop();
        let world = match free {
            Some(world) => {
                world.reset().await?;
                world
            }
            None => World::make(&self.api, &self.key).await?,
        };
        Ok(StripeWorld {
            world: Some(world),
            free: self.free.clone(),
        })
    }
}

/// One scenario's world, given back to the free ones when dropped.
pub struct StripeWorld {
    world: Option<World>,
    free: Arc<Mutex<Vec<World>>>,
}

impl std::ops::Deref for StripeWorld {
    type Target = World;

    fn deref(&self) -> &World {
        self.world.as_ref().expect("taken until dropped")
    }
}

impl Drop for StripeWorld {
    fn drop(&mut self) {
        if let Some(world) = self.world.take() {
            self.free.lock().expect("not poisoned").push(world);
        }
    }
}

/// A world in localstripe: the demo data's customers and subscriptions.
pub struct World {
    /// localstripe itself: seeding and the moves go here, past the count.
    pub api: String,
    pub key: String,
    /// What actiongate and the naive apply write through.
    pub proxy: Proxy,
    /// The matrix's ids and Stripe's, longest first.
    ids: Vec<(String, String)>,
    /// Each subscription's item, for a price switch.
    items: HashMap<String, String>,
    moves: Mutex<usize>,
}

impl World {
    /// Makes the customers and subscriptions in localstripe, each renewing monthly on the
    /// first price.
    async fn make(api: &str, key: &str) -> Result<Self, EvalError> {
        let http = reqwest::Client::new();
        let post = |path: String, form: Vec<(String, String)>| {
            let http = http.clone();
            async move { post_form(&http, api, key, &path, &form).await }
        };
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        let mut ids = Vec::new();
        let mut customers: HashMap<&str, String> = HashMap::new();
        let mut items = HashMap::new();
        for (sub, account) in SUBSCRIPTIONS {
            if !customers.contains_key(account) {
                let card = post(
                    "/v1/payment_methods".into(),
                    vec![
                        pair("type", "card"),
                        pair("card[number]", "4242424242424242"),
                        pair("card[exp_month]", "12"),
                        pair("card[exp_year]", "2030"),
                        pair("card[cvc]", "123"),
                    ],
                )
                .await?;
                let card = card["id"].as_str().unwrap_or_default().to_owned();
                let customer = post(
                    "/v1/customers".into(),
                    vec![
                        pair("email", &format!("{account}@example.com")),
                        pair("payment_method", &card),
                        pair("invoice_settings[default_payment_method]", &card),
                    ],
                )
                .await?;
                let id = customer["id"].as_str().unwrap_or_default().to_owned();
                ids.push((account.to_owned(), id.clone()));
                customers.insert(account, id);
            }
            let made = post(
                "/v1/subscriptions".into(),
                vec![
                    pair("customer", &customers[account]),
                    pair("items[0][plan]", FIRST),
                ],
            )
            .await?;
            let id = made["id"].as_str().unwrap_or_default().to_owned();
            let item = made["items"]["data"][0]["id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            items.insert(id.clone(), item);
            ids.push((sub.to_owned(), id));
        }
        ids.sort_by_key(|(ours, _)| std::cmp::Reverse(ours.len()));
        let proxy = stripe_proxy::start(api, OnWrite::PassThrough).await;
        Ok(Self {
            api: api.to_owned(),
            key: key.to_owned(),
            proxy,
            ids,
            items,
            moves: Mutex::new(0),
        })
    }

    /// The text with the matrix's ids written as Stripe's.
    pub fn translate(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (ours, theirs) in &self.ids {
            text = text.replace(ours.as_str(), theirs);
        }
        text
    }

    /// Every string in the value translated.
    pub fn translate_value(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.translate(s)),
            Value::Array(items) => items.iter().map(|v| self.translate_value(v)).collect(),
            Value::Object(map) => map
                .iter()
                .map(|(k, v)| (k.clone(), self.translate_value(v)))
                .collect(),
            other => other.clone(),
        }
    }

    /// Changes made through the proxy so far.
    pub fn changes(&self) -> i64 {
        self.proxy.made() as i64
    }

    /// Sets every subscription back to its first state (renewing, on the first price),
    /// past the count, and the moves back to the first.
    async fn reset(&self) -> Result<(), EvalError> {
        let http = reqwest::Client::new();
        for (id, item) in &self.items {
            let url = format!("{}/v1/subscriptions/{id}", self.api);
            let now: Value = http
                .get(&url)
                .bearer_auth(&self.key)
                .send()
                .await?
                .json()
                .await?;
            let first = now["cancel_at_period_end"] == false
                && now["items"]["data"][0]["plan"]["id"] == FIRST;
            if first {
                continue;
            }
            let form = [
                ("items[0][id]", item.as_str()),
                ("items[0][plan]", FIRST),
                ("cancel_at_period_end", "false"),
            ];
            let path = format!("/v1/subscriptions/{id}");
            post_form(&http, &self.api, &self.key, &path, &form).await?;
        }
        *self.moves.lock().expect("not poisoned") = 0;
        Ok(())
    }

    /// The facts move in Stripe: the subscription switches to a price it never had.
    pub async fn move_terms(&self, subscription: &str) -> Result<(), EvalError> {
        let id = self.translate(subscription);
        let item = self
            .items
            .get(&id)
            .ok_or_else(|| EvalError::Start(format!("move: no subscription {subscription}")))?;
        let plan = {
            let mut moves = self.moves.lock().expect("not poisoned");
            *moves += 1;
            MOVES[(*moves - 1) % MOVES.len()]
        };
        let form = [("items[0][id]", item.as_str()), ("items[0][plan]", plan)];
        let path = format!("/v1/subscriptions/{id}");
        post_form(&reqwest::Client::new(), &self.api, &self.key, &path, &form).await?;
        Ok(())
    }
}

/// A form posted to localstripe at `path`, past the count: its answer, or what it said
/// when it refused.
async fn post_form(
    http: &reqwest::Client,
    api: &str,
    key: &str,
    path: &str,
    form: &(impl serde::Serialize + ?Sized),
) -> Result<Value, EvalError> {
    let answer = http
        .post(format!("{api}{path}"))
        .bearer_auth(key)
        .form(form)
        .send()
        .await?;
    let status = answer.status();
    let body: Value = answer.json().await?;
    if !status.is_success() {
        return Err(EvalError::Start(format!("localstripe {path}: {body}")));
    }
    Ok(body)
}

impl World {
    /// The step with the matrix's ids written as Stripe's.
    pub fn translate_step(&self, step: &Step) -> Step {
        let t = |s: &String| self.translate(s);
        match step {
            Step::Request {
                subscription,
                change_type,
            } => Step::Request {
                subscription: t(subscription),
                change_type: change_type.clone(),
            },
            Step::Say(text) => Step::Say(t(text)),
            Step::SayIntent {
                text,
                intent,
                confidence,
            } => Step::SayIntent {
                text: t(text),
                intent: intent.clone(),
                confidence: *confidence,
            },
            Step::Slot { name, value } => Step::Slot {
                name: name.clone(),
                value: self.translate_value(value),
            },
            Step::SetIdentity(account) => Step::SetIdentity(t(account)),
            Step::SayEntities { text, entities } => Step::SayEntities {
                text: t(text),
                entities: entities.iter().map(|(k, v)| (k.clone(), t(v))).collect(),
            },
            Step::Move {
                subscription,
                entitlements,
                effective_at,
                label,
                note,
            } => Step::Move {
                subscription: t(subscription),
                entitlements: entitlements.clone(),
                effective_at: effective_at.clone(),
                label: label.clone(),
                note: note.clone(),
            },
            Step::SetSlot { name, value } => Step::SetSlot {
                name: name.clone(),
                value: self.translate_value(value),
            },
            Step::AlterSlot { name, value } => Step::AlterSlot {
                name: name.clone(),
                value: self.translate_value(value),
            },
            Step::Bot(text) => Step::Bot(t(text)),
            other => other.clone(),
        }
    }
}
