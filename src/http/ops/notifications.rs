//! `/ops/v1/webhook-endpoints` and `/ops/v1/notifications`: customers' webhook endpoints with
//! their health, the notifications with what each receiver answered, one with its event and
//! attempts (viewer), and redelivery (operator, with a reason; audited). SPEC §17.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};

use super::{Authorized, OpsJson, OpsQuery, PathId};
use crate::domain::NotificationId;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::acts::NotificationRedeliver;
use crate::ops::routes;
use crate::ops::types::{
    List, NotificationDetail, NotificationQuery, NotificationView, ReasonRequest, Redelivered, WebhookEndpointQuery,
    WebhookEndpointView,
};
use crate::ops::{self, Operator};

pub fn router() -> Router<AppState> {
    Router::new()
        .route(routes::WEBHOOK_ENDPOINTS.template(), get(endpoints))
        .route(routes::NOTIFICATIONS.template(), get(list))
        .route(routes::NOTIFICATION.template(), get(show))
        .route(routes::NOTIFICATION_REDELIVER.template(), post(redeliver))
}

async fn endpoints(
    State(state): State<AppState>,
    operator: Operator,
    OpsQuery(q): OpsQuery<WebhookEndpointQuery>,
) -> Result<Json<List<WebhookEndpointView>>, ApiError> {
    Ok(Json(ops::notifications::endpoints(&state.ops(), &operator, q).await?))
}

async fn list(
    State(state): State<AppState>,
    operator: Operator,
    OpsQuery(q): OpsQuery<NotificationQuery>,
) -> Result<Json<List<NotificationView>>, ApiError> {
    Ok(Json(ops::notifications::notifications(&state.ops(), &operator, q).await?))
}

async fn show(
    State(state): State<AppState>,
    operator: Operator,
    PathId(id): PathId,
) -> Result<Json<NotificationDetail>, ApiError> {
    Ok(Json(ops::notifications::notification(&state.ops(), &operator, NotificationId(id)).await?))
}

/// 202: the notification is pending again; its new delivery job sends it.
async fn redeliver(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<NotificationRedeliver>,
    PathId(id): PathId,
    OpsJson(req): OpsJson<ReasonRequest>,
) -> Result<(StatusCode, Json<Redelivered>), ApiError> {
    let queued = ops::notifications::redeliver(&state.ops(), &operator, NotificationId(id), req).await?;
    Ok((StatusCode::ACCEPTED, Json(queued)))
}
