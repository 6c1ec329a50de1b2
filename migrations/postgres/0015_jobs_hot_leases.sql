-- Fewer index entries per payout (issue 20). `jobs_lease_idx` indexed `locked_until`, so every
-- lease extension (the check before each provider call, every heartbeat) was a non-HOT update that
-- wrote a new entry into each of the table's indexes. The lease reaper only needs the running
-- jobs, which are few (at most every worker's concurrency): an index of their ids lets it find
-- them and filter `locked_until` itself, and an update that changes only the lease is now HOT.
-- A lower fillfactor leaves room on each page for those in-page updates.
DROP INDEX jobs_lease_idx;
CREATE INDEX jobs_running_idx ON jobs (id) WHERE status = 'running';
ALTER TABLE jobs SET (fillfactor = 80);
