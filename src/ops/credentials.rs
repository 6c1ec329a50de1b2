//! Credential lifecycle (issue 17): customer API keys (several per account, for rotation) and
//! operator tokens, managed by admins. Every route is admin only; the role is checked before the
//! path and the body, and every action — done or refused — writes one audit row. A new secret is
//! in the response that creates it and nowhere else (stored hashed, never listed, never audited).
//!
//! | route | role |
//! |---|---|
//! | `GET /ops/v1/accounts/{id}/keys` | admin |
//! | `POST /ops/v1/accounts/{id}/keys` `{label?, reason?}` → 201, the key once | admin |
//! | `POST /ops/v1/api-keys/{id}/revoke` `{reason}` | admin |
//! | `GET /ops/v1/operators` | admin |
//! | `POST /ops/v1/operators/{id}/disable` `{reason}` (not the last enabled admin) | admin |
//! | `POST /ops/v1/operators/{id}/enable` `{reason}` | admin |
//! | `POST /ops/v1/operators/{id}/rotate-token` `{reason?}` → the new token once | admin |
//!
//! Authentication reads the database on every request (there is no credential cache), so a
//! revoke, a disable or a rotation takes effect on the next request, on every instance. A disable
//! or a rotation also ends the operator's console sessions.

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{path_id, require_reason, Audited, Operator, Role};
use crate::credentials::{self, API_KEY_PREFIX, OPERATOR_TOKEN_PREFIX};
use crate::domain::{AccountId, ApiKeyId, OperatorId};
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::storage::credentials::{self as stored, ApiKeyRow, Disabled, OperatorRow};
use crate::storage::{accounts, sessions};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ops/v1/accounts/{id}/keys", get(list_keys).post(create_key))
        .route("/ops/v1/api-keys/{id}/revoke", post(revoke_key))
        .route("/ops/v1/operators", get(list_operators))
        .route("/ops/v1/operators/{id}/disable", post(disable))
        .route("/ops/v1/operators/{id}/enable", post(enable))
        .route("/ops/v1/operators/{id}/rotate-token", post(rotate_token))
}

/// Longest key label.
const MAX_LABEL_CHARS: usize = 100;

pub fn key_json(k: &ApiKeyRow) -> Value {
    json!({
        "id": k.id, "account_id": k.account_id, "label": k.label, "created_at": k.created_at.0,
        "last_used_at": k.last_used_at.map(|t| t.0), "status": if k.revoked_at.is_some() { "revoked" } else { "active" },
        "revoked_at": k.revoked_at.map(|t| t.0), "revoked_reason": k.revoked_reason,
    })
}

pub fn operator_json(o: &OperatorRow) -> Value {
    json!({
        "id": o.id, "name": o.name, "role": o.role, "created_at": o.created_at.0,
        "status": if o.disabled_at.is_some() { "disabled" } else { "enabled" },
        "disabled_at": o.disabled_at.map(|t| t.0), "disabled_reason": o.disabled_reason,
        "token_rotated_at": o.token_rotated_at.map(|t| t.0),
    })
}

/// The role comes first (SPEC §8): a caller below admin is refused, and audited, before the path
/// or the body is looked at.
async fn admin_first(state: &AppState, operator: &Operator, audited: &Audited<'_>) -> Result<(), ApiError> {
    let (action, target_type, target) = (audited.action, audited.target_type, audited.target_id.clone());
    super::require_first(state, operator, Role::Admin, action, target_type, target).await
}

fn conflict(code: &str, detail: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::CONFLICT, code, detail)
}

/// An optional reason: absent means `default`; present, it obeys [`require_reason`].
fn optional_reason<'r>(reason: &'r Option<String>, default: &'r str) -> Result<&'r str, ApiError> {
    match reason {
        None => Ok(default),
        Some(reason) => require_reason(reason),
    }
}

