//! Replays (SPEC §8.3): starting a run (or a dry run), its controls, progress and items.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::SelectionFilter;
use crate::domain::{Category, ReplayItemStatus, ReplayStatus, SideEffect};

/// `POST /ops/v1/replays`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartReplay {
    pub reason: String,
    #[serde(default)]
    pub dead_letter_ids: Option<Vec<Uuid>>,
    #[serde(default)]
    pub filter: Option<SelectionFilter>,
    pub expected_payload_version: i64,
    pub destination_queue: String,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default)]
    pub rate_per_second: Option<i64>,
    #[serde(default)]
    pub max_concurrency: Option<i64>,
    #[serde(default)]
    pub auto_pause_threshold: Option<i64>,
    /// The `selection_digest` of the dry run the operator confirmed: if the selection is no
    /// longer exactly those dead letters, the start is refused (409 `selection_changed`).
    #[serde(default)]
    pub expected_selection_digest: Option<String>,
}

/// What a replay start answered: a dry run's report (200) or the new run (201).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Started {
    DryRun(DryRun),
    Run(Box<ReplayRunView>),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DryRun {
    pub dry_run: bool,
    pub count: i64,
    pub sample: Vec<SampleLetter>,
    pub needs_approval: bool,
    pub payload_version_mismatches: i64,
    pub selection_digest: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SampleLetter {
    pub dead_letter_id: Uuid,
    pub withdrawal_id: Option<Uuid>,
    pub category: Category,
    pub error_code: String,
    pub payload_version: i64,
    pub side_effect_state: SideEffect,
}

crate::text_enum! {
    /// `POST /ops/v1/replays/{id}/{pause|resume|cancel|approve}` (the path segment).
    pub enum ReplayControl("replay control", 4) {
        Pause = "pause",
        Resume = "resume",
        Cancel = "cancel",
        /// A second operator (admin) lets a run over the threshold start.
        Approve = "approve",
    }
}

/// A replay run, with its progress where it was asked for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayRunView {
    pub id: Uuid,
    pub status: ReplayStatus,
    pub reason: String,
    pub selection: Value,
    pub expected_payload_version: i64,
    pub destination_queue: crate::domain::job::Queue,
    pub total: i64,
    pub rate_per_second: i64,
    pub max_concurrency: i64,
    pub auto_pause_threshold: i64,
    pub started_by: Uuid,
    /// The starter's name.
    #[serde(default)]
    pub started_by_name: String,
    pub approved_by: Option<Uuid>,
    #[serde(default)]
    pub approved_by_name: Option<String>,
    pub paused_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ReplayProgress>,
    /// Each dead letter's fate (on one run, not in lists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Vec<ReplayItemView>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayProgress {
    pub total: i64,
    pub pending: i64,
    pub released: i64,
    pub reconciling: i64,
    pub skipped: i64,
    pub cancelled: i64,
    pub in_flight: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub new_dead_letters: i64,
    pub released_per_second: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayItemView {
    pub dead_letter_id: Uuid,
    pub status: ReplayItemStatus,
    pub detail: Option<String>,
    pub job_id: Option<Uuid>,
}
