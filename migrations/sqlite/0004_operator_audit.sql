-- SQLite twin of migrations/postgres/0004_operator_audit.sql.
CREATE TABLE audit_log (
    id             BLOB PRIMARY KEY,
    operator_id    BLOB NOT NULL REFERENCES operators(id),
    operator_name  TEXT NOT NULL,
    role           TEXT NOT NULL,
    action         TEXT NOT NULL,
    target_type    TEXT NOT NULL,
    target_id      TEXT NOT NULL,
    reason         TEXT NOT NULL,
    parameters     TEXT NOT NULL,
    result         TEXT NOT NULL,
    at             TEXT NOT NULL
);
CREATE INDEX audit_log_at_idx ON audit_log (at DESC, id DESC);
CREATE INDEX audit_log_target_idx ON audit_log (target_type, target_id);
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;

CREATE UNIQUE INDEX dead_letter_events_one_close_idx ON dead_letter_events (dead_letter_id) WHERE action = 'closed';
