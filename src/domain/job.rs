//! The job kinds, their queues and their versioned payloads (SPEC §5): the names and shapes every
//! layer shares — the storage layer enqueues a withdrawal's first submit job, the metrics name
//! the queues, the worker runs them. Pure data; running and enqueueing live in `jobs` and
//! `storage::jobs`.

use serde::{Deserialize, Serialize};

use super::{AccountId, JobId, ReconciliationId, WithdrawalId};
use crate::text_enum;

text_enum! {
    /// Where a job stands in the jobs table.
    pub enum JobStatus("job status", 4) {
        /// Waiting for its `run_at`, or due.
        Scheduled = "scheduled",
        /// Leased to a worker.
        Running = "running",
        Succeeded = "succeeded",
        /// Dead-lettered: no more automatic runs.
        Dead = "dead",
    }
}

/// Where a job lives: its account (its withdrawal's, or [`AccountId::SYSTEM`]) and its id, the
/// pair it is keyed by (README "Scaling"). Every write to a claimed job names both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct JobKey {
    pub account: AccountId,
    pub id: JobId,
}

impl std::fmt::Display for JobKey {
    /// The job id (what logs and people call a job by).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.id.fmt(f)
    }
}

impl JobStatus {
    /// Scheduled or running: the job may still run.
    pub fn is_live(self) -> bool {
        matches!(self, JobStatus::Scheduled | JobStatus::Running)
    }
}

text_enum! {
    /// The queues of the built-in job kinds. The `queue` column itself stays open text: a worker
    /// may be given an extension queue (`Worker::with_handler`, used by the bench and the tests).
    pub enum Queue("queue", 4) {
        /// Carries payouts to the provider.
        Payouts = "payouts",
        /// Asks the provider what happened (SPEC §7).
        Reconciliation = "reconciliation",
        /// The daily settlement import (SPEC §14.1).
        Settlement = "settlement",
        /// Delivers customer notifications (SPEC §17): its own queue and concurrency, so a dead
        /// endpoint never takes a payout's slot.
        Notifications = "notifications",
    }
}

text_enum! {
    /// The built-in job kinds. The worker dispatches over them exhaustively; a stored kind that is
    /// none of these (and no extension handler's) is poison.
    pub enum JobKind("job kind", 5) {
        /// Sends a withdrawal to the payout provider ([`SubmitPayout`]).
        SubmitPayout = "submit_payout",
        /// Looks a payout up at the provider by its operation key ([`ReconcilePayout`]).
        ReconcilePayout = "reconcile_payout",
        /// Fetches, imports and matches a day's settlement report ([`ImportSettlement`]).
        ImportSettlement = "import_settlement",
        /// Decides on a provider event by the provider's current record ([`ApplyWebhookEvent`]).
        ApplyWebhookEvent = "apply_webhook_event",
        /// Delivers one event to one endpoint ([`DeliverNotification`]).
        DeliverNotification = "deliver_notification",
    }
}

impl Queue {
    /// Where an operator may send a replayed dead letter (SPEC §8), and the queues the overview
    /// shows.
    pub const REPLAY_DESTINATIONS: [Queue; 3] = [Queue::Payouts, Queue::Reconciliation, Queue::Notifications];
}

impl JobKind {
    /// The queue a job of this kind runs on.
    pub fn queue(self) -> Queue {
        match self {
            JobKind::SubmitPayout => Queue::Payouts,
            JobKind::ReconcilePayout => Queue::Reconciliation,
            JobKind::ImportSettlement => Queue::Settlement,
            JobKind::ApplyWebhookEvent => Queue::Reconciliation,
            JobKind::DeliverNotification => Queue::Notifications,
        }
    }

    /// The payload version its handler runs today.
    pub fn current_version(self) -> i64 {
        match self {
            JobKind::SubmitPayout => SubmitPayout::VERSION,
            JobKind::ReconcilePayout => ReconcilePayout::VERSION,
            JobKind::ImportSettlement => ImportSettlement::VERSION,
            JobKind::ApplyWebhookEvent => ApplyWebhookEvent::VERSION,
            JobKind::DeliverNotification => DeliverNotification::VERSION,
        }
    }
}

