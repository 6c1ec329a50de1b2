-- Issue 29: the withdrawal graph keyed by account. SQLite twin of
-- migrations/postgres/0023_withdrawal_graph_keyed_by_account.sql. A withdrawal's primary key becomes
-- (account_id, id), with `id` still unique (the target of jobs, dead letters, settlement lines and
-- exceptions, not keyed yet); its history (transitions, provider attempts, reconciliation results,
-- review decisions, ledger entries, idempotency records, returns) carries the account, copied from
-- the withdrawal where it had none, and references the withdrawal by (account_id, withdrawal_id).
--
-- SQLite cannot change a primary key or a foreign key in place: the eight tables are rebuilt with
-- the same columns (the new account after the id; `id` NOT NULL, as in 0022 and as PostgreSQL makes
-- a key column), checks, defaults and rows, and their indexes and triggers are created again. Not
-- by 0014's copy-drop-rename: dropping `withdrawals` while jobs, dead letters and settlement rows
-- still point at it counts each of those rows as a deferred foreign-key violation, and only
-- inserting the withdrawals again under their own name clears the count (a renamed copy does not,
-- and the commit would fail). So the rows are set aside, the old tables dropped (the history before
-- the withdrawals), the new ones created under their own names and filled from the copies (the
-- withdrawals first, the transitions before the ledger), and the copies dropped. The references are
-- checked at commit, which proves every account copied or stored on a history row is its
-- withdrawal's. The triggers are created after the rows are back: ledger entries written before
-- 0018 are funding entries without an actor.
PRAGMA defer_foreign_keys = ON;

-- 1. The rows, set aside.
CREATE TABLE withdrawals_old AS SELECT * FROM withdrawals;
CREATE TABLE withdrawal_transitions_old AS SELECT * FROM withdrawal_transitions;
CREATE TABLE ledger_entries_old AS SELECT * FROM ledger_entries;
CREATE TABLE idempotency_records_old AS SELECT * FROM idempotency_records;
CREATE TABLE provider_attempts_old AS SELECT * FROM provider_attempts;
CREATE TABLE reconciliation_results_old AS SELECT * FROM reconciliation_results;
CREATE TABLE review_decisions_old AS SELECT * FROM review_decisions;
CREATE TABLE payout_returns_old AS SELECT * FROM payout_returns;

-- 2. The old tables, with their indexes and triggers: whatever references a table goes first.
DROP TABLE ledger_entries;
DROP TABLE withdrawal_transitions;
DROP TABLE idempotency_records;
DROP TABLE provider_attempts;
DROP TABLE reconciliation_results;
DROP TABLE review_decisions;
DROP TABLE payout_returns;
DROP TABLE withdrawals;

-- 3. Each table keyed by its account, its rows back, its indexes and triggers. The page index
--    (account_id, created_at DESC, id DESC) is not created again: the primary key does its work
--    (ids are UUIDv7, so id order is creation order).
CREATE TABLE withdrawals (
    id               BLOB NOT NULL,
    account_id       BLOB NOT NULL REFERENCES accounts(id),
    status           TEXT NOT NULL CHECK (status IN ('pending', 'processing', 'requires_review', 'completed', 'failed')),
    amount           INTEGER NOT NULL CHECK (amount > 0),
    currency         TEXT NOT NULL,
    destination      TEXT NOT NULL,
    reference        TEXT,
    failure_code     TEXT,
    version          INTEGER NOT NULL,
    idempotency_key  TEXT NOT NULL,
    correlation_id   TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    sandbox          INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (account_id, id),
    UNIQUE (id)
);
INSERT INTO withdrawals (id, account_id, status, amount, currency, destination, reference, failure_code, version,
                         idempotency_key, correlation_id, created_at, updated_at, sandbox)
SELECT id, account_id, status, amount, currency, destination, reference, failure_code, version, idempotency_key,
       correlation_id, created_at, updated_at, sandbox
