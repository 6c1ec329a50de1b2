-- Issue 32 (SPEC §17): customer notifications.
--
-- `events` is the outbox: a row per withdrawal change a customer hears about (created,
-- completed, failed, requires_review, returned), written in the transaction of the change, so an
-- event exists exactly when its change committed. `data` is the withdrawal as
-- `GET /v1/withdrawals/{id}` showed it at that moment, except its `version`, which is
-- `withdrawal_version` (read from the row in the same transaction). `fanned_out` is false until
-- the dispatcher has made a notification (and its delivery job) per subscribed endpoint.
CREATE TABLE events (
    account_id         uuid NOT NULL,
    id                 uuid NOT NULL,
    withdrawal_id      uuid NOT NULL,
    event_type         text NOT NULL CHECK (event_type IN ('withdrawal.created', 'withdrawal.completed',
                           'withdrawal.failed', 'withdrawal.requires_review', 'withdrawal.returned')),
    withdrawal_version bigint NOT NULL,
    data               jsonb NOT NULL,
    created_at         timestamptz NOT NULL,
    fanned_out         boolean NOT NULL DEFAULT false,
    PRIMARY KEY (account_id, id)
);
-- Keyed by account (issue 29): the events API pages an account's events by id (UUIDv7:
-- time-ordered) on the primary key.
CREATE INDEX events_by_account_type ON events (account_id, event_type, id);
-- The dispatcher's work: small, since a row leaves it once fanned out.
CREATE INDEX events_to_fan_out ON events (id) WHERE NOT fanned_out;

-- An integrator's endpoint. The signing secret is sealed (AES-256-GCM under NOTIFY_SECRET_KEY),
-- never stored in the clear; during a rotation the previous one is kept until it expires.
CREATE TABLE webhook_endpoints (
    account_id                  uuid NOT NULL,
    id                          uuid NOT NULL,
    url                         text NOT NULL,
    -- The subscribed event types, comma-separated in a fixed order.
    event_types                 text NOT NULL,
    status                      text NOT NULL CHECK (status IN ('enabled', 'disabled', 'deleted')),
    disabled_reason             text,
    secret_sealed               bytea NOT NULL,
    previous_secret_sealed      bytea,
    previous_secret_expires_at  timestamptz,
    -- Since when every delivery failed (cleared by a success): past NOTIFY_DISABLE_AFTER_MS, disabled.
    failing_since               timestamptz,
    created_at                  timestamptz NOT NULL,
    updated_at                  timestamptz NOT NULL,
    PRIMARY KEY (account_id, id)
);
-- A delivery job and an operator name an endpoint by id alone (as a letter is named).
CREATE INDEX webhook_endpoints_by_id ON webhook_endpoints (id);

-- One event to one endpoint: what its delivery job is about, and where it stands.
CREATE TABLE notifications (
    account_id       uuid NOT NULL,
    id               uuid NOT NULL,
    event_id         uuid NOT NULL,
    endpoint_id      uuid NOT NULL,
    status           text NOT NULL CHECK (status IN ('pending', 'delivered', 'undeliverable', 'gone', 'skipped')),
    attempts         integer NOT NULL DEFAULT 0,
    last_status_code integer,
    last_error       text,
    last_attempt_at  timestamptz,
    delivered_at     timestamptz,
    -- The delivery job last dead-lettered: its letter is closed once the notification is delivered.
    dead_job_id      uuid,
    created_at       timestamptz NOT NULL,
    PRIMARY KEY (account_id, id),
    FOREIGN KEY (account_id, event_id) REFERENCES events (account_id, id),
    FOREIGN KEY (account_id, endpoint_id) REFERENCES webhook_endpoints (account_id, id),
    UNIQUE (account_id, event_id, endpoint_id)
);
-- A delivery job and an operator name a notification by id alone.
CREATE INDEX notifications_by_id ON notifications (id);
CREATE INDEX notifications_by_endpoint ON notifications (endpoint_id, created_at, id);
CREATE INDEX notifications_by_status ON notifications (status, created_at, id);

-- Every delivery attempt, as the receiver answered it.
CREATE TABLE notification_attempts (
    account_id      uuid NOT NULL,
    id              uuid NOT NULL,
    notification_id uuid NOT NULL,
    attempt         integer NOT NULL,
    result          text NOT NULL,
    status_code     integer,
    error           text,
    duration_ms     bigint NOT NULL,
    at              timestamptz NOT NULL,
    PRIMARY KEY (account_id, id),
    FOREIGN KEY (account_id, notification_id) REFERENCES notifications (account_id, id)
);
CREATE INDEX notification_attempts_by_notification ON notification_attempts (account_id, notification_id, attempt);

-- A notification no retry delivered within its window is dead-lettered under its own category.
ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_category_check;
ALTER TABLE dead_letters ADD CONSTRAINT dead_letters_category_check CHECK (category IN (
    'bad_payload', 'dependency_rejected', 'side_effect_unknown', 'code_bug', 'retries_exhausted', 'crashed',
    'provider_mismatch', 'infrastructure', 'notification_undeliverable'));
