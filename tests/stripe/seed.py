"""Seeds a running localstripe with the Stripe suite's customers, through Stripe's own
Python client, and prints what it made as JSON (customer and subscription ids are
localstripe's: they cannot be chosen).

Usage: seed.py BASE_URL OUT_JSON

Each test of tests/api/stripe.rs takes a customer of its own, so the tests can run at
once against one localstripe.
"""
import json
import sys

import stripe

PRODUCT = "prod_style_box"
MONTHLY = "plan_box_monthly"      # 10.00 USD a month
MONTHLY_V2 = "plan_box_monthly_v2"  # 20.00 USD a month: the price moved
# (test key, set to end at the period's end?)
CUSTOMERS = [
    ("stop", False),
    ("moved", False),
    ("other", False),
    ("resume", True),
    ("listing", False),
    ("raced", False),
    ("lost", False),
    ("resent", False),
    ("expired", False),
    ("cancel", False),
    ("replica", False),
    ("e2e", False),  # scripts/rasa-e2e.sh's conversation
]


def main():
    base, out = sys.argv[1], sys.argv[2]
    stripe.api_base = base
    stripe.api_key = "sk_test_actiongate"
    stripe.max_network_retries = 0
    stripe.Product.create(id=PRODUCT, name="Style Box")
    stripe.Plan.create(id=MONTHLY, product=PRODUCT, amount=1000, currency="usd",
                       interval="month")
    stripe.Plan.create(id=MONTHLY_V2, product=PRODUCT, amount=2000, currency="usd",
                       interval="month")
    # The consent matrix's moves switch to a price never had before, each in turn
    # (crates/tools/src/eval/stripe.rs).
    for n in (3, 4, 5):
        stripe.Plan.create(id=f"{MONTHLY}_v{n}", product=PRODUCT, amount=1000 * n,
                           currency="usd", interval="month")
    made = {"plans": {"monthly": MONTHLY, "monthly_v2": MONTHLY_V2}, "customers": {}}
    for key, ending in CUSTOMERS:
        pm = stripe.PaymentMethod.create(
            type="card",
            card={"number": "4242424242424242", "exp_month": 12, "exp_year": 2030,
                  "cvc": "123"},
        )
        customer = stripe.Customer.create(
            email=f"{key}@example.com",
            payment_method=pm.id,
            invoice_settings={"default_payment_method": pm.id},
        )
        sub = stripe.Subscription.create(customer=customer.id, items=[{"plan": MONTHLY}])
        if ending:
            sub = stripe.Subscription.modify(sub.id, cancel_at_period_end=True)
        made["customers"][key] = {
            "customer": customer.id,
            "subscription": sub.id,
            "item": sub["items"]["data"][0]["id"],
            "current_period_end": sub.current_period_end,
        }
    with open(out, "w") as f:
        json.dump(made, f, indent=2)


if __name__ == "__main__":
    main()
