//! The review queue (SPEC §8.1): list and show withdrawals with all their evidence, and resolve
//! `requires_review` deliberately — with a reason and the version the operator looked at.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uuid::Uuid;

use super::{require_reason, Audited, Operator, Role};
use crate::domain::{format_minor, Actor, Withdrawal, WithdrawalId, WithdrawalStatus};
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::jobs::{enqueue_reconciliation, SubmitPayout, SUBMIT_PAYOUT};
use crate::provider::{LookupOutcome, TransferStatus};
use crate::storage::jobs as job_store;
use crate::storage::withdrawals::{self as store, TransitionOutcome, TransitionRequest};
use crate::storage::{accounts, attempts, dead_letters, reconciliations, DbTime};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ops/v1/withdrawals", get(list))
        .route("/ops/v1/withdrawals/{id}", get(show))
        .route("/ops/v1/withdrawals/{id}/resolve", post(resolve))
}

/// A withdrawal as operators see it (account number masked).
#[derive(Debug, Serialize, Deserialize)]
pub struct OpsWithdrawal {
    pub id: Uuid,
    pub account_id: Uuid,
    pub status: WithdrawalStatus,
    pub amount: String,
    pub currency: String,
    pub destination: Value,
    pub reference: Option<String>,
    pub failure_code: Option<String>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Seconds since the last state change (how long it has waited in its state).
    pub age_seconds: i64,
}

impl From<&Withdrawal> for OpsWithdrawal {
    fn from(w: &Withdrawal) -> Self {
        OpsWithdrawal {
            id: w.id.0,
            account_id: w.account_id.0,
            status: w.status,
            amount: w.amount.value().to_string(),
            currency: w.amount.currency().code().to_owned(),
            destination: serde_json::to_value(w.destination.masked()).unwrap_or(Value::Null),
            reference: w.reference.clone(),
            failure_code: w.failure_code.clone(),
            version: w.version,
            created_at: w.created_at,
            updated_at: w.updated_at,
            age_seconds: (Utc::now() - w.updated_at).num_seconds(),
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    pub status: Option<String>,
    pub account_id: Option<Uuid>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

pub fn encode_cursor(at: DbTime, id: Uuid) -> String {
    hex::encode(format!("{}|{id}", at.0.timestamp_micros()))
}

pub fn decode_cursor(raw: &str) -> Result<(DbTime, Uuid), ApiError> {
    let bad = || ApiError::unprocessable("invalid_cursor", "cursor", "unknown cursor");
    let text = String::from_utf8(hex::decode(raw).map_err(|_| bad())?).map_err(|_| bad())?;
    let (micros, id) = text.split_once('|').ok_or_else(bad)?;
    let at = DbTime::from_client_micros(micros.parse().map_err(|_| bad())?).ok_or_else(bad)?;
    Ok((at, Uuid::parse_str(id).map_err(|_| bad())?))
}

pub fn page_limit(limit: Option<i64>) -> Result<i64, ApiError> {
    let limit = limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::unprocessable("invalid_limit", "limit", "limit must be 1 to 500"));
    }
    Ok(limit)
}

/// `GET /ops/v1/withdrawals?status=requires_review&account_id=` — oldest first, with age.
async fn list(
    State(state): State<AppState>,
    operator: Operator,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    operator.require(Role::Viewer)?;
    let q = crate::http::error::query_params(query)?;
    let status = q
        .status
        .as_deref()
        .unwrap_or("requires_review")
        .parse::<WithdrawalStatus>()
        .map_err(|e| ApiError::unprocessable("invalid_status", "status", e.to_string()))?;
    let limit = page_limit(q.limit)?;
    let after = q.cursor.as_deref().map(decode_cursor).transpose()?;
    let account = q.account_id.map(crate::domain::AccountId);
    let mut rows = store::list_by_status(state.db(), status, account, limit + 1, after).await?;
    let next = if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(|w| encode_cursor(DbTime::from(w.updated_at), w.id.0))
    } else {
        None
    };
    let data: Vec<OpsWithdrawal> = rows.iter().map(OpsWithdrawal::from).collect();
    Ok(Json(json!({"data": data, "next_cursor": next})))
}

fn parse_id(raw: &str) -> Result<WithdrawalId, ApiError> {
    raw.parse().map_err(|_| ApiError::not_found())
}

