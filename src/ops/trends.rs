//! Trends for the overview (issue 33): for the last hour (per minute) and the last day (per
//! quarter hour), withdrawals created, completed and failed, dead-letter arrivals by category and
//! the review-queue size at each bucket's end. Read-only, for every role (viewer and up), like the
//! overview it sits on.
//!
//! The day is cut in quarter hours: 96 buckets, fine enough to place a breaker's flap or a burst
//! of dead letters within the quarter, and few enough to draw as bars one can point at; an hourly
//! cut would hide a 10-minute incident in a 60-minute average.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Operator, Ops, OpsResult, Role};
use crate::domain::Category;
use crate::storage::trends::{self as store, Window};

/// The last hour: 60 one-minute buckets, the last one holding now.
pub const HOUR: (i64, usize) = (60, 60);
/// The last day: 96 quarter-hour buckets, the last one holding now.
pub const DAY: (i64, usize) = (900, 96);

/// Both windows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Trends {
    pub hour: TrendWindow,
    pub day: TrendWindow,
}

/// One window's series: one value per bucket, oldest first, aligned with `bucket_starts`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrendWindow {
    pub bucket_seconds: i64,
    /// Each bucket's start (UTC); the last bucket runs to `end`, after now.
    pub bucket_starts: Vec<DateTime<Utc>>,
    pub end: DateTime<Utc>,
    pub created: Vec<i64>,
    pub completed: Vec<i64>,
    pub failed: Vec<i64>,
    /// Only the categories that had an arrival in the window.
    pub dead_letters: Vec<CategorySeries>,
    /// Withdrawals in `requires_review` at each bucket's end (the last: now).
    pub review_queue: Vec<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CategorySeries {
    pub category: Category,
    pub arrivals: Vec<i64>,
}

/// The trends of the window of `bucket_seconds × buckets` ending after `now`.
pub async fn window(
    ops: &Ops<'_>,
    now: DateTime<Utc>,
    (bucket_seconds, buckets): (i64, usize),
) -> OpsResult<TrendWindow> {
    let window = Window::ending_after(now, bucket_seconds, buckets);
    let t = store::trends(ops.db, &window, now).await?;
    Ok(TrendWindow {
        bucket_seconds: window.bucket_seconds,
        bucket_starts: window.starts(),
        end: window.end,
        created: t.created,
        completed: t.completed,
        failed: t.failed,
        dead_letters: t
            .dead_letters
            .into_iter()
            .map(|(category, arrivals)| CategorySeries { category, arrivals })
            .collect(),
        review_queue: t.review_queue,
    })
}

/// The last hour's and the last day's trends.
pub async fn trends(ops: &Ops<'_>, operator: &Operator) -> OpsResult<Trends> {
    operator.require(Role::Viewer)?;
    let now = Utc::now();
    Ok(Trends { hour: window(ops, now, HOUR).await?, day: window(ops, now, DAY).await? })
}
