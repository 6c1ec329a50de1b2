//! `/ops/v1/settlement`: import a report, the imported versions, the exceptions and their
//! resolution (SPEC §14).

use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::{Authorized, OpsJson, OpsQuery, PathId, ReportJson};
use crate::domain::SettlementExceptionId;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::acts::{SettlementExceptionResolve, SettlementImport};
use crate::ops::types::{
    ExceptionQuery, ExceptionView, ImportRequest, ImportSummary, List, Page, ReportQuery, ReportView,
    ResolveExceptionRequest,
};
use crate::ops::{self, Operator};

/// The largest report accepted as a request body (a day's CSV of a busy provider fits easily).
pub const MAX_REPORT_BODY_BYTES: usize = 64 * 1024 * 1024;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ops/v1/settlement/imports", post(import).layer(DefaultBodyLimit::max(MAX_REPORT_BODY_BYTES)))
        .route("/ops/v1/settlement/reports", get(reports))
        .route("/ops/v1/settlement/exceptions", get(exceptions))
        .route("/ops/v1/settlement/exceptions/{id}", get(exception))
        .route("/ops/v1/settlement/exceptions/{id}/resolve", post(resolve))
}

async fn import(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<SettlementImport>,
    ReportJson(req): ReportJson<ImportRequest>,
) -> Result<Json<ImportSummary>, ApiError> {
    Ok(Json(ops::settlement::import(&state.ops(), &operator, req).await?))
}

async fn reports(
    State(state): State<AppState>,
    operator: Operator,
    OpsQuery(q): OpsQuery<ReportQuery>,
) -> Result<Json<List<ReportView>>, ApiError> {
    Ok(Json(ops::settlement::reports(&state.ops(), &operator, q).await?))
}

async fn exceptions(
    State(state): State<AppState>,
    operator: Operator,
    OpsQuery(q): OpsQuery<ExceptionQuery>,
) -> Result<Json<Page<ExceptionView>>, ApiError> {
    Ok(Json(ops::settlement::exceptions(&state.ops(), &operator, q).await?))
}

async fn exception(
    State(state): State<AppState>,
    operator: Operator,
    PathId(id): PathId,
) -> Result<Json<ExceptionView>, ApiError> {
    Ok(Json(ops::settlement::exception(&state.ops(), &operator, SettlementExceptionId(id)).await?))
}

async fn resolve(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<SettlementExceptionResolve>,
    PathId(id): PathId,
    OpsJson(req): OpsJson<ResolveExceptionRequest>,
) -> Result<Json<ExceptionView>, ApiError> {
    Ok(Json(ops::settlement::resolve(&state.ops(), &operator, SettlementExceptionId(id), req).await?))
}
