//! The state of the whole service on one page — withdrawals by state with the oldest age, open
//! dead letters by category, job queues, breakers and replays — and the breakers across the
//! cluster, with the admin's kill switch (force open, force closed, release). The first thing an
//! on-call engineer runs (`withdrawals status`).

use chrono::Utc;

use chrono::TimeDelta;

use super::acts::{BreakerForceClosed, BreakerForceOpen, BreakerRelease};
use super::types::{
    BreakerAction, BreakerChanged, BreakerOverrideView, BreakerProcessView, BreakerView, CategoryCount,
    DeadLetterOverview, List, Overview, QueueDepth, ReasonRequest, ReplayCount, StateCount,
};
use super::{require_reason, Act, Action, Operator, Ops, OpsError, OpsResult, Role};
use crate::domain::{BreakerOverride, BreakerState, JobStatus, WithdrawalStatus};
use crate::jobs::Queue;
use crate::provider::cluster;
use crate::storage::breakers as breaker_store;
use crate::storage::{dead_letters, metrics as queries, DbTime};

fn age_seconds(t: Option<DbTime>) -> Option<i64> {
    t.map(|t| (Utc::now() - t.0).num_seconds().max(0))
}

/// One process's report as the view shows it. A role or state this version does not know (a
/// process of another version, during a rolling deploy) leaves that report out, with a warning,
/// instead of failing the breaker view and with it the kill switch.
fn process_view(r: &breaker_store::Report) -> Option<BreakerProcessView> {
    match (r.role.parse(), r.state.parse()) {
        (Ok(role), Ok(state)) => Some(BreakerProcessView {
            process_id: r.process_id.clone(),
            role,
            host: r.host.clone(),
            version: r.version.clone(),
            state,
            since: r.since.0,
            reported_at: r.reported_at.0,
        }),
        (role, state) => {
            tracing::warn!(
                process = r.process_id, version = r.version, role = ?role.err(), state = ?state.err(),
                "a breaker report this version cannot read is left out of the view"
            );
            None
        }
    }
}

/// Every breaker the cluster knows — this process's, any a live process reports, any with an
/// override — with its override and its processes (SPEC §8).
async fn breaker_list(ops: &Ops<'_>) -> OpsResult<Vec<BreakerView>> {
    let stale = ops.config.breaker_sync * cluster::STALE_AFTER_POLLS;
    let fresh_since = DbTime::now().plus(-TimeDelta::from_std(stale).unwrap_or(TimeDelta::seconds(15)));
    let reports = breaker_store::reports(ops.db, fresh_since).await?;
    let overrides = breaker_store::overrides(ops.db).await?;
    let mut names: Vec<String> =
        ops.gateways.into_iter().flat_map(|gs| gs.all().map(|g| g.breaker.name().to_owned())).collect();
    names.extend(reports.iter().map(|r| r.breaker.clone()));
    names.extend(overrides.iter().map(|o| o.breaker.clone()));
    names.sort();
    names.dedup();
    Ok(names
        .into_iter()
        .map(|name| {
            let processes: Vec<BreakerProcessView> =
                reports.iter().filter(|r| r.breaker == name).filter_map(process_view).collect();
            let forced = overrides.iter().find(|o| o.breaker == name).map(|o| BreakerOverrideView {
                mode: o.mode,
                reason: o.reason.clone(),
                set_by: o.set_by,
                set_by_name: o.set_by_name.clone(),
                set_at: o.set_at.0,
            });
            let own = ops.gateways.and_then(|gs| gs.by_breaker(&name)).map(|g| g.breaker.state());
            let state =
                BreakerState::of_cluster(forced.as_ref().map(|o| o.mode), processes.iter().map(|p| p.state), own);
            BreakerView { name, state, forced, processes }
        })
        .collect())
}

/// Every provider breaker across the cluster: its override and each live process's state.
pub async fn breakers(ops: &Ops<'_>, operator: &Operator) -> OpsResult<List<BreakerView>> {
    operator.require(Role::Viewer)?;
    Ok(List { data: breaker_list(ops).await? })
}

