-- When the customer was asked the question their yes confirmed (milliseconds since the
-- epoch): the confirmation's window, within which an unknown outcome may be sent again
-- under its key (CONTRACT.md section 8), is counted from it, not from the claim or an
-- approval. Operations stored before it have none, and are not sent again.
ALTER TABLE operations ADD COLUMN asked_at BIGINT;
