-- Issue 16: no decision moves money against the provider's record.
-- Every transition may carry the evidence it rested on (the provider's answer at that moment).
ALTER TABLE withdrawal_transitions ADD COLUMN evidence jsonb;

-- The two-person rule (SPEC §8.1): `complete` and `fail` at or above the approval threshold are
-- requested by one operator and applied only when a second one approves.
CREATE TABLE review_decisions (
    id                  uuid PRIMARY KEY,
    withdrawal_id       uuid NOT NULL REFERENCES withdrawals(id),
    action              text NOT NULL CHECK (action IN ('complete', 'fail')),
    provider_reference  text,
    -- The withdrawal's version the requester looked at; approval needs it unchanged.
    version             bigint NOT NULL,
    reason              text NOT NULL,
    requested_by        uuid NOT NULL REFERENCES operators(id),
    requested_at        timestamptz NOT NULL,
    -- The provider's answer when it was requested (approval asks again).
    request_evidence    jsonb NOT NULL,
    -- `superseded`: the withdrawal left review another way (reconciliation, a replay) first.
    status              text NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'superseded')),
    decided_by          uuid REFERENCES operators(id),
    decided_at          timestamptz,
    decision_reason     text,
    CHECK ((status IN ('approved', 'rejected')) = (decided_by IS NOT NULL))
);
-- At most one decision waits per withdrawal.
CREATE UNIQUE INDEX review_decisions_one_pending_idx ON review_decisions (withdrawal_id) WHERE status = 'pending';
CREATE INDEX review_decisions_status_idx ON review_decisions (status, requested_at);

-- New dead-letter category (SPEC §6): `provider_mismatch` (and `infrastructure`, named by the
-- SPEC for our own faults), and the reconciliation results a checked provider answer can give.
ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_category_check;
ALTER TABLE dead_letters ADD CONSTRAINT dead_letters_category_check CHECK (category IN (
    'bad_payload', 'dependency_rejected', 'side_effect_unknown', 'code_bug', 'retries_exhausted', 'crashed',
    'provider_mismatch', 'infrastructure'));
ALTER TABLE reconciliation_results DROP CONSTRAINT reconciliation_results_result_check;
ALTER TABLE reconciliation_results ADD CONSTRAINT reconciliation_results_result_check CHECK (result IN (
    'paid', 'failed', 'pending', 'not_found', 'unavailable', 'window_expired', 'skipped', 'mismatch', 'returned'));
