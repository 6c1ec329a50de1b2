//! `GET /ops/v1/overview`, `GET /ops/v1/breakers` and the breakers' kill switch
//! (`POST /ops/v1/breakers/{name}/force-open|force-closed|release`, admin).

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::{Authorized, OpsJson};
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::acts::{BreakerForceClosed, BreakerForceOpen, BreakerRelease};
use crate::ops::routes;
use crate::ops::types::BreakerAction;
use crate::ops::types::{BreakerChanged, BreakerView, List, Overview, ReasonRequest};
use crate::ops::{self, Operator};

pub fn router() -> Router<AppState> {
    // The breaker's name is the path's `{id}`: the audit row of a refusal names it.
    Router::new()
        .route(routes::OVERVIEW.template(), get(overview))
        .route(routes::BREAKERS.template(), get(breakers))
        .route(routes::BREAKER_FORCE_OPEN.template(), post(force_open))
        .route(routes::BREAKER_FORCE_CLOSED.template(), post(force_closed))
        .route(routes::BREAKER_RELEASE.template(), post(release))
}

async fn breakers(State(state): State<AppState>, operator: Operator) -> Result<Json<List<BreakerView>>, ApiError> {
    Ok(Json(ops::overview::breakers(&state.ops(), &operator).await?))
}

async fn overview(State(state): State<AppState>, operator: Operator) -> Result<Json<Overview>, ApiError> {
    Ok(Json(ops::overview::overview(&state.ops(), &operator).await?))
}

async fn force_open(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<BreakerForceOpen>,
    Path(name): Path<String>,
    OpsJson(req): OpsJson<ReasonRequest>,
) -> Result<Json<BreakerChanged>, ApiError> {
    Ok(Json(ops::overview::force_breaker(&state.ops(), &operator, &name, BreakerAction::ForceOpen, req).await?))
}

async fn force_closed(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<BreakerForceClosed>,
    Path(name): Path<String>,
    OpsJson(req): OpsJson<ReasonRequest>,
) -> Result<Json<BreakerChanged>, ApiError> {
    Ok(Json(ops::overview::force_breaker(&state.ops(), &operator, &name, BreakerAction::ForceClosed, req).await?))
}

async fn release(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<BreakerRelease>,
    Path(name): Path<String>,
    OpsJson(req): OpsJson<ReasonRequest>,
) -> Result<Json<BreakerChanged>, ApiError> {
    Ok(Json(ops::overview::force_breaker(&state.ops(), &operator, &name, BreakerAction::Release, req).await?))
}
