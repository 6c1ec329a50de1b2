-- Issue 30 (SPEC §15): the provider's signed events, as received. The webhook route verifies
-- the signature and the timestamp, then stores the event here (raw body and headers, the
-- provider's event id unique, so a redelivery changes nothing) with the job that decides on it,
-- in one transaction, and answers at once. The job asks the provider for the transfer's current
-- record and fills in what the event came to: `applied` (a decision was taken on the record),
-- `no_op` (the record agrees, nothing left to change: late, already so, or a type we do not
-- handle), `mismatch` (the record contradicts the event: nothing moves), `unknown_transfer` (no
-- withdrawal of ours: an exception for operators) or `unverified` (the provider could not be
-- asked within the window: polling decides). Refused requests are never stored.
--
-- A global (local) table: an event arrives before its account is known; `account_id` and
-- `withdrawal_id` say where it was resolved to, without a reference (README "Scaling").
CREATE TABLE webhook_events (
    id              uuid PRIMARY KEY,
    event_id        text NOT NULL UNIQUE,
    event_type      text NOT NULL,
    transfer_id     text,
    operation_key   text,
    signed_at       timestamptz NOT NULL,
    received_at     timestamptz NOT NULL,
    headers         jsonb NOT NULL,
    body            bytea NOT NULL,
    account_id      uuid,
    withdrawal_id   uuid,
    job_id          uuid,
    result          text CHECK (result IN ('applied', 'no_op', 'mismatch', 'unknown_transfer', 'unverified')),
    detail          text,
    -- The provider's record the decision rested on (evidence, as the transition stores it).
    provider_record jsonb,
    decided_at      timestamptz,
    correlation_id  text NOT NULL
);

CREATE INDEX webhook_events_received ON webhook_events (received_at, id);
CREATE INDEX webhook_events_handled ON webhook_events (received_at) WHERE job_id IS NOT NULL;
CREATE INDEX webhook_events_by_result ON webhook_events (result, received_at, id);
