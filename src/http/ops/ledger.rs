//! `GET /ops/v1/ledger/verify`.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};

use super::OpsQuery;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::routes;
use crate::ops::types::{LedgerCheck, LedgerQuery};
use crate::ops::{self, Operator};

pub fn router() -> Router<AppState> {
    Router::new().route(routes::LEDGER_VERIFY.template(), get(verify))
}

async fn verify(
    State(state): State<AppState>,
    operator: Operator,
    OpsQuery(q): OpsQuery<LedgerQuery>,
) -> Result<Json<LedgerCheck>, ApiError> {
    Ok(Json(ops::ledger::verify(&state.ops(), &operator, q).await?))
}
