//! Durable jobs (SPEC §5): the job kinds, their queues and their versioned payloads.
//!
//! Jobs are rows in the same database as the withdrawals, enqueued in the transaction that
//! implies them. This issue defines the submit-payout job that creating a withdrawal enqueues;
//! the worker that claims, leases and runs jobs comes with the payout issue.

use serde::{Deserialize, Serialize};

use crate::domain::WithdrawalId;

/// The queue that carries payouts to the provider.
pub const PAYOUTS_QUEUE: &str = "payouts";

/// Sends a withdrawal to the payout provider.
pub const SUBMIT_PAYOUT: &str = "submit_payout";

/// Payload of [`SUBMIT_PAYOUT`], version [`SubmitPayout::VERSION`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitPayout {
    pub withdrawal_id: WithdrawalId,
}

impl SubmitPayout {
    pub const VERSION: i64 = 1;
}
