-- SQLite twin of migrations/postgres/0015_jobs_hot_leases.sql (SQLite has no HOT updates or
-- fillfactor; the index is the same so both backends plan the reaper alike).
DROP INDEX jobs_lease_idx;
CREATE INDEX jobs_running_idx ON jobs (id) WHERE status = 'running';
