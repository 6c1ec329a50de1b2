-- Issue 29: jobs and dead letters keyed by account. SQLite twin of
-- migrations/postgres/0024_jobs_and_dead_letters_keyed_by_account.sql. A job, its dead letter, the
-- letter's events, its place in the open set and its replay items carry the account of the
-- withdrawal they are about (a job about no withdrawal, the daily settlement import, belongs to the
-- system account, created here: the nil UUID), are keyed (account_id, id) and reference each other
-- by (account_id, …). `dead_letters (id)` keeps a plain index for operators' lookups by id alone.
--
-- Rebuilt as 0023 rebuilt the withdrawal graph: the rows set aside, the old tables dropped (whatever
-- references a table first), the new ones created under their own names and filled from the copies,
-- their indexes and triggers created after the rows are back, the copies dropped. The five tables
-- reference each other in a cycle (jobs.replay_item_id → replay_items → dead_letters → jobs), so
-- no order creates every parent before its child; all five are created before any row goes back
-- (with foreign keys on, SQLite refuses an insert into a table whose parent table does not exist:
-- "no such table"). A job whose replay item is not back yet counts as a deferred violation until
-- the item is inserted, and the references are checked at commit, which proves every account
-- copied here is its parent's (and catches a reference that dangled before). No other table
-- references these five.
--
-- The accounts are copied: a job takes its withdrawal's (the system account when it has none), a
-- letter its job's, an event, open-set row and replay item their letter's. A row whose source is
-- missing stops the migration (NOT NULL) instead of being left behind.
PRAGMA defer_foreign_keys = ON;

-- The system account; created_at in DbTime's text form (YYYY-MM-DDTHH:MM:SS.ffffffZ).
INSERT OR IGNORE INTO accounts (id, name, created_at)
VALUES (X'00000000000000000000000000000000', 'system', strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z');

-- 1. The rows, set aside.
CREATE TABLE jobs_old AS SELECT * FROM jobs;
CREATE TABLE dead_letters_old AS SELECT * FROM dead_letters;
CREATE TABLE dead_letter_events_old AS SELECT * FROM dead_letter_events;
CREATE TABLE open_dead_letters_old AS SELECT * FROM open_dead_letters;
CREATE TABLE replay_items_old AS SELECT * FROM replay_items;

-- 2. The old tables, with their indexes and triggers: whatever references a table goes first. The
--    cycle is opened first: the jobs' references to replay items are cleared (the copy keeps them),
--    so no table is dropped while another still points at it. (Dropping replay_items under the
--    jobs instead would have SQLite count the jobs' references up, then, when the jobs are dropped
--    with replay_items gone, count every non-NULL reference down, including one that dangled
--    before the migration: the counts would cancel and hide it from the commit's check.)
UPDATE jobs SET replay_item_id = NULL WHERE replay_item_id IS NOT NULL;
DROP TABLE dead_letter_events;
DROP TABLE open_dead_letters;
DROP TABLE replay_items;
DROP TABLE dead_letters;
DROP TABLE jobs;

-- 3. The tables keyed by their account, all five before any row goes back.
CREATE TABLE jobs (
    id                BLOB NOT NULL,
    account_id        BLOB NOT NULL REFERENCES accounts(id),
    queue             TEXT NOT NULL,
    kind              TEXT NOT NULL,
    payload           BLOB NOT NULL,
    payload_version   INTEGER NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('scheduled', 'running', 'succeeded', 'dead')),
    attempts          INTEGER NOT NULL DEFAULT 0,
    receives          INTEGER NOT NULL DEFAULT 0,
    run_at            TEXT NOT NULL,
    first_attempt_at  TEXT,
    locked_by         TEXT,
    locked_until      TEXT,
    lease_token       BLOB,
    last_error        TEXT,
    correlation_id    TEXT NOT NULL,
    withdrawal_id     BLOB,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    lease_expiries    INTEGER NOT NULL DEFAULT 0,
    handler_errors    INTEGER NOT NULL DEFAULT 0,
    replay_item_id    BLOB,
    PRIMARY KEY (account_id, id),
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals(account_id, id),
    FOREIGN KEY (account_id, replay_item_id) REFERENCES replay_items(account_id, id)
);

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
        'provider_mismatch', 'infrastructure')),
    PRIMARY KEY (account_id, id),
    UNIQUE (account_id, job_id),
    FOREIGN KEY (account_id, job_id) REFERENCES jobs(account_id, id),
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals(account_id, id)
);

CREATE TABLE dead_letter_events (
    id              BLOB NOT NULL,
    account_id      BLOB NOT NULL,
    dead_letter_id  BLOB NOT NULL,
    action          TEXT NOT NULL,
    actor           TEXT NOT NULL,
    reason          TEXT NOT NULL,
    details         TEXT,
    at              TEXT NOT NULL,
    PRIMARY KEY (account_id, id),
    FOREIGN KEY (account_id, dead_letter_id) REFERENCES dead_letters(account_id, id)
);

CREATE TABLE open_dead_letters (
    dead_letter_id  BLOB NOT NULL,
    account_id      BLOB NOT NULL,
    category        TEXT NOT NULL,
    error_code      TEXT NOT NULL,
    failed_at       TEXT NOT NULL,
    PRIMARY KEY (account_id, dead_letter_id),
    FOREIGN KEY (account_id, dead_letter_id) REFERENCES dead_letters(account_id, id)
);

