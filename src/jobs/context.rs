//! What a job handler is given (SPEC §5): the worker's settings ([`WorkerConfig`]), its shared
//! services ([`Worker`]), and the leased job with the fenced ways to finish it ([`JobContext`]),
//! plus the lease heartbeat. The handlers (`submit`, `reconcile`, `settlement`, `payout_batch`)
//! depend on this module only; the runner in [`super::worker`] depends on them, so the two no
//! longer import each other.

use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use tokio_util::sync::CancellationToken;

use super::retry::RetryPolicy;
use super::Queue;
use crate::dead_letter::{self, Category, Failure};
use crate::domain::{JobId, LeaseToken, WithdrawalId};
use crate::provider::Gateway;
use crate::storage::batch::{Writes, Written};
use crate::storage::jobs::{self as job_store, ClaimedJob, Finish};
use crate::storage::{Db, Tx};

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
    /// How often a running job extends its lease; zero disables heartbeats (the lease must then
    /// outlast the longest job).
    pub heartbeat: Duration,
    /// Polling fallback when no notification arrives.
    pub poll_interval: Duration,
    /// A job whose lease expired this many times is dead-lettered as `crashed`.
    pub max_receives: i64,
    /// A handler that fails (rather than deciding the job's outcome) is run again under this
    /// policy: exponential backoff with full jitter, counted in consecutive failed runs, its time
    /// budget from the job's creation. Exhausted, the job is dead-lettered as `infrastructure`
    /// when the last failure was our database's (SPEC §5), as `code_bug` otherwise.
    pub handler_error_policy: RetryPolicy,
    /// How long shutdown waits for in-flight jobs before handing them back.
    pub shutdown_grace: Duration,
    pub submit_policy: RetryPolicy,
    /// Added at random to a breaker deferral so deferred jobs don't stampede the probe.
    pub breaker_jitter: Duration,
    /// The shortest breaker deferral (a half-open breaker whose probes are busy says "now").
    pub breaker_min_defer: Duration,
    /// When a `pending` transfer is first polled.
    pub pending_poll: Duration,
    /// Policy of the reconciliation job: its `max_elapsed` is the reconciliation window.
    pub reconcile_policy: RetryPolicy,
    /// Policy of a settlement import whose report the provider could not serve (its own, not
    /// reconciliation's).
    pub import_policy: RetryPolicy,
    /// A withdrawal in `processing` longer than this with no live job is swept into reconciliation.
    pub processing_sla: Duration,
    pub sweep_interval: Duration,
    /// How long an attempt may still be in flight at the provider (its request timeout plus a
    /// margin). Reconciliation does not trust "not found" for an attempt younger than this.
    pub in_flight_grace: Duration,
    /// This worker pays through a sandbox provider: it pays only withdrawals marked `sandbox`,
    /// and a real worker never pays those.
    pub sandbox: bool,
    /// The daily settlement import and its grace days (SPEC §14).
    pub settlement: crate::config::SettlementSettings,
}

impl WorkerConfig {
    /// How long a job waits when the breaker is open (SPEC §5): until the breaker's next probe
    /// (`retry_in`), at least `breaker_min_defer`, plus up to `breaker_jitter` at random so the
    /// deferred jobs do not stampede the probe. The one deferral of submit and reconcile.
    pub fn breaker_deferral(&self, retry_in: Duration) -> Duration {
        let jitter_ms = u64::try_from(self.breaker_jitter.as_millis()).unwrap_or(u64::MAX);
        retry_in.max(self.breaker_min_defer)
            + Duration::from_millis(rand::Rng::gen_range(&mut rand::thread_rng(), 0..=jitter_ms))
    }

