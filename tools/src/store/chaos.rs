//! Statements only `withdrawals-tools chaos` sends, beyond the library's `storage::verify`: what
//! each provider's webhook events came to (SPEC §15, §16; every event is stored under the provider
//! whose route took it) with the state of the job deciding each, which channel took each
//! withdrawal's final decision and which provider's answer it rested on, and where each attempt
//! went and which withdrawals moved to another provider (SPEC §16). Read-only, after (or while
//! waiting for) convergence; nothing here writes.

use sqlx::types::Json;
use uuid::Uuid;

use withdrawals::domain::{AttemptResult, JobStatus, SideEffect, WebhookResult, WithdrawalStatus};
use withdrawals::storage::{Db, DbTime, Result};
use withdrawals::with_read_conn;

/// Provider `provider`'s stored events by type and result (`None` while undecided): the report's
/// counts.
pub async fn webhook_results(db: &Db, provider: &str) -> Result<Vec<(String, Option<WebhookResult>, i64)>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, (String, Option<WebhookResult>, i64)>(
            "SELECT event_type, result, COUNT(*) FROM webhook_events WHERE provider = $1 \
             GROUP BY event_type, result ORDER BY event_type, result",
        )
        .bind(provider)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// One stored event, with the state of the job that decides it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredEvent {
    /// The provider whose route took it.
    pub provider: String,
    /// The provider's event id (unique per provider only).
    pub event_id: String,
    pub event_type: String,
    pub transfer_id: Option<String>,
    pub withdrawal_id: Option<Uuid>,
    pub result: Option<WebhookResult>,
    pub detail: Option<String>,
    /// None when the event has no job, or its job is gone.
    pub job_status: Option<JobStatus>,
}

impl StoredEvent {
    /// Its job may still decide it.
    pub fn job_live(&self) -> bool {
        matches!(self.job_status, Some(JobStatus::Scheduled | JobStatus::Running))
    }
}

pub async fn webhook_events(db: &Db) -> Result<Vec<StoredEvent>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, StoredEvent>(
            "SELECT e.provider, e.event_id, e.event_type, e.transfer_id, e.withdrawal_id, e.result, e.detail, \
                    j.status AS job_status \
             FROM webhook_events e LEFT JOIN jobs j ON j.id = e.job_id \
             ORDER BY e.received_at, e.id",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Undecided events whose job is scheduled or running: what the run still waits for.
pub async fn undecided_with_live_job(db: &Db) -> Result<i64> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM webhook_events e JOIN jobs j ON j.id = e.job_id \
             WHERE e.result IS NULL AND j.status IN ('scheduled', 'running')",
        )
        .fetch_one(&mut *conn)
        .await?
    }))
}

/// What the service kept of each event besides its decision: the headers as received, the raw
/// body, the detail and the provider's record. Scanned for the signing secret.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredEventText {
    pub provider: String,
    pub event_id: String,
    pub headers: Json<serde_json::Value>,
    pub body: Vec<u8>,
    pub detail: Option<String>,
    pub provider_record: Option<Json<serde_json::Value>>,
}

pub async fn webhook_event_texts(db: &Db) -> Result<Vec<StoredEventText>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, StoredEventText>(
            "SELECT provider, event_id, headers, body, detail, provider_record FROM webhook_events \
             ORDER BY received_at, id",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// A move of a withdrawal into `completed` or `failed`, and who made it (`actor` as stored:
/// `webhook`, `reconciliation`, `settlement`, `worker:<id>`, `operator:<id>`, …), with the
/// evidence it rested on.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Decision {
    pub withdrawal_id: Uuid,
    pub to_status: WithdrawalStatus,
    pub actor: String,
    pub evidence: Option<Json<serde_json::Value>>,
}

impl Decision {
    /// The channel the decision came through: the actor without its instance.
    pub fn channel(&self) -> &str {
        self.actor.split(':').next().unwrap_or(&self.actor)
    }

    /// The provider whose answer the decision rested on, as its evidence names it (`None`: no
    /// evidence, or evidence from before providers were named).
    pub fn provider(&self) -> Option<&str> {
        self.evidence.as_ref().and_then(|e| e.0["provider"].as_str())
    }
}

pub async fn final_decisions(db: &Db) -> Result<Vec<Decision>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, Decision>(
            "SELECT withdrawal_id, to_status, actor, evidence FROM withdrawal_transitions \
             WHERE to_status IN ('completed', 'failed') ORDER BY at, id",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// One provider attempt, as the two-provider checks read it (SPEC §16): where it went and what
/// came of it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ProviderAttempt {
    pub withdrawal_id: Uuid,
    pub attempt_no: i64,
    pub provider: String,
    pub started_at: DbTime,
    pub outcome: Option<AttemptResult>,
    pub side_effect: SideEffect,
}

/// Every attempt, by withdrawal, oldest first.
pub async fn provider_attempts(db: &Db) -> Result<Vec<ProviderAttempt>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ProviderAttempt>(
            "SELECT withdrawal_id, attempt_no, provider, started_at, outcome, side_effect FROM provider_attempts \
             ORDER BY withdrawal_id, attempt_no",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// A recorded move to the next provider: a `processing` → `processing` entry of the transition
/// log whose reason names both providers, with its evidence (`source: failover`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct FailoverEntry {
    pub withdrawal_id: Uuid,
    pub reason: String,
    pub evidence: Option<Json<serde_json::Value>>,
    pub at: DbTime,
}

const MOVE: &str = "from_status = 'processing' AND to_status = 'processing' AND reason LIKE 'failover from %'";

pub async fn failover_entries(db: &Db) -> Result<Vec<FailoverEntry>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, FailoverEntry>(&format!(
            "SELECT withdrawal_id, reason, evidence, at FROM withdrawal_transitions WHERE {MOVE} ORDER BY at, id"
        ))
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// One entry of a transition log, as far as its order goes.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LogEntry {
    pub withdrawal_id: Uuid,
    pub from_status: Option<WithdrawalStatus>,
    pub to_status: WithdrawalStatus,
    pub reason: String,
}

/// The whole transition log of every withdrawal that moved, by withdrawal, in the log's order
/// (`at`, then id).
pub async fn logs_of_moved(db: &Db) -> Result<Vec<LogEntry>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, LogEntry>(&format!(
            "SELECT withdrawal_id, from_status, to_status, reason FROM withdrawal_transitions \
             WHERE withdrawal_id IN (SELECT withdrawal_id FROM withdrawal_transitions WHERE {MOVE}) \
             ORDER BY withdrawal_id, at, id"
        ))
        .fetch_all(&mut *conn)
        .await?
    }))
}
