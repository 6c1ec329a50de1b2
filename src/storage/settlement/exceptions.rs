//! Settlement exceptions (SPEC §14.2): opened once per provider and dedupe key, listed, resolved
//! once; and the completed withdrawals a provider's reports do not show paid.

use serde_json::Value;
use sqlx::types::Json;

use crate::domain::settlement::{ExceptionKind, ExceptionStatus, Resolution};
use crate::domain::{AccountId, OperatorId, SettlementExceptionId, SettlementLineId, WithdrawalId, WithdrawalKey};
use crate::storage::batch::{Arg, Sql, Writes, Written};
use crate::storage::{Db, DbTime, Result, Tx};
use crate::{with_conn, with_read_conn};

/// A settlement exception.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ExceptionRow {
    pub id: SettlementExceptionId,
    /// Its withdrawal's account, else its line's.
    pub account_id: AccountId,
    /// The provider whose report (or whose withdrawal) it is about (SPEC §16).
    pub provider: String,
    pub kind: ExceptionKind,
    pub status: ExceptionStatus,
    pub dedupe_key: String,
    pub withdrawal_id: Option<WithdrawalId>,
    pub line_id: Option<SettlementLineId>,
    pub report_date: Option<String>,
    pub transfer_id: Option<String>,
    pub detail: String,
    pub evidence: Json<Value>,
    pub opened_at: DbTime,
    pub resolved_at: Option<DbTime>,
    pub resolved_by: Option<OperatorId>,
    pub resolution: Option<Resolution>,
    pub resolution_note: Option<String>,
}

const EXCEPTION_COLUMNS: &str =
    "id, account_id, provider, kind, status, dedupe_key, withdrawal_id, line_id, report_date, transfer_id, \
                                 detail, evidence, opened_at, resolved_at, resolved_by, resolution, resolution_note";

/// An exception to open.
pub struct NewException<'a> {
    /// Its withdrawal's account, else its line's.
    pub account_id: AccountId,
    pub kind: ExceptionKind,
    pub dedupe_key: String,
    pub withdrawal_id: Option<WithdrawalId>,
    pub line_id: Option<SettlementLineId>,
    pub report_date: Option<&'a str>,
    pub transfer_id: Option<&'a str>,
    pub detail: &'a str,
    pub evidence: &'a Value,
}

/// Opens an exception about `provider`'s report as a write of a larger batch: it touches no row
/// when the same one (by provider and dedupe key) already exists.
pub fn open_exception_at_in(writes: &mut Writes, provider: &str, e: &NewException<'_>) -> Written {
    writes.push(inserted(e, Sql::new(INSERT_EXCEPTION).bind(Arg::Text(provider.to_owned())).sql(", ")))
}

/// [`open_exception_at_in`] on its own: false when the same exception already exists.
pub async fn open_exception_at(tx: &mut Tx, provider: &str, e: &NewException<'_>) -> Result<bool> {
    let mut writes = Writes::new();
    let opened = open_exception_at_in(&mut writes, provider, e);
    Ok(writes.run(tx).await?.applied(opened))
}

/// Opens an exception that names no report: its provider is the one the withdrawal's latest
/// attempt went to (where it may have been paid, SPEC §16), else `default`. A write of a larger
/// batch; it touches no row when the same one already exists.
pub fn open_exception_in(writes: &mut Writes, e: &NewException<'_>) -> Written {
    let provider = Sql::new(INSERT_EXCEPTION)
        .sql("COALESCE((SELECT a.provider FROM provider_attempts a WHERE a.account_id = ")
        .bind(Arg::Uuid(e.account_id.0))
        .sql(" AND a.withdrawal_id = ")
        .bind(Arg::OptUuid(e.withdrawal_id.map(|w| w.0)))
        .sql(" ORDER BY a.attempt_no DESC LIMIT 1), 'default'), ");
    writes.push(inserted(e, provider))
}

