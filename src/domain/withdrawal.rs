//! The withdrawal entity as the rest of the service sees it: typed, validated, complete.

use chrono::{DateTime, Utc};

use super::{AccountId, Amount, Destination, WithdrawalId, WithdrawalStatus};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withdrawal {
    pub id: WithdrawalId,
    pub account_id: AccountId,
    pub status: WithdrawalStatus,
    pub amount: Amount,
    pub destination: Destination,
    pub reference: Option<String>,
    pub failure_code: Option<String>,
    /// Incremented by every transition; operators pass it back to prove what they looked at.
    pub version: i64,
    pub idempotency_key: String,
    pub correlation_id: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Created in sandbox mode: paid only by a sandbox provider, never by a real one.
    pub sandbox: bool,
}