    /// Refuses settings that would break the worker's own guarantees.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.concurrency > 0 && self.batch_size > 0, "concurrency and batch size must be positive");
        anyhow::ensure!(
            !self.lease.is_zero() && !self.poll_interval.is_zero(),
            "lease and poll interval must be positive"
        );
        anyhow::ensure!(
            self.heartbeat.is_zero() || self.heartbeat * 2 < self.lease,
            "the heartbeat ({:?}) must be shorter than half the lease ({:?}), or zero to disable it",
            self.heartbeat,
            self.lease
        );
        anyhow::ensure!(!self.sweep_interval.is_zero(), "the sweep interval must be positive");
        anyhow::ensure!(self.max_receives > 0, "limits must be positive");
        self.handler_error_policy.validate().map_err(|e| anyhow::anyhow!("handler error policy: {e}"))?;
        self.submit_policy.validate().map_err(|e| anyhow::anyhow!("submit policy: {e}"))?;
        self.reconcile_policy.validate().map_err(|e| anyhow::anyhow!("reconcile policy: {e}"))?;
        self.import_policy.validate().map_err(|e| anyhow::anyhow!("settlement import policy: {e}"))?;
        Ok(())
    }

    pub fn new(worker_id: impl Into<String>) -> Self {
        Self {
            worker_id: worker_id.into(),
            queues: Queue::ALL.map(Queue::as_str).to_vec(),
            concurrency: 16,
            batch_size: 16,
            lease: Duration::from_secs(30),
            heartbeat: Duration::from_secs(10),
            poll_interval: Duration::from_secs(1),
            max_receives: 5,
            handler_error_policy: RetryPolicy::handler_errors(),
            shutdown_grace: Duration::from_secs(10),
            submit_policy: RetryPolicy::payout_submit(),
            breaker_jitter: Duration::from_secs(1),
            breaker_min_defer: Duration::from_secs(1),
            pending_poll: Duration::from_secs(5),
            reconcile_policy: RetryPolicy::reconciliation(),
            import_policy: RetryPolicy::settlement_import(),
            processing_sla: Duration::from_secs(15 * 60),
            sweep_interval: Duration::from_secs(60),
            in_flight_grace: Duration::from_secs(15),
            sandbox: false,
            settlement: crate::config::SettlementSettings::default(),
        }
    }
}

/// A handler for an extra job kind (plugged in with [`Worker::with_handler`]).
pub type Handler =
    Arc<dyn for<'a> Fn(&'a JobContext) -> crate::provider::BoxFuture<'a, anyhow::Result<()>> + Send + Sync>;

/// A worker process's shared pieces.
#[derive(Clone)]
pub struct Worker {
    pub(super) db: Db,
    pub(super) gateway: Gateway,
    pub(super) config: Arc<WorkerConfig>,
    pub(super) extra: Arc<Vec<(&'static str, i64, Handler)>>,
    /// Group commit of effect-free completions; started by [`Worker::run`].
    pub(super) finisher: Option<super::finisher::Finisher>,
}

/// What a handler gets: the leased job and the worker's services.
pub struct JobContext {
    pub job: ClaimedJob,
    pub(super) worker: Worker,
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

    /// The withdrawal this job is about.
    pub fn payload_withdrawal(&self) -> anyhow::Result<WithdrawalId> {
        self.job.withdrawal_id.ok_or_else(|| anyhow::anyhow!("job {} has no withdrawal", self.job.id))
    }

    /// Finishes the job inside `tx` and commits; if the lease was lost, rolls everything back.
    pub async fn finish_or_rollback(&self, tx: Tx, how: &Finish<'_>) -> anyhow::Result<()> {
        self.commit_finish(tx, how).await.map(drop)
    }

    /// Whether the finish committed (false: the lease was lost and everything rolled back).
    async fn commit_finish(&self, mut tx: Tx, how: &Finish<'_>) -> anyhow::Result<bool> {
        let mut writes = Writes::new();
        let finished = self.finish_in(&mut writes, how);
        let counts = writes.run(&mut tx).await?;
        self.commit_if_finished(tx, counts.applied(finished), how).await
    }

    /// This run's fenced finish as a write of a larger batch (whether it applied goes to
    /// [`JobContext::commit_if_finished`]).
    pub fn finish_in(&self, writes: &mut Writes, how: &Finish<'_>) -> Written {
        job_store::finish_in(writes, self.job.id, self.job.lease_token, how)
    }

