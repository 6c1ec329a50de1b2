-- SPEC §14.3: a bank return after `paid` re-credits the customer. One `payout_returns` row per
-- withdrawal (a return is applied once), written in the same transaction as the `return` ledger
-- entry that moves the amount from paid out back to available.
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_kind_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_kind_check
    CHECK (kind IN ('funding', 'hold', 'settle', 'release', 'return'));

CREATE TABLE payout_returns (
    id             uuid PRIMARY KEY,
    withdrawal_id  uuid NOT NULL UNIQUE REFERENCES withdrawals(id),
    account_id     uuid NOT NULL REFERENCES accounts(id),
    currency       text NOT NULL,
    amount_minor   bigint NOT NULL CHECK (amount_minor > 0),
    return_code    text NOT NULL,
    returned_at    timestamptz NOT NULL,
    evidence       jsonb NOT NULL,
    recorded_at    timestamptz NOT NULL
);

CREATE FUNCTION payout_returns_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'payout_returns is append-only';
END $$;
CREATE TRIGGER payout_returns_append_only BEFORE UPDATE OR DELETE ON payout_returns
    FOR EACH ROW EXECUTE FUNCTION payout_returns_append_only();