CREATE TABLE replay_items (
    id              BLOB NOT NULL,
    account_id      BLOB NOT NULL,
    run_id          BLOB NOT NULL REFERENCES replay_runs(id),
    dead_letter_id  BLOB NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('pending', 'released', 'reconciling', 'skipped', 'cancelled')),
    detail          TEXT,
    job_id          BLOB,
    released_at     TEXT,
    created_at      TEXT NOT NULL,
    PRIMARY KEY (account_id, id),
    FOREIGN KEY (account_id, dead_letter_id) REFERENCES dead_letters(account_id, id)
);

-- 4. The rows back (jobs, then their letters, then what hangs off a letter), with the accounts
--    copied; then the indexes and triggers.
INSERT INTO jobs (id, account_id, queue, kind, payload, payload_version, status, attempts, receives, run_at,
                  first_attempt_at, locked_by, locked_until, lease_token, last_error, correlation_id, withdrawal_id,
                  created_at, updated_at, lease_expiries, handler_errors, replay_item_id)
SELECT j.id,
       CASE WHEN j.withdrawal_id IS NULL THEN X'00000000000000000000000000000000' ELSE w.account_id END,
       j.queue, j.kind, j.payload, j.payload_version, j.status, j.attempts, j.receives, j.run_at, j.first_attempt_at,
       j.locked_by, j.locked_until, j.lease_token, j.last_error, j.correlation_id, j.withdrawal_id, j.created_at,
       j.updated_at, j.lease_expiries, j.handler_errors, j.replay_item_id
FROM jobs_old j LEFT JOIN withdrawals w ON w.id = j.withdrawal_id;

INSERT INTO dead_letters (id, account_id, job_id, queue, job_type, payload_version, payload, raw_payload, attempts,
                          first_attempt_at, failed_at, error_code, error_class, error_message, stack, worker_host,
                          worker_version, correlation_id, idempotency_key, withdrawal_id, side_effect_state, owner,
                          runbook, category)
SELECT d.id, j.account_id, d.job_id, d.queue, d.job_type, d.payload_version, d.payload, d.raw_payload, d.attempts,
       d.first_attempt_at, d.failed_at, d.error_code, d.error_class, d.error_message, d.stack, d.worker_host,
       d.worker_version, d.correlation_id, d.idempotency_key, d.withdrawal_id, d.side_effect_state, d.owner,
       d.runbook, d.category
FROM dead_letters_old d LEFT JOIN jobs j ON j.id = d.job_id;

INSERT INTO replay_items (id, account_id, run_id, dead_letter_id, status, detail, job_id, released_at, created_at)
SELECT i.id, d.account_id, i.run_id, i.dead_letter_id, i.status, i.detail, i.job_id, i.released_at, i.created_at
FROM replay_items_old i LEFT JOIN dead_letters d ON d.id = i.dead_letter_id;

INSERT INTO dead_letter_events (id, account_id, dead_letter_id, action, actor, reason, details, at)
SELECT e.id, d.account_id, e.dead_letter_id, e.action, e.actor, e.reason, e.details, e.at
FROM dead_letter_events_old e LEFT JOIN dead_letters d ON d.id = e.dead_letter_id;

INSERT INTO open_dead_letters (dead_letter_id, account_id, category, error_code, failed_at)
SELECT o.dead_letter_id, d.account_id, o.category, o.error_code, o.failed_at
FROM open_dead_letters_old o LEFT JOIN dead_letters d ON d.id = o.dead_letter_id;

CREATE INDEX jobs_claim_idx ON jobs (queue, run_at) WHERE status = 'scheduled';
CREATE INDEX jobs_withdrawal_idx ON jobs (account_id, withdrawal_id);
CREATE UNIQUE INDEX jobs_one_live_per_withdrawal_idx ON jobs (account_id, withdrawal_id, kind)
    WHERE status IN ('scheduled', 'running');
CREATE INDEX jobs_settlement_import_idx ON jobs (correlation_id) WHERE kind = 'import_settlement';
CREATE INDEX jobs_running_idx ON jobs (id) WHERE status = 'running';
CREATE INDEX jobs_replay_item_idx ON jobs (account_id, replay_item_id) WHERE replay_item_id IS NOT NULL;

CREATE INDEX dead_letters_id_idx ON dead_letters (id);
CREATE INDEX dead_letters_failed_at_idx ON dead_letters (failed_at);
CREATE INDEX dead_letters_withdrawal_idx ON dead_letters (account_id, withdrawal_id);
CREATE INDEX dead_letters_category_idx ON dead_letters (category, error_code, failed_at);
CREATE TRIGGER dead_letters_no_update BEFORE UPDATE ON dead_letters
BEGIN SELECT RAISE(ABORT, 'dead_letters is append-only'); END;
CREATE TRIGGER dead_letters_no_delete BEFORE DELETE ON dead_letters
BEGIN SELECT RAISE(ABORT, 'dead_letters is append-only'); END;

CREATE INDEX dead_letter_events_dead_letter_idx ON dead_letter_events (account_id, dead_letter_id, at);
CREATE UNIQUE INDEX dead_letter_events_one_close_idx ON dead_letter_events (account_id, dead_letter_id)
    WHERE action = 'closed';

CREATE INDEX open_dead_letters_group_idx ON open_dead_letters (category, error_code, failed_at);

CREATE INDEX replay_items_run_idx ON replay_items (run_id, status);
CREATE UNIQUE INDEX replay_items_one_active_idx ON replay_items (account_id, dead_letter_id) WHERE status = 'pending';

-- 5. The copies.
DROP TABLE jobs_old;
DROP TABLE dead_letters_old;
DROP TABLE dead_letter_events_old;
DROP TABLE open_dead_letters_old;
DROP TABLE replay_items_old;
