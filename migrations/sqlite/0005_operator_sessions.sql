-- Signed-in operators of the console: a session per sign-in, found by the SHA-256 of its
-- cookie (the cookie itself is never stored), with the token every form must carry.
CREATE TABLE operator_sessions (
    id_hash TEXT PRIMARY KEY, operator TEXT NOT NULL, csrf TEXT NOT NULL,
    created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL);
