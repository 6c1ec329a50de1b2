//! Customer notifications (SPEC §17): the events outbox, written in the transaction of the change
//! it announces; the events API's pages; integrators' endpoints with their sealed secrets; the
//! dispatcher's fan-out of each event into one notification (and one delivery job) per
//! subscribed endpoint; and each delivery attempt with what the receiver answered.

use sqlx::types::Json;
use uuid::Uuid;

use super::batch::{Arg, Sql, Writes};
use super::jobs::{self, NewJob};
use super::{Db, DbTime, Result, StorageError, Tx};
use crate::domain::job::{DeliverNotification, JobKind};
use crate::domain::view::WithdrawalView;
use crate::domain::{
    AccountId, DeliveryResult, EndpointStatus, EventId, EventType, EventTypes, NotificationId, NotificationStatus,
    WebhookEndpointId, Withdrawal, WithdrawalId,
};
use crate::{with_conn, with_read_conn};

// ---------------------------------------------------------------------------------------------
// The outbox

/// The version an event's withdrawal had: known to the writer, or the row's own, read by the
/// insert (a move settled in a later statement of its transaction than its guard: the guard
/// already bumped the row, which this transaction holds).
#[derive(Debug, Clone, Copy)]
pub enum EventVersion {
    Known(i64),
    Current,
}

/// Adds the event `kind` announcing `after` (the withdrawal as the change leaves it) to `writes`.
pub fn event_in(writes: &mut Writes, kind: EventType, after: &Withdrawal, version: EventVersion, view: WithdrawalView) {
    let data = serde_json::to_value(&view).expect("a withdrawal view serialises");
    let head = Sql::new(
        "INSERT INTO events (id, account_id, withdrawal_id, event_type, data, created_at, withdrawal_version) VALUES (",
    )
    .binds([
        Arg::Uuid(EventId::new().0),
        Arg::Uuid(after.account_id.0),
        Arg::Uuid(after.id.0),
        kind.as_str().into(),
        Arg::Json(data),
        Arg::Time(DbTime::now()),
    ]);
    let sql = match version {
        EventVersion::Known(v) => head.sql(", ").bind(v).sql(")"),
        EventVersion::Current => head
            .sql(", (SELECT version FROM withdrawals WHERE account_id = ")
            .bind(after.account_id.0)
            .sql(" AND id = ")
            .bind(after.id.0)
            .sql("))"),
    };
    writes.push(sql);
}

/// An event as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventRow {
    pub id: EventId,
    pub account_id: AccountId,
    pub withdrawal_id: WithdrawalId,
    pub event_type: String,
    pub withdrawal_version: i64,
    pub data: Json<serde_json::Value>,
    pub created_at: DbTime,
}

impl EventRow {
    pub fn kind(&self) -> Result<EventType> {
        self.event_type.parse().map_err(StorageError::corrupt)
    }

    /// The event on the wire (SPEC §17): `{id, type, created_at, data}`, `data` carrying the
    /// withdrawal's version at the change.
    pub fn to_json(&self) -> serde_json::Value {
        let mut data = self.data.0.clone();
        if let Some(object) = data.as_object_mut() {
            object.insert("version".to_owned(), self.withdrawal_version.into());
        }
        serde_json::json!({
            "id": self.id.wire(),
            "type": self.event_type,
            "created_at": self.created_at.0,
            "data": data,
        })
    }
}

const EVENT_COLUMNS: &str = "id, account_id, withdrawal_id, event_type, withdrawal_version, data, created_at";

