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

use super::context::JobContext;
use super::retry::RetryDecision;
use super::{JobKind, ReconcilePayout, SubmitPayout};
use crate::dead_letter::Failure;
use crate::domain::{
    Actor, Evidence, EvidenceSource, JobId, JobKey, JobStatus, ReconciliationId, ReconciliationResult as Outcome,
    StoredEvidence, VerdictKind, WithdrawalKey, WithdrawalStatus,
};
use crate::provider::{LookupOutcome, Verdict};
use crate::storage::attempts::{self, SideEffect};
use crate::storage::jobs::{self as job_store, Finish};
use crate::storage::reconciliations::{self, ReconciliationRecord};
use crate::storage::withdrawals::{self as store, TransitionOutcome, TransitionRequest};
use crate::storage::{DbTime, Tx};

pub async fn handle(ctx: &JobContext, payload: ReconcilePayout) -> anyhow::Result<()> {
    let id = payload.withdrawal_id;
    let job = &ctx.job;
    let Some(withdrawal) = store::get(ctx.db(), WithdrawalKey { account: job.account_id, id }).await? else {
        return ctx
            .poison(
                super::payload::UNKNOWN_WITHDRAWAL,
                &format!("the payload names withdrawal {id}, which does not exist"),
            )
            .await;
    };
    let key = withdrawal.key();
    let from = withdrawal.status;
    // The provider the latest attempt went to is the one asked (SPEC §16): no other can know.
    let gateway = super::routing::asked(ctx, &withdrawal).await?;
    let provider = gateway.map_or(super::routing::UNCONFIGURED, |g| g.name.as_str());
    if !matches!(from, WithdrawalStatus::Processing | WithdrawalStatus::RequiresReview) {
        let mut tx = ctx.db().begin().await?;
        record(&mut tx, ctx, provider, key, Outcome::Skipped, None, None, &format!("withdrawal already {from}"), None)
            .await?;
        return ctx.finish_or_rollback(tx, &Finish::Succeeded).await;
    }

    // An attempt that starts after this question is not covered by its answer.
    let asked_at = DbTime::now();
    let asked = match gateway {
        Some(gateway) => gateway
            .lookup(&id.to_string(), &job.correlation_id)
            .await
            .map_err(|open| (open.retry_in, "circuit breaker open")),
        None => Err((super::routing::NO_PROVIDER_WAIT, "no configured provider")),
    };
    let answer = match asked {
        Ok(answer) => answer,
        Err((retry_in, why)) => {
            // The breaker is open: ask after the next probe (plus jitter, at least the minimum
            // deferral), without using up attempts — but the window still closes on time.
            let window = TimeDelta::from_std(ctx.config().reconcile_policy.max_elapsed).unwrap_or(TimeDelta::hours(24));
            let started = job.first_attempt_at.unwrap_or_else(DbTime::now);
            if started.plus(window) <= DbTime::now() {
                let mut tx = ctx.db().begin().await?;
                let message = "reconciliation could not ask the provider within its window (breaker open)";
                record(&mut tx, ctx, provider, key, Outcome::WindowExpired, None, None, message, None).await?;
                let failure = Failure::side_effect_unknown("reconciliation_breaker_open", message);
                return ctx.dead_letter(tx, &failure).await;
            }
            let run_at = DbTime::after(ctx.config().breaker_deferral(retry_in));
            let mut tx = ctx.db().begin().await?;
            job_store::mark_first_attempt(&mut tx, job.key(), job.lease_token).await?;
            let how = Finish::Reschedule { run_at, consumed_attempt: false, error: why };
            return ctx.finish_or_rollback(tx, &how).await;
        }
    };
    let mut tx = ctx.db().begin().await?;
    let first_attempt_at = job_store::mark_first_attempt(&mut tx, job.key(), job.lease_token).await?;
    // "Not found" is only definitive once no attempt can still be on its way: a request we
    // stopped waiting for may yet be executed by the provider.
    let in_flight = match &answer {
        LookupOutcome::NotFound => in_flight_until(ctx.db(), key, ctx.config().in_flight_grace).await?,
        _ => None,
    };
    // Every transfer the provider shows is checked against the withdrawal first (SPEC §7).
    let verdict = Verdict::of_lookup(&withdrawal, &answer, in_flight.is_some());
    let evidence = verdict.evidence(&withdrawal, chrono::Utc::now()).from_provider(provider);
    let (result, detail) = match &verdict {
        Verdict::Paid(t) | Verdict::Returned(t) => {
            // A returned transfer was paid first: the withdrawal completes; the return's
            // re-credit is settlement's (SPEC §14.3).
            let name = verdict.kind();
            let result = if matches!(verdict, Verdict::Returned(_)) { Outcome::Returned } else { Outcome::Paid };
            let to = WithdrawalStatus::Completed;
            decide(&mut tx, ctx, key, from, to, "reconciliation found it paid", None, Some(evidence)).await?;
            record(&mut tx, ctx, provider, key, result, Some(&t.id), None, &format!("provider reports {name}"), None)
                .await?;
            return ctx.finish_or_rollback(tx, &Finish::Succeeded).await;
        }
        Verdict::Failed(t) => {
            let code = t.failure_code.as_deref().unwrap_or("provider_failed");
            let to = WithdrawalStatus::Failed;
            decide(&mut tx, ctx, key, from, to, "reconciliation found it failed", Some(code), Some(evidence)).await?;
            record(
                &mut tx,
                ctx,
                provider,
                key,
                Outcome::Failed,
                Some(&t.id),
                Some(code),
                "provider reports failed",
                None,
            )
            .await?;
            return ctx.finish_or_rollback(tx, &Finish::Succeeded).await;
        }
        Verdict::Mismatch(t, m) => {
            let failure = super::submit::mismatch_failure(&withdrawal, t, m);
            record(&mut tx, ctx, provider, key, Outcome::Mismatch, Some(&t.id), None, &failure.message, None).await?;
            return ctx.dead_letter(tx, &failure).await;
        }
        Verdict::InFlight => {
            let settled = in_flight.unwrap_or_else(DbTime::now);
            let detail = "no transfer yet, but an attempt may still be in flight: asking again after it settles";
            record(&mut tx, ctx, provider, key, Outcome::NotFound, None, None, detail, None).await?;
            let how = Finish::Reschedule { run_at: settled, consumed_attempt: false, error: "attempt in flight" };
            return ctx.finish_or_rollback(tx, &how).await;
        }
        Verdict::NoTransfer => return controlled_retry(tx, ctx, provider, key, from, asked_at).await,
        Verdict::Pending(t) => (Outcome::Pending, format!("transfer {} still pending at the provider", t.id)),
        Verdict::Unavailable(why) => (Outcome::Unavailable, why.clone()),
    };

    // Undecided: ask again later, within the window. A pending transfer is known to be on its
    // way, so only the window (`max_elapsed`) bounds how long it is polled; an unanswered lookup
    // also counts against the attempt cap.
    let policy = &ctx.config().reconcile_policy;
    let attempts_made = u32::try_from(job.attempts + 1).unwrap_or(u32::MAX);
    let elapsed = (DbTime::now().0 - first_attempt_at.0).to_std().unwrap_or_default();
    let decision = match &answer {
        LookupOutcome::Unavailable(error) => {
            policy.next_delay(attempts_made, elapsed, error.retry_after, &mut rand::thread_rng())
        }
        LookupOutcome::Found(_) | LookupOutcome::NotFound => {
            policy.next_poll(attempts_made, elapsed, &mut rand::thread_rng())
        }
    };
    // Polling is the safety net while the provider's events arrive (SPEC §15): a pending transfer
    // is asked about no more often than `pending_poll_with_webhooks` — but still once more before
    // the window closes — and when they stop, the pace returns to the policy's by itself.
    let decision = match decision {
        RetryDecision::RetryAfter(delay) if result == Outcome::Pending && webhooks_healthy(ctx, provider).await? => {
            let left = policy.max_elapsed.saturating_sub(elapsed);
            RetryDecision::RetryAfter(delay.max(ctx.config().pending_poll_with_webhooks.min(left)))
        }
        other => other,
    };
    match decision {
        RetryDecision::RetryAfter(delay) => {
            record(&mut tx, ctx, provider, key, result, None, None, &detail, None).await?;
            let run_at = DbTime::after(delay);
            ctx.finish_or_rollback(tx, &Finish::Reschedule { run_at, consumed_attempt: true, error: result.as_str() })
                .await
        }
        RetryDecision::Exhausted(_) => {
            let message = format!("reconciliation could not decide within its window; last answer: {detail}");
            record(&mut tx, ctx, provider, key, Outcome::WindowExpired, None, None, &message, None).await?;
            let failure = Failure::side_effect_unknown(format!("reconciliation_{result}"), message);
            ctx.dead_letter(tx, &failure).await
        }
    }
}

