//! `GET /v1/balances`: the authenticated account's available, held and paid-out money.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::auth::Customer;
use super::error::ApiError;
use super::AppState;
use crate::domain::{format_minor, Currency};
use crate::storage::accounts;
use crate::storage::StorageError;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/balances", get(balances))
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

#[utoipa::path(get, path = "/v1/balances", tag = "balances", security(("api_key" = [])), responses(
    (status = 200, body = BalanceList),
    (status = 401, body = super::error::Problem, content_type = "application/problem+json")
))]
pub async fn balances(State(state): State<AppState>, customer: Customer) -> Result<Json<BalanceList>, ApiError> {
    let rows = accounts::balances(state.db(), customer.account_id).await?;
    let data = rows
        .into_iter()
        .map(|row| {
            let currency = Currency::parse(&row.currency).map_err(StorageError::corrupt)?;
            Ok(BalanceView {
                currency: row.currency,
                available: format_minor(row.available, currency),
                held: format_minor(row.held, currency),
                paid_out: format_minor(row.paid_out, currency),
            })
        })
        .collect::<Result<Vec<_>, StorageError>>()?;
    Ok(Json(BalanceList { data }))
}
