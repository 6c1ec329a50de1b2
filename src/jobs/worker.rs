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

use super::context::heartbeat_loop;
pub use super::context::{Handler, JobContext, Worker, WorkerConfig};
use super::retry::{Exhausted, RetryDecision};
use super::{
    enqueue_reconciliation, payout_batch, reconcile, submit, ApplyWebhookEvent, DeliverNotification, ImportSettlement,
    JobKind, Queue, ReconcilePayout, SubmitPayout,
};
use crate::dead_letter::{self, Category, Failure};
use crate::provider::Gateways;
use crate::storage::jobs::{self as job_store, ClaimedJob, Finish};
use crate::storage::{Db, DbTime};

impl Worker {
    /// A worker paying through `gateways` (one [`Gateway`] converts: the one-provider case).
    pub fn new(db: Db, gateways: impl Into<Gateways>, config: WorkerConfig) -> Self {
        let notify = Arc::new(super::delivery::Deliverer::new(&config.notify));
        Self {
            db,
            gateways: gateways.into(),
            config: Arc::new(config),
            extra: Arc::new(Vec::new()),
            finisher: None,
            notify,
        }
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
        if self.config.queues.contains(&Queue::Notifications.as_str()) {
            let every = self.config.notify.dispatch_interval;
            tracker.spawn(super::notify::run_dispatcher(self.db.clone(), every, shutdown.clone()));
        }
        // The notifications queue runs on its own slots: a slow or dead endpoint never holds a
        // payout's.
        let notify_permits = Arc::new(Semaphore::new(self.config.notify.concurrency.max(1)));
        // Deliveries that finish wake the claim loop (once half their slots are free): a round that
        // found every delivery slot busy skipped the queue, and its due jobs must not wait for the
        // poll interval.
        let slot_freed = Arc::new(Notify::new());
        capture_panic_backtraces();
        tracing::info!(worker_id = %self.config.worker_id, queues = ?self.config.queues, "worker started");

        while !shutdown.is_cancelled() {
            let claimed = self.claim_round(&permits, (&notify_permits, &slot_freed), &tracker, &handlers_stop).await;
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
                _ = slot_freed.notified() => {}
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

    /// One claim round over every queue; true if anything was claimed. A delivery job signals
    /// `slot_freed` when it ends.
    async fn claim_round(
        &self,
        payout_permits: &Arc<Semaphore>,
        (notify_permits, slot_freed): (&Arc<Semaphore>, &Arc<Notify>),
        tracker: &TaskTracker,
        stop: &CancellationToken,
    ) -> anyhow::Result<bool> {
        let mut any = false;
        // Start from a different queue each round so a busy queue cannot starve the others.
        let start = ROUND.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % self.config.queues.len().max(1);
        let rotated = self.config.queues.iter().cycle().skip(start).take(self.config.queues.len());
        for queue in rotated {
            let notifications = *queue == Queue::Notifications.as_str();
            let (permits, slots) = match notifications {
                true => (notify_permits, self.config.notify.concurrency.max(1)),
                false => (payout_permits, self.config.concurrency),
            };
            let batch = (self.config.batch_size as usize).min(slots);
            let free = permits.available_permits().min(batch);
            if notifications && free == 0 {
                // Every delivery slot is busy: the other queues are claimed meanwhile, never
                // made to wait for an endpoint.
                continue;
            }
            if !notifications && free < batch.div_ceil(2) {
                // Wait until half a batch of slots is free rather than claiming jobs nobody can
                // run yet, or one job per freed slot (a claim transaction per job under load).
                // Deliveries finishing meanwhile end the wait (the notifications queue is not
                // made to wait for payouts either), re-armed for the loop's next round.
                tokio::select! {
                    slots = permits.clone().acquire_many_owned(batch.div_ceil(2) as u32) => drop(slots?),
                    _ = slot_freed.notified() => slot_freed.notify_one(),
                }
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
                let freed = notifications.then(|| (slot_freed.clone(), permits.clone(), slots.div_ceil(2)));
                tracker.spawn(async move {
                    ctx.run(stop).await;
                    drop(permit);
                    // Once half the slots are free: the next claim takes several jobs in one
                    // transaction rather than one per finished delivery.
                    if let Some((freed, permits, half)) = freed {
                        if permits.available_permits() >= half {
                            freed.notify_one();
                        }
                    }
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
            tokio::spawn(heartbeat_loop(self.worker.clone(), self.job.key(), self.job.lease_token, heartbeat.clone()));
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
            JobKind::ApplyWebhookEvent => match serde_json::from_slice::<ApplyWebhookEvent>(&payload) {
                Ok(p) => super::webhook::handle(self, p).await,
                Err(err) => self.poison("undecodable_payload", &err.to_string()).await,
            },
            JobKind::DeliverNotification => match serde_json::from_slice::<DeliverNotification>(&payload) {
                Ok(p) => super::notify::handle(self, p).await,
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
        job_store::kill_expired(&mut tx, job.key(), &failure.error_code).await?
    } else {
        job_store::finish(&mut tx, job.key(), job.lease_token, &Finish::Dead { error: &failure.error_code }).await?
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
                let providers = self.config.providers.as_ref();
                let scheduled =
                    super::settlement::schedule_daily(&self.db, &self.config.settlement, &self.gateways, providers);
                if let Err(err) = scheduled.await {
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

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
