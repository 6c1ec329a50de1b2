//! Statements only the tools send about customer notifications (SPEC §17): the whole outbox, each
//! notification's state, the dead letters of undeliverable ones, every withdrawal's transition log
//! and its returns (the chaos run's notification checks), what is left to deliver (both the chaos
//! run and the bench wait on it), and each delivery's lag (the bench). Read-only.

use uuid::Uuid;

use withdrawals::domain::{NotificationStatus, WithdrawalStatus};
use withdrawals::storage::{Db, DbTime, Result};
use withdrawals::with_read_conn;

/// One row of the outbox.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredEvent {
    pub id: Uuid,
    pub account_id: Uuid,
    pub withdrawal_id: Uuid,
    pub event_type: String,
    pub withdrawal_version: i64,
    pub fanned_out: bool,
}

/// Every event, oldest first.
pub async fn events(db: &Db) -> Result<Vec<StoredEvent>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, StoredEvent>(
            "SELECT id, account_id, withdrawal_id, event_type, withdrawal_version, fanned_out FROM events ORDER BY id",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// One event's notification to one endpoint, as it stands.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredNotification {
    pub event_id: Uuid,
    pub endpoint_id: Uuid,
    pub status: NotificationStatus,
    pub attempts: i32,
}

pub async fn notifications(db: &Db) -> Result<Vec<StoredNotification>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, StoredNotification>(
            "SELECT event_id, endpoint_id, status, attempts FROM notifications ORDER BY created_at, id",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// The correlation ids (the event's wire id, `evt_…`) of the `notification_undeliverable` dead
/// letters.
pub async fn undeliverable_dead_letters(db: &Db) -> Result<Vec<String>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_scalar::<_, String>(
            "SELECT correlation_id FROM dead_letters WHERE category = 'notification_undeliverable' ORDER BY failed_at",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Delivery attempts by what they came to (`delivered`, `http_error`, `timeout`, …).
pub async fn attempts_by_result(db: &Db) -> Result<Vec<(String, i64)>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, (String, i64)>(
            "SELECT result, COUNT(*) FROM notification_attempts GROUP BY result ORDER BY result",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// One recorded move of a withdrawal (its creation has no `from_status`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Transition {
    pub account_id: Uuid,
    pub withdrawal_id: Uuid,
    pub from_status: Option<WithdrawalStatus>,
    pub to_status: WithdrawalStatus,
    pub at: DbTime,
    /// Who made the move, as stored (`worker:<id>`, `operator:<id>`, `reconciliation`, …).
    pub actor: String,
}

/// Every withdrawal's transition log, by withdrawal, oldest first.
pub async fn transitions(db: &Db) -> Result<Vec<Transition>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, Transition>(
            "SELECT account_id, withdrawal_id, from_status, to_status, at, actor FROM withdrawal_transitions \
             ORDER BY withdrawal_id, at, id",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// The withdrawals whose payout the bank returned (SPEC §14.3).
pub async fn returned_withdrawals(db: &Db) -> Result<Vec<Uuid>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_scalar::<_, Uuid>("SELECT withdrawal_id FROM payout_returns").fetch_all(&mut *conn).await?
    }))
}

/// What is left to deliver: events not yet fanned out, and notifications still `pending`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Undelivered {
    pub events_not_fanned_out: i64,
    pub pending_notifications: i64,
}

impl Undelivered {
    pub fn is_empty(&self) -> bool {
        self.events_not_fanned_out == 0 && self.pending_notifications == 0
    }
}

pub async fn undelivered(db: &Db) -> Result<Undelivered> {
    let (events_not_fanned_out, pending_notifications) = with_read_conn!(db, |conn| {
        sqlx::query_as::<_, (i64, i64)>(
            "SELECT (SELECT COUNT(*) FROM events WHERE NOT fanned_out), \
                    (SELECT COUNT(*) FROM notifications WHERE status = 'pending')",
        )
        .fetch_one(&mut *conn)
        .await?
    });
    Ok(Undelivered { events_not_fanned_out, pending_notifications })
}

/// Each delivered notification's event time and delivery time (the service's clocks).
pub async fn delivery_times(db: &Db) -> Result<Vec<(DbTime, DbTime)>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, (DbTime, DbTime)>(
            "SELECT e.created_at, n.delivered_at FROM notifications n JOIN events e ON e.id = n.event_id \
             WHERE n.status = 'delivered' AND n.delivered_at IS NOT NULL",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}
