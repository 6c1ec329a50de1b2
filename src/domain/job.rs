//! The job kinds, their queues and their versioned payloads (SPEC §5): the names and shapes every
//! layer shares — the storage layer enqueues a withdrawal's first submit job, the metrics name
//! the queues, the worker runs them. Pure data; running and enqueueing live in `jobs` and
//! `storage::jobs`.

use serde::{Deserialize, Serialize};

use super::{ReconciliationId, WithdrawalId};
use crate::text_enum;

text_enum! {
    /// Where a job stands in the jobs table.
    pub enum JobStatus("job status", 4) {
        /// Waiting for its `run_at`, or due.
        Scheduled = "scheduled",
        /// Leased to a worker.
        Running = "running",
        Succeeded = "succeeded",
        /// Dead-lettered: no more automatic runs.
        Dead = "dead",
    }
}

impl JobStatus {
    /// Scheduled or running: the job may still run.
    pub fn is_live(self) -> bool {
        matches!(self, JobStatus::Scheduled | JobStatus::Running)
    }
}

/// The queue that carries payouts to the provider.
pub const PAYOUTS_QUEUE: &str = "payouts";

/// The queue that asks the provider what happened (SPEC §7).
pub const RECONCILIATION_QUEUE: &str = "reconciliation";

/// The queue of the daily settlement import (SPEC §14.1).
pub const SETTLEMENT_QUEUE: &str = "settlement";

/// Fetches, imports and matches a day's settlement report.
pub const IMPORT_SETTLEMENT: &str = "import_settlement";

/// Sends a withdrawal to the payout provider.
pub const SUBMIT_PAYOUT: &str = "submit_payout";

/// Looks a payout up at the provider by its operation key.
pub const RECONCILE_PAYOUT: &str = "reconcile_payout";

/// Payload of [`SUBMIT_PAYOUT`], version [`SubmitPayout::VERSION`] (2). Version 1 had no
/// `operation_key`; `jobs::payload` upgrades it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitPayout {
    pub withdrawal_id: WithdrawalId,
    /// The provider idempotency key, explicit since version 2. Always the withdrawal id.
    pub operation_key: String,
    /// Set on a controlled retry: the reconciliation result that proved the provider never
    /// executed the previous attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciliation_result_id: Option<ReconciliationId>,
}

impl SubmitPayout {
    pub const VERSION: i64 = 2;

    pub fn new(withdrawal_id: WithdrawalId, reconciliation_result_id: Option<ReconciliationId>) -> Self {
        Self { withdrawal_id, operation_key: withdrawal_id.to_string(), reconciliation_result_id }
    }
}

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

/// Payload of [`IMPORT_SETTLEMENT`], version [`ImportSettlement::VERSION`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportSettlement {
    /// The report's day (UTC).
    pub date: chrono::NaiveDate,
    /// v2: the operator's import (`settlement_imports`) whose stored report this job imports;
    /// none for the daily job, which fetches the day's report from the provider.
    #[serde(default)]
    pub import_id: Option<uuid::Uuid>,
}

impl ImportSettlement {
    pub const VERSION: i64 = 2;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_statuses_round_trip_through_their_names() {
        crate::assert_text_enum_round_trips!(JobStatus);
    }
}
