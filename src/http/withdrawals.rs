//! The withdrawal resource over HTTP (SPEC §3): thin handlers that extract the request, call the
//! customer core ([`crate::customer::withdrawals`]) and serialise its answer.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};

use super::auth::Customer;
use super::correlation::CorrelationId;
use super::error::ApiError;
use super::input::ApiQuery;
use super::AppState;
use crate::customer::withdrawals::{self as service, Caller, Created};
use crate::domain::IdempotencyKey;

pub use crate::customer::types::{
    CreateWithdrawalRequest, DestinationInput, DestinationView, ListQuery, ReturnView, WithdrawalList, WithdrawalView,
};
pub use crate::customer::withdrawals::{parse_request, request_fingerprint};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/withdrawals", post(create).get(list))
        .route("/v1/withdrawals/{id}", get(read))
        .route("/v1/withdrawals/{id}/cancel", post(cancel))
}

/// The `Idempotency-Key` header (SPEC §3): 400 `idempotency_key_missing` or `idempotency_key_invalid`.
/// Shared by every route that takes one (withdrawals, credits).
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<IdempotencyKey, ApiError> {
    let raw = headers.get("idempotency-key").ok_or_else(|| {
        ApiError::new(StatusCode::BAD_REQUEST, "idempotency_key_missing", "the Idempotency-Key header is required")
            .with_field("Idempotency-Key")
    })?;
    let raw = raw.to_str().map_err(|_| {
        ApiError::new(StatusCode::BAD_REQUEST, "idempotency_key_invalid", "the Idempotency-Key must be visible ASCII")
            .with_field("Idempotency-Key")
    })?;
    IdempotencyKey::parse(raw).map_err(|e| {
        ApiError::new(StatusCode::BAD_REQUEST, "idempotency_key_invalid", e.to_string()).with_field("Idempotency-Key")
    })
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[utoipa::path(post, path = "/v1/withdrawals", tag = "withdrawals", security(("api_key" = [])),
    request_body = CreateWithdrawalRequest,
    params(("Idempotency-Key" = String, Header, description = "1–255 visible ASCII characters; scoped to the account, kept at least 24 h")),
    responses(
        (status = 201, description = "Created; funds held", body = WithdrawalView),
        (status = 200, description = "Never; a replay repeats the stored status (201) with `Idempotent-Replayed: true`"),
        (status = 400, description = "idempotency_key_missing, idempotency_key_invalid, malformed_json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 401, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "idempotency_request_in_progress", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "idempotency_key_reused, insufficient_funds, or a field error", body = super::error::Problem, content_type = "application/problem+json"),
    ))]
#[tracing::instrument(skip_all, fields(account_id = %customer.account_id))]
pub async fn create(
    State(state): State<AppState>,
    customer: Customer,
    Extension(correlation): Extension<CorrelationId>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers)?;
    let body = body.map_err(|rejection| {
        ApiError::new(rejection.status(), "payload_too_large", "the request body is too large or unreadable")
    })?;
    let caller = Caller { account_id: customer.account_id, correlation_id: &correlation.0 };
    match service::create(&state.customers(), &caller, &key, &body).await? {
        Created::New { withdrawal, body } => {
            let mut response = json_response(StatusCode::CREATED, body);
            if let Ok(location) = HeaderValue::from_str(&format!("/v1/withdrawals/{}", withdrawal.id)) {
                response.headers_mut().insert(header::LOCATION, location);
            }
            Ok(response)
        }
        Created::Replayed { status, body } => {
            let status = StatusCode::from_u16(status).map_err(anyhow::Error::from)?;
            let mut response = json_response(status, body);
            response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
            Ok(response)
        }
    }
}

#[utoipa::path(get, path = "/v1/withdrawals/{id}", tag = "withdrawals", security(("api_key" = [])),
    params(("id" = Uuid, Path)),
    responses(
        (status = 200, body = WithdrawalView),
        (status = 401, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such withdrawal for this account", body = super::error::Problem, content_type = "application/problem+json"),
    ))]
pub async fn read(
    State(state): State<AppState>,
    customer: Customer,
    Path(id): Path<String>,
) -> Result<Json<WithdrawalView>, ApiError> {
    Ok(Json(service::read(&state.customers(), customer.account_id, &id).await?))
}

#[utoipa::path(get, path = "/v1/withdrawals", tag = "withdrawals", security(("api_key" = [])),
    params(ListQuery),
    responses(
        (status = 200, description = "Newest first", body = WithdrawalList),
        (status = 401, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "invalid_query, invalid_status, invalid_limit, invalid_cursor", body = super::error::Problem, content_type = "application/problem+json"),
    ))]
pub async fn list(
    State(state): State<AppState>,
    customer: Customer,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<WithdrawalList>, ApiError> {
    Ok(Json(service::list(&state.customers(), customer.account_id, &query).await?))
}

#[utoipa::path(post, path = "/v1/withdrawals/{id}/cancel", tag = "withdrawals", security(("api_key" = [])),
    params(("id" = Uuid, Path)),
    responses(
        (status = 200, description = "Cancelled: status failed, funds released", body = WithdrawalView),
        (status = 401, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "withdrawal_not_cancellable: no longer pending", body = super::error::Problem, content_type = "application/problem+json"),
    ))]
#[tracing::instrument(skip_all, fields(account_id = %customer.account_id, withdrawal_id = %id))]
pub async fn cancel(
    State(state): State<AppState>,
    customer: Customer,
    Extension(correlation): Extension<CorrelationId>,
    Path(id): Path<String>,
) -> Result<Json<WithdrawalView>, ApiError> {
    let caller = Caller { account_id: customer.account_id, correlation_id: &correlation.0 };
    Ok(Json(service::cancel(&state.customers(), &caller, &id).await?))
}
