//! `GET /v1/balances`: the authenticated account's available, held and paid-out money, from the
//! customer core ([`crate::customer::balances`]).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};

use super::auth::Customer;
use super::error::ApiError;
use super::AppState;

use crate::customer::types::BalanceList;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/balances", get(balances))
}

#[utoipa::path(get, path = "/v1/balances", tag = "balances", security(("api_key" = [])), responses(
    (status = 200, body = BalanceList),
    (status = 401, body = super::error::Problem, content_type = "application/problem+json")
))]
pub async fn balances(State(state): State<AppState>, customer: Customer) -> Result<Json<BalanceList>, ApiError> {
    Ok(Json(crate::customer::balances::list(&state.customers(), customer.account_id).await?))
}
