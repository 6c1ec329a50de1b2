//! Payout returns (SPEC §14.3): a payout the bank returned after the provider paid it. Applying a
//! return writes one `payout_returns` row and the `return` ledger entry that moves the amount from
//! paid out back to available, in one transaction; the row is unique per withdrawal, so the same
//! return applied twice changes nothing. Only a `completed` withdrawal can be returned, and only
//! for the amount and currency the provider reports returning: anything else is the caller's
//! exception to report, never a credit.

use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

use super::batch::{Sql, Writes};
use super::{accounts, DbTime, Result, Tx};
use crate::domain::{Amount, Withdrawal, WithdrawalId, WithdrawalKey, WithdrawalStatus};
use crate::{with_conn, with_read_conn};

/// A return as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PayoutReturn {
    pub id: Uuid,
    pub withdrawal_id: WithdrawalId,
    pub currency: String,
    pub amount_minor: i64,
    pub return_code: String,
    pub returned_at: DbTime,
    pub evidence: Json<Value>,
    pub recorded_at: DbTime,
}

/// What applying a return did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The customer was re-credited, once.
    Credited,
    /// This withdrawal's return was applied before: nothing changed.
    AlreadyApplied,
    /// We do not hold the withdrawal as `completed`: nothing to return, nothing changed.
    NotCompleted,
    /// The provider's record returns another amount or currency than the withdrawal paid out:
    /// nothing changed (a settlement exception, never a credit).
    AmountMismatch,
}

/// Applies the provider's return of `withdrawal` (read inside `tx`, under its row lock where the
/// backend has one): `reported` is the amount and currency the provider's record says it returned,
/// `evidence` that record. The credit is the withdrawal's own amount, and only when they agree.
pub async fn apply(
    tx: &mut Tx,
    withdrawal: &Withdrawal,
    reported: Amount,
    return_code: &str,
    returned_at: DbTime,
    evidence: &crate::domain::StoredEvidence,
) -> Result<Applied> {
    if withdrawal.status != WithdrawalStatus::Completed {
        return Ok(Applied::NotCompleted);
    }
    if reported != withdrawal.amount {
        return Ok(Applied::AmountMismatch);
    }
    let inserted = with_conn!(tx, |conn| {
        sqlx::query(
            "INSERT INTO payout_returns (id, withdrawal_id, account_id, currency, amount_minor, return_code,
                                         returned_at, evidence, recorded_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
             ON CONFLICT (account_id, withdrawal_id) DO NOTHING",
        )
        .bind(Uuid::now_v7())
        .bind(withdrawal.id.0)
        .bind(withdrawal.account_id.0)
        .bind(withdrawal.amount.currency().code())
        .bind(withdrawal.amount.to_minor())
        .bind(return_code)
        .bind(returned_at)
        .bind(Json(evidence.to_json()))
        .bind(DbTime::now())
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    if inserted == 0 {
        return Ok(Applied::AlreadyApplied);
    }
    let mut writes = Writes::new();
    accounts::return_in(&mut writes, withdrawal.key(), withdrawal.amount);
    // The row changes: its version moves on, so the `withdrawal.returned` event is newer than the
    // `withdrawal.completed` one to a consumer ordering by version (SPEC §17).
    let now = DbTime::now();
    writes.push(
        Sql::new("UPDATE withdrawals SET version = version + 1, updated_at = ")
            .bind(now)
            .sql(" WHERE account_id = ")
            .bind(withdrawal.account_id.0)
            .sql(" AND id = ")
            .bind(withdrawal.id.0),
    );
    // The customer hears of it (SPEC §17): the withdrawal as its API now shows it, return and all.
    let mut view = crate::domain::view::WithdrawalView::from(withdrawal);
    view.version = withdrawal.version + 1;
    view.updated_at = now.0;
    view.returned =
        Some(crate::domain::view::ReturnView { returned_at: returned_at.0, return_code: return_code.to_owned() });
    let version = super::notifications::EventVersion::Known(withdrawal.version + 1);
    super::notifications::event_in(&mut writes, crate::domain::EventType::Returned, withdrawal, version, view);
    writes.run(tx).await?;
    Ok(Applied::Credited)
}

const COLUMNS: &str = "id, withdrawal_id, currency, amount_minor, return_code, returned_at, evidence, recorded_at";

/// The withdrawal's return, if it was returned.
pub async fn for_withdrawal(db: &super::Db, withdrawal: WithdrawalKey) -> Result<Option<PayoutReturn>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, PayoutReturn>(&format!(
            "SELECT {COLUMNS} FROM payout_returns WHERE account_id = $1 AND withdrawal_id = $2"
        ))
        .bind(withdrawal.account.0)
        .bind(withdrawal.id.0)
        .fetch_optional(&mut *conn)
        .await?
    }))
}