/// Whether `provider`'s events are arriving: the newest event of a type the service decides on
/// it sent was received within `webhook_healthy_within` (another provider's events say nothing
/// about this one's, SPEC §16).
async fn webhooks_healthy(ctx: &JobContext, provider: &str) -> anyhow::Result<bool> {
    let within = TimeDelta::from_std(ctx.config().webhook_healthy_within).unwrap_or(TimeDelta::zero());
    let last = crate::storage::webhooks::last_received_from(ctx.db(), provider).await?;
    Ok(last.is_some_and(|at| at.plus(within) > DbTime::now()))
}

/// Until when an attempt of ours may still reach the provider, if one may: the last attempt's
/// side effect is unknown and it started less than `grace` ago, or its job still runs under a
/// live lease. Until then an empty lookup is not a definitive "no such transfer".
pub async fn in_flight_until(
    db: &crate::storage::Db,
    key: WithdrawalKey,
    grace: std::time::Duration,
) -> crate::storage::Result<Option<DbTime>> {
    let grace = TimeDelta::from_std(grace).unwrap_or(TimeDelta::seconds(15));
    let latest = attempts::for_withdrawal(db, key).await?.pop().filter(|a| a.side_effect == SideEffect::Unknown);
    let Some(a) = latest else { return Ok(None) };
    let settled = a.started_at.plus(grace);
    if settled > DbTime::now() {
        return Ok(Some(settled));
    }
    // A call whose job still runs under a live lease may still be on its way.
    if job_store::job_status(db, JobKey { account: key.account, id: a.job_id }).await? == Some(JobStatus::Running) {
        return Ok(Some(DbTime::now().plus(grace)));
    }
    Ok(None)
}

