-- Foundation schema (issue 2), the SQLite twin of migrations/postgres/0001_foundation.sql.
-- UUIDs are 16-byte BLOBs, times fixed-width UTC text (sortable), money INTEGER minor units.

CREATE TABLE accounts (
    id          BLOB PRIMARY KEY,
    name        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);

CREATE TABLE api_keys (
    id           BLOB PRIMARY KEY,
    account_id   BLOB NOT NULL REFERENCES accounts(id),
    secret_hash  BLOB NOT NULL,
    created_at   TEXT NOT NULL,
    revoked_at   TEXT
);
CREATE INDEX api_keys_account_idx ON api_keys (account_id);

CREATE TABLE operators (
    id           BLOB PRIMARY KEY,
    name         TEXT NOT NULL,
    role         TEXT NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    secret_hash  BLOB NOT NULL,
    created_at   TEXT NOT NULL,
    disabled_at  TEXT
);

CREATE TABLE balances (
    account_id  BLOB NOT NULL REFERENCES accounts(id),
    currency    TEXT NOT NULL,
    available   INTEGER NOT NULL CHECK (available >= 0),
    held        INTEGER NOT NULL CHECK (held >= 0),
    paid_out    INTEGER NOT NULL CHECK (paid_out >= 0),
    PRIMARY KEY (account_id, currency)
);

CREATE TABLE withdrawals (
    id               BLOB PRIMARY KEY,
    account_id       BLOB NOT NULL REFERENCES accounts(id),
    status           TEXT NOT NULL CHECK (status IN ('pending', 'processing', 'requires_review', 'completed', 'failed')),
    amount           INTEGER NOT NULL CHECK (amount > 0),
    currency         TEXT NOT NULL,
    destination      TEXT NOT NULL,
    reference        TEXT,
    failure_code     TEXT,
    version          INTEGER NOT NULL,
    idempotency_key  TEXT NOT NULL,
    correlation_id   TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX withdrawals_account_page_idx ON withdrawals (account_id, created_at DESC, id DESC);
CREATE INDEX withdrawals_status_idx ON withdrawals (status, updated_at);

CREATE TABLE withdrawal_transitions (
    id              BLOB PRIMARY KEY,
    withdrawal_id   BLOB NOT NULL REFERENCES withdrawals(id),
    from_status     TEXT,
    to_status       TEXT NOT NULL,
    actor           TEXT NOT NULL,
    reason          TEXT NOT NULL,
    correlation_id  TEXT NOT NULL,
    at              TEXT NOT NULL
);
CREATE INDEX withdrawal_transitions_withdrawal_idx ON withdrawal_transitions (withdrawal_id, at);

CREATE TABLE ledger_entries (
    id              BLOB PRIMARY KEY,
    account_id      BLOB NOT NULL REFERENCES accounts(id),
    currency        TEXT NOT NULL,
    kind            TEXT NOT NULL CHECK (kind IN ('funding', 'hold', 'settle', 'release')),
    withdrawal_id   BLOB REFERENCES withdrawals(id),
    transition_id   BLOB REFERENCES withdrawal_transitions(id),
    available_delta INTEGER NOT NULL,
    held_delta      INTEGER NOT NULL,
    paid_out_delta  INTEGER NOT NULL,
    created_at      TEXT NOT NULL
);
CREATE INDEX ledger_entries_account_idx ON ledger_entries (account_id, currency);
CREATE INDEX ledger_entries_withdrawal_idx ON ledger_entries (withdrawal_id);

CREATE TABLE idempotency_records (
    account_id       BLOB NOT NULL REFERENCES accounts(id),
    key              TEXT NOT NULL,
    fingerprint      BLOB NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('in_progress', 'completed')),
    response_status  INTEGER,
    response_body    BLOB,
    withdrawal_id    BLOB REFERENCES withdrawals(id),
    locked_at        TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    expires_at       TEXT NOT NULL,
    PRIMARY KEY (account_id, key)
);
CREATE INDEX idempotency_records_expiry_idx ON idempotency_records (expires_at);

CREATE TABLE jobs (
    id                BLOB PRIMARY KEY,
    queue             TEXT NOT NULL,
    kind              TEXT NOT NULL,
    payload           BLOB NOT NULL,
    payload_version   INTEGER NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('scheduled', 'running', 'succeeded', 'dead')),
    attempts          INTEGER NOT NULL DEFAULT 0,
    receives          INTEGER NOT NULL DEFAULT 0,
    run_at            TEXT NOT NULL,
    first_attempt_at  TEXT,
    locked_by         TEXT,
    locked_until      TEXT,
    lease_token       BLOB,
    last_error        TEXT,
    correlation_id    TEXT NOT NULL,
    withdrawal_id     BLOB REFERENCES withdrawals(id),
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL
);
CREATE INDEX jobs_claim_idx ON jobs (queue, run_at) WHERE status = 'scheduled';
CREATE INDEX jobs_lease_idx ON jobs (locked_until) WHERE status = 'running';
CREATE INDEX jobs_withdrawal_idx ON jobs (withdrawal_id);

-- History is evidence: transitions and ledger entries are append-only, enforced here too.
CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries
BEGIN SELECT RAISE(ABORT, 'ledger_entries is append-only'); END;
CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries
BEGIN SELECT RAISE(ABORT, 'ledger_entries is append-only'); END;
CREATE TRIGGER withdrawal_transitions_no_update BEFORE UPDATE ON withdrawal_transitions
BEGIN SELECT RAISE(ABORT, 'withdrawal_transitions is append-only'); END;
CREATE TRIGGER withdrawal_transitions_no_delete BEFORE DELETE ON withdrawal_transitions
BEGIN SELECT RAISE(ABORT, 'withdrawal_transitions is append-only'); END;
