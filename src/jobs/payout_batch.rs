//! A claimed batch of first payouts as one unit of database work (SPEC §4, §5).
//!
//! The worker hands the `submit_payout` jobs of each claim here, and the batch runs in three
//! steps instead of three transactions per withdrawal:
//!
//! 1. **Before the calls, one transaction.** The withdrawals and their last attempts in one read;
//!    then the lease checks of the whole batch; then the guarded `pending → processing` moves of
//!    the rows whose lease held; then, for the rows whose move applied, their transition rows and
//!    write-ahead attempt rows (side effect unknown). Each of these is one statement on PostgreSQL
//!    ([`Writes`]); each row's guard result decides what else is written for it.
//! 2. **The provider calls**, concurrently, each through the breaker.
//! 3. **After them, one fenced transaction.** The finishes of the whole batch (each fenced by its
//!    lease); then the attempt outcomes and guarded moves of the rows whose lease held; then the
//!    transition rows and ledger entries of the moves that applied (each balance row once per
//!    statement, in a fixed order); then, row by row and only where the answer asks for it, a
//!    reconciliation to follow or a dead letter — in the same transaction.
//!
//! A stale row — moved by reconciliation or an operator while its call was in flight — writes
//! nothing but its own attempt outcome and job finish, and the batch's other rows are unaffected.
//!
//! Anything unusual goes to the one-job path ([`super::submit::handle`]), which decides from the
//! database again: a withdrawal that is not `pending`, has an earlier attempt, is on the other side
//! of the sandbox, or meets an open breaker. A batch that fails (the database is down) or panics
//! falls back the same way. That is always safe: every write is fenced by the job's lease, and an
//! attempt committed without an outcome sends the one-job path to reconciliation, never to a
//! second call.

use std::collections::{HashMap, HashSet};

use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::context::JobContext;
use super::submit::{self, AfterCall, Next};
use super::{enqueue_reconciliation, JobKind, SubmitPayout};
use crate::dead_letter::{self, Category};
use crate::domain::{Actor, AttemptId, Withdrawal, WithdrawalStatus};
use crate::provider::breaker::Permit;
use crate::provider::Gateway;
use crate::storage::attempts;
use crate::storage::batch::{Writes, Written};
use crate::storage::jobs::{ClaimedJob, Finish};
use crate::storage::withdrawals::{self as store, Balance, TransitionRequest};
use crate::storage::DbTime;

/// A claimed submit job whose payload decoded.
pub struct Submit {
    pub ctx: JobContext,
    pub payload: SubmitPayout,
}

/// The payload of a job the batch can take: a `submit_payout` at the current version whose
/// payload decodes and names its withdrawal as the operation key. Any other job runs alone (and a
/// bad payload is dead-lettered there as poison).
pub fn batchable(job: &ClaimedJob) -> Option<SubmitPayout> {
    if job.builtin_kind() != Some(JobKind::SubmitPayout) || job.payload_version != SubmitPayout::VERSION {
        return None;
    }
    serde_json::from_slice::<SubmitPayout>(&job.payload)
        .ok()
        .filter(|p| p.operation_key == p.withdrawal_id.to_string() && job.withdrawal_id == Some(p.withdrawal_id))
}

