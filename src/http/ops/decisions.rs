//! The two-person rule's routes: pending decisions, approve, reject.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};

use super::{Authorized, OpsJson, PathId};
use crate::domain::WithdrawalId;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::acts::{DecisionApprove, DecisionReject};
use crate::ops::routes;
use crate::ops::types::{DecisionResult, List, ReasonRequest, ReviewDecisionView};
use crate::ops::{self, Operator};

pub fn router() -> Router<AppState> {
    Router::new()
        .route(routes::REVIEW_DECISIONS.template(), get(list))
        .route(routes::DECISION_APPROVE.template(), post(approve))
        .route(routes::DECISION_REJECT.template(), post(reject))
}

async fn list(State(state): State<AppState>, operator: Operator) -> Result<Json<List<ReviewDecisionView>>, ApiError> {
    Ok(Json(ops::decisions::list(&state.ops(), &operator).await?))
}

async fn approve(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<DecisionApprove>,
    PathId(id): PathId,
    OpsJson(req): OpsJson<ReasonRequest>,
) -> Result<Json<DecisionResult>, ApiError> {
    Ok(Json(ops::decisions::approve(&state.ops(), &operator, WithdrawalId(id), req).await?))
}

async fn reject(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<DecisionReject>,
    PathId(id): PathId,
    OpsJson(req): OpsJson<ReasonRequest>,
) -> Result<Json<DecisionResult>, ApiError> {
    Ok(Json(ops::decisions::reject(&state.ops(), &operator, WithdrawalId(id), req).await?))
}
