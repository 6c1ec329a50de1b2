-- SQLite twin of migrations/postgres/0010_credential_lifecycle.sql.
ALTER TABLE api_keys ADD COLUMN label TEXT;
ALTER TABLE api_keys ADD COLUMN last_used_at TEXT;
ALTER TABLE api_keys ADD COLUMN revoked_reason TEXT;

ALTER TABLE operators ADD COLUMN disabled_reason TEXT;
ALTER TABLE operators ADD COLUMN token_rotated_at TEXT;
