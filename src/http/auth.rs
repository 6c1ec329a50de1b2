//! Authentication over HTTP: `Authorization: Bearer wdk_…` resolves to exactly one account
//! ([`Customer`]); `wdo_…` to one operator ([`operator`], for `/ops/v1`); and every failure —
//! there and at the console's sign-in — goes through one [`AuthGuard`] (issue 27): counted in
//! `auth_failures_total{surface}`, logged at warn with the source and the key's public prefix
//! (`wdk_<id>`, never the secret), and slowed per source with `governor`: a source over its
//! budget is answered 429 `too_many_auth_failures` with `Retry-After` before its credential is
//! checked. A request with no credential at all is not a failed authentication (nothing was
//! guessed): it is answered 401 and neither counted nor slowed.
//!
//! The key is read from the database on every request (no cache), so a revoked key fails on the
//! next request, on every instance. Its last use is recorded coarsely, off the request's path.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap};
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use super::error::ApiError;
use super::AppState;
use crate::config::AuthFailureSettings;
use crate::credentials;
use crate::domain::AccountId;
use crate::metrics::AuthSurface;
use crate::ops::{CredentialRefusal, Operator};
use crate::storage::credentials::{find_api_key, touch_api_key};
use crate::storage::DbTime;

type Limiter = RateLimiter<IpAddr, DefaultKeyedStateStore<IpAddr>, DefaultClock, StateInformationMiddleware>;

/// More slowed sources than this and the expired ones are forgotten (and the limiter's idle keys).
const SLOWED_PRUNE_AT: usize = 10_000;

/// Failed authentication, per source: counted, logged and slowed (see the module notes). One per
/// [`AppState`], shared by the customer API, the ops API and the console, so a source's budget is
/// one budget whichever door it knocks on.
pub struct AuthGuard {
    settings: AuthFailureSettings,
    quota: Quota,
    limiter: Limiter,
    /// Sources whose budget is spent, and until when: read before any credential is checked (the
    /// limiter itself cannot be asked without spending a cell).
    slowed: Mutex<HashMap<IpAddr, Instant>>,
}

impl AuthGuard {
    pub fn new(settings: AuthFailureSettings) -> Self {
        let per_minute = NonZeroU32::new(settings.per_minute.max(1)).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(settings.burst.max(1)).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::per_minute(per_minute).allow_burst(burst);
        let limiter = RateLimiter::keyed(quota).with_middleware::<StateInformationMiddleware>();
        Self { settings, quota, limiter, slowed: Mutex::new(HashMap::new()) }
    }

    /// The source of a request: the peer address (an IPv6 one by its /64, which one client
    /// holds whole), or the last `X-Forwarded-For` entry when the settings trust the proxy.
    /// Unspecified when the request came from no socket (a router called in process).
    pub fn source(&self, headers: &HeaderMap, extensions: &Extensions) -> IpAddr {
        let forwarded = self
            .settings
            .trust_forwarded_for
            .then(|| headers.get("x-forwarded-for")?.to_str().ok()?.rsplit(',').next()?.trim().parse::<IpAddr>().ok())
            .flatten();
        let peer = extensions.get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| addr.ip());
        match forwarded.or(peer).unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)) {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
            },
            v4 => v4,
        }
    }

    /// `Err` (429 with `Retry-After`) while `source` is slowed.
    pub fn admit(&self, source: IpAddr) -> Result<(), Duration> {
        let mut slowed = self.slowed.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        match slowed.get(&source) {
            Some(until) if *until > now => Err(*until - now),
            Some(_) => {
                slowed.remove(&source);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Records one failed authentication of `source` on `surface`: the counter, the warn line (the
    /// credential's public prefix only), and a cell of the source's budget; the failure that
    /// spends the last cell slows the source until the next one is earned.
    pub fn failed(&self, surface: AuthSurface, source: IpAddr, key_prefix: Option<&str>, reason: CredentialRefusal) {
        crate::metrics::auth_failure(surface);
        tracing::warn!(
            surface = surface.as_str(),
            source = %source,
            key_prefix = key_prefix.unwrap_or("-"),
            reason = reason.as_str(),
            "authentication failed"
        );
        let wait = match self.limiter.check_key(&source) {
            Ok(state) if state.remaining_burst_capacity() > 0 => return,
            Ok(_) => self.quota.replenish_interval(),
            Err(not_until) => not_until.wait_time_from(self.limiter.clock().now()),
        };
        let mut slowed = self.slowed.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if slowed.len() >= SLOWED_PRUNE_AT {
            slowed.retain(|_, until| *until > now);
            self.limiter.retain_recent();
        }
        slowed.insert(source, now + wait);
    }
}

/// The public part of a presented credential, `<prefix>_<id>`, when it has our shape: safe to
/// log (the id finds the row; the secret stays unsaid).
pub fn public_prefix(prefix: &str, token: &str) -> Option<String> {
    credentials::parse(prefix, token).map(|(id, _)| format!("{prefix}_{}", id.simple()))
}

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
        let guard = state.auth_guard();
        let source = guard.source(&parts.headers, &parts.extensions);
        guard.admit(source).map_err(ApiError::too_many_auth_failures)?;
        let refused = |reason: CredentialRefusal| {
            guard.failed(
                AuthSurface::CustomerApi,
                source,
                public_prefix(credentials::API_KEY_PREFIX, token).as_deref(),
                reason,
            );
            ApiError::unauthorized()
        };
        let (key_id, secret) = credentials::parse(credentials::API_KEY_PREFIX, token)
            .ok_or_else(|| refused(CredentialRefusal::Malformed))?;
        let stored = find_api_key(state.db(), crate::domain::ApiKeyId(key_id))
            .await?
            .ok_or_else(|| refused(CredentialRefusal::Unknown))?;
        if stored.revoked_at.is_some() {
            return Err(refused(CredentialRefusal::Revoked));
        }
        if !credentials::verify(secret, &stored.secret_hash) {
            return Err(refused(CredentialRefusal::WrongSecret));
        }
        let now = DbTime::now();
        if should_touch(key_id, stored.last_used_at, now) {
            let db = state.db().clone();
            let account = AccountId(stored.account_id);
            tokio::spawn(async move {
                if let Err(err) = touch_api_key(&db, account, crate::domain::ApiKeyId(key_id), now).await {
                    tracing::warn!(error = format!("{:#}", anyhow::Error::from(err)), "cannot record an API key's use");
                }
            });
        }
        Ok(Customer { account_id: AccountId(stored.account_id) })
    }
}

/// The operator behind a `/ops/v1` request's bearer token (the ops API's `Operator` extractor):
/// 429 while the source is slowed, 401 for a missing or refused token (a refusal counted and
/// logged by the [`AuthGuard`]).
pub async fn operator(parts: &Parts, state: &AppState) -> Result<Operator, ApiError> {
    let token = bearer(parts).ok_or_else(ApiError::unauthorized)?;
    let guard = state.auth_guard();
    let source = guard.source(&parts.headers, &parts.extensions);
    guard.admit(source).map_err(ApiError::too_many_auth_failures)?;
    match crate::ops::check_token(state.db(), token).await? {
        Ok(operator) => Ok(operator),
        Err(reason) => {
            let prefix = public_prefix(credentials::OPERATOR_TOKEN_PREFIX, token);
            guard.failed(AuthSurface::OpsApi, source, prefix.as_deref(), reason);
            Err(ApiError::unauthorized())
        }
    }
}