const INSERT_EXCEPTION: &str =
    "INSERT INTO settlement_exceptions (provider, id, account_id, kind, dedupe_key, withdrawal_id, line_id, report_date,
                                        transfer_id, detail, evidence, opened_at, status)
     VALUES (";

/// The rest of the insert [`INSERT_EXCEPTION`] began, after its provider.
fn inserted(e: &NewException<'_>, head: Sql) -> Sql {
    head.binds([
        Arg::Uuid(SettlementExceptionId::new().0),
        Arg::Uuid(e.account_id.0),
        e.kind.as_str().into(),
        e.dedupe_key.as_str().into(),
        Arg::OptUuid(e.withdrawal_id.map(|w| w.0)),
        Arg::OptUuid(e.line_id.map(|l| l.0)),
        Arg::OptText(e.report_date.map(str::to_owned)),
        Arg::OptText(e.transfer_id.map(str::to_owned)),
        Arg::Text(crate::redact::text(e.detail)),
        Arg::Json(e.evidence.clone()),
        Arg::Time(DbTime::now()),
    ])
    .sql(", 'open') ON CONFLICT (account_id, provider, dedupe_key) DO NOTHING")
}

/// [`open_exception_in`] on its own: false when the same exception already exists.
pub async fn open_exception(tx: &mut Tx, e: &NewException<'_>) -> Result<bool> {
    let mut writes = Writes::new();
    let opened = open_exception_in(&mut writes, e);
    Ok(writes.run(tx).await?.applied(opened))
}

/// A completed withdrawal no report shows paid.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MissingCandidate {
    pub id: WithdrawalId,
    pub account_id: AccountId,
    pub amount: i64,
    pub currency: String,
    pub completed_at: DbTime,
}

/// The provider's completed withdrawals — those whose latest attempt went to it (`default` for
/// one never attempted) — that no imported line shows `paid` (or `returned`), completed between
/// the provider's first imported report's day and the end of its last one's, and before `cutoff`
/// (now minus the grace days), that have no `missing_from_report` exception yet. Another
/// provider's withdrawals are never missing from this one's reports. At most `limit`, oldest
/// first.
pub async fn missing_from_reports(
    db: &Db,
    provider: &str,
    cutoff: DbTime,
    limit: i64,
) -> Result<Vec<MissingCandidate>> {
    let (first_day, last_day) = with_read_conn!(db, |conn| {
        sqlx::query_as::<_, (Option<String>, Option<String>)>(
            "SELECT MIN(report_date), MAX(report_date) FROM settlement_reports WHERE provider = $1",
        )
        .bind(provider)
        .fetch_one(&mut *conn)
        .await?
    });
    let day_start = |day: Option<String>| {
        let day = chrono::NaiveDate::parse_from_str(&day?, "%Y-%m-%d").ok()?;
        Some(DbTime(day.and_time(chrono::NaiveTime::MIN).and_utc()))
    };
    let (Some(since), Some(last)) = (day_start(first_day), day_start(last_day)) else {
        return Ok(Vec::new());
    };
    // A withdrawal completed on a day whose report is not imported yet cannot be judged.
    let until = std::cmp::min(cutoff, last.plus(chrono::TimeDelta::days(1)));
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, MissingCandidate>(
            "SELECT w.id, w.account_id, w.amount, w.currency, w.updated_at AS completed_at FROM withdrawals w
             WHERE w.status = 'completed' AND w.updated_at >= $1 AND w.updated_at < $2
               AND COALESCE((SELECT a.provider FROM provider_attempts a
                             WHERE a.account_id = w.account_id AND a.withdrawal_id = w.id
                             ORDER BY a.attempt_no DESC LIMIT 1), 'default') = $4
               AND NOT EXISTS (SELECT 1 FROM settlement_lines l
                               WHERE l.account_id = w.account_id AND l.withdrawal_id = w.id
                                 AND l.status IN ('paid', 'returned'))
               AND NOT EXISTS (SELECT 1 FROM settlement_exceptions e
                               WHERE e.account_id = w.account_id AND e.withdrawal_id = w.id
                                 AND e.kind = 'missing_from_report')
             ORDER BY w.updated_at, w.id LIMIT $3",
        )
        .bind(since)
        .bind(until)
        .bind(limit)
        .bind(provider)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// The operation keys of the provider's lines still waiting to be matched: a withdrawal one of
/// them names is not missing from the reports, only not judged yet.
pub async fn awaiting_keys(db: &Db, provider: &str) -> Result<Vec<String>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_scalar::<_, String>(
            "SELECT DISTINCT idempotency_key FROM settlement_lines WHERE provider = $1 AND result IS NULL",
        )
        .bind(provider)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// The dedupe key of a withdrawal's `missing_from_report` exception.
pub fn missing_key(withdrawal: WithdrawalId) -> String {
    format!("missing:{withdrawal}")
}

/// Filters of the exceptions list.
#[derive(Debug, Clone, Default)]
pub struct ExceptionFilter {
    pub kind: Option<ExceptionKind>,
    /// One provider's.
    pub provider: Option<String>,
    pub status: Option<ExceptionStatus>,
    /// Rows after this (opened_at, id), oldest first.
    pub after: Option<(DbTime, SettlementExceptionId)>,
    pub limit: i64,
}

/// Exceptions, oldest first (the oldest open one is the most urgent).
pub async fn list_exceptions(db: &Db, f: &ExceptionFilter) -> Result<Vec<ExceptionRow>> {
    let (after_at, after_id) = f.after.map_or((None, None), |(at, id)| (Some(at), Some(id)));
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ExceptionRow>(&format!(
            "SELECT {EXCEPTION_COLUMNS} FROM settlement_exceptions
             WHERE ($1 IS NULL OR kind = $1) AND ($2 IS NULL OR status = $2)
               AND ($3 IS NULL OR opened_at > $3 OR (opened_at = $3 AND id > $4))
               AND ($6 IS NULL OR provider = $6)
             ORDER BY opened_at, id LIMIT $5"
        ))
        .bind(f.kind)
        .bind(f.status)
        .bind(after_at)
        .bind(after_id)
        .bind(f.limit)
        .bind(f.provider.as_deref())
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// An exception by its id alone, whatever its account (operators name exceptions by id).
pub async fn get_exception(db: &Db, id: SettlementExceptionId) -> Result<Option<ExceptionRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ExceptionRow>(&format!(
            "SELECT {EXCEPTION_COLUMNS} FROM settlement_exceptions WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
    }))
}

