-- SQLite twin of migrations/postgres/0006_console_sessions.sql.
CREATE TABLE console_sessions (
    id           BLOB PRIMARY KEY,
    operator_id  BLOB NOT NULL REFERENCES operators(id),
    secret_hash  BLOB NOT NULL,
    created_at   TEXT NOT NULL,
    expires_at   TEXT NOT NULL,
    ended_at     TEXT
);
CREATE INDEX console_sessions_operator_idx ON console_sessions (operator_id, created_at);
