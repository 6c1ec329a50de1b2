-- Operator surface (SPEC §8): the append-only audit log of every operator action.
CREATE TABLE audit_log (
    id             uuid PRIMARY KEY,
    operator_id    uuid NOT NULL REFERENCES operators(id),
    operator_name  text NOT NULL,
    role           text NOT NULL,
    action         text NOT NULL,
    target_type    text NOT NULL,
    target_id      text NOT NULL,
    reason         text NOT NULL,
    parameters     jsonb NOT NULL,
    result         text NOT NULL,
    at             timestamptz NOT NULL
);
CREATE INDEX audit_log_at_idx ON audit_log (at DESC, id DESC);
CREATE INDEX audit_log_target_idx ON audit_log (target_type, target_id);
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION forbid_history_rewrite();

-- One close per dead letter: a second close is refused, not duplicated.
CREATE UNIQUE INDEX dead_letter_events_one_close_idx ON dead_letter_events (dead_letter_id) WHERE action = 'closed';
