//! The time-bucketed queries behind the console's trend charts (issue 33): per bucket of a
//! window, withdrawals created, completed and failed, dead-letter arrivals by category, and the
//! review-queue size at each bucket's end.
//!
//! **Closed buckets are sealed.** A bucket whose end lies [`SETTLE`] in the past no longer
//! changes (creations, moves and dead letters carry the time they happened and commit within
//! moments of it; nothing is ever deleted or rewritten), so its counts are computed once and kept
//! in `trend_buckets` (migration 0037): a `sealed` marker per bucket and a row per series and key
//! with a count. A window then reads its sealed buckets (a handful of rows each) and counts only
//! the rows of its open tail live: at most the hour's last six minutes, the day's last twenty.
//! Whoever reads a window first after a bucket closes seals it, in one short write transaction
//! (`ON CONFLICT DO NOTHING`, rows written in key order so two sealers at once neither disagree
//! nor deadlock); a database that cannot take the write is read live, with a warning. On SQLite
//! the seal waits for the one writer, up to its busy timeout. Sealed buckets older than the
//! window by a day are pruned as new ones are sealed. The trade, documented in the README: a row
//! committed more than `SETTLE` after the time it carries is missed by its sealed bucket — and a
//! move into or out of review missed so shifts the review-queue size of every bucket before it
//! (the walk back starts from the current count, which has it) until that bucket leaves the
//! window.
//!
//! One statement per window, so every series is read from one snapshot (the review-queue size is
//! the current count minus the moves after each bucket, which is only right if both come from the
//! same instant; sealed buckets never change). Each live part reads only its range's rows,
//! through an index, so the cost follows the traffic of the open tail and not the history:
//! - created: `withdrawals_id_idx`, which migration 0036 makes cover `created_at` (`(id) INCLUDE
//!   (created_at)` on PostgreSQL, `(id, created_at)` on SQLite). Ids are UUIDv7 made the moment
//!   before `created_at` (`storage::withdrawals::prepare`), so the range's withdrawals lie in an id
//!   range; `created_at` then filters and buckets exactly, from the index alone. No index led by
//!   `created_at` is needed (it would take an entry per row version of every withdrawal: their
//!   updates are never HOT, since they change the status index).
//! - completed, failed and moves into and out of `requires_review`: migration 0036's partial index
//!   `withdrawal_transitions_trend_idx` on `(at, to_status, from_status)` of those moves only,
//!   which covers the query. Read from the open tail's start on, with no end: the moves after a
//!   past window walk the review queue back to it (for the current window there are none).
//! - dead-letter arrivals: `dead_letters_failed_at_idx`, which migration 0036 makes carry the
//!   category (a letter arrives when its job dies).
//! - the current review-queue size: `withdrawals_status_idx`.
//! - sealed buckets: `trend_buckets`' primary key, `(bucket_seconds, bucket_start, …)`.
//!
//! Buckets are whole seconds counted from the window's start: PostgreSQL's `date_bin` on
//! `timestamptz`, SQLite's epoch arithmetic on the first 19 characters of the fixed-width text
//! `DbTime` stores (`strftime('%s', …)` of the whole text would round `.999999` up to the next
//! second).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, TimeDelta, Utc};
use uuid::Uuid;

use super::{Backend, Db, DbTime, Result, StorageError};
use crate::domain::{Category, WithdrawalStatus};
use crate::{with_conn, with_read_conn};

/// Equal buckets ending at `end` (exclusive): `buckets` of `bucket_seconds` each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub end: DateTime<Utc>,
    pub bucket_seconds: i64,
    pub buckets: usize,
}

impl Window {
    /// The `buckets` buckets of `bucket_seconds` whose last one holds `now` (aligned to the Unix
    /// epoch, so a minute bucket is a clock minute, a 15-minute one a quarter hour).
    pub fn ending_after(now: DateTime<Utc>, bucket_seconds: i64, buckets: usize) -> Window {
        let bucket = bucket_seconds.max(1);
        let end_s = now.timestamp().div_euclid(bucket) * bucket + bucket;
        Window { end: DateTime::from_timestamp(end_s, 0).unwrap_or(now), bucket_seconds: bucket, buckets }
    }