FROM withdrawals_old;
CREATE INDEX withdrawals_status_idx ON withdrawals (status, updated_at);
CREATE TRIGGER withdrawals_amount_is_integer BEFORE INSERT ON withdrawals
WHEN typeof(NEW.amount) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'withdrawal amounts are 64-bit integer minor units'); END;

-- A history row without an account takes its withdrawal's; one whose withdrawal is missing stops
-- the migration (NOT NULL) instead of being left behind.
CREATE TABLE withdrawal_transitions (
    id              BLOB NOT NULL,
    account_id      BLOB NOT NULL,
    withdrawal_id   BLOB NOT NULL,
    from_status     TEXT,
    to_status       TEXT NOT NULL,
    actor           TEXT NOT NULL,
    reason          TEXT NOT NULL,
    correlation_id  TEXT NOT NULL,
    at              TEXT NOT NULL,
    evidence        TEXT,
    PRIMARY KEY (account_id, id),
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals(account_id, id)
);
INSERT INTO withdrawal_transitions (id, account_id, withdrawal_id, from_status, to_status, actor, reason,
                                    correlation_id, at, evidence)
SELECT t.id, w.account_id, t.withdrawal_id, t.from_status, t.to_status, t.actor, t.reason, t.correlation_id, t.at,
       t.evidence
FROM withdrawal_transitions_old t LEFT JOIN withdrawals w ON w.id = t.withdrawal_id;
CREATE INDEX withdrawal_transitions_withdrawal_idx ON withdrawal_transitions (account_id, withdrawal_id, at);
CREATE TRIGGER withdrawal_transitions_no_update BEFORE UPDATE ON withdrawal_transitions
BEGIN SELECT RAISE(ABORT, 'withdrawal_transitions is append-only'); END;
CREATE TRIGGER withdrawal_transitions_no_delete BEFORE DELETE ON withdrawal_transitions
BEGIN SELECT RAISE(ABORT, 'withdrawal_transitions is append-only'); END;

CREATE TABLE ledger_entries (
    id              BLOB NOT NULL,
    account_id      BLOB NOT NULL REFERENCES accounts(id),
    currency        TEXT NOT NULL,
    withdrawal_id   BLOB,
    transition_id   BLOB,
    available_delta INTEGER NOT NULL,
    held_delta      INTEGER NOT NULL,
    paid_out_delta  INTEGER NOT NULL,
    created_at      TEXT NOT NULL,
    kind            TEXT NOT NULL DEFAULT 'funding'
        CHECK (kind IN ('funding', 'hold', 'settle', 'release', 'return')),
    actor           TEXT,
    PRIMARY KEY (account_id, id),
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals(account_id, id),
    FOREIGN KEY (account_id, transition_id) REFERENCES withdrawal_transitions(account_id, id)
);
INSERT INTO ledger_entries (id, account_id, currency, withdrawal_id, transition_id, available_delta, held_delta,
                            paid_out_delta, created_at, kind, actor)
SELECT id, account_id, currency, withdrawal_id, transition_id, available_delta, held_delta, paid_out_delta,
       created_at, kind, actor
FROM ledger_entries_old;
CREATE INDEX ledger_entries_account_idx ON ledger_entries (account_id, currency);
CREATE INDEX ledger_entries_withdrawal_idx ON ledger_entries (account_id, withdrawal_id);
CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries
BEGIN SELECT RAISE(ABORT, 'ledger_entries is append-only'); END;
CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries
BEGIN SELECT RAISE(ABORT, 'ledger_entries is append-only'); END;
CREATE TRIGGER ledger_entries_funding_names_its_actor BEFORE INSERT ON ledger_entries
WHEN NEW.kind = 'funding' AND NEW.actor IS NULL
BEGIN SELECT RAISE(ABORT, 'a funding ledger entry must name its actor'); END;
CREATE TRIGGER ledger_entries_money_is_integer BEFORE INSERT ON ledger_entries
WHEN typeof(NEW.available_delta) <> 'integer' OR typeof(NEW.held_delta) <> 'integer'
  OR typeof(NEW.paid_out_delta) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'ledger entries are 64-bit integer minor units'); END;

