-- SQLite twin of migrations/postgres/0033_webhook_event_ids_per_provider.sql (issue 31): a
-- provider's event ids are only its own, so an event is unique per provider and event id. SQLite
-- cannot drop the column's UNIQUE in place: the table is rebuilt with the same columns in the same
-- order and every row, and its indexes are created again (as 0022 does for a key).
CREATE TABLE webhook_events_per_provider (
    id              BLOB PRIMARY KEY,
    event_id        TEXT NOT NULL,
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
    correlation_id  TEXT NOT NULL,
    provider        TEXT NOT NULL DEFAULT 'default'
);
INSERT INTO webhook_events_per_provider (id, event_id, event_type, transfer_id, operation_key, signed_at,
                                         received_at, headers, body, account_id, withdrawal_id, job_id, result,
                                         detail, provider_record, decided_at, correlation_id, provider)
SELECT id, event_id, event_type, transfer_id, operation_key, signed_at, received_at, headers, body, account_id,
       withdrawal_id, job_id, result, detail, provider_record, decided_at, correlation_id, provider
FROM webhook_events;
DROP TABLE webhook_events;
ALTER TABLE webhook_events_per_provider RENAME TO webhook_events;
CREATE UNIQUE INDEX webhook_events_provider_event_id_key ON webhook_events (provider, event_id);
CREATE INDEX webhook_events_received ON webhook_events (received_at, id);
CREATE INDEX webhook_events_handled ON webhook_events (received_at) WHERE job_id IS NOT NULL;
CREATE INDEX webhook_events_by_result ON webhook_events (result, received_at, id);
CREATE INDEX webhook_events_handled_by_provider ON webhook_events (provider, received_at) WHERE job_id IS NOT NULL;
