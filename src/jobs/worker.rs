//! The durable worker (SPEC §5): claim in batches under a lease, run handlers with bounded
//! concurrency, heartbeat, reap expired leases, and shut down gracefully.
//!
//! Wake-ups come from in-process notifications and PostgreSQL `LISTEN`, with a polling fallback,
//! so an idle worker does not spin. A handler finishes its own job inside the transaction that
//! records its effects ([`JobContext::finish_or_rollback`]); the runner only steps in for what a
//! handler cannot: an undecodable payload, an unknown version, a panic, or an infrastructure
//! error. It never lets a handler's panic take the worker down.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::TimeDelta;
use futures::FutureExt;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::retry::RetryPolicy;
use super::{submit, SubmitPayout, PAYOUTS_QUEUE, SUBMIT_PAYOUT};
use crate::domain::{Actor, Withdrawal, WithdrawalId, WithdrawalStatus};
use crate::provider::Gateway;
use crate::storage::jobs::{self as job_store, ClaimedJob, Finish};
use crate::storage::withdrawals::{self as store, TransitionOutcome, TransitionRequest};
use crate::storage::{Db, DbTime, Tx};

/// How a worker runs. Every duration is data, so tests can run the same code fast.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub worker_id: String,
    pub queues: Vec<&'static str>,
    /// Jobs running at once in this worker.
    pub concurrency: usize,
    /// Jobs claimed per round trip.
    pub batch_size: u32,
    pub lease: Duration,
    pub heartbeat: Duration,
    /// Polling fallback when no notification arrives.
    pub poll_interval: Duration,
    /// A job whose lease expired this many times is dead (`crashed`).
    pub max_receives: i64,
    /// How long shutdown waits for in-flight jobs before handing them back.
    pub shutdown_grace: Duration,
    pub submit_policy: RetryPolicy,
    /// Added at random to a breaker deferral so deferred jobs don't stampede the probe.
    pub breaker_jitter: Duration,
    /// When a `pending` transfer is first polled.
    pub pending_poll: Duration,
}

impl WorkerConfig {
    pub fn new(worker_id: impl Into<String>) -> Self {
        Self {
            worker_id: worker_id.into(),
            queues: vec![PAYOUTS_QUEUE],
            concurrency: 16,
            batch_size: 16,
            lease: Duration::from_secs(30),
            heartbeat: Duration::from_secs(10),
            poll_interval: Duration::from_secs(1),
            max_receives: 5,
            shutdown_grace: Duration::from_secs(10),
            submit_policy: RetryPolicy::payout_submit(),
            breaker_jitter: Duration::from_secs(1),
            pending_poll: Duration::from_secs(5),
        }
    }
}

/// A worker process's shared pieces.
#[derive(Clone)]
pub struct Worker {
    db: Db,
    gateway: Gateway,
    config: Arc<WorkerConfig>,
}

/// What a handler gets: the leased job and the worker's services.
pub struct JobContext {
    pub job: ClaimedJob,
    worker: Worker,
}

impl JobContext {
    pub fn db(&self) -> &Db {
        &self.worker.db
    }

    pub fn gateway(&self) -> &Gateway {
        &self.worker.gateway
    }

    pub fn config(&self) -> &WorkerConfig {
        &self.worker.config
    }

    pub fn worker_id(&self) -> &str {
        &self.worker.config.worker_id
    }

    /// Finishes the job inside `tx` and commits; if the lease was lost, rolls everything back.
    pub async fn finish_or_rollback(&self, mut tx: Tx, how: &Finish<'_>) -> anyhow::Result<()> {
        if job_store::finish(&mut tx, self.job.id, self.job.lease_token, how).await? {
            tx.commit().await?;
        } else {
            drop(tx);
            tracing::warn!(event = "lease_lost", "lease lost before finishing; this run's writes were rolled back");
        }
        Ok(())
    }

    pub async fn finish_in_own_tx(&self, how: &Finish<'_>) -> anyhow::Result<()> {
        let tx = self.db().begin().await?;
        self.finish_or_rollback(tx, how).await
    }

    /// Whether this run still holds its lease (checked inside `tx`, before committing work that
    /// must only happen under the lease).
    pub async fn still_leased(&self, tx: &mut Tx) -> anyhow::Result<bool> {
        let lease = TimeDelta::from_std(self.config().lease).unwrap_or(TimeDelta::seconds(30));
        let held = job_store::extend_lease(tx, self.job.id, self.job.lease_token, lease).await?;
        if !held {
            tracing::warn!(event = "lease_lost", "lease lost before calling the provider; nothing sent");
        }
        Ok(held)
    }
}

impl Worker {
    pub fn new(db: Db, gateway: Gateway, config: WorkerConfig) -> Self {
        Self { db, gateway, config: Arc::new(config) }
    }

