//! (4) Raw job-queue throughput: no-op jobs through the real worker — the same claim (batched,
//! leased, `SKIP LOCKED` on PostgreSQL), heartbeat and fenced finish as payouts, with a handler
//! that has nothing to write, so its completion goes through the worker's group commit
//! ([`withdrawals::jobs::finisher`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::store::bench as bench_store;
use withdrawals::jobs::worker::{JobContext, Worker, WorkerConfig};
use withdrawals::jobs::{JobType, Queue};
use withdrawals::provider::BoxFuture;
use withdrawals::storage::jobs::{self as job_store, Finish, NewJob};
use withdrawals::storage::{verify, Db, DbTime};

const PAYOUTS_QUEUE: &str = Queue::Payouts.as_str();

/// The bench-only job kind (payload version 1, no withdrawal).
pub const BENCH_NOOP: &str = "bench_noop";

/// Jobs enqueued per transaction while preparing the queue.
const ENQUEUE_BATCH: u64 = 1_000;

#[derive(Debug, Clone, Serialize)]
pub struct QueueReport {
    pub jobs: u64,
    pub queue: &'static str,
    pub worker_concurrency: usize,
    pub claim_batch_size: u32,
    pub database_pool: u32,
    pub enqueue_seconds: f64,
    pub enqueue_per_second: f64,
    /// Worker start → the last job's `updated_at` (its finish, on the worker's clock).
    pub drain_seconds: f64,
    pub jobs_per_second: f64,
    /// Where the CPU went while draining (units: jobs; the worker runs in the bench process).
    pub cpu: Option<super::cpu::CpuReport>,
    pub database_work: Option<super::cpu::DatabaseWork>,
}

fn noop<'a>(ctx: &'a JobContext) -> BoxFuture<'a, anyhow::Result<()>> {
    Box::pin(async move { ctx.finish_in_own_tx(&Finish::Succeeded).await })
}

pub async fn run(
    db: &Db,
    provider_url: &str,
    jobs: u64,
    concurrency: usize,
    batch_size: u32,
) -> anyhow::Result<QueueReport> {
    let enqueue_started = Instant::now();
    let mut enqueued = 0;
    while enqueued < jobs {
        let mut tx = db.begin().await?;
        let batch = ENQUEUE_BATCH.min(jobs - enqueued);
        for i in enqueued..enqueued + batch {
            let job = NewJob {
                kind: JobType::Extension { queue: PAYOUTS_QUEUE, kind: BENCH_NOOP },
                payload: format!("{{\"n\":{i}}}").into_bytes(),
                payload_version: 1,
                run_at: DbTime::now(),
                correlation_id: format!("bench-noop-{i}"),
                account_id: withdrawals::domain::AccountId::SYSTEM,
                withdrawal_id: None,
            };
            job_store::enqueue(&mut tx, &job).await?;
        }
        tx.commit().await?;
        enqueued += batch;
    }
    let enqueue_seconds = enqueue_started.elapsed().as_secs_f64();
    // On PostgreSQL, as pgbench vacuums its tables before each run: the end-to-end phase left
    // dead job versions, and autovacuum would otherwise start on them in the middle of the
    // drain. Not on SQLite, where the service never runs ANALYZE (and with its statistics the
    // drain measured 2× slower, 14 471 against ~30 000 jobs/s; not investigated further).
    if matches!(db, Db::Postgres(_)) {
        bench_store::refresh_statistics(db).await?;
    }

    // The worker as `serve` builds it (its clocks), sized by `--queue-concurrency` and
    // `--queue-batch`, plus the no-op kind.
    let (provider, _) = withdrawals::startup::provider_from(
        Some(provider_url.to_owned()),
        Some(super::PROVIDER_KEY.to_owned()),
        Duration::from_secs(2),
        Duration::from_secs(10),
    )
    .await?;
    let mut config = WorkerConfig::new(format!("bench-noop-{}", std::process::id()));
    (config.concurrency, config.batch_size) = (concurrency.max(1), batch_size.max(1));
    let worker = Worker::new(db.clone(), withdrawals::startup::gateway(provider), config).with_handler(
        BENCH_NOOP,
        1,
        Arc::new(noop),
    );
    let stop = CancellationToken::new();
    let start_clock = DbTime::now();
    let meter = super::cpu::Meter::start(db, None).await;
    let started = Instant::now();
    let running = tokio::spawn(worker.run(stop.clone()));
    let result = async {
        let mut last = (Instant::now(), i64::MAX);
        loop {
            let live = verify::live_jobs(db).await?;
            if live == 0 {
                break;
            }
            if live < last.1 {
                last = (Instant::now(), live);
            } else if last.0.elapsed() > Duration::from_secs(120) {
                bail!("the queue stopped draining ({live} live jobs for 2 minutes)");
            }
            if running.is_finished() {
                bail!("the worker stopped");
            }
            // Not faster: on SQLite this count is a scan in the measured process (17 ms at 200 000
            // rows), and the drain time comes from the jobs' own finish times anyway.
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        anyhow::Ok(())
    }
    .await;
    let polled = started.elapsed().as_secs_f64();
    stop.cancel();
    match running.await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => return Err(err.context("the worker failed")),
        Err(err) => bail!("the worker panicked: {err}"),
    }
    result?;
    let (cpu, database_work) = meter.finish(db, jobs).await;
    let (succeeded, last_finish) = bench_store::succeeded_jobs(db, BENCH_NOOP).await?;
    if succeeded as u64 != jobs {
        bail!("{succeeded} of {jobs} no-op jobs succeeded");
    }
    let drain_seconds = last_finish
        .map(|t| (t.0 - start_clock.0).num_microseconds().unwrap_or(0) as f64 / 1e6)
        .filter(|s| *s > 0.0)
        .unwrap_or(polled);
    let pool = withdrawals::storage::PoolSettings::default().max_connections;
    Ok(QueueReport {
        jobs,
        queue: PAYOUTS_QUEUE,
        worker_concurrency: concurrency,
        claim_batch_size: batch_size,
        database_pool: pool,
        enqueue_seconds,
        enqueue_per_second: jobs as f64 / enqueue_seconds.max(1e-9),
        drain_seconds,
        jobs_per_second: jobs as f64 / drain_seconds.max(1e-9),
        cpu: Some(cpu),
        database_work,
    })
}
