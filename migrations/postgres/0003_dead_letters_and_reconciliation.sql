-- Dead letters (SPEC §6) and reconciliation evidence (SPEC §7).

-- How many times a job's lease ran out (the `crashed` safety net counts these, not claims), and
-- how many runs in a row ended in a handler error (a bug that never heals becomes `code_bug`).
ALTER TABLE jobs ADD COLUMN lease_expiries bigint NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN handler_errors bigint NOT NULL DEFAULT 0;

-- At most one live job of a kind per withdrawal (a second reconciliation can never be enqueued
-- by two racing transactions).
CREATE UNIQUE INDEX jobs_one_live_per_withdrawal_idx ON jobs (withdrawal_id, kind)
    WHERE status IN ('scheduled', 'running');

-- The envelope: immutable, redacted, enriched. Written in the transaction that kills the job.
CREATE TABLE dead_letters (
    id                 uuid PRIMARY KEY,
    job_id             uuid NOT NULL UNIQUE REFERENCES jobs(id),
    queue              text NOT NULL,
    job_type           text NOT NULL,
    payload_version    bigint NOT NULL,
    payload            jsonb,
    raw_payload        bytea,
    attempts           bigint NOT NULL,
    first_attempt_at   timestamptz,
    failed_at          timestamptz NOT NULL,
    error_code         text NOT NULL,
    error_class        text NOT NULL,
    error_message      text NOT NULL,
    stack              text,
    worker_host        text NOT NULL,
    worker_version     text NOT NULL,
    correlation_id     text NOT NULL,
    idempotency_key    text,
    withdrawal_id      uuid REFERENCES withdrawals(id),
    side_effect_state  text NOT NULL CHECK (side_effect_state IN ('not_started', 'confirmed', 'unknown')),
    category           text NOT NULL CHECK (category IN ('bad_payload', 'dependency_rejected', 'side_effect_unknown', 'code_bug', 'retries_exhausted', 'crashed')),
    owner              text NOT NULL,
    runbook            text NOT NULL
);
CREATE INDEX dead_letters_failed_at_idx ON dead_letters (failed_at);
CREATE INDEX dead_letters_category_idx ON dead_letters (category, error_code, failed_at);
CREATE INDEX dead_letters_withdrawal_idx ON dead_letters (withdrawal_id);

-- Handling state lives beside the envelope: closed, replayed, by whom, why.
CREATE TABLE dead_letter_events (
    id              uuid PRIMARY KEY,
    dead_letter_id  uuid NOT NULL REFERENCES dead_letters(id),
    action          text NOT NULL,
    actor           text NOT NULL,
    reason          text NOT NULL,
    details         jsonb,
    at              timestamptz NOT NULL
);
CREATE INDEX dead_letter_events_dead_letter_idx ON dead_letter_events (dead_letter_id, at);

CREATE TRIGGER dead_letters_immutable BEFORE UPDATE OR DELETE ON dead_letters
    FOR EACH ROW EXECUTE FUNCTION forbid_history_rewrite();

-- Failure injection for drills and tests: while a flag row exists, its failure happens.
-- `dead_letter_store_outage` makes every dead-letter insert fail, as an unavailable store would.
CREATE TABLE fault_flags (
    name     text PRIMARY KEY,
    set_at   timestamptz NOT NULL
);
CREATE FUNCTION dead_letter_store_outage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM fault_flags WHERE name = 'dead_letter_store_outage') THEN
        RAISE EXCEPTION 'dead-letter store unavailable (fault flag set)';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER dead_letters_outage BEFORE INSERT ON dead_letters
    FOR EACH ROW EXECUTE FUNCTION dead_letter_store_outage();

CREATE TABLE reconciliation_results (
    id                    uuid PRIMARY KEY,
    withdrawal_id         uuid NOT NULL REFERENCES withdrawals(id),
    job_id                uuid NOT NULL REFERENCES jobs(id),
    result                text NOT NULL CHECK (result IN ('paid', 'failed', 'pending', 'not_found', 'unavailable', 'window_expired', 'skipped')),
    provider_transfer_id  text,
    failure_code          text,
    detail                text NOT NULL,
    follow_up_job_id      uuid REFERENCES jobs(id),
    correlation_id        text NOT NULL,
    at                    timestamptz NOT NULL
);
CREATE INDEX reconciliation_results_withdrawal_idx ON reconciliation_results (withdrawal_id, at);
CREATE TRIGGER reconciliation_results_append_only BEFORE UPDATE OR DELETE ON reconciliation_results
    FOR EACH ROW EXECUTE FUNCTION forbid_history_rewrite();
