//! Replay (SPEC §8.3): a deliberate command, never "retry all". Start with a reason, a selection
//! (dead-letter ids or the triage filters), the expected payload version and a destination queue;
//! `dry_run` reports the count and a sample and changes nothing. Runs over the approval
//! threshold wait for a second operator. The worker's releaser does the releasing.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::{require_reason, Audited, Operator, Role};
use crate::domain::{DeadLetterId, ReplayAction, ReplayRunId, ReplayStatus};
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::jobs::{PAYOUTS_QUEUE, RECONCILIATION_QUEUE};
use crate::storage::dead_letters::{self, DeadLetterFilter};
use crate::storage::replays::{self, ReplayRun};
use crate::storage::{is_unique_violation, DbTime, StorageError};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ops/v1/replays", post(start).get(list))
        .route("/ops/v1/replays/{id}", get(status))
        .route("/ops/v1/replays/{id}/{action}", post(control))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectionFilter {
    pub queue: Option<String>,
    pub job_type: Option<String>,
    pub error_code: Option<String>,
    pub category: Option<String>,
    pub failed_after: Option<DateTime<Utc>>,
    pub failed_before: Option<DateTime<Utc>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    pub reason: String,
    #[serde(default)]
    pub dead_letter_ids: Option<Vec<Uuid>>,
    #[serde(default)]
    pub filter: Option<SelectionFilter>,
    pub expected_payload_version: i64,
    pub destination_queue: String,
    #[serde(default)]
    pub dry_run: bool,
    pub rate_per_second: Option<i64>,
    pub max_concurrency: Option<i64>,
    pub auto_pause_threshold: Option<i64>,
    /// The `selection_digest` of the dry run the operator confirmed: if the selection is no
    /// longer exactly those dead letters, the start is refused (409 `selection_changed`).
    #[serde(default)]
    pub expected_selection_digest: Option<String>,
}

/// A short fingerprint of exactly which dead letters a selection holds (order-independent).
pub fn selection_digest(letters: &[dead_letters::DeadLetter]) -> String {
    use sha2::{Digest, Sha256};
    let mut ids: Vec<Uuid> = letters.iter().map(|d| d.id.0).collect();
    ids.sort();
    let mut hasher = Sha256::new();
    for id in ids {
        hasher.update(id.as_bytes());
    }
    hex::encode(&hasher.finalize()[..16])
}

fn run_view(run: &ReplayRun, progress: Option<&replays::Progress>) -> Value {
    let elapsed = (Utc::now() - run.created_at.0).num_milliseconds().max(1) as f64 / 1000.0;
    let mut v = json!({
        "id": run.id, "status": run.status, "reason": run.reason, "selection": run.selection.0,
        "expected_payload_version": run.expected_payload_version, "destination_queue": run.destination_queue,
        "total": run.total, "rate_per_second": run.rate_per_second, "max_concurrency": run.max_concurrency,
        "auto_pause_threshold": run.auto_pause_threshold, "started_by": run.started_by, "approved_by": run.approved_by,
        "paused_reason": run.paused_reason, "created_at": run.created_at.0, "updated_at": run.updated_at.0,
    });
    if let Some(p) = progress {
        let released = p.released + p.reconciling;
        v["progress"] = json!({
            "total": run.total, "pending": p.pending, "released": p.released, "reconciling": p.reconciling,
            "skipped": p.skipped, "cancelled": p.cancelled, "in_flight": p.in_flight, "succeeded": p.succeeded,
            "failed": p.failed, "new_dead_letters": p.new_dead_letters,
            "released_per_second": (released as f64 / elapsed * 100.0).round() / 100.0,
        });
    }
    v
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    pub status: Option<String>,
    pub limit: Option<i64>,
}

const RUN_STATUSES: [&str; 5] = ["awaiting_approval", "running", "paused", "completed", "cancelled"];

