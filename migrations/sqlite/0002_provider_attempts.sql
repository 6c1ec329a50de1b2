-- SQLite twin of migrations/postgres/0002_provider_attempts.sql.
-- Payout issue: evidence of every provider call. The row is written and committed *before* the
-- call (outcome NULL, side effect unknown), so a crash mid-call leaves proof that the call may
-- have happened; the outcome is filled in after it.
CREATE TABLE provider_attempts (
    id                    BLOB PRIMARY KEY,
    withdrawal_id         BLOB NOT NULL REFERENCES withdrawals(id),
    job_id                BLOB NOT NULL REFERENCES jobs(id),
    attempt_no            INTEGER NOT NULL,
    worker_id             TEXT NOT NULL,
    correlation_id        TEXT NOT NULL,
    started_at            TEXT NOT NULL,
    finished_at           TEXT,
    outcome               TEXT CHECK (outcome IN ('paid', 'pending', 'failed', 'retryable', 'unknown', 'permanent', 'conflict')),
    side_effect           TEXT NOT NULL CHECK (side_effect IN ('not_started', 'confirmed', 'unknown')),
    http_status           INTEGER,
    provider_transfer_id  TEXT,
    failure_code          TEXT,
    error_code            TEXT,
    error_message         TEXT,
    -- Two workers racing for the same withdrawal cannot both start attempt N.
    UNIQUE (withdrawal_id, attempt_no)
);
CREATE INDEX provider_attempts_job_idx ON provider_attempts (job_id);
