//! What the customer API reads and answers (SPEC §3): the request bodies, the query of the list,
//! and the views. These are the wire contract: their JSON is what `/openapi.json` documents.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::{Destination, Withdrawal, WithdrawalStatus};

/// The body of `POST /v1/withdrawals`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWithdrawalRequest {
    /// Decimal string with at most the currency's minor-unit digits.
    #[schema(example = "125.50")]
    pub amount: String,
    #[schema(example = "USD")]
    pub currency: String,
    pub destination: DestinationInput,
    /// Free client text, at most 140 characters.
    pub reference: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DestinationInput {
    #[serde(rename = "type")]
    #[schema(example = "bank_account")]
    pub kind: String,
    #[schema(example = "12345678")]
    pub account_number: String,
    #[schema(example = "021000021")]
    pub bank_code: String,
}

/// A withdrawal as customers see it: the account number masked to its last four.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReturnView {
    pub returned_at: DateTime<Utc>,
    /// The provider's (bank's) return code, e.g. `R01`.
    pub return_code: String,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DestinationView {
    #[serde(rename = "type")]
    pub kind: String,
    #[schema(example = "****5678")]
    pub account_number: String,
    pub bank_code: String,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WithdrawalList {
    pub data: Vec<WithdrawalView>,
    pub next_cursor: Option<String>,
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

/// The query of `GET /v1/withdrawals`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only withdrawals in this status.
    pub status: Option<String>,
    /// Page size, 1–100 (default 20).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// `next_cursor` from the previous page.
    pub cursor: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BalanceView {
    #[schema(example = "USD")]
    pub currency: String,
    #[schema(example = "874.50")]
    pub available: String,
    pub held: String,
    pub paid_out: String,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BalanceList {
    pub data: Vec<BalanceView>,
}