CREATE TABLE idempotency_records (
    account_id       BLOB NOT NULL REFERENCES accounts(id),
    key              TEXT NOT NULL,
    fingerprint      BLOB NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('in_progress', 'completed')),
    response_status  INTEGER,
    response_body    BLOB,
    withdrawal_id    BLOB,
    locked_at        TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    expires_at       TEXT NOT NULL,
    PRIMARY KEY (account_id, key),
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals(account_id, id)
);
INSERT INTO idempotency_records (account_id, key, fingerprint, state, response_status, response_body, withdrawal_id,
                                 locked_at, created_at, expires_at)
SELECT account_id, key, fingerprint, state, response_status, response_body, withdrawal_id, locked_at, created_at,
       expires_at
FROM idempotency_records_old;
CREATE INDEX idempotency_records_expiry_idx ON idempotency_records (expires_at);

CREATE TABLE provider_attempts (
    id                    BLOB NOT NULL,
    account_id            BLOB NOT NULL,
    withdrawal_id         BLOB NOT NULL,
    job_id                BLOB NOT NULL,
    attempt_no            INTEGER NOT NULL,
    worker_id             TEXT NOT NULL,
    correlation_id        TEXT NOT NULL,
    started_at            TEXT NOT NULL,
    finished_at           TEXT,
    outcome               TEXT CHECK (outcome IN ('paid', 'pending', 'failed', 'retryable', 'unknown', 'permanent', 'conflict', 'mismatch')),
    side_effect           TEXT NOT NULL CHECK (side_effect IN ('not_started', 'confirmed', 'unknown')),
    http_status           INTEGER,
    provider_transfer_id  TEXT,
    failure_code          TEXT,
    error_code            TEXT,
    error_message         TEXT,
    PRIMARY KEY (account_id, id),
    UNIQUE (account_id, withdrawal_id, attempt_no),
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals(account_id, id)
);
INSERT INTO provider_attempts (id, account_id, withdrawal_id, job_id, attempt_no, worker_id, correlation_id,
                               started_at, finished_at, outcome, side_effect, http_status, provider_transfer_id,
                               failure_code, error_code, error_message)
SELECT a.id, w.account_id, a.withdrawal_id, a.job_id, a.attempt_no, a.worker_id, a.correlation_id, a.started_at,
       a.finished_at, a.outcome, a.side_effect, a.http_status, a.provider_transfer_id, a.failure_code, a.error_code,
       a.error_message
FROM provider_attempts_old a LEFT JOIN withdrawals w ON w.id = a.withdrawal_id;

CREATE TABLE reconciliation_results (
    id                    BLOB NOT NULL,
    account_id            BLOB NOT NULL,
    withdrawal_id         BLOB NOT NULL,
    job_id                BLOB NOT NULL,
    provider_transfer_id  TEXT,
    failure_code          TEXT,
    detail                TEXT NOT NULL,
    follow_up_job_id      BLOB,
    correlation_id        TEXT NOT NULL,
    at                    TEXT NOT NULL,
    result                TEXT NOT NULL DEFAULT 'skipped' CHECK (result IN (
        'paid', 'failed', 'pending', 'not_found', 'unavailable', 'window_expired', 'skipped', 'mismatch', 'returned')),
    PRIMARY KEY (account_id, id),
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals(account_id, id)
);
INSERT INTO reconciliation_results (id, account_id, withdrawal_id, job_id, provider_transfer_id, failure_code, detail,
                                    follow_up_job_id, correlation_id, at, result)
SELECT r.id, w.account_id, r.withdrawal_id, r.job_id, r.provider_transfer_id, r.failure_code, r.detail,
       r.follow_up_job_id, r.correlation_id, r.at, r.result
