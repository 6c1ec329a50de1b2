//! The jobs table (SPEC §5). Enqueueing happens inside the caller's transaction so a state
//! change and the job it implies commit together. Claiming and leasing come with the worker.

use uuid::Uuid;

use super::{DbTime, Result, Tx};
use crate::domain::{JobId, WithdrawalId};
use crate::with_conn;

/// A job to enqueue. The payload is stored as raw bytes so a job that cannot be decoded later
/// can still be dead-lettered with exactly what was stored.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub queue: &'static str,
    pub kind: &'static str,
    pub payload: Vec<u8>,
    pub payload_version: i64,
    pub run_at: DbTime,
    pub correlation_id: String,
    pub withdrawal_id: Option<WithdrawalId>,
}

pub async fn enqueue(tx: &mut Tx, job: &NewJob) -> Result<JobId> {
    let id = JobId::new();
    let now = DbTime::now();
    with_conn!(tx, |conn| {
        sqlx::query(
            "INSERT INTO jobs (id, queue, kind, payload, payload_version, status, run_at,
                               correlation_id, withdrawal_id, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, 'scheduled', $6, $7, $8, $9, $9)",
        )
        .bind(id.0)
        .bind(job.queue)
        .bind(job.kind)
        .bind(&job.payload)
        .bind(job.payload_version)
        .bind(job.run_at)
        .bind(&job.correlation_id)
        .bind(job.withdrawal_id.map(|w| w.0))
        .bind(now)
        .execute(&mut *conn)
        .await?;
    });
    Ok(id)
}

/// A job as stored, for inspection (tests, operators).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JobRow {
    pub id: Uuid,
    pub queue: String,
    pub kind: String,
    pub payload: Vec<u8>,
    pub payload_version: i64,
    pub status: String,
    pub attempts: i64,
    pub correlation_id: String,
}

pub async fn jobs_for_withdrawal(db: &super::Db, withdrawal: WithdrawalId) -> Result<Vec<JobRow>> {
    Ok(crate::with_read_conn!(db, |conn| {
        sqlx::query_as::<_, JobRow>(
            "SELECT id, queue, kind, payload, payload_version, status, attempts, correlation_id
             FROM jobs WHERE withdrawal_id = $1 ORDER BY created_at, id",
        )
        .bind(withdrawal.0)
        .fetch_all(&mut *conn)
        .await?
    }))
}