/// `GET /ops/v1/accounts/{id}/keys` — the account's keys, oldest first, revoked ones included;
/// ids, labels and times only.
async fn list_keys(
    State(state): State<AppState>,
    operator: Operator,
    Path(raw): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let audited = Audited {
        action: "api_key.list",
        target_type: "account",
        target_id: raw.clone(),
        reason: "",
        parameters: json!({}),
    };
    admin_first(&state, &operator, &audited).await?;
    let account = AccountId(path_id(&raw)?);
    let keys = stored::list_api_keys(state.db(), account).await?.ok_or_else(ApiError::not_found)?;
    Ok(Json(json!({"data": keys.iter().map(key_json).collect::<Vec<_>>()})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateKeyRequest {
    pub label: Option<String>,
    pub reason: Option<String>,
}

/// `POST /ops/v1/accounts/{id}/keys` — a new key for the account (the old ones keep working until
/// revoked, so clients can move over). The response is the only place the key ever appears.
async fn create_key(
    State(state): State<AppState>,
    operator: Operator,
    Path(raw): Path<String>,
    body: Result<Json<CreateKeyRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let mut audited = Audited {
        action: "api_key.create",
        target_type: "account",
        target_id: raw.clone(),
        reason: "",
        parameters: json!({}),
    };
    admin_first(&state, &operator, &audited).await?;
    let account = AccountId(path_id(&raw)?);
    let req = super::body(body)?;
    audited.reason = req.reason.as_deref().unwrap_or("");
    audited.parameters = json!({"label": req.label});
    let result = async {
        let reason = optional_reason(&req.reason, "new API key")?;
        let label = match req.label.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(label) if label.chars().count() > MAX_LABEL_CHARS || label.chars().any(char::is_control) => {
                return Err(ApiError::unprocessable(
                    "invalid_label",
                    "label",
                    format!("a label is at most {MAX_LABEL_CHARS} printable characters"),
                ))
            }
            Some(label) => Some(label),
        };
        let issued = credentials::issue(API_KEY_PREFIX);
        let mut tx = state.db().begin().await?;
        if !accounts::account_exists(&mut tx, account).await? {
            return Err(ApiError::not_found());
        }
        stored::insert_api_key(&mut tx, ApiKeyId(issued.id), account, label, &issued.secret_hash).await?;
        let done =
            Audited { reason, parameters: json!({"key_id": issued.id, "label": label}), ..audited.clone_shallow() };
        done.record_ok(&mut tx, &operator).await?;
        tx.commit().await?;
        let row = stored::get_api_key(state.db(), ApiKeyId(issued.id)).await?.ok_or_else(ApiError::not_found)?;
        let mut body = key_json(&row);
        body["api_key"] = json!(issued.token);
        Ok((StatusCode::CREATED, Json(body)))
    }
    .await;
    audited.or_refuse(&state, &operator, result).await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReasonRequest {
    pub reason: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptionalReasonRequest {
    pub reason: Option<String>,
}

/// `POST /ops/v1/api-keys/{id}/revoke` — the key fails from the next request on.
async fn revoke_key(
    State(state): State<AppState>,
    operator: Operator,
    Path(raw): Path<String>,
    body: Result<Json<ReasonRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let mut audited = Audited {
        action: "api_key.revoke",
        target_type: "api_key",
        target_id: raw.clone(),
        reason: "",
        parameters: json!({}),
    };
    admin_first(&state, &operator, &audited).await?;
    let key_id = path_id(&raw)?;
    let req = super::body(body)?;
    audited.reason = &req.reason;
    let result = async {
        let reason = require_reason(&req.reason)?;
        let current = stored::get_api_key(state.db(), ApiKeyId(key_id)).await?.ok_or_else(ApiError::not_found)?;
        let done = Audited { parameters: json!({"account_id": current.account_id}), ..audited.clone_shallow() };
        let mut tx = state.db().begin().await?;
        let Some(revoked) = stored::revoke_api_key(&mut tx, ApiKeyId(key_id), &crate::redact::text(reason)).await?
        else {
            return Err(conflict("already_revoked", "this API key is already revoked"));
        };
        done.record_ok(&mut tx, &operator).await?;
        tx.commit().await?;
        tracing::info!(key_id = %key_id, account_id = %revoked.account_id, operator = %operator.id, "API key revoked");
        Ok(Json(key_json(&revoked)))
    }
    .await;
    audited.or_refuse(&state, &operator, result).await
}

/// `GET /ops/v1/operators` — every operator, oldest first, with status; no secrets.
async fn list_operators(State(state): State<AppState>, operator: Operator) -> Result<Json<Value>, ApiError> {
    let audited = Audited {
        action: "operator.list",
        target_type: "operator",
        target_id: "all".into(),
        reason: "",
        parameters: json!({}),
    };
    admin_first(&state, &operator, &audited).await?;
    let rows = stored::list_operators(state.db()).await?;
    Ok(Json(json!({"data": rows.iter().map(operator_json).collect::<Vec<_>>()})))
}

/// `POST /ops/v1/operators/{id}/disable` — their token fails from the next request on and their
/// console sessions end. The last enabled admin cannot be disabled (409 `last_admin`).
async fn disable(
    State(state): State<AppState>,
    operator: Operator,
    Path(raw): Path<String>,
    body: Result<Json<ReasonRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let mut audited = Audited {
        action: "operator.disable",
        target_type: "operator",
        target_id: raw.clone(),
        reason: "",
        parameters: json!({}),
    };
    admin_first(&state, &operator, &audited).await?;
    let target = OperatorId(path_id(&raw)?);
    let req = super::body(body)?;
    audited.reason = &req.reason;
    let result = async {
        let reason = require_reason(&req.reason)?;
        let mut tx = state.db().begin().await?;
        let row = match stored::disable_operator(&mut tx, target, &crate::redact::text(reason)).await? {
            Disabled::Done(row) => row,
            Disabled::NotFound => return Err(ApiError::not_found()),
            Disabled::AlreadyDisabled => return Err(conflict("already_disabled", "this operator is already disabled")),
            Disabled::LastAdmin => {
                return Err(conflict(
                    "last_admin",
                    "this is the last enabled admin: disabling them would leave nobody to administer the service. \
                     Create or enable another admin first (or rotate this admin's token instead)",
                ))
            }
        };
        let ended = sessions::end_all_for_operator(&mut tx, target).await?;
        let done = Audited { parameters: json!({"sessions_ended": ended}), ..audited.clone_shallow() };
        done.record_ok(&mut tx, &operator).await?;
        tx.commit().await?;
        tracing::info!(target_operator = %target, operator = %operator.id, "operator disabled");
        let mut body = operator_json(&row);
        body["sessions_ended"] = json!(ended);
        Ok(Json(body))
    }
    .await;
    audited.or_refuse(&state, &operator, result).await
}

/// `POST /ops/v1/operators/{id}/enable` — their current token works again (rotate it too if it
/// may have leaked). Console sessions ended by the disable stay ended.
async fn enable(
    State(state): State<AppState>,
    operator: Operator,
    Path(raw): Path<String>,
    body: Result<Json<ReasonRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let mut audited = Audited {
        action: "operator.enable",
        target_type: "operator",
        target_id: raw.clone(),
        reason: "",
        parameters: json!({}),
    };
    admin_first(&state, &operator, &audited).await?;
    let target = OperatorId(path_id(&raw)?);
    let req = super::body(body)?;
    audited.reason = &req.reason;
    let result = async {
        require_reason(&req.reason)?;
        if stored::get_operator(state.db(), target).await?.is_none() {
            return Err(ApiError::not_found());
        }
        let mut tx = state.db().begin().await?;
        let Some(row) = stored::enable_operator(&mut tx, target).await? else {
            return Err(conflict("not_disabled", "this operator is not disabled"));
        };
        audited.record_ok(&mut tx, &operator).await?;
        tx.commit().await?;
        tracing::info!(target_operator = %target, operator = %operator.id, "operator enabled");
        Ok(Json(operator_json(&row)))
    }
    .await;
    audited.or_refuse(&state, &operator, result).await
}

/// `POST /ops/v1/operators/{id}/rotate-token` — a new token, in this response only; the old one
/// fails from the next request on and the operator's console sessions end. A disabled operator
/// stays disabled (rotate, then enable, after a leak).
async fn rotate_token(
    State(state): State<AppState>,
    operator: Operator,
    Path(raw): Path<String>,
    body: Result<Json<OptionalReasonRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let mut audited = Audited {
        action: "operator.rotate_token",
        target_type: "operator",
        target_id: raw.clone(),
        reason: "",
        parameters: json!({}),
    };
    admin_first(&state, &operator, &audited).await?;
    let target = OperatorId(path_id(&raw)?);
    let req = super::body(body)?;
    audited.reason = req.reason.as_deref().unwrap_or("");
    let result = async {
        let reason = optional_reason(&req.reason, "token rotated")?;
        let issued = credentials::issue_with_id(OPERATOR_TOKEN_PREFIX, target.0);
        let mut tx = state.db().begin().await?;
        let Some(row) = stored::rotate_operator_secret(&mut tx, target, &issued.secret_hash).await? else {
            return Err(ApiError::not_found());
        };
        let ended = sessions::end_all_for_operator(&mut tx, target).await?;
        let own = target == operator.id;
        let done = Audited {
            reason,
            parameters: json!({"sessions_ended": ended, "self_rotation": own}),
            ..audited.clone_shallow()
        };
        done.record_ok(&mut tx, &operator).await?;
        tx.commit().await?;
        tracing::info!(target_operator = %target, operator = %operator.id, "operator token rotated");
        let mut body = operator_json(&row);
        body["token"] = json!(issued.token);
        body["own_token"] = json!(own);
        body["sessions_ended"] = json!(ended);
        Ok(Json(body))
    }
    .await;
    audited.or_refuse(&state, &operator, result).await
}
