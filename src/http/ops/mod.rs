//! The ops API (`/ops/v1`, SPEC §8) over HTTP: thin handlers that extract, call the operator core
//! ([`crate::ops`]) and serialise its typed answer. The cross-cutting checks are extractors, so a
//! new route cannot forget them:
//! - [`Operator`] authenticates the bearer token (401 otherwise);
//! - [`Authorized<A>`] checks the role of action `A` — and audits a refusal — before the path id
//!   or the body is read, so a caller below the role gets 403, never a 404 or 422;
//! - [`OpsJson`] and [`OpsQuery`] turn a malformed body or query, or one holding text the text
//!   rule refuses (NUL, other control characters), into a 422 problem+json — audited as a refusal
//!   of the action when the route is an action's.

mod audit;
mod credentials;
mod credits;
mod dead_letters;
mod decisions;
mod ledger;
mod notifications;
mod overview;
mod replays;
mod review;
mod settlement;
mod webhooks;

use std::marker::PhantomData;

use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use axum::http::request::Parts;
use axum::Router;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::error::ApiError;
use super::{input, AppState};
use crate::ops::{Act, Action, Audited, Operator, OpsError};

pub fn router() -> Router<AppState> {
    Router::new()
        .merge(review::router())
        .merge(decisions::router())
        .merge(dead_letters::router())
        .merge(replays::router())
        .merge(audit::router())
        .merge(overview::router())
        .merge(credentials::router())
        .merge(credits::router())
        .merge(ledger::router())
        .merge(settlement::router())
        .merge(webhooks::router())
        .merge(notifications::router())
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        super::auth::operator(parts, state).await
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
        parts.extensions.insert(Acting { act: A::ACT, target, operator: operator.clone() });
        Ok(Authorized(operator, PhantomData))
    }
}

/// The action an [`Authorized`] extractor let through, kept in the request's extensions so that
/// a body or query refused after it is audited as that action's refusal.
#[derive(Clone)]
struct Acting {
    act: Act,
    target: String,
    operator: Operator,
}

/// Audits `error` as a refusal of the action being taken, when the route is an action's (the
/// role was checked, so the actor is known); the row names the field at fault and the code,
/// never the refused text.
async fn refused(state: &AppState, acting: Option<Acting>, input: &str, error: ApiError) -> ApiError {
    let (Some(acting), ApiError::Problem(problem)) = (acting, &error) else { return error };
    let field = problem.field.clone().unwrap_or_default();
    let refusal = OpsError::invalid(&problem.code, &field, problem.detail.clone());
    let parameters = serde_json::json!({ input: "refused", "field": field });
    let audited = Audited::new(&acting.act, acting.target, "", parameters);
    audited.refuse(&state.ops(), &acting.operator, refusal).await;
    error
}

/// A JSON body, or a 422 `invalid_body` naming the field at fault (see [`input::json_body`]):
/// malformed, of the wrong shape, or holding text the text rule refuses. On an action's route the
/// refusal is audited.
pub struct OpsJson<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequest<AppState> for OpsJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let acting = req.extensions().get::<Acting>().cloned();
        match input::json_body(req, state).await {
            Ok(value) => Ok(OpsJson(value)),
            Err(error) => Err(refused(state, acting, "body", error).await),
        }
    }
}

/// Query parameters, or a 422 `invalid_query` naming the parameter at fault (see
/// [`input::query`]). On an action's route the refusal is audited.
pub struct OpsQuery<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequestParts<AppState> for OpsQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        match input::query(parts) {
            Ok(value) => Ok(OpsQuery(value)),
            Err(error) => Err(refused(state, parts.extensions.get::<Acting>().cloned(), "query", error).await),
        }
    }
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
