-- Issue 29: the last per-account tables keyed by account — settlement lines and exceptions, and
-- API keys — after which no table references a withdrawal by its id alone, so `withdrawals (id)`
-- stops being unique (a plain index serves lookups by id). SQLite twin of
-- migrations/postgres/0025_settlement_and_api_keys_keyed_by_account.sql.
--
-- A settlement line belongs to the account of the withdrawal its idempotency key names (the
-- service resolves it at import; here, from the withdrawal it was matched to, else the one its key
-- names — a UUID in text, hyphenated, of any case, against the 16-byte id — else the system
-- account, created by 0024, when it names none of ours). An exception belongs to its withdrawal's
-- account, else its line's, else the system account. No row is lost or changed.
--
-- SQLite cannot change a primary key, a unique constraint or a foreign key in place: the three
-- tables are rebuilt with the same columns (the new account after the id, as in 0023 and 0024),
-- checks, defaults and rows, and so is `withdrawals`, whose table-level UNIQUE (id) cannot be
-- dropped otherwise (every other table references a withdrawal by (account_id, withdrawal_id),
-- which its primary key serves). As 0023 and 0024: the rows are set aside, the old tables dropped
-- (whatever references a table first), the new ones all created under their own names before any
-- row goes back (with foreign keys on, SQLite refuses an insert into a table whose parent table
-- does not exist), filled from the copies (the withdrawals first, then the lines, then their
-- exceptions), their indexes and triggers created after their rows are back, and the copies
-- dropped. Dropping `withdrawals` while the transitions, ledger, jobs, letters and the rest point
-- at it counts each of their rows as a deferred foreign-key violation; inserting the withdrawals
-- again under their own name clears the count (a renamed copy would not, and the commit would
-- fail). The references are checked at commit, which proves every account copied here is its
-- parent's: an exception whose line and withdrawal are in different accounts, or a reference that
-- dangled before, stops the migration.
PRAGMA defer_foreign_keys = ON;

-- 1. The rows, set aside.
CREATE TABLE withdrawals_old AS SELECT * FROM withdrawals;
CREATE TABLE settlement_lines_old AS SELECT * FROM settlement_lines;
CREATE TABLE settlement_exceptions_old AS SELECT * FROM settlement_exceptions;
CREATE TABLE api_keys_old AS SELECT * FROM api_keys;

-- 2. The old tables, with their indexes and triggers: whatever references a table goes first.
--    Dropping the withdrawals looks up each one's rows in every table that references it, and
--    putting each back looks them up again (while the count is not zero); two of those tables have
--    no index on (account_id, withdrawal_id), so each lookup would read all of the account's
--    idempotency records or review decisions (minutes for an account of 50,000 withdrawals and
--    5,000 records). Each gets one for this migration only, dropped once the withdrawals are back.
CREATE INDEX idempotency_records_withdrawal_0025 ON idempotency_records (account_id, withdrawal_id);
CREATE INDEX review_decisions_withdrawal_0025 ON review_decisions (account_id, withdrawal_id);
DROP TABLE settlement_exceptions;
DROP TABLE settlement_lines;
DROP TABLE api_keys;
DROP TABLE withdrawals;

-- 3. The tables keyed by their account, all four before any row goes back.
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
    PRIMARY KEY (account_id, id)
);

CREATE TABLE settlement_lines (
    id               BLOB NOT NULL,
    account_id       BLOB NOT NULL REFERENCES accounts(id),
    report_id        BLOB NOT NULL REFERENCES settlement_reports(id),
    line_no          INTEGER NOT NULL,
    line_key         TEXT NOT NULL,
    content_digest   TEXT NOT NULL,
    transfer_id      TEXT NOT NULL,
    idempotency_key  TEXT NOT NULL,
    reference        TEXT NOT NULL,
    amount_minor     INTEGER NOT NULL,
    currency         TEXT NOT NULL,
    fee_minor        INTEGER NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('paid', 'failed', 'returned')),
    event_at         TEXT NOT NULL,
    withdrawal_id    BLOB,
    result           TEXT CHECK (result IN ('matched', 'amount_mismatch', 'status_mismatch', 'unknown_transfer',
                                            'returned', 'seen_before')),
    applied          TEXT CHECK (applied IN ('completed', 'failed', 'return_credited')),
    evidence         TEXT,
    matched_at       TEXT,
    PRIMARY KEY (account_id, id),
    UNIQUE (account_id, report_id, line_no),
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals(account_id, id)
);

CREATE TABLE settlement_exceptions (
    id               BLOB NOT NULL,
    account_id       BLOB NOT NULL,
    kind             TEXT NOT NULL CHECK (kind IN ('amount_mismatch', 'status_mismatch', 'unknown_transfer',
                                                   'returned', 'missing_from_report')),
    status           TEXT NOT NULL CHECK (status IN ('open', 'resolved')),
    dedupe_key       TEXT NOT NULL,
    withdrawal_id    BLOB,
    line_id          BLOB,
    report_date      TEXT,
    transfer_id      TEXT,
    detail           TEXT NOT NULL,
    evidence         TEXT NOT NULL,
    opened_at        TEXT NOT NULL,
    resolved_at      TEXT,
    resolved_by      BLOB,
    resolution       TEXT,
    resolution_note  TEXT,
    PRIMARY KEY (account_id, id),
    UNIQUE (account_id, dedupe_key),
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals(account_id, id),
    FOREIGN KEY (account_id, line_id) REFERENCES settlement_lines(account_id, id)
);

