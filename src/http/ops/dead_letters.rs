//! `/ops/v1/dead-letters`: list, summary, export, one envelope, close.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};

use super::{Authorized, OpsJson, OpsQuery, PathId};
use crate::domain::DeadLetterId;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::acts::DeadLetterClose;
use crate::ops::routes;
use crate::ops::types::{
    Closed, DeadLetterExportQuery, DeadLetterGroup, DeadLetterQuery, DeadLetterView, List, Page, ReasonRequest,
};
use crate::ops::{self, Operator};

pub fn router() -> Router<AppState> {
    Router::new()
        .route(routes::DEAD_LETTERS.template(), get(list))
        .route(routes::DEAD_LETTERS_SUMMARY.template(), get(summary))
        .route(routes::DEAD_LETTERS_EXPORT.template(), get(export))
        .route(routes::DEAD_LETTER.template(), get(show))
        .route(routes::DEAD_LETTER_CLOSE.template(), post(close))
}

async fn list(
    State(state): State<AppState>,
    operator: Operator,
    OpsQuery(q): OpsQuery<DeadLetterQuery>,
) -> Result<Json<Page<DeadLetterView>>, ApiError> {
    Ok(Json(ops::dead_letters::list(&state.ops(), &operator, q).await?))
}

async fn export(
    State(state): State<AppState>,
    operator: Operator,
    OpsQuery(q): OpsQuery<DeadLetterExportQuery>,
) -> Result<Json<Page<DeadLetterView>>, ApiError> {
    Ok(Json(ops::dead_letters::export(&state.ops(), &operator, q).await?))
}

async fn summary(State(state): State<AppState>, operator: Operator) -> Result<Json<List<DeadLetterGroup>>, ApiError> {
    Ok(Json(ops::dead_letters::summary(&state.ops(), &operator).await?))
}

async fn show(
    State(state): State<AppState>,
    operator: Operator,
    PathId(id): PathId,
) -> Result<Json<DeadLetterView>, ApiError> {
    Ok(Json(ops::dead_letters::show(&state.ops(), &operator, DeadLetterId(id)).await?))
}

async fn close(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<DeadLetterClose>,
    PathId(id): PathId,
    OpsJson(req): OpsJson<ReasonRequest>,
) -> Result<Json<Closed>, ApiError> {
    Ok(Json(ops::dead_letters::close(&state.ops(), &operator, DeadLetterId(id), req).await?))
}
