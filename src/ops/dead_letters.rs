//! Dead-letter triage (SPEC §8.2): filtered, paginated lists; the summary by category and error
//! code (triage step one); one envelope; close with a reason (archived, never deleted).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::review::{decode_cursor, encode_cursor, page_limit};
use super::{require_reason, Audited, Operator, Role};
use crate::domain::DeadLetterId;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::storage::dead_letters::{self, DeadLetter, DeadLetterFilter, Event};
use crate::storage::DbTime;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ops/v1/dead-letters", get(list))
        .route("/ops/v1/dead-letters/summary", get(summary))
        .route("/ops/v1/dead-letters/{id}", get(show))
        .route("/ops/v1/dead-letters/{id}/close", post(close))
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    pub queue: Option<String>,
    pub job_type: Option<String>,
    pub error_code: Option<String>,
    pub category: Option<String>,
    pub failed_after: Option<DateTime<Utc>>,
    pub failed_before: Option<DateTime<Utc>>,
    /// `open` (default), `closed` or `all`.
    pub state: Option<String>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

fn view(d: &DeadLetter, closed_at: Option<DbTime>) -> Value {
    json!({
        "id": d.id, "job_id": d.job_id, "queue": d.queue, "job_type": d.job_type,
        "payload_version": d.payload_version, "payload": d.payload.as_ref().map(|p| &p.0),
        "raw_payload": d.raw_payload.as_ref().map(|b| String::from_utf8_lossy(b).into_owned()),
        "attempts": d.attempts, "first_attempt_at": d.first_attempt_at.map(|t| t.0), "failed_at": d.failed_at.0,
        "error_code": d.error_code, "error_class": d.error_class, "error_message": d.error_message,
        "stack": d.stack, "worker_host": d.worker_host, "worker_version": d.worker_version,
        "correlation_id": d.correlation_id, "idempotency_key": d.idempotency_key, "withdrawal_id": d.withdrawal_id,
        "side_effect_state": d.side_effect_state, "category": d.category, "owner": d.owner, "runbook": d.runbook,
        "state": if closed_at.is_some() { "closed" } else { "open" }, "closed_at": closed_at.map(|t| t.0),
        "age_seconds": (Utc::now() - d.failed_at.0).num_seconds(),
    })
}

async fn list(
    State(state): State<AppState>,
    operator: Operator,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    operator.require(Role::Viewer)?;
    let q = crate::http::error::query_params(query)?;
    let open = match q.state.as_deref().unwrap_or("open") {
        "open" => Some(true),
        "closed" => Some(false),
        "all" => None,
        _ => return Err(ApiError::unprocessable("invalid_state", "state", "state must be open, closed or all")),
    };
    let limit = page_limit(q.limit)?;
    let filter = DeadLetterFilter {
        queue: q.queue,
        job_type: q.job_type,
        error_code: q.error_code,
        category: q.category,
        failed_after: q.failed_after.map(DbTime::from),
        failed_before: q.failed_before.map(DbTime::from),
        open,
        after: q.cursor.as_deref().map(decode_cursor).transpose()?,
        limit: limit + 1,
    };
    let mut rows = dead_letters::list(state.db(), &filter).await?;
    let next = if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(|r| encode_cursor(r.letter.failed_at, r.letter.id.0))
    } else {
        None
    };
    let data: Vec<Value> = rows.iter().map(|r| view(&r.letter, r.closed_at)).collect();
    Ok(Json(json!({"data": data, "next_cursor": next})))
}

async fn summary(State(state): State<AppState>, operator: Operator) -> Result<Json<Value>, ApiError> {
    operator.require(Role::Viewer)?;
    let now = Utc::now();
    let data: Vec<Value> = dead_letters::summary(state.db())
        .await?
        .into_iter()
        .map(|g| {
            json!({"category": g.category, "error_code": g.error_code, "open": g.open,
                        "oldest_open_at": g.oldest_open.map(|t| t.0),
                        "oldest_open_age_seconds": g.oldest_open.map(|t| (now - t.0).num_seconds())})
        })
        .collect();
    Ok(Json(json!({"data": data})))
}

async fn show(
    State(state): State<AppState>,
    operator: Operator,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    operator.require(Role::Viewer)?;
    let id = DeadLetterId(super::path_id(&id)?);
    let letter = dead_letters::get(state.db(), id).await?.ok_or_else(ApiError::not_found)?;
    let events = dead_letters::events(state.db(), id).await?;
    let closed_at = events.iter().find(|e| e.action == "closed").map(|e| e.at);
    let mut body = view(&letter, closed_at);
    let mut shown = Vec::new();
    for e in &events {
        let mut event = json!({"action": e.action, "actor": e.actor, "reason": e.reason,
                               "details": e.details.as_ref().map(|d| &d.0), "at": e.at.0});
        // A replay's outcome: the status of the job it released.
        let job = e.details.as_ref().and_then(|d| d.0["job_id"].as_str().and_then(|j| Uuid::parse_str(j).ok()));
        if let Some(job) = job {
            event["replay_job_status"] =
                json!(crate::storage::jobs::job_status(state.db(), crate::domain::JobId(job)).await?);
        }
        shown.push(event);
    }
    body["events"] = Value::Array(shown);
    Ok(Json(body))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloseRequest {
    pub reason: String,
}

async fn close(
    State(state): State<AppState>,
    operator: Operator,
    Path(id): Path<String>,
    body: Result<Json<CloseRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let id = DeadLetterId(super::path_id(&id)?);
    super::require_first(&state, &operator, Role::Operator, "dead_letter.close", "dead_letter", id.to_string()).await?;
    let req = super::body(body)?;
    let audited = Audited {
        action: "dead_letter.close",
        target_type: "dead_letter",
        target_id: id.to_string(),
        reason: &req.reason,
        parameters: json!({}),
    };
    let done = async {
        let reason = require_reason(&req.reason)?;
        dead_letters::get(state.db(), id).await?.ok_or_else(ApiError::not_found)?;
        let mut tx = state.db().begin().await?;
        let event = Event {
            id: crate::domain::DeadLetterEventId::new(),
            dead_letter_id: id,
            action: "closed".into(),
            actor: format!("operator:{}", operator.id),
            reason: crate::redact::text(reason),
            details: None,
            at: DbTime::now(),
        };
        if !dead_letters::add_event(&mut tx, &event).await? {
            return Err(ApiError::new(StatusCode::CONFLICT, "already_closed", "this dead letter is already closed"));
        }
        audited.record_ok(&mut tx, &operator).await?;
        tx.commit().await?;
        Ok(Json(json!({"id": id, "state": "closed", "closed_at": event.at.0})))
    };
    audited.or_refuse(&state, &operator, done.await).await
}
