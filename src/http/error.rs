//! The API's one error type: RFC 9457 problem+json with a stable `code`.
//!
//! Client errors carry a safe, specific message (and the offending `field` where there is one).
//! Internal errors become a generic 500 whose body says nothing about the cause; the cause chain
//! is logged once, here.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::refusal::{RefusalKind, ServiceError};
use crate::storage::StorageError;

#[derive(Debug)]
pub enum ApiError {
    Problem(Box<Problem>),
    Internal(anyhow::Error),
}

/// A client-facing problem (also readable back, for the tests and Rust clients).
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Problem {
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// Stable machine-readable error code, e.g. `insufficient_funds`.
    pub code: String,
    /// The request field at fault, as a dotted path, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Sent as `Retry-After` (seconds), not in the body: when the caller may try again.
    #[serde(skip)]
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &str, detail: impl Into<String>) -> Self {
        ApiError::Problem(Box::new(Problem {
            kind: format!("/problems/{code}"),
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            status: status.as_u16(),
            detail: detail.into(),
            code: code.to_owned(),
            field: None,
            retry_after_secs: None,
        }))
    }

    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        if let ApiError::Problem(p) = &mut self {
            p.field = Some(field.into());
        }
        self
    }

    pub fn unprocessable(code: &str, field: &str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, detail).with_field(field)
    }

    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", "no such resource")
    }

    pub fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", "a valid bearer credential is required")
    }

    /// 429 `too_many_auth_failures` with `Retry-After`: this source failed to authenticate too
    /// often, and is not heard until then (its credential is not even checked).
    pub fn too_many_auth_failures(retry_after: std::time::Duration) -> Self {
        let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
        let mut error = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_auth_failures",
            format!("too many failed authentications from this address; try again in {secs} s"),
        );
        if let ApiError::Problem(p) = &mut error {
            p.retry_after_secs = Some(secs.max(1));
        }
        error
    }
}

impl From<ServiceError> for ApiError {
    fn from(err: ServiceError) -> Self {
        match err {
            ServiceError::Internal(err) => ApiError::Internal(err),
            ServiceError::Refused(r) => {
                let status = match r.kind {
                    RefusalKind::Unauthenticated => StatusCode::UNAUTHORIZED,
                    RefusalKind::Malformed => StatusCode::BAD_REQUEST,
                    RefusalKind::Forbidden => StatusCode::FORBIDDEN,
                    RefusalKind::NotFound => StatusCode::NOT_FOUND,
                    RefusalKind::Conflict => StatusCode::CONFLICT,
                    RefusalKind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
                    RefusalKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                };
                let error = ApiError::new(status, &r.code, r.detail);
                match r.field {
                    Some(field) => error.with_field(field),
                    None => error,
                }
            }
        }
    }
}

impl From<StorageError> for ApiError {
    fn from(err: StorageError) -> Self {
        ApiError::Internal(err.into())
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(err: anyhow::Error) -> Self {
        ApiError::Internal(err)
    }
}

pub fn problem_response(problem: &Problem) -> Response {
    let status = StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = serde_json::to_vec(problem).expect("problem serialises");
    let mut response = (status, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    if let Some(secs) = problem.retry_after_secs {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Problem(problem) => problem_response(&problem),
            ApiError::Internal(err) => {
                tracing::error!(error = format!("{err:#}"), "internal error");
                let ApiError::Problem(problem) = ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal_error",
                    "the request could not be completed; it is safe to retry with the same Idempotency-Key",
                ) else {
                    unreachable!("ApiError::new builds a problem")
                };
                problem_response(&problem)
            }
        }
    }
}
