//! The provider's events as operators read them (SPEC §15): what each came to, on what record.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// `GET /ops/v1/webhook-events`: newest first; `result` is one of the results, or `pending` for
/// events not decided yet; `type` an event type; `provider` the provider that sent them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WebhookEventQuery {
    pub result: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub provider: Option<String>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

/// One stored provider event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WebhookEventView {
    /// Our id (`withdrawals webhooks show <id>`).
    pub id: Uuid,
    /// The provider that sent it (the route it came to).
    #[serde(default)]
    pub provider: String,
    /// The provider's event id (unique per provider).
    pub event_id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub transfer_id: Option<String>,
    pub withdrawal_id: Option<Uuid>,
    pub account_id: Option<Uuid>,
    /// `applied`, `no_op`, `mismatch`, `unknown_transfer`, `unverified`, or `pending` while its
    /// job has not decided.
    pub result: String,
    pub detail: Option<String>,
    pub signed_at: DateTime<Utc>,
    pub received_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
    /// The provider's record the decision rested on (shown by `show`).
    #[serde(default)]
    pub provider_record: Option<Value>,
    /// The event's body as received and the headers kept with it (shown by `show`).
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub headers: Option<Value>,
}