/// A page of `account`'s events, oldest first: those after `after`, of `kind` if given, written
/// no later than `visible_until` (younger ones may still have older ones committing beside them).
pub async fn events_page(
    db: &Db,
    account: AccountId,
    kind: Option<EventType>,
    after: Option<EventId>,
    visible_until: DbTime,
    limit: u32,
) -> Result<Vec<EventRow>> {
    let after = after.map_or(Uuid::nil(), |e| e.0);
    let kind = kind.map(EventType::as_str);
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, EventRow>(&format!(
            "SELECT {EVENT_COLUMNS} FROM events
             WHERE account_id = $1 AND id > $2 AND ($3 IS NULL OR event_type = $3) AND created_at <= $4
             ORDER BY id LIMIT $5"
        ))
        .bind(account.0)
        .bind(after)
        .bind(kind)
        .bind(visible_until)
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// One event of `account`.
pub async fn event(db: &Db, account: AccountId, id: EventId) -> Result<Option<EventRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, EventRow>(&format!("SELECT {EVENT_COLUMNS} FROM events WHERE account_id = $1 AND id = $2"))
            .bind(account.0)
            .bind(id.0)
            .fetch_optional(&mut *conn)
            .await?
    }))
}

/// A withdrawal's events, oldest first (tests, operators).
pub async fn events_of(db: &Db, account: AccountId, withdrawal: WithdrawalId) -> Result<Vec<EventRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, EventRow>(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE account_id = $1 AND withdrawal_id = $2 ORDER BY id"
        ))
        .bind(account.0)
        .bind(withdrawal.0)
        .fetch_all(&mut *conn)
        .await?
    }))
}

// ---------------------------------------------------------------------------------------------
// Endpoints

/// An endpoint as stored; its secrets sealed.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EndpointRow {
    pub id: WebhookEndpointId,
    pub account_id: AccountId,
    pub url: String,
    pub event_types: String,
    pub status: EndpointStatus,
    pub disabled_reason: Option<String>,
    pub secret_sealed: Vec<u8>,
    pub previous_secret_sealed: Option<Vec<u8>>,
    pub previous_secret_expires_at: Option<DbTime>,
    pub failing_since: Option<DbTime>,
    pub created_at: DbTime,
    pub updated_at: DbTime,
}

impl EndpointRow {
    pub fn types(&self) -> Result<EventTypes> {
        EventTypes::from_stored(&self.event_types).map_err(StorageError::corrupt)
    }

    /// The sealed secrets a delivery at `now` signs with: the current one, and the previous one
    /// while its rotation overlap lasts.
    pub fn signing_secrets(&self, now: DbTime) -> Vec<&[u8]> {
        let mut secrets = vec![self.secret_sealed.as_slice()];
        if let (Some(previous), Some(until)) = (&self.previous_secret_sealed, self.previous_secret_expires_at) {
            if now < until {
                secrets.push(previous.as_slice());
            }
        }
        secrets
    }
}

const ENDPOINT_COLUMNS: &str = "id, account_id, url, event_types, status, disabled_reason, secret_sealed, \
     previous_secret_sealed, previous_secret_expires_at, failing_since, created_at, updated_at";

/// A new endpoint, enabled.
pub async fn create_endpoint(
    db: &Db,
    id: WebhookEndpointId,
    account: AccountId,
    url: &str,
    types: EventTypes,
    secret_sealed: &[u8],
) -> Result<EndpointRow> {
    let now = DbTime::now();
    let mut tx = db.begin().await?;
    let row = with_conn!(&mut tx, |conn| {
        sqlx::query_as::<_, EndpointRow>(&format!(
            "INSERT INTO webhook_endpoints (id, account_id, url, event_types, status, secret_sealed, created_at, updated_at)
             VALUES ($1, $2, $3, $4, 'enabled', $5, $6, $6) RETURNING {ENDPOINT_COLUMNS}"
        ))
        .bind(id.0)
        .bind(account.0)
        .bind(url)
        .bind(types.to_stored())
        .bind(secret_sealed)
        .bind(now)
        .fetch_one(&mut *conn)
        .await?
    });
    tx.commit().await?;
    Ok(row)
}

/// `account`'s endpoints that were not deleted, oldest first.
pub async fn endpoints_of(db: &Db, account: AccountId) -> Result<Vec<EndpointRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, EndpointRow>(&format!(
            "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE account_id = $1 AND status <> 'deleted' ORDER BY id"
        ))
        .bind(account.0)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// One endpoint of `account` that was not deleted.
