-- Operator console sessions (issue 9): a signed-in browser holds `wds_<id>_<secret>` in an
-- HttpOnly cookie; only the SHA-256 of the secret is stored. Sign-out or expiry ends a session;
-- rows are kept (who was signed in when is evidence) and swept by age.
CREATE TABLE console_sessions (
    id           uuid PRIMARY KEY,
    operator_id  uuid NOT NULL REFERENCES operators(id),
    secret_hash  bytea NOT NULL,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    ended_at     timestamptz
);
CREATE INDEX console_sessions_operator_idx ON console_sessions (operator_id, created_at);