/// `GET /ops/v1/withdrawals/{id}` — the withdrawal and all its evidence.
async fn show(
    State(state): State<AppState>,
    operator: Operator,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    operator.require(Role::Viewer)?;
    let id = parse_id(&id)?;
    let db = state.db();
    let w = store::get(db, None, id).await?.ok_or_else(ApiError::not_found)?;
    let currency = w.amount.currency();
    let transitions: Vec<Value> = store::transitions(db, id)
        .await?
        .into_iter()
        .map(|t| {
            json!({"from": t.from_status, "to": t.to_status, "actor": t.actor, "reason": t.reason,
                        "correlation_id": t.correlation_id, "at": t.at.0})
        })
        .collect();
    let attempts: Vec<Value> = attempts::for_withdrawal(db, id)
        .await?
        .into_iter()
        .map(|a| {
            json!({"attempt_no": a.attempt_no, "job_id": a.job_id, "worker_id": a.worker_id,
                        "started_at": a.started_at.0, "finished_at": a.finished_at.map(|t| t.0),
                        "outcome": a.outcome, "side_effect": a.side_effect, "http_status": a.http_status,
                        "provider_transfer_id": a.provider_transfer_id, "failure_code": a.failure_code,
                        "error_code": a.error_code, "error_message": a.error_message})
        })
        .collect();
    let reconciliations: Vec<Value> = reconciliations::for_withdrawal(db, id)
        .await?
        .into_iter()
        .map(|r| {
            json!({"id": r.id, "result": r.result, "provider_transfer_id": r.provider_transfer_id,
                        "failure_code": r.failure_code, "detail": r.detail, "follow_up_job_id": r.follow_up_job_id,
                        "at": r.at.0})
        })
        .collect();
    let letters: Vec<Value> = dead_letters::for_withdrawal(db, id)
        .await?
        .into_iter()
        .map(|d| {
            json!({"id": d.id, "job_id": d.job_id, "category": d.category, "error_code": d.error_code,
                        "error_message": d.error_message, "side_effect_state": d.side_effect_state,
                        "owner": d.owner, "runbook": d.runbook, "failed_at": d.failed_at.0})
        })
        .collect();
    let ledger: Vec<Value> = accounts::entries_for_withdrawal(db, id)
        .await?
        .into_iter()
        .map(|e| {
            json!({"kind": e.kind, "available": format_minor(e.available_delta, currency),
                        "held": format_minor(e.held_delta, currency),
                        "paid_out": format_minor(e.paid_out_delta, currency), "at": e.created_at.0})
        })
        .collect();
    Ok(Json(json!({
        "withdrawal": OpsWithdrawal::from(&w),
        "transitions": transitions,
        "provider_attempts": attempts,
        "reconciliation_results": reconciliations,
        "dead_letters": letters,
        "ledger_entries": ledger,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolveRequest {
    /// `complete`, `fail`, `retry` or `reconcile`.
    pub action: String,
    pub reason: String,
    /// The version the operator looked at; a stale one is a 409.
    pub version: i64,
    pub provider_reference: Option<String>,
}

/// `POST /ops/v1/withdrawals/{id}/resolve`.
async fn resolve(
    State(state): State<AppState>,
    operator: Operator,
    Path(id): Path<String>,
    body: Result<Json<ResolveRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    let req = super::body(body)?;
    let audited = Audited {
        action: "withdrawal.resolve",
        target_type: "withdrawal",
        target_id: id.to_string(),
        reason: &req.reason,
        parameters: json!({"action": req.action, "version": req.version, "provider_reference": req.provider_reference}),
    };
    if let Err(forbidden) = operator.require(Role::Operator) {
        return Err(audited.refuse(&state, &operator, forbidden).await);
    }
    match resolve_checked(&state, &operator, id, &req, &audited).await {
        Ok(value) => Ok(value),
        Err(err) => Err(audited.refuse(&state, &operator, err).await),
    }
}

async fn resolve_checked(
    state: &AppState,
    operator: &Operator,
    id: WithdrawalId,
    req: &ResolveRequest,
    audited: &Audited<'_>,
) -> Result<Json<Value>, ApiError> {
    let reason = require_reason(&req.reason)?;
    let db = state.db();
    let current = store::get(db, None, id).await?.ok_or_else(ApiError::not_found)?;
    if current.version != req.version {
        return Err(stale(current.version));
    }
    if current.status != WithdrawalStatus::RequiresReview {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_in_review",
            format!("only a requires_review withdrawal can be resolved; this one is {}", current.status),
        ));
    }
    let actor = Actor::Operator(operator.id.to_string());
    let correlation = format!("ops-{}", Uuid::new_v4());
    // Decisions that end the withdrawal or resubmit it need a known side effect: the provider
    // may have paid, and releasing or resending the money then would pay twice.
    if matches!(req.action.as_str(), "fail" | "retry") && crate::jobs::side_effect_unreconciled(db, id).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "side_effect_unknown",
            "the last provider attempt may have paid and no reconciliation has settled it: use action reconcile first",
        ));
    }
    if req.action == "complete" {
        // Ask the provider before opening the transaction: a slow provider must not hold a writer.
        let reference =
            req.provider_reference.as_deref().map(str::trim).filter(|r| !r.is_empty()).ok_or_else(|| {
                ApiError::unprocessable(
                    "provider_reference_required",
                    "provider_reference",
                    "complete needs the provider's transfer id",
                )
            })?;
        check_paid_at_provider(state, id, reference).await?;
    }
    let mut tx = db.begin().await?;
    if req.action != "reconcile" && job_store::has_live_job(&mut tx, id, crate::jobs::RECONCILE_PAYOUT).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "reconciliation_in_progress",
            "a reconciliation of this withdrawal is running; wait for its result",
        ));
    }
    let transition = |to, failure_code| TransitionRequest {
        id,
        from: WithdrawalStatus::RequiresReview,
        to,
        expected_version: Some(req.version),
        actor: &actor,
        reason,
        correlation_id: &correlation,
        failure_code,
    };
    let outcome = match req.action.as_str() {
        // Checked against the provider above, before the transaction opened.
        "complete" => store::transition(&mut tx, &transition(WithdrawalStatus::Completed, None)).await?,
        "fail" => {
            store::transition(&mut tx, &transition(WithdrawalStatus::Failed, Some("rejected_by_operator"))).await?
        }
        "retry" => {
            let outcome = store::transition(&mut tx, &transition(WithdrawalStatus::Processing, None)).await?;
            if matches!(outcome, TransitionOutcome::Applied(_))
                && !job_store::has_live_job(&mut tx, id, SUBMIT_PAYOUT).await?
            {
                job_store::enqueue(&mut tx, &SubmitPayout::new(id, None).job(&correlation, DbTime::now())).await?;
            }
            outcome
        }
        "reconcile" => {
            enqueue_reconciliation(&mut tx, id, "operator_request", &correlation, DbTime::now()).await?;
            TransitionOutcome::Applied(Box::new(current.clone()))
        }
        other => {
            return Err(ApiError::unprocessable(
                "invalid_action",
                "action",
                format!("unknown action `{other}`: use complete, fail, retry or reconcile"),
            ))
        }
    };
    let withdrawal = match outcome {
        TransitionOutcome::Applied(w) => w,
        TransitionOutcome::Stale => {
            let now = store::get(db, None, id).await?.ok_or_else(ApiError::not_found)?;
            return Err(stale(now.version));
        }
        TransitionOutcome::Forbidden(err) => return Err(ApiError::Internal(err.into())),
    };
    audited.record_ok(&mut tx, operator).await?;
    tx.commit().await?;
    Ok(Json(json!({"withdrawal": OpsWithdrawal::from(withdrawal.as_ref()), "action": req.action})))
}