pub async fn endpoint(db: &Db, account: AccountId, id: WebhookEndpointId) -> Result<Option<EndpointRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, EndpointRow>(&format!(
            "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE account_id = $1 AND id = $2 AND status <> 'deleted'"
        ))
        .bind(account.0)
        .bind(id.0)
        .fetch_optional(&mut *conn)
        .await?
    }))
}

/// Every endpoint, deleted ones too, newest first (operators).
pub async fn all_endpoints(db: &Db, limit: u32) -> Result<Vec<EndpointRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, EndpointRow>(&format!(
            "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints ORDER BY id DESC LIMIT $1"
        ))
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// One endpoint by id alone, whatever its state (operators, the delivery job).
pub async fn endpoint_by_id(db: &Db, id: WebhookEndpointId) -> Result<Option<EndpointRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, EndpointRow>(&format!("SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE id = $1"))
            .bind(id.0)
            .fetch_optional(&mut *conn)
            .await?
    }))
}

/// Deletes `account`'s endpoint (kept, as `deleted`, for its history): false if it has none.
pub async fn delete_endpoint(db: &Db, account: AccountId, id: WebhookEndpointId) -> Result<bool> {
    let mut tx = db.begin().await?;
    let done = with_conn!(&mut tx, |conn| {
        sqlx::query(
            "UPDATE webhook_endpoints SET status = 'deleted', updated_at = $3
             WHERE account_id = $1 AND id = $2 AND status <> 'deleted'",
        )
        .bind(account.0)
        .bind(id.0)
        .bind(DbTime::now())
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    tx.commit().await?;
    Ok(done == 1)
}

/// Rotates `account`'s endpoint's secret: `sealed` becomes the current one, the current one
/// stays valid until `previous_until`. `None` if it has no such endpoint.
pub async fn rotate_secret(
    db: &Db,
    account: AccountId,
    id: WebhookEndpointId,
    sealed: &[u8],
    previous_until: DbTime,
) -> Result<Option<EndpointRow>> {
    let mut tx = db.begin().await?;
    let row = with_conn!(&mut tx, |conn| {
        sqlx::query_as::<_, EndpointRow>(&format!(
            "UPDATE webhook_endpoints
             SET previous_secret_sealed = secret_sealed, previous_secret_expires_at = $3, secret_sealed = $4,
                 updated_at = $5
             WHERE account_id = $1 AND id = $2 AND status <> 'deleted' RETURNING {ENDPOINT_COLUMNS}"
        ))
        .bind(account.0)
        .bind(id.0)
        .bind(previous_until)
        .bind(sealed)
        .bind(DbTime::now())
        .fetch_optional(&mut *conn)
        .await?
    });
    tx.commit().await?;
    Ok(row)
}

/// How many endpoints are in each state (the `notification_endpoints` gauge).
pub async fn endpoint_counts(db: &Db) -> Result<Vec<(EndpointStatus, i64)>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, (EndpointStatus, i64)>("SELECT status, count(*) FROM webhook_endpoints GROUP BY status")
            .fetch_all(&mut *conn)
            .await?
    }))
}

// ---------------------------------------------------------------------------------------------
// The fan-out

