-- Payout issue: evidence of every provider call. The row is written and committed *before* the
-- call (outcome NULL, side effect unknown), so a crash mid-call leaves proof that the call may
-- have happened; the outcome is filled in after it.
CREATE TABLE provider_attempts (
    id                    uuid PRIMARY KEY,
    withdrawal_id         uuid NOT NULL REFERENCES withdrawals(id),
    job_id                uuid NOT NULL REFERENCES jobs(id),
    attempt_no            bigint NOT NULL,
    worker_id             text NOT NULL,
    correlation_id        text NOT NULL,
    started_at            timestamptz NOT NULL,
    finished_at           timestamptz,
    outcome               text CHECK (outcome IN ('paid', 'pending', 'failed', 'retryable', 'unknown', 'permanent', 'conflict')),
    side_effect           text NOT NULL CHECK (side_effect IN ('not_started', 'confirmed', 'unknown')),
    http_status           bigint,
    provider_transfer_id  text,
    failure_code          text,
    error_code            text,
    error_message         text,
    -- Two workers racing for the same withdrawal cannot both start attempt N.
    UNIQUE (withdrawal_id, attempt_no)
);
CREATE INDEX provider_attempts_job_idx ON provider_attempts (job_id);
