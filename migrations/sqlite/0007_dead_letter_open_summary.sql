-- SQLite twin of migrations/postgres/0007_dead_letter_open_summary.sql: the open set of dead
-- letters and its per-group counts, derived state maintained by `storage::dead_letters` in the
-- transactions that write envelopes and close them (not append-only, rebuildable from the events).
CREATE TABLE open_dead_letters (
    dead_letter_id  BLOB PRIMARY KEY REFERENCES dead_letters(id),
    category        TEXT NOT NULL,
    error_code      TEXT NOT NULL,
    failed_at       TEXT NOT NULL
);
CREATE INDEX open_dead_letters_group_idx ON open_dead_letters (category, error_code, failed_at);

CREATE TABLE dead_letter_open_counts (
    category    TEXT NOT NULL,
    error_code  TEXT NOT NULL,
    open        INTEGER NOT NULL CHECK (open >= 0),
    PRIMARY KEY (category, error_code)
);

-- Backfill (the migration's transaction holds SQLite's one write lock throughout).
INSERT INTO open_dead_letters (dead_letter_id, category, error_code, failed_at)
SELECT d.id, d.category, d.error_code, d.failed_at FROM dead_letters d
WHERE NOT EXISTS (SELECT 1 FROM dead_letter_events e WHERE e.dead_letter_id = d.id AND e.action = 'closed');
INSERT INTO dead_letter_open_counts (category, error_code, open)
SELECT category, error_code, COUNT(*) FROM open_dead_letters GROUP BY category, error_code;