/// `GET /ops/v1/replays?status=&limit=`: runs newest first, with their progress.
async fn list(
    State(state): State<AppState>,
    operator: Operator,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    operator.require(Role::Viewer)?;
    let q = crate::http::error::query_params(query)?;
    if let Some(status) = q.status.as_deref().filter(|s| !RUN_STATUSES.contains(s)) {
        return Err(ApiError::unprocessable(
            "invalid_status",
            "status",
            format!("unknown run status `{status}`: use one of {}", RUN_STATUSES.join(", ")),
        ));
    }
    let limit = super::review::page_limit(q.limit)?;
    let mut data = Vec::new();
    let status = q.status.as_deref().and_then(|s| s.parse::<ReplayStatus>().ok());
    for run in replays::list_runs(state.db(), status, limit).await? {
        let progress = replays::progress(state.db(), run.id).await?;
        data.push(run_view(&run, Some(&progress)));
    }
    Ok(Json(json!({"data": data})))
}

async fn select(state: &AppState, req: &StartRequest, limit: i64) -> Result<Vec<dead_letters::DeadLetter>, ApiError> {
    let db = state.db();
    match (&req.dead_letter_ids, &req.filter) {
        (Some(ids), None) => {
            let mut seen = std::collections::HashSet::new();
            let ids: Vec<DeadLetterId> =
                ids.iter().filter(|id| seen.insert(**id)).map(|id| DeadLetterId(*id)).collect();
            // One read for the whole selection; the checks below go in request order, so the
            // first offending id is the one named.
            let mut found: std::collections::HashMap<DeadLetterId, dead_letters::SelectedLetter> =
                dead_letters::get_many(db, &ids).await?.into_iter().map(|s| (s.letter.id, s)).collect();
            let mut letters = Vec::with_capacity(ids.len());
            for id in &ids {
                let selected = found.remove(id).ok_or_else(|| {
                    ApiError::unprocessable("unknown_dead_letter", "dead_letter_ids", format!("no dead letter {id}"))
                })?;
                if selected.closed {
                    return Err(ApiError::unprocessable(
                        "dead_letter_closed",
                        "dead_letter_ids",
                        format!("dead letter {id} is closed"),
                    ));
                }
                letters.push(selected.letter);
            }
            Ok(letters)
        }
        (None, Some(f)) => {
            // Replay is deliberate, never "retry all" (SPEC §8.3): a filter must narrow.
            let narrows = [&f.queue, &f.job_type, &f.error_code, &f.category].iter().any(|v| v.is_some())
                || f.failed_after.is_some()
                || f.failed_before.is_some();
            if !narrows {
                return Err(ApiError::unprocessable(
                    "filter_required",
                    "filter",
                    "a filter must name at least one of queue, job_type, error_code, category, failed_after, failed_before",
                ));
            }
            let filter = DeadLetterFilter {
                queue: f.queue.clone(),
                job_type: f.job_type.clone(),
                error_code: f.error_code.clone(),
                category: f.category.clone(),
                failed_after: f.failed_after.map(DbTime::from),
                failed_before: f.failed_before.map(DbTime::from),
                open: Some(true),
                after: None,
                limit: limit + 1,
            };
            // A filter selects what still needs replaying: not what a run already released.
            let selected = dead_letters::list_selection(db, &filter).await?;
            Ok(selected.into_iter().filter(|s| !s.replayed).map(|s| s.letter).collect())
        }
        _ => Err(ApiError::unprocessable(
            "invalid_selection",
            "selection",
            "give exactly one of dead_letter_ids or filter",
        )),
    }
}

async fn start(
    State(state): State<AppState>,
    operator: Operator,
    body: Result<Json<StartRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    super::require_first(&state, &operator, Role::Operator, "replay.start", "replay", "new".into()).await?;
    let req = super::body(body)?;
    let audited = Audited {
        action: if req.dry_run { "replay.dry_run" } else { "replay.start" },
        target_type: "replay",
        target_id: "new".into(),
        reason: &req.reason,
        parameters: json!({"dead_letter_ids": req.dead_letter_ids, "filter": req.filter.as_ref().map(|f| format!("{f:?}")),
                           "expected_payload_version": req.expected_payload_version,
                           "destination_queue": req.destination_queue, "dry_run": req.dry_run,
                           "rate_per_second": req.rate_per_second, "max_concurrency": req.max_concurrency,
                           "auto_pause_threshold": req.auto_pause_threshold,
                           "expected_selection_digest": req.expected_selection_digest}),
    };
    let result = start_checked(&state, &operator, &req, &audited).await;
    audited.or_refuse(&state, &operator, result).await
}

