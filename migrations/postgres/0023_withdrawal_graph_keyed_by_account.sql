-- Issue 29: the withdrawal graph keyed by account. A withdrawal's primary key becomes
-- (account_id, id), and every table that records one withdrawal's history (transitions, provider
-- attempts, reconciliation results, review decisions, ledger entries, idempotency records,
-- returns) carries the account and references the withdrawal by (account_id, withdrawal_id), so a
-- distributed PostgreSQL (Citus, distributed by account) can keep a withdrawal and its history on
-- one shard. No row is lost or changed: the new account columns are copied from the withdrawal,
-- and the composite foreign keys prove every copied account matches.
--
-- `withdrawals (id)` stays unique for now, as the target of the tables not yet keyed (jobs, dead
-- letters, settlement lines and exceptions) and for operator lookups by id alone; it replaces the
-- old (account_id, created_at, id) page index, whose work the new primary key does (ids are
-- UUIDv7, so id order is creation order), so a withdrawal keeps three index entries.

-- 1. The four history tables without an account get one, copied from their withdrawal. Two of
--    them are append-only; their guard is off only while the copy runs, inside this transaction.
ALTER TABLE withdrawal_transitions ADD COLUMN account_id uuid;
ALTER TABLE provider_attempts ADD COLUMN account_id uuid;
ALTER TABLE reconciliation_results ADD COLUMN account_id uuid;
ALTER TABLE review_decisions ADD COLUMN account_id uuid;

ALTER TABLE withdrawal_transitions DISABLE TRIGGER withdrawal_transitions_append_only;
ALTER TABLE reconciliation_results DISABLE TRIGGER reconciliation_results_append_only;
UPDATE withdrawal_transitions t SET account_id = w.account_id FROM withdrawals w WHERE w.id = t.withdrawal_id;
UPDATE provider_attempts a SET account_id = w.account_id FROM withdrawals w WHERE w.id = a.withdrawal_id;
UPDATE reconciliation_results r SET account_id = w.account_id FROM withdrawals w WHERE w.id = r.withdrawal_id;
UPDATE review_decisions d SET account_id = w.account_id FROM withdrawals w WHERE w.id = d.withdrawal_id;
ALTER TABLE withdrawal_transitions ENABLE TRIGGER withdrawal_transitions_append_only;
ALTER TABLE reconciliation_results ENABLE TRIGGER reconciliation_results_append_only;

ALTER TABLE withdrawal_transitions ALTER COLUMN account_id SET NOT NULL;
ALTER TABLE provider_attempts ALTER COLUMN account_id SET NOT NULL;
ALTER TABLE reconciliation_results ALTER COLUMN account_id SET NOT NULL;
ALTER TABLE review_decisions ALTER COLUMN account_id SET NOT NULL;

