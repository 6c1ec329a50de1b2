-- Retention (SPEC §5): succeeded jobs are pruned after JOB_RETENTION_DAYS. The evidence rows that
-- name a job (provider attempts, reconciliation results, replay items) outlive it, so they keep
-- its id as history, not as a foreign key. Dead letters keep theirs: a dead-lettered job is never
-- pruned.
ALTER TABLE provider_attempts DROP CONSTRAINT provider_attempts_job_id_fkey;
ALTER TABLE reconciliation_results DROP CONSTRAINT reconciliation_results_job_id_fkey;
ALTER TABLE reconciliation_results DROP CONSTRAINT reconciliation_results_follow_up_job_id_fkey;
ALTER TABLE replay_items DROP CONSTRAINT replay_items_job_id_fkey;

-- A submit whose transfer differs from the withdrawal records its attempt as `mismatch` (SPEC §4);
-- the outcome check did not allow it, so that write failed and the run fell back to reconciliation.
ALTER TABLE provider_attempts DROP CONSTRAINT provider_attempts_outcome_check;
ALTER TABLE provider_attempts ADD CONSTRAINT provider_attempts_outcome_check
    CHECK (outcome IN ('paid', 'pending', 'failed', 'retryable', 'unknown', 'permanent', 'conflict', 'mismatch'));