-- API keys: the key's account leads its primary key (which also serves an account's key list);
-- authentication reads a key by its id alone through a plain index.
CREATE TABLE api_keys (
    id              BLOB NOT NULL,
    account_id      BLOB NOT NULL REFERENCES accounts(id),
    secret_hash     BLOB NOT NULL,
    created_at      TEXT NOT NULL,
    revoked_at      TEXT,
    label           TEXT,
    last_used_at    TEXT,
    revoked_reason  TEXT,
    PRIMARY KEY (account_id, id)
);

-- 4. The rows back, parents first, with the accounts copied; each table's indexes and triggers
--    once its rows are back.
INSERT INTO withdrawals (id, account_id, status, amount, currency, destination, reference, failure_code, version,
                         idempotency_key, correlation_id, created_at, updated_at, sandbox)
SELECT id, account_id, status, amount, currency, destination, reference, failure_code, version, idempotency_key,
       correlation_id, created_at, updated_at, sandbox
FROM withdrawals_old;
DROP INDEX idempotency_records_withdrawal_0025;
DROP INDEX review_decisions_withdrawal_0025;
CREATE INDEX withdrawals_status_idx ON withdrawals (status, updated_at);
CREATE INDEX withdrawals_id_idx ON withdrawals (id);
CREATE TRIGGER withdrawals_amount_is_integer BEFORE INSERT ON withdrawals
WHEN typeof(NEW.amount) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'withdrawal amounts are 64-bit integer minor units'); END;

-- A line's account: its matched withdrawal's, else that of the withdrawal its key names, else the
-- system account. The key is compared with the id in hex through an index built for this step
-- only (without it, every unmatched line would read every withdrawal).
CREATE INDEX withdrawals_hex_id_0025 ON withdrawals (lower(hex(id)));
INSERT INTO settlement_lines (id, account_id, report_id, line_no, line_key, content_digest, transfer_id,
                              idempotency_key, reference, amount_minor, currency, fee_minor, status, event_at,
                              withdrawal_id, result, applied, evidence, matched_at)
SELECT l.id,
       COALESCE((SELECT w.account_id FROM withdrawals w WHERE w.id = l.withdrawal_id),
                (SELECT w.account_id FROM withdrawals w
                  WHERE lower(hex(w.id)) = lower(replace(l.idempotency_key, '-', ''))),
                X'00000000000000000000000000000000'),
       l.report_id, l.line_no, l.line_key, l.content_digest, l.transfer_id, l.idempotency_key, l.reference,
       l.amount_minor, l.currency, l.fee_minor, l.status, l.event_at, l.withdrawal_id, l.result, l.applied,
       l.evidence, l.matched_at
FROM settlement_lines_old l;
DROP INDEX withdrawals_hex_id_0025;
CREATE INDEX settlement_lines_key ON settlement_lines (line_key);
CREATE INDEX settlement_lines_unmatched ON settlement_lines (report_id) WHERE result IS NULL;
CREATE INDEX settlement_lines_withdrawal ON settlement_lines (account_id, withdrawal_id) WHERE withdrawal_id IS NOT NULL;
CREATE TRIGGER settlement_lines_money_is_integer BEFORE INSERT ON settlement_lines
WHEN typeof(NEW.amount_minor) <> 'integer' OR typeof(NEW.fee_minor) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'settlement amounts are 64-bit integer minor units'); END;

-- An exception's account: its withdrawal's, else its line's (as just copied), else the system
-- account. No index leads with a line's id; SQLite builds an automatic one for this join.
INSERT INTO settlement_exceptions (id, account_id, kind, status, dedupe_key, withdrawal_id, line_id, report_date,
                                   transfer_id, detail, evidence, opened_at, resolved_at, resolved_by, resolution,
                                   resolution_note)
SELECT e.id,
       COALESCE(w.account_id, l.account_id, X'00000000000000000000000000000000'),
       e.kind, e.status, e.dedupe_key, e.withdrawal_id, e.line_id, e.report_date, e.transfer_id, e.detail,
       e.evidence, e.opened_at, e.resolved_at, e.resolved_by, e.resolution, e.resolution_note
FROM settlement_exceptions_old e
LEFT JOIN withdrawals w ON w.id = e.withdrawal_id
LEFT JOIN settlement_lines l ON l.id = e.line_id;
CREATE INDEX settlement_exceptions_id_idx ON settlement_exceptions (id);
CREATE INDEX settlement_exceptions_list ON settlement_exceptions (status, opened_at, id);
CREATE INDEX settlement_exceptions_withdrawal ON settlement_exceptions (account_id, withdrawal_id)
    WHERE withdrawal_id IS NOT NULL;

INSERT INTO api_keys (id, account_id, secret_hash, created_at, revoked_at, label, last_used_at, revoked_reason)
SELECT id, account_id, secret_hash, created_at, revoked_at, label, last_used_at, revoked_reason
FROM api_keys_old;
CREATE INDEX api_keys_id_idx ON api_keys (id);

-- 5. The copies.
DROP TABLE withdrawals_old;
DROP TABLE settlement_lines_old;
DROP TABLE settlement_exceptions_old;
DROP TABLE api_keys_old;
