//! Customer notifications over HTTP (SPEC §17): thin handlers over
//! [`crate::customer::notifications`] — the events API and the webhook endpoints.

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};

use super::auth::Customer;
use super::error::ApiError;
use super::input::ApiQuery;
use super::AppState;
use crate::customer::notifications::{
    self as service, CreateEndpointRequest, EndpointList, EndpointView, EventList, EventsQuery,
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/events", get(events))
        .route("/v1/webhook-endpoints", post(create).get(list))
        .route("/v1/webhook-endpoints/{id}", delete(remove))
        .route("/v1/webhook-endpoints/{id}/rotate-secret", post(rotate_secret))
}

fn body<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    body.map(|Json(b)| b).map_err(|rejection| {
        let status = match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
            StatusCode::UNPROCESSABLE_ENTITY => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::BAD_REQUEST,
        };
        let code = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
            StatusCode::UNPROCESSABLE_ENTITY => "invalid_body",
            _ => "malformed_json",
        };
        ApiError::new(status, code, rejection.body_text())
    })
}

#[utoipa::path(get, path = "/v1/events", tag = "notifications", security(("api_key" = [])),
    params(EventsQuery),
    responses(
        (status = 200, description = "Oldest first; `next_cursor` is the `after` of the next page", body = EventList),
        (status = 401, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "invalid_query, invalid_type, invalid_limit, invalid_cursor", body = super::error::Problem, content_type = "application/problem+json"),
    ))]
pub async fn events(
    State(state): State<AppState>,
    customer: Customer,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Json<EventList>, ApiError> {
    Ok(Json(service::events(&state.customers(), customer.account_id, &query).await?))
}

#[utoipa::path(post, path = "/v1/webhook-endpoints", tag = "notifications", security(("api_key" = [])),
    request_body = CreateEndpointRequest,
    responses(
        (status = 201, description = "Registered; `secret` is shown only here", body = EndpointView),
        (status = 400, description = "malformed_json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 401, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "too_many_endpoints", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "invalid_webhook_url (not https, or not a public address), invalid_events, invalid_body", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "notifications_unavailable: no NOTIFY_SECRET_KEY", body = super::error::Problem, content_type = "application/problem+json"),
    ))]
#[tracing::instrument(skip_all, fields(account_id = %customer.account_id))]
pub async fn create(
    State(state): State<AppState>,
    customer: Customer,
    req: Result<Json<CreateEndpointRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<EndpointView>), ApiError> {
    let req = body(req)?;
    Ok((StatusCode::CREATED, Json(service::create(&state.customers(), customer.account_id, &req).await?)))
}

#[utoipa::path(get, path = "/v1/webhook-endpoints", tag = "notifications", security(("api_key" = [])),
    responses(
        (status = 200, description = "The account's endpoints, oldest first, without secrets", body = EndpointList),
        (status = 401, body = super::error::Problem, content_type = "application/problem+json"),
    ))]
pub async fn list(State(state): State<AppState>, customer: Customer) -> Result<Json<EndpointList>, ApiError> {
    Ok(Json(service::list(&state.customers(), customer.account_id).await?))
}

#[utoipa::path(delete, path = "/v1/webhook-endpoints/{id}", tag = "notifications", security(("api_key" = [])),
    params(("id" = String, Path, description = "we_…")),
    responses(
        (status = 204, description = "Deleted: nothing more is delivered to it"),
        (status = 401, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such endpoint for this account", body = super::error::Problem, content_type = "application/problem+json"),
    ))]
#[tracing::instrument(skip_all, fields(account_id = %customer.account_id))]
pub async fn remove(
    State(state): State<AppState>,
    customer: Customer,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    service::delete(&state.customers(), customer.account_id, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/webhook-endpoints/{id}/rotate-secret", tag = "notifications", security(("api_key" = [])),
    params(("id" = String, Path, description = "we_…")),
    responses(
        (status = 200, description = "A new secret, shown only here; the previous one signs too until `previous_secret_expires_at`", body = EndpointView),
        (status = 401, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "notifications_unavailable", body = super::error::Problem, content_type = "application/problem+json"),
    ))]
#[tracing::instrument(skip_all, fields(account_id = %customer.account_id))]
pub async fn rotate_secret(
    State(state): State<AppState>,
    customer: Customer,
    Path(id): Path<String>,
) -> Result<Json<EndpointView>, ApiError> {
    Ok(Json(service::rotate_secret(&state.customers(), customer.account_id, &id).await?))
}
