//! (5) Dead-letter triage over a large store: seed N dead letters (set-based, a realistic mix of
//! categories, error codes, queues and failure times over six months, 70 % closed), then time
//! `storage::dead_letters::summary` and a filtered `list` (category + error code, first page of
//! 50) — the calls behind `withdrawals dlq summary` and `dlq list`.

use std::time::Instant;

use serde::Serialize;

use super::load::percentile;
use crate::store::bench::{self as bench_store, SeedProfile};
use withdrawals::dead_letter::Category;
use withdrawals::jobs::JobKind;
use withdrawals::storage::dead_letters::{self, DeadLetterFilter};
use withdrawals::storage::{Db, DbTime};

const RUNS: usize = 50;
/// A query slower than this in total stops after `MIN_RUNS` (SQLite's summary takes seconds).
const BUDGET: std::time::Duration = std::time::Duration::from_secs(120);
const MIN_RUNS: usize = 10;
const WARM_UP: usize = 2;
const CHUNK: u64 = 50_000;
/// Failures spread over this long before now.
const SPREAD_US: i64 = 180 * 86_400 * 1_000_000;
/// Tenths of the dead letters that are closed.
const CLOSED_TENTHS: i64 = 7;
/// The triage filter timed: the most common rejection.
pub const FILTER_CATEGORY: &str = "dependency_rejected";
pub const FILTER_ERROR_CODE: &str = "invalid_account";
pub const PAGE: i64 = 50;
/// Above this p95 the plans are collected (the target).
pub const TARGET_P95_MS: f64 = 50.0;

