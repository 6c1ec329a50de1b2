//! Breakers across processes (SPEC §8, migration 0017): the operators' overrides, one per
//! breaker, and what each process's breaker reports. The overrides are written by the operator
//! core in its audited transaction; every process reads them and writes its own report on an
//! interval (`provider::cluster`).

use super::{Db, DbTime, Result, Tx};
use crate::domain::{BreakerOverride, OperatorId};
#[cfg(doc)]
use crate::domain::{BreakerState, ProcessRole};
use crate::{with_conn, with_read_conn};

/// An operator's override of one breaker.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Override {
    pub breaker: String,
    pub mode: BreakerOverride,
    pub reason: String,
    pub set_by: uuid::Uuid,
    /// The operator's name, for the views.
    pub set_by_name: String,
    pub set_at: DbTime,
}

/// Sets (or replaces) the override of `breaker`.
pub async fn set_override(
    tx: &mut Tx,
    breaker: &str,
    mode: BreakerOverride,
    reason: &str,
    by: OperatorId,
) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query(
            "INSERT INTO breaker_overrides (breaker, mode, reason, set_by, set_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (breaker) DO UPDATE SET mode = excluded.mode, reason = excluded.reason,
                 set_by = excluded.set_by, set_at = excluded.set_at",
        )
        .bind(breaker)
        .bind(mode)
        .bind(reason)
        .bind(by)
        .bind(DbTime::now())
        .execute(&mut *conn)
        .await?;
    });
    Ok(())
}

/// Removes the override of `breaker`; whether there was one.
pub async fn clear_override(tx: &mut Tx, breaker: &str) -> Result<bool> {
    let done = with_conn!(tx, |conn| {
        sqlx::query("DELETE FROM breaker_overrides WHERE breaker = $1")
            .bind(breaker)
            .execute(&mut *conn)
            .await?
            .rows_affected()
    });
    Ok(done > 0)
}

/// Every override in force, with who set it.
pub async fn overrides(db: &Db) -> Result<Vec<Override>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, Override>(
            "SELECT o.breaker, o.mode, o.reason, o.set_by, p.name AS set_by_name, o.set_at
             FROM breaker_overrides o JOIN operators p ON p.id = o.set_by ORDER BY o.breaker",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// What one process's breaker said at `reported_at`. `role` and `state` are text as the reporting
/// process wrote them (a [`ProcessRole`] and a [`BreakerState`]): during a rolling deploy a process
/// of another version may report a value this one does not know, and the reader decides what to
/// do with it rather than failing the whole view.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Report {
    pub process_id: String,
    pub breaker: String,
    pub role: String,
    pub host: String,
    pub version: String,
    pub state: String,
    /// When the breaker entered `state` (as this process saw it).
    pub since: DbTime,
    pub reported_at: DbTime,
}

/// Writes (or refreshes) one process's report of one breaker.
pub async fn report(db: &Db, r: &Report) -> Result<()> {
    let mut tx = db.begin().await?;
    with_conn!(&mut tx, |conn| {
        sqlx::query(
            "INSERT INTO breaker_reports (process_id, breaker, role, host, version, state, since, reported_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (process_id, breaker) DO UPDATE SET state = excluded.state, since = excluded.since,
                 reported_at = excluded.reported_at",
        )
        .bind(&r.process_id)
        .bind(&r.breaker)
        .bind(&r.role)
        .bind(&r.host)
        .bind(&r.version)
        .bind(&r.state)
        .bind(r.since)
        .bind(r.reported_at)
        .execute(&mut *conn)
        .await?;
    });
    tx.commit().await
}

/// The reports written since `fresh_since` (processes still alive), by breaker and process.
pub async fn reports(db: &Db, fresh_since: DbTime) -> Result<Vec<Report>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, Report>(
            "SELECT process_id, breaker, role, host, version, state, since, reported_at FROM breaker_reports
             WHERE reported_at >= $1 ORDER BY breaker, role, host, process_id",
        )
        .bind(fresh_since)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Deletes the reports of processes silent since `before` (stopped or crashed), and this
/// process's own when it stops (`process` given). Returns how many went.
pub async fn forget(db: &Db, before: DbTime, process: Option<&str>) -> Result<u64> {
    let mut tx = db.begin().await?;
    let done = with_conn!(&mut tx, |conn| {
        sqlx::query("DELETE FROM breaker_reports WHERE reported_at < $1 OR process_id = $2")
            .bind(before)
            .bind(process)
            .execute(&mut *conn)
            .await?
            .rows_affected()
    });
    tx.commit().await?;
    Ok(done)
}
