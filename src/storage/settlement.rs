//! Settlement reports, their lines and settlement exceptions (SPEC §14.1–14.2), as stored.
//!
//! A report version is stored once per digest (a unique column), with every line and the
//! differences from the version before; a line's `result` is NULL until matching decides it, and
//! is set once (`WHERE result IS NULL`), so two importers cannot both act on one line. An
//! exception is unique by its dedupe key (`line:<kind>:<line key>`, `missing:<withdrawal>`), so
//! finding the same difference again opens nothing new. Resolving records the operator's finding
//! and never touches money.

use std::collections::HashMap;

use serde_json::Value;
use sqlx::types::Json;
use sqlx::QueryBuilder;

use super::batch::{Arg, Sql, Writes, Written};
use super::{Db, DbTime, Result, Tx};
use crate::domain::settlement::{
    ExceptionKind, ExceptionStatus, ImportState, LineResult, LineStatus, Resolution, SettlementLine,
};
use crate::domain::{OperatorId, SettlementExceptionId, SettlementLineId, SettlementReportId, WithdrawalId};
use crate::{with_conn, with_read_conn};

/// One imported version of a day's report.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReportRow {
    pub id: SettlementReportId,
    /// `YYYY-MM-DD` (UTC).
    pub report_date: String,
    pub version: i32,
    pub digest: String,
    pub source: crate::domain::settlement::ReportSource,
    pub line_count: i32,
    /// `{"added": [keys], "removed": [keys], "changed": [keys]}` against the previous version.
    pub differences: Json<Value>,
    pub imported_by: String,
    pub imported_at: DbTime,
}

const REPORT_COLUMNS: &str =
    "id, report_date, version, digest, source, line_count, differences, imported_by, imported_at";

/// One stored line.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LineRow {
    pub id: SettlementLineId,
    pub report_id: SettlementReportId,
    pub line_no: i32,
    pub line_key: String,
    pub content_digest: String,
    pub transfer_id: String,
    pub idempotency_key: String,
    pub reference: String,
    pub amount_minor: i64,
    pub currency: String,
    pub fee_minor: i64,
    pub status: LineStatus,
    pub event_at: DbTime,
    pub withdrawal_id: Option<WithdrawalId>,
    pub result: Option<LineResult>,
    /// `completed`, `failed` or `return_credited`: what matching applied from this line.
    pub applied: Option<crate::domain::settlement::LineApplied>,
    pub evidence: Option<Json<Value>>,
    pub matched_at: Option<DbTime>,
}

const LINE_COLUMNS: &str =
    "id, report_id, line_no, line_key, content_digest, transfer_id, idempotency_key, reference, \
                            amount_minor, currency, fee_minor, status, event_at, withdrawal_id, result, applied, \
                            evidence, matched_at";

/// A settlement exception.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ExceptionRow {
    pub id: SettlementExceptionId,
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

const EXCEPTION_COLUMNS: &str = "id, kind, status, dedupe_key, withdrawal_id, line_id, report_date, transfer_id, \
                                 detail, evidence, opened_at, resolved_at, resolved_by, resolution, resolution_note";

/// Lines per insert statement: 18 binds each, well under SQLite's and PostgreSQL's limits.
const LINES_PER_INSERT: usize = 500;

/// The report version with this digest, if it was imported.
pub async fn report_by_digest(db: &Db, digest: &str) -> Result<Option<ReportRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ReportRow>(&format!("SELECT {REPORT_COLUMNS} FROM settlement_reports WHERE digest = $1"))
            .bind(digest)
            .fetch_optional(&mut *conn)
            .await?
    }))
}

/// The latest version of a day's report, read in `tx`.
pub async fn latest_report(tx: &mut Tx, date: &str) -> Result<Option<ReportRow>> {
    Ok(with_conn!(tx, |conn| {
        sqlx::query_as::<_, ReportRow>(&format!(
            "SELECT {REPORT_COLUMNS} FROM settlement_reports WHERE report_date = $1 ORDER BY version DESC LIMIT 1"
        ))
        .bind(date)
        .fetch_optional(&mut *conn)
        .await?
    }))
}

