-- Stripe's subscriptions as the Stripe provider read them (CONTRACT.md section 8), one row
-- per fingerprint seen: the `why` of a moved fingerprint is worked out from the reading the
-- customer was shown, on whichever replica the yes arrives, after a restart too. The
-- newest 8 of each subscription are kept.
CREATE TABLE stripe_readings (
    subscription TEXT NOT NULL, revision BIGINT NOT NULL, facts TEXT NOT NULL,
    read_at BIGINT NOT NULL, PRIMARY KEY (subscription, revision));
