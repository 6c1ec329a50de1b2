-- Issue 29: the first per-account table keyed by its account. A credit's primary key becomes
-- (account_id, id), so a distributed PostgreSQL (Citus, distributed by account) can route every
-- credit to its account's shard. No row moves; nothing references a credit by its id.
ALTER TABLE account_credits DROP CONSTRAINT account_credits_pkey;
ALTER TABLE account_credits ADD PRIMARY KEY (account_id, id);
