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
use crate::provider::{LookupOutcome, Verdict};
use crate::storage::jobs as job_store;
use crate::storage::review_decisions;
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
    /// Made in sandbox mode: no real money moves for it.
    #[serde(default)]
    pub sandbox: bool,
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
            sandbox: w.sandbox,
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

pub(super) fn parse_id(raw: &str) -> Result<WithdrawalId, ApiError> {
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
                        "correlation_id": t.correlation_id, "at": t.at.0,
                        "evidence": t.evidence.map(|e| e.0)})
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
    let decisions: Vec<Value> =
        review_decisions::for_withdrawal(db, id).await?.iter().map(super::decisions::decision_json).collect();
    Ok(Json(json!({
        "withdrawal": OpsWithdrawal::from(&w),
        "review_decisions": decisions,
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
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let id = parse_id(&id)?;
    super::require_first(&state, &operator, Role::Operator, "withdrawal.resolve", "withdrawal", id.to_string()).await?;
    let req = super::body(body)?;
    let audited = Audited {
        action: "withdrawal.resolve",
        target_type: "withdrawal",
        target_id: id.to_string(),
        reason: &req.reason,
        parameters: json!({"action": req.action, "version": req.version, "provider_reference": req.provider_reference}),
    };
    let result = resolve_checked(&state, &operator, id, &req, &audited).await;
    audited.or_refuse(&state, &operator, result).await
}

/// What an operator may decide about a withdrawal in review.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Complete,
    Fail,
    Retry,
    Reconcile,
}

impl Action {
    pub fn parse(raw: &str) -> Result<Action, ApiError> {
        match raw {
            "complete" => Ok(Action::Complete),
            "fail" => Ok(Action::Fail),
            "retry" => Ok(Action::Retry),
            "reconcile" => Ok(Action::Reconcile),
            other => Err(ApiError::unprocessable(
                "invalid_action",
                "action",
                format!("unknown action `{other}`: use complete, fail, retry or reconcile"),
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Complete => "complete",
            Action::Fail => "fail",
            Action::Retry => "retry",
            Action::Reconcile => "reconcile",
        }
    }
}

async fn resolve_checked(
    state: &AppState,
    operator: &Operator,
    id: WithdrawalId,
    req: &ResolveRequest,
    audited: &Audited<'_>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let action = Action::parse(&req.action)?;
    let reason = require_reason(&req.reason)?;
    let db = state.db();
    let current = in_review(state, id, req.version).await?;
    let correlation = format!("ops-{}", Uuid::new_v4());
    if action == Action::Reconcile {
        let mut tx = db.begin().await?;
        enqueue_reconciliation(&mut tx, id, "operator_request", &correlation, DbTime::now()).await?;
        audited.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        let body = json!({"withdrawal": OpsWithdrawal::from(&current), "action": action.as_str()});
        return Ok((StatusCode::OK, Json(body)));
    }
    if let Some(pending) = review_decisions::pending_for(db, id).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "decision_pending",
            format!(
                "decision {} ({}) waits for a second operator: approve or reject it first",
                pending.id, pending.action
            ),
        ));
    }
    let reference = match action {
        Action::Complete => {
            Some(req.provider_reference.as_deref().map(str::trim).filter(|r| !r.is_empty()).ok_or_else(|| {
                ApiError::unprocessable(
                    "provider_reference_required",
                    "provider_reference",
                    "complete needs the provider's transfer id",
                )
            })?)
        }
        Action::Fail | Action::Retry | Action::Reconcile => None,
    };
    // Asked before any transaction opens: a slow provider must not hold a writer.
    let evidence = check_with_provider(state, &current, action, reference).await?;
    if matches!(action, Action::Complete | Action::Fail) && state.config().review.needs_approval(&current.amount) {
        let decision =
            super::decisions::request(state, operator, &current, action, reference, reason, &evidence, audited).await?;
        let body = json!({"withdrawal": OpsWithdrawal::from(&current), "action": action.as_str(),
                          "status": "pending_approval", "decision": decision});
        return Ok((StatusCode::ACCEPTED, Json(body)));
    }
    let mut tx = db.begin().await?;
    let withdrawal = apply(&mut tx, operator, &current, action, req.version, reason, &evidence, &correlation).await?;
    audited.record_ok(&mut tx, operator).await?;
    tx.commit().await?;
    Ok((StatusCode::OK, Json(json!({"withdrawal": OpsWithdrawal::from(&withdrawal), "action": action.as_str()}))))
}

/// The withdrawal, if it is in review at the version the operator looked at.
pub(super) async fn in_review(state: &AppState, id: WithdrawalId, version: i64) -> Result<Withdrawal, ApiError> {
    let current = store::get(state.db(), None, id).await?.ok_or_else(ApiError::not_found)?;
    if current.version != version {
        return Err(stale(current.version));
    }
    if current.status != WithdrawalStatus::RequiresReview {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_in_review",
            format!("only a requires_review withdrawal can be resolved; this one is {}", current.status),
        ));
    }
    Ok(current)
}

