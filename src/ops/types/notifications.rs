//! Customer notifications as operators read them (SPEC §17, issue item 5): every account's
//! webhook endpoints with their health, the notifications (one event to one endpoint) with what
//! each receiver answered, and an operator's redelivery.
//!
//! Endpoints and events carry their customer-facing wire ids (`we_…`, `evt_…`), so an operator
//! and an integrator name them alike. A notification has no wire form: its id is a plain UUID
//! (customers never see it).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::domain::{DeliveryResult, EndpointStatus, EventType, NotificationStatus};

/// `GET /ops/v1/webhook-endpoints`: every account's endpoints, deleted ones too, newest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WebhookEndpointQuery {
    pub limit: Option<i64>,
}

/// `GET /ops/v1/notifications`: newest first; `endpoint` a `we_…` id (422 `invalid_endpoint`
/// otherwise), `status` a [`NotificationStatus`] name (422 `invalid_status` otherwise).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NotificationQuery {
    pub endpoint: Option<String>,
    pub status: Option<String>,
    pub limit: Option<i64>,
}

/// How many of an endpoint's notifications stand in each state: one field per
/// [`NotificationStatus`], zero when none does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotificationCounts {
    pub pending: i64,
    pub delivered: i64,
    pub undeliverable: i64,
    pub gone: i64,
    pub skipped: i64,
}

impl NotificationCounts {
    /// The count of `status`.
    pub fn of(&self, status: NotificationStatus) -> i64 {
        match status {
            NotificationStatus::Pending => self.pending,
            NotificationStatus::Delivered => self.delivered,
            NotificationStatus::Undeliverable => self.undeliverable,
            NotificationStatus::Gone => self.gone,
            NotificationStatus::Skipped => self.skipped,
        }
    }

    /// Adds `n` to the count of `status`.
    pub fn add(&mut self, status: NotificationStatus, n: i64) {
        let slot = match status {
            NotificationStatus::Pending => &mut self.pending,
            NotificationStatus::Delivered => &mut self.delivered,
            NotificationStatus::Undeliverable => &mut self.undeliverable,
            NotificationStatus::Gone => &mut self.gone,
            NotificationStatus::Skipped => &mut self.skipped,
        };
        *slot += n;
    }
}

/// One webhook endpoint with its health. Never its secrets.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WebhookEndpointView {
    /// `we_…`, as its customer sees it.
    pub id: String,
    pub account_id: Uuid,
    /// As registered, redacted for display (a credential in its query string is not shown).
    pub url: String,
    /// The event types it subscribes to.
    pub events: Vec<EventType>,
    pub status: EndpointStatus,
    pub disabled_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Since when every delivery to it failed (none while deliveries succeed).
    pub failing_since: Option<DateTime<Utc>>,
    /// Its notifications by status.
    pub notifications: NotificationCounts,
}

/// One event's delivery to one endpoint, and where it stands.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NotificationView {
    /// A plain UUID: notifications have no wire form (`withdrawals notifications show <id>`).
    pub id: Uuid,
    pub account_id: Uuid,
    /// `we_…`.
    pub endpoint_id: String,
    /// `evt_…`: the `id` the receiver gets in the body.
    pub event_id: String,
    pub event_type: EventType,
    pub withdrawal_id: Uuid,
    pub status: NotificationStatus,
    /// Attempts so far (a redelivery continues the count).
    pub attempts: i64,
    /// The HTTP status of the last answer; none when the last attempt got no answer.
    pub last_status_code: Option<i32>,
    /// What went wrong last (redacted), none after a delivery.
    pub last_error: Option<String>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// One delivery attempt, as the receiver answered it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeliveryAttemptView {
    pub attempt: i64,
    pub result: DeliveryResult,
    pub status_code: Option<i32>,
    pub error: Option<String>,
    pub duration_ms: i64,
    pub at: DateTime<Utc>,
}

/// `GET /ops/v1/notifications/{id}`: the notification, its endpoint, the event exactly as it is
/// sent (`{id, type, created_at, data}`) and every attempt, first first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NotificationDetail {
    pub notification: NotificationView,
    pub endpoint: WebhookEndpointView,
    pub event: Value,
    pub attempts: Vec<DeliveryAttemptView>,
}

/// `POST /ops/v1/notifications/{id}/redeliver` → 202: the notification, pending again, and the
/// delivery job that will send it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Redelivered {
    pub notification: NotificationView,
    pub job_id: Uuid,
}
