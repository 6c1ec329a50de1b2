//! Importing a report (SPEC §14.1): fetched or uploaded, parsed and checked whole first (a
//! malformed one stores and applies nothing), stored as a new version of its provider's report of
//! the day with its differences.

use std::collections::{HashMap, HashSet};

use chrono::{NaiveDate, TimeDelta, Utc};
use serde_json::json;

use crate::config::SettlementSettings;
use crate::domain::settlement::{parse_report_within, LineResult, ReportError, SettlementReport};
use crate::provider::{Gateway, ReportFetch};
use crate::storage::settlement::{self as store, NewLine, ReportRow};
use crate::storage::{Db, DbTime};

use super::matching::match_day;
use super::missing::sweep_missing;
use super::{Differences, ImportError, ImportSummary, ReportProvider, ReportSource};

/// Fetches a day's report from the provider behind `gateway`.
pub async fn fetch(gateway: &Gateway, date: NaiveDate) -> Result<Vec<u8>, ReportFetch> {
    gateway.settlement_report(date, &format!("settlement-import:{}:{date}", gateway.name)).await
}

/// Checks a report before anything of it is stored: its size and line count within the limits
/// (`SETTLEMENT_MAX_REPORT_BYTES`, `SETTLEMENT_MAX_REPORT_LINES`), well-formed, of one day (the
/// one asked, if any), and that day no later than tomorrow (UTC). Returns the day and the report.
pub fn check(
    settings: &SettlementSettings,
    date: Option<NaiveDate>,
    bytes: &[u8],
) -> Result<(NaiveDate, SettlementReport), ImportError> {
    if bytes.len() > settings.max_report_bytes {
        return Err(ImportError::Refused(ReportError {
            line: 0,
            reason: format!(
                "the report has {} bytes, more than the {} allowed",
                bytes.len(),
                settings.max_report_bytes
            ),
        }));
    }
    let report = parse_report_within(bytes, settings.max_report_lines).map_err(ImportError::Refused)?;
    let date = match (date, report.day().map_err(ImportError::Refused)?) {
        (Some(asked), Some(lines)) if asked != lines => {
            let first = report.lines.iter().find(|l| l.event_at.date_naive() != asked).map_or(2, |l| l.line);
            return Err(ImportError::Refused(ReportError {
                line: first,
                reason: format!("happened on {lines}, not on the report's day {asked}"),
            }));
        }
        (Some(asked), _) => asked,
        (None, Some(lines)) => lines,
        (None, None) => return Err(ImportError::NoDay),
    };
    // A report of a day that has not begun anywhere yet is not the provider's: refused.
    let tomorrow = Utc::now().date_naive() + TimeDelta::days(1);
    if date > tomorrow {
        return Err(ImportError::Refused(ReportError {
            line: 0,
            reason: format!("the report's day {date} is after tomorrow ({tomorrow}, UTC)"),
        }));
    }
    Ok((date, report))
}

/// Imports one of `from`'s reports: stores it (or finds it stored), matches its lines to that
/// provider's withdrawals and sweeps for its completed withdrawals missing from its reports.
/// `date` is the report's day; a file may leave it to its lines. `from`'s gateway confirms safe
/// outcomes; without one they wait.
pub async fn import(
    db: &Db,
    from: ReportProvider<'_>,
    settings: &SettlementSettings,
    date: Option<NaiveDate>,
    bytes: &[u8],
    origin: ReportSource,
    imported_by: &str,
) -> Result<ImportSummary, ImportError> {
    let (date, report) = check(settings, date, bytes)?;
    let provider = from.name;
    let day = date.format("%Y-%m-%d").to_string();
    let (stored, already, seen_before, differences) =
        match store::report_by_digest(db, provider, &day, &report.digest).await? {
            Some(existing) => (existing, true, 0, Differences::default()),
            None => match store_version(db, provider, &report, date, origin, imported_by).await? {
                Some((row, seen, diff)) => (row, false, seen, diff),
                // A concurrent import stored the same bytes first.
                None => {
                    let row = store::report_by_digest(db, provider, &day, &report.digest).await?.ok_or_else(|| {
                        crate::storage::StorageError::corrupt("a report's digest conflicted but is not stored")
                    })?;
                    (row, true, 0, Differences::default())
                }
            },
        };
    let matching = match_day(db, from, &stored.report_date).await?;
    let missing_opened = sweep_missing(db, settings, provider).await?;
    let summary = ImportSummary {
        report_id: stored.id.0,
        provider: provider.to_owned(),
        date,
        version: stored.version,
        digest: stored.digest,
        source: stored.source,
        already_imported: already,
        lines: report.lines.len(),
        seen_before,
        differences,
        matching,
        missing_opened,
    };
    tracing::info!(
        provider, date = %summary.date, version = summary.version, already = summary.already_imported,
        exceptions = summary.matching.exceptions_opened, missing = summary.missing_opened, "settlement report imported"
    );
    Ok(summary)
}

