-- SQLite twin of migrations/postgres/0009_provider_evidence_and_review_decisions.sql.
ALTER TABLE withdrawal_transitions ADD COLUMN evidence TEXT;

CREATE TABLE review_decisions (
    id                  BLOB PRIMARY KEY,
    withdrawal_id       BLOB NOT NULL REFERENCES withdrawals(id),
    action              TEXT NOT NULL CHECK (action IN ('complete', 'fail')),
    provider_reference  TEXT,
    version             INTEGER NOT NULL,
    reason              TEXT NOT NULL,
    requested_by        BLOB NOT NULL REFERENCES operators(id),
    requested_at        TEXT NOT NULL,
    request_evidence    TEXT NOT NULL,
    status              TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected')),
    decided_by          BLOB REFERENCES operators(id),
    decided_at          TEXT,
    decision_reason     TEXT,
    CHECK ((status = 'pending') = (decided_by IS NULL))
);
CREATE UNIQUE INDEX review_decisions_one_pending_idx ON review_decisions (withdrawal_id) WHERE status = 'pending';
CREATE INDEX review_decisions_status_idx ON review_decisions (status, requested_at);
