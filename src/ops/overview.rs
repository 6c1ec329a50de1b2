//! The state of the whole service on one page — withdrawals by state with the oldest age, open
//! dead letters by category, job queues, breakers and replays — and the breakers alone. The first
//! thing an on-call engineer runs (`withdrawals status`).

use chrono::Utc;

use super::types::{
    BreakerView, CategoryCount, DeadLetterOverview, List, Overview, QueueDepth, ReplayCount, StateCount,
};
use super::{Operator, Ops, OpsResult, Role};
use crate::domain::WithdrawalStatus;
use crate::jobs;
use crate::storage::{dead_letters, metrics as queries, DbTime};

fn age_seconds(t: Option<DbTime>) -> Option<i64> {
    t.map(|t| (Utc::now() - t.0).num_seconds().max(0))
}

fn breaker_list(ops: &Ops<'_>) -> Vec<BreakerView> {
    ops.gateway
        .map(|g| BreakerView { name: g.breaker.name().to_owned(), state: g.breaker.state().as_str().to_owned() })
        .into_iter()
        .collect()
}

/// The provider breaker's state as this process sees it.
pub async fn breakers(ops: &Ops<'_>, operator: &Operator) -> OpsResult<List<BreakerView>> {
    operator.require(Role::Viewer)?;
    Ok(List { data: breaker_list(ops) })
}

pub async fn overview(ops: &Ops<'_>, operator: &Operator) -> OpsResult<Overview> {
    operator.require(Role::Viewer)?;
    let db = ops.db;
    let states = queries::withdrawals_by_state(db).await?;
    let withdrawals = WithdrawalStatus::ALL
        .iter()
        .map(|status| {
            let row = states.iter().find(|r| r.status == status.as_str());
            StateCount {
                state: status.as_str().to_owned(),
                count: row.map_or(0, |r| r.count),
                oldest_age_seconds: age_seconds(row.and_then(|r| r.oldest_change)),
            }
        })
        .collect();

    let mut by_category: Vec<CategoryCount> = Vec::new();
    for group in dead_letters::summary(db).await? {
        let older = age_seconds(group.oldest_open).unwrap_or(0);
        match by_category.iter_mut().find(|c| c.category == group.category.as_str()) {
            Some(c) => {
                c.open += group.open;
                c.oldest_age_seconds = c.oldest_age_seconds.max(older);
            }
            None => by_category.push(CategoryCount {
                category: group.category.to_string(),
                open: group.open,
                oldest_age_seconds: older,
            }),
        }
    }
    let open = queries::open_dead_letters(db).await?;

    let depths = queries::live_jobs_by_queue(db).await?;
    let queues = [jobs::PAYOUTS_QUEUE, jobs::RECONCILIATION_QUEUE]
        .iter()
        .map(|queue| {
            let of = |status: &str| depths.iter().find(|d| d.queue == *queue && d.status.as_str() == status);
            let scheduled = of("scheduled");
            QueueDepth {
                queue: (*queue).to_owned(),
                scheduled: scheduled.map_or(0, |d| d.count),
                running: of("running").map_or(0, |d| d.count),
                due: scheduled.map_or(0, |d| d.due),
                oldest_due_age_seconds: age_seconds(scheduled.and_then(|d| d.oldest_due)),
            }
        })
        .collect();

    let replays = queries::replay_runs_by_status(db)
        .await?
        .into_iter()
        .map(|r| ReplayCount { status: r.status.to_string(), runs: r.runs, pending_items: r.pending_items })
        .collect();

    Ok(Overview {
        sandbox: ops.config.sandbox,
        withdrawals,
        dead_letters: DeadLetterOverview {
            open: open.count,
            oldest_open_age_seconds: age_seconds(open.oldest),
            by_category,
        },
        queues,
        breakers: breaker_list(ops),
        replays,
    })
}
