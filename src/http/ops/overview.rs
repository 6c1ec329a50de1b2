//! `GET /ops/v1/overview` and `GET /ops/v1/breakers`.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};

use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::types::{BreakerView, List, Overview};
use crate::ops::{self, Operator};

pub fn router() -> Router<AppState> {
    Router::new().route("/ops/v1/overview", get(overview)).route("/ops/v1/breakers", get(breakers))
}

async fn breakers(State(state): State<AppState>, operator: Operator) -> Result<Json<List<BreakerView>>, ApiError> {
    Ok(Json(ops::overview::breakers(&state.ops(), &operator).await?))
}

async fn overview(State(state): State<AppState>, operator: Operator) -> Result<Json<Overview>, ApiError> {
    Ok(Json(ops::overview::overview(&state.ops(), &operator).await?))
}
