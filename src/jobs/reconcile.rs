//! The `reconcile_payout` handler (SPEC §7): when the outcome of a payout is unknown, ask the
//! provider by the operation key before anything is retried, and act only on its answer.
//!
//! | the provider says | then |
//! |---|---|
//! | transfer `paid` | `completed` (hold settled) |
//! | transfer `failed` | `failed` (hold released), failure code kept |
//! | transfer `pending` | ask again with backoff |
//! | no such transfer (definitive) | controlled retry: a new submit job, same idempotency key, linked to this result |
//! | cannot answer | ask again with backoff |
//! | still undecided when the window (the policy's `max_elapsed`) closes | dead letter `side_effect_unknown`, `requires_review` |
//!
//! Every answer is stored as a `reconciliation_results` row: the evidence operators read.

use chrono::TimeDelta;
use uuid::Uuid;

use super::retry::RetryDecision;
use super::worker::JobContext;
use super::{ReconcilePayout, SubmitPayout, SUBMIT_PAYOUT};
use crate::dead_letter::{Category, Failure};
use crate::domain::{Actor, WithdrawalStatus};
use crate::provider::{LookupOutcome, TransferStatus};
use crate::storage::attempts::{self, SideEffect};
use crate::storage::jobs::{self as job_store, Finish};
use crate::storage::reconciliations::{self, ReconciliationResult};
use crate::storage::withdrawals::{self as store, TransitionOutcome, TransitionRequest};
use crate::storage::{DbTime, Tx};

