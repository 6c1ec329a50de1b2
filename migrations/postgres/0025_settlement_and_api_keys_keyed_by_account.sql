-- Issue 29: the last per-account tables keyed by account — settlement lines and exceptions, and
-- API keys — after which no table references a withdrawal by its id alone, so `withdrawals (id)`
-- stops being unique (a plain index serves lookups by id).
--
-- A settlement line belongs to the account of the withdrawal its idempotency key names (the
-- service resolves it at import; here, from the withdrawal it was matched to, else the one its key
-- names), or to the system account when it names none of ours. An exception belongs to its
-- withdrawal's account, else its line's, else the system account. No row is lost or changed.

-- 1. The account columns, copied.
ALTER TABLE settlement_lines ADD COLUMN account_id uuid;
ALTER TABLE settlement_exceptions ADD COLUMN account_id uuid;

UPDATE settlement_lines l SET account_id = w.account_id FROM withdrawals w WHERE w.id = l.withdrawal_id;
UPDATE settlement_lines l SET account_id = w.account_id FROM withdrawals w
 WHERE l.account_id IS NULL AND replace(w.id::text, '-', '') = lower(replace(l.idempotency_key, '-', ''));
UPDATE settlement_lines SET account_id = '00000000-0000-0000-0000-000000000000' WHERE account_id IS NULL;

UPDATE settlement_exceptions e SET account_id = w.account_id FROM withdrawals w WHERE w.id = e.withdrawal_id;
UPDATE settlement_exceptions e SET account_id = l.account_id FROM settlement_lines l
 WHERE e.account_id IS NULL AND l.id = e.line_id;
UPDATE settlement_exceptions SET account_id = '00000000-0000-0000-0000-000000000000' WHERE account_id IS NULL;

ALTER TABLE settlement_lines ALTER COLUMN account_id SET NOT NULL;
ALTER TABLE settlement_exceptions ALTER COLUMN account_id SET NOT NULL;

-- 2. References dropped while their keys change.
ALTER TABLE settlement_lines DROP CONSTRAINT settlement_lines_withdrawal_id_fkey;
ALTER TABLE settlement_exceptions DROP CONSTRAINT settlement_exceptions_withdrawal_id_fkey;
ALTER TABLE settlement_exceptions DROP CONSTRAINT settlement_exceptions_line_id_fkey;

-- 3. Keys and indexes that lead with the account.
ALTER TABLE settlement_lines DROP CONSTRAINT settlement_lines_pkey;
ALTER TABLE settlement_lines ADD PRIMARY KEY (account_id, id);
ALTER TABLE settlement_lines DROP CONSTRAINT settlement_lines_report_id_line_no_key;
ALTER TABLE settlement_lines ADD CONSTRAINT settlement_lines_report_line_key UNIQUE (account_id, report_id, line_no);
DROP INDEX settlement_lines_withdrawal;
CREATE INDEX settlement_lines_withdrawal ON settlement_lines (account_id, withdrawal_id) WHERE withdrawal_id IS NOT NULL;

ALTER TABLE settlement_exceptions DROP CONSTRAINT settlement_exceptions_pkey;
ALTER TABLE settlement_exceptions ADD PRIMARY KEY (account_id, id);
CREATE INDEX settlement_exceptions_id_idx ON settlement_exceptions (id);
ALTER TABLE settlement_exceptions DROP CONSTRAINT settlement_exceptions_dedupe_key_key;
ALTER TABLE settlement_exceptions ADD CONSTRAINT settlement_exceptions_dedupe_key UNIQUE (account_id, dedupe_key);
DROP INDEX settlement_exceptions_withdrawal;
CREATE INDEX settlement_exceptions_withdrawal ON settlement_exceptions (account_id, withdrawal_id)
    WHERE withdrawal_id IS NOT NULL;

-- API keys: the key's account leads its primary key (which also serves an account's key list);
-- authentication reads a key by its id alone through a plain index.
ALTER TABLE api_keys DROP CONSTRAINT api_keys_pkey;
ALTER TABLE api_keys ADD PRIMARY KEY (account_id, id);
DROP INDEX api_keys_account_idx;
CREATE INDEX api_keys_id_idx ON api_keys (id);

-- 4. The references again, by account.
ALTER TABLE settlement_lines ADD CONSTRAINT settlement_lines_account_fkey FOREIGN KEY (account_id) REFERENCES accounts (id);
ALTER TABLE settlement_lines ADD CONSTRAINT settlement_lines_withdrawal_fkey
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals (account_id, id);
ALTER TABLE settlement_exceptions ADD CONSTRAINT settlement_exceptions_withdrawal_fkey
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals (account_id, id);
ALTER TABLE settlement_exceptions ADD CONSTRAINT settlement_exceptions_line_fkey
    FOREIGN KEY (account_id, line_id) REFERENCES settlement_lines (account_id, id);

-- 5. Nothing references a withdrawal by its id alone any more.
ALTER TABLE withdrawals DROP CONSTRAINT withdrawals_id_key;
CREATE INDEX withdrawals_id_idx ON withdrawals (id);
