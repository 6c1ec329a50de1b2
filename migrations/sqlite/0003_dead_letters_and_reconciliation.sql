-- SQLite twin of migrations/postgres/0003_dead_letters_and_reconciliation.sql.

-- How many times a job's lease ran out (the `crashed` safety net counts these, not claims), and
-- how many runs in a row ended in a handler error (a bug that never heals becomes `code_bug`).
ALTER TABLE jobs ADD COLUMN lease_expiries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN handler_errors INTEGER NOT NULL DEFAULT 0;

-- At most one live job of a kind per withdrawal (a second reconciliation can never be enqueued
-- by two racing transactions).
CREATE UNIQUE INDEX jobs_one_live_per_withdrawal_idx ON jobs (withdrawal_id, kind)
    WHERE status IN ('scheduled', 'running');

CREATE TABLE dead_letters (
    id                 BLOB PRIMARY KEY,
    job_id             BLOB NOT NULL UNIQUE REFERENCES jobs(id),
    queue              TEXT NOT NULL,
    job_type           TEXT NOT NULL,
    payload_version    INTEGER NOT NULL,
    payload            TEXT,
    raw_payload        BLOB,
    attempts           INTEGER NOT NULL,
    first_attempt_at   TEXT,
    failed_at          TEXT NOT NULL,
    error_code         TEXT NOT NULL,
    error_class        TEXT NOT NULL,
    error_message      TEXT NOT NULL,
    stack              TEXT,
    worker_host        TEXT NOT NULL,
    worker_version     TEXT NOT NULL,
    correlation_id     TEXT NOT NULL,
    idempotency_key    TEXT,
    withdrawal_id      BLOB REFERENCES withdrawals(id),
    side_effect_state  TEXT NOT NULL CHECK (side_effect_state IN ('not_started', 'confirmed', 'unknown')),
    category           TEXT NOT NULL CHECK (category IN ('bad_payload', 'dependency_rejected', 'side_effect_unknown', 'code_bug', 'retries_exhausted', 'crashed')),
    owner              TEXT NOT NULL,
    runbook            TEXT NOT NULL
);
CREATE INDEX dead_letters_failed_at_idx ON dead_letters (failed_at);
CREATE INDEX dead_letters_category_idx ON dead_letters (category, error_code, failed_at);
CREATE INDEX dead_letters_withdrawal_idx ON dead_letters (withdrawal_id);

CREATE TABLE dead_letter_events (
    id              BLOB PRIMARY KEY,
    dead_letter_id  BLOB NOT NULL REFERENCES dead_letters(id),
    action          TEXT NOT NULL,
    actor           TEXT NOT NULL,
    reason          TEXT NOT NULL,
    details         TEXT,
    at              TEXT NOT NULL
);
CREATE INDEX dead_letter_events_dead_letter_idx ON dead_letter_events (dead_letter_id, at);

CREATE TRIGGER dead_letters_no_update BEFORE UPDATE ON dead_letters
BEGIN SELECT RAISE(ABORT, 'dead_letters is append-only'); END;
CREATE TRIGGER dead_letters_no_delete BEFORE DELETE ON dead_letters
BEGIN SELECT RAISE(ABORT, 'dead_letters is append-only'); END;

CREATE TABLE fault_flags (
    name     TEXT PRIMARY KEY,
    set_at   TEXT NOT NULL
);
CREATE TRIGGER dead_letters_outage BEFORE INSERT ON dead_letters
WHEN EXISTS (SELECT 1 FROM fault_flags WHERE name = 'dead_letter_store_outage')
BEGIN SELECT RAISE(ABORT, 'dead-letter store unavailable (fault flag set)'); END;

CREATE TABLE reconciliation_results (
    id                    BLOB PRIMARY KEY,
    withdrawal_id         BLOB NOT NULL REFERENCES withdrawals(id),
    job_id                BLOB NOT NULL REFERENCES jobs(id),
    result                TEXT NOT NULL CHECK (result IN ('paid', 'failed', 'pending', 'not_found', 'unavailable', 'window_expired', 'skipped')),
    provider_transfer_id  TEXT,
    failure_code          TEXT,
    detail                TEXT NOT NULL,
    follow_up_job_id      BLOB REFERENCES jobs(id),
    correlation_id        TEXT NOT NULL,
    at                    TEXT NOT NULL
);
CREATE INDEX reconciliation_results_withdrawal_idx ON reconciliation_results (withdrawal_id, at);
CREATE TRIGGER reconciliation_results_no_update BEFORE UPDATE ON reconciliation_results
BEGIN SELECT RAISE(ABORT, 'reconciliation_results is append-only'); END;
CREATE TRIGGER reconciliation_results_no_delete BEFORE DELETE ON reconciliation_results
BEGIN SELECT RAISE(ABORT, 'reconciliation_results is append-only'); END;