/// The kill switch (SPEC §8): an admin forces a breaker open or closed, or releases it, with a
/// reason. Stored in the database and audited in one transaction; this process obeys at once,
/// every other within one poll interval (`provider::cluster`).
pub async fn force_breaker(
    ops: &Ops<'_>,
    operator: &Operator,
    name: &str,
    action: BreakerAction,
    req: ReasonRequest,
) -> OpsResult<BreakerChanged> {
    let act = action.act();
    ops.perform(operator, &act, name, &req.reason, serde_json::json!({"breaker": name}), async |audited| {
        let reason = require_reason(&req.reason)?;
        if !breaker_list(ops).await?.iter().any(|b| b.name == name) {
            return Err(OpsError::not_found());
        }
        let mut tx = ops.db.begin().await?;
        match action.mode() {
            Some(mode) => {
                breaker_store::set_override(&mut tx, name, mode, &crate::redact::text(reason), operator.id).await?
            }
            None => {
                breaker_store::clear_override(&mut tx, name).await?;
            }
        }
        audited.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        // This process at once; the others at their next sync.
        if let Some(g) = ops.gateways.and_then(|gs| gs.by_breaker(name)) {
            let overrides = breaker_store::overrides(ops.db).await?;
            cluster::obey(&g.breaker, overrides.iter().find(|o| o.breaker == name));
        }
        let breaker = breaker_list(ops).await?.into_iter().find(|b| b.name == name).ok_or_else(OpsError::not_found)?;
        Ok(BreakerChanged { name: name.to_owned(), action, breaker })
    })
    .await
}

impl BreakerAction {
    /// The action a console form names (`force-open`, `force-closed`, `release`; the JSON spelling
    /// `force_open` is read too).
    pub fn from_form(raw: &str) -> Option<Self> {
        raw.replace('-', "_").parse().ok()
    }

    fn act(self) -> Act {
        match self {
            Self::ForceOpen => BreakerForceOpen::ACT,
            Self::ForceClosed => BreakerForceClosed::ACT,
            Self::Release => BreakerRelease::ACT,
        }
    }

    /// The stored override, `None` to release.
    fn mode(self) -> Option<BreakerOverride> {
        match self {
            Self::ForceOpen => Some(BreakerOverride::ForceOpen),
            Self::ForceClosed => Some(BreakerOverride::ForceClosed),
            Self::Release => None,
        }
    }
}

pub async fn overview(ops: &Ops<'_>, operator: &Operator) -> OpsResult<Overview> {
    operator.require(Role::Viewer)?;
    let db = ops.db;
    let states = queries::withdrawals_by_state(db).await?;
    let withdrawals = WithdrawalStatus::ALL
        .iter()
        .map(|status| {
            let row = states.iter().find(|r| r.status == *status);
            StateCount {
                state: *status,
                count: row.map_or(0, |r| r.count),
                oldest_age_seconds: age_seconds(row.and_then(|r| r.oldest_change)),
            }
        })
        .collect();

    let mut by_category: Vec<CategoryCount> = Vec::new();
    for group in dead_letters::summary(db).await? {
        let older = age_seconds(group.oldest_open).unwrap_or(0);
        match by_category.iter_mut().find(|c| c.category == group.category) {
            Some(c) => {
                c.open += group.open;
                c.oldest_age_seconds = c.oldest_age_seconds.max(older);
            }
            None => by_category.push(CategoryCount {
                category: group.category,
                open: group.open,
                oldest_age_seconds: older,
            }),
        }
    }
    let open = queries::open_dead_letters(db).await?;

    let depths = queries::live_jobs_by_queue(db).await?;
    let queues = Queue::REPLAY_DESTINATIONS
        .iter()
        .map(|queue| {
            let of = |status: JobStatus| depths.iter().find(|d| d.queue == queue.as_str() && d.status == status);
            let scheduled = of(JobStatus::Scheduled);
            QueueDepth {
                queue: *queue,
                scheduled: scheduled.map_or(0, |d| d.count),
                running: of(JobStatus::Running).map_or(0, |d| d.count),
                due: scheduled.map_or(0, |d| d.due),
                oldest_due_age_seconds: age_seconds(scheduled.and_then(|d| d.oldest_due)),
            }
        })
        .collect();

    let replays = queries::replay_runs_by_status(db)
        .await?
        .into_iter()
        .map(|r| ReplayCount { status: r.status, runs: r.runs, pending_items: r.pending_items })
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
        breakers: breaker_list(ops).await?,
        replays,
    })
}