    pub fn start(&self) -> DateTime<Utc> {
        self.end - TimeDelta::seconds(self.bucket_seconds * self.buckets as i64)
    }

    /// Each bucket's start, oldest first.
    pub fn starts(&self) -> Vec<DateTime<Utc>> {
        let start = self.start();
        (0..self.buckets).map(|i| start + TimeDelta::seconds(self.bucket_seconds * i as i64)).collect()
    }
}

/// Every series of one window, one value per bucket, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trends {
    pub created: Vec<i64>,
    pub completed: Vec<i64>,
    pub failed: Vec<i64>,
    /// Dead letters that arrived, by category (only categories that had one).
    pub dead_letters: BTreeMap<Category, Vec<i64>>,
    /// Withdrawals in `requires_review` at each bucket's end (the last bucket's: now).
    pub review_queue: Vec<i64>,
}

/// One row of the window's statement: a series, a bucket, up to two keys, a count.
#[derive(Debug, Clone, sqlx::FromRow)]
struct Row {
    series: String,
    bucket: i64,
    a: String,
    b: String,
    n: i64,
}

/// How far before a withdrawal's `created_at` its id's timestamp may be (they are made one after
/// the other; the margin only widens the id range read, `created_at` filters exactly).
const ID_MARGIN: TimeDelta = TimeDelta::minutes(1);

