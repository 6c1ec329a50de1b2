-- SQLite twin of migrations/postgres/0009_provider_evidence_and_review_decisions.sql.
ALTER TABLE withdrawal_transitions ADD COLUMN evidence TEXT;

CREATE TABLE review_decisions (
    id                  BLOB PRIMARY KEY,
    withdrawal_id       BLOB NOT NULL REFERENCES withdrawals(id),
    action              TEXT NOT NULL CHECK (action IN ('complete', 'fail')),
    provider_reference  TEXT,
    version             INTEGER NOT NULL,
    reason              TEXT NOT NULL,
    requested_by        BLOB NOT NULL REFERENCES operators(id),
    requested_at        TEXT NOT NULL,
    request_evidence    TEXT NOT NULL,
    status              TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'superseded')),
    decided_by          BLOB REFERENCES operators(id),
    decided_at          TEXT,
    decision_reason     TEXT,
    CHECK ((status IN ('approved', 'rejected')) = (decided_by IS NOT NULL))
);
CREATE UNIQUE INDEX review_decisions_one_pending_idx ON review_decisions (withdrawal_id) WHERE status = 'pending';
CREATE INDEX review_decisions_status_idx ON review_decisions (status, requested_at);

-- New dead-letter category and reconciliation results (see the PostgreSQL twin). SQLite cannot
-- alter a CHECK constraint, and rebuilding these tables would trip the foreign keys that point
-- at them, so each constrained column is replaced: a new column with the wider CHECK, filled
-- from the old one (the append-only triggers are lifted for that one copy and put back), the
-- old column dropped (a column's own CHECK does not block DROP COLUMN) and the new one renamed.
-- The column moves to the end of the table; every statement names its columns.
DROP TRIGGER dead_letters_no_update;
DROP INDEX dead_letters_category_idx;
ALTER TABLE dead_letters ADD COLUMN category_v2 TEXT NOT NULL DEFAULT 'code_bug' CHECK (category_v2 IN (
    'bad_payload', 'dependency_rejected', 'side_effect_unknown', 'code_bug', 'retries_exhausted', 'crashed',
    'provider_mismatch', 'infrastructure'));
UPDATE dead_letters SET category_v2 = category;
ALTER TABLE dead_letters DROP COLUMN category;
ALTER TABLE dead_letters RENAME COLUMN category_v2 TO category;
CREATE INDEX dead_letters_category_idx ON dead_letters (category, error_code, failed_at);
CREATE TRIGGER dead_letters_no_update BEFORE UPDATE ON dead_letters
BEGIN SELECT RAISE(ABORT, 'dead_letters is append-only'); END;

DROP TRIGGER reconciliation_results_no_update;
ALTER TABLE reconciliation_results ADD COLUMN result_v2 TEXT NOT NULL DEFAULT 'skipped' CHECK (result_v2 IN (
    'paid', 'failed', 'pending', 'not_found', 'unavailable', 'window_expired', 'skipped', 'mismatch', 'returned'));
UPDATE reconciliation_results SET result_v2 = result;
ALTER TABLE reconciliation_results DROP COLUMN result;
ALTER TABLE reconciliation_results RENAME COLUMN result_v2 TO result;
CREATE TRIGGER reconciliation_results_no_update BEFORE UPDATE ON reconciliation_results
BEGIN SELECT RAISE(ABORT, 'reconciliation_results is append-only'); END;
