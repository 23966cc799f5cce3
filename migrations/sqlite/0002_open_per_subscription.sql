-- At most one operation per subscription whose outcome is not known (CONTRACT.md
-- section 4): a command for a subscription is not sent while another one's may have been
-- applied. A partial unique index, so the claim enforces it atomically on every replica.
CREATE UNIQUE INDEX operations_open_per_subscription ON operations (subscription)
    WHERE state IN ('claimed', 'sent', 'unknown');
