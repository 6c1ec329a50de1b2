//! What a job handler is given (SPEC §5): the worker's settings ([`WorkerConfig`]), its shared
//! services ([`Worker`]), and the leased job with the fenced ways to finish it ([`JobContext`]),
//! plus the lease heartbeat. The handlers (`submit`, `reconcile`, `settlement`, `payout_batch`)
//! depend on this module only; the runner in [`super::worker`] depends on them, so the two no
//! longer import each other.

use std::sync::Arc;

use chrono::TimeDelta;
use tokio_util::sync::CancellationToken;

pub use crate::config::WorkerConfig;
use crate::dead_letter::{self, Category, Failure};
use crate::domain::{JobKey, LeaseToken, WithdrawalId};
use crate::provider::Gateways;
use crate::storage::batch::{Sql, Writes, Written};
use crate::storage::jobs::{self as job_store, ClaimedJob, Finish};
use crate::storage::{Db, Tx};

/// A handler for an extra job kind (plugged in with [`Worker::with_handler`]).
pub type Handler =
    Arc<dyn for<'a> Fn(&'a JobContext) -> crate::provider::BoxFuture<'a, anyhow::Result<()>> + Send + Sync>;

/// A worker process's shared pieces.
#[derive(Clone)]
pub struct Worker {
    pub(super) db: Db,
    /// Every provider, for routing (SPEC §16).
    pub(super) gateways: Gateways,
    pub(super) config: Arc<WorkerConfig>,
    pub(super) extra: Arc<Vec<(&'static str, i64, Handler)>>,
    /// Group commit of effect-free completions; started by [`Worker::run`].
    pub(super) finisher: Option<super::finisher::Finisher>,
    /// Customer notifications' HTTP client and per-endpoint breakers (SPEC §17).
    pub(super) notify: Arc<super::delivery::Deliverer>,
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

    /// Every configured provider: a handler picks the one its withdrawal is routed to or its
    /// latest attempt went to ([`Gateways::for_withdrawal`]).
    pub fn gateways(&self) -> &Gateways {
        &self.worker.gateways
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
        job_store::finish_in(writes, self.job.key(), self.job.lease_token, how)
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
            if !finisher.succeed(self.job.key(), self.job.lease_token).await? {
                tracing::warn!(event = "lease_lost", "lease lost before finishing; another worker holds the job");
            }
            return Ok(());
        }
        let tx = self.db().begin().await?;
        self.finish_or_rollback(tx, how).await
    }

    /// Succeeds with `writes` of the run's own, through the worker's group commit
    /// ([`super::finisher::Finisher::succeed_with`]: only plain writes that cannot fail on another
    /// run's rows), or in a transaction of its own where there is no finisher; either way the
    /// writes apply only if the lease held.
    pub async fn succeed_with(&self, writes: Vec<Sql>) -> anyhow::Result<()> {
        if let Some(finisher) = &self.worker.finisher {
            if !finisher.succeed_with(self.job.key(), self.job.lease_token, writes).await? {
                tracing::warn!(event = "lease_lost", "lease lost before finishing; this run's writes were dropped");
            }
            return Ok(());
        }
        let mut tx = self.db().begin().await?;
        let mut batch = Writes::new();
        for sql in writes {
            batch.push(sql);
        }
        batch.run(&mut tx).await?;
        self.finish_or_rollback(tx, &Finish::Succeeded).await
    }

    /// Whether this run still holds its lease, checked right before a provider call (work that
    /// must only happen under the lease), as a write of a larger batch: in the same write the
    /// lease is extended and the job's first attempt marked (the start of its `max_elapsed`
    /// budget). Whether it applied goes to [`JobContext::leased_for_attempt`].
    pub fn lease_for_attempt_in(&self, writes: &mut Writes) -> Written {
        let lease = TimeDelta::from_std(self.config().lease).unwrap_or(TimeDelta::seconds(30));
        job_store::extend_lease_in(writes, self.job.key(), self.job.lease_token, lease, true)
    }

    /// `held`, logged when the lease was lost (the caller must then roll back and send nothing).
    pub fn leased_for_attempt(&self, held: bool) -> bool {
        if !held {
            tracing::warn!(event = "lease_lost", "lease lost before calling the provider; nothing sent");
        }
        held
    }
}

pub(crate) async fn heartbeat_loop(worker: Worker, job: JobKey, token: LeaseToken, stop: CancellationToken) {
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