/// What a job to enqueue is: a built-in kind on a built-in queue (its own, [`JobKind::queue`],
/// unless a replay routes it to another), or an extension kind on its own queue, run by a handler
/// plugged into the worker (the bench's no-op, the tests').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobType {
    Builtin { kind: JobKind, queue: Queue },
    Extension { queue: &'static str, kind: &'static str },
}

impl JobType {
    pub fn queue(self) -> &'static str {
        match self {
            JobType::Builtin { queue, .. } => queue.as_str(),
            JobType::Extension { queue, .. } => queue,
        }
    }

    pub fn kind(self) -> &'static str {
        match self {
            JobType::Builtin { kind, .. } => kind.as_str(),
            JobType::Extension { kind, .. } => kind,
        }
    }
}

impl From<JobKind> for JobType {
    fn from(kind: JobKind) -> Self {
        JobType::Builtin { kind, queue: kind.queue() }
    }
}

/// Payload of [`JobKind::SubmitPayout`], version [`SubmitPayout::VERSION`] (2). Version 1 had no
/// `operation_key`; `jobs::payload` upgrades it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitPayout {
    pub withdrawal_id: WithdrawalId,
    /// The provider idempotency key, explicit since version 2. Always the withdrawal id.
    pub operation_key: String,
    /// Set on a controlled retry: the reconciliation result that proved the provider never
    /// executed the previous attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciliation_result_id: Option<ReconciliationId>,
}

impl SubmitPayout {
    pub const VERSION: i64 = 2;

    pub fn new(withdrawal_id: WithdrawalId, reconciliation_result_id: Option<ReconciliationId>) -> Self {
        Self { withdrawal_id, operation_key: withdrawal_id.to_string(), reconciliation_result_id }
    }
}

/// Payload of [`JobKind::ReconcilePayout`], version [`ReconcilePayout::VERSION`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcilePayout {
    pub withdrawal_id: WithdrawalId,
    /// Why reconciliation is needed: `unknown_outcome`, `unfinished_attempt`, `pending_transfer`.
    pub reason: String,
}

impl ReconcilePayout {
    pub const VERSION: i64 = 1;
}

/// Payload of [`JobKind::ImportSettlement`], version [`ImportSettlement::VERSION`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportSettlement {
    /// The report's day (UTC).
    pub date: chrono::NaiveDate,
    /// v2: the operator's import (`settlement_imports`) whose stored report this job imports;
    /// none for the daily job, which fetches the day's report from the provider.
    #[serde(default)]
    pub import_id: Option<uuid::Uuid>,
    /// The provider whose report the daily job fetches (SPEC §16); none for `default` (the
    /// one-provider case, whose payloads stay as they were) and in payloads stored before
    /// providers were named, which fetch from `default`, else the primary provider. A stored
    /// import's row names its own provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

impl ImportSettlement {
    pub const VERSION: i64 = 2;
}

/// Payload of [`JobKind::ApplyWebhookEvent`], version [`ApplyWebhookEvent::VERSION`]: the stored
/// event to decide on (SPEC §15).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyWebhookEvent {
    pub event: super::WebhookEventId,
}

impl ApplyWebhookEvent {
    pub const VERSION: i64 = 1;
}

/// Payload of [`JobKind::DeliverNotification`], version [`DeliverNotification::VERSION`]: one
/// event's delivery to one endpoint (SPEC §17), the notification row that says which.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliverNotification {
    pub notification: super::NotificationId,
}

impl DeliverNotification {
    pub const VERSION: i64 = 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_statuses_round_trip_through_their_names() {
        crate::assert_text_enum_round_trips!(JobStatus);
        crate::assert_text_enum_round_trips!(Queue);
        crate::assert_text_enum_round_trips!(JobKind);
    }
}