/// Imported report versions, newest first; one day's when `date` is given.
pub async fn list_reports(db: &Db, date: Option<&str>, limit: i64) -> Result<Vec<ReportRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ReportRow>(&format!(
            "SELECT {REPORT_COLUMNS} FROM settlement_reports WHERE ($1 IS NULL OR report_date = $1)
             ORDER BY report_date DESC, version DESC LIMIT $2"
        ))
        .bind(date)
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// `(line key, content digest)` of every line of every version of a day's report, read in `tx`.
pub async fn line_keys_of_day(tx: &mut Tx, date: &str) -> Result<Vec<(String, String, SettlementReportId)>> {
    Ok(with_conn!(tx, |conn| {
        sqlx::query_as::<_, (String, String, SettlementReportId)>(
            "SELECT l.line_key, l.content_digest, l.report_id FROM settlement_lines l
             JOIN settlement_reports r ON r.id = l.report_id WHERE r.report_date = $1",
        )
        .bind(date)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Stores a report version. False when its digest is already stored (a concurrent import won).
pub async fn insert_report(tx: &mut Tx, r: &ReportRow) -> Result<bool> {
    let inserted = with_conn!(tx, |conn| {
        sqlx::query(&format!(
            "INSERT INTO settlement_reports ({REPORT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
             ON CONFLICT (digest) DO NOTHING"
        ))
        .bind(r.id)
        .bind(&r.report_date)
        .bind(r.version)
        .bind(&r.digest)
        .bind(r.source)
        .bind(r.line_count)
        .bind(&r.differences)
        .bind(&r.imported_by)
        .bind(r.imported_at)
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    Ok(inserted == 1)
}

/// A line to store, with what is already known about it (`seen_before` lines need no matching).
pub struct NewLine<'a> {
    pub line: &'a SettlementLine,
    pub result: Option<LineResult>,
}

/// Stores a version's lines, set-based: one statement per [`LINES_PER_INSERT`] lines.
pub async fn insert_lines(tx: &mut Tx, report: SettlementReportId, lines: &[NewLine<'_>]) -> Result<()> {
    let now = DbTime::now();
    for chunk in lines.chunks(LINES_PER_INSERT) {
        with_conn!(tx, |conn| {
            let mut query = QueryBuilder::new(format!("INSERT INTO settlement_lines ({LINE_COLUMNS}) "));
            query.push_values(chunk, |mut row, new| {
                let l = new.line;
                row.push_bind(SettlementLineId::new())
                    .push_bind(report)
                    .push_bind(i32::try_from(l.line).unwrap_or(i32::MAX))
                    .push_bind(l.key())
                    .push_bind(l.content_digest())
                    .push_bind(l.transfer_id.clone())
                    .push_bind(l.idempotency_key.clone())
                    .push_bind(l.reference.clone())
                    .push_bind(l.amount.to_minor())
                    .push_bind(l.amount.currency().code().to_owned())
                    .push_bind(l.fee_minor)
                    .push_bind(l.status.as_str())
                    .push_bind(DbTime(l.event_at))
                    .push_bind(None::<WithdrawalId>)
                    .push_bind(new.result)
                    .push_bind(None::<String>)
                    .push_bind(None::<Json<Value>>)
                    .push_bind(new.result.map(|_| now));
            });
            query.build().execute(&mut *conn).await?;
        });
    }
    Ok(())
}

/// Lines of any version of a day's report still to be matched (or waiting for the provider's
/// confirmation), in version and report order.
pub async fn unmatched_lines_of_day(db: &Db, date: &str) -> Result<Vec<LineRow>> {
    let columns = LINE_COLUMNS.split(", ").map(|c| format!("l.{c}")).collect::<Vec<_>>().join(", ");
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, LineRow>(&format!(
            "SELECT {columns} FROM settlement_lines l JOIN settlement_reports r ON r.id = l.report_id
             WHERE r.report_date = $1 AND l.result IS NULL ORDER BY r.version, l.line_no"
        ))
        .bind(date)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Days with lines still undecided (the daily run tries them again), oldest first.
pub async fn days_awaiting(db: &Db) -> Result<Vec<String>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_scalar::<_, String>(
            "SELECT DISTINCT r.report_date FROM settlement_lines l JOIN settlement_reports r ON r.id = l.report_id
             WHERE l.result IS NULL ORDER BY r.report_date LIMIT 31",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Whether any version of a day's report is stored, read in `tx`.
pub async fn has_report(tx: &mut Tx, date: &str) -> Result<bool> {
    Ok(with_conn!(tx, |conn| {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM settlement_reports WHERE report_date = $1")
            .bind(date)
            .fetch_one(&mut *conn)
            .await?
    }) > 0)
}

/// Every line matched to a withdrawal, oldest event first (its settlement evidence).
pub async fn lines_for_withdrawal(db: &Db, withdrawal: WithdrawalId) -> Result<Vec<LineRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, LineRow>(&format!(
            "SELECT {LINE_COLUMNS} FROM settlement_lines WHERE withdrawal_id = $1 ORDER BY event_at, line_no"
        ))
        .bind(withdrawal)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// What matching decided for one line.
pub struct LineDecision<'a> {
    pub withdrawal_id: Option<WithdrawalId>,
    pub result: LineResult,
    pub applied: Option<crate::domain::settlement::LineApplied>,
    pub evidence: &'a crate::domain::LineEvidence,
}

/// Records a line's result, once (`WHERE result IS NULL`), as a write of a larger batch: it
/// touches no row when another import decided the line first.
pub fn decide_line_in(writes: &mut Writes, line: SettlementLineId, d: &LineDecision<'_>) -> Written {
    writes.push(
        Sql::new("UPDATE settlement_lines SET withdrawal_id = ")
            .bind(d.withdrawal_id.map(|w| w.0))
            .sql(", result = ")
            .bind(d.result.as_str())
            .sql(", applied = ")
            .bind(d.applied.map(|a| a.as_str()))
            .sql(", evidence = ")
            .bind(d.evidence.to_json())
            .sql(", matched_at = ")
            .bind(DbTime::now())
            .sql(" WHERE id = ")
            .bind(line.0)
            .sql(" AND result IS NULL"),
    )
}

/// [`decide_line_in`] on its own: false when another import decided the line first (then the
/// caller rolls back whatever it did for the line).
pub async fn decide_line(tx: &mut Tx, line: SettlementLineId, d: &LineDecision<'_>) -> Result<bool> {
    let mut writes = Writes::new();
    let decided = decide_line_in(&mut writes, line, d);
    Ok(writes.run(tx).await?.applied(decided))
}

/// An exception to open.
pub struct NewException<'a> {
    pub kind: ExceptionKind,
    pub dedupe_key: String,
    pub withdrawal_id: Option<WithdrawalId>,
    pub line_id: Option<SettlementLineId>,
    pub report_date: Option<&'a str>,
    pub transfer_id: Option<&'a str>,
    pub detail: &'a str,
    pub evidence: &'a Value,
}

/// Opens an exception as a write of a larger batch: it touches no row when the same one (by
/// dedupe key) already exists.
pub fn open_exception_in(writes: &mut Writes, e: &NewException<'_>) -> Written {
    writes.push(
        Sql::new(
            "INSERT INTO settlement_exceptions (id, kind, dedupe_key, withdrawal_id, line_id, report_date,
                                                transfer_id, detail, evidence, opened_at, status)
             VALUES (",
        )
        .binds([
            Arg::Uuid(SettlementExceptionId::new().0),
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
        .sql(", 'open') ON CONFLICT (dedupe_key) DO NOTHING"),
    )
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
    pub amount: i64,
    pub currency: String,
    pub completed_at: DbTime,
}

/// Completed withdrawals that no imported line shows `paid` (or `returned`), completed between
/// the first imported report's day and the end of the last one's, and before `cutoff` (now minus
/// the grace days), that have no `missing_from_report` exception yet. At most `limit`, oldest
/// first.
pub async fn missing_from_reports(db: &Db, cutoff: DbTime, limit: i64) -> Result<Vec<MissingCandidate>> {
    let (first_day, last_day) = with_read_conn!(db, |conn| {
        sqlx::query_as::<_, (Option<String>, Option<String>)>(
            "SELECT MIN(report_date), MAX(report_date) FROM settlement_reports",
        )
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
            "SELECT w.id, w.amount, w.currency, w.updated_at AS completed_at FROM withdrawals w
             WHERE w.status = 'completed' AND w.updated_at >= $1 AND w.updated_at < $2
               AND NOT EXISTS (SELECT 1 FROM settlement_lines l
                               WHERE l.withdrawal_id = w.id AND l.status IN ('paid', 'returned'))
               AND NOT EXISTS (SELECT 1 FROM settlement_exceptions e
                               WHERE e.withdrawal_id = w.id AND e.kind = 'missing_from_report')
             ORDER BY w.updated_at, w.id LIMIT $3",
        )
        .bind(since)
        .bind(until)
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// The operation keys of lines still waiting to be matched: a withdrawal one of them names is not
/// missing from the reports, only not judged yet.
pub async fn awaiting_keys(db: &Db) -> Result<Vec<String>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_scalar::<_, String>("SELECT DISTINCT idempotency_key FROM settlement_lines WHERE result IS NULL")
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
             ORDER BY opened_at, id LIMIT $5"
        ))
        .bind(f.kind)
        .bind(f.status)
        .bind(after_at)
        .bind(after_id)
        .bind(f.limit)
        .fetch_all(&mut *conn)
        .await?
    }))
}

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
pub async fn exceptions_for_withdrawal(db: &Db, withdrawal: WithdrawalId) -> Result<Vec<ExceptionRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ExceptionRow>(&format!(
            "SELECT {EXCEPTION_COLUMNS} FROM settlement_exceptions WHERE withdrawal_id = $1 ORDER BY opened_at, id"
        ))
        .bind(withdrawal)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Resolves an open exception; false when it was no longer open (someone resolved it first).
pub async fn resolve_exception(
    tx: &mut Tx,
    id: SettlementExceptionId,
    by: OperatorId,
    resolution: Resolution,
    note: &str,
) -> Result<bool> {
    let updated = with_conn!(tx, |conn| {
        sqlx::query(
            "UPDATE settlement_exceptions SET status = 'resolved', resolved_at = $1, resolved_by = $2,
                    resolution = $3, resolution_note = $4
             WHERE id = $5 AND status = 'open'",
        )
        .bind(DbTime::now())
        .bind(by)
        .bind(resolution)
        .bind(crate::redact::text(note))
        .bind(id)
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

/// One currency's totals for a day, in minor units: ours and the report's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DayTotals {
    pub report_paid: i64,
    pub report_returned: i64,
    pub ours_paid: i64,
    pub ours_returned: i64,
}

/// A day's totals per currency (SPEC §14.4): the latest report version's `paid` and `returned`
/// lines against the withdrawals we hold completed that were paid that day (UTC: by the
/// provider's `paid` line when one was matched to it, else by our completion time) and the
/// returns we recorded as returned that day; lines of a transfer resolved `not_ours` are left
/// out. `None` when no report of that day was imported.
pub async fn day_totals(db: &Db, date: chrono::NaiveDate) -> Result<Option<HashMap<String, DayTotals>>> {
    let day = date.format("%Y-%m-%d").to_string();
    let start = DbTime(date.and_time(chrono::NaiveTime::MIN).and_utc());
    let end = start.plus(chrono::TimeDelta::days(1));
    let (report, ours, returns) = with_read_conn!(db, |conn| {
        let latest: Option<SettlementReportId> = sqlx::query_scalar(
            "SELECT id FROM settlement_reports WHERE report_date = $1 ORDER BY version DESC LIMIT 1",
        )
        .bind(&day)
        .fetch_optional(&mut *conn)
        .await?;
        let Some(latest) = latest else { return Ok(None) };
        // A transfer an operator found not ours (`unknown_transfer` resolved `not_ours`) is not
        // part of our books.
        let report: Vec<(String, LineStatus, i64)> = sqlx::query_as(
            "SELECT l.currency, l.status, CAST(SUM(l.amount_minor) AS BIGINT) FROM settlement_lines l
             WHERE l.report_id = $1 AND l.status IN ('paid', 'returned')
               AND NOT EXISTS (SELECT 1 FROM settlement_exceptions e
                               WHERE e.kind = 'unknown_transfer' AND e.resolution = 'not_ours'
                                 AND e.transfer_id = l.transfer_id)
             GROUP BY l.currency, l.status",
        )
        .bind(latest)
        .fetch_all(&mut *conn)
        .await?;
        // A withdrawal is paid on the day the provider's `paid` line says; without one, on the
        // day we completed it.
        let ours: Vec<(String, i64)> = sqlx::query_as(
            "SELECT w.currency, CAST(SUM(w.amount) AS BIGINT) FROM withdrawals w
             LEFT JOIN (SELECT withdrawal_id, MIN(event_at) AS paid_at FROM settlement_lines
                        WHERE status = 'paid' AND withdrawal_id IS NOT NULL GROUP BY withdrawal_id) p
               ON p.withdrawal_id = w.id
             WHERE w.status = 'completed'
               AND ((p.paid_at >= $1 AND p.paid_at < $2)
                    OR (p.paid_at IS NULL AND w.updated_at >= $1 AND w.updated_at < $2))
             GROUP BY w.currency",
        )
        .bind(start)
        .bind(end)
        .fetch_all(&mut *conn)
        .await?;
        let returns: Vec<(String, i64)> = sqlx::query_as(
            "SELECT currency, CAST(SUM(amount_minor) AS BIGINT) FROM payout_returns
             WHERE returned_at >= $1 AND returned_at < $2 GROUP BY currency",
        )
        .bind(start)
        .bind(end)
        .fetch_all(&mut *conn)
        .await?;
        (report, ours, returns)
    });
    let mut totals: HashMap<String, DayTotals> = HashMap::new();
    for (currency, status, sum) in report {
        let t = totals.entry(currency).or_default();
        if status == LineStatus::Paid {
            t.report_paid = sum;
        } else {
            t.report_returned = sum;
        }
    }
    for (currency, sum) in ours {
        totals.entry(currency).or_default().ours_paid = sum;
    }
    for (currency, sum) in returns {
        totals.entry(currency).or_default().ours_returned = sum;
    }
    Ok(Some(totals))
}

/// An import as stored (its report's bytes aside: [`import_bytes`]).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ImportRow {
    pub id: uuid::Uuid,
    pub state: ImportState,
    pub report_date: String,
    pub source: crate::domain::settlement::ReportSource,
    pub digest: String,
    pub line_count: i32,
    pub requested_by: OperatorId,
    /// The audit row the request prepared (operator, action, target, parameters).
    pub audit: Json<super::audit::PreparedAudit>,
    /// The job's summary, once done.
    pub summary: Option<Json<Value>>,
    pub error: Option<String>,
    pub created_at: DbTime,
    pub finished_at: Option<DbTime>,
}

const IMPORT_COLUMNS: &str =
    "id, state, report_date, source, digest, line_count, requested_by, audit, summary, error, created_at, finished_at";

/// Stores an accepted import, queued, with its report's bytes (in the transaction that enqueues
/// its job).
pub async fn insert_import(tx: &mut Tx, row: &ImportRow, report: &[u8]) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query(&format!(
            "INSERT INTO settlement_imports ({IMPORT_COLUMNS}, report)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
        ))
        .bind(row.id)
        .bind(row.state)
        .bind(&row.report_date)
        .bind(row.source)
        .bind(&row.digest)
        .bind(row.line_count)
        .bind(row.requested_by)
        .bind(&row.audit)
        .bind(&row.summary)
        .bind(&row.error)
        .bind(row.created_at)
        .bind(row.finished_at)
        .bind(report)
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    Ok(())
}

/// One import.
pub async fn get_import(db: &Db, id: uuid::Uuid) -> Result<Option<ImportRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ImportRow>(&format!("SELECT {IMPORT_COLUMNS} FROM settlement_imports WHERE id = $1"))
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?
    }))
}

