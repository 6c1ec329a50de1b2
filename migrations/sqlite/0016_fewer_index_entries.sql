-- SQLite twin of migrations/postgres/0016_fewer_index_entries.sql.
-- Fewer index entries per payout (issue 20). The bench's per-table counters showed every jobs
-- row version (insert, claim, finish: three per payout) writing into jobs_replay_item_idx,
-- although only replayed jobs carry a replay item (the index stays for the foreign key's
-- checks); and provider_attempts_job_idx served the foreign key to jobs that 0014 dropped
-- (no query reads attempts by job). The first becomes partial, the second goes.
DROP INDEX jobs_replay_item_idx;
CREATE INDEX jobs_replay_item_idx ON jobs (replay_item_id) WHERE replay_item_id IS NOT NULL;
DROP INDEX provider_attempts_job_idx;
