-- Issue 31 (SPEC §16): a dead letter names the provider its withdrawal's latest attempt went to,
-- where its money may be. NULL for a job that never reached a provider and for letters written
-- before providers were named (no row is rewritten: dead letters are immutable).
ALTER TABLE dead_letters ADD COLUMN provider text;
