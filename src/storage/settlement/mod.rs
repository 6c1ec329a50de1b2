//! Settlement reports, their lines and settlement exceptions (SPEC §14.1–14.2), as stored.
//!
//! Reports are per provider (SPEC §16): a report, its lines and its exceptions name the provider
//! the report came from, and every read of a day's reports or lines is one provider's. A report
//! version is stored once per (provider, day, digest), with every line and the differences from the
//! provider's version before; a line's `result` is NULL until matching decides it, and
//! is set once (`WHERE result IS NULL`), so two importers cannot both act on one line. An
//! exception is unique by its dedupe key (`line:<kind>:<line key>`, `missing:<withdrawal>`), so
//! finding the same difference again opens nothing new. Resolving records the operator's finding
//! and never touches money.
//!
//! A line belongs to the account of the withdrawal its operation key names, resolved when it is
//! imported (the system account when it names none of ours), and an exception to its
//! withdrawal's or line's account: every statement about one line or exception names it (README
//! "Scaling"). A day's lines are read across accounts, by their report.

use std::collections::HashMap;

use serde_json::Value;
use sqlx::types::Json;
use sqlx::QueryBuilder;

use super::batch::{Sql, Writes, Written};
use super::{Db, DbTime, Result, Tx};
use crate::domain::settlement::{LineResult, LineStatus, SettlementLine};
use crate::domain::{AccountId, SettlementLineId, SettlementReportId, WithdrawalId, WithdrawalKey};
use crate::{with_conn, with_read_conn};

mod exceptions;
mod imports;
mod totals;

pub use exceptions::*;
pub use imports::*;
pub use totals::*;

/// One imported version of a provider's report of a day.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReportRow {
    pub id: SettlementReportId,
    /// The provider the report came from (`default` for the lone `PROVIDER_URL` and every report
    /// imported before providers were named).
    pub provider: String,
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
    "id, provider, report_date, version, digest, source, line_count, differences, imported_by, imported_at";

/// One stored line.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LineRow {
    pub id: SettlementLineId,
    /// The account of the withdrawal its key names, or the system account.
    pub account_id: AccountId,
    pub report_id: SettlementReportId,
    /// Its report's provider.
    pub provider: String,
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
    "id, account_id, report_id, provider, line_no, line_key, content_digest, transfer_id, idempotency_key, reference, \
                            amount_minor, currency, fee_minor, status, event_at, withdrawal_id, result, applied, \
                            evidence, matched_at";

/// Lines per insert statement: 20 binds each, well under SQLite's and PostgreSQL's limits.
const LINES_PER_INSERT: usize = 500;

/// The version of the provider's report of `date` with this digest, if it was imported. (Two days'
/// reports may have the same bytes: a day with no line is the header alone.)
pub async fn report_by_digest(db: &Db, provider: &str, date: &str, digest: &str) -> Result<Option<ReportRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ReportRow>(&format!(
            "SELECT {REPORT_COLUMNS} FROM settlement_reports WHERE provider = $1 AND report_date = $2 AND digest = $3"
        ))
        .bind(provider)
        .bind(date)
        .bind(digest)
        .fetch_optional(&mut *conn)
        .await?
    }))
}

/// The latest version of the provider's report of a day, read in `tx`.
pub async fn latest_report(tx: &mut Tx, provider: &str, date: &str) -> Result<Option<ReportRow>> {
    Ok(with_conn!(tx, |conn| {
        sqlx::query_as::<_, ReportRow>(&format!(
            "SELECT {REPORT_COLUMNS} FROM settlement_reports WHERE provider = $1 AND report_date = $2
             ORDER BY version DESC LIMIT 1"
        ))
        .bind(provider)
        .bind(date)
        .fetch_optional(&mut *conn)
        .await?
    }))
}

