//! The Stripe provider (CONTRACT.md section 8) through the webhook, against localstripe
//! (a stateful stand-in for Stripe's API) seeded with Stripe's own Python client:
//! `scripts/test-stripe.sh` starts and seeds it and runs these ignored tests.

use crate::common;

use common::{outcome_of, spawn_app_with, Chat, ChatExt, TestApp};
use serde_json::{json, Value};

/// localstripe's URL and what the seed made, from the script's environment.
fn seeded() -> (String, Value) {
    let url = std::env::var("ACTIONGATE_TEST_STRIPE_URL")
        .expect("ACTIONGATE_TEST_STRIPE_URL: run scripts/test-stripe.sh");
    let seed = std::env::var("ACTIONGATE_TEST_STRIPE_SEED").expect("ACTIONGATE_TEST_STRIPE_SEED");
    let seed = serde_json::from_str(&std::fs::read_to_string(seed).unwrap()).unwrap();
    (url, seed)
}

struct Stripe {
    url: String,
    http: reqwest::Client,
}

impl Stripe {
    /// The subscription as Stripe has it now.
    async fn subscription(&self, id: &str) -> Value {
        self.http
            .get(format!("{}/v1/subscriptions/{id}", self.url))
            .bearer_auth("sk_test_actiongate")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Another writer's update, straight to Stripe.
    async fn update(&self, id: &str, form: &[(&str, &str)]) {
        let response = self
            .http
            .post(format!("{}/v1/subscriptions/{id}", self.url))
            .bearer_auth("sk_test_actiongate")
            .form(form)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    }
}

/// The server with `provider: stripe` pointed at localstripe; the test's customer and
/// subscription.
async fn app_for(customer: &str) -> (TestApp, Stripe, String, String, Value) {
    let (url, seed) = seeded();
    let app = spawn_app_with(
        &[
            "--subscriptions-provider",
            "stripe",
            "--stripe-api-base",
            &url,
        ],
        |_| {},
    )
    .await;
    let mine = seed["customers"][customer].clone();
    let stripe = Stripe {
        url,
        http: reqwest::Client::new(),
    };
    let (cus, sub) = (
        mine["customer"].as_str().unwrap().to_owned(),
        mine["subscription"].as_str().unwrap().to_owned(),
    );
    (app, stripe, cus, sub, mine)
}

#[tokio::test]
#[ignore = "needs localstripe: scripts/test-stripe.sh"]
async fn stop_renewal_goes_to_stripe_once_however_often_the_yes_is_redelivered() {
    let (app, stripe, cus, sub, mine) = app_for("stop").await;
    let mut c = Chat::new("stripe-stop", Some(&cus));
    let body = c.request_change(&app, &sub, "stop_renewal").await.unwrap();
    assert_eq!(c.slots["change_status"], "selected", "{body}");
    // Terms from Stripe's period end and price; the fingerprint in the tag.
    let tag = c.slots["change_tag"].as_str().unwrap().to_owned();
    let (prefix, revision) = tag.rsplit_once(" r").unwrap();
    assert_eq!(prefix, format!("{sub} stop_renewal"));
    assert!(
        revision.len() == 10 && revision.bytes().all(|b| b.is_ascii_hexdigit()),
        "{tag}"
    );
    let end =
        time::OffsetDateTime::from_unix_timestamp(mine["current_period_end"].as_i64().unwrap())
            .unwrap()
            .format(time::macros::format_description!(
                "[year]-[month]-[day] [hour]:[minute] UTC"
            ))
            .unwrap();
    assert_eq!(c.slots["change_effective"], end.as_str());
    assert_eq!(
        c.slots["change_entitlements"],
        format!("Style Box stays until {end}; no further charge (10.00 USD a month) is made; nothing is refunded").as_str()
    );
    let outcome = c.say_yes_and_apply(&app).await;
    assert_eq!(
        (outcome["status"].as_str(), outcome["effects"].as_i64()),
        (Some("applied"), Some(1)),
        "{outcome}"
    );
    assert_eq!(
        stripe.subscription(&sub).await["cancel_at_period_end"],
        true
    );
    // Someone resumes it in Stripe's dashboard; the same yes, redelivered, sends nothing
    // again: Stripe's record keeps the other writer's value.
    stripe
        .update(&sub, &[("cancel_at_period_end", "false")])
        .await;
    for _ in 0..3 {
        let again = c.apply(&app).await;
        assert_eq!(again["status"], "applied", "the recorded outcome: {again}");
    }
    assert_eq!(
        stripe.subscription(&sub).await["cancel_at_period_end"],
        false,
        "a redelivered yes never reaches Stripe again"
    );
}

#[tokio::test]
#[ignore = "needs localstripe: scripts/test-stripe.sh"]
async fn a_price_moved_in_stripe_after_the_question_blocks_with_the_new_terms_and_why() {
    let (app, stripe, cus, sub, mine) = app_for("moved").await;
    let mut c = Chat::new("stripe-moved", Some(&cus));
    c.request_change(&app, &sub, "stop_renewal").await.unwrap();
    let asked = c.slots["change_tag"].clone();
    let item = mine["item"].as_str().unwrap();
    stripe
        .update(
            &sub,
            &[
                ("items[0][id]", item),
                ("items[0][plan]", "plan_box_monthly_v2"),
            ],
        )
        .await;
    let outcome = c.say_yes_and_apply(&app).await;
    assert_eq!(
        (outcome["status"].as_str(), outcome["reason"].as_str()),
        (Some("blocked"), Some("benefit_loss_hidden")),
        "{outcome}"
    );
    assert_ne!(outcome["current"]["tag"], asked, "a new revision");
    assert!(
        outcome["current"]["entitlements"]
            .as_str()
            .unwrap()
            .contains("20.00 USD a month"),
        "the new terms: {outcome}"
    );
    assert!(
        outcome["why"]
            .as_str()
            .unwrap_or_default()
            .contains("The price changed from 10.00 USD a month to 20.00 USD a month"),
        "{outcome}"
    );
    let now = stripe.subscription(&sub).await;
    assert_eq!(now["cancel_at_period_end"], false, "nothing sent");
}

#[tokio::test]
#[ignore = "needs localstripe: scripts/test-stripe.sh"]
async fn another_customers_subscription_is_answered_as_an_unknown_one() {
    let (app, stripe, _, theirs, _) = app_for("other").await;
    let (_, seed) = seeded();
    let me = seed["customers"]["listing"]["customer"].as_str().unwrap();
    let answer = |c: &Chat| json!([c.slots.get("change_status"), c.slots.get("change_reason")]);
    let mut c = Chat::new("stripe-other", Some(me));
    c.request_change(&app, &theirs, "stop_renewal")
        .await
        .unwrap();
    let mut u = Chat::new("stripe-unknown", Some(me));
    u.request_change(&app, "sub_doesnotexist", "stop_renewal")
        .await
        .unwrap();
    assert_eq!(answer(&c), answer(&u), "nothing tells them apart");
    assert_eq!(answer(&c)[0], "blocked");
    assert!(
        c.slots.get("change_tag").is_none_or(Value::is_null),
        "no terms of another's"
    );
    assert_eq!(
        stripe.subscription(&theirs).await["cancel_at_period_end"],
        false
    );
}

#[tokio::test]
#[ignore = "needs localstripe: scripts/test-stripe.sh"]
async fn a_customers_listing_is_their_own_subscriptions() {
    let (app, _, cus, sub, _) = app_for("listing").await;
    let mut c = Chat::new("stripe-list", Some(&cus));
    c.user("what do I have?", "list_subscriptions", &[]);
    let (status, body) = c.run(&app, "list_subscriptions").await.unwrap();
    assert_eq!(status, 200);
    let list = outcome_of(&body)["subscriptions"].clone();
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids, [sub.as_str()], "{body}");
}

#[tokio::test]
#[ignore = "needs localstripe: scripts/test-stripe.sh"]
async fn resume_renewal_is_offered_on_a_subscription_set_to_end_and_made() {
    let (app, stripe, cus, sub, _) = app_for("resume").await;
    let mut c = Chat::new("stripe-resume", Some(&cus));
    let mut stop = Chat::new("stripe-resume-stop", Some(&cus));
    stop.request_change(&app, &sub, "stop_renewal")
        .await
        .unwrap();
    assert_eq!(
        stop.slots["change_status"], "blocked",
        "already set to end: not offered"
    );
    c.request_change(&app, &sub, "resume_renewal")
        .await
        .unwrap();
    assert!(
        c.slots["change_entitlements"]
            .as_str()
            .unwrap()
            .contains("the next charge is 10.00 USD on"),
        "{:?}",
        c.slots
    );
    let outcome = c.say_yes_and_apply(&app).await;
    assert_eq!(outcome["status"], "applied", "{outcome}");
    assert_eq!(
        stripe.subscription(&sub).await["cancel_at_period_end"],
        false
    );
}
