//! The operator surface (SPEC §8): `/ops/v1`, for finance operators and on-call engineers.
//!
//! Every route checks the caller's role; every action that changes anything — or was refused,
//! for its role too — writes one append-only audit row. The CLI's operator commands call these routes, so roles and
//! audit apply the same way to both. Owns no SQL: storage does.

mod audit;
mod auth;
mod credentials;
mod dead_letters;
mod decisions;
mod overview;
mod replays;
mod review;
pub mod types;

pub use crate::config::ReplaySettings;

use axum::Router;
use serde_json::Value;
use uuid::Uuid;

pub use auth::{authenticate, Delegated, Operator, Role};

use crate::http::error::ApiError;
use crate::http::AppState;
use crate::storage::audit::{self as audit_store, AuditRow};
use crate::storage::{DbTime, Tx};

pub fn router() -> Router<AppState> {
    Router::new()
        .merge(review::router())
        .merge(decisions::router())
        .merge(dead_letters::router())
        .merge(replays::router())
        .merge(audit::router())
        .merge(overview::router())
        .merge(credentials::router())
}

/// What an action did, for its audit row.
pub struct Audited<'a> {
    pub action: &'a str,
    pub target_type: &'a str,
    pub target_id: String,
    pub reason: &'a str,
    pub parameters: Value,
}

impl Audited<'_> {
    /// A copy with the same borrowed fields (to fill in a target found later).
    pub fn clone_shallow(&self) -> Self {
        Audited {
            action: self.action,
            target_type: self.target_type,
            target_id: self.target_id.clone(),
            reason: self.reason,
            parameters: self.parameters.clone(),
        }
    }

    fn row(&self, operator: &Operator, result: &str) -> AuditRow {
        AuditRow {
            id: Uuid::now_v7(),
            operator_id: operator.id.0,
            operator_name: operator.name.clone(),
            role: operator.role.as_str().to_owned(),
            action: self.action.to_owned(),
            target_type: self.target_type.to_owned(),
            target_id: self.target_id.clone(),
            reason: crate::redact::text(self.reason),
            parameters: sqlx::types::Json(crate::redact::json(&self.parameters)),
            result: result.to_owned(),
            at: DbTime::now(),
        }
    }

    /// Records a successful action inside the transaction that performs it.
    pub async fn record_ok(&self, tx: &mut Tx, operator: &Operator) -> Result<(), ApiError> {
        self.record(tx, operator, "ok").await
    }

    /// Records the action with `result` (`ok`, `pending_approval`, …) inside `tx`.
    pub async fn record(&self, tx: &mut Tx, operator: &Operator, result: &str) -> Result<(), ApiError> {
        audit_store::insert(tx, &self.row(operator, result)).await?;
        Ok(())
    }

    /// Passes a success through (it wrote its own audit row in its transaction); audits a
    /// refusal and hands it back.
    pub async fn or_refuse<T>(
        &self,
        state: &AppState,
        operator: &Operator,
        result: Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        match result {
            Ok(value) => Ok(value),
            Err(err) => Err(self.refuse(state, operator, err).await),
        }
    }

    /// Records a refusal (in its own transaction) and hands the error back.
    pub async fn refuse(&self, state: &AppState, operator: &Operator, error: ApiError) -> ApiError {
        let code = match &error {
            ApiError::Problem(p) => p.code.clone(),
            ApiError::Internal(_) => "internal_error".to_owned(),
        };
        let written = async {
            let mut tx = state.db().begin().await?;
            audit_store::insert(&mut tx, &self.row(operator, &code)).await?;
            tx.commit().await
        };
        if let Err(err) = written.await {
            tracing::error!(error = format!("{:#}", anyhow::Error::from(err)), "could not audit a refused action");
        }
        error
    }
}

/// SPEC §8: the role comes first. A caller whose role is below `role` is refused (403) and
/// audited — the action and its target, no reason: the body is not read — before the body is
/// parsed, so a viewer's malformed request is a 403, never a 422.
pub async fn require_first(
    state: &AppState,
    operator: &Operator,
    role: Role,
    action: &str,
    target_type: &str,
    target_id: String,
) -> Result<(), ApiError> {
    match operator.require(role) {
        Ok(()) => Ok(()),
        Err(forbidden) => {
            let audited = Audited {
                action,
                target_type,
                target_id,
                reason: "",
                parameters: serde_json::json!({"body": "not read"}),
            };
            Err(audited.refuse(state, operator, forbidden).await)
        }
    }
}

/// A path id that is not a UUID names nothing: 404, like an unknown one.
pub fn path_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::not_found())
}

/// An operator request body, or a 422 saying what is wrong with it.
pub fn body<T>(body: Result<axum::Json<T>, axum::extract::rejection::JsonRejection>) -> Result<T, ApiError> {
    body.map(|axum::Json(value)| value).map_err(|e| ApiError::unprocessable("invalid_body", "body", e.body_text()))
}

/// A reason is required for every action and kept short enough to read in a list.
pub fn require_reason(reason: &str) -> Result<&str, ApiError> {
    let reason = reason.trim();
    if reason.is_empty() || reason.chars().count() > 500 {
        return Err(ApiError::unprocessable(
            "reason_required",
            "reason",
            "a reason of 1 to 500 characters is required",
        ));
    }
    Ok(reason)
}
