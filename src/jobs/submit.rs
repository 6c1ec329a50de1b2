//! The `submit_payout` handler (SPEC §4, §5): send one withdrawal to the provider, exactly once.
//!
//! Order matters. In one transaction: the guarded `pending → processing`, then the attempt row
//! (`started`, side effect unknown) — committed before the call, so a crash during the call
//! leaves evidence. A withdrawal whose last attempt has no outcome is never resubmitted: it goes
//! to reconciliation. After the call, one fenced transaction records the outcome, moves the
//! withdrawal and finishes the job; if the lease was lost meanwhile, all of it rolls back and the
//! unfinished attempt sends the next claimer to reconciliation.

use super::context::JobContext;
use super::retry::{Exhausted, RetryDecision};
use super::routing::Route;
use super::{enqueue_reconciliation, SubmitPayout};
use crate::dead_letter::{Category, Failure};
use crate::domain::{format_minor, Actor, AttemptResult, Withdrawal, WithdrawalStatus};
use crate::provider::{Gateway, Mismatch, SubmitOutcome, TransferRequest, TransferStatus, Verdict};
use crate::storage::attempts::{self, AttemptOutcome, SideEffect};
use crate::storage::batch::Writes;
use crate::storage::jobs::Finish;
use crate::storage::withdrawals::{self as store, TransitionRequest};
use crate::storage::DbTime;

pub async fn handle(ctx: &JobContext, payload: SubmitPayout) -> anyhow::Result<()> {
    let actor = Actor::Worker(ctx.worker_id().to_owned());
    let Ready { withdrawal, gateway, permit, attempt_no, attempt, attempts_in_budget, first_attempt_at } =
        match prepare(ctx, payload.withdrawal_id, &actor).await? {
            Prepared::Call(ready) => *ready,
            Prepared::Done => return Ok(()),
        };
    let outcome = call(ctx, gateway, &withdrawal, permit, attempt_no).await;
    let decision = AfterCall::of(ctx, gateway, &outcome, &withdrawal, attempts_in_budget.max(1), first_attempt_at);
    record(ctx, &withdrawal, &actor, attempt, &decision).await
}

/// What the writes before the call left: a call to make, or a job already finished (skipped,
/// dead-lettered, handed to reconciliation, deferred, or its lease lost).
enum Prepared<'g> {
    Call(Box<Ready<'g>>),
    Done,
}

/// A call the provider may receive: its permit, its attempt row (committed, side effect
/// unknown), and the withdrawal's retry budget so far.
struct Ready<'g> {
    withdrawal: Withdrawal,
    /// The provider the call goes to (SPEC §16).
    gateway: &'g Gateway,
    permit: crate::provider::breaker::Permit,
    attempt_no: i64,
    attempt: crate::domain::AttemptId,
    attempts_in_budget: i64,
    first_attempt_at: DbTime,
}

/// A finished job, whatever finished it.
fn done<'g>(finished: anyhow::Result<()>) -> anyhow::Result<Prepared<'g>> {
    finished.map(|()| Prepared::Done)
}

