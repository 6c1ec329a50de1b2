//! The dead-letter store (SPEC §6): envelopes are inserted once, in the transaction that kills
//! their job, and never updated or deleted (triggers refuse it on both backends). Handling state
//! goes to `dead_letter_events`.

use sqlx::types::Json;
use uuid::Uuid;

use super::{Db, DbTime, Result, Tx};
use crate::domain::WithdrawalId;
use crate::{with_conn, with_read_conn};

/// An envelope, already redacted (see `dead_letter::envelope`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct DeadLetter {
    pub id: Uuid,
    pub job_id: Uuid,
    pub queue: String,
    pub job_type: String,
    pub payload_version: i64,
    pub payload: Option<Json<serde_json::Value>>,
    pub raw_payload: Option<Vec<u8>>,
    pub attempts: i64,
    pub first_attempt_at: Option<DbTime>,
    pub failed_at: DbTime,
    pub error_code: String,
    pub error_class: String,
    pub error_message: String,
    pub stack: Option<String>,
    pub worker_host: String,
    pub worker_version: String,
    pub correlation_id: String,
    pub idempotency_key: Option<String>,
    pub withdrawal_id: Option<Uuid>,
    pub side_effect_state: String,
    pub category: String,
    pub owner: String,
    pub runbook: String,
}

const COLUMNS: &str =
    "id, job_id, queue, job_type, payload_version, payload, raw_payload, attempts, first_attempt_at, \
                       failed_at, error_code, error_class, error_message, stack, worker_host, worker_version, \
                       correlation_id, idempotency_key, withdrawal_id, side_effect_state, category, owner, runbook";

pub async fn insert(tx: &mut Tx, d: &DeadLetter) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query(&format!(
            "INSERT INTO dead_letters ({COLUMNS})
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)"
        ))
        .bind(d.id)
        .bind(d.job_id)
        .bind(&d.queue)
        .bind(&d.job_type)
        .bind(d.payload_version)
        .bind(&d.payload)
        .bind(&d.raw_payload)
        .bind(d.attempts)
        .bind(d.first_attempt_at)
        .bind(d.failed_at)
        .bind(&d.error_code)
        .bind(&d.error_class)
        .bind(&d.error_message)
        .bind(&d.stack)
        .bind(&d.worker_host)
        .bind(&d.worker_version)
        .bind(&d.correlation_id)
        .bind(&d.idempotency_key)
        .bind(d.withdrawal_id)
        .bind(&d.side_effect_state)
        .bind(&d.category)
        .bind(&d.owner)
        .bind(&d.runbook)
        .execute(&mut *conn)
        .await?;
    });
    Ok(())
}

pub async fn for_withdrawal(db: &Db, withdrawal: WithdrawalId) -> Result<Vec<DeadLetter>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, DeadLetter>(&format!(
            "SELECT {COLUMNS} FROM dead_letters WHERE withdrawal_id = $1 ORDER BY failed_at, id"
        ))
        .bind(withdrawal.0)
        .fetch_all(&mut *conn)
        .await?
    }))
}

pub async fn for_job(db: &Db, job: Uuid) -> Result<Vec<DeadLetter>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, DeadLetter>(&format!("SELECT {COLUMNS} FROM dead_letters WHERE job_id = $1"))
            .bind(job)
            .fetch_all(&mut *conn)
            .await?
    }))
}

/// Every envelope (tests and small installations; operators get filtered, paginated lists).
pub async fn all(db: &Db) -> Result<Vec<DeadLetter>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, DeadLetter>(&format!("SELECT {COLUMNS} FROM dead_letters ORDER BY failed_at, id"))
            .fetch_all(&mut *conn)
            .await?
    }))
}

/// Turns a failure-injection flag on or off (drills and tests): while
/// `dead_letter_store_outage` is set, every dead-letter insert fails.
pub async fn set_fault_flag(db: &Db, name: &str, on: bool) -> Result<()> {
    let mut tx = db.begin().await?;
    with_conn!(&mut tx, |conn| {
        if on {
            sqlx::query("INSERT INTO fault_flags (name, set_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING")
                .bind(name)
                .bind(DbTime::now())
                .execute(&mut *conn)
                .await?;
        } else {
            sqlx::query("DELETE FROM fault_flags WHERE name = $1").bind(name).execute(&mut *conn).await?;
        }
    });
    tx.commit().await
}

pub const DEAD_LETTER_STORE_OUTAGE: &str = "dead_letter_store_outage";
