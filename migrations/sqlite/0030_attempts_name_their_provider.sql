-- SQLite twin of migrations/postgres/0030_attempts_name_their_provider.sql (issue 31): every
-- attempt names the provider it went to; earlier rows went to `default`.
ALTER TABLE provider_attempts ADD COLUMN provider TEXT NOT NULL DEFAULT 'default';
