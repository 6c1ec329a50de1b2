//! What each list route reads from its query string. `None` means "not given" (the route's
//! default); serialised, a `None` is left out of the query string.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

// (the route's default); serialised, a `None` is left out of the query string.

/// `GET /ops/v1/withdrawals`: withdrawals in a state (`requires_review` by default), oldest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WithdrawalQuery {
    /// A [`WithdrawalStatus`] name; the route judges it (422 `invalid_status`).
    pub status: Option<String>,
    pub account_id: Option<Uuid>,
    /// Why it waits in review: `dead_letter[:<category>]`, `reconciliation[:<result>]` or
    /// `unknown` (`ops::types::ReasonFilter`); the route judges it (422 `invalid_reason`).
    #[serde(default)]
    pub reason: Option<String>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

/// `GET /ops/v1/dead-letters`: the triage filters, the open/closed state, paging.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DeadLetterQuery {
    pub queue: Option<String>,
    pub job_type: Option<String>,
    pub error_code: Option<String>,
    pub category: Option<String>,
    pub failed_after: Option<DateTime<Utc>>,
    pub failed_before: Option<DateTime<Utc>>,
    /// `open` (default), `closed` or `all`.
    pub state: Option<String>,
    /// `newest_first` (default) or `oldest_first` (what waited longest; a cursor continues in
    /// the order it was read in).
    pub order: Option<String>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

/// `GET /ops/v1/dead-letters/export`: every dead letter (open and closed) that failed before
/// `before`, oldest first, with its handling events; paged like the list.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DeadLetterExportQuery {
    pub before: Option<DateTime<Utc>>,
    pub category: Option<String>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

/// `GET /ops/v1/replays`: runs newest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReplayQuery {
    /// `awaiting_approval`, `running`, `paused`, `completed` or `cancelled`.
    pub status: Option<String>,
    pub limit: Option<i64>,
}

/// `GET /ops/v1/audit`: newest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AuditQuery {
    pub operator_id: Option<Uuid>,
    pub action: Option<String>,
    pub target_id: Option<String>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}
