//! The console acts through the ops API: each page and form calls `/ops/v1/…` in process, as the
//! signed-in operator, so roles, validation, guarded transitions and audit rows are the API's own
//! — the console adds no second path to the data.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

use super::session::Session;
use crate::http::ops::Delegated;
use crate::http::AppState;

/// What the API refused, to show the operator.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub status: StatusCode,
    pub code: String,
    pub detail: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.detail, self.code)
    }
}

const MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

/// Calls the ops API as `session`'s operator. `Ok` holds the JSON of a 2xx answer.
pub async fn call(
    state: &AppState,
    session: &Session,
    method: Method,
    uri: &str,
    body: Option<Value>,
) -> Result<Value, Refusal> {
    let body = body.map(|b| Body::from(b.to_string())).unwrap_or_else(Body::empty);
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(|_| internal())?;
    request.extensions_mut().insert(Delegated(session.operator.clone()));
    let response =
        crate::http::ops::router().with_state(state.clone()).oneshot(request).await.map_err(|_| internal())?;
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), MAX_RESPONSE_BYTES).await.map_err(|_| internal())?;
    let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if status.is_success() {
        return Ok(json);
    }
    if status == StatusCode::NOT_FOUND && json.is_null() {
        return Err(Refusal { status, code: "not_found".into(), detail: "no such page".into() });
    }
    Err(Refusal {
        status,
        code: json["code"].as_str().unwrap_or("error").to_owned(),
        detail: json["detail"].as_str().unwrap_or("the request was refused").to_owned(),
    })
}

pub async fn get(state: &AppState, session: &Session, uri: &str) -> Result<Value, Refusal> {
    call(state, session, Method::GET, uri, None).await
}

pub async fn post(state: &AppState, session: &Session, uri: &str, body: Value) -> Result<Value, Refusal> {
    call(state, session, Method::POST, uri, Some(body)).await
}

fn internal() -> Refusal {
    Refusal {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        code: "internal_error".into(),
        detail: "the request could not be completed".into(),
    }
}

/// A query string from the non-empty pairs (empty form fields mean "no filter").
pub fn query<S: AsRef<str>>(pairs: &[(&str, Option<S>)]) -> String {
    let kept: Vec<(&str, &str)> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| v.as_ref().trim()).filter(|v| !v.is_empty()).map(|v| (*k, v)))
        .collect();
    if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", serde_urlencoded::to_string(kept).unwrap_or_default())
    }
}

/// A browser's `datetime-local` value (`2026-12-02T18:00`, read as UTC) as the API's RFC 3339;
/// anything else is passed on for the API to judge.
pub fn utc_param(value: &str) -> String {
    let value = value.trim();
    for format in ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"] {
        if let Ok(at) = chrono::NaiveDateTime::parse_from_str(value, format) {
            return at.and_utc().to_rfc3339();
        }
    }
    value.to_owned()
}