/// Fans out up to `limit` events not yet fanned out, oldest first: for each, one notification
/// and one delivery job per enabled endpoint of its account subscribed to its type; then marks
/// them fanned out. One transaction; on PostgreSQL concurrent dispatchers skip each other's rows.
/// Returns how many events and how many notifications.
pub async fn fan_out(db: &Db, limit: u32) -> Result<(usize, usize)> {
    let mut tx = db.begin().await?;
    // Each backend's spelling of its partial index's predicate, so the index serves the read.
    let (lock, not_fanned_out) = match db {
        Db::Postgres(_) => (" FOR UPDATE SKIP LOCKED", "NOT fanned_out"),
        Db::Sqlite(_) => ("", "fanned_out = 0"),
    };
    let events: Vec<(EventId, AccountId, String)> = with_conn!(&mut tx, |conn| {
        sqlx::query_as(&format!(
            "SELECT id, account_id, event_type FROM events WHERE {not_fanned_out} ORDER BY id LIMIT $1{lock}"
        ))
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await?
    });
    if events.is_empty() {
        return Ok((0, 0));
    }
    let mut accounts: Vec<Uuid> = events.iter().map(|(_, a, _)| a.0).collect();
    accounts.sort();
    accounts.dedup();
    let endpoints = enabled_endpoints_of(&mut tx, &accounts).await?;
    let mut writes = Writes::new();
    let mut notifications = 0;
    let mut taken = Vec::with_capacity(events.len());
    let now = DbTime::now();
    for (event, account, kind) in &events {
        let kind: EventType = kind.parse().map_err(StorageError::corrupt)?;
        let to: Vec<_> = endpoints.iter().filter(|(e, types)| e.1 == *account && types.contains(kind)).collect();
        if notifications > 0 && notifications + to.len() > MAX_NOTIFICATIONS_PER_FAN_OUT {
            // The rest wait for the next batch: one statement binds a bounded number of values.
            break;
        }
        taken.push(event.0);
        for (endpoint, _) in to {
            let id = NotificationId::new();
            writes.push(Sql::row(
                "INSERT INTO notifications (id, account_id, event_id, endpoint_id, created_at, status) VALUES ",
                [Arg::Uuid(id.0), Arg::Uuid(account.0), Arg::Uuid(event.0), Arg::Uuid(endpoint.0 .0), Arg::Time(now)],
                ", 'pending'",
            ));
            jobs::enqueue_in(&mut writes, &delivery_job(*account, id, &event.wire(), now));
            notifications += 1;
        }
    }
    writes.run(&mut tx).await?;
    mark_fanned_out(&mut tx, &taken).await?;
    tx.commit().await?;
    Ok((taken.len(), notifications))
}

/// The most notifications one fan-out transaction makes. Its writes are one PostgreSQL statement
/// ([`Writes`]): every job a data-modifying CTE of its own, counted in one select list (at most
/// 1 664 entries), and 16 bound values per notification and job (at most 65 535).
const MAX_NOTIFICATIONS_PER_FAN_OUT: usize = 1_000;

/// The job delivering notification `id` (of `account`), correlated by its event's wire id.
pub fn delivery_job(account: AccountId, id: NotificationId, event_wire_id: &str, run_at: DbTime) -> NewJob {
    NewJob {
        kind: JobKind::DeliverNotification.into(),
        payload: serde_json::to_vec(&DeliverNotification { notification: id }).expect("payload serialises"),
        payload_version: DeliverNotification::VERSION,
        run_at,
        correlation_id: event_wire_id.to_owned(),
        account_id: account,
        withdrawal_id: None,
    }
}

/// The enabled endpoints of `accounts` with their subscriptions: `((id, account), types)`.
async fn enabled_endpoints_of(
    tx: &mut Tx,
    accounts: &[Uuid],
) -> Result<Vec<((WebhookEndpointId, AccountId), EventTypes)>> {
    let mut found = Vec::new();
    // One query per few hundred accounts: both backends bind a list as one parameter each way.
    for chunk in accounts.chunks(500) {
        let rows: Vec<(WebhookEndpointId, AccountId, String)> = match &mut tx.conn {
            super::TxConn::Postgres(conn) => {
                sqlx::query_as(
                    "SELECT id, account_id, event_types FROM webhook_endpoints
                     WHERE account_id = ANY($1) AND status = 'enabled'",
                )
                .bind(chunk)
                .fetch_all(&mut **conn)
                .await?
            }
            super::TxConn::Sqlite(conn) => {
                let mut builder = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                    "SELECT id, account_id, event_types FROM webhook_endpoints WHERE status = 'enabled' AND account_id IN (",
                );
                let mut list = builder.separated(", ");
                for account in chunk {
                    list.push_bind(*account);
                }
                builder.push(")");
                builder.build_query_as().fetch_all(&mut **conn).await?
            }
        };
        for (id, account, types) in rows {
            found.push(((id, account), EventTypes::from_stored(&types).map_err(StorageError::corrupt)?));
        }
    }
    Ok(found)
}