pub async fn handle(ctx: &JobContext, payload: ReconcilePayout) -> anyhow::Result<()> {
    let id = payload.withdrawal_id;
    let job = &ctx.job;
    let Some(withdrawal) = store::get(ctx.db(), None, id).await? else {
        anyhow::bail!("withdrawal {id} not found");
    };
    let from = withdrawal.status;
    if !matches!(from, WithdrawalStatus::Processing | WithdrawalStatus::RequiresReview) {
        let mut tx = ctx.db().begin().await?;
        record(&mut tx, ctx, "skipped", None, None, &format!("withdrawal already {from}"), None).await?;
        return ctx.finish_or_rollback(tx, &Finish::Succeeded).await;
    }

    let answer = match ctx.gateway().lookup(&id.to_string(), &job.correlation_id).await {
        Ok(answer) => answer,
        Err(open) => {
            // The breaker is open: ask after the next probe (plus jitter, at least the minimum
            // deferral), without using up attempts — but the window still closes on time.
            let window = TimeDelta::from_std(ctx.config().reconcile_policy.max_elapsed).unwrap_or(TimeDelta::hours(24));
            let started = job.first_attempt_at.unwrap_or_else(DbTime::now);
            if started.plus(window) <= DbTime::now() {
                let mut tx = ctx.db().begin().await?;
                let message = "reconciliation could not ask the provider within its window (breaker open)";
                record(&mut tx, ctx, "window_expired", None, None, message, None).await?;
                let failure = Failure {
                    category: Category::SideEffectUnknown,
                    error_code: "reconciliation_breaker_open".into(),
                    error_class: "unknown",
                    message: message.into(),
                    stack: None,
                    side_effect: Some(SideEffect::Unknown),
                };
                return ctx.dead_letter(tx, &failure).await;
            }
            let jitter = rand::random::<u64>() % (ctx.config().breaker_jitter.as_millis() as u64 + 1);
            let wait = open.retry_in.max(ctx.config().breaker_min_defer) + std::time::Duration::from_millis(jitter);
            let run_at = DbTime::now().plus(TimeDelta::from_std(wait).unwrap_or(TimeDelta::seconds(1)));
            let mut tx = ctx.db().begin().await?;
            job_store::mark_first_attempt(&mut tx, job.id, job.lease_token).await?;
            let how = Finish::Reschedule { run_at, consumed_attempt: false, error: "circuit breaker open" };
            return ctx.finish_or_rollback(tx, &how).await;
        }
    };
    let mut tx = ctx.db().begin().await?;
    let first_attempt_at = job_store::mark_first_attempt(&mut tx, job.id, job.lease_token).await?;
    let (result, detail) = match &answer {
        LookupOutcome::Found(transfers) => {
            let reference = id.to_string();
            let transfer =
                transfers.iter().find(|t| t.reference.as_deref() == Some(&reference)).unwrap_or(&transfers[0]);
            match transfer.status {
                TransferStatus::Paid => {
                    decide(&mut tx, ctx, from, WithdrawalStatus::Completed, "reconciliation found it paid", None)
                        .await?;
                    record(&mut tx, ctx, "paid", Some(&transfer.id), None, "provider reports paid", None).await?;
                    return ctx.finish_or_rollback(tx, &Finish::Succeeded).await;
                }
                TransferStatus::Failed => {
                    let code = transfer.failure_code.as_deref().unwrap_or("provider_failed");
                    decide(&mut tx, ctx, from, WithdrawalStatus::Failed, "reconciliation found it failed", Some(code))
                        .await?;
                    record(&mut tx, ctx, "failed", Some(&transfer.id), Some(code), "provider reports failed", None)
                        .await?;
                    return ctx.finish_or_rollback(tx, &Finish::Succeeded).await;
                }
                TransferStatus::Pending => {
                    ("pending", format!("transfer {} still pending at the provider", transfer.id))
                }
            }
        }
        LookupOutcome::NotFound => {
            // "Not found" is only definitive once no attempt can still be on its way: a request
            // we stopped waiting for may yet be executed by the provider.
            let grace = TimeDelta::from_std(ctx.config().in_flight_grace).unwrap_or(TimeDelta::seconds(15));
            let latest = attempts::latest(&mut tx, id).await?.filter(|a| a.side_effect == SideEffect::Unknown.as_str());
            let mut in_flight =
                latest.as_ref().map(|a| a.started_at.plus(grace)).filter(|settled| *settled > DbTime::now());
            if let Some(a) = &latest {
                // A call whose job still runs under a live lease may still be on its way.
                if in_flight.is_none() && job_store::job_status(ctx.db(), a.job_id).await?.as_deref() == Some("running")
                {
                    in_flight = Some(DbTime::now().plus(grace));
                }
            }
            if let Some(settled) = in_flight {
                let detail = "no transfer yet, but an attempt may still be in flight: asking again after it settles";
                record(&mut tx, ctx, "not_found", None, None, detail, None).await?;
                let how = Finish::Reschedule { run_at: settled, consumed_attempt: false, error: "attempt in flight" };
                return ctx.finish_or_rollback(tx, &how).await;
            }
            return controlled_retry(tx, ctx, from).await;
        }
        LookupOutcome::Unavailable(error) => ("unavailable", format!("{}: {}", error.code, error.message)),
    };

    // Undecided: ask again later, within the window.
    let policy = &ctx.config().reconcile_policy;
    let attempts_made = u32::try_from(job.attempts + 1).unwrap_or(u32::MAX);
    let elapsed = (DbTime::now().0 - first_attempt_at.0).to_std().unwrap_or_default();
    let retry_after = match &answer {
        LookupOutcome::Unavailable(error) => error.retry_after,
        LookupOutcome::Found(_) | LookupOutcome::NotFound => None,
    };
    let decision = policy.next_delay(attempts_made, elapsed, retry_after, &mut rand::thread_rng());
    match decision {
        RetryDecision::RetryAfter(delay) => {
            record(&mut tx, ctx, result, None, None, &detail, None).await?;
            let run_at = DbTime::now().plus(TimeDelta::from_std(delay).unwrap_or(TimeDelta::seconds(1)));
            ctx.finish_or_rollback(tx, &Finish::Reschedule { run_at, consumed_attempt: true, error: result }).await
        }
        RetryDecision::Exhausted(_) => {
            let message = format!("reconciliation could not decide within its window; last answer: {detail}");
            record(&mut tx, ctx, "window_expired", None, None, &message, None).await?;
            let failure = Failure {
                category: Category::SideEffectUnknown,
                error_code: format!("reconciliation_{result}"),
                error_class: "unknown",
                message,
                stack: None,
                side_effect: Some(SideEffect::Unknown),
            };
            ctx.dead_letter(tx, &failure).await
        }
    }
}

