//! Dead letters (SPEC §8.2): envelopes, their handling events, triage groups.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::domain::{Category, JobStatus, LetterEvent, LetterState, SideEffect};

/// One dead-letter envelope, with its handling state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterView {
    pub id: Uuid,
    pub job_id: Uuid,
    pub queue: String,
    pub job_type: String,
    pub payload_version: i64,
    pub payload: Option<Value>,
    /// The bytes of a payload that did not parse, as text.
    pub raw_payload: Option<String>,
    pub attempts: i64,
    pub first_attempt_at: Option<DateTime<Utc>>,
    pub failed_at: DateTime<Utc>,
    pub error_code: String,
    pub error_class: String,
    pub error_message: String,
    pub stack: Option<String>,
    pub worker_host: String,
    pub worker_version: String,
    pub correlation_id: String,
    pub idempotency_key: Option<String>,
    pub withdrawal_id: Option<Uuid>,
    pub side_effect_state: SideEffect,
    pub category: Category,
    pub owner: String,
    pub runbook: String,
    /// The provider the withdrawal's latest attempt went to (SPEC §16), if any.
    #[serde(default)]
    pub provider: Option<String>,
    pub state: LetterState,
    pub closed_at: Option<DateTime<Utc>>,
    pub age_seconds: i64,
    /// What happened to it since (shown on one envelope, not in lists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<DeadLetterEventView>>,
}

impl DeadLetterView {
    pub fn is_open(&self) -> bool {
        self.state == LetterState::Open
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterEventView {
    pub action: LetterEvent,
    pub actor: String,
    pub reason: String,
    pub details: Option<Value>,
    pub at: DateTime<Utc>,
    /// A replay's outcome: the status of the job it released (`null` when that job is gone);
    /// absent on events that released no job.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub replay_job_status: Option<Option<JobStatus>>,
}

/// A field that is present, even as `null`, is `Some`: serde's default would read `null` as
/// absent, and the answer would lose the difference when it is written again.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// Triage step one: open dead letters by category and error code.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterGroup {
    pub category: Category,
    pub error_code: String,
    pub open: i64,
    pub oldest_open_at: Option<DateTime<Utc>>,
    pub oldest_open_age_seconds: Option<i64>,
}

/// A closed dead letter.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Closed {
    pub id: Uuid,
    pub state: LetterState,
    pub closed_at: DateTime<Utc>,
}

/// The triage filters of `GET /ops/v1/dead-letters` (and of a replay selection).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectionFilter {
    pub queue: Option<String>,
    pub job_type: Option<String>,
    pub error_code: Option<String>,
    pub category: Option<String>,
    pub failed_after: Option<DateTime<Utc>>,
    pub failed_before: Option<DateTime<Utc>>,
}