/// The transaction before the call: skip what no longer awaits payout, refuse a sandbox
/// mismatch, claim `pending → processing`, and either start the attempt row (committed before
/// the call) or hand over to reconciliation or defer while the breaker is open.
async fn prepare<'g>(
    ctx: &'g JobContext,
    id: crate::domain::WithdrawalId,
    actor: &Actor,
) -> anyhow::Result<Prepared<'g>> {
    let job = &ctx.job;
    let mut tx = ctx.db().begin().await?;
    let named = crate::domain::WithdrawalKey { account: job.account_id, id };
    let Some((withdrawal, last)) = store::get_with_last_attempt(&mut tx, named).await? else {
        drop(tx);
        return done(
            ctx.poison(
                super::payload::UNKNOWN_WITHDRAWAL,
                &format!("the payload names withdrawal {id}, which does not exist"),
            )
            .await,
        );
    };

    if matches!(
        withdrawal.status,
        WithdrawalStatus::Completed | WithdrawalStatus::Failed | WithdrawalStatus::RequiresReview
    ) {
        // Someone else decided (customer cancel, reconciliation, operator): nothing to send.
        tracing::info!(status = %withdrawal.status, "submit skipped: withdrawal no longer awaits payout");
        return done(ctx.finish_or_rollback(tx, &Finish::Succeeded).await);
    }

    if withdrawal.sandbox != ctx.config().sandbox {
        // Sandbox money was never real: a real provider must not pay it, and a sandbox must not
        // pretend to pay a real withdrawal. Nothing is sent.
        let (ours, theirs) = if withdrawal.sandbox { ("sandbox", "a real") } else { ("real", "a sandbox") };
        let failure = Failure::permanent(
            "sandbox_mismatch",
            format!("a {ours} withdrawal reached {theirs} provider's worker; nothing was sent"),
        );
        return done(ctx.dead_letter(tx, &failure).await);
    }

    // The writes before the call go out as one batch: the guarded `pending → processing` and —
    // when the call will be made — the lease check; then, if the move applied, its transition
    // row with the attempt row (a retry, already `processing`, has the attempt in the first).
    let key = withdrawal.key();
    let claiming = TransitionRequest {
        key,
        from: WithdrawalStatus::Pending,
        to: WithdrawalStatus::Processing,
        expected_version: None,
        actor,
        reason: "worker claimed the submit job",
        correlation_id: &job.correlation_id,
        failure_code: None,
        evidence: None,
    };
    let (mut writes, mut after_claim) = (Writes::new(), Writes::new());
    let claim = match withdrawal.status {
        WithdrawalStatus::Pending => Some(store::transition_known_in(&mut writes, &claiming)?),
        _ => None,
    };
    let step = if last.is_some_and(|l| !l.finished) {
        // A previous call may have happened: ask the provider, never resubmit blindly.
        Step::Reconcile
    } else {
        match super::routing::choose(ctx, &mut tx, &withdrawal, last.is_some()).await? {
            Route::Call { gateway, permit, moved } => {
                let attempt_no = last.map_or(1, |a| a.attempt_no + 1);
                let batch = if claim.is_some() { &mut after_claim } else { &mut writes };
                let start = attempts::Start {
                    withdrawal: key,
                    job: job.id,
                    attempt_no,
                    worker: ctx.worker_id(),
                    correlation_id: &job.correlation_id,
                    provider: &gateway.name,
                };
                let attempt = attempts::start_in(batch, &start);
                let leased = ctx.lease_for_attempt_in(&mut writes);
                Step::Call { gateway, permit, attempt_no, attempt, leased, moved }
            }
            Route::Wait { retry_in, why } => Step::Defer(retry_in, why),
        }
    };
    let counts = writes.run(&mut tx).await?;
    if let Step::Call { leased, .. } = &step {
        if !ctx.leased_for_attempt(counts.applied(*leased)) {
            return Ok(Prepared::Done);
        }
    }
    if let Some(claim) = claim {
        if !claim.settle(&mut tx, &counts, &withdrawal, &claiming, after_claim).await? {
            // Cancelled or claimed in between: let the next run see the new state.
            drop(tx);
            return done(
                ctx.finish_in_own_tx(&Finish::Reschedule {
                    run_at: DbTime::now(),
                    consumed_attempt: false,
                    error: "withdrawal moved while claiming",
                })
                .await,
            );
        }
    }
    let (gateway, permit, attempt_no, attempt, moved) = match step {
        Step::Call { gateway, permit, attempt_no, attempt, moved, .. } => {
            if let Some(m) = &moved {
                // The move is recorded in the transaction of the attempt it leads to, after the
                // claim (so the log reads claimed, then moved).
                let mut logged = Writes::new();
                let (status, cid) = (WithdrawalStatus::Processing, &job.correlation_id);
                store::failover_in(&mut logged, key, status, actor, &m.reason, cid, &m.evidence);
                logged.run(&mut tx).await?;
            }
            (gateway, permit, attempt_no, attempt, moved.map(|m| m.from))
        }
        Step::Reconcile => {
            enqueue_reconciliation(&mut tx, key, "unfinished_attempt", &job.correlation_id, DbTime::now()).await?;
            return done(ctx.finish_or_rollback(tx, &Finish::Succeeded).await);
        }
        Step::Defer(retry_in, why) => {
            // The breaker is open: wait for the next probe, plus jitter, without using an attempt.
            let wait = ctx.config().breaker_deferral(retry_in);
            tracing::info!(retry_in_ms = wait.as_millis() as u64, why, "submit deferred");
            let run_at = DbTime::after(wait);
            let how = Finish::Reschedule { run_at, consumed_attempt: false, error: why };
            return done(ctx.finish_or_rollback(tx, &how).await);
        }
    };
    let (attempts_in_budget, first) = match &last {
        // A first attempt is the whole budget so far: nothing to count.
        None => (1, None),
        Some(_) => attempts::budget(&mut tx, withdrawal.key()).await?,
    };
    let first_attempt_at = first.unwrap_or_else(DbTime::now);
    tx.commit().await?;
    if let Some(from) = moved {
        tracing::warn!(event = "failover", from = %from, to = %gateway.name, "withdrawal moved to the next provider");
        crate::metrics::failover(&from, &gateway.name);
    }
    Ok(Prepared::Call(Box::new(Ready {
        withdrawal,
        gateway,
        permit,
        attempt_no,
        attempt,
        attempts_in_budget,
        first_attempt_at,
    })))
}

