-- SQLite twin of migrations/postgres/0029_webhook_events.sql (issue 30, SPEC §15): the provider's
-- signed events as received, each decided by a job on the provider's current record.
CREATE TABLE webhook_events (
    id              BLOB PRIMARY KEY,
    event_id        TEXT NOT NULL UNIQUE,
    event_type      TEXT NOT NULL,
    transfer_id     TEXT,
    operation_key   TEXT,
    signed_at       TEXT NOT NULL,
    received_at     TEXT NOT NULL,
    headers         TEXT NOT NULL,
    body            BLOB NOT NULL,
    account_id      BLOB,
    withdrawal_id   BLOB,
    job_id          BLOB,
    result          TEXT CHECK (result IN ('applied', 'no_op', 'mismatch', 'unknown_transfer', 'unverified')),
    detail          TEXT,
    provider_record TEXT,
    decided_at      TEXT,
    correlation_id  TEXT NOT NULL
);

CREATE INDEX webhook_events_received ON webhook_events (received_at, id);
CREATE INDEX webhook_events_handled ON webhook_events (received_at) WHERE job_id IS NOT NULL;
CREATE INDEX webhook_events_by_result ON webhook_events (result, received_at, id);
