-- Issue 27: a settlement report is imported by a durable job, never inside a request. The upload
-- stores the report's bytes here with its job (one transaction) and answers 202 with this row's
-- id; the job (`import_settlement`, payload v2 naming this row) stores the report, matches its
-- lines and, in its final transaction, marks the row `done` with its summary beside the
-- `settlement.import` audit row and the job's own completion. A job that ran before (crashed,
-- killed, retried) redoes only what is not done: the report is stored once per digest and each
-- line is decided once (`result IS NULL`), so a re-run duplicates nothing.
CREATE TABLE settlement_imports (
    id            uuid PRIMARY KEY,
    state         text NOT NULL CHECK (state IN ('queued', 'running', 'done', 'failed')),
    report_date   text NOT NULL,
    source        text NOT NULL CHECK (source IN ('provider', 'file')),
    report        bytea NOT NULL,
    digest        text NOT NULL,
    line_count    integer NOT NULL,
    requested_by  uuid NOT NULL,
    -- The `settlement.import` audit row the operator's request prepared, inserted by the job's
    -- final transaction with the outcome filled in.
    audit         jsonb NOT NULL,
    summary       jsonb,
    error         text,
    created_at    timestamptz NOT NULL,
    finished_at   timestamptz
);

CREATE INDEX settlement_imports_by_created ON settlement_imports (created_at);
