//! Reconciliation results (SPEC §7): every answer the provider gave about an unknown outcome,
//! kept as evidence on the withdrawal. Append-only.

use super::{Db, DbTime, Result, Tx, TxConn};
use crate::domain::{AccountId, JobId, ReconciliationId, ReconciliationResult, WithdrawalId, WithdrawalKey};
use crate::{with_conn, with_read_conn};

/// One stored answer of reconciliation.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ReconciliationRecord {
    pub id: ReconciliationId,
    pub account_id: AccountId,
    pub withdrawal_id: WithdrawalId,
    pub job_id: JobId,
    /// The provider asked (SPEC §16).
    pub provider: String,
    pub result: ReconciliationResult,
    pub provider_transfer_id: Option<String>,
    pub failure_code: Option<String>,
    pub detail: String,
    pub follow_up_job_id: Option<JobId>,
    pub correlation_id: String,
    pub at: DbTime,
}

const COLUMNS: &str =
    "id, account_id, withdrawal_id, job_id, provider, result, provider_transfer_id, failure_code, detail, follow_up_job_id, \
     correlation_id, at";

pub async fn insert(tx: &mut Tx, r: &ReconciliationRecord) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query(&format!(
            "INSERT INTO reconciliation_results ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
        ))
        .bind(r.id)
        .bind(r.account_id)
        .bind(r.withdrawal_id)
        .bind(r.job_id)
        .bind(&r.provider)
        .bind(r.result)
        .bind(&r.provider_transfer_id)
        .bind(&r.failure_code)
        .bind(&r.detail)
        .bind(r.follow_up_job_id)
        .bind(&r.correlation_id)
        .bind(r.at)
        .execute(&mut *conn)
        .await?;
    });
    Ok(())
}

/// A withdrawal's reconciliation results, oldest first.
pub async fn for_withdrawal(db: &Db, withdrawal: WithdrawalKey) -> Result<Vec<ReconciliationRecord>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ReconciliationRecord>(&format!(
            "SELECT {COLUMNS} FROM reconciliation_results WHERE account_id = $1 AND withdrawal_id = $2 ORDER BY at, id"
        ))
        .bind(withdrawal.account.0)
        .bind(withdrawal.id.0)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Withdrawals in `processing` since before `older_than` with no scheduled or running job: the
/// sweep reconciles them. On PostgreSQL only the instance holding the advisory lock sweeps.
pub async fn stuck_processing(tx: &mut Tx, older_than: DbTime, limit: i64) -> Result<Option<Vec<WithdrawalKey>>> {
    const SQL: &str = "SELECT w.account_id, w.id FROM withdrawals w
         WHERE w.status = 'processing' AND w.updated_at < $1
           AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.account_id = w.account_id AND j.withdrawal_id = w.id
                           AND j.status IN ('scheduled', 'running'))
         ORDER BY w.updated_at LIMIT $2";
    match &mut tx.conn {
        TxConn::Postgres(t) => {
            // One sweeper at a time across instances; the lock ends with the transaction.
            let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(7201)").fetch_one(&mut **t).await?;
            if !locked {
                return Ok(None);
            }
            let rows: Vec<(AccountId, WithdrawalId)> =
                sqlx::query_as(SQL).bind(older_than).bind(limit).fetch_all(&mut **t).await?;
            Ok(Some(rows.into_iter().map(|(account, id)| WithdrawalKey { account, id }).collect()))
        }
        TxConn::Sqlite(t) => {
            let rows: Vec<(AccountId, WithdrawalId)> =
                sqlx::query_as(SQL).bind(older_than).bind(limit).fetch_all(&mut **t).await?;
            Ok(Some(rows.into_iter().map(|(account, id)| WithdrawalKey { account, id }).collect()))
        }
    }
}