async fn start_checked(
    state: &AppState,
    operator: &Operator,
    req: &StartRequest,
    audited: &Audited<'_>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let settings = state.config().replay;
    let reason = require_reason(&req.reason)?;
    if ![PAYOUTS_QUEUE, RECONCILIATION_QUEUE].contains(&req.destination_queue.as_str()) {
        return Err(ApiError::unprocessable(
            "unknown_queue",
            "destination_queue",
            "destination queue must be payouts or reconciliation",
        ));
    }
    let rate = req.rate_per_second.unwrap_or(settings.default_rate_per_second);
    let concurrency = req.max_concurrency.unwrap_or(settings.default_max_concurrency);
    let auto_pause = req.auto_pause_threshold.unwrap_or(settings.default_auto_pause_threshold);
    if !(1..=1_000).contains(&rate) || !(1..=100).contains(&concurrency) || auto_pause < 1 {
        return Err(ApiError::unprocessable(
            "invalid_limits",
            "rate_per_second",
            "rate 1–1000/s, concurrency 1–100, auto-pause ≥ 1",
        ));
    }
    // Operators replay within limits; faster or wider runs are an admin's call (SPEC §8).
    if operator.role < Role::Admin
        && (rate > settings.operator_max_rate || concurrency > settings.operator_max_concurrency)
    {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "admin_required",
            format!(
                "operators may replay at up to {}/s with {} in flight; ask an admin for more",
                settings.operator_max_rate, settings.operator_max_concurrency
            ),
        ));
    }
    let letters = select(state, req, settings.max_selection).await?;
    if letters.is_empty() {
        return Err(ApiError::unprocessable(
            "empty_selection",
            "selection",
            "the selection matches no open dead letter",
        ));
    }
    if letters.len() as i64 > settings.max_selection {
        return Err(ApiError::unprocessable(
            "selection_too_large",
            "selection",
            format!("at most {} items per run", settings.max_selection),
        ));
    }
    let needs_approval = letters.len() as i64 > settings.approval_threshold;
    if req.dry_run {
        let sample: Vec<Value> = letters
            .iter()
            .take(5)
            .map(|d| {
                json!({"dead_letter_id": d.id, "withdrawal_id": d.withdrawal_id, "category": d.category,
                            "error_code": d.error_code, "payload_version": d.payload_version,
                            "side_effect_state": d.side_effect_state})
            })
            .collect();
        let mismatched = letters.iter().filter(|d| d.payload_version != req.expected_payload_version).count();
        let mut tx = state.db().begin().await?;
        audited.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        return Ok((
            StatusCode::OK,
            Json(json!({"dry_run": true, "count": letters.len(), "sample": sample, "needs_approval": needs_approval,
                        "payload_version_mismatches": mismatched, "selection_digest": selection_digest(&letters)})),
        ));
    }
    if let Some(expected) = &req.expected_selection_digest {
        if *expected != selection_digest(&letters) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "selection_changed",
                format!(
                    "the selection is no longer the one the dry run showed (it now holds {} dead letters); run the dry run again",
                    letters.len()
                ),
            ));
        }
    }
    let ids: Vec<DeadLetterId> = letters.iter().map(|d| d.id).collect();
    let active: std::collections::HashMap<DeadLetterId, ReplayRunId> =
        replays::active_runs_for(state.db(), &ids).await?.into_iter().collect();
    if let Some((letter, run)) = letters.iter().find_map(|d| active.get(&d.id).map(|run| (d.id, *run))) {
        return Err(already_replaying(letter, run));
    }
    let now = DbTime::now();
    let run = ReplayRun {
        id: ReplayRunId::new(),
        started_by: operator.id,
        reason: crate::redact::text(reason),
        selection: sqlx::types::Json(json!({"dead_letter_ids": letters.iter().map(|d| d.id).collect::<Vec<_>>()})),
        expected_payload_version: req.expected_payload_version,
        destination_queue: req.destination_queue.clone(),
        status: if needs_approval { ReplayStatus::AwaitingApproval } else { ReplayStatus::Running },
        total: letters.len() as i64,
        rate_per_second: rate,
        max_concurrency: concurrency,
        auto_pause_threshold: auto_pause,
        dead_letter_baseline: 0,
        approved_by: None,
        paused_reason: None,
        created_at: now,
        updated_at: now,
    };
    let mut tx = state.db().begin().await?;
    replays::insert_run(&mut tx, &run).await?;
    for letter in &letters {
        if let Err(err) = replays::insert_item(&mut tx, run.id, letter.id).await {
            drop(tx);
            return Err(match err {
                StorageError::Database(ref db) if is_unique_violation(db) => {
                    let holder = replays::active_run_for(state.db(), letter.id).await?.unwrap_or_default();
                    already_replaying(letter.id, holder)
                }
                other => other.into(),
            });
        }
    }
    let audited = Audited { target_id: run.id.to_string(), ..audited.clone_shallow() };
    audited.record_ok(&mut tx, operator).await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(run_view(&run, None))))
}

