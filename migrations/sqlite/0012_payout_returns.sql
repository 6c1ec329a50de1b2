-- SQLite twin of migrations/postgres/0012_payout_returns.sql.
-- The ledger's `kind` CHECK gains `return`. SQLite cannot alter a CHECK, so the column is replaced
-- as in 0009: a new column with the wider CHECK, filled from the old one while the append-only
-- triggers are lifted for that one copy, the old column dropped and the new one renamed.
DROP TRIGGER ledger_entries_no_update;
DROP TRIGGER ledger_entries_no_delete;
ALTER TABLE ledger_entries ADD COLUMN kind_v2 TEXT NOT NULL DEFAULT 'funding'
    CHECK (kind_v2 IN ('funding', 'hold', 'settle', 'release', 'return'));
UPDATE ledger_entries SET kind_v2 = kind;
ALTER TABLE ledger_entries DROP COLUMN kind;
ALTER TABLE ledger_entries RENAME COLUMN kind_v2 TO kind;
CREATE TRIGGER ledger_entries_no_update BEFORE UPDATE ON ledger_entries
BEGIN SELECT RAISE(ABORT, 'ledger_entries is append-only'); END;
CREATE TRIGGER ledger_entries_no_delete BEFORE DELETE ON ledger_entries
BEGIN SELECT RAISE(ABORT, 'ledger_entries is append-only'); END;

CREATE TABLE payout_returns (
    id             BLOB PRIMARY KEY,
    withdrawal_id  BLOB NOT NULL UNIQUE REFERENCES withdrawals(id),
    account_id     BLOB NOT NULL REFERENCES accounts(id),
    currency       TEXT NOT NULL,
    amount_minor   INTEGER NOT NULL CHECK (amount_minor > 0),
    return_code    TEXT NOT NULL,
    returned_at    TEXT NOT NULL,
    evidence       TEXT NOT NULL,
    recorded_at    TEXT NOT NULL
);
CREATE TRIGGER payout_returns_no_update BEFORE UPDATE ON payout_returns
BEGIN SELECT RAISE(ABORT, 'payout_returns is append-only'); END;
CREATE TRIGGER payout_returns_no_delete BEFORE DELETE ON payout_returns
BEGIN SELECT RAISE(ABORT, 'payout_returns is append-only'); END;