/// Applies a checked decision in `tx`: the guarded move from `requires_review` at `version`,
/// with the provider's answer stored on the transition (and, for `retry`, the new submit job).
#[allow(clippy::too_many_arguments)]
pub(super) async fn apply(
    tx: &mut crate::storage::Tx,
    operator: &Operator,
    current: &Withdrawal,
    action: Action,
    version: i64,
    reason: &str,
    evidence: &Value,
    correlation: &str,
) -> Result<Withdrawal, ApiError> {
    let id = current.id;
    if job_store::has_live_job(tx, id, crate::jobs::RECONCILE_PAYOUT).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "reconciliation_in_progress",
            "a reconciliation of this withdrawal is running; wait for its result",
        ));
    }
    let actor = Actor::Operator(operator.id.to_string());
    let (to, failure_code) = match action {
        Action::Complete => (WithdrawalStatus::Completed, None),
        Action::Fail => (WithdrawalStatus::Failed, Some("rejected_by_operator")),
        Action::Retry => (WithdrawalStatus::Processing, None),
        Action::Reconcile => return Err(ApiError::Internal(anyhow::anyhow!("reconcile is not a transition"))),
    };
    let transition = TransitionRequest {
        id,
        from: WithdrawalStatus::RequiresReview,
        to,
        expected_version: Some(version),
        actor: &actor,
        reason,
        correlation_id: correlation,
        failure_code,
        evidence: Some(evidence),
    };
    let outcome = store::transition(tx, &transition).await?;
    if matches!(outcome, TransitionOutcome::Applied(_)) {
        crate::metrics::transition_on_commit(tx, transition.from, transition.to);
    }
    if action == Action::Retry
        && matches!(outcome, TransitionOutcome::Applied(_))
        && !job_store::has_live_job(tx, id, SUBMIT_PAYOUT).await?
    {
        job_store::enqueue(tx, &SubmitPayout::new(id, None).job(correlation, DbTime::now())).await?;
    }
    match outcome {
        TransitionOutcome::Applied(w) => Ok(*w),
        TransitionOutcome::Stale => Err(stale_now(tx, id).await?),
        TransitionOutcome::Forbidden(err) => Err(ApiError::Internal(err.into())),
    }
}

async fn stale_now(tx: &mut crate::storage::Tx, id: WithdrawalId) -> Result<ApiError, ApiError> {
    let now = store::get_in_tx(tx, id).await?.ok_or_else(ApiError::not_found)?;
    Ok(stale(now.version))
}

fn stale(current: i64) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "stale_version",
        format!("the withdrawal changed since you looked: its version is now {current}; reload and decide again"),
    )
    .with_field("version")
}

/// What the provider says about a transfer id an operator named that is not the one under the
/// withdrawal's key (read by id and checked against the withdrawal), for the refusal's detail.
async fn reference_elsewhere(gateway: &crate::provider::Gateway, w: &Withdrawal, reference: &str) -> String {
    match gateway.get(reference, &format!("ops-check-{}", w.id)).await {
        Ok(LookupOutcome::Found(ts)) => match ts.first().map(|t| Verdict::of_transfer(w, t)) {
            Some(Verdict::Mismatch(_, m)) => {
                format!("; transfer {reference} is not this withdrawal's (it differs in {})", m.fields.join(", "))
            }
            Some(v) => format!("; transfer {reference} is {}", v.name()),
            None => String::new(),
        },
        Ok(LookupOutcome::NotFound) => format!("; the provider has no transfer {reference}"),
        Ok(LookupOutcome::Unavailable(_)) | Err(_) => String::new(),
    }
}

fn unavailable(detail: &str) -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "provider_unavailable", detail.to_owned())
}