/// A withdrawal's exceptions, oldest first.
pub async fn exceptions_for_withdrawal(db: &Db, withdrawal: WithdrawalKey) -> Result<Vec<ExceptionRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ExceptionRow>(&format!(
            "SELECT {EXCEPTION_COLUMNS} FROM settlement_exceptions WHERE account_id = $1 AND withdrawal_id = $2
             ORDER BY opened_at, id"
        ))
        .bind(withdrawal.account)
        .bind(withdrawal.id)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Resolves an open exception; false when it was no longer open (someone resolved it first).
pub async fn resolve_exception(
    tx: &mut Tx,
    exception: &ExceptionRow,
    by: OperatorId,
    resolution: Resolution,
    note: &str,
) -> Result<bool> {
    let updated = with_conn!(tx, |conn| {
        sqlx::query(
            "UPDATE settlement_exceptions SET status = 'resolved', resolved_at = $1, resolved_by = $2,
                    resolution = $3, resolution_note = $4
             WHERE account_id = $5 AND id = $6 AND status = 'open'",
        )
        .bind(DbTime::now())
        .bind(by)
        .bind(resolution)
        .bind(crate::redact::text(note))
        .bind(exception.account_id)
        .bind(exception.id)
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    Ok(updated == 1)
}

/// Open exceptions per kind, with the oldest one's opening time (for the gauges and the alert).
pub async fn open_exception_counts(db: &Db) -> Result<Vec<(ExceptionKind, i64, DbTime)>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, (ExceptionKind, i64, DbTime)>(
            "SELECT kind, COUNT(*), MIN(opened_at) FROM settlement_exceptions WHERE status = 'open' GROUP BY kind",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}
