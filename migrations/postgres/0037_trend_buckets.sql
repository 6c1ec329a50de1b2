-- Sealed trend buckets (issue 33): the console's trend charts count a closed bucket once and keep
-- its counts here, so a window reads its closed buckets' few rows and counts only its open tail
-- (`storage::trends`). Per bucket: a `sealed` marker (n = 0) and a row per series and key with a
-- nonzero count — `created`; `moved` (a = from_status or '', b = to_status); `dead_letter`
-- (a = category). Global and local (no account; a cache of counts across accounts, rebuilt from
-- the history when missing); rows are pruned a day after their window has passed.
CREATE TABLE trend_buckets (
    bucket_seconds BIGINT      NOT NULL,
    bucket_start   TIMESTAMPTZ NOT NULL,
    series         TEXT        NOT NULL,
    a              TEXT        NOT NULL,
    b              TEXT        NOT NULL,
    n              BIGINT      NOT NULL,
    PRIMARY KEY (bucket_seconds, bucket_start, series, a, b)
);
