//! Provider attempts (SPEC §4): the evidence of every call to the payout provider.
//!
//! [`start_in`] is committed before the call; [`record_outcome_in`] fills in what came back. An
//! attempt left without an outcome means the call may have happened, so the withdrawal must be
//! reconciled, never blindly resubmitted.

use super::batch::{Arg, Sql, Writes, Written};
use super::{Db, DbTime, Result, Tx};
use crate::domain::{AccountId, AttemptId, AttemptResult, JobId, WithdrawalKey};
use crate::{with_conn, with_read_conn};

pub use crate::domain::SideEffect;

/// A recorded attempt.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AttemptRow {
    pub id: AttemptId,
    /// The provider it went to (SPEC §16).
    pub provider: String,
    pub job_id: JobId,
    pub attempt_no: i64,
    pub worker_id: String,
    pub correlation_id: String,
    pub started_at: DbTime,
    pub finished_at: Option<DbTime>,
    pub outcome: Option<AttemptResult>,
    pub side_effect: SideEffect,
    pub http_status: Option<i64>,
    pub provider_transfer_id: Option<String>,
    pub failure_code: Option<String>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
}

impl AttemptRow {
    /// May this attempt have moved money? Its side effect is unknown (no outcome, a timeout, a
    /// 5xx), or the provider accepted it (`pending`, `paid`, or a transfer that did not match).
    /// Only a refusal before execution, a `failed` transfer or a later definitive "no such
    /// transfer" rules a payment out.
    pub fn may_have_paid(&self) -> bool {
        self.side_effect == SideEffect::Unknown
            || matches!(
                self.outcome,
                Some(AttemptResult::Pending | AttemptResult::Paid | AttemptResult::Returned | AttemptResult::Mismatch)
            )
    }
}

const COLUMNS: &str = "id, provider, job_id, attempt_no, worker_id, correlation_id, started_at, finished_at, outcome, \
                       side_effect, http_status, provider_transfer_id, failure_code, error_code, error_message";

/// The latest attempt for a withdrawal, if any.
pub async fn latest(tx: &mut Tx, withdrawal: WithdrawalKey) -> Result<Option<AttemptRow>> {
    Ok(with_conn!(tx, |conn| {
        sqlx::query_as::<_, AttemptRow>(&format!(
            "SELECT {COLUMNS} FROM provider_attempts WHERE account_id = $1 AND withdrawal_id = $2
             ORDER BY attempt_no DESC LIMIT 1"
        ))
        .bind(withdrawal.account.0)
        .bind(withdrawal.id.0)
        .fetch_optional(&mut *conn)
        .await?
    }))
}

/// The one query of [`for_withdrawal`] and [`for_withdrawal_in`]: a withdrawal's attempts, oldest
/// first.
fn all_of_withdrawal() -> String {
    format!("SELECT {COLUMNS} FROM provider_attempts WHERE account_id = $1 AND withdrawal_id = $2 ORDER BY attempt_no")
}

/// Every attempt for a withdrawal, oldest first.
pub async fn for_withdrawal(db: &Db, withdrawal: WithdrawalKey) -> Result<Vec<AttemptRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, AttemptRow>(&all_of_withdrawal())
            .bind(withdrawal.account.0)
            .bind(withdrawal.id.0)
            .fetch_all(&mut *conn)
            .await?
    }))
}

/// [`for_withdrawal`] inside `tx` (the payout handler's routing, SPEC §16).
pub async fn for_withdrawal_in(tx: &mut Tx, withdrawal: WithdrawalKey) -> Result<Vec<AttemptRow>> {
    Ok(with_conn!(tx, |conn| {
        sqlx::query_as::<_, AttemptRow>(&all_of_withdrawal())
            .bind(withdrawal.account.0)
            .bind(withdrawal.id.0)
            .fetch_all(&mut *conn)
            .await?
    }))
}

/// An attempt about to call `provider`.
#[derive(Debug, Clone, Copy)]
pub struct Start<'a> {
    pub withdrawal: WithdrawalKey,
    pub job: JobId,
    pub attempt_no: i64,
    pub worker: &'a str,
    pub correlation_id: &'a str,
    /// The provider's name (the gateway's).
    pub provider: &'a str,
}

/// [`start_in`] on its own, in `tx`.
pub async fn start(tx: &mut Tx, start: &Start<'_>) -> Result<AttemptId> {
    let mut writes = Writes::new();
    let id = start_in(&mut writes, start);
    writes.run(tx).await?;
    Ok(id)
}

