-- A session is bound to the credential it was opened with: the SHA-256 of the operator's
-- password hash when they signed in. A session whose operator is no longer configured, or
-- whose hash has changed since, is ended at its next request.
ALTER TABLE operator_sessions ADD COLUMN credential TEXT NOT NULL DEFAULT '';
