-- The subscription service's change events as received: each event id once (across
-- replicas), with what was made of it (resolved, confirmed, recorded, stale, mismatch).
CREATE TABLE service_events (
    id TEXT PRIMARY KEY, received_at BIGINT NOT NULL, kind TEXT NOT NULL,
    subscription TEXT NOT NULL, account TEXT NOT NULL, revision BIGINT NOT NULL,
    request_key TEXT, verdict TEXT NOT NULL, detail TEXT, body TEXT NOT NULL);
CREATE INDEX service_events_verdict ON service_events (verdict, received_at);
-- The newest record an event reported, per subscription: an older event changes nothing.
CREATE TABLE known_records (
    subscription TEXT PRIMARY KEY, revision BIGINT NOT NULL, event_id TEXT NOT NULL,
    record TEXT NOT NULL, updated_at BIGINT NOT NULL);