async fn mark_fanned_out(tx: &mut Tx, ids: &[Uuid]) -> Result<()> {
    match &mut tx.conn {
        super::TxConn::Postgres(conn) => {
            sqlx::query("UPDATE events SET fanned_out = true WHERE id = ANY($1) AND NOT fanned_out")
                .bind(ids)
                .execute(&mut **conn)
                .await?;
        }
        super::TxConn::Sqlite(conn) => {
            for chunk in ids.chunks(500) {
                let mut builder = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
                    "UPDATE events SET fanned_out = 1 WHERE fanned_out = 0 AND id IN (",
                );
                let mut list = builder.separated(", ");
                for id in chunk {
                    list.push_bind(*id);
                }
                builder.push(")");
                builder.build().execute(&mut **conn).await?;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Notifications and their attempts

/// One event's delivery to one endpoint.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NotificationRow {
    pub id: NotificationId,
    pub account_id: AccountId,
    pub event_id: EventId,
    pub endpoint_id: WebhookEndpointId,
    pub status: NotificationStatus,
    pub attempts: i32,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub last_attempt_at: Option<DbTime>,
    pub delivered_at: Option<DbTime>,
    pub created_at: DbTime,
    /// The delivery job last dead-lettered, if one was.
    pub dead_job_id: Option<crate::domain::JobId>,
}

const NOTIFICATION_COLUMNS: &str = "id, account_id, event_id, endpoint_id, status, attempts, last_status_code, \
     last_error, last_attempt_at, delivered_at, created_at, dead_job_id";

/// One notification by id alone.
pub async fn notification(db: &Db, id: NotificationId) -> Result<Option<NotificationRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, NotificationRow>(&format!("SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE id = $1"))
            .bind(id.0)
            .fetch_optional(&mut *conn)
            .await?
    }))
}

/// What a delivery job needs, read in one statement: the notification, its endpoint and its
/// event (the foreign keys keep all three together).
#[derive(Debug, Clone)]
pub struct Delivery {
    pub notification: NotificationRow,
    pub endpoint: EndpointRow,
    pub event: EventRow,
}

