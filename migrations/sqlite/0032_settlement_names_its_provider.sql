-- SQLite twin of migrations/postgres/0032_settlement_names_its_provider.sql (issue 31, SPEC §16):
-- every imported report, its lines, its exceptions and every operator import name the provider
-- the report came from; earlier rows are `default`'s. What was unique per day becomes unique per
-- provider and day: a report version is (provider, report_date, version), a report is stored once
-- per (provider, report_date, digest), and an exception is unique by (account_id, provider,
-- dedupe_key).
--
-- SQLite cannot drop a unique constraint in place: `settlement_reports` and
-- `settlement_exceptions` are rebuilt with the same columns, checks and rows, the provider last
-- (where ADD COLUMN puts it on the other tables and on PostgreSQL). As in 0025, the rows are set
-- aside, the old tables dropped, the new ones created under their own names and filled from the
-- copies, their indexes created after their rows are back, and the copies dropped. Dropping the
-- reports while their lines point at them counts each line as a deferred foreign-key violation;
-- putting the reports back under their own name clears the count, and the references are
-- checked at commit.
PRAGMA defer_foreign_keys = ON;

-- 1. The columns added in place.
ALTER TABLE settlement_lines ADD COLUMN provider TEXT NOT NULL DEFAULT 'default';
ALTER TABLE settlement_imports ADD COLUMN provider TEXT NOT NULL DEFAULT 'default';

-- 2. The rows, set aside; the old tables dropped (the exceptions first: they reference lines).
CREATE TABLE settlement_reports_old AS SELECT * FROM settlement_reports;
CREATE TABLE settlement_exceptions_old AS SELECT * FROM settlement_exceptions;
DROP TABLE settlement_exceptions;
DROP TABLE settlement_reports;

-- 3. The tables keyed by their provider.
CREATE TABLE settlement_reports (
    id           BLOB PRIMARY KEY,
    report_date  TEXT NOT NULL,
    version      INTEGER NOT NULL CHECK (version > 0),
    digest       TEXT NOT NULL,
    source       TEXT NOT NULL CHECK (source IN ('provider', 'file')),
    line_count   INTEGER NOT NULL,
    differences  TEXT NOT NULL,
    imported_by  TEXT NOT NULL,
    imported_at  TEXT NOT NULL,
    provider     TEXT NOT NULL DEFAULT 'default',
    UNIQUE (provider, report_date, digest),
    UNIQUE (provider, report_date, version)
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
    provider         TEXT NOT NULL DEFAULT 'default',
    PRIMARY KEY (account_id, id),
    UNIQUE (account_id, provider, dedupe_key),
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals(account_id, id),
    FOREIGN KEY (account_id, line_id) REFERENCES settlement_lines(account_id, id)
);

-- 4. The rows back, the reports first; each table's indexes once its rows are back.
INSERT INTO settlement_reports (id, report_date, version, digest, source, line_count, differences, imported_by,
                                imported_at)
SELECT id, report_date, version, digest, source, line_count, differences, imported_by, imported_at
FROM settlement_reports_old;

INSERT INTO settlement_exceptions (id, account_id, kind, status, dedupe_key, withdrawal_id, line_id, report_date,
                                   transfer_id, detail, evidence, opened_at, resolved_at, resolved_by, resolution,
                                   resolution_note)
SELECT id, account_id, kind, status, dedupe_key, withdrawal_id, line_id, report_date, transfer_id, detail, evidence,
       opened_at, resolved_at, resolved_by, resolution, resolution_note
FROM settlement_exceptions_old;
CREATE INDEX settlement_exceptions_id_idx ON settlement_exceptions (id);
CREATE INDEX settlement_exceptions_list ON settlement_exceptions (status, opened_at, id);
CREATE INDEX settlement_exceptions_withdrawal ON settlement_exceptions (account_id, withdrawal_id)
    WHERE withdrawal_id IS NOT NULL;

-- 5. The copies.
DROP TABLE settlement_reports_old;
DROP TABLE settlement_exceptions_old;
