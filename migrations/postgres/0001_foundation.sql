-- Foundation schema (issue 2): accounts, balances, ledger, withdrawals, transitions,
-- idempotency records, credentials and the jobs table. Money is BIGINT minor units; times are
-- timestamptz written by the service (never now()) so both backends store the same instants.

CREATE TABLE accounts (
    id          uuid PRIMARY KEY,
    name        text NOT NULL,
    created_at  timestamptz NOT NULL
);

CREATE TABLE api_keys (
    id           uuid PRIMARY KEY,
    account_id   uuid NOT NULL REFERENCES accounts(id),
    secret_hash  bytea NOT NULL,
    created_at   timestamptz NOT NULL,
    revoked_at   timestamptz
);
CREATE INDEX api_keys_account_idx ON api_keys (account_id);

CREATE TABLE operators (
    id           uuid PRIMARY KEY,
    name         text NOT NULL,
    role         text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    secret_hash  bytea NOT NULL,
    created_at   timestamptz NOT NULL,
    disabled_at  timestamptz
);

CREATE TABLE balances (
    account_id  uuid NOT NULL REFERENCES accounts(id),
    currency    text NOT NULL,
    available   bigint NOT NULL CHECK (available >= 0),
    held        bigint NOT NULL CHECK (held >= 0),
    paid_out    bigint NOT NULL CHECK (paid_out >= 0),
    PRIMARY KEY (account_id, currency)
);

CREATE TABLE withdrawals (
    id               uuid PRIMARY KEY,
    account_id       uuid NOT NULL REFERENCES accounts(id),
    status           text NOT NULL CHECK (status IN ('pending', 'processing', 'requires_review', 'completed', 'failed')),
    amount           bigint NOT NULL CHECK (amount > 0),
    currency         text NOT NULL,
    destination      jsonb NOT NULL,
    reference        text,
    failure_code     text,
    version          bigint NOT NULL,
    idempotency_key  text NOT NULL,
    correlation_id   text NOT NULL,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL
);
CREATE INDEX withdrawals_account_page_idx ON withdrawals (account_id, created_at DESC, id DESC);
CREATE INDEX withdrawals_status_idx ON withdrawals (status, updated_at);

CREATE TABLE withdrawal_transitions (
    id              uuid PRIMARY KEY,
    withdrawal_id   uuid NOT NULL REFERENCES withdrawals(id),
    from_status     text,
    to_status       text NOT NULL,
    actor           text NOT NULL,
    reason          text NOT NULL,
    correlation_id  text NOT NULL,
    at              timestamptz NOT NULL
);
CREATE INDEX withdrawal_transitions_withdrawal_idx ON withdrawal_transitions (withdrawal_id, at);

CREATE TABLE ledger_entries (
    id              uuid PRIMARY KEY,
    account_id      uuid NOT NULL REFERENCES accounts(id),
    currency        text NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('funding', 'hold', 'settle', 'release')),
    withdrawal_id   uuid REFERENCES withdrawals(id),
    transition_id   uuid REFERENCES withdrawal_transitions(id),
    available_delta bigint NOT NULL,
    held_delta      bigint NOT NULL,
    paid_out_delta  bigint NOT NULL,
    created_at      timestamptz NOT NULL
);
CREATE INDEX ledger_entries_account_idx ON ledger_entries (account_id, currency);
CREATE INDEX ledger_entries_withdrawal_idx ON ledger_entries (withdrawal_id);

CREATE TABLE idempotency_records (
    account_id       uuid NOT NULL REFERENCES accounts(id),
    key              text NOT NULL,
    fingerprint      bytea NOT NULL,
    state            text NOT NULL CHECK (state IN ('in_progress', 'completed')),
    response_status  bigint,
    response_body    bytea,
    withdrawal_id    uuid REFERENCES withdrawals(id),
    locked_at        timestamptz NOT NULL,
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (account_id, key)
);
CREATE INDEX idempotency_records_expiry_idx ON idempotency_records (expires_at);

CREATE TABLE jobs (
    id                uuid PRIMARY KEY,
    queue             text NOT NULL,
    kind              text NOT NULL,
    payload           bytea NOT NULL,
    payload_version   bigint NOT NULL,
    status            text NOT NULL CHECK (status IN ('scheduled', 'running', 'succeeded', 'dead')),
    attempts          bigint NOT NULL DEFAULT 0,
    receives          bigint NOT NULL DEFAULT 0,
    run_at            timestamptz NOT NULL,
    first_attempt_at  timestamptz,
    locked_by         text,
    locked_until      timestamptz,
    lease_token       uuid,
    last_error        text,
    correlation_id    text NOT NULL,
    withdrawal_id     uuid REFERENCES withdrawals(id),
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL
);
CREATE INDEX jobs_claim_idx ON jobs (queue, run_at) WHERE status = 'scheduled';
CREATE INDEX jobs_lease_idx ON jobs (locked_until) WHERE status = 'running';
CREATE INDEX jobs_withdrawal_idx ON jobs (withdrawal_id);

-- History is evidence: transitions and ledger entries are append-only, enforced here too.
CREATE FUNCTION forbid_history_rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
END;
$$;
CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON ledger_entries
    FOR EACH ROW EXECUTE FUNCTION forbid_history_rewrite();
CREATE TRIGGER withdrawal_transitions_append_only BEFORE UPDATE OR DELETE ON withdrawal_transitions
    FOR EACH ROW EXECUTE FUNCTION forbid_history_rewrite();
