//! What a service function — a customer action ([`crate::customer`]) or an operator action
//! ([`crate::ops`]) — answers when it does not succeed: a refusal with a stable `code` (and the
//! field at fault, when there is one), or an internal failure whose cause is logged and never
//! shown. Free of HTTP: the routes map a [`Refusal`]'s kind to a status, the console shows it on
//! the page, the CLI prints it.

use crate::storage::StorageError;

/// Why an action was refused, in the terms every surface maps from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// No valid credential (401).
    Unauthenticated,
    /// The role or the person is not allowed (403).
    Forbidden,
    /// Nothing by that id (404).
    NotFound,
    /// The request cannot be read at all (400), e.g. a body that is not JSON.
    Malformed,
    /// The request is well formed but the state forbids it now (409).
    Conflict,
    /// The request itself is wrong (422).
    Invalid,
    /// A dependency (the provider) cannot answer now (503).
    Unavailable,
}

/// A refusal the operator can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub kind: RefusalKind,
    /// Stable machine-readable code, e.g. `stale_version`.
    pub code: String,
    pub detail: String,
    /// The request field at fault.
    pub field: Option<String>,
}

#[derive(Debug)]
pub enum ServiceError {
    Refused(Box<Refusal>),
    Internal(anyhow::Error),
}

pub type ServiceResult<T> = Result<T, ServiceError>;

impl ServiceError {
    pub fn refused(kind: RefusalKind, code: &str, detail: impl Into<String>) -> Self {
        ServiceError::Refused(Box::new(Refusal { kind, code: code.to_owned(), detail: detail.into(), field: None }))
    }

    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        if let ServiceError::Refused(r) = &mut self {
            r.field = Some(field.into());
        }
        self
    }

    /// 422: the request is wrong in `field`.
    pub fn invalid(code: &str, field: &str, detail: impl Into<String>) -> Self {
        Self::refused(RefusalKind::Invalid, code, detail).with_field(field)
    }

    /// 400: the request cannot be read at all.
    pub fn malformed(code: &str, detail: impl Into<String>) -> Self {
        Self::refused(RefusalKind::Malformed, code, detail)
    }

    pub fn conflict(code: &str, detail: impl Into<String>) -> Self {
        Self::refused(RefusalKind::Conflict, code, detail)
    }

    pub fn forbidden(code: &str, detail: impl Into<String>) -> Self {
        Self::refused(RefusalKind::Forbidden, code, detail)
    }

    pub fn unavailable(code: &str, detail: impl Into<String>) -> Self {
        Self::refused(RefusalKind::Unavailable, code, detail)
    }

    pub fn not_found() -> Self {
        Self::refused(RefusalKind::NotFound, "not_found", "no such resource")
    }

    pub fn unauthenticated() -> Self {
        Self::refused(RefusalKind::Unauthenticated, "unauthorized", "a valid bearer credential is required")
    }

    /// The stable code an audit row records for this outcome.
    pub fn code(&self) -> &str {
        match self {
            ServiceError::Refused(r) => &r.code,
            ServiceError::Internal(_) => "internal_error",
        }
    }
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceError::Refused(r) => write!(f, "{} ({})", r.detail, r.code),
            ServiceError::Internal(_) => f.write_str("the request could not be completed (internal_error)"),
        }
    }
}

impl From<StorageError> for ServiceError {
    fn from(err: StorageError) -> Self {
        ServiceError::Internal(err.into())
    }
}

impl From<anyhow::Error> for ServiceError {
    fn from(err: anyhow::Error) -> Self {
        ServiceError::Internal(err)
    }
}

impl From<sqlx::Error> for ServiceError {
    fn from(err: sqlx::Error) -> Self {
        ServiceError::Internal(err.into())
    }
}