#[derive(Debug, Clone, Serialize)]
pub struct Timing {
    pub runs: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
    /// Rows the query returned (groups for the summary, letters for the list).
    pub rows: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeadLetterReport {
    pub dead_letters: i64,
    pub open: i64,
    pub seed_seconds: f64,
    pub statistics_seconds: f64,
    pub filter: String,
    pub summary: Timing,
    pub list: Timing,
    /// Query plans, collected when a p95 is over the target.
    pub summary_plan: Option<Vec<String>>,
    pub list_plan: Option<Vec<String>>,
}

fn profile(
    weight: u32,
    category: Category,
    error_code: &'static str,
    error_class: &'static str,
    retry_queue: bool,
    attempts: i64,
    message: &'static str,
) -> SeedProfile {
    let kind = if retry_queue { JobKind::ReconcilePayout } else { JobKind::SubmitPayout };
    let (queue, job_type, payload_version) = (kind.queue().as_str(), kind.as_str(), kind.current_version());
    let side_effect_state = match category {
        Category::SideEffectUnknown | Category::Crashed => "unknown",
        Category::DependencyRejected => "confirmed",
        _ => "not_started",
    };
    SeedProfile {
        weight,
        queue,
        job_type,
        payload_version,
        category: category.as_str(),
        error_code,
        error_class,
        side_effect_state,
        owner: category.owner(),
        runbook: category.runbook(),
        attempts,
        message,
    }
}

/// The mix: mostly exhausted retries and provider rejections, a tail of unknown outcomes,
/// poison payloads, bugs and crashes.
pub fn profiles() -> Vec<SeedProfile> {
    use Category::*;
    vec![
        profile(220, RetriesExhausted, "http_503", "retryable", false, 8, "provider asked to retry later (503)"),
        profile(110, RetriesExhausted, "http_429", "retryable", false, 8, "provider asked to retry later (429)"),
        profile(70, RetriesExhausted, "connect_failed", "retryable", false, 8, "could not connect to the provider"),
        profile(40, RetriesExhausted, "not_found", "retryable", true, 6, "retry budget spent after reconciliation"),
        profile(
            200,
            DependencyRejected,
            "invalid_account",
            "permanent",
            false,
            1,
            "provider rejected: invalid_account",
        ),
        profile(60, DependencyRejected, "account_closed", "permanent", false, 1, "provider rejected: account_closed"),
        profile(30, DependencyRejected, "provider_credentials_rejected", "permanent", false, 1, "provider 401"),
        profile(80, SideEffectUnknown, "reconciliation_window_expired", "unknown", true, 40, "no answer in 24 h"),
        profile(30, SideEffectUnknown, "idempotency_conflict", "unknown", false, 2, "provider 409 on our key"),
        profile(20, SideEffectUnknown, "reconciliation_breaker_open", "unknown", true, 12, "breaker open"),
        profile(40, BadPayload, "undecodable_payload", "poison", false, 0, "payload does not decode"),
        profile(20, BadPayload, "unknown_payload_version", "poison", false, 0, "no handler for version 3"),
        profile(30, CodeBug, "handler_error", "bug", false, 10, "10 runs in a row failed"),
        profile(20, CodeBug, "handler_panicked", "panic", true, 1, "handler panicked"),
        profile(30, Crashed, "lease_expired", "crash", false, 5, "the job's lease expired 5 times"),
    ]
}

pub async fn run(db: &Db, count: u64, progress: impl Fn(&str)) -> anyhow::Result<DeadLetterReport> {
    let profiles = profiles();
    let newest = DbTime::now();
    let seed_started = Instant::now();
    let mut done = 0;
    while done < count {
        let to = (done + CHUNK).min(count);
        bench_store::seed_dead_letters(db, &profiles, done as i64, to as i64, newest, SPREAD_US, CLOSED_TENTHS).await?;
        done = to;
        if done % 200_000 == 0 || done == count {
            progress(&format!("seeded {done} dead letters ({:.0} s)", seed_started.elapsed().as_secs_f64()));
        }
    }
    let seed_seconds = seed_started.elapsed().as_secs_f64();
    let stats_started = Instant::now();
    bench_store::refresh_statistics(db).await?;
    let statistics_seconds = stats_started.elapsed().as_secs_f64();
    let (total, open) = bench_store::dead_letter_counts(db).await?;
    progress(&format!(
        "{total} dead letters ({open} open); timing summary and list ×{RUNS} (at most {} s each)",
        BUDGET.as_secs()
    ));

    let filter = DeadLetterFilter {
        category: Some(FILTER_CATEGORY.into()),
        error_code: Some(FILTER_ERROR_CODE.into()),
        limit: PAGE,
        ..DeadLetterFilter::default()
    };
    let (summary_ms, summary_rows) = timed(|| async { Ok(dead_letters::summary(db).await?.len()) }).await?;
    let (list_ms, list_rows) = timed(|| async { Ok(dead_letters::list(db, &filter).await?.len()) }).await?;
    let summary = timing(summary_ms, summary_rows);
    let list = timing(list_ms, list_rows);
    let summary_plan =
        if summary.p95_ms > TARGET_P95_MS { Some(dead_letters::explain_summary(db).await?) } else { None };
    let list_plan =
        if list.p95_ms > TARGET_P95_MS { Some(dead_letters::explain_list(db, &filter).await?) } else { None };
    Ok(DeadLetterReport {
        dead_letters: total,
        open,
        seed_seconds,
        statistics_seconds,
        filter: format!("category={FILTER_CATEGORY} error_code={FILTER_ERROR_CODE} limit={PAGE}"),
        summary,
        list,
        summary_plan,
        list_plan,
    })
}

/// The timed runs' percentiles (`rows`: what the last run returned).
pub(super) fn timing(mut ms: Vec<f64>, rows: usize) -> Timing {
    ms.sort_by(|a, b| a.total_cmp(b));
    Timing {
        runs: ms.len(),
        p50_ms: percentile(&ms, 0.5),
        p95_ms: percentile(&ms, 0.95),
        max_ms: ms.last().copied().unwrap_or(0.0),
        rows,
    }
}

/// Runs `query` `WARM_UP + RUNS` times (fewer once `MIN_RUNS` are in and `BUDGET` is spent);
/// the milliseconds of the timed runs and the rows of the last.
async fn timed<F, Fut>(mut query: F) -> anyhow::Result<(Vec<f64>, usize)>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<usize>>,
{
    let (mut ms, mut rows) = (Vec::new(), 0);
    let started = Instant::now();
    for i in 0..WARM_UP + RUNS {
        let t = Instant::now();
        rows = query().await?;
        if i >= WARM_UP {
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        if ms.len() >= MIN_RUNS && started.elapsed() > BUDGET {
            break;
        }
    }
    Ok((ms, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_respects_the_schema() {
        let categories =
            ["bad_payload", "dependency_rejected", "side_effect_unknown", "code_bug", "retries_exhausted", "crashed"];
        let total: u32 = profiles().iter().map(|p| p.weight).sum();
        assert_eq!(total, 1_000);
        for p in profiles() {
            assert!(categories.contains(&p.category), "{}", p.category);
            assert!(["not_started", "confirmed", "unknown"].contains(&p.side_effect_state));
        }
        assert!(profiles().iter().any(|p| p.category == FILTER_CATEGORY && p.error_code == FILTER_ERROR_CODE));
    }
}