    /// Commits `tx` if the batch's fenced finish held, or rolls all of it back if the lease was
    /// lost. Retries that consumed an attempt are counted here, once committed, for every job
    /// kind. Returns whether it committed.
    pub async fn commit_if_finished(&self, tx: Tx, finished: bool, how: &Finish<'_>) -> anyhow::Result<bool> {
        if !finished {
            drop(tx);
            tracing::warn!(event = "lease_lost", "lease lost before finishing; this run's writes were rolled back");
            return Ok(false);
        }
        tx.commit().await?;
        if matches!(how, Finish::Reschedule { consumed_attempt: true, .. }) {
            crate::metrics::job_retry(&self.job.queue, &self.job.kind);
        }
        Ok(true)
    }

    /// Dead-letters the job: envelope, withdrawal parked, job dead — one fenced transaction. An
    /// error (the dead-letter store is down) rolls all of it back; the runner then retries later.
    /// Exhausted retry budgets are counted here, once committed, for every job kind.
    pub async fn dead_letter(&self, mut tx: Tx, failure: &Failure) -> anyhow::Result<()> {
        dead_letter::bury(&mut tx, &self.job, failure, self.worker_id()).await?;
        let committed = self.commit_finish(tx, &Finish::Dead { error: &failure.error_code }).await?;
        if committed && failure.category == Category::RetriesExhausted {
            crate::metrics::job_retries_exhausted(&self.job.queue, &self.job.kind);
        }
        Ok(())
    }

    /// Finishes the job in a transaction of its own. A plain success has nothing to write beside
    /// the job row, so it goes through the worker's group commit ([`super::finisher`]).
    pub async fn finish_in_own_tx(&self, how: &Finish<'_>) -> anyhow::Result<()> {
        if let (Finish::Succeeded, Some(finisher)) = (how, &self.worker.finisher) {
            if !finisher.succeed(self.job.id, self.job.lease_token).await? {
                tracing::warn!(event = "lease_lost", "lease lost before finishing; another worker holds the job");
            }
            return Ok(());
        }
        let tx = self.db().begin().await?;
        self.finish_or_rollback(tx, how).await
    }

    /// Whether this run still holds its lease, checked right before a provider call (work that
    /// must only happen under the lease), as a write of a larger batch: in the same write the
    /// lease is extended and the job's first attempt marked (the start of its `max_elapsed`
    /// budget). Whether it applied goes to [`JobContext::leased_for_attempt`].
    pub fn lease_for_attempt_in(&self, writes: &mut Writes) -> Written {
        let lease = TimeDelta::from_std(self.config().lease).unwrap_or(TimeDelta::seconds(30));
        job_store::extend_lease_in(writes, self.job.id, self.job.lease_token, lease, true)
    }

    /// `held`, logged when the lease was lost (the caller must then roll back and send nothing).
    pub fn leased_for_attempt(&self, held: bool) -> bool {
        if !held {
            tracing::warn!(event = "lease_lost", "lease lost before calling the provider; nothing sent");
        }
        held
    }
}

pub(crate) async fn heartbeat_loop(worker: Worker, job: JobId, token: LeaseToken, stop: CancellationToken) {
    if worker.config.heartbeat.is_zero() {
        return;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_breaker_deferral_waits_for_the_probe_at_least_the_minimum_plus_bounded_jitter() {
        let mut config = WorkerConfig::new("w");
        config.breaker_min_defer = Duration::from_millis(500);
        config.breaker_jitter = Duration::from_millis(100);
        for _ in 0..200 {
            let short = config.breaker_deferral(Duration::from_millis(10));
            assert!(short >= Duration::from_millis(500) && short <= Duration::from_millis(600), "{short:?}");
            let long = config.breaker_deferral(Duration::from_secs(5));
            assert!(long >= Duration::from_secs(5) && long <= Duration::from_millis(5_100), "{long:?}");
        }
        config.breaker_jitter = Duration::ZERO;
        assert_eq!(config.breaker_deferral(Duration::from_secs(2)), Duration::from_secs(2));
    }
}
