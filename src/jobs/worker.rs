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

use super::retry::{Exhausted, RetryDecision, RetryPolicy};
use super::{
    enqueue_reconciliation, payout_batch, reconcile, submit, ImportSettlement, JobKind, Queue, ReconcilePayout,
    SubmitPayout,
};
use crate::dead_letter::{self, Category, Failure};
use crate::domain::{JobId, LeaseToken, WithdrawalId};
use crate::provider::Gateway;
use crate::storage::batch::{Writes, Written};
use crate::storage::jobs::{self as job_store, ClaimedJob, Finish};
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
    db: Db,
    gateway: Gateway,
    config: Arc<WorkerConfig>,
    extra: Arc<Vec<(&'static str, i64, Handler)>>,
    /// Group commit of effect-free completions; started by [`Worker::run`].
    finisher: Option<super::finisher::Finisher>,
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

impl Worker {
    pub fn new(db: Db, gateway: Gateway, config: WorkerConfig) -> Self {
        Self { db, gateway, config: Arc::new(config), extra: Arc::new(Vec::new()), finisher: None }
    }

    /// Registers a handler for another job kind and payload version (the built-in kinds are
    /// dispatched in `JobContext::dispatch`).
    pub fn with_handler(mut self, kind: &'static str, version: i64, handler: Handler) -> Self {
        Arc::make_mut(&mut self.extra).push((kind, version, handler));
        self
    }

    /// Runs until `shutdown` is cancelled, then stops claiming, gives in-flight jobs
    /// `shutdown_grace` to finish, and hands back those still running.
    pub async fn run(mut self, shutdown: CancellationToken) -> anyhow::Result<()> {
        self.finisher = Some(super::finisher::Finisher::start(self.db.clone(), self.config.concurrency));
        self.config.validate()?;
        crate::metrics::install();
        let wake = Arc::new(Notify::new());
        job_store::listen(&self.db, wake.clone(), shutdown.clone()).await.context("cannot listen for jobs")?;
        let tracker = TaskTracker::new();
        let permits = Arc::new(Semaphore::new(self.config.concurrency));
        let handlers_stop = CancellationToken::new();
        tracker.spawn(self.clone().reap_leases(shutdown.clone()));
        tracker.spawn(self.clone().sweep_stuck(shutdown.clone()));
        tracker.spawn(super::replay::run_releaser(self.db.clone(), self.config.worker_id.clone(), shutdown.clone()));
        capture_panic_backtraces();
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
        // Start from a different queue each round so a busy queue cannot starve the others.
        let start = ROUND.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % self.config.queues.len().max(1);
        let rotated = self.config.queues.iter().cycle().skip(start).take(self.config.queues.len());
        for queue in rotated {
            let batch = (self.config.batch_size as usize).min(self.config.concurrency);
            let free = permits.available_permits().min(batch);
            if free < batch.div_ceil(2) {
                // Wait until half a batch of slots is free rather than claiming jobs nobody can
                // run yet, or one job per freed slot (a claim transaction per job under load).
                let slots = permits.clone().acquire_many_owned(batch.div_ceil(2) as u32).await?;
                drop(slots);
                return Ok(true);
            }
            let lease = TimeDelta::from_std(self.config.lease)?;
            let jobs = job_store::claim(&self.db, queue, &self.config.worker_id, free as u32, lease).await?;
            any |= !jobs.is_empty();
            // First payouts run as one batch (`payout_batch`); every other job alone.
            let (mut batch, mut alone) = (Vec::new(), Vec::new());
            for job in jobs {
                match payout_batch::batchable(&job) {
                    Some(payload) => {
                        batch.push(payout_batch::Submit { ctx: JobContext { job, worker: self.clone() }, payload })
                    }
                    None => alone.push(job),
                }
            }
            if !batch.is_empty() {
                let slots = permits.clone().acquire_many_owned(batch.len() as u32).await?;
                let stop = stop.clone();
                tracker.spawn(async move {
                    payout_batch::run(batch, stop).await;
                    drop(slots);
                });
            }
            for job in alone {
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

    /// Every half lease: [`Worker::reap_once`].
    async fn reap_leases(self, shutdown: CancellationToken) {
        let mut every = tokio::time::interval(self.config.lease / 2);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = every.tick() => {}
            }
            if let Err(err) = self.reap_once().await {
                tracing::warn!(error = format!("{err:#}"), "lease reaper failed");
            }
        }
    }

    /// Expired leases go back to the queue, or — after `max_receives` — are dead-lettered as
    /// `crashed`. Returns how many were dead-lettered.
    pub async fn reap_once(&self) -> anyhow::Result<usize> {
        let crashed = job_store::expire_leases(&self.db, self.config.max_receives).await?;
        let mut buried = 0;
        for job in crashed {
            let failure = Failure::new(
                Category::Crashed,
                "lease_expired",
                "crash",
                format!("the job's lease expired {} times without it finishing", job.lease_expiries + 1),
            );
            match kill(&self.db, &job, &self.config.worker_id, &failure, true).await {
                Ok(()) => buried += 1,
                Err(err) => {
                    tracing::warn!(error = format!("{err:#}"), job_id = %job.id, "could not dead-letter crashed job")
                }
            }
        }
        Ok(buried)
    }
}

impl JobContext {
    /// The span of this job's run: its id, kind, withdrawal, correlation id and attempt.
    pub fn span(&self) -> tracing::Span {
        tracing::info_span!(
            "job",
            job_id = %self.job.id,
            kind = %self.job.kind,
            withdrawal_id = %self.job.withdrawal_id.map(|w| w.to_string()).unwrap_or_default(),
            correlation_id = %self.job.correlation_id,
            attempt = self.job.attempts + 1,
        )
    }

    pub(super) fn worker(&self) -> &Worker {
        &self.worker
    }

    /// Runs the job alone: its handler under a heartbeat, with the runner's handling of errors,
    /// panics and shutdown.
    pub(super) async fn run(self, stop: CancellationToken) {
        let span = self.span();
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
                Some(Ok(Err(err))) => self.handler_failed(err).await,
                Some(Err(panic)) => {
                    let message = panic_message(&panic);
                    tracing::error!(panic = %message, "handler panicked; dead-lettering as code_bug");
                    let failure = Failure::new(
                        Category::CodeBug,
                        "handler_panicked",
                        "panic",
                        format!("handler panicked: {message}"),
                    )
                    .with_stack(LAST_PANIC_BACKTRACE.with(|b| b.borrow_mut().take()));
                    if let Err(err) = kill(&self.worker.db, &self.job, self.worker_id(), &failure, false).await {
                        // The lease will expire and the job run again: nothing is lost.
                        tracing::warn!(error = format!("{err:#}"), "could not dead-letter the panicked job");
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

    /// The handler failed instead of deciding: run it again under the handler-error policy
    /// (backoff with full jitter; no attempt of the job's own policy consumed; the lease fences
    /// any double run), or, the policy exhausted, dead-letter the job — as `infrastructure` when
    /// the last failure was our database's (SPEC §5), as `code_bug` when it keeps failing for
    /// another reason.
    async fn handler_failed(&self, err: anyhow::Error) {
        let infrastructure = crate::storage::is_infrastructure(&err);
        let runs = u32::try_from(self.job.handler_errors + 1).unwrap_or(u32::MAX);
        let age = self
            .job
            .id
            .0
            .get_timestamp()
            .map(|t| {
                let (secs, nanos) = t.to_unix();
                let created = std::time::UNIX_EPOCH + Duration::new(secs, nanos);
                std::time::SystemTime::now().duration_since(created).unwrap_or_default()
            })
            .unwrap_or_default();
        let decision = self.config().handler_error_policy.next_delay(runs, age, None, &mut rand::thread_rng());
        match decision {
            RetryDecision::RetryAfter(delay) => {
                crate::metrics::job_retry(&self.job.queue, &self.job.kind);
                tracing::warn!(
                    error = format!("{err:#}"),
                    infrastructure,
                    failed_runs = runs,
                    retry_in_ms = delay.as_millis() as u64,
                    "job run failed; rescheduling with backoff"
                );
                let run_at = DbTime::after(delay);
                let error = if infrastructure { "infrastructure error" } else { "handler error" };
                let how = Finish::HandlerError { run_at, error };
                if let Err(err) = self.finish_in_own_tx(&how).await {
                    tracing::warn!(error = format!("{err:#}"), "could not reschedule; the lease will expire");
                }
            }
            RetryDecision::Exhausted(why) => {
                let (category, code, class) = match infrastructure {
                    true => (Category::Infrastructure, "infrastructure_error", "retryable"),
                    false => (Category::CodeBug, "handler_error", "bug"),
                };
                tracing::error!(
                    error = format!("{err:#}"),
                    category = category.as_str(),
                    failed_runs = runs,
                    "handler keeps failing; dead-lettering"
                );
                let budget = match why {
                    Exhausted::Attempts => "runs",
                    Exhausted::Elapsed => "time",
                };
                let failure = Failure::new(
                    category,
                    code,
                    class,
                    format!("{runs} runs in a row failed (the {budget} budget ran out); last error: {err:#}"),
                );
                if let Err(err) = kill(&self.worker.db, &self.job, self.worker_id(), &failure, false).await {
                    tracing::warn!(error = format!("{err:#}"), "could not dead-letter; the lease will expire");
                }
            }
        }
    }

    async fn dispatch(&self) -> anyhow::Result<()> {
        let version = self.job.payload_version;
        crate::metrics::job_attempt(&self.job.queue, &self.job.kind);
        let Ok(kind) = self.job.kind.parse::<JobKind>() else {
            let name = self.job.kind.as_str();
            let extra = self.worker.extra.iter().find(|(k, v, _)| *k == name && *v == version);
            return match extra {
                Some((_, _, handler)) => handler(self).await,
                None => {
                    let message = format!("no handler for {name} payload version {version}");
                    self.poison("unknown_payload_version", &message).await
                }
            };
        };
        // Older producers' payloads are upgraded by the registered migrations first.
        let payload = match super::payload::upgrade(kind, version, &self.job.payload) {
            Ok((payload, _)) => payload,
            Err(err) => return self.poison(err.code(), &err.to_string()).await,
        };
        match kind {
            JobKind::SubmitPayout => match serde_json::from_slice::<SubmitPayout>(&payload) {
                Ok(p) if p.operation_key == p.withdrawal_id.to_string() => submit::handle(self, p).await,
                Ok(_) => self.poison("undecodable_payload", "operation_key must be the withdrawal id").await,
                Err(err) => self.poison("undecodable_payload", &err.to_string()).await,
            },
            JobKind::ReconcilePayout => match serde_json::from_slice::<ReconcilePayout>(&payload) {
                Ok(p) => reconcile::handle(self, p).await,
                Err(err) => self.poison("undecodable_payload", &err.to_string()).await,
            },
            JobKind::ImportSettlement => match serde_json::from_slice::<ImportSettlement>(&payload) {
                Ok(p) => super::settlement::handle(self, p).await,
                Err(err) => self.poison("undecodable_payload", &err.to_string()).await,
            },
        }
    }

    /// A payload that cannot be run — undecodable, of an unknown version, or naming a withdrawal
    /// that does not exist (no retry can make it exist): dead-lettered at once as `bad_payload`
    /// with its raw bytes; the worker moves on.
    pub(super) async fn poison(&self, code: &str, message: &str) -> anyhow::Result<()> {
        tracing::error!(error_code = code, "poison job");
        let failure = Failure::poison(code, message);
        let tx = self.db().begin().await?;
        self.dead_letter(tx, &failure).await
    }
}

/// Dead-letters a job outside the normal handler path (panics, crashed leases).
async fn kill(db: &Db, job: &ClaimedJob, worker: &str, failure: &Failure, expired_lease: bool) -> anyhow::Result<()> {
    let mut tx = db.begin().await?;
    let killed = if expired_lease {
        job_store::kill_expired(&mut tx, job.id, &failure.error_code).await?
    } else {
        job_store::finish(&mut tx, job.id, job.lease_token, &Finish::Dead { error: &failure.error_code }).await?
    };
    if !killed {
        return Ok(());
    }
    dead_letter::bury(&mut tx, job, failure, worker).await?;
    tx.commit().await?;
    Ok(())
}

impl Worker {
    /// Every `sweep_interval`: withdrawals stuck in `processing` past the SLA with no live job
    /// get a reconciliation (SPEC §7). On PostgreSQL one instance sweeps at a time.
    async fn sweep_stuck(self, shutdown: CancellationToken) {
        let mut every = tokio::time::interval(self.config.sweep_interval);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = every.tick() => {}
            }
            if let Err(err) = self.sweep_once().await {
                tracing::warn!(error = format!("{err:#}"), "stuck-processing sweep failed");
            }
            if !self.config.sandbox {
                if let Err(err) = super::settlement::schedule_daily(&self.db, &self.config.settlement).await {
                    tracing::warn!(error = format!("{err:#}"), "could not schedule the settlement import");
                }
            }
        }
    }

    pub async fn sweep_once(&self) -> anyhow::Result<usize> {
        let sla = TimeDelta::from_std(self.config.processing_sla)?;
        let mut tx = self.db.begin().await?;
        let Some(stuck) =
            crate::storage::reconciliations::stuck_processing(&mut tx, DbTime::now().plus(-sla), 100).await?
        else {
            return Ok(0);
        };
        let mut enqueued = 0;
        for id in &stuck {
            let correlation = format!("sweep-{}", uuid::Uuid::new_v4());
            enqueued += usize::from(
                enqueue_reconciliation(&mut tx, *id, "stuck_processing", &correlation, DbTime::now()).await?.is_some(),
            );
        }
        tx.commit().await?;
        if enqueued > 0 {
            tracing::warn!(count = enqueued, "withdrawals stuck in processing sent to reconciliation");
        }
        Ok(enqueued)
    }
}

static ROUND: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    /// The backtrace of the last panic on this thread, taken by the panic hook so the runner can
    /// put it in the `code_bug` dead letter (catch_unwind alone loses it).
    static LAST_PANIC_BACKTRACE: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

fn capture_panic_backtraces() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let trace = std::backtrace::Backtrace::force_capture().to_string();
            LAST_PANIC_BACKTRACE.with(|b| *b.borrow_mut() = Some(trace));
            previous(info);
        }));
    });
}

pub(super) async fn heartbeat_loop(worker: Worker, job: JobId, token: LeaseToken, stop: CancellationToken) {
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

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
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
