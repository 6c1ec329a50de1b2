-- Issue 27: money enters only through an audited door (SPEC §1.2, §8).

-- 1. The `treasury` role.
ALTER TABLE operators DROP CONSTRAINT operators_role_check;
ALTER TABLE operators ADD CONSTRAINT operators_role_check
    CHECK (role IN ('viewer', 'operator', 'treasury', 'admin'));

-- 2. A funding entry names who put the money in: `operator:<id>` or `local:<os user>`. Entries
--    written before this migration have none (NOT VALID: only new rows are checked).
ALTER TABLE ledger_entries ADD COLUMN actor text;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_funding_names_its_actor
    CHECK (kind <> 'funding' OR actor IS NOT NULL) NOT VALID;

-- 3. Each credit, once per (account, Idempotency-Key), with the answer it gave: a replay answers
--    the same, a reused key with another body is refused. Kept forever (no expiry): a credit
--    retried however late must never count twice.
CREATE TABLE account_credits (
    id               uuid PRIMARY KEY,
    account_id       uuid NOT NULL REFERENCES accounts(id),
    idempotency_key  text NOT NULL,
    fingerprint      bytea NOT NULL,
    currency         text NOT NULL,
    amount_minor     bigint NOT NULL CHECK (amount_minor > 0),
    reason           text NOT NULL,
    actor            text NOT NULL,
    response_body    bytea NOT NULL,
    created_at       timestamptz NOT NULL,
    UNIQUE (account_id, idempotency_key)
);
CREATE FUNCTION account_credits_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'account_credits is append-only';
END $$;
CREATE TRIGGER account_credits_append_only BEFORE UPDATE OR DELETE ON account_credits
    FOR EACH ROW EXECUTE FUNCTION account_credits_append_only();

-- 4. A balance's total (available + held + paid_out, what was funded) fits 64 bits, so the
--    invariant's sum never overflows. The application checks first and answers
--    `balance_overflow`; this is the floor under it. NOT VALID: a row corrupted before this
--    migration is reported by `ledger verify`, not a failed migration.
ALTER TABLE balances ADD CONSTRAINT balances_total_fits_64_bits
    CHECK (available::numeric + held + paid_out <= 9223372036854775807) NOT VALID;