/// The smallest UUIDv7 of millisecond `ms` (`least`) or the largest (`!least`).
fn v7_bound(ms: i64, least: bool) -> Uuid {
    let ms = ms.clamp(0, (1 << 48) - 1) as u64;
    let mut bytes = if least { [0u8; 16] } else { [0xff; 16] };
    bytes[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    Uuid::from_bytes(bytes)
}

/// The moves the trend index holds: into a final state or into or out of review. Written the same
/// in the index's predicate (migration 0036), so both planners can use it.
const MOVES: &str = "(to_status IN ('completed', 'failed', 'requires_review') OR from_status = 'requires_review')";

/// How long after its end a bucket is taken as final and sealed: longer than any transaction
/// takes to commit the time it stamped (the payout path commits within a second; SQLite's busy
/// timeout is ten).
pub const SETTLE: TimeDelta = TimeDelta::minutes(5);

/// Sealed buckets kept beyond their window's span before they are pruned.
const KEEP_BEYOND_WINDOW: TimeDelta = TimeDelta::days(1);

/// The sealing marker's series: one row per sealed bucket, with no count.
const SEALED: &str = "sealed";

/// The parts of one read, as instants: buckets are numbered from `origin`; `origin..from` comes
/// from sealed buckets, `from..to` is counted live, and moves live from `from` until `moves_to`.
struct Range {
    origin: DateTime<Utc>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    moves_to: DateTime<Utc>,
    bucket_seconds: i64,
}

/// The end of time as far as a read is concerned (9999-12-31, which both backends store).
fn no_end() -> DateTime<Utc> {
    DateTime::from_timestamp(253_402_214_400, 0).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

fn statement(backend: Backend) -> String {
    // Each part groups by its bucket key `k`; the outer query turns keys into bucket numbers.
    // PostgreSQL: `date_bin` from the origin ($1) by the width ($9, an interval), integer
    // arithmetic on `timestamptz` (`extract(epoch …)` is numeric, and twice as slow over a day's
    // rows), then seconds since the origin ($4) over the width in seconds ($5) once per group.
    // SQLite: the bucket number directly, from the whole seconds of the stored text.
    let (key, number, start_key): (fn(&str) -> String, &str, &str) = match backend {
        Backend::Postgres => (
            |col: &str| format!("date_bin(CAST($9 AS interval), {col}, $1)"),
            "CAST(extract(epoch FROM k) AS BIGINT) - $4) / $5",
            "CAST($1 AS timestamptz)",
        ),
        Backend::Sqlite => {
            (|col: &str| format!("(CAST(strftime('%s', substr({col}, 1, 19)) AS INTEGER) - $4) / $5"), "k)", "0")
        }
    };
    format!(
        "SELECT series, ({number} AS bucket, a, b, n FROM (
           SELECT series, {sealed} AS k, a, b, n
           FROM trend_buckets WHERE bucket_seconds = $5 AND bucket_start >= $1 AND bucket_start < $2
             AND series <> '{SEALED}'
           UNION ALL
           SELECT 'created', {created}, '', '', COUNT(*)
           FROM withdrawals WHERE id >= $6 AND id <= $7 AND created_at >= $2 AND created_at < $3 GROUP BY 2
           UNION ALL
           SELECT 'moved', {moved}, COALESCE(from_status, ''), to_status, COUNT(*)
           FROM withdrawal_transitions WHERE at >= $2 AND at < $8 AND {MOVES} GROUP BY 2, 3, 4
           UNION ALL
           SELECT 'dead_letter', {failed}, category, '', COUNT(*)
           FROM dead_letters WHERE failed_at >= $2 AND failed_at < $3 GROUP BY 2, 3
           UNION ALL
           SELECT 'review_now', {start_key}, '', '', COUNT(*) FROM withdrawals WHERE status = 'requires_review'
         ) t",
        sealed = key("bucket_start"),
        created = key("created_at"),
        moved = key("at"),
        failed = key("failed_at"),
    )
}

/// The rows of one read: sealed buckets from `origin` to `from`, live counts from `from` to `to`,
/// live moves from `from` to `moves_to`, and the review queue now — one statement, one snapshot.
async fn read(db: &Db, range: &Range) -> Result<Vec<Row>> {
    let sql = statement(db.backend());
    let postgres = db.backend() == Backend::Postgres;
    let width = format!("{} seconds", range.bucket_seconds);
    let rows = with_read_conn!(db, |conn| {
        let mut query = sqlx::query_as::<_, Row>(&sql)
            .bind(DbTime::from(range.origin))
            .bind(DbTime::from(range.from))
            .bind(DbTime::from(range.to))
            .bind(range.origin.timestamp())
            .bind(range.bucket_seconds)
            .bind(v7_bound((range.from - ID_MARGIN).timestamp_millis(), true))
            .bind(v7_bound((range.to + ID_MARGIN).timestamp_millis(), false))
            .bind(DbTime::from(range.moves_to));
        if postgres {
            query = query.bind(width.clone());
        }
        query.fetch_all(&mut *conn).await?
    });
    Ok(rows)
}

/// Every series of `window` as of `now`: its buckets closed [`SETTLE`] before `now` from their
/// sealed counts (sealing those not sealed yet), the rest counted live, in one statement.
pub async fn trends(db: &Db, window: &Window, now: DateTime<Utc>) -> Result<Trends> {
    let from = match seal(db, window, now).await {
        Ok(sealed_until) => sealed_until,
        Err(err) => {
            tracing::warn!(error = %err, "trend buckets could not be sealed; the window is counted live");
            window.start()
        }
    };
    let range = Range {
        origin: window.start(),
        from,
        to: window.end,
        moves_to: no_end(),
        bucket_seconds: window.bucket_seconds,
    };
    fold(window.buckets, read(db, &range).await?)
}

/// Seals the buckets of `window` that closed [`SETTLE`] before `now` and are not sealed yet, and
/// returns the end of the sealed run (the window's start when none has closed). Reads the markers
/// (a few rows through the primary key); only when one is missing, counts the missing buckets'
/// rows in one statement and writes them, with their markers, in one transaction that also prunes
/// the width's buckets older than the window by [`KEEP_BEYOND_WINDOW`].
pub async fn seal(db: &Db, window: &Window, now: DateTime<Utc>) -> Result<DateTime<Utc>> {
    let (start, width) = (window.start(), window.bucket_seconds);
    let closed = ((now - SETTLE - start).num_seconds().div_euclid(width)).clamp(0, window.buckets as i64);
    let until = start + TimeDelta::seconds(closed * width);
    if closed == 0 {
        return Ok(until);
    }
    let present: BTreeSet<i64> = sealed_starts(db, width, start, until)
        .await?
        .into_iter()
        .map(|t| (t - start).num_seconds().div_euclid(width))
        .collect();
    let missing: Vec<i64> = (0..closed).filter(|i| !present.contains(i)).collect();
    let Some(&first) = missing.first() else { return Ok(until) };
    let origin = start + TimeDelta::seconds(first * width);
    let range = Range { origin, from: origin, to: until, moves_to: until, bucket_seconds: width };
    let mut rows = read(db, &range).await?;
    // Key order, so two sealers of overlapping ranges take their rows' locks in the same order.
    rows.sort_by(|x, y| (x.bucket, &x.series, &x.a, &x.b).cmp(&(y.bucket, &y.series, &y.a, &y.b)));
    let mut tx = db.begin().await?;
    let keep_from = now - (TimeDelta::seconds(width * window.buckets as i64) + KEEP_BEYOND_WINDOW);
    with_conn!(tx, |conn| {
        sqlx::query("DELETE FROM trend_buckets WHERE bucket_seconds = $1 AND bucket_start < $2")
            .bind(width)
            .bind(DbTime::from(keep_from))
            .execute(&mut *conn)
            .await?;
        for i in &missing {
            let bucket_start = start + TimeDelta::seconds(i * width);
            let counts = rows.iter().filter(|r| r.series != "review_now" && first + r.bucket == *i && r.n != 0);
            let marker = (SEALED, "", "", 0);
            for (series, a, b, n) in
                counts.map(|r| (r.series.as_str(), r.a.as_str(), r.b.as_str(), r.n)).chain([marker])
            {
                sqlx::query(
                    "INSERT INTO trend_buckets (bucket_seconds, bucket_start, series, a, b, n)
                     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                )
                .bind(width)
                .bind(DbTime::from(bucket_start))
                .bind(series)
                .bind(a)
                .bind(b)
                .bind(n)
                .execute(&mut *conn)
                .await?;
            }
        }
    });
    tx.commit().await?;
    Ok(until)
}

/// The starts of the sealed buckets of width `bucket_seconds` in `from..to`.
pub async fn sealed_starts(
    db: &Db,
    bucket_seconds: i64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<DateTime<Utc>>> {
    let starts: Vec<DbTime> = with_read_conn!(db, |conn| {
        sqlx::query_scalar(
            "SELECT bucket_start FROM trend_buckets
             WHERE bucket_seconds = $1 AND bucket_start >= $2 AND bucket_start < $3 AND series = 'sealed'",
        )
        .bind(bucket_seconds)
        .bind(DbTime::from(from))
        .bind(DbTime::from(to))
        .fetch_all(&mut *conn)
        .await?
    });
    Ok(starts.into_iter().map(|t| t.0).collect())
}

/// The statement's rows as series: counts into their buckets, and the review-queue size walked
/// back from now (the size at a bucket's end is the size now less the net moves after it, those
/// after the window included).
fn fold(buckets: usize, rows: Vec<Row>) -> Result<Trends> {
    let mut t = Trends {
        created: vec![0; buckets],
        completed: vec![0; buckets],
        failed: vec![0; buckets],
        dead_letters: BTreeMap::new(),
        review_queue: vec![0; buckets],
    };
    // Net moves into review per bucket, and (last) after the window.
    let mut net_review = vec![0_i64; buckets + 1];
    let mut review_now = 0;
    for row in rows {
        // A bucket past the window holds moves after it (the review walk needs them); none before.
        let Ok(i) = usize::try_from(row.bucket) else { continue };
        let inside = i < buckets;
        match row.series.as_str() {
            "created" if inside => t.created[i] += row.n,
            "dead_letter" if inside => {
                let category: Category = row.a.parse().map_err(StorageError::corrupt)?;
                t.dead_letters.entry(category).or_insert_with(|| vec![0; buckets])[i] += row.n;
            }
            "moved" => {
                let to: WithdrawalStatus = row.b.parse().map_err(StorageError::corrupt)?;
                let from: Option<WithdrawalStatus> = match row.a.as_str() {
                    "" => None,
                    a => Some(a.parse().map_err(StorageError::corrupt)?),
                };
                match to {
                    WithdrawalStatus::Completed if inside => t.completed[i] += row.n,
                    WithdrawalStatus::Failed if inside => t.failed[i] += row.n,
                    _ => {}
                }
                let into = to == WithdrawalStatus::RequiresReview;
                let out_of = from == Some(WithdrawalStatus::RequiresReview);
                net_review[i.min(buckets)] += row.n * (i64::from(into) - i64::from(out_of));
            }
            "review_now" => review_now = row.n,
            "created" | "dead_letter" => {}
            other => return Err(StorageError::corrupt(format!("unknown trend series {other}"))),
        }
    }
    let mut size = review_now - net_review[buckets];
    for i in (0..buckets).rev() {
        t.review_queue[i] = size;
        size -= net_review[i];
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(series: &str, bucket: i64, a: &str, b: &str, n: i64) -> Row {
        Row { series: series.into(), bucket, a: a.into(), b: b.into(), n }
    }

    #[test]
    fn a_window_ends_at_the_bucket_after_now_on_clock_boundaries() {
        let now = DateTime::parse_from_rfc3339("2026-12-07T12:34:56.5Z").unwrap().to_utc();
        let hour = Window::ending_after(now, 60, 60);
        assert_eq!(hour.end.to_rfc3339(), "2026-12-07T12:35:00+00:00");
        assert_eq!(hour.start().to_rfc3339(), "2026-12-07T11:35:00+00:00");
        let day = Window::ending_after(now, 900, 96);
        assert_eq!(day.end.to_rfc3339(), "2026-12-07T12:45:00+00:00");
        assert_eq!(day.starts().len(), 96);
        assert_eq!(day.starts()[95].to_rfc3339(), "2026-12-07T12:30:00+00:00");
    }

    #[test]
    fn v7_bounds_enclose_every_id_of_their_millisecond() {
        let id = Uuid::now_v7();
        let ms = i64::try_from(id.get_timestamp().unwrap().to_unix().0).unwrap() * 1000
            + i64::from(id.get_timestamp().unwrap().to_unix().1 / 1_000_000);
        assert!(v7_bound(ms, true) <= id && id <= v7_bound(ms, false));
        assert!(v7_bound(ms + 1, true) > id && v7_bound(ms - 1, false) < id);
    }

    #[test]
    fn rows_fold_into_buckets_and_the_review_queue_walks_back_from_now() {
        let rows = vec![
            row("created", 0, "", "", 3),
            row("created", 2, "", "", 1),
            row("moved", 1, "processing", "completed", 2),
            row("moved", 1, "processing", "requires_review", 2),
            row("moved", 2, "requires_review", "failed", 1),
            row("moved", 2, "requires_review", "processing", 1),
            row("dead_letter", 1, "dependency_rejected", "", 2),
            row("created", 3, "", "", 9), // after the window: not counted
            row("dead_letter", 3, "code_bug", "", 9),
            row("moved", 3, "processing", "completed", 9),
            row("review_now", 0, "", "", 4),
        ];
        let t = fold(3, rows).unwrap();
        assert_eq!(t.created, vec![3, 0, 1]);
        assert_eq!(t.completed, vec![0, 2, 0]);
        assert_eq!(t.failed, vec![0, 0, 1]);
        assert_eq!(t.dead_letters[&Category::DependencyRejected], vec![0, 2, 0]);
        // Now 4; bucket 2 took two out (4 at its end, 6 before); bucket 1 put two in (4 before).
        assert_eq!(t.review_queue, vec![4, 6, 4]);
        assert_eq!(t.dead_letters.len(), 1);
    }

    #[test]
    fn moves_after_a_past_window_walk_its_review_queue_back() {
        // Now 3; after the window two came in and one left: one at the window's end.
        let rows = vec![
            row("moved", 0, "processing", "requires_review", 1),
            row("moved", 5, "processing", "requires_review", 2),
            row("moved", 7, "requires_review", "completed", 1),
            row("review_now", 0, "", "", 3),
        ];
        let t = fold(2, rows).unwrap();
        assert_eq!(t.review_queue, vec![2, 2]);
        assert_eq!(t.completed, vec![0, 0], "a completion after the window is not the window's");
    }
}
