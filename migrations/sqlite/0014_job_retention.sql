-- SQLite twin of migrations/postgres/0014_job_retention.sql. SQLite cannot drop a foreign key or
-- change a check: the three tables are rebuilt (the documented copy-drop-rename), with their
-- indexes and append-only triggers. Foreign keys to them are checked at commit.
PRAGMA defer_foreign_keys = ON;

CREATE TABLE provider_attempts_new (
    id                    BLOB PRIMARY KEY,
    withdrawal_id         BLOB NOT NULL REFERENCES withdrawals(id),
    job_id                BLOB NOT NULL,
    attempt_no            INTEGER NOT NULL,
    worker_id             TEXT NOT NULL,
    correlation_id        TEXT NOT NULL,
    started_at            TEXT NOT NULL,
    finished_at           TEXT,
    outcome               TEXT CHECK (outcome IN ('paid', 'pending', 'failed', 'retryable', 'unknown', 'permanent', 'conflict', 'mismatch')),
    side_effect           TEXT NOT NULL CHECK (side_effect IN ('not_started', 'confirmed', 'unknown')),
    http_status           INTEGER,
    provider_transfer_id  TEXT,
    failure_code          TEXT,
    error_code            TEXT,
    error_message         TEXT,
    UNIQUE (withdrawal_id, attempt_no)
);
INSERT INTO provider_attempts_new SELECT id, withdrawal_id, job_id, attempt_no, worker_id, correlation_id, started_at,
    finished_at, outcome, side_effect, http_status, provider_transfer_id, failure_code, error_code, error_message
    FROM provider_attempts;
DROP TABLE provider_attempts;
ALTER TABLE provider_attempts_new RENAME TO provider_attempts;
CREATE INDEX provider_attempts_job_idx ON provider_attempts (job_id);

CREATE TABLE reconciliation_results_new (
    id                    BLOB PRIMARY KEY,
    withdrawal_id         BLOB NOT NULL REFERENCES withdrawals(id),
    job_id                BLOB NOT NULL,
    provider_transfer_id  TEXT,
    failure_code          TEXT,
    detail                TEXT NOT NULL,
    follow_up_job_id      BLOB,
    correlation_id        TEXT NOT NULL,
    at                    TEXT NOT NULL,
    result                TEXT NOT NULL DEFAULT 'skipped' CHECK (result IN (
        'paid', 'failed', 'pending', 'not_found', 'unavailable', 'window_expired', 'skipped', 'mismatch', 'returned'))
);
INSERT INTO reconciliation_results_new SELECT id, withdrawal_id, job_id, provider_transfer_id, failure_code, detail,
    follow_up_job_id, correlation_id, at, result
    FROM reconciliation_results;
DROP TRIGGER reconciliation_results_no_delete;
DROP TRIGGER reconciliation_results_no_update;
DROP TABLE reconciliation_results;
ALTER TABLE reconciliation_results_new RENAME TO reconciliation_results;
CREATE INDEX reconciliation_results_withdrawal_idx ON reconciliation_results (withdrawal_id, at);
CREATE TRIGGER reconciliation_results_no_delete BEFORE DELETE ON reconciliation_results
BEGIN SELECT RAISE(ABORT, 'reconciliation_results is append-only'); END;
CREATE TRIGGER reconciliation_results_no_update BEFORE UPDATE ON reconciliation_results
BEGIN SELECT RAISE(ABORT, 'reconciliation_results is append-only'); END;

CREATE TABLE replay_items_new (
    id              BLOB PRIMARY KEY,
    run_id          BLOB NOT NULL REFERENCES replay_runs(id),
    dead_letter_id  BLOB NOT NULL REFERENCES dead_letters(id),
    status          TEXT NOT NULL CHECK (status IN ('pending', 'released', 'reconciling', 'skipped', 'cancelled')),
    detail          TEXT,
    job_id          BLOB,
    released_at     TEXT,
    created_at      TEXT NOT NULL
);
INSERT INTO replay_items_new SELECT id, run_id, dead_letter_id, status, detail, job_id, released_at, created_at
    FROM replay_items;
DROP TABLE replay_items;
ALTER TABLE replay_items_new RENAME TO replay_items;
CREATE INDEX replay_items_run_idx ON replay_items (run_id, status);
CREATE UNIQUE INDEX replay_items_one_active_idx ON replay_items (dead_letter_id) WHERE status = 'pending';
