-- SPEC §14.1–14.2: imported settlement reports, their lines (each matched to a withdrawal, with
-- the evidence of the match), and the settlement exceptions operators resolve.
--
-- A report is stored once per digest; a corrected report for the same day is a new version whose
-- differences from the previous one are recorded. Lines keep their own key (transfer, status,
-- event time) and content digest, so a line already matched in an earlier version is not matched
-- again. A line whose `result` is NULL is still to be matched (or waits for the provider to
-- confirm it).
CREATE TABLE settlement_reports (
    id           uuid PRIMARY KEY,
    report_date  text NOT NULL,
    version      integer NOT NULL CHECK (version > 0),
    digest       text NOT NULL UNIQUE,
    source       text NOT NULL CHECK (source IN ('provider', 'file')),
    line_count   integer NOT NULL,
    differences  jsonb NOT NULL,
    imported_by  text NOT NULL,
    imported_at  timestamptz NOT NULL,
    UNIQUE (report_date, version)
);

CREATE TABLE settlement_lines (
    id               uuid PRIMARY KEY,
    report_id        uuid NOT NULL REFERENCES settlement_reports(id),
    line_no          integer NOT NULL,
    line_key         text NOT NULL,
    content_digest   text NOT NULL,
    transfer_id      text NOT NULL,
    idempotency_key  text NOT NULL,
    reference        text NOT NULL,
    amount_minor     bigint NOT NULL,
    currency         text NOT NULL,
    fee_minor        bigint NOT NULL,
    status           text NOT NULL CHECK (status IN ('paid', 'failed', 'returned')),
    event_at         timestamptz NOT NULL,
    withdrawal_id    uuid REFERENCES withdrawals(id),
    result           text CHECK (result IN ('matched', 'amount_mismatch', 'status_mismatch', 'unknown_transfer',
                                            'returned', 'seen_before')),
    applied          text CHECK (applied IN ('completed', 'failed', 'return_credited')),
    evidence         jsonb,
    matched_at       timestamptz,
    UNIQUE (report_id, line_no)
);
CREATE INDEX settlement_lines_key ON settlement_lines (line_key);
CREATE INDEX settlement_lines_withdrawal ON settlement_lines (withdrawal_id) WHERE withdrawal_id IS NOT NULL;
CREATE INDEX settlement_lines_unmatched ON settlement_lines (report_id) WHERE result IS NULL;

CREATE TABLE settlement_exceptions (
    id               uuid PRIMARY KEY,
    kind             text NOT NULL CHECK (kind IN ('amount_mismatch', 'status_mismatch', 'unknown_transfer',
                                                   'returned', 'missing_from_report')),
    status           text NOT NULL CHECK (status IN ('open', 'resolved')),
    dedupe_key       text NOT NULL UNIQUE,
    withdrawal_id    uuid REFERENCES withdrawals(id),
    line_id          uuid REFERENCES settlement_lines(id),
    report_date      text,
    transfer_id      text,
    detail           text NOT NULL,
    evidence         jsonb NOT NULL,
    opened_at        timestamptz NOT NULL,
    resolved_at      timestamptz,
    resolved_by      uuid,
    resolution       text,
    resolution_note  text
);
CREATE INDEX settlement_exceptions_list ON settlement_exceptions (status, opened_at, id);
CREATE INDEX settlement_exceptions_withdrawal ON settlement_exceptions (withdrawal_id) WHERE withdrawal_id IS NOT NULL;

-- The daily import job is enqueued once per day: found by its correlation id (`settlement-import:<day>`).
CREATE INDEX jobs_settlement_import_idx ON jobs (correlation_id) WHERE kind = 'import_settlement';
