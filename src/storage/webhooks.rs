//! The providers' events as received (SPEC §15, §16): stored once per provider and provider event
//! id (ids are each provider's own: two providers may send one), with the raw body and headers, in
//! the transaction that enqueues the job deciding on it; then what the event came to
//! ([`decide`]), written once.

use serde_json::Value;
use sqlx::types::Json;

use super::{Db, DbTime, Result, Tx};
use crate::domain::{AccountId, JobId, WebhookEventId, WebhookResult, WithdrawalId};
use crate::{with_conn, with_read_conn};

/// An event as stored (its raw body aside: [`body`]).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventRow {
    pub id: WebhookEventId,
    /// The provider that sent it (the route's: the bare `/webhooks/provider` is `default`'s).
    pub provider: String,
    /// The provider's event id.
    pub event_id: String,
    pub event_type: String,
    pub transfer_id: Option<String>,
    /// The operation key the event's transfer names (our withdrawal id, if it is one of ours).
    pub operation_key: Option<String>,
    /// The signature's timestamp.
    pub signed_at: DbTime,
    pub received_at: DbTime,
    /// The request's headers as received (credentials-bearing ones removed by the caller).
    pub headers: Json<Value>,
    /// The account the key resolved to at receipt, if any.
    pub account_id: Option<AccountId>,
    pub withdrawal_id: Option<WithdrawalId>,
    /// The job that decides on it; none for a type the service does not handle.
    pub job_id: Option<JobId>,
    /// What the event came to; none while its job has not decided.
    pub result: Option<WebhookResult>,
    pub detail: Option<String>,
    /// The provider's record the decision rested on (the evidence).
    pub provider_record: Option<Json<Value>>,
    pub decided_at: Option<DbTime>,
    pub correlation_id: String,
}

const COLUMNS: &str =
    "id, provider, event_id, event_type, transfer_id, operation_key, signed_at, received_at, headers, \
                       account_id, withdrawal_id, job_id, result, detail, provider_record, decided_at, correlation_id";

/// Stores a received event with its raw body, unless its provider stored that event id already:
/// true when this call stored it.
pub async fn insert(tx: &mut Tx, row: &EventRow, body: &[u8]) -> Result<bool> {
    let inserted = with_conn!(tx, |conn| {
        sqlx::query(&format!(
            "INSERT INTO webhook_events ({COLUMNS}, body)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
             ON CONFLICT (provider, event_id) DO NOTHING"
        ))
        .bind(row.id)
        .bind(&row.provider)
        .bind(&row.event_id)
        .bind(&row.event_type)
        .bind(&row.transfer_id)
        .bind(&row.operation_key)
        .bind(row.signed_at)
        .bind(row.received_at)
        .bind(&row.headers)
        .bind(row.account_id)
        .bind(row.withdrawal_id)
        .bind(row.job_id)
        .bind(row.result)
        .bind(&row.detail)
        .bind(&row.provider_record)
        .bind(row.decided_at)
        .bind(&row.correlation_id)
        .bind(body)
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    Ok(inserted == 1)
}

/// One event.
pub async fn get(db: &Db, id: WebhookEventId) -> Result<Option<EventRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, EventRow>(&format!("SELECT {COLUMNS} FROM webhook_events WHERE id = $1"))
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?
    }))
}

/// The event `provider` sent under its event id `event_id`.
pub async fn by_event_id(db: &Db, provider: &str, event_id: &str) -> Result<Option<EventRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, EventRow>(&format!(
            "SELECT {COLUMNS} FROM webhook_events WHERE provider = $1 AND event_id = $2"
        ))
        .bind(provider)
        .bind(event_id)
        .fetch_optional(&mut *conn)
        .await?
    }))
}

/// The raw body an event arrived with, byte for byte.
pub async fn body(db: &Db, id: WebhookEventId) -> Result<Option<Vec<u8>>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_scalar::<_, Vec<u8>>("SELECT body FROM webhook_events WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?
    }))
}

/// What a decided event came to.
#[derive(Debug, Clone)]
pub struct Decision<'a> {
    pub result: WebhookResult,
    pub detail: &'a str,
    pub provider_record: Option<&'a Value>,
    pub account_id: Option<AccountId>,
    pub withdrawal_id: Option<WithdrawalId>,
}

