-- Issue 29: the first per-account table keyed by its account. A credit's primary key becomes
-- (account_id, id). SQLite cannot change a primary key in place: the table is rebuilt with the
-- same columns and rows, and its append-only and integer-money triggers are created again.
CREATE TABLE account_credits_keyed (
    id               BLOB NOT NULL,
    account_id       BLOB NOT NULL REFERENCES accounts(id),
    idempotency_key  TEXT NOT NULL,
    fingerprint      BLOB NOT NULL,
    currency         TEXT NOT NULL,
    amount_minor     INTEGER NOT NULL CHECK (amount_minor > 0),
    reason           TEXT NOT NULL,
    actor            TEXT NOT NULL,
    response_body    BLOB NOT NULL,
    created_at       TEXT NOT NULL,
    PRIMARY KEY (account_id, id),
    UNIQUE (account_id, idempotency_key)
);
INSERT INTO account_credits_keyed (id, account_id, idempotency_key, fingerprint, currency, amount_minor, reason,
                                   actor, response_body, created_at)
SELECT id, account_id, idempotency_key, fingerprint, currency, amount_minor, reason, actor, response_body, created_at
FROM account_credits;
DROP TABLE account_credits;
ALTER TABLE account_credits_keyed RENAME TO account_credits;
CREATE TRIGGER account_credits_no_update BEFORE UPDATE ON account_credits
BEGIN SELECT RAISE(ABORT, 'account_credits is append-only'); END;
CREATE TRIGGER account_credits_no_delete BEFORE DELETE ON account_credits
BEGIN SELECT RAISE(ABORT, 'account_credits is append-only'); END;
CREATE TRIGGER account_credits_amount_is_integer BEFORE INSERT ON account_credits
WHEN typeof(NEW.amount_minor) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'credit amounts are 64-bit integer minor units'); END;
