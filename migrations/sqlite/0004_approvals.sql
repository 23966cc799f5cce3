-- Confirmed changes held for a person's approval (CONTRACT.md section 7), one per request
-- key: the service's terms and revision at step 13, the conversation's question and reply,
-- and the decision. held -> approved (then the operation under the same key is the
-- outcome) | rejected | expired | blocked (the facts moved, or the budget was spent).
CREATE TABLE approvals (
    request_key TEXT PRIMARY KEY, sender_id TEXT NOT NULL, account TEXT NOT NULL,
    subscription TEXT NOT NULL, change_type TEXT NOT NULL, revision BIGINT NOT NULL,
    terms TEXT NOT NULL, question TEXT NOT NULL, question_at DOUBLE PRECISION,
    reply TEXT NOT NULL, reply_at DOUBLE PRECISION, reply_id TEXT, rule TEXT NOT NULL,
    state TEXT NOT NULL, created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL,
    decided_by TEXT, decided_at BIGINT, note TEXT, outcome TEXT);
CREATE INDEX approvals_state ON approvals (state, created_at);
CREATE INDEX approvals_sender ON approvals (sender_id, created_at);
-- Who decided, for decisions a person made (approvals, rejections).
ALTER TABLE audit ADD COLUMN operator TEXT;