/// The transaction after the call, fenced by the lease: the attempt's outcome, the guarded move
/// and the job's finish as one batch; then, if the move applied, its transition row and ledger
/// entries, the reconciliation to follow, or the dead letter.
async fn record(
    ctx: &JobContext,
    withdrawal: &Withdrawal,
    actor: &Actor,
    attempt: crate::domain::AttemptId,
    decision: &AfterCall<'_>,
) -> anyhow::Result<()> {
    let job = &ctx.job;
    let key = withdrawal.key();
    let settle = decision.settle(key, actor, &job.correlation_id, None);
    let mut tx = ctx.db().begin().await?;
    let mut writes = Writes::new();
    attempts::record_outcome_in(&mut writes, key.account, attempt, &decision.record);
    let moved = settle.as_ref().map(|req| store::transition_known_in(&mut writes, req)).transpose()?;
    let finished = match &decision.next {
        Next::Finish(how) => Some(ctx.finish_in(&mut writes, how)),
        Next::DeadLetter(_) => None,
    };
    let counts = writes.run(&mut tx).await?;
    if let (Next::Finish(how), Some(finished)) = (&decision.next, finished) {
        if !counts.applied(finished) {
            return ctx.commit_if_finished(tx, false, how).await.map(drop);
        }
    }
    if let (Some(moved), Some(req)) = (moved, &settle) {
        // Not applied: reconciliation or an operator already decided; the late worker changes
        // nothing but its own records.
        moved.settle(&mut tx, &counts, withdrawal, req, Writes::new()).await?;
    }
    if let Some((reason, run_at)) = decision.follow_up {
        enqueue_reconciliation(&mut tx, key, reason, &job.correlation_id, run_at).await?;
    }
    match &decision.next {
        Next::DeadLetter(failure) => ctx.dead_letter(tx, failure).await,
        // Its fenced finish held (checked above).
        Next::Finish(how) => ctx.commit_if_finished(tx, true, how).await.map(drop),
    }
}

/// Sends `withdrawal` to the provider as attempt `attempt_no` under the breaker's `permit`, and
/// records the outcome with the breaker and the metrics.
pub(super) async fn call(
    ctx: &JobContext,
    gateway: &Gateway,
    withdrawal: &Withdrawal,
    permit: crate::provider::breaker::Permit,
    attempt_no: i64,
) -> SubmitOutcome {
    let request = transfer_request(withdrawal);
    let started = std::time::Instant::now();
    let outcome = gateway.provider.submit(&withdrawal.id.to_string(), &ctx.job.correlation_id, &request).await;
    gateway.breaker.record(permit, outcome.breaker_outcome(), started.elapsed());
    crate::metrics::provider_request(&gateway.name, outcome_class(&outcome), started.elapsed());
    tracing::info!(attempt_no, provider = %gateway.name, outcome = ?outcome, elapsed_ms = started.elapsed().as_millis() as u64, "provider called");
    outcome
}