/// The provider definitively has no transfer under this key: a new submit job with the same
/// idempotency key, linked to the result that justified it, after the submit policy's backoff —
/// unless the withdrawal's retry budget is spent, then `retries_exhausted` (nothing was paid).
async fn controlled_retry(
    mut tx: Tx,
    ctx: &JobContext,
    provider: &str,
    key: WithdrawalKey,
    from: WithdrawalStatus,
    asked_at: DbTime,
) -> anyhow::Result<()> {
    let job = &ctx.job;
    let id = key.id;
    attempts::resolve_unfinished_as_not_executed(&mut tx, key, provider, asked_at).await?;
    let (attempts_made, first) = attempts::budget(&mut tx, key).await?;
    let elapsed = first.map(|f| (DbTime::now().0 - f.0).to_std().unwrap_or_default()).unwrap_or_default();
    let policy = ctx.config().submit_policy_for(provider);
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
            record(&mut tx, ctx, provider, key, Outcome::NotFound, None, None, &detail, None).await?;
            let last_code =
                attempts::latest(&mut tx, key).await?.and_then(|a| a.error_code).unwrap_or_else(|| "not_found".into());
            let failure = Failure::retries_exhausted(last_code, detail);
            return ctx.dead_letter(tx, &failure).await;
        }
    };
    if from == WithdrawalStatus::RequiresReview {
        let reason = "controlled retry after reconciliation";
        let evidence = Evidence::of(EvidenceSource::ProviderLookup, VerdictKind::NoTransfer, chrono::Utc::now())
            .from_provider(provider);
        decide(&mut tx, ctx, key, from, WithdrawalStatus::Processing, reason, None, Some(evidence)).await?;
    }
    let result_id = ReconciliationId::new();
    let follow_up = if job_store::has_live_job(&mut tx, key, JobKind::SubmitPayout).await? {
        None
    } else {
        let run_at = DbTime::after(delay);
        let retry = SubmitPayout::new(id, Some(result_id)).job(key.account, &job.correlation_id, run_at);
        Some(job_store::enqueue(&mut tx, &retry).await?.id)
    };
    let detail = "provider has no transfer under this key: controlled retry with the same key";
    insert_result(&mut tx, ctx, provider, key, result_id, Outcome::NotFound, None, None, detail, follow_up).await?;
    ctx.finish_or_rollback(tx, &Finish::Succeeded).await
}

#[allow(clippy::too_many_arguments)]
async fn decide(
    tx: &mut Tx,
    ctx: &JobContext,
    key: WithdrawalKey,
    from: WithdrawalStatus,
    to: WithdrawalStatus,
    reason: &str,
    failure_code: Option<&str>,
    evidence: Option<Evidence>,
) -> anyhow::Result<()> {
    let evidence = evidence.map(StoredEvidence::from);
    let request = TransitionRequest {
        key,
        from,
        to,
        expected_version: None,
        actor: &Actor::Reconciliation,
        reason,
        correlation_id: &ctx.job.correlation_id,
        failure_code,
        evidence: evidence.as_ref(),
    };
    match store::transition(tx, &request).await? {
        TransitionOutcome::Applied(_) | TransitionOutcome::Stale => Ok(()),
        TransitionOutcome::Forbidden(err) => Err(err.into()),
    }
}

#[allow(clippy::too_many_arguments)]
async fn record(
    tx: &mut Tx,
    ctx: &JobContext,
    provider: &str,
    key: WithdrawalKey,
    result: Outcome,
    transfer: Option<&str>,
    failure_code: Option<&str>,
    detail: &str,
    follow_up: Option<JobId>,
) -> anyhow::Result<()> {
    insert_result(tx, ctx, provider, key, ReconciliationId::new(), result, transfer, failure_code, detail, follow_up)
        .await
}

#[allow(clippy::too_many_arguments)]
async fn insert_result(
    tx: &mut Tx,
    ctx: &JobContext,
    provider: &str,
    key: WithdrawalKey,
    id: ReconciliationId,
    result: Outcome,
    transfer: Option<&str>,
    failure_code: Option<&str>,
    detail: &str,
    follow_up: Option<JobId>,
) -> anyhow::Result<()> {
    tracing::info!(result = result.as_str(), detail, "reconciliation result");
    let asked = provider.to_owned();
    tx.after_commit(move || crate::metrics::reconciliation(&asked, result.as_str()));
    reconciliations::insert(
        tx,
        &ReconciliationRecord {
            id,
            account_id: key.account,
            withdrawal_id: key.id,
            job_id: ctx.job.id,
            provider: provider.to_owned(),
            result,
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
