//! Audit, overview and breakers.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::domain::{BreakerOverride, BreakerState, Category, ProcessRole, ReplayStatus, WithdrawalStatus};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditEntry {
    pub id: Uuid,
    pub operator_id: Uuid,
    pub operator_name: String,
    pub role: crate::domain::Role,
    pub action: String,
    pub target_type: String,
    pub target_id: String,
    pub reason: String,
    pub parameters: Value,
    pub result: String,
    pub at: DateTime<Utc>,
}

/// One breaker across the cluster (SPEC §8): its effective state, the override in force, and
/// what each live process's breaker says.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BreakerView {
    pub name: String,
    /// `forced_open` / `forced_closed` while an override stands; otherwise the most severe state
    /// a live process reports (`open` over `half_open` over `closed`), or this process's own
    /// when none has reported yet ([`BreakerState::of_cluster`]).
    pub state: BreakerState,
    #[serde(rename = "override", default, skip_serializing_if = "Option::is_none")]
    pub forced: Option<BreakerOverrideView>,
    #[serde(default)]
    pub processes: Vec<BreakerProcessView>,
}

/// An operator's override of a breaker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BreakerOverrideView {
    pub mode: BreakerOverride,
    pub reason: String,
    pub set_by: Uuid,
    /// The operator's name.
    pub set_by_name: String,
    pub set_at: DateTime<Utc>,
}

/// What one process's breaker reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BreakerProcessView {
    pub process_id: String,
    pub role: ProcessRole,
    pub host: String,
    pub version: String,
    pub state: BreakerState,
    pub since: DateTime<Utc>,
    pub reported_at: DateTime<Utc>,
}

/// What forcing or releasing a breaker did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BreakerChanged {
    pub name: String,
    pub action: BreakerAction,
    /// The breaker as the cluster will see it within one poll interval.
    pub breaker: BreakerView,
}

crate::text_enum! {
    /// What an admin does to a breaker (the kill switch, SPEC §8).
    pub enum BreakerAction("breaker action", 3) {
        ForceOpen = "force_open",
        ForceClosed = "force_closed",
        Release = "release",
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Overview {
    /// Sandbox mode: this process pays through an in-process provider mock; nothing is real.
    pub sandbox: bool,
    pub withdrawals: Vec<StateCount>,
    pub dead_letters: DeadLetterOverview,
    pub queues: Vec<QueueDepth>,
    pub breakers: Vec<BreakerView>,
    pub replays: Vec<ReplayCount>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StateCount {
    pub state: WithdrawalStatus,
    pub count: i64,
    pub oldest_age_seconds: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterOverview {
    pub open: i64,
    pub oldest_open_age_seconds: Option<i64>,
    pub by_category: Vec<CategoryCount>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CategoryCount {
    pub category: Category,
    pub open: i64,
    pub oldest_age_seconds: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueueDepth {
    pub queue: crate::domain::job::Queue,
    pub scheduled: i64,
    pub running: i64,
    pub due: i64,
    pub oldest_due_age_seconds: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayCount {
    pub status: ReplayStatus,
    pub runs: i64,
    pub pending_items: i64,
}