    /// Runs until `shutdown` is cancelled, then stops claiming, gives in-flight jobs
    /// `shutdown_grace` to finish, and hands back those still running.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let wake = Arc::new(Notify::new());
        job_store::listen(&self.db, wake.clone(), shutdown.clone()).await.context("cannot listen for jobs")?;
        let tracker = TaskTracker::new();
        let permits = Arc::new(Semaphore::new(self.config.concurrency));
        let handlers_stop = CancellationToken::new();
        tracker.spawn(self.clone().reap_leases(shutdown.clone()));
        tracing::info!(worker_id = %self.config.worker_id, queues = ?self.config.queues, "worker started");

        while !shutdown.is_cancelled() {
            let claimed = self.claim_round(&permits, &tracker, &handlers_stop).await;
            if let Err(err) = &claimed {
                tracing::warn!(error = format!("{err:#}"), "claim failed; retrying after the poll interval");
            }
            if matches!(claimed, Ok(true)) {
                continue; // There may be more: claim again before sleeping.
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = wake.notified() => {}
                _ = job_store::local_wakeups().notified() => {}
                _ = tokio::time::sleep(self.config.poll_interval) => {}
            }
        }

        tracker.close();
        if tokio::time::timeout(self.config.shutdown_grace, tracker.wait()).await.is_err() {
            tracing::warn!("shutdown grace elapsed; handing back in-flight jobs");
            handlers_stop.cancel();
            tracker.wait().await;
        }
        tracing::info!(worker_id = %self.config.worker_id, "worker stopped");
        Ok(())
    }

    /// One claim round over every queue; true if anything was claimed.
    async fn claim_round(
        &self,
        permits: &Arc<Semaphore>,
        tracker: &TaskTracker,
        stop: &CancellationToken,
    ) -> anyhow::Result<bool> {
        let mut any = false;
        for queue in &self.config.queues {
            let free = permits.available_permits().min(self.config.batch_size as usize);
            if free == 0 {
                // Wait for a slot rather than claiming jobs nobody can run yet.
                let permit = permits.clone().acquire_owned().await?;
                drop(permit);
                return Ok(true);
            }
            let lease = TimeDelta::from_std(self.config.lease)?;
            let jobs = job_store::claim(&self.db, queue, &self.config.worker_id, free as u32, lease).await?;
            any |= !jobs.is_empty();
            for job in jobs {
                let permit = permits.clone().acquire_owned().await?;
                let ctx = JobContext { job, worker: self.clone() };
                let stop = stop.clone();
                tracker.spawn(async move {
                    ctx.run(stop).await;
                    drop(permit);
                });
            }
        }
        Ok(any)
    }

    /// Every half lease: expired leases go back to the queue, or die as `crashed` after
    /// `max_receives`.
    async fn reap_leases(self, shutdown: CancellationToken) {
        let mut every = tokio::time::interval(self.config.lease / 2);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = every.tick() => {}
            }
            match job_store::expire_leases(&self.db, self.config.max_receives).await {
                Ok(crashed) => {
                    for job in crashed {
                        let error = format!("crashed: lease expired {} times", job.receives);
                        if let Err(err) = kill(&self.db, &job, &self.config.worker_id, &error, true).await {
                            tracing::warn!(error = format!("{err:#}"), job_id = %job.id, "could not kill crashed job");
                        }
                    }
                }
                Err(err) => tracing::warn!(error = format!("{:#}", anyhow::Error::from(err)), "lease reaper failed"),
            }
        }
    }
}