/// SPEC §8.1: asks the provider now, by the operation key, and says whether `action` may move
/// money on its answer. On yes, returns the evidence to store with the decision.
///
/// | the provider shows | complete | fail, retry |
/// |---|---|---|
/// | a matching `paid` (or `returned`) transfer | yes, with its id as the reference | 409 `transfer_paid_at_provider` |
/// | a `pending` transfer | 422 `provider_reference_mismatch` | 409 `transfer_pending_at_provider` |
/// | a `failed` transfer, or definitively none | 422 `provider_reference_mismatch` | yes |
/// | none yet, but an attempt may still arrive | 422 `provider_reference_mismatch` | 409 `attempt_in_flight` |
/// | a transfer whose amount, currency or reference differ | 422 `provider_reference_mismatch` | 409 `provider_mismatch` |
/// | no answer (or the breaker is open) | 503 `provider_unavailable` | 503 `provider_unavailable` |
pub(super) async fn check_with_provider(
    state: &AppState,
    w: &Withdrawal,
    action: Action,
    reference: Option<&str>,
) -> Result<Value, ApiError> {
    let gateway = state.gateway().ok_or_else(|| unavailable("this process cannot reach the provider"))?;
    let answer = gateway
        .lookup(&w.id.to_string(), &format!("ops-check-{}", w.id))
        .await
        .map_err(|_| unavailable("the provider breaker is open; try later"))?;
    let in_flight = match answer {
        LookupOutcome::NotFound => {
            crate::jobs::reconcile::in_flight_until(state.db(), w.id, state.config().review.in_flight_grace)
                .await?
                .is_some()
        }
        _ => false,
    };
    let verdict = Verdict::of_lookup(w, &answer, in_flight);
    let mut evidence = verdict.evidence(w, Utc::now());
    evidence["action"] = json!(action.as_str());
    let refused_complete =
        |detail: String| ApiError::unprocessable("provider_reference_mismatch", "provider_reference", detail);
    let conflict = |code: &str, detail: String| ApiError::new(StatusCode::CONFLICT, code, detail);
    let reference = reference.unwrap_or_default();
    match (action, &verdict) {
        (_, Verdict::Unavailable(_)) => Err(unavailable("the provider did not answer; try later")),
        (Action::Complete, Verdict::Paid(t) | Verdict::Returned(t)) if t.id == reference => {
            evidence["provider_reference"] = json!(reference);
            Ok(evidence)
        }
        (Action::Complete, Verdict::Mismatch(t, m)) => Err(refused_complete(format!(
            "the provider's transfer {} differs from the withdrawal in {}: never completed",
            t.id,
            m.fields.join(", ")
        ))),
        (Action::Complete, other) => {
            let under_key = match other.transfer() {
                Some(t) if matches!(other, Verdict::Paid(_) | Verdict::Returned(_)) => {
                    format!("the provider paid this withdrawal as transfer {}, not {reference}", t.id)
                }
                Some(t) => format!(
                    "the provider reports this withdrawal's transfer {} as {}, not paid",
                    t.id,
                    t.status.as_str()
                ),
                None => "the provider has no transfer for this withdrawal".to_owned(),
            };
            let named = other.transfer().filter(|t| t.id == reference).is_some();
            let about_reference = if named { String::new() } else { reference_elsewhere(gateway, w, reference).await };
            Err(refused_complete(format!("{under_key}{about_reference}")))
        }
        (_, Verdict::NoTransfer | Verdict::Failed(_)) => Ok(evidence),
        (_, Verdict::Pending(t)) => Err(conflict(
            "transfer_pending_at_provider",
            format!("the provider's transfer {} is still pending: it may yet pay; wait, or reconcile later", t.id),
        )),
        (_, Verdict::Paid(t) | Verdict::Returned(t)) => Err(conflict(
            "transfer_paid_at_provider",
            format!("the provider paid this withdrawal (transfer {}): use complete with that reference", t.id),
        )),
        (_, Verdict::InFlight) => Err(conflict(
            "attempt_in_flight",
            "no transfer yet, but the last attempt may still reach the provider: try again shortly".to_owned(),
        )),
        (_, Verdict::Mismatch(t, m)) => Err(conflict(
            "provider_mismatch",
            format!(
                "the provider's transfer {} differs from the withdrawal in {}: compare with the settlement report",
                t.id,
                m.fields.join(", ")
            ),
        )),
    }
}
