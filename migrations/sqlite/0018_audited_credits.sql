-- Issue 27: money enters only through an audited door (SPEC §1.2, §8). SQLite twin of
-- migrations/postgres/0018_audited_credits.sql.
--
-- 1. The `treasury` role. SQLite cannot alter a CHECK, so the column is replaced as in 0012: a
--    new column with the wider CHECK, filled from the old one, the old dropped, the new renamed.
ALTER TABLE operators ADD COLUMN role_v2 TEXT NOT NULL DEFAULT 'viewer'
    CHECK (role_v2 IN ('viewer', 'operator', 'treasury', 'admin'));
UPDATE operators SET role_v2 = role;
ALTER TABLE operators DROP COLUMN role;
ALTER TABLE operators RENAME COLUMN role_v2 TO role;

-- 2. A funding entry names who put the money in: `operator:<id>` or `local:<os user>`. Entries
--    written before this migration have none; every new funding entry must.
ALTER TABLE ledger_entries ADD COLUMN actor TEXT;
CREATE TRIGGER ledger_entries_funding_names_its_actor BEFORE INSERT ON ledger_entries
WHEN NEW.kind = 'funding' AND NEW.actor IS NULL
BEGIN SELECT RAISE(ABORT, 'a funding ledger entry must name its actor'); END;

-- 3. Each credit, once per (account, Idempotency-Key), with the answer it gave: a replay answers
--    the same, a reused key with another body is refused. Kept forever (no expiry): a credit
--    retried however late must never count twice.
CREATE TABLE account_credits (
    id               BLOB PRIMARY KEY,
    account_id       BLOB NOT NULL REFERENCES accounts(id),
    idempotency_key  TEXT NOT NULL,
    fingerprint      BLOB NOT NULL,
    currency         TEXT NOT NULL,
    amount_minor     INTEGER NOT NULL CHECK (amount_minor > 0),
    reason           TEXT NOT NULL,
    actor            TEXT NOT NULL,
    response_body    BLOB NOT NULL,
    created_at       TEXT NOT NULL,
    UNIQUE (account_id, idempotency_key)
);
CREATE TRIGGER account_credits_no_update BEFORE UPDATE ON account_credits
BEGIN SELECT RAISE(ABORT, 'account_credits is append-only'); END;
CREATE TRIGGER account_credits_no_delete BEFORE DELETE ON account_credits
BEGIN SELECT RAISE(ABORT, 'account_credits is append-only'); END;

-- 4. No money column may silently become REAL. SQLite turns an integer sum past 64 bits into a
--    REAL and an INTEGER column keeps it: two credits of 92 233 720 368 547 758.00 made a balance
--    of 1.84467440737096e+19. These triggers refuse any non-integer money value, and a balance
--    whose total (available + held + paid_out, the funded amount) no longer fits 64 bits. The
--    application checks first and answers `balance_overflow`; this is the floor under it.
CREATE TRIGGER balances_money_is_integer_on_insert BEFORE INSERT ON balances
WHEN typeof(NEW.available) <> 'integer' OR typeof(NEW.held) <> 'integer' OR typeof(NEW.paid_out) <> 'integer'
  OR typeof(NEW.available + NEW.held + NEW.paid_out) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'balance_overflow: balances are 64-bit integer minor units'); END;
CREATE TRIGGER balances_money_is_integer_on_update BEFORE UPDATE ON balances
WHEN typeof(NEW.available) <> 'integer' OR typeof(NEW.held) <> 'integer' OR typeof(NEW.paid_out) <> 'integer'
  OR typeof(NEW.available + NEW.held + NEW.paid_out) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'balance_overflow: balances are 64-bit integer minor units'); END;
CREATE TRIGGER ledger_entries_money_is_integer BEFORE INSERT ON ledger_entries
WHEN typeof(NEW.available_delta) <> 'integer' OR typeof(NEW.held_delta) <> 'integer'
  OR typeof(NEW.paid_out_delta) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'ledger entries are 64-bit integer minor units'); END;
CREATE TRIGGER withdrawals_amount_is_integer BEFORE INSERT ON withdrawals
WHEN typeof(NEW.amount) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'withdrawal amounts are 64-bit integer minor units'); END;
CREATE TRIGGER payout_returns_amount_is_integer BEFORE INSERT ON payout_returns
WHEN typeof(NEW.amount_minor) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'return amounts are 64-bit integer minor units'); END;
CREATE TRIGGER settlement_lines_money_is_integer BEFORE INSERT ON settlement_lines
WHEN typeof(NEW.amount_minor) <> 'integer' OR typeof(NEW.fee_minor) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'settlement amounts are 64-bit integer minor units'); END;
CREATE TRIGGER account_credits_amount_is_integer BEFORE INSERT ON account_credits
WHEN typeof(NEW.amount_minor) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'credit amounts are 64-bit integer minor units'); END;
