-- SQLite twin of migrations/postgres/0017_breaker_overrides_and_reports.sql.
CREATE TABLE breaker_overrides (
    breaker  TEXT PRIMARY KEY,
    mode     TEXT NOT NULL CHECK (mode IN ('force_open', 'force_closed')),
    reason   TEXT NOT NULL,
    set_by   BLOB NOT NULL REFERENCES operators(id),
    set_at   TEXT NOT NULL
);
CREATE TABLE breaker_reports (
    process_id   TEXT NOT NULL,
    breaker      TEXT NOT NULL,
    role         TEXT NOT NULL,
    host         TEXT NOT NULL,
    version      TEXT NOT NULL,
    state        TEXT NOT NULL,
    since        TEXT NOT NULL,
    reported_at  TEXT NOT NULL,
    PRIMARY KEY (process_id, breaker)
);
CREATE INDEX breaker_reports_reported_idx ON breaker_reports (reported_at);
