-- Issue 31 (SPEC §16): every attempt names the provider it went to, so reconciliation, operators
-- and (later) failover know where a payout may exist. Rows before this migration went to the one
-- provider there was, `default`; a lone PROVIDER_URL keeps that name, a PROVIDERS file names its
-- own. A new column with a constant default rewrites nothing on PostgreSQL 11+.
ALTER TABLE provider_attempts ADD COLUMN provider text NOT NULL DEFAULT 'default';
