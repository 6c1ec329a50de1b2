//! The ops API (`/ops/v1`, SPEC §8) over HTTP: thin handlers that extract, call the operator core
//! ([`crate::ops`]) and serialise its typed answer. The cross-cutting checks are extractors, so a
//! new route cannot forget them:
//! - [`Operator`] authenticates the bearer token (401 otherwise);
//! - [`Authorized<A>`] checks the role of action `A` — and audits a refusal — before the path id
//!   or the body is read, so a caller below the role gets 403, never a 404 or 422;
//! - [`OpsJson`] and [`OpsQuery`] turn a malformed body or query into a 422 problem+json.

mod audit;
mod credentials;
mod dead_letters;
mod decisions;
mod ledger;
mod overview;
mod replays;
mod review;
mod settlement;

use std::marker::PhantomData;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Query, RawPathParams, Request};
use axum::http::request::Parts;
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::error::ApiError;
use super::{bearer, AppState};
use crate::ops::{Action, Operator};

pub fn router() -> Router<AppState> {
    Router::new()
        .merge(review::router())
        .merge(decisions::router())
        .merge(dead_letters::router())
        .merge(replays::router())
        .merge(audit::router())
        .merge(overview::router())
        .merge(credentials::router())
        .merge(ledger::router())
        .merge(settlement::router())
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let token = bearer(parts).ok_or_else(ApiError::unauthorized)?;
        Ok(crate::ops::authenticate(state.db(), token).await?)
    }
}

/// An operator whose role suffices for action `A`. A role too low is refused (403) and audited
/// under `A`'s name, with the path's `{id}` as the target, before anything else is extracted.
pub struct Authorized<A>(pub Operator, PhantomData<A>);

impl<A: Action + Send + Sync> FromRequestParts<AppState> for Authorized<A> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let operator = Operator::from_request_parts(parts, state).await?;
        let target = match RawPathParams::from_request_parts(parts, state).await {
            Ok(params) => params.iter().find(|(name, _)| *name == "id").map(|(_, v)| v.to_owned()).unwrap_or_default(),
            Err(_) => String::new(),
        };
        state.ops().authorize(&operator, &A::ACT, &target).await?;
        Ok(Authorized(operator, PhantomData))
    }
}

/// A JSON body, or a 422 `invalid_body` saying what is wrong with it.
pub struct OpsJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for OpsJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(value)) => Ok(OpsJson(value)),
            Err(rejection) => Err(invalid_body(rejection)),
        }
    }
}

fn invalid_body(rejection: JsonRejection) -> ApiError {
    ApiError::unprocessable("invalid_body", "body", rejection.body_text())
}

/// Query parameters, or a 422 `invalid_query` saying what is wrong with them.
pub struct OpsQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for OpsQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(OpsQuery(value)),
            Err(rejection) => Err(invalid_query(rejection)),
        }
    }
}

fn invalid_query(rejection: QueryRejection) -> ApiError {
    ApiError::unprocessable("invalid_query", "query", rejection.body_text())
}

/// The `{id}` of a route: one that is not a UUID names nothing (404, like an unknown one).
pub struct PathId(pub Uuid);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let raw = RawPathParams::from_request_parts(parts, state).await.map_err(|_| ApiError::not_found())?;
        let id = raw.iter().find(|(name, _)| *name == "id").map(|(_, v)| v).ok_or_else(ApiError::not_found)?;
        Ok(PathId(Uuid::parse_str(id).map_err(|_| ApiError::not_found())?))
    }
}