/// [`Delivery`] of notification `id`: one read instead of three on the delivery path.
pub async fn delivery(db: &Db, id: NotificationId) -> Result<Option<Delivery>> {
    use sqlx::Row;
    const SQL: &str = "SELECT n.id AS n_id, n.account_id AS n_account_id, n.event_id AS n_event_id, \
        n.endpoint_id AS n_endpoint_id, n.status AS n_status, n.attempts AS n_attempts, \
        n.last_status_code AS n_last_status_code, n.last_error AS n_last_error, \
        n.last_attempt_at AS n_last_attempt_at, n.delivered_at AS n_delivered_at, n.created_at AS n_created_at, \
        n.dead_job_id AS n_dead_job_id, \
        w.url AS w_url, w.event_types AS w_event_types, w.status AS w_status, w.disabled_reason AS w_disabled_reason, \
        w.secret_sealed AS w_secret_sealed, w.previous_secret_sealed AS w_previous_secret_sealed, \
        w.previous_secret_expires_at AS w_previous_secret_expires_at, w.failing_since AS w_failing_since, \
        w.created_at AS w_created_at, w.updated_at AS w_updated_at, \
        e.withdrawal_id AS e_withdrawal_id, e.event_type AS e_event_type, \
        e.withdrawal_version AS e_withdrawal_version, e.data AS e_data, e.created_at AS e_created_at \
        FROM notifications n \
        JOIN webhook_endpoints w ON w.account_id = n.account_id AND w.id = n.endpoint_id \
        JOIN events e ON e.account_id = n.account_id AND e.id = n.event_id \
        WHERE n.id = $1";
    Ok(with_read_conn!(db, |conn| {
        match sqlx::query(SQL).bind(id.0).fetch_optional(&mut *conn).await? {
            None => None,
            Some(row) => {
                let notification = NotificationRow {
                    id: row.try_get("n_id")?,
                    account_id: row.try_get("n_account_id")?,
                    event_id: row.try_get("n_event_id")?,
                    endpoint_id: row.try_get("n_endpoint_id")?,
                    status: row.try_get("n_status")?,
                    attempts: row.try_get("n_attempts")?,
                    last_status_code: row.try_get("n_last_status_code")?,
                    last_error: row.try_get("n_last_error")?,
                    last_attempt_at: row.try_get("n_last_attempt_at")?,
                    delivered_at: row.try_get("n_delivered_at")?,
                    created_at: row.try_get("n_created_at")?,
                    dead_job_id: row.try_get("n_dead_job_id")?,
                };
                let endpoint = EndpointRow {
                    id: notification.endpoint_id,
                    account_id: notification.account_id,
                    url: row.try_get("w_url")?,
                    event_types: row.try_get("w_event_types")?,
                    status: row.try_get("w_status")?,
                    disabled_reason: row.try_get("w_disabled_reason")?,
                    secret_sealed: row.try_get("w_secret_sealed")?,
                    previous_secret_sealed: row.try_get("w_previous_secret_sealed")?,
                    previous_secret_expires_at: row.try_get("w_previous_secret_expires_at")?,
                    failing_since: row.try_get("w_failing_since")?,
                    created_at: row.try_get("w_created_at")?,
                    updated_at: row.try_get("w_updated_at")?,
                };
                let event = EventRow {
                    id: notification.event_id,
                    account_id: notification.account_id,
                    withdrawal_id: row.try_get("e_withdrawal_id")?,
                    event_type: row.try_get("e_event_type")?,
                    withdrawal_version: row.try_get("e_withdrawal_version")?,
                    data: row.try_get("e_data")?,
                    created_at: row.try_get("e_created_at")?,
                };
                Some(Delivery { notification, endpoint, event })
            }
        }
    }))
}

/// Notifications, newest first, of one endpoint and/or in one status (operators).
pub async fn notifications(
    db: &Db,
    endpoint: Option<WebhookEndpointId>,
    status: Option<NotificationStatus>,
    limit: u32,
) -> Result<Vec<NotificationRow>> {
    let endpoint = endpoint.map(|e| e.0);
    let status = status.map(NotificationStatus::as_str);
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, NotificationRow>(&format!(
            "SELECT {NOTIFICATION_COLUMNS} FROM notifications
             WHERE ($1 IS NULL OR endpoint_id = $1) AND ($2 IS NULL OR status = $2)
             ORDER BY created_at DESC, id DESC LIMIT $3"
        ))
        .bind(endpoint)
        .bind(status)
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// One delivery attempt as recorded.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AttemptRow {
    pub attempt: i32,
    pub result: DeliveryResult,
    pub status_code: Option<i32>,
    pub error: Option<String>,
    pub duration_ms: i64,
    pub at: DbTime,
}

/// A notification's attempts, first first.
pub async fn attempts(db: &Db, account: AccountId, id: NotificationId) -> Result<Vec<AttemptRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, AttemptRow>(
            "SELECT attempt, result, status_code, error, duration_ms, at FROM notification_attempts
             WHERE account_id = $1 AND notification_id = $2 ORDER BY attempt",
        )
        .bind(account.0)
        .bind(id.0)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// What one attempt came to.
#[derive(Debug, Clone)]
pub struct Attempted<'a> {
    pub account: AccountId,
    pub notification: NotificationId,
    pub endpoint: WebhookEndpointId,
    /// Whether the endpoint was failing when the delivery read it (a success then clears it).
    pub endpoint_was_failing: bool,
    pub attempt: i32,
    pub result: DeliveryResult,
    pub status_code: Option<u16>,
    pub error: Option<&'a str>,
    pub duration_ms: i64,
    pub at: DbTime,
    /// Where the notification stands after it.
    pub status: NotificationStatus,
}

