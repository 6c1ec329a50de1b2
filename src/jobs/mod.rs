//! Durable jobs (SPEC §5): the job kinds, their queues and their versioned payloads.
//!
//! Jobs are rows in the same database as the withdrawals, enqueued in the transaction that
//! implies them. [`worker`] claims, leases and runs them; one file per job kind holds its handler
//! ([`submit`]); [`retry`] is the retry policy as data; [`finisher`] group-commits completions
//! that carry no effects of their own.

pub mod finisher;
pub mod payload;
pub mod reconcile;
pub mod replay;
pub mod retry;
pub mod submit;
pub mod worker;

use serde::{Deserialize, Serialize};

use crate::domain::WithdrawalId;
use crate::storage::jobs::{self as job_store, NewJob};
use crate::storage::{DbTime, Result, Tx};

/// The queue that carries payouts to the provider.
pub const PAYOUTS_QUEUE: &str = "payouts";

/// Sends a withdrawal to the payout provider.
pub const SUBMIT_PAYOUT: &str = "submit_payout";

/// Payload of [`SUBMIT_PAYOUT`], version [`SubmitPayout::VERSION`] (2). Version 1 had no
/// `operation_key`; [`payload`] upgrades it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitPayout {
    pub withdrawal_id: WithdrawalId,
    /// The provider idempotency key, explicit since version 2. Always the withdrawal id.
    pub operation_key: String,
    /// Set on a controlled retry: the reconciliation result that proved the provider never
    /// executed the previous attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciliation_result_id: Option<uuid::Uuid>,
}

impl SubmitPayout {
    pub const VERSION: i64 = 2;

    pub fn new(withdrawal_id: WithdrawalId, reconciliation_result_id: Option<uuid::Uuid>) -> Self {
        Self { withdrawal_id, operation_key: withdrawal_id.to_string(), reconciliation_result_id }
    }

    /// The job that pays `withdrawal` out, to enqueue in the caller's transaction.
    pub fn job(self, correlation_id: &str, run_at: DbTime) -> NewJob {
        NewJob {
            queue: PAYOUTS_QUEUE,
            kind: SUBMIT_PAYOUT,
            payload: serde_json::to_vec(&self).expect("payload serialises"),
            payload_version: Self::VERSION,
            run_at,
            correlation_id: correlation_id.to_owned(),
            withdrawal_id: Some(self.withdrawal_id),
        }
    }
}

/// The queue that asks the provider what happened (SPEC §7).
pub const RECONCILIATION_QUEUE: &str = "reconciliation";

/// Looks a payout up at the provider by its operation key. Its handler arrives with the
/// dead-letter and reconciliation issue; until then these jobs wait, visible, in their queue.
pub const RECONCILE_PAYOUT: &str = "reconcile_payout";

/// Payload of [`RECONCILE_PAYOUT`], version [`ReconcilePayout::VERSION`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcilePayout {
    pub withdrawal_id: WithdrawalId,
    /// Why reconciliation is needed: `unknown_outcome`, `unfinished_attempt`, `pending_transfer`.
    pub reason: String,
}

impl ReconcilePayout {
    pub const VERSION: i64 = 1;
}

/// Enqueues a reconciliation for `withdrawal` in `tx` unless one is already waiting or running.
/// Returns the job enqueued, if any.
pub async fn enqueue_reconciliation(
    tx: &mut Tx,
    withdrawal: WithdrawalId,
    reason: &str,
    correlation_id: &str,
    run_at: DbTime,
) -> Result<Option<crate::domain::JobId>> {
    if job_store::has_live_job(tx, withdrawal, RECONCILE_PAYOUT).await? {
        return Ok(None);
    }
    let payload = ReconcilePayout { withdrawal_id: withdrawal, reason: reason.to_owned() };
    let job = job_store::enqueue(
        tx,
        &NewJob {
            queue: RECONCILIATION_QUEUE,
            kind: RECONCILE_PAYOUT,
            payload: serde_json::to_vec(&payload).expect("payload serialises"),
            payload_version: ReconcilePayout::VERSION,
            run_at,
            correlation_id: correlation_id.to_owned(),
            withdrawal_id: Some(withdrawal),
        },
    )
    .await?;
    tracing::info!(withdrawal_id = %withdrawal, reason, "reconciliation enqueued");
    Ok(Some(job))
}

/// True when the withdrawal's last provider attempt may have paid (its side effect unknown, or
/// accepted as `pending` or `paid`: [`AttemptRow::may_have_paid`]) and no later reconciliation
/// proved it did not: a resubmission could pay twice, so only reconciliation may follow.
///
/// [`AttemptRow::may_have_paid`]: crate::storage::attempts::AttemptRow::may_have_paid
pub async fn side_effect_unreconciled(db: &crate::storage::Db, id: WithdrawalId) -> Result<bool> {
    let Some(last) = crate::storage::attempts::for_withdrawal(db, id).await?.pop() else { return Ok(false) };
    if !last.may_have_paid() {
        return Ok(false);
    }
    let settled = crate::storage::reconciliations::for_withdrawal(db, id)
        .await?
        .iter()
        .any(|r| r.at >= last.started_at && r.result == "not_found" && r.follow_up_job_id.is_some());
    Ok(!settled)
}