/// What the provider's answer to one attempt decides: the attempt row's outcome, how the job
/// ends, the move it causes (with the answer as its evidence), and a reconciliation to follow.
pub(super) struct AfterCall<'a> {
    pub record: AttemptOutcome<'a>,
    pub next: Next<'a>,
    /// The move out of `processing`: to, reason, failure code.
    settled: Option<(WithdrawalStatus, &'static str, Option<String>)>,
    evidence: Option<crate::domain::StoredEvidence>,
    /// A reconciliation to enqueue in the same transaction: its reason and when it runs.
    pub follow_up: Option<(&'static str, DbTime)>,
}

impl<'a> AfterCall<'a> {
    pub fn of(
        ctx: &JobContext,
        gateway: &Gateway,
        outcome: &'a SubmitOutcome,
        withdrawal: &Withdrawal,
        attempts_made: i64,
        first_attempt_at: DbTime,
    ) -> Self {
        // Every transfer the provider shows is checked against the withdrawal before it settles
        // anything: a mismatch is never completed (SPEC §4).
        let verdict = match outcome {
            SubmitOutcome::Accepted { transfer, .. } => Some(Verdict::of_transfer(withdrawal, transfer)),
            _ => None,
        };
        let policy = ctx.config().submit_policy_for(&gateway.name);
        let (record, next) = decide(policy, outcome, verdict.as_ref(), withdrawal, attempts_made, first_attempt_at);
        // A provider that settled the transfer settles the withdrawal.
        let settled = match &verdict {
            Some(Verdict::Paid(_) | Verdict::Returned(_)) => {
                Some((WithdrawalStatus::Completed, "provider confirmed paid", None))
            }
            Some(Verdict::Failed(t)) => Some((
                WithdrawalStatus::Failed,
                "provider reported failed",
                Some(t.failure_code.clone().unwrap_or_else(|| "provider_failed".to_owned())),
            )),
            _ => None,
        };
        // The provider's answer is the evidence of the move it causes.
        let evidence = verdict.as_ref().map(|v| {
            let source = crate::domain::EvidenceSource::ProviderCreate;
            v.evidence_from(source, withdrawal, chrono::Utc::now()).from_provider(&gateway.name).into()
        });
        let follow_up = match (outcome, &verdict) {
            (_, Some(Verdict::Pending(_))) => Some(("pending_transfer", DbTime::after(ctx.config().pending_poll))),
            (SubmitOutcome::Unknown(_), _) => Some(("unknown_outcome", DbTime::now())),
            _ => None,
        };
        AfterCall { record, next, settled, evidence, follow_up }
    }

    /// The guarded move out of `processing` the answer causes, if any, made by `actor`; with
    /// `expected_version`, only from that version.
    pub fn settle<'b>(
        &'b self,
        key: crate::domain::WithdrawalKey,
        actor: &'b Actor,
        correlation_id: &'b str,
        expected_version: Option<i64>,
    ) -> Option<TransitionRequest<'b>> {
        self.settled.as_ref().map(|(to, reason, failure_code)| TransitionRequest {
            key,
            from: WithdrawalStatus::Processing,
            to: *to,
            expected_version,
            actor,
            reason,
            correlation_id,
            failure_code: failure_code.as_deref(),
            evidence: self.evidence.as_ref(),
        })
    }
}

/// What the run does after its pre-call writes.
enum Step<'g> {
    /// The last attempt has no outcome: reconcile instead of calling.
    Reconcile,
    /// No provider can be called now (its breaker is open and the withdrawal must wait for it,
    /// or none is configured): reschedule after the delay, saying why.
    Defer(std::time::Duration, &'static str),
    /// Call `gateway` as attempt `attempt_no` (row `attempt`), if the lease (the count at
    /// `leased`) still held; `moved`: the move to it, recorded in the same transaction.
    Call {
        gateway: &'g Gateway,
        permit: crate::provider::breaker::Permit,
        attempt_no: i64,
        attempt: crate::domain::AttemptId,
        leased: crate::storage::batch::Written,
        moved: Option<super::routing::Move>,
    },
}

/// The outcome class a provider latency is recorded under.
fn outcome_class(outcome: &SubmitOutcome) -> &'static str {
    match outcome {
        SubmitOutcome::Accepted { transfer, .. } if transfer.status == TransferStatus::Failed => "final_failed",
        SubmitOutcome::Accepted { .. } => "success",
        SubmitOutcome::Retryable(_) => "retryable",
        SubmitOutcome::Unknown(_) => "unknown",
        SubmitOutcome::Permanent { .. } => "permanent",
        SubmitOutcome::IdempotencyConflict(_) => "conflict",
    }
}

/// How this run ends: the job finishes (succeeds or is rescheduled), or it is dead-lettered.
pub(super) enum Next<'a> {
    Finish(Finish<'a>),
    DeadLetter(Failure),
}

fn transfer_request(w: &Withdrawal) -> TransferRequest {
    TransferRequest {
        reference: w.id.to_string(),
        amount: format_minor(w.amount.to_minor(), w.amount.currency()),
        currency: w.amount.currency().code().to_owned(),
        destination: w.destination.clone(),
    }
}

