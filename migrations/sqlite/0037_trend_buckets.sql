-- SQLite twin of migrations/postgres/0037_trend_buckets.sql (issue 33): sealed trend buckets, a
-- `sealed` marker per closed bucket and a row per series and key with its count, so the console's
-- charts read a closed bucket's few rows instead of counting it again. `bucket_start` is the
-- fixed-width text `DbTime` stores.
CREATE TABLE trend_buckets (
    bucket_seconds INTEGER NOT NULL,
    bucket_start   TEXT    NOT NULL,
    series         TEXT    NOT NULL,
    a              TEXT    NOT NULL,
    b              TEXT    NOT NULL,
    n              INTEGER NOT NULL,
    PRIMARY KEY (bucket_seconds, bucket_start, series, a, b)
) WITHOUT ROWID;