/// Records what the event came to, once: false when it was decided before (a job that ran
/// twice), and then the caller's transaction must change nothing else either.
pub async fn decide(tx: &mut Tx, id: WebhookEventId, d: &Decision<'_>) -> Result<bool> {
    let updated = with_conn!(tx, |conn| {
        sqlx::query(
            "UPDATE webhook_events SET result = $2, detail = $3, provider_record = $4,
                    account_id = COALESCE($5, account_id), withdrawal_id = COALESCE($6, withdrawal_id),
                    decided_at = $7
             WHERE id = $1 AND result IS NULL",
        )
        .bind(id)
        .bind(d.result)
        .bind(crate::redact::text(d.detail))
        .bind(d.provider_record.map(Json))
        .bind(d.account_id)
        .bind(d.withdrawal_id)
        .bind(DbTime::now())
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    Ok(updated == 1)
}

/// Which events to list, newest first.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// `Some(None)`: events not decided yet.
    pub result: Option<Option<WebhookResult>>,
    pub event_type: Option<String>,
    /// Only this provider's.
    pub provider: Option<String>,
    /// Events received before this one (the cursor).
    pub before: Option<(DbTime, WebhookEventId)>,
    pub limit: i64,
}

/// Events, newest first, by the filter. Each condition is written only when asked for, so the
/// result filter reads `webhook_events_by_result` on both backends.
pub async fn list(db: &Db, f: &EventFilter) -> Result<Vec<EventRow>> {
    let mut conditions = Vec::new();
    match f.result {
        Some(None) => conditions.push("result IS NULL AND $1 IS NULL"),
        Some(Some(_)) => conditions.push("result = $1"),
        None => conditions.push("$1 IS NULL"),
    }
    conditions.push(if f.event_type.is_some() { "event_type = $2" } else { "$2 IS NULL" });
    conditions.push(if f.before.is_some() { "(received_at, id) < ($3, $4)" } else { "$3 IS NULL AND $4 IS NULL" });
    conditions.push(if f.provider.is_some() { "provider = $6" } else { "$6 IS NULL" });
    let result = f.result.flatten();
    let (before_at, before_id) = f.before.map_or((None, None), |(at, id)| (Some(at), Some(id)));
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, EventRow>(&format!(
            "SELECT {COLUMNS} FROM webhook_events WHERE {} ORDER BY received_at DESC, id DESC LIMIT $5",
            conditions.join(" AND ")
        ))
        .bind(result)
        .bind(&f.event_type)
        .bind(before_at)
        .bind(before_id)
        .bind(f.limit)
        .bind(&f.provider)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// When the newest event of a type the service decides on (one with a job) arrived, from any
/// provider: webhooks are healthy while it is recent (SPEC §15). A provider sending only types we
/// ignore is not.
pub async fn last_received_at(db: &Db) -> Result<Option<DbTime>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_scalar::<_, Option<DbTime>>("SELECT MAX(received_at) FROM webhook_events WHERE job_id IS NOT NULL")
            .fetch_one(&mut *conn)
            .await?
    }))
}

/// When the newest event of a type the service decides on arrived from `provider` (whether that
/// provider's events are arriving: reconciliation's pace, SPEC §15, §16).
pub async fn last_received_from(db: &Db, provider: &str) -> Result<Option<DbTime>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_scalar::<_, Option<DbTime>>(
            "SELECT MAX(received_at) FROM webhook_events WHERE job_id IS NOT NULL AND provider = $1",
        )
        .bind(provider)
        .fetch_one(&mut *conn)
        .await?
    }))
}

/// When the newest event of a type the service decides on arrived, for each provider that sent
/// one (the `webhook_last_received_timestamp_seconds{provider}` gauge, read every refresh). A
/// skip scan of `webhook_events_handled_by_provider`: one index probe for each provider and one for
/// its newest event, however many events are stored — a `GROUP BY` would read them all.
pub async fn last_received_by_provider(db: &Db) -> Result<Vec<(String, DbTime)>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, (String, DbTime)>(
            "WITH RECURSIVE senders (provider) AS (
                 SELECT MIN(provider) FROM webhook_events WHERE job_id IS NOT NULL
                 UNION ALL
                 SELECT (SELECT MIN(w.provider) FROM webhook_events w
                         WHERE w.job_id IS NOT NULL AND w.provider > senders.provider)
                 FROM senders WHERE senders.provider IS NOT NULL
             )
             SELECT provider, (SELECT MAX(w.received_at) FROM webhook_events w
                               WHERE w.job_id IS NOT NULL AND w.provider = senders.provider)
             FROM senders WHERE provider IS NOT NULL ORDER BY provider",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}