/// What [`record_attempt`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The notification was still open (`pending` or `undeliverable`) and now stands as the
    /// attempt left it; the endpoint has been failing since then (none after a success).
    Open { failing_since: Option<DbTime> },
    /// Another job settled it first (delivered, gone, skipped: an operator's redelivery runs
    /// beside the retrying job): the attempt is recorded, the notification left as it was.
    Settled,
}

/// Records an attempt and where its notification stands, and the endpoint's health: a success
/// clears its failing streak (writing the endpoint's row only if one ran), a failure starts one
/// (if none runs). A notification another job settled meanwhile is not moved back.
pub async fn record_attempt(tx: &mut Tx, a: &Attempted<'_>) -> Result<Recorded> {
    let mut writes = Writes::new();
    let [attempt, notification] = attempt_writes(a);
    writes.push(attempt);
    let moved = writes.push(notification);
    let ran = writes.run(tx).await?;
    if ran.rows(moved) == 0 {
        return Ok(Recorded::Settled);
    }
    let failing = !matches!(a.result, DeliveryResult::Delivered);
    if !failing && !a.endpoint_was_failing {
        // The common case: a healthy endpoint answered; its row is not touched. (A failure
        // recorded by a concurrent delivery after this one's read stays until the next success:
        // its streak then starts a moment early, never late.)
        return Ok(Recorded::Open { failing_since: None });
    }
    let since: Option<Option<DbTime>> = with_conn!(tx, |conn| {
        sqlx::query_scalar(
            "UPDATE webhook_endpoints
             SET failing_since = CASE WHEN $3 THEN COALESCE(failing_since, $4) ELSE NULL END
             WHERE account_id = $1 AND id = $2 AND ($3 OR failing_since IS NOT NULL) RETURNING failing_since",
        )
        .bind(a.account.0)
        .bind(a.endpoint.0)
        .bind(failing)
        .bind(a.at)
        .fetch_optional(&mut *conn)
        .await?
    });
    Ok(Recorded::Open { failing_since: since.flatten() })
}

/// An attempt's two writes: its `notification_attempts` row, and the notification moved to where
/// the attempt left it — guarded, so a notification already settled (delivered, gone, skipped) is
/// not moved again (the attempt is recorded either way). A delivery to a healthy endpoint has no
/// other write, so these two go with its job's finish in the worker's group commit
/// ([`crate::jobs::finisher`]); [`record_attempt`] runs them in the caller's transaction.
pub fn attempt_writes(a: &Attempted<'_>) -> [Sql; 2] {
    let error = a.error.map(|e| crate::redact::text(e).chars().take(500).collect::<String>());
    let attempt = Sql::row(
        "INSERT INTO notification_attempts (account_id, id, notification_id, attempt, result, status_code, error, duration_ms, at) VALUES ",
        [
            Arg::Uuid(a.account.0),
            Arg::Uuid(Uuid::now_v7()),
            Arg::Uuid(a.notification.0),
            Arg::I64(a.attempt.into()),
            a.result.as_str().into(),
            Arg::OptI64(a.status_code.map(i64::from)),
            Arg::OptText(error.clone()),
            Arg::I64(a.duration_ms),
            Arg::Time(a.at),
        ],
        "",
    );
    let delivered = (a.status == NotificationStatus::Delivered).then_some(a.at);
    let notification = Sql::new("UPDATE notifications SET status = ")
        .bind(a.status.as_str())
        .sql(", attempts = ")
        .bind(i64::from(a.attempt))
        .sql(", last_status_code = ")
        .bind(a.status_code.map(i64::from))
        .sql(", last_error = ")
        .bind(error)
        .sql(", last_attempt_at = ")
        .bind(a.at)
        .sql(", delivered_at = ")
        .bind(delivered)
        .sql(" WHERE account_id = ")
        .bind(a.account.0)
        .sql(" AND id = ")
        .bind(a.notification.0)
        .sql(" AND status IN ('pending', 'undeliverable')");
    [attempt, notification]
}

