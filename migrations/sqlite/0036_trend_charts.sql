-- Trend charts (issue 33): the console's per-bucket counts of completed and failed withdrawals and
-- of moves into and out of review read the window's transitions through this index. Partial: only
-- a withdrawal's final move and its moves into and out of review are in it — about one entry per
-- withdrawal on the payout path (its `completed` or `failed` row), two more for one that went
-- through review. Transitions are append-only, so an entry is written once and never moved.
-- Covering (to_status, from_status): the chart reads the index alone. The predicate is written as
-- `storage::trends` writes its filter, so both planners match it.
CREATE INDEX withdrawal_transitions_trend_idx ON withdrawal_transitions (at, to_status, from_status)
    WHERE (to_status IN ('completed', 'failed', 'requires_review') OR from_status = 'requires_review');

-- The chart's withdrawals created per bucket read `withdrawals_id_idx` by id range (ids are
-- UUIDv7, so a window's withdrawals lie in one range): carrying `created_at` in it lets the count
-- come from the index alone, instead of a table lookup per withdrawal of the window. No new
-- writes: SQLite rewrites an index entry only when its columns change, and neither ever does; each
-- entry grows by the 27 characters of the time.
DROP INDEX withdrawals_id_idx;
CREATE INDEX withdrawals_id_idx ON withdrawals (id, created_at);

-- Dead-letter arrivals per bucket and category read `dead_letters_failed_at_idx` by time: carrying
-- the category lets them come from the index alone. Dead letters are written once and never
-- updated, off the payout path: each entry grows by the category's text.
DROP INDEX dead_letters_failed_at_idx;
CREATE INDEX dead_letters_failed_at_idx ON dead_letters (failed_at, category);