/// Stores a new version of the provider's report of the day with its lines and differences (from
/// the provider's previous version), in one transaction. `None` when the same digest was stored
/// meanwhile.
async fn store_version(
    db: &Db,
    provider: &str,
    report: &SettlementReport,
    date: NaiveDate,
    origin: ReportSource,
    imported_by: &str,
) -> Result<Option<(ReportRow, usize, Differences)>, ImportError> {
    let day = date.format("%Y-%m-%d").to_string();
    // Each line lives with the account of the withdrawal its key names (one read by id per 500
    // lines); a key that names none of ours puts the line on the system account.
    let named: Vec<crate::domain::WithdrawalId> =
        report.lines.iter().filter_map(|l| l.idempotency_key.parse().ok()).collect();
    let accounts: HashMap<crate::domain::WithdrawalId, crate::domain::AccountId> =
        crate::storage::withdrawals::get_many(db, &named).await?.into_iter().map(|w| (w.id, w.account_id)).collect();
    let account_of = |line: &crate::domain::settlement::SettlementLine| {
        line.idempotency_key
            .parse()
            .ok()
            .and_then(|id| accounts.get(&id).copied())
            .unwrap_or(crate::domain::AccountId::SYSTEM)
    };
    let mut tx = db.begin().await?;
    let previous = store::latest_report(&mut tx, provider, &day).await?;
    let earlier = store::line_keys_of_day(&mut tx, provider, &day).await?;
    let seen: HashSet<(&str, &str)> = earlier.iter().map(|(k, d, _)| (k.as_str(), d.as_str())).collect();
    let before: HashMap<&str, &str> = earlier
        .iter()
        .filter(|(_, _, r)| previous.as_ref().is_some_and(|p| p.id == *r))
        .map(|(k, d, _)| (k.as_str(), d.as_str()))
        .collect();
    let keys: Vec<(String, String)> = report.lines.iter().map(|l| (l.key(), l.content_digest())).collect();
    let now: HashSet<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
    let mut diff = Differences::default();
    let mut changed_keys = Vec::new();
    let mut added_keys = Vec::new();
    for (key, digest) in &keys {
        match before.get(key.as_str()) {
            None => {
                diff.added += 1;
                added_keys.push(key.as_str());
            }
            Some(d) if d != digest => {
                diff.changed += 1;
                changed_keys.push(key.as_str());
            }
            Some(_) => {}
        }
    }
    let removed_keys: Vec<&str> = before.keys().filter(|k| !now.contains(**k)).copied().collect();
    diff.removed = removed_keys.len();
    const SHOWN: usize = 100;
    let differences = json!({
        "previous_version": previous.as_ref().map(|p| p.version),
        "added": diff.added, "removed": diff.removed, "changed": diff.changed,
        "added_keys": &added_keys[..added_keys.len().min(SHOWN)],
        "removed_keys": &removed_keys[..removed_keys.len().min(SHOWN)],
        "changed_keys": &changed_keys[..changed_keys.len().min(SHOWN)],
    });
    let row = ReportRow {
        id: crate::domain::SettlementReportId::new(),
        provider: provider.to_owned(),
        report_date: day,
        version: previous.as_ref().map_or(1, |p| p.version + 1),
        digest: report.digest.clone(),
        source: origin,
        line_count: i32::try_from(report.lines.len()).unwrap_or(i32::MAX),
        differences: sqlx::types::Json(differences),
        imported_by: imported_by.to_owned(),
        imported_at: DbTime::now(),
    };
    if !store::insert_report(&mut tx, &row).await? {
        return Ok(None);
    }
    let mut seen_before = 0;
    let lines: Vec<NewLine<'_>> = report
        .lines
        .iter()
        .zip(&keys)
        .map(|(line, (key, digest))| {
            let again = seen.contains(&(key.as_str(), digest.as_str()));
            seen_before += usize::from(again);
            NewLine { line, account: account_of(line), result: again.then_some(LineResult::SeenBefore) }
        })
        .collect();
    store::insert_lines(&mut tx, row.id, provider, &lines).await?;
    tx.commit().await?;
    Ok(Some((row, seen_before, diff)))
}
