-- Operations (one per request key), the rate limit's token buckets, the audit trail.
CREATE TABLE operations (
    request_key TEXT PRIMARY KEY, sender_id TEXT NOT NULL, account TEXT NOT NULL,
    subscription TEXT NOT NULL, change_type TEXT NOT NULL, revision BIGINT NOT NULL,
    terms TEXT NOT NULL, state TEXT NOT NULL, outcome TEXT,
    created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL);
CREATE INDEX operations_state ON operations (state, updated_at);
CREATE TABLE rate_buckets (account TEXT PRIMARY KEY, tokens DOUBLE PRECISION NOT NULL, updated_at BIGINT NOT NULL);
CREATE TABLE audit (
    id INTEGER PRIMARY KEY, at BIGINT NOT NULL, action TEXT NOT NULL,
    sender_id TEXT NOT NULL, account TEXT, target TEXT, question_terms TEXT, service_terms TEXT,
    status TEXT NOT NULL, reason TEXT, request_key TEXT);
CREATE INDEX audit_sender ON audit (sender_id, at);
