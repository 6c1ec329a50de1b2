//! `POST /ops/v1/accounts/{id}/credits` (treasury or admin): money entering an account, with an
//! `Idempotency-Key` as on the customer API. 201 with the credit; a replay of the key answers the
//! stored credit again with `Idempotent-Replayed: true`.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

use super::{Authorized, OpsJson, PathId};
use crate::domain::AccountId;
use crate::http::error::ApiError;
use crate::http::withdrawals::idempotency_key;
use crate::http::AppState;
use crate::ops::acts::AccountCredit;
use crate::ops::routes;
use crate::ops::types::CreditRequest;

pub fn router() -> Router<AppState> {
    Router::new().route(routes::ACCOUNT_CREDITS.template(), post(credit))
}

async fn credit(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<AccountCredit>,
    PathId(account): PathId,
    headers: HeaderMap,
    OpsJson(req): OpsJson<CreditRequest>,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers)?;
    let done = crate::ops::credits::credit(&state.ops(), &operator, AccountId(account), &key, req).await?;
    let mut response = (StatusCode::CREATED, Json(done.credit)).into_response();
    if done.replayed {
        response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}