impl JobContext {
    async fn run(self, stop: CancellationToken) {
        let span = tracing::info_span!(
            "job",
            job_id = %self.job.id,
            kind = %self.job.kind,
            withdrawal_id = ?self.job.withdrawal_id,
            correlation_id = %self.job.correlation_id,
            attempt = self.job.attempts + 1,
        );
        async move {
            let heartbeat = CancellationToken::new();
            tokio::spawn(heartbeat_loop(self.worker.clone(), self.job.id, self.job.lease_token, heartbeat.clone()));
            let outcome = tokio::select! {
                outcome = std::panic::AssertUnwindSafe(self.dispatch()).catch_unwind() => Some(outcome),
                _ = stop.cancelled() => None,
            };
            heartbeat.cancel();
            match outcome {
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(err))) => {
                    // Infrastructure trouble (database, a bug returning Err): try again later
                    // without consuming an attempt; the lease fences any double run.
                    tracing::warn!(error = format!("{err:#}"), "job run failed; rescheduling");
                    let run_at = DbTime::now().plus(TimeDelta::seconds(5));
                    let how = Finish::Reschedule { run_at, consumed_attempt: false, error: "handler error" };
                    if let Err(err) = self.finish_in_own_tx(&how).await {
                        tracing::warn!(error = format!("{err:#}"), "could not reschedule; the lease will expire");
                    }
                }
                Some(Err(panic)) => {
                    let message = panic_message(&panic);
                    tracing::error!(panic = %message, "handler panicked; job is dead (code_bug)");
                    let error = format!("code_bug: handler panicked: {message}");
                    if let Err(err) =
                        kill(&self.worker.db, &self.job, &self.worker.config.worker_id, &error, false).await
                    {
                        tracing::warn!(error = format!("{err:#}"), "could not kill the panicked job");
                    }
                }
                None => {
                    if let Err(err) = self.finish_in_own_tx(&Finish::Release).await {
                        tracing::warn!(error = format!("{err:#}"), "could not release the job; the lease will expire");
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    async fn dispatch(&self) -> anyhow::Result<()> {
        match (self.job.kind.as_str(), self.job.payload_version) {
            (SUBMIT_PAYOUT, SubmitPayout::VERSION) => match serde_json::from_slice::<SubmitPayout>(&self.job.payload) {
                Ok(payload) => submit::handle(self, payload).await,
                Err(err) => self.poison(&format!("bad_payload: {err}")).await,
            },
            (kind, version) => self.poison(&format!("bad_payload: no handler for {kind} version {version}")).await,
        }
    }

    /// A payload that cannot be run: dead at once, and the worker moves on.
    async fn poison(&self, error: &str) -> anyhow::Result<()> {
        tracing::error!(error, "poison job");
        let mut tx = self.db().begin().await?;
        if let Some(id) = self.job.withdrawal_id {
            let id = WithdrawalId(id);
            if let Some(w) = store::get_in_tx(&mut tx, id).await? {
                let actor = Actor::Worker(self.worker_id().to_owned());
                park_for_review(&mut tx, &w, &actor, error, &self.job.correlation_id).await?;
            }
        }
        self.finish_or_rollback(tx, &Finish::Dead { error }).await
    }
}

/// Kills a job outside its lease (panics, crashed leases) and parks its withdrawal for review.
async fn kill(db: &Db, job: &ClaimedJob, worker: &str, error: &str, expired_lease: bool) -> anyhow::Result<()> {
    let mut tx = db.begin().await?;
    let killed = if expired_lease {
        job_store::kill_expired(&mut tx, job.id, error).await?
    } else {
        job_store::finish(&mut tx, job.id, job.lease_token, &Finish::Dead { error }).await?
    };
    if !killed {
        return Ok(());
    }
    if let Some(id) = job.withdrawal_id {
        if let Some(w) = store::get_in_tx(&mut tx, WithdrawalId(id)).await? {
            park_for_review(&mut tx, &w, &Actor::Worker(worker.to_owned()), error, &job.correlation_id).await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// Moves a withdrawal automation gave up on to `requires_review` (through `processing` if it
/// was still `pending`, so every move is one the state machine allows and is recorded).
pub async fn park_for_review(
    tx: &mut Tx,
    w: &Withdrawal,
    actor: &Actor,
    reason: &str,
    correlation_id: &str,
) -> anyhow::Result<()> {
    let mut path = Vec::new();
    match w.status {
        WithdrawalStatus::Pending => {
            path.push((WithdrawalStatus::Pending, WithdrawalStatus::Processing));
            path.push((WithdrawalStatus::Processing, WithdrawalStatus::RequiresReview));
        }
        WithdrawalStatus::Processing => path.push((WithdrawalStatus::Processing, WithdrawalStatus::RequiresReview)),
        WithdrawalStatus::RequiresReview | WithdrawalStatus::Completed | WithdrawalStatus::Failed => {}
    }
    for (from, to) in path {
        let request = TransitionRequest {
            id: w.id,
            from,
            to,
            expected_version: None,
            actor,
            reason,
            correlation_id,
            failure_code: None,
        };
        match store::transition(tx, &request).await? {
            TransitionOutcome::Applied(_) | TransitionOutcome::Stale => {}
            TransitionOutcome::Forbidden(err) => return Err(err.into()),
        }
    }
    Ok(())
}

async fn heartbeat_loop(worker: Worker, job: uuid::Uuid, token: uuid::Uuid, stop: CancellationToken) {
    let lease = TimeDelta::from_std(worker.config.lease).unwrap_or(TimeDelta::seconds(30));
    let mut every = tokio::time::interval(worker.config.heartbeat);
    every.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => {}
        }
        match job_store::heartbeat(&worker.db, job, token, lease).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(event = "lease_lost", "heartbeat found the lease taken");
                return;
            }
            Err(err) => tracing::warn!(error = format!("{:#}", anyhow::Error::from(err)), "heartbeat failed"),
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