/// Sets a notification's status without an attempt (skipped: its endpoint went away; pending
/// again: an operator redelivers it).
pub async fn set_status(tx: &mut Tx, id: NotificationId, status: NotificationStatus) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query("UPDATE notifications SET status = $2 WHERE id = $1")
            .bind(id.0)
            .bind(status.as_str())
            .execute(&mut *conn)
            .await?;
    });
    Ok(())
}

/// The notification is `undeliverable` and `job` (its delivery job) about to be dead-lettered.
pub async fn mark_undeliverable(tx: &mut Tx, id: NotificationId, job: crate::domain::JobId) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query("UPDATE notifications SET status = 'undeliverable', dead_job_id = $2 WHERE id = $1")
            .bind(id.0)
            .bind(job)
            .execute(&mut *conn)
            .await?;
    });
    Ok(())
}

/// Disables an endpoint that is enabled: true if this call did.
pub async fn disable_endpoint(tx: &mut Tx, id: WebhookEndpointId, reason: &str) -> Result<bool> {
    let done = with_conn!(tx, |conn| {
        sqlx::query(
            "UPDATE webhook_endpoints SET status = 'disabled', disabled_reason = $2, updated_at = $3
             WHERE id = $1 AND status = 'enabled'",
        )
        .bind(id.0)
        .bind(reason)
        .bind(DbTime::now())
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    Ok(done == 1)
}

/// An endpoint's recent health for operators: its notifications by status.
pub async fn endpoint_health(db: &Db, id: WebhookEndpointId) -> Result<Vec<(NotificationStatus, i64)>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, (NotificationStatus, i64)>(
            "SELECT status, count(*) FROM notifications WHERE endpoint_id = $1 GROUP BY status",
        )
        .bind(id.0)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// An operator's redelivery: the notification is pending again and a new delivery job is
/// enqueued (its window starts afresh). `None` if there is no such notification.
pub async fn redeliver(tx: &mut Tx, id: NotificationId) -> Result<Option<crate::domain::JobId>> {
    let row: Option<(AccountId, EventId)> = with_conn!(tx, |conn| {
        sqlx::query_as("UPDATE notifications SET status = 'pending' WHERE id = $1 RETURNING account_id, event_id")
            .bind(id.0)
            .fetch_optional(&mut *conn)
            .await?
    });
    let Some((account, event)) = row else {
        return Ok(None);
    };
    let mut writes = Writes::new();
    let job = jobs::enqueue_in(&mut writes, &delivery_job(account, id, &event.wire(), DbTime::now()));
    writes.run(tx).await?;
    Ok(Some(job))
}

// ---------------------------------------------------------------------------------------------
// Operators' lists

/// A notification with what its event announces: what an operator's list shows of it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ListedNotification {
    #[sqlx(flatten)]
    pub notification: NotificationRow,
    pub event_type: String,
    pub withdrawal_id: WithdrawalId,
}

impl ListedNotification {
    pub fn kind(&self) -> Result<EventType> {
        self.event_type.parse().map_err(StorageError::corrupt)
    }
}

/// Like [`notifications`] (newest first, of one endpoint and/or in one status), each with its
/// event's type and withdrawal, in one query (operators).
pub async fn notifications_listed(
    db: &Db,
    endpoint: Option<WebhookEndpointId>,
    status: Option<NotificationStatus>,
    limit: u32,
) -> Result<Vec<ListedNotification>> {
    let endpoint = endpoint.map(|e| e.0);
    let status = status.map(NotificationStatus::as_str);
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ListedNotification>(
            "SELECT n.id, n.account_id, n.event_id, n.endpoint_id, n.status, n.attempts, n.last_status_code,
                    n.last_error, n.last_attempt_at, n.delivered_at, n.created_at, n.dead_job_id, e.event_type, e.withdrawal_id
             FROM notifications n JOIN events e ON e.account_id = n.account_id AND e.id = n.event_id
             WHERE ($1 IS NULL OR n.endpoint_id = $1) AND ($2 IS NULL OR n.status = $2)
             ORDER BY n.created_at DESC, n.id DESC LIMIT $3",
        )
        .bind(endpoint)
        .bind(status)
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await?
    }))
}