/// Imports, newest first.
pub async fn list_imports(db: &Db, limit: i64) -> Result<Vec<ImportRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ImportRow>(&format!(
            "SELECT {IMPORT_COLUMNS} FROM settlement_imports ORDER BY created_at DESC, id DESC LIMIT $1"
        ))
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// The report's bytes an import stored.
pub async fn import_bytes(db: &Db, id: uuid::Uuid) -> Result<Option<Vec<u8>>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_scalar::<_, Vec<u8>>("SELECT report FROM settlement_imports WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?
    }))
}

/// Marks a queued import `running` (its job started); a finished one is left as it is.
pub async fn start_import(db: &Db, id: uuid::Uuid) -> Result<()> {
    let mut tx = db.begin().await?;
    with_conn!(tx, |conn| {
        sqlx::query("UPDATE settlement_imports SET state = 'running' WHERE id = $1 AND state = 'queued'")
            .bind(id)
            .execute(&mut *conn)
            .await?
            .rows_affected()
    });
    tx.commit().await
}

/// Finishes an import (`done` with its summary, or `failed` with why), once: false when it was
/// already finished (a re-run of its job), and then nothing changes.
pub async fn finish_import(
    tx: &mut Tx,
    id: uuid::Uuid,
    state: ImportState,
    summary: Option<&Value>,
    error: Option<&str>,
) -> Result<bool> {
    let done = with_conn!(tx, |conn| {
        sqlx::query(
            "UPDATE settlement_imports SET state = $2, summary = $3, error = $4, finished_at = $5
             WHERE id = $1 AND state IN ('queued', 'running')",
        )
        .bind(id)
        .bind(state)
        .bind(summary.map(Json))
        .bind(error)
        .bind(DbTime::now())
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    Ok(done == 1)
}

/// How far matching has got with the report of `digest`: (lines stored, lines decided, lines that
/// opened an exception). Zeros while the report is not stored yet.
pub async fn import_progress(db: &Db, digest: &str) -> Result<(i64, i64, i64)> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, (i64, i64, i64)>(
            "SELECT COUNT(l.id), COUNT(l.result),
                    (SELECT COUNT(*) FROM settlement_exceptions e
                       JOIN settlement_lines l2 ON l2.id = e.line_id
                       JOIN settlement_reports r2 ON r2.id = l2.report_id
                      WHERE r2.digest = $1)
               FROM settlement_lines l JOIN settlement_reports r ON r.id = l.report_id
              WHERE r.digest = $1",
        )
        .bind(digest)
        .fetch_one(&mut *conn)
        .await?
    }))
}