/// Records that attempt `attempt_no` is about to call the provider, as a write of a larger
/// batch; returns the attempt's id. A unique index on (withdrawal, attempt_no) makes a racing
/// second start fail instead of calling twice.
pub fn start_in(writes: &mut Writes, start: &Start<'_>) -> AttemptId {
    let id = AttemptId::new();
    writes.push(Sql::row(
        "INSERT INTO provider_attempts (id, account_id, withdrawal_id, job_id, attempt_no, worker_id,
                                            correlation_id, provider, started_at, side_effect)
             VALUES ",
        [
            Arg::Uuid(id.0),
            Arg::Uuid(start.withdrawal.account.0),
            Arg::Uuid(start.withdrawal.id.0),
            Arg::Uuid(start.job.0),
            Arg::I64(start.attempt_no),
            Arg::Text(start.worker.to_owned()),
            Arg::Text(start.correlation_id.to_owned()),
            Arg::Text(start.provider.to_owned()),
            Arg::Time(DbTime::now()),
        ],
        ", 'unknown'",
    ));
    id
}

/// What a call produced, for the attempt row.
#[derive(Debug, Clone, Default)]
pub struct AttemptOutcome<'a> {
    pub outcome: AttemptResult,
    pub side_effect: Option<SideEffect>,
    pub http_status: Option<u16>,
    pub provider_transfer_id: Option<&'a str>,
    pub failure_code: Option<&'a str>,
    pub error_code: Option<&'a str>,
    pub error_message: Option<&'a str>,
}

/// What the call produced, as a write of a larger batch, on attempt `attempt` of an `account`'s
/// withdrawal. Provider texts are redacted before storage.
pub fn record_outcome_in(
    writes: &mut Writes,
    account: AccountId,
    attempt: AttemptId,
    outcome: &AttemptOutcome<'_>,
) -> Written {
    writes.push(
        Sql::new("UPDATE provider_attempts SET finished_at = ")
            .bind(DbTime::now())
            .sql(", outcome = ")
            .bind(outcome.outcome.as_str())
            .sql(", side_effect = ")
            .bind(outcome.side_effect.unwrap_or(SideEffect::Unknown).as_str())
            .sql(", http_status = ")
            .bind(outcome.http_status.map(i64::from))
            .sql(", provider_transfer_id = ")
            .bind(outcome.provider_transfer_id)
            .sql(", failure_code = ")
            .bind(outcome.failure_code)
            .sql(", error_code = ")
            .bind(outcome.error_code.map(crate::redact::text))
            .sql(", error_message = ")
            .bind(outcome.error_message.map(crate::redact::text))
            .sql(" WHERE account_id = ")
            .bind(account.0)
            .sql(" AND id = ")
            .bind(attempt.0),
    )
}

/// Once reconciliation proved the provider has no transfer under the operation key (and no call
/// can still be in flight), every attempt whose side effect was unknown is known not executed:
/// recorded so, so a controlled or deliberate retry may call again.
/// Only attempts that started before `asked_at` (when the provider was asked): one that started
/// after the question may be executed whatever the answer said.
pub async fn resolve_unfinished_as_not_executed(
    tx: &mut Tx,
    withdrawal: WithdrawalKey,
    provider: &str,
    asked_at: DbTime,
) -> Result<u64> {
    Ok(with_conn!(tx, |conn| {
        sqlx::query(
            "UPDATE provider_attempts
             SET finished_at = COALESCE(finished_at, $1), outcome = COALESCE(outcome, 'unknown'),
                 side_effect = 'not_started', error_code = COALESCE(error_code, 'reconciled_not_found'),
                 error_message = COALESCE(error_message, 'reconciliation found no transfer for this operation key')
             WHERE account_id = $2 AND withdrawal_id = $3 AND side_effect = 'unknown' AND provider = $4
               AND started_at < $5",
        )
        .bind(DbTime::now())
        .bind(withdrawal.account.0)
        .bind(withdrawal.id.0)
        .bind(provider)
        .bind(asked_at)
        .execute(&mut *conn)
        .await?
        .rows_affected()
    }))
}

/// A withdrawal's retry budget so far: how many provider attempts it has had, and when the
/// first one started — since it last left `requires_review` (a deliberate retry or replay gets a
/// fresh budget). Budgets are per withdrawal, not per job, so controlled retries (new jobs)
/// cannot reset them.
pub async fn budget(tx: &mut Tx, withdrawal: WithdrawalKey) -> Result<(i64, Option<DbTime>)> {
    let row: (i64, Option<DbTime>) = with_conn!(tx, |conn| {
        sqlx::query_as(
            "SELECT COUNT(*), MIN(started_at) FROM provider_attempts a
             WHERE a.account_id = $1 AND a.withdrawal_id = $2
               AND a.started_at >= COALESCE(
                   (SELECT MAX(t.at) FROM withdrawal_transitions t
                    WHERE t.account_id = $1 AND t.withdrawal_id = $2
                      AND t.from_status = 'requires_review' AND t.to_status = 'processing'),
                   a.started_at)",
        )
        .bind(withdrawal.account.0)
        .bind(withdrawal.id.0)
        .fetch_one(&mut *conn)
        .await?
    });
    Ok(row)
}