-- 2. Every reference to a withdrawal (and the ledger's to a transition) is dropped, so the keys
--    they depend on can change.
ALTER TABLE withdrawal_transitions DROP CONSTRAINT withdrawal_transitions_withdrawal_id_fkey;
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_withdrawal_id_fkey;
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_transition_id_fkey;
ALTER TABLE idempotency_records DROP CONSTRAINT idempotency_records_withdrawal_id_fkey;
ALTER TABLE provider_attempts DROP CONSTRAINT provider_attempts_withdrawal_id_fkey;
ALTER TABLE reconciliation_results DROP CONSTRAINT reconciliation_results_withdrawal_id_fkey;
ALTER TABLE review_decisions DROP CONSTRAINT review_decisions_withdrawal_id_fkey;
ALTER TABLE payout_returns DROP CONSTRAINT payout_returns_withdrawal_id_fkey;
ALTER TABLE jobs DROP CONSTRAINT jobs_withdrawal_id_fkey;
ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_withdrawal_id_fkey;
ALTER TABLE settlement_lines DROP CONSTRAINT settlement_lines_withdrawal_id_fkey;
ALTER TABLE settlement_exceptions DROP CONSTRAINT settlement_exceptions_withdrawal_id_fkey;

-- 3. The withdrawal's keys.
ALTER TABLE withdrawals DROP CONSTRAINT withdrawals_pkey;
ALTER TABLE withdrawals ADD PRIMARY KEY (account_id, id);
ALTER TABLE withdrawals ADD CONSTRAINT withdrawals_id_key UNIQUE (id);
DROP INDEX withdrawals_account_page_idx;

-- 4. Each history table's keys lead with the account.
ALTER TABLE withdrawal_transitions DROP CONSTRAINT withdrawal_transitions_pkey;
ALTER TABLE withdrawal_transitions ADD PRIMARY KEY (account_id, id);
DROP INDEX withdrawal_transitions_withdrawal_idx;
CREATE INDEX withdrawal_transitions_withdrawal_idx ON withdrawal_transitions (account_id, withdrawal_id, at);

ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_pkey;
ALTER TABLE ledger_entries ADD PRIMARY KEY (account_id, id);
DROP INDEX ledger_entries_withdrawal_idx;
CREATE INDEX ledger_entries_withdrawal_idx ON ledger_entries (account_id, withdrawal_id);

ALTER TABLE provider_attempts DROP CONSTRAINT provider_attempts_pkey;
ALTER TABLE provider_attempts ADD PRIMARY KEY (account_id, id);
ALTER TABLE provider_attempts DROP CONSTRAINT provider_attempts_withdrawal_id_attempt_no_key;
ALTER TABLE provider_attempts ADD CONSTRAINT provider_attempts_withdrawal_attempt_key
    UNIQUE (account_id, withdrawal_id, attempt_no);

ALTER TABLE reconciliation_results DROP CONSTRAINT reconciliation_results_pkey;
ALTER TABLE reconciliation_results ADD PRIMARY KEY (account_id, id);
DROP INDEX reconciliation_results_withdrawal_idx;
CREATE INDEX reconciliation_results_withdrawal_idx ON reconciliation_results (account_id, withdrawal_id, at);

ALTER TABLE review_decisions DROP CONSTRAINT review_decisions_pkey;
ALTER TABLE review_decisions ADD PRIMARY KEY (account_id, id);
DROP INDEX review_decisions_one_pending_idx;
CREATE UNIQUE INDEX review_decisions_one_pending_idx ON review_decisions (account_id, withdrawal_id)
    WHERE status = 'pending';

ALTER TABLE payout_returns DROP CONSTRAINT payout_returns_pkey;
ALTER TABLE payout_returns ADD PRIMARY KEY (account_id, id);
ALTER TABLE payout_returns DROP CONSTRAINT payout_returns_withdrawal_id_key;
ALTER TABLE payout_returns ADD CONSTRAINT payout_returns_withdrawal_key UNIQUE (account_id, withdrawal_id);

-- 5. The references again: by (account_id, withdrawal_id) from the history tables, which also
--    proves each copied or stored account is its withdrawal's; by id alone from the rest.
ALTER TABLE withdrawal_transitions ADD CONSTRAINT withdrawal_transitions_withdrawal_fkey
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals (account_id, id);
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_withdrawal_fkey
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals (account_id, id);
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_transition_fkey
    FOREIGN KEY (account_id, transition_id) REFERENCES withdrawal_transitions (account_id, id);
ALTER TABLE idempotency_records ADD CONSTRAINT idempotency_records_withdrawal_fkey
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals (account_id, id);
ALTER TABLE provider_attempts ADD CONSTRAINT provider_attempts_withdrawal_fkey
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals (account_id, id);
ALTER TABLE reconciliation_results ADD CONSTRAINT reconciliation_results_withdrawal_fkey
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals (account_id, id);
ALTER TABLE review_decisions ADD CONSTRAINT review_decisions_withdrawal_fkey
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals (account_id, id);
ALTER TABLE payout_returns ADD CONSTRAINT payout_returns_withdrawal_fkey
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals (account_id, id);
ALTER TABLE jobs ADD CONSTRAINT jobs_withdrawal_id_fkey
    FOREIGN KEY (withdrawal_id) REFERENCES withdrawals (id);
ALTER TABLE dead_letters ADD CONSTRAINT dead_letters_withdrawal_id_fkey
    FOREIGN KEY (withdrawal_id) REFERENCES withdrawals (id);
ALTER TABLE settlement_lines ADD CONSTRAINT settlement_lines_withdrawal_id_fkey
    FOREIGN KEY (withdrawal_id) REFERENCES withdrawals (id);
ALTER TABLE settlement_exceptions ADD CONSTRAINT settlement_exceptions_withdrawal_id_fkey
    FOREIGN KEY (withdrawal_id) REFERENCES withdrawals (id);
