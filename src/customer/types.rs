//! What the customer API reads and answers (SPEC §3): the request bodies, the query of the list,
//! and the views. These are the wire contract: their JSON is what `/openapi.json` documents.

use serde::{Deserialize, Serialize};

pub use crate::domain::view::{DestinationView, ReturnView, WithdrawalView};

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

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WithdrawalList {
    pub data: Vec<WithdrawalView>,
    pub next_cursor: Option<String>,
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
