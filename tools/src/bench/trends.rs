//! (7) `--trends`: the console's trend charts over a large history. Seeds N withdrawals (set-based,
//! created over the last 30 days, each with its transitions: 90 % completed, 6 % failed, 3 % through
//! review) and dead letters over the same 30 days, then times `storage::trends::trends` for the
//! last hour (60 one-minute buckets) and the last day (96 quarter hours) — the two statements the
//! overview runs — and reports their p95 against the target (≤ 50 ms each).

use std::time::Instant;

use chrono::Utc;
use serde::Serialize;

use super::dead_letters::{profiles, timing, Timing, TARGET_P95_MS};
use crate::store::{bench as bench_store, trends as trend_store};
use withdrawals::ops::trends::{DAY, HOUR};
use withdrawals::storage::trends::{self, Window};
use withdrawals::storage::{Db, DbTime};

const RUNS: usize = 50;
const WARM_UP: usize = 2;
const CHUNK: u64 = 50_000;
/// The history's span: a million withdrawals over 30 days is ~23 a minute, ~33 000 a day.
const SPREAD_US: i64 = 30 * 86_400 * 1_000_000;
/// Dead letters seeded over the same span (one per 10 withdrawals).
const DEAD_LETTERS_PER_WITHDRAWAL: u64 = 10;

#[derive(Debug, Clone, Serialize)]
pub struct TrendsReport {
    pub withdrawals: u64,
    pub dead_letters: u64,
    pub spread_days: i64,
    pub seed_seconds: f64,
    pub statistics_seconds: f64,
    /// Withdrawals created in each window (what its statement reads, with their transitions).
    pub hour_created: i64,
    pub day_created: i64,
    pub hour: Timing,
    pub day: Timing,
    /// The first run of each window, which seals its closed buckets (counts them once and writes
    /// them to `trend_buckets`); the timed runs after it read them.
    pub hour_first_ms: f64,
    pub day_first_ms: f64,
    pub target_p95_ms: f64,
}

pub async fn run(db: &Db, count: u64, progress: impl Fn(&str)) -> anyhow::Result<TrendsReport> {
    let account = withdrawals::provisioning::create_account(db, "bench trends", None).await?.account_id;
    let newest = DbTime::now();
    let seed_started = Instant::now();
    let mut done = 0;
    while done < count {
        let to = (done + CHUNK).min(count);
        trend_store::seed_withdrawals(db, account.0, done as i64, to as i64, newest, SPREAD_US).await?;
        done = to;
        if done % 200_000 == 0 || done == count {
            progress(&format!("seeded {done} withdrawals ({:.0} s)", seed_started.elapsed().as_secs_f64()));
        }
    }
    let letters = count / DEAD_LETTERS_PER_WITHDRAWAL;
    let mut done = 0;
    while done < letters {
        let to = (done + CHUNK).min(letters);
        bench_store::seed_dead_letters(db, &profiles(), done as i64, to as i64, newest, SPREAD_US, 7).await?;
        done = to;
    }
    progress(&format!("seeded {letters} dead letters ({:.0} s)", seed_started.elapsed().as_secs_f64()));
    let seed_seconds = seed_started.elapsed().as_secs_f64();
    let stats_started = Instant::now();
    bench_store::refresh_statistics(db).await?;
    let statistics_seconds = stats_started.elapsed().as_secs_f64();

    progress(&format!("timing the hour's and the day's trend statements ×{RUNS}"));
    let (hour_ms, hour_first_ms, hour_created) = timed(db, HOUR).await?;
    let (day_ms, day_first_ms, day_created) = timed(db, DAY).await?;
    Ok(TrendsReport {
        withdrawals: count,
        dead_letters: letters,
        spread_days: SPREAD_US / 86_400 / 1_000_000,
        seed_seconds,
        statistics_seconds,
        hour_created,
        day_created,
        hour: timing(hour_ms, 1),
        day: timing(day_ms, 1),
        hour_first_ms,
        day_first_ms,
        target_p95_ms: TARGET_P95_MS,
    })
}

/// The window's read `WARM_UP + RUNS` times, each for the window ending after that run's now (as
/// the overview asks); the milliseconds of the timed runs, of the first run (which seals the
/// closed buckets) and the withdrawals the last counted.
async fn timed(db: &Db, (bucket_seconds, buckets): (i64, usize)) -> anyhow::Result<(Vec<f64>, f64, i64)> {
    let (mut ms, mut first, mut created) = (Vec::new(), 0.0, 0);
    for i in 0..WARM_UP + RUNS {
        let window = Window::ending_after(Utc::now(), bucket_seconds, buckets);
        let t = Instant::now();
        let series = trends::trends(db, &window, Utc::now()).await?;
        let elapsed = t.elapsed().as_secs_f64() * 1e3;
        if i == 0 {
            first = elapsed;
        }
        if i >= WARM_UP {
            ms.push(elapsed);
        }
        created = series.created.iter().sum();
    }
    Ok((ms, first, created))
}
