//! Client input as every route reads it: a query string and a JSON body, decoded, checked against
//! the text rule of [`crate::domain::input_text`] (no NUL, no other control character but tab and
//! newlines, valid UTF-8) and only then deserialised into the route's type. Anything wrong is a
//! 422 problem+json: `invalid_query` for a query parameter, `invalid_body` for a body field, with
//! the field at fault; the invalid text itself is never echoed.
//!
//! The customer API reads its list filters through [`ApiQuery`]; the ops API's `OpsQuery` and
//! `OpsJson` wrap [`query`] and [`json_body`] (and audit a refusal on an action's route). The
//! customer API's create body is parsed by its own field validators (`invalid_reference`, …),
//! each of which refuses control characters already.

use axum::extract::{FromRequest, FromRequestParts, Json, Query, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::ApiError;
use crate::domain::input_text;

/// Query parameters, or a 422 `invalid_query` naming the parameter at fault.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        query(parts).map(ApiQuery)
    }
}

/// The request's query string as `T`: each name and value obeys the text rule, then `T` parses.
pub fn query<T: DeserializeOwned>(parts: &Parts) -> Result<T, ApiError> {
    let raw = parts.uri.query().unwrap_or_default();
    input_text::check_query(raw).map_err(|e| ApiError::unprocessable("invalid_query", &e.field, e.to_string()))?;
    Query::<T>::try_from_uri(&parts.uri)
        .map(|Query(value)| value)
        .map_err(|e| ApiError::unprocessable("invalid_query", "query", e.body_text()))
}

/// The request's JSON body as `T`: it must be JSON (`Content-Type` included), every string of the
/// decoded document (keys too) obeys the text rule, then `T` parses.
pub async fn json_body<T: DeserializeOwned, S: Send + Sync>(request: Request, state: &S) -> Result<T, ApiError> {
    json_body_except(request, state, &[]).await
}

/// As [`json_body`], with the fields `own` left to a parser that judges their text itself and
/// names what is wrong more precisely (see [`input_text::check_json_except`]).
pub async fn json_body_except<T: DeserializeOwned, S: Send + Sync>(
    request: Request,
    state: &S,
    own: &[&str],
) -> Result<T, ApiError> {
    let Json(value) = Json::<Value>::from_request(request, state)
        .await
        .map_err(|e| ApiError::unprocessable("invalid_body", "body", e.body_text()))?;
    input_text::check_json_except(&value, own)
        .map_err(|e| ApiError::unprocessable("invalid_body", &e.field, e.to_string()))?;
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        let field = if path == "." { "body".to_owned() } else { path };
        let detail = format!("Failed to deserialize the JSON body into the target type: {field}: {}", err.inner());
        ApiError::unprocessable("invalid_body", &field, detail)
    })
}
