//! Durable jobs (SPEC §5): the job kinds, their queues and their versioned payloads.
//!
//! Jobs are rows in the same database as the withdrawals, enqueued in the transaction that
//! implies them. [`worker`] claims, leases and runs them; [`context`] is what a handler is given (settings,
//! services, the leased job), so the handlers and the runner do not import each other; one file per job kind holds its handler
//! ([`submit`]); [`retry`] is the retry policy as data; [`finisher`] group-commits completions
//! that carry no effects of their own; [`payout_batch`] runs each claim's first payouts as one
//! unit of database work. The kinds, queues and payload shapes themselves are data
//! in [`crate::domain::job`], re-exported here.

pub mod context;
pub mod delivery;
pub mod finisher;
pub mod notify;
pub mod payload;
pub mod payout_batch;
pub mod reconcile;
pub mod replay;
pub mod retry;
pub mod routing;
pub mod settlement;
pub mod submit;
pub mod webhook;
pub mod worker;

use crate::domain::ReconciliationResult;
use crate::storage::jobs as job_store;
use crate::storage::{DbTime, Result, Tx};

pub use crate::domain::job::{
    ApplyWebhookEvent, DeliverNotification, ImportSettlement, JobKind, JobType, Queue, ReconcilePayout, SubmitPayout,
};

/// Enqueues a reconciliation for `withdrawal` in `tx` unless one is already waiting or running.
/// Returns the job enqueued, if any.
pub async fn enqueue_reconciliation(
    tx: &mut Tx,
    withdrawal: crate::domain::WithdrawalKey,
    reason: &str,
    correlation_id: &str,
    run_at: DbTime,
) -> Result<Option<crate::domain::JobId>> {
    if job_store::has_live_job(tx, withdrawal, JobKind::ReconcilePayout).await? {
        return Ok(None);
    }
    let payload = ReconcilePayout { withdrawal_id: withdrawal.id, reason: reason.to_owned() };
    let job = job_store::enqueue(tx, &payload.job(withdrawal.account, correlation_id, run_at)).await?;
    tracing::info!(withdrawal_id = %withdrawal, reason, "reconciliation enqueued");
    Ok(Some(job.id))
}

/// True when the withdrawal's last provider attempt may have paid (its side effect unknown, or
/// accepted as `pending` or `paid`: [`AttemptRow::may_have_paid`]) and no later reconciliation
/// proved it did not: a resubmission could pay twice, so only reconciliation may follow.
///
/// [`AttemptRow::may_have_paid`]: crate::storage::attempts::AttemptRow::may_have_paid
pub async fn side_effect_unreconciled(db: &crate::storage::Db, id: crate::domain::WithdrawalKey) -> Result<bool> {
    let Some(last) = crate::storage::attempts::for_withdrawal(db, id).await?.pop() else { return Ok(false) };
    if !last.may_have_paid() {
        return Ok(false);
    }
    let settled = crate::storage::reconciliations::for_withdrawal(db, id)
        .await?
        .iter()
        // Only the provider the attempt went to can say it has no such transfer (SPEC §16).
        .any(|r| {
            r.at >= last.started_at
                && r.provider == last.provider
                && r.result == ReconciliationResult::NotFound
                && r.follow_up_job_id.is_some()
        });
    Ok(!settled)
}