FROM reconciliation_results_old r LEFT JOIN withdrawals w ON w.id = r.withdrawal_id;
CREATE INDEX reconciliation_results_withdrawal_idx ON reconciliation_results (account_id, withdrawal_id, at);
CREATE TRIGGER reconciliation_results_no_delete BEFORE DELETE ON reconciliation_results
BEGIN SELECT RAISE(ABORT, 'reconciliation_results is append-only'); END;
CREATE TRIGGER reconciliation_results_no_update BEFORE UPDATE ON reconciliation_results
BEGIN SELECT RAISE(ABORT, 'reconciliation_results is append-only'); END;

CREATE TABLE review_decisions (
    id                  BLOB NOT NULL,
    account_id          BLOB NOT NULL,
    withdrawal_id       BLOB NOT NULL,
    action              TEXT NOT NULL CHECK (action IN ('complete', 'fail')),
    provider_reference  TEXT,
    version             INTEGER NOT NULL,
    reason              TEXT NOT NULL,
    requested_by        BLOB NOT NULL REFERENCES operators(id),
    requested_at        TEXT NOT NULL,
    request_evidence    TEXT NOT NULL,
    status              TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'superseded')),
    decided_by          BLOB REFERENCES operators(id),
    decided_at          TEXT,
    decision_reason     TEXT,
    CHECK ((status IN ('approved', 'rejected')) = (decided_by IS NOT NULL)),
    PRIMARY KEY (account_id, id),
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals(account_id, id)
);
INSERT INTO review_decisions (id, account_id, withdrawal_id, action, provider_reference, version, reason,
                              requested_by, requested_at, request_evidence, status, decided_by, decided_at,
                              decision_reason)
SELECT d.id, w.account_id, d.withdrawal_id, d.action, d.provider_reference, d.version, d.reason, d.requested_by,
       d.requested_at, d.request_evidence, d.status, d.decided_by, d.decided_at, d.decision_reason
FROM review_decisions_old d LEFT JOIN withdrawals w ON w.id = d.withdrawal_id;
CREATE UNIQUE INDEX review_decisions_one_pending_idx ON review_decisions (account_id, withdrawal_id)
    WHERE status = 'pending';
CREATE INDEX review_decisions_status_idx ON review_decisions (status, requested_at);

CREATE TABLE payout_returns (
    id             BLOB NOT NULL,
    withdrawal_id  BLOB NOT NULL,
    account_id     BLOB NOT NULL REFERENCES accounts(id),
    currency       TEXT NOT NULL,
    amount_minor   INTEGER NOT NULL CHECK (amount_minor > 0),
    return_code    TEXT NOT NULL,
    returned_at    TEXT NOT NULL,
    evidence       TEXT NOT NULL,
    recorded_at    TEXT NOT NULL,
    PRIMARY KEY (account_id, id),
    UNIQUE (account_id, withdrawal_id),
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals(account_id, id)
);
INSERT INTO payout_returns (id, withdrawal_id, account_id, currency, amount_minor, return_code, returned_at, evidence,
                            recorded_at)
SELECT id, withdrawal_id, account_id, currency, amount_minor, return_code, returned_at, evidence, recorded_at
FROM payout_returns_old;
CREATE TRIGGER payout_returns_no_update BEFORE UPDATE ON payout_returns
BEGIN SELECT RAISE(ABORT, 'payout_returns is append-only'); END;
CREATE TRIGGER payout_returns_no_delete BEFORE DELETE ON payout_returns
BEGIN SELECT RAISE(ABORT, 'payout_returns is append-only'); END;
CREATE TRIGGER payout_returns_amount_is_integer BEFORE INSERT ON payout_returns
WHEN typeof(NEW.amount_minor) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'return amounts are 64-bit integer minor units'); END;

-- 4. The copies.
DROP TABLE withdrawals_old;
DROP TABLE withdrawal_transitions_old;
DROP TABLE ledger_entries_old;
DROP TABLE idempotency_records_old;
DROP TABLE provider_attempts_old;
DROP TABLE reconciliation_results_old;
DROP TABLE review_decisions_old;
DROP TABLE payout_returns_old;
