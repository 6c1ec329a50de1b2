-- Issue 29: jobs and dead letters keyed by account. A job, its dead letter, the letter's events,
-- its place in the open set and its replay items carry the account of the withdrawal they are
-- about, are keyed (account_id, id), and reference each other by (account_id, …), so a
-- distributed PostgreSQL (Citus, distributed by account) keeps a withdrawal's jobs and letters on
-- its shard. A job about no withdrawal (the daily settlement import) belongs to the system
-- account, created here: the nil UUID, which holds no balances, keys or withdrawals.
--
-- No row is lost or changed: the new account columns are copied (job ← withdrawal, letter ← job,
-- event, open-set row and replay item ← letter), and the composite foreign keys prove they match.
-- `dead_letters (id)` keeps a plain index for operators' lookups by id alone.

INSERT INTO accounts (id, name, created_at)
VALUES ('00000000-0000-0000-0000-000000000000', 'system', now())
ON CONFLICT (id) DO NOTHING;

-- 1. The account columns, copied.
ALTER TABLE jobs ADD COLUMN account_id uuid;
ALTER TABLE dead_letters ADD COLUMN account_id uuid;
ALTER TABLE dead_letter_events ADD COLUMN account_id uuid;
ALTER TABLE open_dead_letters ADD COLUMN account_id uuid;
ALTER TABLE replay_items ADD COLUMN account_id uuid;

UPDATE jobs j SET account_id = w.account_id FROM withdrawals w WHERE w.id = j.withdrawal_id;
UPDATE jobs SET account_id = '00000000-0000-0000-0000-000000000000' WHERE account_id IS NULL;
ALTER TABLE dead_letters DISABLE TRIGGER dead_letters_immutable;
UPDATE dead_letters d SET account_id = j.account_id FROM jobs j WHERE j.id = d.job_id;
ALTER TABLE dead_letters ENABLE TRIGGER dead_letters_immutable;
UPDATE dead_letter_events e SET account_id = d.account_id FROM dead_letters d WHERE d.id = e.dead_letter_id;
UPDATE open_dead_letters o SET account_id = d.account_id FROM dead_letters d WHERE d.id = o.dead_letter_id;
UPDATE replay_items i SET account_id = d.account_id FROM dead_letters d WHERE d.id = i.dead_letter_id;

ALTER TABLE jobs ALTER COLUMN account_id SET NOT NULL;
ALTER TABLE dead_letters ALTER COLUMN account_id SET NOT NULL;
ALTER TABLE dead_letter_events ALTER COLUMN account_id SET NOT NULL;
ALTER TABLE open_dead_letters ALTER COLUMN account_id SET NOT NULL;
ALTER TABLE replay_items ALTER COLUMN account_id SET NOT NULL;

-- 2. The references between them, dropped while their keys change.
ALTER TABLE jobs DROP CONSTRAINT jobs_withdrawal_id_fkey;
ALTER TABLE jobs DROP CONSTRAINT jobs_replay_item_id_fkey;
ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_job_id_fkey;
ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_withdrawal_id_fkey;
ALTER TABLE dead_letter_events DROP CONSTRAINT dead_letter_events_dead_letter_id_fkey;
ALTER TABLE open_dead_letters DROP CONSTRAINT open_dead_letters_dead_letter_id_fkey;
ALTER TABLE replay_items DROP CONSTRAINT replay_items_dead_letter_id_fkey;

-- 3. Keys and indexes that lead with the account.
ALTER TABLE jobs DROP CONSTRAINT jobs_pkey;
ALTER TABLE jobs ADD PRIMARY KEY (account_id, id);
DROP INDEX jobs_one_live_per_withdrawal_idx;
CREATE UNIQUE INDEX jobs_one_live_per_withdrawal_idx ON jobs (account_id, withdrawal_id, kind)
    WHERE status IN ('scheduled', 'running');
DROP INDEX jobs_withdrawal_idx;
CREATE INDEX jobs_withdrawal_idx ON jobs (account_id, withdrawal_id);
DROP INDEX jobs_replay_item_idx;
CREATE INDEX jobs_replay_item_idx ON jobs (account_id, replay_item_id) WHERE replay_item_id IS NOT NULL;

ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_pkey;
ALTER TABLE dead_letters ADD PRIMARY KEY (account_id, id);
CREATE INDEX dead_letters_id_idx ON dead_letters (id);
ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_job_id_key;
ALTER TABLE dead_letters ADD CONSTRAINT dead_letters_job_key UNIQUE (account_id, job_id);
DROP INDEX dead_letters_withdrawal_idx;
CREATE INDEX dead_letters_withdrawal_idx ON dead_letters (account_id, withdrawal_id);

ALTER TABLE dead_letter_events DROP CONSTRAINT dead_letter_events_pkey;
ALTER TABLE dead_letter_events ADD PRIMARY KEY (account_id, id);
DROP INDEX dead_letter_events_dead_letter_idx;
CREATE INDEX dead_letter_events_dead_letter_idx ON dead_letter_events (account_id, dead_letter_id, at);
DROP INDEX dead_letter_events_one_close_idx;
CREATE UNIQUE INDEX dead_letter_events_one_close_idx ON dead_letter_events (account_id, dead_letter_id)
    WHERE action = 'closed';

ALTER TABLE open_dead_letters DROP CONSTRAINT open_dead_letters_pkey;
ALTER TABLE open_dead_letters ADD PRIMARY KEY (account_id, dead_letter_id);

ALTER TABLE replay_items DROP CONSTRAINT replay_items_pkey;
ALTER TABLE replay_items ADD PRIMARY KEY (account_id, id);
DROP INDEX replay_items_one_active_idx;
CREATE UNIQUE INDEX replay_items_one_active_idx ON replay_items (account_id, dead_letter_id) WHERE status = 'pending';

-- 4. The references again, by account.
ALTER TABLE jobs ADD CONSTRAINT jobs_account_fkey FOREIGN KEY (account_id) REFERENCES accounts (id);
ALTER TABLE jobs ADD CONSTRAINT jobs_withdrawal_fkey
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals (account_id, id);
ALTER TABLE jobs ADD CONSTRAINT jobs_replay_item_fkey
    FOREIGN KEY (account_id, replay_item_id) REFERENCES replay_items (account_id, id);
ALTER TABLE dead_letters ADD CONSTRAINT dead_letters_job_fkey
    FOREIGN KEY (account_id, job_id) REFERENCES jobs (account_id, id);
ALTER TABLE dead_letters ADD CONSTRAINT dead_letters_withdrawal_fkey
    FOREIGN KEY (account_id, withdrawal_id) REFERENCES withdrawals (account_id, id);
ALTER TABLE dead_letter_events ADD CONSTRAINT dead_letter_events_dead_letter_fkey
    FOREIGN KEY (account_id, dead_letter_id) REFERENCES dead_letters (account_id, id);
ALTER TABLE open_dead_letters ADD CONSTRAINT open_dead_letters_dead_letter_fkey
    FOREIGN KEY (account_id, dead_letter_id) REFERENCES dead_letters (account_id, id);
ALTER TABLE replay_items ADD CONSTRAINT replay_items_dead_letter_fkey
    FOREIGN KEY (account_id, dead_letter_id) REFERENCES dead_letters (account_id, id);
