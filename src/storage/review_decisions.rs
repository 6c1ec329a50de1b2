//! Pending review decisions (SPEC §8.1, the two-person rule): a `complete` or `fail` at or above
//! the approval threshold is stored here by the first operator and applied only when a second,
//! different operator approves it. At most one decision waits per withdrawal (a partial unique
//! index); a decided row is never changed again.

use sqlx::types::Json;

use super::{Db, DbTime, Result, StorageError, Tx, TxConn};
use crate::domain::{AccountId, DecisionId, DecisionStatus, OperatorId, WithdrawalId, WithdrawalKey, WithdrawalStatus};
use crate::{with_conn, with_read_conn};

#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ReviewDecision {
    pub id: DecisionId,
    /// The withdrawal's account (with `withdrawal_id`, its [`WithdrawalKey`]).
    pub account_id: AccountId,
    pub withdrawal_id: WithdrawalId,
    /// `complete` or `fail`.
    pub action: crate::domain::ReviewAction,
    pub provider_reference: Option<String>,
    /// The withdrawal's version the requester decided on.
    pub version: i64,
    pub reason: String,
    pub requested_by: OperatorId,
    pub requested_at: DbTime,
    /// The provider's answer when it was requested.
    pub request_evidence: Json<serde_json::Value>,
    /// `pending`, `approved`, `rejected`, or `superseded` (the withdrawal left review another
    /// way first).
    pub status: DecisionStatus,
    pub decided_by: Option<OperatorId>,
    pub decided_at: Option<DbTime>,
    pub decision_reason: Option<String>,
}

const COLUMNS: &str =
    "id, account_id, withdrawal_id, action, provider_reference, version, reason, requested_by, requested_at, \
                       request_evidence, status, decided_by, decided_at, decision_reason";

/// What [`insert_pending`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requested {
    Stored,
    /// Another decision already waits on this withdrawal.
    AlreadyPending,
    /// The withdrawal is no longer in review at the decision's version (someone moved it while
    /// the provider was being asked): nothing stored.
    Stale,
}

/// Stores a new pending decision, if the withdrawal is still `requires_review` at the decision's
/// version. The withdrawal's row is locked first (PostgreSQL; SQLite's one writer serialises), so
/// a concurrent move either happened before (→ [`Requested::Stale`]) or waits for this commit and
/// then supersedes the stored decision in its own transaction.
pub async fn insert_pending(tx: &mut Tx, d: &ReviewDecision) -> Result<Requested> {
    let current: Option<(WithdrawalStatus, i64)> = match &mut tx.conn {
        TxConn::Postgres(t) => {
            sqlx::query_as("SELECT status, version FROM withdrawals WHERE account_id = $1 AND id = $2 FOR UPDATE")
                .bind(d.account_id)
                .bind(d.withdrawal_id)
                .fetch_optional(&mut **t)
                .await?
        }
        TxConn::Sqlite(t) => {
            sqlx::query_as("SELECT status, version FROM withdrawals WHERE account_id = $1 AND id = $2")
                .bind(d.account_id)
                .bind(d.withdrawal_id)
                .fetch_optional(&mut **t)
                .await?
        }
    };
    if current != Some((WithdrawalStatus::RequiresReview, d.version)) {
        return Ok(Requested::Stale);
    }
    let inserted = with_conn!(tx, |conn| {
        sqlx::query(&format!(
            "INSERT INTO review_decisions ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending', NULL, NULL, NULL)"
        ))
        .bind(d.id)
        .bind(d.account_id)
        .bind(d.withdrawal_id)
        .bind(d.action)
        .bind(&d.provider_reference)
        .bind(d.version)
        .bind(crate::redact::text(&d.reason))
        .bind(d.requested_by)
        .bind(d.requested_at)
        .bind(&d.request_evidence)
        .execute(&mut *conn)
        .await
        .map(|done| done.rows_affected())
    });
    match inserted {
        Ok(_) => Ok(Requested::Stored),
        Err(err) if is_unique_violation(&err) => Ok(Requested::AlreadyPending),
        Err(err) => Err(err.into()),
    }
}

fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// The decision waiting for a second operator on this withdrawal, if any.
pub async fn pending_for(db: &Db, withdrawal: WithdrawalKey) -> Result<Option<ReviewDecision>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ReviewDecision>(&format!(
            "SELECT {COLUMNS} FROM review_decisions
             WHERE account_id = $1 AND withdrawal_id = $2 AND status = 'pending'"
        ))
        .bind(withdrawal.account.0)
        .bind(withdrawal.id.0)
        .fetch_optional(&mut *conn)
        .await?
    }))
}

/// Every decision on a withdrawal, oldest first (its evidence timeline).
pub async fn for_withdrawal(db: &Db, withdrawal: WithdrawalKey) -> Result<Vec<ReviewDecision>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ReviewDecision>(&format!(
            "SELECT {COLUMNS} FROM review_decisions WHERE account_id = $1 AND withdrawal_id = $2
             ORDER BY requested_at, id"
        ))
        .bind(withdrawal.account.0)
        .bind(withdrawal.id.0)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Pending decisions, oldest first (what second operators have to look at).
pub async fn list_pending(db: &Db, limit: i64) -> Result<Vec<ReviewDecision>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ReviewDecision>(&format!(
            "SELECT {COLUMNS} FROM review_decisions WHERE status = 'pending' ORDER BY requested_at, id LIMIT $1"
        ))
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Decides a pending decision `d` (`approved` or `rejected`) by `by`, in `tx`. False if it was no
/// longer pending (someone else decided first): nothing changed.
pub async fn decide(
    tx: &mut Tx,
    d: &ReviewDecision,
    status: DecisionStatus,
    by: OperatorId,
    reason: &str,
) -> Result<bool> {
    if !matches!(status, DecisionStatus::Approved | DecisionStatus::Rejected) {
        return Err(StorageError::corrupt(format!("a decision cannot become {status}")));
    }
    let updated = with_conn!(tx, |conn| {
        sqlx::query(
            "UPDATE review_decisions SET status = $1, decided_by = $2, decided_at = $3, decision_reason = $4
             WHERE account_id = $5 AND id = $6 AND status = 'pending'",
        )
        .bind(status)
        .bind(by)
        .bind(DbTime::now())
        .bind(crate::redact::text(reason))
        .bind(d.account_id)
        .bind(d.id)
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    Ok(updated == 1)
}

/// The withdrawal left `requires_review` (by any transition): a decision still waiting on it can
/// no longer apply, so it is closed as `superseded` with why, in the transition's transaction.
pub async fn supersede(tx: &mut Tx, withdrawal: WithdrawalKey, why: &str) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query(
            "UPDATE review_decisions SET status = 'superseded', decided_at = $1, decision_reason = $2
             WHERE account_id = $3 AND withdrawal_id = $4 AND status = 'pending'",
        )
        .bind(DbTime::now())
        .bind(crate::redact::text(why))
        .bind(withdrawal.account.0)
        .bind(withdrawal.id.0)
        .execute(&mut *conn)
        .await?;
    });
    Ok(())
}
