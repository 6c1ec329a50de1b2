//! `/ops/v1/withdrawals`: the review queue, one withdrawal's evidence, resolve, reconcile now.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};

use super::{Authorized, OpsJson, OpsQuery, PathId};
use crate::domain::WithdrawalId;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::acts::{WithdrawalReconcile, WithdrawalResolve};
use crate::ops::routes;
use crate::ops::types::{
    OpsWithdrawal, Page, ReasonRequest, Reconciling, ResolveRequest, Resolved, WithdrawalDetail, WithdrawalQuery,
};
use crate::ops::{self, Operator};

pub fn router() -> Router<AppState> {
    Router::new()
        .route(routes::WITHDRAWALS.template(), get(list))
        .route(routes::WITHDRAWAL.template(), get(show))
        .route(routes::WITHDRAWAL_RESOLVE.template(), post(resolve))
        .route(routes::WITHDRAWAL_RECONCILE.template(), post(reconcile))
}

/// 202: the reconciliation is queued, due now; its result shows on the withdrawal.
async fn reconcile(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<WithdrawalReconcile>,
    PathId(id): PathId,
    OpsJson(req): OpsJson<ReasonRequest>,
) -> Result<(StatusCode, Json<Reconciling>), ApiError> {
    let queued = ops::review::reconcile_now(&state.ops(), &operator, WithdrawalId(id), req).await?;
    Ok((StatusCode::ACCEPTED, Json(queued)))
}

async fn list(
    State(state): State<AppState>,
    operator: Operator,
    OpsQuery(q): OpsQuery<WithdrawalQuery>,
) -> Result<Json<Page<OpsWithdrawal>>, ApiError> {
    Ok(Json(ops::review::list(&state.ops(), &operator, q).await?))
}

async fn show(
    State(state): State<AppState>,
    operator: Operator,
    PathId(id): PathId,
) -> Result<Json<WithdrawalDetail>, ApiError> {
    Ok(Json(ops::review::show(&state.ops(), &operator, WithdrawalId(id)).await?))
}

/// 200 when applied; 202 when the decision waits for a second operator.
async fn resolve(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<WithdrawalResolve>,
    PathId(id): PathId,
    OpsJson(req): OpsJson<ResolveRequest>,
) -> Result<(StatusCode, Json<Resolved>), ApiError> {
    let resolved = ops::review::resolve(&state.ops(), &operator, WithdrawalId(id), req).await?;
    let status = if resolved.is_pending_approval() { StatusCode::ACCEPTED } else { StatusCode::OK };
    Ok((status, Json(resolved)))
}
