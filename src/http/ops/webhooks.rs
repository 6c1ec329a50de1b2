//! `/ops/v1/webhook-events`: the provider's events, what each came to, and one with its raw body
//! and the provider's record (SPEC §15). Viewer.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};

use super::{OpsQuery, PathId};
use crate::domain::WebhookEventId;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::routes;
use crate::ops::types::{Page, WebhookEventQuery, WebhookEventView};
use crate::ops::{self, Operator};

pub fn router() -> Router<AppState> {
    Router::new().route(routes::WEBHOOK_EVENTS.template(), get(list)).route(routes::WEBHOOK_EVENT.template(), get(show))
}

async fn list(
    State(state): State<AppState>,
    operator: Operator,
    OpsQuery(q): OpsQuery<WebhookEventQuery>,
) -> Result<Json<Page<WebhookEventView>>, ApiError> {
    Ok(Json(ops::webhooks::list(&state.ops(), &operator, q).await?))
}

async fn show(
    State(state): State<AppState>,
    operator: Operator,
    PathId(id): PathId,
) -> Result<Json<WebhookEventView>, ApiError> {
    Ok(Json(ops::webhooks::show(&state.ops(), &operator, WebhookEventId(id)).await?))
}