/// The attempt row's outcome and how the job ends, from the classified outcome and the policy
/// (the provider's, SPEC §16).
/// The retry budget is the withdrawal's: `attempts_made` counts its provider attempts (this one
/// included) and `first_attempt_at` is its first, across controlled retries, since it last left
/// `requires_review`.
fn decide<'a>(
    policy: &crate::config::RetryPolicy,
    outcome: &'a SubmitOutcome,
    verdict: Option<&Verdict>,
    withdrawal: &Withdrawal,
    attempts_made: i64,
    first_attempt_at: DbTime,
) -> (AttemptOutcome<'a>, Next<'a>) {
    match outcome {
        SubmitOutcome::Accepted { transfer, http_status } => {
            let mismatch = match verdict {
                Some(Verdict::Mismatch(_, m)) => Some(m),
                _ => None,
            };
            let record = AttemptOutcome {
                outcome: if mismatch.is_some() {
                    AttemptResult::Mismatch
                } else {
                    AttemptResult::of_transfer(transfer.status)
                },
                side_effect: Some(SideEffect::Confirmed),
                http_status: Some(*http_status),
                provider_transfer_id: Some(&transfer.id),
                failure_code: transfer.failure_code.as_deref(),
                ..AttemptOutcome::default()
            };
            let next = match mismatch {
                None => Next::Finish(Finish::Succeeded),
                Some(m) => Next::DeadLetter(mismatch_failure(withdrawal, transfer, m)),
            };
            (record, next)
        }
        SubmitOutcome::Retryable(error) => {
            let record = error_record(AttemptResult::Retryable, SideEffect::NotStarted, error);
            let attempts_made = u32::try_from(attempts_made).unwrap_or(u32::MAX);
            let elapsed = (DbTime::now().0 - first_attempt_at.0).to_std().unwrap_or_default();
            let exhausted = |by: &str| {
                Next::DeadLetter(Failure::retries_exhausted(
                    error.code.clone(),
                    format!("retries exhausted by {by} after {attempts_made} attempts: {}", error.message),
                ))
            };
            let next = match policy.next_delay(attempts_made, elapsed, error.retry_after, &mut rand::thread_rng()) {
                RetryDecision::RetryAfter(delay) => Next::Finish(Finish::Reschedule {
                    run_at: DbTime::after(delay),
                    consumed_attempt: true,
                    error: &error.code,
                }),
                RetryDecision::Exhausted(Exhausted::Attempts) => exhausted("max_attempts"),
                RetryDecision::Exhausted(Exhausted::Elapsed) => exhausted("max_elapsed"),
            };
            (record, next)
        }
        SubmitOutcome::Unknown(error) => {
            (error_record(AttemptResult::Unknown, SideEffect::Unknown, error), Next::Finish(Finish::Succeeded))
        }
        SubmitOutcome::Permanent { error, side_effect } => {
            let failure = Failure::permanent(error.code.clone(), error.message.clone()).with_side_effect(*side_effect);
            (error_record(AttemptResult::Permanent, *side_effect, error), Next::DeadLetter(failure))
        }
        SubmitOutcome::IdempotencyConflict(error) => {
            let failure = Failure::side_effect_unknown(error.code.clone(), error.message.clone());
            (error_record(AttemptResult::Conflict, SideEffect::Unknown, error), Next::DeadLetter(failure))
        }
    }
}

/// The dead letter of a transfer that does not match the withdrawal, with both records.
pub fn mismatch_failure(withdrawal: &Withdrawal, transfer: &crate::provider::Transfer, m: &Mismatch) -> Failure {
    let records = crate::provider::truth::both_records(withdrawal, transfer);
    Failure::new(
        Category::ProviderMismatch,
        m.code(),
        "mismatch",
        format!("the provider's transfer differs from the withdrawal in {}: {records}", m.fields.join(", ")),
    )
    .with_side_effect(SideEffect::Confirmed)
}

fn error_record<'a>(
    outcome: AttemptResult,
    side_effect: SideEffect,
    error: &'a crate::provider::ProviderError,
) -> AttemptOutcome<'a> {
    AttemptOutcome {
        outcome,
        side_effect: Some(side_effect),
        http_status: error.http_status,
        error_code: Some(&error.code),
        error_message: Some(&error.message),
        ..AttemptOutcome::default()
    }
}
