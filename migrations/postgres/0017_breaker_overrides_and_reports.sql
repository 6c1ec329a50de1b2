-- SPEC §8: breaker overrides and the cluster-wide breaker view (issue 21).
-- An admin's override of one breaker, obeyed by every process within one poll interval; at most
-- one per breaker (release deletes it; the audit log keeps the history).
CREATE TABLE breaker_overrides (
    breaker  text PRIMARY KEY,
    mode     text NOT NULL CHECK (mode IN ('force_open', 'force_closed')),
    reason   text NOT NULL,
    set_by   uuid NOT NULL REFERENCES operators(id),
    set_at   timestamptz NOT NULL
);
-- What each process's breaker says, reported by the process every poll interval: the view
-- operators read covers API and workers alike. Rows of processes that stopped reporting age out.
CREATE TABLE breaker_reports (
    process_id   text NOT NULL,
    breaker      text NOT NULL,
    role         text NOT NULL,
    host         text NOT NULL,
    version      text NOT NULL,
    state        text NOT NULL,
    since        timestamptz NOT NULL,
    reported_at  timestamptz NOT NULL,
    PRIMARY KEY (process_id, breaker)
);
CREATE INDEX breaker_reports_reported_idx ON breaker_reports (reported_at);