fn already_replaying(dead_letter: DeadLetterId, run: ReplayRunId) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "already_replaying",
        format!("dead letter {dead_letter} is already being replayed by run {run}"),
    )
}

async fn status(
    State(state): State<AppState>,
    operator: Operator,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    operator.require(Role::Viewer)?;
    let id = ReplayRunId(super::path_id(&id)?);
    let run = replays::get_run(state.db(), id).await?.ok_or_else(ApiError::not_found)?;
    let progress = replays::progress(state.db(), id).await?;
    let mut view = run_view(&run, Some(&progress));
    view["items"] = replays::items(state.db(), id)
        .await?
        .iter()
        .map(
            |i| json!({"dead_letter_id": i.dead_letter_id, "status": i.status, "detail": i.detail, "job_id": i.job_id}),
        )
        .collect();
    Ok(Json(view))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlRequest {
    pub reason: String,
}

async fn control(
    State(state): State<AppState>,
    operator: Operator,
    Path((id, action)): Path<(String, String)>,
    body: Result<Json<ControlRequest>, axum::extract::rejection::JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let needed = if action == "approve" { Role::Admin } else { Role::Operator };
    let id = ReplayRunId(super::path_id(&id)?);
    let audited_action = match action.as_str() {
        "pause" => "replay.pause",
        "resume" => "replay.resume",
        "cancel" => "replay.cancel",
        "approve" => "replay.approve",
        _ => return Err(ApiError::not_found()),
    };
    super::require_first(&state, &operator, needed, audited_action, "replay", id.to_string()).await?;
    let req = super::body(body)?;
    let audited = Audited {
        action: audited_action,
        target_type: "replay",
        target_id: id.to_string(),
        reason: &req.reason,
        parameters: json!({}),
    };
    let done = async {
        let reason = require_reason(&req.reason)?;
        let run = replays::get_run(state.db(), id).await?.ok_or_else(ApiError::not_found)?;
        let mut tx = state.db().begin().await?;
        let changed = match action.as_str() {
            "pause" => {
                let reason = crate::redact::text(reason);
                replays::set_status(&mut tx, id, ReplayAction::Pause, Some(&reason), None).await?
            }
            "resume" => {
                let resumed = replays::set_status(&mut tx, id, ReplayAction::Resume, None, None).await?;
                let seen = replays::progress(state.db(), id).await?.new_dead_letters;
                replays::reset_baseline(&mut tx, id, seen).await?;
                resumed
            }
            "cancel" => {
                let ok = replays::set_status(&mut tx, id, ReplayAction::Cancel, Some(reason), None).await?;
                if ok {
                    replays::cancel_pending(&mut tx, id).await?;
                }
                ok
            }
            _ => {
                if run.started_by == operator.id {
                    return Err(ApiError::new(
                        StatusCode::FORBIDDEN,
                        "second_operator_required",
                        "a run must be approved by a different operator than the one who started it",
                    ));
                }
                replays::set_status(&mut tx, id, ReplayAction::Approve, None, Some(operator.id)).await?
            }
        };
        if !changed {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "invalid_run_state",
                format!("cannot {action} a run that is {}", run.status),
            ));
        }
        audited.record_ok(&mut tx, &operator).await?;
        tx.commit().await?;
        let run = replays::get_run(state.db(), id).await?.ok_or_else(ApiError::not_found)?;
        Ok(Json(run_view(&run, None)))
    };
    audited.or_refuse(&state, &operator, done.await).await
}
