-- Credential lifecycle (issue 17): several labelled API keys per account for rotation, revoked
-- with a reason; operators disabled with a reason and their tokens rotated. Secrets stay hashed.
ALTER TABLE api_keys
    ADD COLUMN label          text,
    ADD COLUMN last_used_at   timestamptz,
    ADD COLUMN revoked_reason text;

ALTER TABLE operators
    ADD COLUMN disabled_reason  text,
    ADD COLUMN token_rotated_at timestamptz;