/// Runs a claimed batch; the jobs it leaves to the one-job path run there, concurrently, before
/// this returns. On `stop` every job still held is handed back.
pub async fn run(batch: Vec<Submit>, stop: CancellationToken) {
    let beats = CancellationToken::new();
    for s in &batch {
        tokio::spawn(super::context::heartbeat_loop(
            s.ctx.worker().clone(),
            s.ctx.job.key(),
            s.ctx.job.lease_token,
            beats.clone(),
        ));
    }
    let outcome = tokio::select! {
        outcome = std::panic::AssertUnwindSafe(pipeline(&batch)).catch_unwind() => Some(outcome),
        _ = stop.cancelled() => None,
    };
    beats.cancel();
    let alone: HashSet<usize> = match outcome {
        Some(Ok(Ok(alone))) => alone,
        Some(Ok(Err(err))) => {
            tracing::warn!(
                error = format!("{err:#}"),
                jobs = batch.len(),
                job_ids = ?batch.iter().map(|s| s.ctx.job.id).collect::<Vec<_>>(),
                "payout batch failed; its jobs run one by one"
            );
            (0..batch.len()).collect()
        }
        Some(Err(_panic)) => {
            tracing::error!(
                jobs = batch.len(),
                job_ids = ?batch.iter().map(|s| s.ctx.job.id).collect::<Vec<_>>(),
                "payout batch panicked; its jobs run one by one"
            );
            (0..batch.len()).collect()
        }
        None => {
            // Shutting down: hand every job back (a finished one's fenced release changes nothing).
            for s in &batch {
                if let Err(err) = s.ctx.finish_in_own_tx(&Finish::Release).await {
                    tracing::warn!(error = format!("{err:#}"), job_id = %s.ctx.job.id, "could not release the job");
                }
            }
            return;
        }
    };
    let runs = batch.into_iter().enumerate().filter(|(i, _)| alone.contains(i)).map(|(_, s)| s.ctx.run(stop.clone()));
    futures::future::join_all(runs).await;
}

/// A row that will be called: its withdrawal, provider, breaker permit and write-ahead attempt.
struct Call<'a> {
    row: usize,
    withdrawal: Withdrawal,
    gateway: &'a Gateway,
    permit: Permit,
    attempt: AttemptId,
}

/// The batch's three steps; returns the rows left to the one-job path.
async fn pipeline(batch: &[Submit]) -> anyhow::Result<HashSet<usize>> {
    let Some(first) = batch.first() else { return Ok(HashSet::new()) };
    let actor = Actor::Worker(first.ctx.worker_id().to_owned());
    let (calls, alone) = before_calls(batch, &actor).await?;
    let first_attempt_at = DbTime::now();

    let answers = futures::future::join_all(calls.into_iter().map(|call| {
        let ctx = &batch[call.row].ctx;
        async move {
            let outcome = submit::call(ctx, call.gateway, &call.withdrawal, call.permit, 1).await;
            (call.row, call.withdrawal, call.attempt, outcome, call.gateway)
        }
        .instrument(ctx.span())
    }))
    .await;

    // After the calls: one fenced transaction for the whole batch; if it fails, each row in a
    // transaction of its own, so one row's error leaves the others' decisions committed.
    let decisions: Vec<Row> = answers
        .iter()
        .map(|(row, w, attempt, outcome, gateway)| {
            (*row, w, *attempt, AfterCall::of(&batch[*row].ctx, gateway, outcome, w, 1, first_attempt_at))
        })
        .collect();
    let mut alone = alone;
    if let Err(err) = after_calls(batch, &decisions, &actor).await {
        tracing::warn!(
            error = format!("{err:#}"),
            rows = decisions.len(),
            "the batch's closing transaction failed; writing its rows one by one"
        );
        for one in decisions.chunks(1) {
            if let Err(err) = after_calls(batch, one, &actor).await {
                let _span = batch[one[0].0].ctx.span().entered();
                // Its attempt stays without an outcome: the one-job path sends it to
                // reconciliation, which asks the provider (never a second call).
                tracing::warn!(error = format!("{err:#}"), "this row's outcome could not be written; it runs alone");
                alone.insert(one[0].0);
            }
        }
    }
    Ok(alone)
}

/// A called row: its index in the batch, its withdrawal as read before the calls, its attempt,
/// and what the provider's answer decides.
type Row<'a> = (usize, &'a Withdrawal, AttemptId, AfterCall<'a>);

