//! The two-person rule for review decisions (SPEC §8.1): a `complete` or `fail` at or above
//! `REVIEW_APPROVAL_THRESHOLD` is stored as a pending decision by the first operator (202), and
//! applied only when a second operator — not the first — approves it, after asking the provider
//! again at that moment. Either operator's refusal is audited like every action.
//!
//! | route | role |
//! |---|---|
//! | `GET /ops/v1/review-decisions` (pending, oldest first) | viewer |
//! | `POST /ops/v1/withdrawals/{id}/decision/approve` `{reason}` | operator, not the requester |
//! | `POST /ops/v1/withdrawals/{id}/decision/reject` `{reason}` | operator (the requester may withdraw it) |

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::review::{apply, check_with_provider, in_review, parse_id, Action, OpsWithdrawal};
use super::{require_reason, Audited, Operator, Role};
use crate::domain::Withdrawal;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::storage::review_decisions::{self, Requested, ReviewDecision};
use crate::storage::DbTime;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ops/v1/review-decisions", get(list))
        .route("/ops/v1/withdrawals/{id}/decision/approve", post(approve))
        .route("/ops/v1/withdrawals/{id}/decision/reject", post(reject))
}

pub fn decision_json(d: &ReviewDecision) -> Value {
    json!({
        "id": d.id, "withdrawal_id": d.withdrawal_id, "action": d.action,
        "provider_reference": d.provider_reference, "version": d.version, "reason": d.reason,
        "requested_by": d.requested_by, "requested_at": d.requested_at.0,
        "request_evidence": d.request_evidence.0, "status": d.status, "decided_by": d.decided_by,
        "decided_at": d.decided_at.map(|t| t.0), "decision_reason": d.decision_reason,
    })
}

/// Stores `action` on `w` as a decision waiting for a second operator, with the provider's answer
/// it was requested on; audited as `withdrawal.resolve` with result `pending_approval`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn request(
    state: &AppState,
    operator: &Operator,
    w: &Withdrawal,
    action: Action,
    reference: Option<&str>,
    reason: &str,
    evidence: &Value,
    audited: &Audited<'_>,
) -> Result<Value, ApiError> {
    let decision = ReviewDecision {
        id: crate::domain::DecisionId::new(),
        withdrawal_id: w.id,
        action: action.as_str().to_owned(),
        provider_reference: reference.map(str::to_owned),
        version: w.version,
        reason: reason.to_owned(),
        requested_by: operator.id,
        requested_at: DbTime::now(),
        request_evidence: sqlx::types::Json(evidence.clone()),
        status: "pending".into(),
        decided_by: None,
        decided_at: None,
        decision_reason: None,
    };
    let mut tx = state.db().begin().await?;
    match review_decisions::insert_pending(&mut tx, &decision).await? {
        Requested::Stored => {}
        Requested::AlreadyPending => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "decision_pending",
                "another decision on this withdrawal waits for a second operator: approve or reject it first",
            ))
        }
        Requested::Stale => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "stale_version",
                "the withdrawal changed while the provider was asked: reload and decide again",
            )
            .with_field("version"))
        }
    }
    let mut row = audited.clone_shallow();
    row.parameters["decision_id"] = json!(decision.id);
    row.record(&mut tx, operator, "pending_approval").await?;
    tx.commit().await?;
    Ok(decision_json(&decision))
}

/// `GET /ops/v1/review-decisions` — decisions waiting for a second operator, oldest first.
async fn list(State(state): State<AppState>, operator: Operator) -> Result<Json<Value>, ApiError> {
    operator.require(Role::Viewer)?;
    let rows = review_decisions::list_pending(state.db(), 500).await?;
    Ok(Json(json!({"data": rows.iter().map(decision_json).collect::<Vec<_>>()})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideRequest {
    pub reason: String,
}

/// `POST /ops/v1/withdrawals/{id}/decision/approve` — a second operator applies the decision,
/// checked against the provider again now.
async fn approve(
    State(state): State<AppState>,
    operator: Operator,
    Path(id): Path<String>,
    body: Result<Json<DecideRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    decide(state, operator, id, body, true).await
}

/// `POST /ops/v1/withdrawals/{id}/decision/reject` — the decision is dropped; nothing moves.
async fn reject(
    State(state): State<AppState>,
    operator: Operator,
    Path(id): Path<String>,
    body: Result<Json<DecideRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    decide(state, operator, id, body, false).await
}

async fn decide(
    state: AppState,
    operator: Operator,
    id: String,
    body: Result<Json<DecideRequest>, axum::extract::rejection::JsonRejection>,
    approve: bool,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    let action = if approve { "withdrawal.decision.approve" } else { "withdrawal.decision.reject" };
    super::require_first(&state, &operator, Role::Operator, action, "withdrawal", id.to_string()).await?;
    let req = super::body(body)?;
    let mut audited =
        Audited { action, target_type: "withdrawal", target_id: id.to_string(), reason: "", parameters: json!({}) };
    audited.reason = &req.reason;
    let result = async {
        let reason = require_reason(&req.reason)?;
        let pending = review_decisions::pending_for(state.db(), id).await?.ok_or_else(|| {
            ApiError::new(StatusCode::NOT_FOUND, "no_pending_decision", "no decision waits on this withdrawal")
        })?;
        audited.parameters = json!({"decision_id": pending.id, "decision_action": pending.action});
        if approve {
            approve_checked(&state, &operator, &pending, reason).await
        } else {
            let mut tx = state.db().begin().await?;
            if !review_decisions::decide(&mut tx, pending.id, "rejected", operator.id, reason).await? {
                return Err(already_decided());
            }
            audited.record_ok(&mut tx, &operator).await?;
            tx.commit().await?;
            Ok(json!({"decision_id": pending.id, "status": "rejected"}))
        }
    }
    .await;
    // A decision's audit row went with its own transaction; a refusal writes its own.
    audited.or_refuse(&state, &operator, result).await.map(Json)
}

fn already_decided() -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "decision_already_decided", "another operator decided first")
}

async fn approve_checked(
    state: &AppState,
    operator: &Operator,
    pending: &ReviewDecision,
    reason: &str,
) -> Result<Value, ApiError> {
    if pending.requested_by == operator.id {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "second_operator_required",
            "a decision must be approved by an operator other than the one who requested it",
        ));
    }
    let action = Action::parse(&pending.action)?;
    let withdrawal = pending.withdrawal_id;
    let current = in_review(state, withdrawal, pending.version).await?;
    // Asked again now: the provider's record may have changed since the request.
    let mut evidence = check_with_provider(state, &current, action, pending.provider_reference.as_deref()).await?;
    evidence["decision_id"] = json!(pending.id);
    evidence["requested_by"] = json!(pending.requested_by);
    evidence["approved_by"] = json!(operator.id.0);
    let correlation = format!("ops-{}", Uuid::new_v4());
    let mut tx = state.db().begin().await?;
    if !review_decisions::decide(&mut tx, pending.id, "approved", operator.id, reason).await? {
        return Err(already_decided());
    }
    let moved =
        apply(&mut tx, operator, &current, action, pending.version, &pending.reason, &evidence, &correlation).await?;
    let audited = Audited {
        action: "withdrawal.decision.approve",
        target_type: "withdrawal",
        target_id: withdrawal.to_string(),
        reason,
        parameters: json!({"decision_id": pending.id, "decision_action": pending.action}),
    };
    audited.record_ok(&mut tx, operator).await?;
    tx.commit().await?;
    Ok(json!({"decision_id": pending.id, "status": "approved", "withdrawal": OpsWithdrawal::from(&moved)}))
}
