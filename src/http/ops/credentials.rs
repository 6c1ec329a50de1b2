//! The credential routes (admin only, but any role may rotate its own token): API keys per account,
//! operators and their tokens. The rotation route lets every role in; `ops::credentials::rotate_token`
//! refuses another's token below admin.

use axum::extract::{FromRequest, Request, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};

use super::{Authorized, OpsJson, PathId};
use crate::domain::{AccountId, OperatorId};
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::acts::{
    ApiKeyCreate, ApiKeyList, ApiKeyRevoke, OperatorDisable, OperatorEnable, OperatorList, OperatorRotateOwnToken,
};
use crate::ops::routes;
use crate::ops::types::{ApiKeyView, CreateKey, List, OperatorView, OptionalReason, ReasonRequest};
use crate::ops::{self};

pub fn router() -> Router<AppState> {
    Router::new()
        .route(routes::ACCOUNT_KEYS.template(), get(list_keys).post(create_key))
        .route(routes::API_KEY_REVOKE.template(), post(revoke_key))
        .route(routes::OPERATORS.template(), get(list_operators))
        .route(routes::OPERATOR_DISABLE.template(), post(disable))
        .route(routes::OPERATOR_ENABLE.template(), post(enable))
        .route(routes::OPERATOR_ROTATE_TOKEN.template(), post(rotate_token))
}

async fn list_keys(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<ApiKeyList>,
    PathId(account): PathId,
) -> Result<Json<List<ApiKeyView>>, ApiError> {
    Ok(Json(ops::credentials::list_keys(&state.ops(), &operator, AccountId(account)).await?))
}

async fn create_key(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<ApiKeyCreate>,
    PathId(account): PathId,
    OpsJson(req): OpsJson<CreateKey>,
) -> Result<(StatusCode, Json<ApiKeyView>), ApiError> {
    let key = ops::credentials::create_key(&state.ops(), &operator, AccountId(account), req).await?;
    Ok((StatusCode::CREATED, Json(key)))
}

async fn revoke_key(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<ApiKeyRevoke>,
    PathId(key): PathId,
    OpsJson(req): OpsJson<ReasonRequest>,
) -> Result<Json<ApiKeyView>, ApiError> {
    Ok(Json(ops::credentials::revoke_key(&state.ops(), &operator, key, req).await?))
}

async fn list_operators(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<OperatorList>,
) -> Result<Json<List<OperatorView>>, ApiError> {
    Ok(Json(ops::credentials::list_operators(&state.ops(), &operator).await?))
}

async fn disable(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<OperatorDisable>,
    PathId(target): PathId,
    OpsJson(req): OpsJson<ReasonRequest>,
) -> Result<Json<OperatorView>, ApiError> {
    Ok(Json(ops::credentials::disable(&state.ops(), &operator, OperatorId(target), req).await?))
}

async fn enable(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<OperatorEnable>,
    PathId(target): PathId,
    OpsJson(req): OpsJson<ReasonRequest>,
) -> Result<Json<OperatorView>, ApiError> {
    Ok(Json(ops::credentials::enable(&state.ops(), &operator, OperatorId(target), req).await?))
}

/// Every role gets in (one's own token); whether the path names the caller decides the role
/// needed, so it is checked here, after the path and before the body.
async fn rotate_token(
    State(state): State<AppState>,
    Authorized(operator, _): Authorized<OperatorRotateOwnToken>,
    PathId(target): PathId,
    request: Request,
) -> Result<Json<OperatorView>, ApiError> {
    let (ops, target) = (state.ops(), OperatorId(target));
    ops::credentials::authorize_rotation(&ops, &operator, target).await?;
    // The body is read only now: a caller refused for the role never has it judged (or audited).
    let OpsJson(req) = OpsJson::<OptionalReason>::from_request(request, &state).await?;
    Ok(Json(ops::credentials::rotate_token(&ops, &operator, target, req).await?))
}
