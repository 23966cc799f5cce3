//! Unit tests of Stripe's record as section 8 reads it.

use super::*;
use serde_json::json;

fn record(extra: Value) -> StripeSubscription {
    let mut base = json!({
        "id": "sub_1Q2w",
        "customer": "cus_A",
        "status": "active",
        "cancel_at_period_end": false,
        "cancel_at": null,
        "current_period_end": 1798761600, // 2027-01-01 00:00 UTC
        "latest_invoice": "in_1",
        "items": {"data": [{"quantity": 1, "plan": {
            "id": "plan_m", "amount": 1200, "currency": "usd", "interval": "month",
            "interval_count": 1, "product": "prod_box"}}]},
    });
    for (k, v) in extra.as_object().unwrap() {
        base[k] = v.clone();
    }
    serde_json::from_value(base).unwrap()
}

pub(super) fn facts(extra: Value) -> Facts {
    record(extra).facts().unwrap()
}

#[test]
fn the_terms_are_worked_out_from_the_record_and_its_price() {
    let s = facts(json!({})).subscription("Style Box", Offered::default());
    assert_eq!((s.account.as_str(), s.plan.as_str()), ("cus_A", "monthly"));
    assert_eq!(
        s.options.len(),
        1,
        "a renewing subscription offers stop_renewal only"
    );
    let stop = s.option(STOP_RENEWAL).unwrap();
    assert_eq!(stop.effective_at, "2027-01-01T00:00:00Z");
    assert_eq!(
        stop.entitlements,
        "Style Box stays until 2027-01-01 00:00 UTC; no further charge (12.00 USD a month) is made; nothing is refunded"
    );
    let ending = facts(json!({"cancel_at_period_end": true}));
    let resume = ending.subscription("Style Box", Offered::default());
    assert_eq!(resume.options[0].change_type, RESUME_RENEWAL);
    assert_eq!(
        resume.options[0].entitlements,
        "Style Box renews; the next charge is 12.00 USD on 2027-01-01 00:00 UTC"
    );
    // cancel_now only where configured; never on an ended subscription.
    let all = Offered {
        cancel_now: true,
        ..Offered::default()
    };
    assert!(facts(json!({}))
        .subscription("B", all)
        .option(CANCEL_NOW)
        .is_some());
    assert!(facts(json!({"status": "canceled"}))
        .subscription("B", all)
        .options
        .is_empty());
}

#[test]
fn a_price_is_read_from_price_before_the_legacy_plan() {
    let f = facts(json!({"items": {"data": [{"quantity": 2,
        "price": {"id": "price_y", "unit_amount": 500, "currency": "jpy",
                  "recurring": {"interval": "year", "interval_count": 1},
                  "product": {"id": "prod_x", "name": "X"}},
        "plan": {"id": "plan_old", "amount": 1, "currency": "usd", "interval": "day", "product": "p"}}]}}));
    assert_eq!(f.lines[0].price, "price_y");
    assert_eq!(f.lines[0].product, "prod_x");
    assert_eq!(f.price_text(), "500 JPY × 2 a year");
    assert_eq!(f.next_charge(), "1000 JPY");
    assert_eq!(f.plan_text(), "yearly");
}

#[test]
fn every_field_that_decides_the_terms_moves_the_fingerprint() {
    let base = facts(json!({})).fingerprint();
    assert_eq!(
        base,
        facts(json!({})).fingerprint(),
        "the same facts, the same revision"
    );
    assert!(base < 1 << 40, "40 bits: 10 hex digits");
    for moved in [
        json!({"status": "past_due"}),
        json!({"cancel_at_period_end": true}),
        json!({"cancel_at": 1798761600}),
        json!({"current_period_end": 1798761601}),
        json!({"latest_invoice": "in_2"}),
        json!({"pause_collection": {"behavior": "void"}}),
        json!({"items": {"data": [{"quantity": 2, "plan": {"id": "plan_m", "amount": 1200,
            "currency": "usd", "interval": "month", "product": "prod_box"}}]}}),
        json!({"items": {"data": [{"quantity": 1, "plan": {"id": "plan_m", "amount": 1500,
            "currency": "usd", "interval": "month", "product": "prod_box"}}]}}),
    ] {
        assert_ne!(facts(moved.clone()).fingerprint(), base, "{moved}");
    }
}

#[test]
fn the_why_says_what_moved_in_words() {
    let shown = facts(json!({}));
    let now = facts(
        json!({"current_period_end": 1801440000, "items": {"data": [{"quantity": 1,
        "plan": {"id": "plan_m2", "amount": 1500, "currency": "usd", "interval": "month",
                 "product": "prod_box"}}]}}),
    );
    assert_eq!(
        now.why_from(&shown).unwrap(),
        "The period's end moved from 2027-01-01 00:00 UTC to 2027-02-01 00:00 UTC; \
         the price changed from 12.00 USD a month to 15.00 USD a month."
    );
    // Every field of the fingerprint is told when it moves, the invoice and the items'
    // prices and products too; nothing moved, nothing told.
    assert_eq!(
        facts(json!({"latest_invoice": "in_9"}))
            .why_from(&shown)
            .unwrap(),
        "A new invoice was issued (in_9)."
    );
    let other_price = facts(json!({"items": {"data": [{"quantity": 1,
        "plan": {"id": "plan_other", "amount": 1200, "currency": "usd", "interval": "month",
                 "product": "prod_box"}}]}}));
    assert_eq!(other_price.price_text(), shown.price_text());
    assert_eq!(
        other_price.why_from(&shown).unwrap(),
        "Its items changed to another price or product at the same amount."
    );
    assert_eq!(facts(json!({})).why_from(&shown), None);
    let note = now.note_from(&shown, 0).unwrap();
    assert_eq!(note.revision, shown.fingerprint());
}

#[test]
fn a_record_without_its_terms_is_unreadable() {
    assert!(record(json!({"current_period_end": null})).facts().is_err());
    assert!(record(json!({"items": {"data": []}})).facts().is_err());
    // Newer API versions carry the period's end on the items.
    let f = facts(
        json!({"current_period_end": null, "items": {"data": [{"quantity": 1,
        "current_period_end": 1798761600, "plan": {"id": "p", "amount": 1, "currency": "eur",
        "interval": "month", "product": "x"}}]}}),
    );
    assert_eq!(f.period_end, 1798761600);
}

#[test]
fn writes_follow_the_record_and_what_is_offered() {
    let f = facts(json!({}));
    assert_eq!(
        f.write_for(STOP_RENEWAL, Offered::default()),
        Some(Write::CancelAtPeriodEnd(true))
    );
    assert_eq!(f.write_for(RESUME_RENEWAL, Offered::default()), None);
    assert_eq!(f.write_for(CANCEL_NOW, Offered::default()), None);
    let after = f.after(Write::CancelAtPeriodEnd(true), None);
    assert!(after.cancel_at_period_end);
    assert_ne!(after.fingerprint(), f.fingerprint());
    assert_eq!(money(-5, "EUR"), "-0.05 EUR");
}
