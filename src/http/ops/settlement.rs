//! `/ops/v1/settlement`: import a report (202 and a job; its progress under
//! `/imports/{id}`), the imported versions, the exceptions, their resolution and the later credit
//! of a refused return (SPEC §14).

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::{Authorized, OpsJson, OpsQuery, PathId};
use crate::domain::SettlementExceptionId;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::acts::{SettlementExceptionResolve, SettlementImport, SettlementReturnCredit};
use crate::ops::routes;
use crate::ops::types::{
    CreditReturnRequest, ExceptionQuery, ExceptionView, ImportListQuery, ImportRequest, ImportView, List, Page,
    ReportQuery, ReportView, ResolveExceptionRequest,
};
use crate::ops::{self, Operator};

/// The JSON around a report's CSV: the body may be this much larger than the CSV it carries
/// (each of the CSV's newlines and quotes is escaped in JSON, so the body is allowed twice the
/// report's limit plus this; the CSV itself is then held to the limit exactly).
const ENVELOPE_BYTES: usize = 64 * 1024;

/// The most bytes an import's body may have under `SETTLEMENT_MAX_REPORT_BYTES`.
fn body_limit(max_report_bytes: usize) -> usize {
    max_report_bytes.saturating_mul(2).saturating_add(ENVELOPE_BYTES)
}

fn too_large(max_report_bytes: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "report_too_large",
        format!("a settlement report may have at most {max_report_bytes} bytes (SETTLEMENT_MAX_REPORT_BYTES)"),
    )
    .with_field("csv")
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route(routes::SETTLEMENT_IMPORTS.template(), post(import).layer(DefaultBodyLimit::disable()).get(imports))
        .route(routes::SETTLEMENT_IMPORT.template(), get(import_status))
        .route(routes::SETTLEMENT_REPORTS.template(), get(reports))
        .route(routes::SETTLEMENT_EXCEPTIONS.template(), get(exceptions))
        .route(routes::SETTLEMENT_EXCEPTION.template(), get(exception))
        .route(routes::SETTLEMENT_EXCEPTION_RESOLVE.template(), post(resolve))
        .route(routes::SETTLEMENT_EXCEPTION_CREDIT_RETURN.template(), post(credit_return))
}

/// The body is refused with 413 from its `Content-Length` before a byte of it is read — with
/// `Connection: close`, since the unread body makes the connection unusable for a next request —
/// and read only up to the limit otherwise (a chunked body); the CSV it carries is then held to
/// `SETTLEMENT_MAX_REPORT_BYTES` exactly.
async fn import(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<SettlementImport>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let max = state.config().settlement.max_report_bytes;
    let limit = body_limit(max);
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        let mut refused = too_large(max).into_response();
        refused.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        return refused;
    }
    read_and_import(&state, &operator, body, max, limit).await.into_response()
}

async fn read_and_import(
    state: &AppState,
    operator: &Operator,
    body: Body,
    max: usize,
    limit: usize,
) -> Result<(StatusCode, Json<ImportView>), ApiError> {
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| too_large(max))?;
    let req: ImportRequest = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::unprocessable("invalid_body", "body", format!("the body is not an import request: {e}"))
    })?;
    drop(bytes);
    if req.csv.as_ref().is_some_and(|csv| csv.len() > max) {
        return Err(too_large(max));
    }
    Ok((StatusCode::ACCEPTED, Json(ops::settlement::import(&state.ops(), operator, req).await?)))
}

async fn import_status(
    State(state): State<AppState>,
    operator: Operator,
    PathId(id): PathId,
) -> Result<Json<ImportView>, ApiError> {
    Ok(Json(ops::settlement::import_status(&state.ops(), &operator, id).await?))
}

async fn imports(
    State(state): State<AppState>,
    operator: Operator,
    OpsQuery(q): OpsQuery<ImportListQuery>,
) -> Result<Json<List<ImportView>>, ApiError> {
    Ok(Json(ops::settlement::imports(&state.ops(), &operator, q).await?))
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

async fn credit_return(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<SettlementReturnCredit>,
    PathId(id): PathId,
    OpsJson(req): OpsJson<CreditReturnRequest>,
) -> Result<Json<ExceptionView>, ApiError> {
    Ok(Json(ops::settlement::credit_return(&state.ops(), &operator, SettlementExceptionId(id), req).await?))
}
