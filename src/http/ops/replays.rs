//! `/ops/v1/replays`: start (or dry-run), list, one run, and its controls — one route per control,
//! each with its own role and audit name.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};

use super::{Authorized, OpsJson, OpsQuery, PathId};
use crate::domain::ReplayRunId;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::acts::{ReplayApprove, ReplayCancel, ReplayPause, ReplayResume, ReplayStart};
use crate::ops::routes;
use crate::ops::types::{List, ReasonRequest, ReplayControl, ReplayQuery, ReplayRunView, StartReplay, Started};
use crate::ops::{self, Operator};

pub fn router() -> Router<AppState> {
    Router::new()
        .route(routes::REPLAYS.template(), post(start).get(list))
        .route(routes::REPLAY.template(), get(status))
        .route(routes::REPLAY_PAUSE.template(), post(pause))
        .route(routes::REPLAY_RESUME.template(), post(resume))
        .route(routes::REPLAY_CANCEL.template(), post(cancel))
        .route(routes::REPLAY_APPROVE.template(), post(approve))
}

async fn list(
    State(state): State<AppState>,
    operator: Operator,
    OpsQuery(q): OpsQuery<ReplayQuery>,
) -> Result<Json<List<ReplayRunView>>, ApiError> {
    Ok(Json(ops::replays::list(&state.ops(), &operator, q).await?))
}

/// 200 with the report for a dry run; 201 with the run otherwise.
async fn start(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<ReplayStart>,
    OpsJson(req): OpsJson<StartReplay>,
) -> Result<(StatusCode, Json<Started>), ApiError> {
    let started = ops::replays::start(&state.ops(), &operator, req).await?;
    let status = match started {
        Started::DryRun(_) => StatusCode::OK,
        Started::Run(_) => StatusCode::CREATED,
    };
    Ok((status, Json(started)))
}

async fn status(
    State(state): State<AppState>,
    operator: Operator,
    PathId(id): PathId,
) -> Result<Json<ReplayRunView>, ApiError> {
    Ok(Json(ops::replays::status(&state.ops(), &operator, ReplayRunId(id)).await?))
}

async fn control(
    state: &AppState,
    operator: &Operator,
    id: uuid::Uuid,
    control: ReplayControl,
    req: ReasonRequest,
) -> Result<Json<ReplayRunView>, ApiError> {
    Ok(Json(ops::replays::control(&state.ops(), operator, ReplayRunId(id), control, req).await?))
}

async fn pause(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<ReplayPause>,
    PathId(id): PathId,
    OpsJson(req): OpsJson<ReasonRequest>,
) -> Result<Json<ReplayRunView>, ApiError> {
    control(&state, &operator, id, ReplayControl::Pause, req).await
}

async fn resume(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<ReplayResume>,
    PathId(id): PathId,
    OpsJson(req): OpsJson<ReasonRequest>,
) -> Result<Json<ReplayRunView>, ApiError> {
    control(&state, &operator, id, ReplayControl::Resume, req).await
}

async fn cancel(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<ReplayCancel>,
    PathId(id): PathId,
    OpsJson(req): OpsJson<ReasonRequest>,
) -> Result<Json<ReplayRunView>, ApiError> {
    control(&state, &operator, id, ReplayControl::Cancel, req).await
}

async fn approve(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<ReplayApprove>,
    PathId(id): PathId,
    OpsJson(req): OpsJson<ReasonRequest>,
) -> Result<Json<ReplayRunView>, ApiError> {
    control(&state, &operator, id, ReplayControl::Approve, req).await
}
