//! `GET /ops/v1/overview` and `GET /ops/v1/breakers`: the state of the whole service on one page —
//! withdrawals by state with the oldest age, open dead letters by category, job queues, breakers
//! and replays. The first thing an on-call engineer runs (`withdrawals status`).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use chrono::Utc;
use serde_json::{json, Value};

use super::{Operator, Role};
use crate::domain::WithdrawalStatus;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::jobs;
use crate::storage::{dead_letters, metrics as queries, DbTime};

pub fn router() -> Router<AppState> {
    Router::new().route("/ops/v1/overview", get(overview)).route("/ops/v1/breakers", get(breakers))
}

fn age_seconds(t: Option<DbTime>) -> Option<i64> {
    t.map(|t| (Utc::now() - t.0).num_seconds().max(0))
}

fn breaker_list(state: &AppState) -> Vec<Value> {
    state
        .gateway()
        .map(|g| json!({"name": g.breaker.name(), "state": g.breaker.state().as_str()}))
        .into_iter()
        .collect()
}

/// `GET /ops/v1/breakers`: the provider breaker's state as this process sees it.
async fn breakers(State(state): State<AppState>, operator: Operator) -> Result<Json<Value>, ApiError> {
    operator.require(Role::Viewer)?;
    Ok(Json(json!({"data": breaker_list(&state)})))
}

async fn overview(State(state): State<AppState>, operator: Operator) -> Result<Json<Value>, ApiError> {
    operator.require(Role::Viewer)?;
    let db = state.db();
    let states = queries::withdrawals_by_state(db).await?;
    let withdrawals: Vec<Value> = WithdrawalStatus::ALL
        .iter()
        .map(|status| {
            let row = states.iter().find(|r| r.status == status.as_str());
            json!({"state": status.as_str(), "count": row.map_or(0, |r| r.count),
                   "oldest_age_seconds": age_seconds(row.and_then(|r| r.oldest_change))})
        })
        .collect();

    let mut categories: Vec<Value> = Vec::new();
    for group in dead_letters::summary(db).await? {
        match categories.iter_mut().find(|c| c["category"] == group.category.as_str()) {
            Some(c) => {
                c["open"] = json!(c["open"].as_i64().unwrap_or(0) + group.open);
                let older = age_seconds(group.oldest_open).unwrap_or(0);
                if older > c["oldest_age_seconds"].as_i64().unwrap_or(0) {
                    c["oldest_age_seconds"] = json!(older);
                }
            }
            None => categories.push(json!({"category": group.category, "open": group.open,
                                           "oldest_age_seconds": age_seconds(group.oldest_open).unwrap_or(0)})),
        }
    }
    let open = queries::open_dead_letters(db).await?;

    let depths = queries::live_jobs_by_queue(db).await?;
    let queues: Vec<Value> = [jobs::PAYOUTS_QUEUE, jobs::RECONCILIATION_QUEUE]
        .iter()
        .map(|queue| {
            let of = |status: &str| depths.iter().find(|d| d.queue == *queue && d.status.as_str() == status);
            let scheduled = of("scheduled");
            json!({"queue": queue, "scheduled": scheduled.map_or(0, |d| d.count),
                   "running": of("running").map_or(0, |d| d.count), "due": scheduled.map_or(0, |d| d.due),
                   "oldest_due_age_seconds": age_seconds(scheduled.and_then(|d| d.oldest_due))})
        })
        .collect();

    let replays: Vec<Value> = queries::replay_runs_by_status(db)
        .await?
        .into_iter()
        .map(|r| json!({"status": r.status, "runs": r.runs, "pending_items": r.pending_items}))
        .collect();

    Ok(Json(json!({
        // Sandbox mode: this process pays through an in-process provider mock; nothing is real.
        "sandbox": state.config().sandbox,
        "withdrawals": withdrawals,
        "dead_letters": {"open": open.count, "oldest_open_age_seconds": age_seconds(open.oldest), "by_category": categories},
        "queues": queues,
        "breakers": breaker_list(&state),
        "replays": replays,
    })))
}