fn stale(current: i64) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "stale_version",
        format!("the withdrawal changed since you looked: its version is now {current}; reload and decide again"),
    )
    .with_field("version")
}

/// `complete` needs the provider's word: a transfer under this withdrawal's key, with this id, paid.
async fn check_paid_at_provider(state: &AppState, id: WithdrawalId, reference: &str) -> Result<(), ApiError> {
    let gateway = state.gateway().ok_or_else(|| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "provider_unavailable", "this process cannot reach the provider")
    })?;
    let answer = gateway.lookup(&id.to_string(), &format!("ops-check-{id}")).await.map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "provider_unavailable",
            "the provider breaker is open; try later",
        )
    })?;
    let refused = |detail: String| ApiError::unprocessable("provider_reference_mismatch", "provider_reference", detail);
    match answer {
        LookupOutcome::Found(transfers) => match transfers.iter().find(|t| t.id == reference) {
            Some(t) if t.status == TransferStatus::Paid => Ok(()),
            Some(t) => Err(refused(format!("the provider reports transfer {reference} as {:?}, not paid", t.status))),
            None => Err(refused(format!("the provider has no transfer {reference} for this withdrawal"))),
        },
        LookupOutcome::NotFound => Err(refused("the provider has no transfer for this withdrawal".into())),
        LookupOutcome::Unavailable(_) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "provider_unavailable",
            "the provider did not answer; try later",
        )),
    }
}
