//! The provider breaker across processes (SPEC §8): every process that holds a breaker obeys the
//! operators' override stored in the database and reports its breaker's state there, once per
//! poll interval, so `GET /ops/v1/breakers` covers the API and every worker alike.
//!
//! Owns: the sync loop and the process's identity in the reports. The breaker itself stays pure
//! (`provider::breaker`: no I/O); the SQL is in `storage::breakers`; setting and releasing an
//! override (role, reason, audit) is the operator core's (`ops::overview`).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::breaker::{BreakerState, CircuitBreaker};
use super::Gateway;
use crate::domain::{BreakerOverride, ProcessRole};
use crate::storage::breakers::{self as store, Override, Report};
use crate::storage::{Db, DbTime};

/// Reports older than this many poll intervals are a process that stopped: not shown.
pub const STALE_AFTER_POLLS: u32 = 3;
/// Reports older than this are deleted by any process's sync.
const FORGET_AFTER: chrono::TimeDelta = chrono::TimeDelta::hours(1);
/// How many syncs pass between two deletions of old reports.
const FORGET_EVERY_TICKS: u64 = 60;

/// Who is reporting: one per process.
#[derive(Debug, Clone)]
pub struct Process {
    pub id: String,
    pub role: ProcessRole,
    pub host: String,
}

impl Process {
    /// This process, with a fresh id (a restart is a new process).
    pub fn this(role: ProcessRole) -> Self {
        let host = crate::dead_letter::worker_host();
        let id = format!("{host}:{}:{}", std::process::id(), &uuid::Uuid::new_v4().simple().to_string()[..8]);
        Process { id, role, host }
    }
}

/// Makes `breaker` obey `wanted` (the override of its name, if any): forced while an override
/// stands, back to its own judgement (closed, counting afresh) once it is released. Returns
/// whether the breaker changed.
pub fn obey(breaker: &CircuitBreaker, wanted: Option<&Override>) -> bool {
    let state = breaker.state();
    let forced = matches!(state, BreakerState::ForcedOpen | BreakerState::ForcedClosed);
    match wanted.map(|o| o.mode) {
        Some(BreakerOverride::ForceOpen) if state != BreakerState::ForcedOpen => breaker.force_open(),
        Some(BreakerOverride::ForceClosed) if state != BreakerState::ForcedClosed => breaker.force_closed(),
        None if forced => breaker.reset(),
        Some(BreakerOverride::ForceOpen | BreakerOverride::ForceClosed) | None => return false,
    }
    true
}

/// One round: obey the stored override, then report the state.
async fn sync_once(
    db: &Db,
    breaker: &CircuitBreaker,
    process: &Process,
    seen: &mut (BreakerState, DbTime),
) -> anyhow::Result<()> {
    let overrides = store::overrides(db).await?;
    obey(breaker, overrides.iter().find(|o| o.breaker == breaker.name()));
    let state = breaker.state();
    let now = DbTime::now();
    if state != seen.0 {
        *seen = (state, now);
    }
    store::report(
        db,
        &Report {
            process_id: process.id.clone(),
            breaker: breaker.name().to_owned(),
            role: process.role.as_str().to_owned(),
            host: process.host.clone(),
            version: crate::VERSION.to_owned(),
            state: state.as_str().to_owned(),
            since: seen.1,
            reported_at: now,
        },
    )
    .await?;
    Ok(())
}

/// Every `every` until `shutdown`: obey the override, report the state, forget processes silent
/// for an hour. On shutdown the process's own reports are deleted (a stopped process is not
/// shown; one that crashed ages out after [`STALE_AFTER_POLLS`] intervals).
pub async fn sync_loop(db: Db, gateway: Gateway, process: Process, every: Duration, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    let mut seen = (gateway.breaker.state(), DbTime::now());
    let mut ticks: u64 = 0;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        if let Err(err) = sync_once(&db, &gateway.breaker, &process, &mut seen).await {
            tracing::warn!(error = format!("{err:#}"), "breaker sync failed; the breaker keeps its last override");
        }
        // Old reports are a tidy-up, not a view's concern (the view filters by freshness): now
        // and then, not on every sync.
        if ticks % FORGET_EVERY_TICKS == 0 {
            if let Err(err) = store::forget(&db, DbTime::now().plus(-FORGET_AFTER), None).await {
                tracing::warn!(error = format!("{err:#}"), "could not forget silent processes' breaker reports");
            }
        }
        ticks += 1;
    }
    if let Err(err) = store::forget(&db, DbTime::now().plus(-FORGET_AFTER), Some(&process.id)).await {
        tracing::warn!(error = format!("{err:#}"), "could not withdraw this process's breaker reports");
    }
}