/// The provider definitively has no transfer under this key: a new submit job with the same
/// idempotency key, linked to the result that justified it, after the submit policy's backoff —
/// unless the withdrawal's retry budget is spent, then `retries_exhausted` (nothing was paid).
async fn controlled_retry(mut tx: Tx, ctx: &JobContext, from: WithdrawalStatus) -> anyhow::Result<()> {
    let job = &ctx.job;
    let id = ctx.payload_withdrawal()?;
    attempts::resolve_unfinished_as_not_executed(&mut tx, id).await?;
    let (attempts_made, first) = attempts::budget(&mut tx, id).await?;
    let elapsed = first.map(|f| (DbTime::now().0 - f.0).to_std().unwrap_or_default()).unwrap_or_default();
    let policy = &ctx.config().submit_policy;
    let decision = policy.next_delay(
        u32::try_from(attempts_made.max(1)).unwrap_or(u32::MAX),
        elapsed,
        None,
        &mut rand::thread_rng(),
    );
    let delay = match decision {
        RetryDecision::RetryAfter(delay) => delay,
        RetryDecision::Exhausted(by) => {
            let detail = format!(
                "provider has no transfer under this key; retry budget spent ({by:?}) after {attempts_made} attempts"
            );
            record(&mut tx, ctx, "not_found", None, None, &detail, None).await?;
            let last_code =
                attempts::latest(&mut tx, id).await?.and_then(|a| a.error_code).unwrap_or_else(|| "not_found".into());
            let failure = Failure {
                category: Category::RetriesExhausted,
                error_code: last_code,
                error_class: "retryable",
                message: detail,
                stack: None,
                side_effect: Some(SideEffect::NotStarted),
            };
            return ctx.dead_letter(tx, &failure).await;
        }
    };
    if from == WithdrawalStatus::RequiresReview {
        decide(&mut tx, ctx, from, WithdrawalStatus::Processing, "controlled retry after reconciliation", None).await?;
    }
    let result_id = Uuid::now_v7();
    let follow_up = if job_store::has_live_job(&mut tx, id, SUBMIT_PAYOUT).await? {
        None
    } else {
        let run_at = DbTime::now().plus(TimeDelta::from_std(delay).unwrap_or(TimeDelta::seconds(1)));
        let retry = SubmitPayout::new(id, Some(result_id)).job(&job.correlation_id, run_at);
        Some(job_store::enqueue(&mut tx, &retry).await?)
    };
    let detail = "provider has no transfer under this key: controlled retry with the same key";
    insert_result(&mut tx, ctx, result_id, "not_found", None, None, detail, follow_up.map(|j| j.0)).await?;
    ctx.finish_or_rollback(tx, &Finish::Succeeded).await
}

async fn decide(
    tx: &mut Tx,
    ctx: &JobContext,
    from: WithdrawalStatus,
    to: WithdrawalStatus,
    reason: &str,
    failure_code: Option<&str>,
) -> anyhow::Result<()> {
    let request = TransitionRequest {
        id: ctx.payload_withdrawal()?,
        from,
        to,
        expected_version: None,
        actor: &Actor::Reconciliation,
        reason,
        correlation_id: &ctx.job.correlation_id,
        failure_code,
    };
    match store::transition(tx, &request).await? {
        TransitionOutcome::Applied(_) | TransitionOutcome::Stale => Ok(()),
        TransitionOutcome::Forbidden(err) => Err(err.into()),
    }
}

async fn record(
    tx: &mut Tx,
    ctx: &JobContext,
    result: &str,
    transfer: Option<&str>,
    failure_code: Option<&str>,
    detail: &str,
    follow_up: Option<Uuid>,
) -> anyhow::Result<()> {
    insert_result(tx, ctx, Uuid::now_v7(), result, transfer, failure_code, detail, follow_up).await
}

#[allow(clippy::too_many_arguments)]
async fn insert_result(
    tx: &mut Tx,
    ctx: &JobContext,
    id: Uuid,
    result: &str,
    transfer: Option<&str>,
    failure_code: Option<&str>,
    detail: &str,
    follow_up: Option<Uuid>,
) -> anyhow::Result<()> {
    tracing::info!(result, detail, "reconciliation result");
    crate::metrics::reconciliation(result);
    reconciliations::insert(
        tx,
        &ReconciliationResult {
            id,
            withdrawal_id: ctx.payload_withdrawal()?.0,
            job_id: ctx.job.id,
            result: result.to_owned(),
            provider_transfer_id: transfer.map(str::to_owned),
            failure_code: failure_code.map(str::to_owned),
            detail: crate::redact::text(detail),
            follow_up_job_id: follow_up,
            correlation_id: ctx.job.correlation_id.clone(),
            at: DbTime::now(),
        },
    )
    .await?;
    Ok(())
}
