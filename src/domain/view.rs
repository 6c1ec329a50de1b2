//! A withdrawal as its customer sees it (SPEC §3): the account number masked to its last four.
//! One rendering for the customer API's answers and for the `data` of the events its changes
//! write (SPEC §17), so an event shows exactly what `GET /v1/withdrawals/{id}` showed then.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{Destination, Withdrawal, WithdrawalStatus};

/// A withdrawal as customers see it: the account number masked to its last four.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WithdrawalView {
    pub id: Uuid,
    pub status: WithdrawalStatus,
    #[schema(example = "125.50")]
    pub amount: String,
    pub currency: String,
    pub destination: DestinationView,
    pub reference: Option<String>,
    pub failure_code: Option<String>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// True for a withdrawal made in sandbox mode: no real money is ever paid out for it.
    #[serde(default)]
    pub sandbox: bool,
    /// The bank returned the payout after the provider paid it (SPEC §14.3): the amount is back
    /// in `available`; the withdrawal stays `completed`. Absent when there was no return.
    #[serde(rename = "return", default, skip_serializing_if = "Option::is_none")]
    pub returned: Option<ReturnView>,
}

/// A returned payout, as the customer sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReturnView {
    pub returned_at: DateTime<Utc>,
    /// The provider's (bank's) return code, e.g. `R01`.
    pub return_code: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DestinationView {
    #[serde(rename = "type")]
    pub kind: String,
    #[schema(example = "****5678")]
    pub account_number: String,
    pub bank_code: String,
}

impl From<&Withdrawal> for WithdrawalView {
    fn from(w: &Withdrawal) -> Self {
        let Destination::BankAccount { account_number, bank_code } = w.destination.masked();
        WithdrawalView {
            id: w.id.0,
            status: w.status,
            amount: w.amount.value().to_string(),
            currency: w.amount.currency().code().to_owned(),
            destination: DestinationView { kind: "bank_account".into(), account_number, bank_code },
            reference: w.reference.clone(),
            failure_code: w.failure_code.clone(),
            version: w.version,
            created_at: w.created_at,
            updated_at: w.updated_at,
            sandbox: w.sandbox,
            returned: None,
        }
    }
}
