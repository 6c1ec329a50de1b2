//! Customer authentication: `Authorization: Bearer wdk_…` resolves to exactly one account.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::error::ApiError;
use super::AppState;
use crate::credentials;
use crate::domain::AccountId;
use crate::storage::credentials::find_api_key;

/// An authenticated customer.
#[derive(Debug, Clone, Copy)]
pub struct Customer {
    pub account_id: AccountId,
}

/// The bearer token of a request, if any.
pub fn bearer(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

impl FromRequestParts<AppState> for Customer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let token = bearer(parts).ok_or_else(ApiError::unauthorized)?;
        let (key_id, secret) =
            credentials::parse(credentials::API_KEY_PREFIX, token).ok_or_else(ApiError::unauthorized)?;
        let stored = find_api_key(state.db(), key_id).await?.ok_or_else(ApiError::unauthorized)?;
        if stored.revoked_at.is_some() || !credentials::verify(secret, &stored.secret_hash) {
            return Err(ApiError::unauthorized());
        }
        Ok(Customer { account_id: AccountId(stored.account_id) })
    }
}
