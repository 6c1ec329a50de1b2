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

/// Where a withdrawal lives: its account and its id, the pair every row of its history is keyed
/// by (SPEC §1; README "Scaling"). Storage takes this, not a bare id, for anything that reads or
/// writes one withdrawal's rows, so a distributed planner can route each statement to the
/// account's shard, and forgetting the account is a compile error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WithdrawalKey {
    pub account: AccountId,
    pub id: WithdrawalId,
}

impl std::fmt::Display for WithdrawalKey {
    /// The withdrawal id (what logs and people call a withdrawal by).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.id.fmt(f)
    }
}

impl Withdrawal {
    /// This withdrawal's [`WithdrawalKey`].
    pub fn key(&self) -> WithdrawalKey {
        WithdrawalKey { account: self.account_id, id: self.id }
    }
}
