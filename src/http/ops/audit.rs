//! `GET /ops/v1/audit`.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};

use super::OpsQuery;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::routes;
use crate::ops::types::{AuditEntry, AuditQuery, Page};
use crate::ops::{self, Operator};

pub fn router() -> Router<AppState> {
    Router::new().route(routes::AUDIT.template(), get(list))
}

async fn list(
    State(state): State<AppState>,
    operator: Operator,
    OpsQuery(q): OpsQuery<AuditQuery>,
) -> Result<Json<Page<AuditEntry>>, ApiError> {
    Ok(Json(ops::audit::list(&state.ops(), &operator, q).await?))
}
