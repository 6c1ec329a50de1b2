//! `GET /ops/v1/audit`: the audit log, newest first, filterable.

use axum::extract::{Query, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::review::{decode_cursor, encode_cursor, page_limit};
use super::{Operator, Role};
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::storage::audit::{self as store, AuditFilter};

pub fn router() -> Router<AppState> {
    Router::new().route("/ops/v1/audit", get(list))
}

#[derive(Debug, Deserialize)]
pub struct AuditQuery {
    pub operator_id: Option<Uuid>,
    pub action: Option<String>,
    pub target_id: Option<String>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

async fn list(
    State(state): State<AppState>,
    operator: Operator,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    operator.require(Role::Viewer)?;
    let q = crate::http::error::query_params(query)?;
    let limit = page_limit(q.limit)?;
    let filter = AuditFilter {
        operator_id: q.operator_id,
        action: q.action,
        target_id: q.target_id,
        before: q.cursor.as_deref().map(decode_cursor).transpose()?,
        limit: limit + 1,
    };
    let mut rows = store::list(state.db(), &filter).await?;
    let next = if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(|r| encode_cursor(r.at, r.id))
    } else {
        None
    };
    let data: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({"id": r.id, "operator_id": r.operator_id, "operator_name": r.operator_name, "role": r.role,
                        "action": r.action, "target_type": r.target_type, "target_id": r.target_id,
                        "reason": r.reason, "parameters": r.parameters.0, "result": r.result, "at": r.at.0})
        })
        .collect();
    Ok(Json(json!({"data": data, "next_cursor": next})))
}