/// Imported report versions, newest first; one provider's and one day's when they are given.
pub async fn list_reports(db: &Db, provider: Option<&str>, date: Option<&str>, limit: i64) -> Result<Vec<ReportRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ReportRow>(&format!(
            "SELECT {REPORT_COLUMNS} FROM settlement_reports
             WHERE ($1 IS NULL OR provider = $1) AND ($2 IS NULL OR report_date = $2)
             ORDER BY report_date DESC, provider, version DESC LIMIT $3"
        ))
        .bind(provider)
        .bind(date)
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// `(line key, content digest)` of every line of every version of the provider's report of a day,
/// read in `tx`.
pub async fn line_keys_of_day(
    tx: &mut Tx,
    provider: &str,
    date: &str,
) -> Result<Vec<(String, String, SettlementReportId)>> {
    Ok(with_conn!(tx, |conn| {
        sqlx::query_as::<_, (String, String, SettlementReportId)>(
            "SELECT l.line_key, l.content_digest, l.report_id FROM settlement_lines l
             JOIN settlement_reports r ON r.id = l.report_id WHERE r.provider = $1 AND r.report_date = $2",
        )
        .bind(provider)
        .bind(date)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Stores a report version. False when the provider's report of this day and digest is already
/// stored (a concurrent import won).
pub async fn insert_report(tx: &mut Tx, r: &ReportRow) -> Result<bool> {
    let inserted = with_conn!(tx, |conn| {
        sqlx::query(&format!(
            "INSERT INTO settlement_reports ({REPORT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
             ON CONFLICT (provider, report_date, digest) DO NOTHING"
        ))
        .bind(r.id)
        .bind(&r.provider)
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
    /// The account of the withdrawal the line's key names, else [`AccountId::SYSTEM`].
    pub account: AccountId,
    pub result: Option<LineResult>,
}

/// Stores a version's lines (of `provider`'s report), set-based: one statement per
/// [`LINES_PER_INSERT`] lines.
pub async fn insert_lines(
    tx: &mut Tx,
    report: SettlementReportId,
    provider: &str,
    lines: &[NewLine<'_>],
) -> Result<()> {
    let now = DbTime::now();
    for chunk in lines.chunks(LINES_PER_INSERT) {
        with_conn!(tx, |conn| {
            let mut query = QueryBuilder::new(format!("INSERT INTO settlement_lines ({LINE_COLUMNS}) "));
            query.push_values(chunk, |mut row, new| {
                let l = new.line;
                row.push_bind(SettlementLineId::new())
                    .push_bind(new.account)
                    .push_bind(report)
                    .push_bind(provider.to_owned())
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

/// Lines of any version of the provider's report of a day still to be matched (or waiting for
/// the provider's confirmation), in version and report order.
pub async fn unmatched_lines_of_day(db: &Db, provider: &str, date: &str) -> Result<Vec<LineRow>> {
    let columns = LINE_COLUMNS.split(", ").map(|c| format!("l.{c}")).collect::<Vec<_>>().join(", ");
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, LineRow>(&format!(
            "SELECT {columns} FROM settlement_lines l JOIN settlement_reports r ON r.id = l.report_id
             WHERE r.provider = $1 AND r.report_date = $2 AND l.result IS NULL ORDER BY r.version, l.line_no"
        ))
        .bind(provider)
        .bind(date)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Days of the provider's reports with lines still undecided (its daily run tries them again),
/// oldest first.
pub async fn days_awaiting(db: &Db, provider: &str) -> Result<Vec<String>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_scalar::<_, String>(
            "SELECT DISTINCT r.report_date FROM settlement_lines l JOIN settlement_reports r ON r.id = l.report_id
             WHERE r.provider = $1 AND l.result IS NULL ORDER BY r.report_date LIMIT 31",
        )
        .bind(provider)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Whether any version of the provider's report of a day is stored, read in `tx`.
pub async fn has_report(tx: &mut Tx, provider: &str, date: &str) -> Result<bool> {
    Ok(with_conn!(tx, |conn| {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM settlement_reports WHERE provider = $1 AND report_date = $2")
            .bind(provider)
            .bind(date)
            .fetch_one(&mut *conn)
            .await?
    }) > 0)
}

/// Withdrawals read per query by [`latest_providers`].
const KEYS_PER_QUERY: usize = 500;

/// The provider of each withdrawal's latest attempt (`provider_attempts.provider`: where it was
/// sent last, so where it may have been paid — SPEC §16), for those of `keys` that have one; a
/// withdrawal never attempted is absent. One query per 500 withdrawals.
pub async fn latest_providers(db: &Db, keys: &[WithdrawalKey]) -> Result<HashMap<WithdrawalKey, String>> {
    let mut latest: HashMap<WithdrawalKey, (i64, String)> = HashMap::new();
    for chunk in keys.chunks(KEYS_PER_QUERY) {
        let rows: Vec<(AccountId, WithdrawalId, i64, String)> = with_read_conn!(db, |conn| {
            let mut query = QueryBuilder::new(
                "SELECT account_id, withdrawal_id, attempt_no, provider FROM provider_attempts WHERE ",
            );
            super::push_keys_in(&mut query, "(account_id, withdrawal_id)", chunk.iter().map(|k| (k.account.0, k.id.0)));
            query.build_query_as().fetch_all(&mut *conn).await?
        });
        for (account, id, attempt_no, provider) in rows {
            let entry = latest.entry(WithdrawalKey { account, id }).or_insert((attempt_no, provider.clone()));
            if attempt_no > entry.0 {
                *entry = (attempt_no, provider);
            }
        }
    }
    Ok(latest.into_iter().map(|(key, (_, provider))| (key, provider)).collect())
}

/// Every line matched to a withdrawal, oldest event first (its settlement evidence).
pub async fn lines_for_withdrawal(db: &Db, withdrawal: WithdrawalKey) -> Result<Vec<LineRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, LineRow>(&format!(
            "SELECT {LINE_COLUMNS} FROM settlement_lines WHERE account_id = $1 AND withdrawal_id = $2
             ORDER BY event_at, line_no"
        ))
        .bind(withdrawal.account)
        .bind(withdrawal.id)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// What matching decided for one line.
pub struct LineDecision<'a> {
    /// The withdrawal it matched: one of the line's own account.
    pub withdrawal_id: Option<WithdrawalId>,
    pub result: LineResult,
    pub applied: Option<crate::domain::settlement::LineApplied>,
    pub evidence: &'a crate::domain::LineEvidence,
}

/// Records a line's result, once (`WHERE result IS NULL`), as a write of a larger batch: it
/// touches no row when another import decided the line first.
pub fn decide_line_in(writes: &mut Writes, line: &LineRow, d: &LineDecision<'_>) -> Written {
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
            .sql(" WHERE account_id = ")
            .bind(line.account_id.0)
            .sql(" AND id = ")
            .bind(line.id.0)
            .sql(" AND result IS NULL"),
    )
}

/// [`decide_line_in`] on its own: false when another import decided the line first (then the
/// caller rolls back whatever it did for the line).
pub async fn decide_line(tx: &mut Tx, line: &LineRow, d: &LineDecision<'_>) -> Result<bool> {
    let mut writes = Writes::new();
    let decided = decide_line_in(&mut writes, line, d);
    Ok(writes.run(tx).await?.applied(decided))
}
