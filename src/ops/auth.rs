//! Operator authentication and roles: `Authorization: Bearer wdo_…`, hashed, constant-time.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;

use crate::credentials;
use crate::domain::OperatorId;
use crate::http::error::ApiError;
use crate::http::{bearer, AppState};
use crate::storage::credentials::find_operator;

pub use crate::domain::Role;

/// An authenticated operator.
#[derive(Debug, Clone)]
pub struct Operator {
    pub id: OperatorId,
    pub name: String,
    pub role: Role,
}

impl Operator {
    /// 403 unless the operator has at least `role`.
    pub fn require(&self, role: Role) -> Result<(), ApiError> {
        if self.role >= role {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("this action needs the {} role; you have {}", role.as_str(), self.role.as_str()),
            ))
        }
    }
}

/// An operator the console has already authenticated from its session cookie. Only server code
/// can put it in a request's extensions (a client cannot), so the console's calls into `/ops/v1`
/// pass the same role checks, validation and audit as a bearer-token call.
#[derive(Debug, Clone)]
pub struct Delegated(pub Operator);

/// Checks an operator token (`wdo_<id>_<secret>`): hashed, compared in constant time, disabled
/// operators refused.
pub async fn authenticate(state: &AppState, token: &str) -> Result<Operator, ApiError> {
    let (id, secret) =
        credentials::parse(credentials::OPERATOR_TOKEN_PREFIX, token).ok_or_else(ApiError::unauthorized)?;
    let stored = find_operator(state.db(), OperatorId(id)).await?.ok_or_else(ApiError::unauthorized)?;
    if stored.disabled_at.is_some() || !credentials::verify(secret, &stored.secret_hash) {
        return Err(ApiError::unauthorized());
    }
    let role = Role::parse(&stored.role).ok_or_else(ApiError::unauthorized)?;
    Ok(Operator { id: OperatorId(stored.id), name: stored.name, role })
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        if let Some(Delegated(operator)) = parts.extensions.get::<Delegated>() {
            return Ok(operator.clone());
        }
        let token = bearer(parts).ok_or_else(ApiError::unauthorized)?;
        authenticate(state, token).await
    }
}
