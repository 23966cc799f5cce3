-- check_subscription_change reads a sender's latest operation (Store::latest_for_sender):
-- without this index that was a scan of every operation ever stored, on SQLite under the
-- store's one connection, which every other request waits for meanwhile.
CREATE INDEX operations_sender ON operations (sender_id, created_at);
