//! Customer authentication: `Authorization: Bearer wdk_…` resolves to exactly one account.
//!
//! The key is read from the database on every request (no cache), so a revoked key fails on the
//! next request, on every instance. Its last use is recorded coarsely, off the request's path.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::error::ApiError;
use super::AppState;
use crate::credentials;
use crate::domain::AccountId;
use crate::storage::credentials::{find_api_key, touch_api_key};
use crate::storage::DbTime;

/// A key's `last_used_at` is written at most this often (one small write per key and period,
/// not one per request).
const LAST_USED_RESOLUTION: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// When this process last recorded each key's use, so a burst of requests on a key whose stored
/// `last_used_at` is stale schedules one write, not one per request. Only verified keys enter it;
/// it says nothing about validity (every request still reads the key from the database).
static TOUCHED: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<uuid::Uuid, DbTime>>> =
    std::sync::LazyLock::new(Default::default);

/// Whether this request should record the key's use: the stored time is stale and no other
/// request of this process has just done it.
fn should_touch(key_id: uuid::Uuid, stored: Option<DbTime>, now: DbTime) -> bool {
    let stale = |at: Option<DbTime>| at.is_none_or(|at| at.plus(LAST_USED_RESOLUTION) < now);
    if !stale(stored) {
        return false;
    }
    let mut touched = TOUCHED.lock().unwrap_or_else(|p| p.into_inner());
    if !stale(touched.get(&key_id).copied()) {
        return false;
    }
    touched.insert(key_id, now);
    true
}

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
        let stored =
            find_api_key(state.db(), crate::domain::ApiKeyId(key_id)).await?.ok_or_else(ApiError::unauthorized)?;
        if stored.revoked_at.is_some() || !credentials::verify(secret, &stored.secret_hash) {
            return Err(ApiError::unauthorized());
        }
        let now = DbTime::now();
        if should_touch(key_id, stored.last_used_at, now) {
            let db = state.db().clone();
            tokio::spawn(async move {
                if let Err(err) = touch_api_key(&db, crate::domain::ApiKeyId(key_id), now).await {
                    tracing::warn!(error = format!("{:#}", anyhow::Error::from(err)), "cannot record an API key's use");
                }
            });
        }
        Ok(Customer { account_id: AccountId(stored.account_id) })
    }
}