/// Step 3 for `rows` (the whole batch, or one row when the whole batch failed): one fenced
/// transaction, then the metrics of what it committed.
async fn after_calls(batch: &[Submit], rows: &[Row<'_>], actor: &Actor) -> anyhow::Result<()> {
    let db = batch[0].ctx.db();
    let mut tx = db.begin().await?;
    // The finishes first: a row whose lease was lost writes nothing else.
    let mut writes = Writes::new();
    let finishes: Vec<Written> =
        rows.iter().map(|(row, _, _, d)| batch[*row].ctx.finish_in(&mut writes, &finish_of(&d.next))).collect();
    let ran = writes.run(&mut tx).await?;
    let held: Vec<_> = rows
        .iter()
        .zip(finishes)
        .filter(|((row, ..), finished)| {
            let held = ran.applied(*finished);
            if !held {
                let _span = batch[*row].ctx.span().entered();
                tracing::warn!(event = "lease_lost", "lease lost before finishing; this run's outcome was not written");
            }
            held
        })
        .map(|(decision, _)| decision)
        .collect();
    // The attempt outcomes and the guarded moves out of `processing`, each guarded by the version
    // its claim left (the one read before the calls, plus the claim's own bump): a row changed
    // meanwhile, even with its status unchanged, is a stale move.
    let settles: Vec<Option<TransitionRequest>> = held
        .iter()
        .map(|(row, w, _, d)| d.settle(w.key(), actor, &batch[*row].ctx.job.correlation_id, Some(w.version + 1)))
        .collect();
    let mut writes = Writes::new();
    let mut guards = Vec::with_capacity(held.len());
    for ((_, w, attempt, d), settle) in held.iter().zip(&settles) {
        attempts::record_outcome_in(&mut writes, w.account_id, *attempt, &d.record);
        guards.push(settle.as_ref().map(|req| store::transition_known_in(&mut writes, req)).transpose()?);
    }
    let ran = writes.run(&mut tx).await?;
    // The transition rows and ledger entries of the moves that applied, each balance row once
    // per statement and in one order (two batches cannot wait on each other's balances).
    let mut moves: Vec<_> = held
        .iter()
        .zip(&settles)
        .zip(&guards)
        .filter_map(|(((row, w, _, _), settle), guard)| Some((*row, *w, settle.as_ref()?, (*guard)?)))
        .collect();
    moves.sort_by_key(|(_, w, _, _)| (w.account_id.0, w.amount.currency().code()));
    let mut rounds: Vec<(Writes, HashSet<Balance>)> = Vec::new();
    let mut applied = Vec::with_capacity(moves.len());
    for (row, w, req, guard) in moves {
        let _span = batch[row].ctx.span().entered();
        let balance = store::balance_of(w);
        let round = match rounds.iter().position(|(_, used)| !used.contains(&balance)) {
            Some(i) => i,
            None => {
                rounds.push((Writes::new(), HashSet::new()));
                rounds.len() - 1
            }
        };
        if guard.settle_in(&mut rounds[round].0, &ran, w, req) {
            rounds[round].1.insert(balance);
            applied.push(req);
        }
    }
    for (writes, _) in &rounds {
        writes.run(&mut tx).await?;
    }
    store::applied_many(&mut tx, &applied).await?;
    // What only some answers ask for, row by row: a reconciliation to follow, a dead letter.
    for (row, w, _, d) in &held {
        let ctx = &batch[*row].ctx;
        // In the job's span, so their log lines carry its withdrawal, job and correlation ids.
        async {
            if let Some((reason, run_at)) = d.follow_up {
                enqueue_reconciliation(&mut tx, w.key(), reason, &ctx.job.correlation_id, run_at).await?;
            }
            if let Next::DeadLetter(failure) = &d.next {
                dead_letter::bury(&mut tx, &ctx.job, failure, ctx.worker_id()).await?;
            }
            anyhow::Ok(())
        }
        .instrument(ctx.span())
        .await?;
    }
    tx.commit().await?;

    for (row, _, _, d) in &held {
        let job = &batch[*row].ctx.job;
        crate::metrics::job_attempt(&job.queue, &job.kind);
        match &d.next {
            Next::Finish(Finish::Reschedule { consumed_attempt: true, .. }) => {
                crate::metrics::job_retry(&job.queue, &job.kind)
            }
            Next::DeadLetter(failure) if failure.category == Category::RetriesExhausted => {
                crate::metrics::job_retries_exhausted(&job.queue, &job.kind)
            }
            _ => {}
        }
    }
    Ok(())
}

/// Step 1: the read, the lease checks, the guarded moves and the write-ahead attempts, in one
/// transaction. Returns the rows to call and the rows left to the one-job path.
async fn before_calls<'a>(batch: &'a [Submit], actor: &Actor) -> anyhow::Result<(Vec<Call<'a>>, HashSet<usize>)> {
    let db = batch[0].ctx.db();
    let mut tx = db.begin().await?;
    // Each job carries its withdrawal's account.
    let keys: Vec<_> = batch
        .iter()
        .map(|s| crate::domain::WithdrawalKey { account: s.ctx.job.account_id, id: s.payload.withdrawal_id })
        .collect();
    let mut found: HashMap<_, _> = store::get_many_with_last_attempt(&mut tx, &keys)
        .await?
        .into_iter()
        .map(|(w, last)| (w.id, (w, last)))
        .collect();
    let mut alone = HashSet::new();
    let mut writes = Writes::new();
    let mut leased = Vec::new();
    for (row, s) in batch.iter().enumerate() {
        let first_payout = match found.remove(&s.payload.withdrawal_id) {
            Some((w, None)) if w.status == WithdrawalStatus::Pending && w.sandbox == s.ctx.config().sandbox => Some(w),
            _ => None,
        };
        // A first payout goes to the first provider for its currency (SPEC §16); one whose
        // breaker is open goes to the one-job path, where the failover rule decides. The breaker
        // is asked last, so a permit is taken only for a call the batch will make.
        let routed = first_payout.and_then(|w| {
            let gateway = *s.ctx.gateways().route(w.amount.currency().code()).first()?;
            Some((w, gateway, gateway.breaker.try_acquire()))
        });
        match routed {
            Some((w, gateway, Ok(permit))) => {
                leased.push((row, w, gateway, permit, s.ctx.lease_for_attempt_in(&mut writes)))
            }
            _ => {
                alone.insert(row);
            }
        }
    }
    let ran = writes.run(&mut tx).await?;
    // A lost lease: another worker holds the job now; nothing is sent or written for it here.
    leased.retain(|(row, _, _, _, lease)| {
        let _span = batch[*row].ctx.span().entered();
        batch[*row].ctx.leased_for_attempt(ran.applied(*lease))
    });

    let claims: Vec<TransitionRequest> = leased
        .iter()
        .map(|(row, w, _, _, _)| TransitionRequest {
            key: w.key(),
            from: WithdrawalStatus::Pending,
            to: WithdrawalStatus::Processing,
            // The version this transaction read: a row changed since is a stale move.
            expected_version: Some(w.version),
            actor,
            reason: "worker claimed the submit job",
            correlation_id: &batch[*row].ctx.job.correlation_id,
            failure_code: None,
            evidence: None,
        })
        .collect();
    let mut writes = Writes::new();
    let guards =
        claims.iter().map(|req| store::transition_known_in(&mut writes, req)).collect::<Result<Vec<_>, _>>()?;
    let ran = writes.run(&mut tx).await?;

    let mut writes = Writes::new();
    let (mut calls, mut moved) = (Vec::new(), Vec::new());
    for (((row, withdrawal, gateway, permit, _), req), guard) in leased.into_iter().zip(&claims).zip(&guards) {
        let ctx = &batch[row].ctx;
        let _span = ctx.span().entered();
        if guard.settle_in(&mut writes, &ran, &withdrawal, req) {
            let start = attempts::Start {
                withdrawal: withdrawal.key(),
                job: ctx.job.id,
                attempt_no: 1,
                worker: ctx.worker_id(),
                correlation_id: &ctx.job.correlation_id,
                provider: &gateway.name,
            };
            let attempt = attempts::start_in(&mut writes, &start);
            moved.push(req);
            calls.push(Call { row, withdrawal, gateway, permit, attempt });
        } else {
            // Cancelled or claimed in between: the next run sees the new state.
            let how = Finish::Reschedule {
                run_at: DbTime::now(),
                consumed_attempt: false,
                error: "withdrawal moved while claiming",
            };
            ctx.finish_in(&mut writes, &how);
        }
    }
    writes.run(&mut tx).await?;
    store::applied_many(&mut tx, &moved).await?;
    tx.commit().await?;
    Ok((calls, alone))
}

/// The job finish a decision ends in (a dead letter's finish is `dead`; its envelope follows).
fn finish_of<'a>(next: &'a Next<'a>) -> Finish<'a> {
    match next {
        Next::Finish(how) => how.clone(),
        Next::DeadLetter(failure) => Finish::Dead { error: &failure.error_code },
    }
}
