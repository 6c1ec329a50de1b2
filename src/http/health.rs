//! `/healthz` (the process is up) and `/readyz` (the database answers, migrations are current).

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::error::ApiError;
use super::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz))
}

#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "The process is up")))]
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

#[utoipa::path(get, path = "/readyz", tag = "health", responses(
    (status = 200, description = "Database reachable and migrations current"),
    (status = 503, description = "Not ready", body = super::error::Problem, content_type = "application/problem+json")
))]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    match state.db().check_ready().await {
        Ok(()) => Ok(Json(json!({"status": "ready"}))),
        Err(err) => {
            tracing::warn!(error = format!("{:#}", anyhow::Error::from(err)), "not ready");
            Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_ready", "the database is not ready"))
        }
    }
}
