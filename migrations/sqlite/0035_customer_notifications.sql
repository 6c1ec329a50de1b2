-- SQLite twin of migrations/postgres/0035_customer_notifications.sql (issue 32, SPEC §17): the
-- events outbox, webhook endpoints (sealed secrets), notifications and their delivery attempts.
--
-- `events` is the outbox: a row per withdrawal change a customer hears about (created,
-- completed, failed, requires_review, returned), written in the transaction of the change, so an
-- event exists exactly when its change committed. `data` is the withdrawal as
-- `GET /v1/withdrawals/{id}` showed it at that moment, except its `version`, which is
-- `withdrawal_version` (read from the row in the same transaction). `fanned_out` is false until
-- the dispatcher has made a notification (and its delivery job) per subscribed endpoint.
CREATE TABLE events (
    account_id         BLOB NOT NULL,
    id                 BLOB NOT NULL,
    withdrawal_id      BLOB NOT NULL,
    event_type         TEXT NOT NULL CHECK (event_type IN ('withdrawal.created', 'withdrawal.completed',
                           'withdrawal.failed', 'withdrawal.requires_review', 'withdrawal.returned')),
    withdrawal_version INTEGER NOT NULL,
    data               TEXT NOT NULL,
    created_at         TEXT NOT NULL,
    fanned_out         INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, id)
);
-- Keyed by account (issue 29): the events API pages an account's events by id (UUIDv7:
-- time-ordered) on the primary key.
CREATE INDEX events_by_account_type ON events (account_id, event_type, id);
-- The dispatcher's work: small, since a row leaves it once fanned out.
CREATE INDEX events_to_fan_out ON events (id) WHERE fanned_out = 0;

-- An integrator's endpoint. The signing secret is sealed (AES-256-GCM under NOTIFY_SECRET_KEY),
-- never stored in the clear; during a rotation the previous one is kept until it expires.
CREATE TABLE webhook_endpoints (
    account_id                  BLOB NOT NULL,
    id                          BLOB NOT NULL,
    url                         TEXT NOT NULL,
    -- The subscribed event types, comma-separated in a fixed order.
    event_types                 TEXT NOT NULL,
    status                      TEXT NOT NULL CHECK (status IN ('enabled', 'disabled', 'deleted')),
    disabled_reason             TEXT,
    secret_sealed               BLOB NOT NULL,
    previous_secret_sealed      BLOB,
    previous_secret_expires_at  TEXT,
    -- Since when every delivery failed (cleared by a success): past NOTIFY_DISABLE_AFTER_MS, disabled.
    failing_since               TEXT,
    created_at                  TEXT NOT NULL,
    updated_at                  TEXT NOT NULL,
    PRIMARY KEY (account_id, id)
);
-- A delivery job and an operator name an endpoint by id alone (as a letter is named).
CREATE INDEX webhook_endpoints_by_id ON webhook_endpoints (id);

-- One event to one endpoint: what its delivery job is about, and where it stands.
CREATE TABLE notifications (
    account_id       BLOB NOT NULL,
    id               BLOB NOT NULL,
    event_id         BLOB NOT NULL,
    endpoint_id      BLOB NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'undeliverable', 'gone', 'skipped')),
    attempts         integer NOT NULL DEFAULT 0,
    last_status_code integer,
    last_error       TEXT,
    last_attempt_at  TEXT,
    delivered_at     TEXT,
    -- The delivery job last dead-lettered: its letter is closed once the notification is delivered.
    dead_job_id      BLOB,
    created_at       TEXT NOT NULL,
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
    account_id      BLOB NOT NULL,
    id              BLOB NOT NULL,
    notification_id BLOB NOT NULL,
    attempt         integer NOT NULL,
    result          TEXT NOT NULL,
    status_code     integer,
    error           TEXT,
    duration_ms     INTEGER NOT NULL,
    at              TEXT NOT NULL,
    PRIMARY KEY (account_id, id),
    FOREIGN KEY (account_id, notification_id) REFERENCES notifications (account_id, id)
);
CREATE INDEX notification_attempts_by_notification ON notification_attempts (account_id, notification_id, attempt);

-- A notification no retry delivered within its window is dead-lettered under its own category.
-- SQLite cannot change a CHECK in place: dead_letters is rebuilt as 0024 rebuilt it (the rows set
-- aside, the table dropped — its references from dead_letter_events, open_dead_letters and
-- replay_items are checked at commit — created again with the wider CHECK, refilled, its indexes
-- and append-only triggers created again).
PRAGMA defer_foreign_keys = ON;
CREATE TABLE dead_letters_old AS SELECT * FROM dead_letters;
DROP TABLE dead_letters;
CREATE TABLE dead_letters (
    id                 BLOB NOT NULL,
    account_id         BLOB NOT NULL,
    job_id             BLOB NOT NULL,
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
    withdrawal_id      BLOB,
    side_effect_state  TEXT NOT NULL CHECK (side_effect_state IN ('not_started', 'confirmed', 'unknown')),
    owner              TEXT NOT NULL,
    runbook            TEXT NOT NULL,
    category           TEXT NOT NULL DEFAULT 'code_bug' CHECK (category IN (
        'bad_payload', 'dependency_rejected', 'side_effect_unknown', 'code_bug', 'retries_exhausted', 'crashed',
        'provider_mismatch', 'infrastructure', 'notification_undeliverable')),
    provider           TEXT,
    PRIMARY KEY (account_id, id),
    UNIQUE (account_id, job_id),
    FOREIGN KEY (account_id, job_id) REFERENCES jobs(account_id, id),
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals(account_id, id)
);
INSERT INTO dead_letters SELECT * FROM dead_letters_old;
DROP TABLE dead_letters_old;
CREATE INDEX dead_letters_id_idx ON dead_letters (id);
CREATE INDEX dead_letters_failed_at_idx ON dead_letters (failed_at);
CREATE INDEX dead_letters_withdrawal_idx ON dead_letters (account_id, withdrawal_id);
CREATE INDEX dead_letters_category_idx ON dead_letters (category, error_code, failed_at);
CREATE TRIGGER dead_letters_no_update BEFORE UPDATE ON dead_letters
BEGIN SELECT RAISE(ABORT, 'dead_letters is append-only'); END;
CREATE TRIGGER dead_letters_no_delete BEFORE DELETE ON dead_letters
BEGIN SELECT RAISE(ABORT, 'dead_letters is append-only'); END;
