-- The open-operation rule's partial index (0002), its condition written as "not final"
-- (neither applied nor failed): the same three states the store writes, and any other
-- read as open, as the store reads it (unknown). On SQLite an IN list of three builds a
-- temporary b-tree each time it is tested, which every claim and every move of an
-- operation did; a NOT IN of two is compared in place.
DROP INDEX operations_open_per_subscription;
CREATE UNIQUE INDEX operations_open_per_subscription ON operations (subscription)
    WHERE state NOT IN ('applied', 'failed');
-- The reconciler's open operations are read through that index (a few rows, whatever
-- the history); an index of every operation by state was one more b-tree each write.
DROP INDEX operations_state;
