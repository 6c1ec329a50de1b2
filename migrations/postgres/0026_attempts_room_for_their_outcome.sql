-- Issue 29: an attempt row is written before the provider call and updated once with what came
-- back (outcome, times, status, transfer id). Migration 0023 made the row 16 bytes wider (its
-- account), and the bench saw fewer of those updates stay on their page as heap-only tuples
-- (HOT: 0.89 → 0.83 per withdrawal, each miss two more index entries). A lower fillfactor leaves
-- room on each page for the update, as 0015 does for jobs. It applies to pages written from now
-- on; existing pages keep their fill.
ALTER TABLE provider_attempts SET (fillfactor = 85);
