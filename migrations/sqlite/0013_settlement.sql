-- SQLite twin of migrations/postgres/0013_settlement.sql. SPEC §14.1–14.2: imported settlement reports, their lines (each matched to a withdrawal, with
-- the evidence of the match), and the settlement exceptions operators resolve.
--
-- A report is stored once per digest; a corrected report for the same day is a new version whose
-- differences from the previous one are recorded. Lines keep their own key (transfer, status,
-- event time) and content digest, so a line already matched in an earlier version is not matched
-- again. A line whose `result` is NULL is still to be matched (or waits for the provider to
-- confirm it).
CREATE TABLE settlement_reports (
    id           BLOB PRIMARY KEY,
    report_date  TEXT NOT NULL,
    version      INTEGER NOT NULL CHECK (version > 0),
    digest       TEXT NOT NULL UNIQUE,
    source       TEXT NOT NULL CHECK (source IN ('provider', 'file')),
    line_count   INTEGER NOT NULL,
    differences  TEXT NOT NULL,
    imported_by  TEXT NOT NULL,
    imported_at  TEXT NOT NULL,
    UNIQUE (report_date, version)
);

CREATE TABLE settlement_lines (
    id               BLOB PRIMARY KEY,
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
    withdrawal_id    BLOB REFERENCES withdrawals(id),
    result           TEXT CHECK (result IN ('matched', 'amount_mismatch', 'status_mismatch', 'unknown_transfer',
                                            'returned', 'seen_before')),
    applied          TEXT CHECK (applied IN ('completed', 'failed', 'return_credited')),
    evidence         TEXT,
    matched_at       TEXT,
    UNIQUE (report_id, line_no)
);
CREATE INDEX settlement_lines_key ON settlement_lines (line_key);
CREATE INDEX settlement_lines_withdrawal ON settlement_lines (withdrawal_id) WHERE withdrawal_id IS NOT NULL;
CREATE INDEX settlement_lines_unmatched ON settlement_lines (report_id) WHERE result IS NULL;

CREATE TABLE settlement_exceptions (
    id               BLOB PRIMARY KEY,
    kind             TEXT NOT NULL CHECK (kind IN ('amount_mismatch', 'status_mismatch', 'unknown_transfer',
                                                   'returned', 'missing_from_report')),
    status           TEXT NOT NULL CHECK (status IN ('open', 'resolved')),
    dedupe_key       TEXT NOT NULL UNIQUE,
    withdrawal_id    BLOB REFERENCES withdrawals(id),
    line_id          BLOB REFERENCES settlement_lines(id),
    report_date      TEXT,
    transfer_id      TEXT,
    detail           TEXT NOT NULL,
    evidence         TEXT NOT NULL,
    opened_at        TEXT NOT NULL,
    resolved_at      TEXT,
    resolved_by      BLOB,
    resolution       TEXT,
    resolution_note  TEXT
);
CREATE INDEX settlement_exceptions_list ON settlement_exceptions (status, opened_at, id);
CREATE INDEX settlement_exceptions_withdrawal ON settlement_exceptions (withdrawal_id) WHERE withdrawal_id IS NOT NULL;

-- The daily import job is enqueued once per day: found by its correlation id (`settlement-import:<day>`).
CREATE INDEX jobs_settlement_import_idx ON jobs (correlation_id) WHERE kind = 'import_settlement';
