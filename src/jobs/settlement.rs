//! Settlement reconciliation (SPEC §14): importing a provider's daily report, matching every line
//! to its withdrawal, and finding completed withdrawals no report shows paid.
//!
//! - **Import** ([`import`]): the report is parsed and checked whole first, so a malformed one
//!   stores and applies nothing. A report already stored (same digest) changes nothing; a
//!   corrected report of the same day becomes the next version with its differences (lines
//!   added, removed, changed by line key). A line identical to one of an earlier version is
//!   `seen_before` and not matched again.
//! - **Matching** ([`plan`], pure): each line is read as the provider's transfer and judged by the
//!   same [`Verdict`] reconciliation uses. Safe outcomes apply themselves through the same guarded
//!   transitions, but only once the provider's live record agrees (a lookup by the operation key,
//!   amount and currency checked): a `paid` line completes a withdrawal still `processing` or in
//!   `requires_review`, a `failed` line fails it, a `returned` line re-credits a `completed` one
//!   (§14.3). Every other result is a settlement exception. A line the provider could not confirm
//!   stays unmatched and is tried again by the next import or daily run.
//! - **Missing** ([`sweep_missing`]): a withdrawal completed here that no report shows `paid`
//!   within `SETTLEMENT_GRACE_DAYS` is a `missing_from_report` exception.
//! - **Daily job** ([`handle`], [`schedule_daily`]): the worker's sweep enqueues one
//!   `import_settlement` job per day (yesterday's report, after `SETTLEMENT_IMPORT_HOUR` UTC, and
//!   any of the week before never fetched); the
//!   job fetches, imports and matches, then matches again the lines of earlier days still waiting
//!   for the provider's confirmation; it retries an unavailable provider with backoff and
//!   dead-letters a refused report (`dependency_rejected`, `settlement_report_refused`).

use std::collections::{HashMap, HashSet};

use chrono::{NaiveDate, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::context::JobContext;
use super::retry::RetryDecision;
use crate::config::SettlementSettings;
use crate::dead_letter::Failure;
use crate::domain::job::{ImportSettlement, JobKind};
use crate::domain::settlement::{parse_report_within, ExceptionKind, LineResult, ReportError, SettlementReport};
use crate::domain::{Actor, Amount, Currency, Withdrawal, WithdrawalId, WithdrawalStatus};
use crate::provider::{Gateway, ReportFetch, Transfer, TransferStatus, Verdict};
use crate::storage::batch::Writes;
use crate::storage::jobs::{self as job_store, Finish};
use crate::storage::settlement::{self as store, LineDecision, LineRow, NewException, NewLine, ReportRow};
use crate::storage::withdrawals::{self as withdrawals, TransitionOutcome, TransitionRequest};
use crate::storage::{audit, returns, Db, DbTime, Tx};

/// Where a report came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Fetched from the provider's reports endpoint.
    Provider,
    /// A file an operator supplied.
    File,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Provider => "provider",
            Origin::File => "file",
        }
    }
}

/// Why an import stored nothing.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The report is malformed (or its lines are not of the day it claims): refused whole.
    #[error("report refused: {0}")]
    Refused(ReportError),
    /// A file with no lines names no day; say which with `--date`.
    #[error("the report has no lines: name its day")]
    NoDay,
    #[error(transparent)]
    Storage(#[from] crate::storage::StorageError),
}

/// How many of a version's lines differ from the version before.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Differences {
    pub added: usize,
    pub removed: usize,
    pub changed: usize,
}

/// What matching did with the lines it decided.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatchCounts {
    pub matched: usize,
    /// Withdrawals completed from a confirmed `paid` line.
    pub completed: usize,
    /// Withdrawals failed from a confirmed `failed` line.
    pub failed: usize,
    /// Returns re-credited (once each).
    pub returns_credited: usize,
    /// Returns already applied before.
    pub returns_already_applied: usize,
    pub exceptions_opened: usize,
    /// Lines the provider could not confirm yet: tried again by the next run.
    pub awaiting_confirmation: usize,
}

/// The answer of an import.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportSummary {
    pub report_id: uuid::Uuid,
    pub date: NaiveDate,
    pub version: i32,
    pub digest: String,
    pub source: String,
    /// This exact report was stored before: nothing new was stored.
    pub already_imported: bool,
    pub lines: usize,
    /// Lines identical to an earlier version's (not matched again).
    pub seen_before: usize,
    pub differences: Differences,
    pub matching: MatchCounts,
    /// `missing_from_report` exceptions the sweep opened.
    pub missing_opened: usize,
}

/// Fetches a day's report from the provider.
pub async fn fetch(gateway: &Gateway, date: NaiveDate) -> Result<Vec<u8>, ReportFetch> {
    gateway.settlement_report(date, &format!("settlement-import:{date}")).await
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

/// Imports one report: stores it (or finds it stored), matches its lines and sweeps for
/// completed withdrawals missing from the reports. `date` is the report's day; a file may leave
/// it to its lines. `gateway` confirms safe outcomes; without one they wait.
pub async fn import(
    db: &Db,
    gateway: Option<&Gateway>,
    settings: &SettlementSettings,
    date: Option<NaiveDate>,
    bytes: &[u8],
    origin: Origin,
    imported_by: &str,
) -> Result<ImportSummary, ImportError> {
    let (date, report) = check(settings, date, bytes)?;
    let (stored, already, seen_before, differences) = match store::report_by_digest(db, &report.digest).await? {
        Some(existing) => (existing, true, 0, Differences::default()),
        None => match store_version(db, &report, date, origin, imported_by).await? {
            Some((row, seen, diff)) => (row, false, seen, diff),
            // A concurrent import stored the same bytes first.
            None => {
                let row = store::report_by_digest(db, &report.digest).await?.ok_or_else(|| {
                    crate::storage::StorageError::corrupt("a report's digest conflicted but is not stored")
                })?;
                (row, true, 0, Differences::default())
            }
        },
    };
    let matching = match_day(db, gateway, &stored.report_date).await?;
    let missing_opened = sweep_missing(db, settings).await?;
    let summary = ImportSummary {
        report_id: stored.id.0,
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
        date = %summary.date, version = summary.version, already = summary.already_imported,
        exceptions = summary.matching.exceptions_opened, missing = summary.missing_opened, "settlement report imported"
    );
    Ok(summary)
}

/// Stores a new version of the day's report with its lines and differences, in one transaction.
/// `None` when the same digest was stored meanwhile.
async fn store_version(
    db: &Db,
    report: &SettlementReport,
    date: NaiveDate,
    origin: Origin,
    imported_by: &str,
) -> Result<Option<(ReportRow, usize, Differences)>, ImportError> {
    let day = date.format("%Y-%m-%d").to_string();
    let mut tx = db.begin().await?;
    let previous = store::latest_report(&mut tx, &day).await?;
    let earlier = store::line_keys_of_day(&mut tx, &day).await?;
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
        report_date: day,
        version: previous.as_ref().map_or(1, |p| p.version + 1),
        digest: report.digest.clone(),
        source: origin.as_str().to_owned(),
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
            NewLine { line, result: again.then_some(LineResult::SeenBefore) }
        })
        .collect();
    store::insert_lines(&mut tx, row.id, &lines).await?;
    tx.commit().await?;
    Ok(Some((row, seen_before, diff)))
}

/// Lines recorded per transaction when the report alone decides them.
const DECIDED_PER_BATCH: usize = 500;

/// Matches every line of the day still undecided (of any version): the withdrawals they name are
/// read in one query per 500, the lines the report alone decides (matched, exceptions) are
/// recorded in batches of [`DECIDED_PER_BATCH`] in one transaction each, and only the lines whose
/// safe outcome needs the provider's confirmation are taken one by one.
pub async fn match_day(db: &Db, gateway: Option<&Gateway>, day: &str) -> crate::storage::Result<MatchCounts> {
    let mut counts = MatchCounts::default();
    let lines = store::unmatched_lines_of_day(db, day).await?;
    let ids: Vec<WithdrawalId> = lines.iter().filter_map(|l| l.idempotency_key.parse().ok()).collect();
    let held: HashMap<WithdrawalId, Withdrawal> =
        withdrawals::get_many(db, &ids).await?.into_iter().map(|w| (w.id, w)).collect();
    let mut decided = Vec::new();
    let mut to_confirm = Vec::new();
    for line in &lines {
        let w = line.idempotency_key.parse::<WithdrawalId>().ok().and_then(|id| held.get(&id));
        let Some(transfer) = as_transfer(line) else {
            return Err(crate::storage::StorageError::corrupt(format!("settlement line {} is unreadable", line.id)));
        };
        let verdict = line_verdict(w, &transfer);
        let evidence = evidence(line, w, verdict.name(), None);
        match plan(w, &verdict) {
            Plan::Matched => decided.push(Decided { line, withdrawal: w.map(|w| w.id), exception: None, evidence }),
            Plan::Exception(kind, detail) => {
                decided.push(Decided::exception(line, w.map(|w| w.id), kind, detail, evidence))
            }
            Plan::Confirm(apply) => {
                if let Some(w) = w {
                    to_confirm.push((line, w, transfer, verdict.name(), apply));
                }
            }
        }
    }
    for batch in decided.chunks(DECIDED_PER_BATCH) {
        record(db, batch, &mut counts).await?;
    }
    for (line, w, transfer, verdict, apply) in to_confirm {
        confirm(db, gateway, line, w, transfer, verdict, apply, &mut counts).await?;
    }
    Ok(counts)
}

/// What a line asks for, judged on the report alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The line agrees with what we hold: nothing to do.
    Matched,
    /// A safe outcome, applied once the provider's live record agrees.
    Confirm(Apply),
    /// An exception for operators, with why.
    Exception(ExceptionKind, String),
}

/// The safe outcomes a line can apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apply {
    Complete,
    Fail,
    CreditReturn,
}

impl Apply {
    /// Does the provider's live verdict confirm this?
    fn confirmed_by(self, live: &Verdict) -> bool {
        match self {
            Apply::Complete => matches!(live, Verdict::Paid(_) | Verdict::Returned(_)),
            Apply::Fail => matches!(live, Verdict::Failed(_)),
            Apply::CreditReturn => matches!(live, Verdict::Returned(_)),
        }
    }

    /// The exception when the provider's record does not confirm the line.
    fn unconfirmed(self, live: &Verdict) -> (ExceptionKind, String) {
        let says = live.name();
        match self {
            Apply::Complete => {
                (ExceptionKind::StatusMismatch, format!("the report shows it paid; the provider's record says {says}"))
            }
            Apply::Fail => (
                ExceptionKind::StatusMismatch,
                format!("the report shows it failed; the provider's record says {says}"),
            ),
            Apply::CreditReturn => (
                ExceptionKind::Returned,
                format!("the report shows a return the provider's record does not (it says {says}): not credited"),
            ),
        }
    }
}

/// The decision on one line (SPEC §14.2), from the withdrawal under its operation key (if any)
/// and the line read as the provider's transfer. Pure.
pub fn plan(withdrawal: Option<&Withdrawal>, line: &Verdict) -> Plan {
    use WithdrawalStatus::{Completed, Failed, Pending, Processing, RequiresReview};
    let Some(w) = withdrawal else {
        return Plan::Exception(ExceptionKind::UnknownTransfer, "no withdrawal has this operation key".into());
    };
    let held = w.status;
    match line {
        Verdict::Mismatch(_, m) => Plan::Exception(
            ExceptionKind::AmountMismatch,
            format!("the report's {} {} from the withdrawal's", m.fields.join(", "), differ(m.fields.len())),
        ),
        Verdict::Paid(_) => match held {
            Completed => Plan::Matched,
            Processing | RequiresReview => Plan::Confirm(Apply::Complete),
            Failed | Pending => Plan::Exception(
                ExceptionKind::StatusMismatch,
                format!("the provider paid a withdrawal we hold as {held}"),
            ),
        },
        Verdict::Failed(_) => match held {
            Failed => Plan::Matched,
            Processing | RequiresReview => Plan::Confirm(Apply::Fail),
            Completed | Pending => Plan::Exception(
                ExceptionKind::StatusMismatch,
                format!("the provider failed a withdrawal we hold as {held}"),
            ),
        },
        Verdict::Returned(_) => match held {
            Completed => Plan::Confirm(Apply::CreditReturn),
            _ => Plan::Exception(
                ExceptionKind::Returned,
                format!("a return of a withdrawal we hold as {held}, never completed: not credited"),
            ),
        },
        other => Plan::Exception(ExceptionKind::StatusMismatch, format!("a report line read as {}", other.name())),
    }
}

fn differ(fields: usize) -> &'static str {
    if fields == 1 {
        "differs"
    } else {
        "differ"
    }
}

/// The line as the provider's transfer (what [`Verdict::of_transfer`] judges).
fn as_transfer(line: &LineRow) -> Option<Transfer> {
    let currency = Currency::parse(&line.currency).ok()?;
    let amount = Amount::from_minor(line.amount_minor, currency).ok()?;
    let status = match line.status.as_str() {
        "paid" => TransferStatus::Paid,
        "failed" => TransferStatus::Failed,
        "returned" => TransferStatus::Returned,
        _ => return None,
    };
    Some(Transfer {
        id: line.transfer_id.clone(),
        reference: Some(line.reference.clone()),
        amount: amount.value(),
        currency: line.currency.clone(),
        status,
        failure_code: None,
        return_code: None,
        created_at: None,
        updated_at: Some(line.event_at.0),
    })
}

/// The evidence of a line's match: the line itself, what we held, and the provider's live answer
/// when one was asked for.
fn evidence(line: &LineRow, withdrawal: Option<&Withdrawal>, verdict: &str, live: Option<Value>) -> Value {
    json!({
        "source": "settlement_report",
        "report_id": line.report_id,
        "line": line.line_no,
        "line_key": line.line_key,
        "report_line": {
            "transfer_id": line.transfer_id, "idempotency_key": line.idempotency_key, "reference": line.reference,
            "amount_minor": line.amount_minor, "currency": line.currency, "fee_minor": line.fee_minor,
            "status": line.status, "event_at": line.event_at.0,
        },
        "verdict": verdict,
        "ours": withdrawal.map(|w| json!({
            "withdrawal_id": w.id, "status": w.status, "amount": w.amount.value().to_string(),
            "currency": w.amount.currency().code(), "version": w.version,
        })),
        "provider_record": live,
        "matched_at": Utc::now(),
    })
}

/// The line as judged on the report: against the withdrawal under its key, or — with none to
/// check it against — named by its own status.
fn line_verdict(withdrawal: Option<&Withdrawal>, transfer: &Transfer) -> Verdict {
    match withdrawal {
        Some(w) => Verdict::of_transfer(w, transfer),
        None => match transfer.status {
            TransferStatus::Failed => Verdict::Failed(transfer.clone()),
            TransferStatus::Returned => Verdict::Returned(transfer.clone()),
            _ => Verdict::Paid(transfer.clone()),
        },
    }
}

/// A line's safe outcome, applied only once the provider's live record agrees; anything else is
/// an exception, and a provider that cannot answer leaves the line for the next run.
#[allow(clippy::too_many_arguments)]
async fn confirm(
    db: &Db,
    gateway: Option<&Gateway>,
    line: &LineRow,
    w: &Withdrawal,
    transfer: Transfer,
    line_verdict: &str,
    apply: Apply,
    counts: &mut MatchCounts,
) -> crate::storage::Result<()> {
    // The report is a day old: nothing moves money until the provider's record, asked now,
    // agrees (amount and currency checked by the verdict).
    let live = match gateway {
        Some(g) => match g.lookup(&w.id.to_string(), &format!("settlement:{}", line.report_id)).await {
            Ok(answer) => Verdict::of_lookup(w, &answer, false),
            Err(_) => Verdict::Unavailable("the provider breaker is open".into()),
        },
        None => Verdict::Unavailable("no provider is configured in this process".into()),
    };
    let live_evidence = live.evidence(w, Utc::now());
    if let Verdict::Unavailable(why) = &live {
        tracing::info!(line = line.line_no, why, "settlement line awaits the provider's confirmation");
        counts.awaiting_confirmation += 1;
        return Ok(());
    }
    let e = evidence(line, Some(w), line_verdict, Some(live_evidence));
    if let Verdict::Mismatch(_, m) = &live {
        let detail =
            format!("the provider's record's {} {} from the withdrawal's", m.fields.join(", "), differ(m.fields.len()));
        return except(db, line, w, ExceptionKind::AmountMismatch, detail, e, counts).await;
    }
    if !apply.confirmed_by(&live) {
        let (kind, detail) = apply.unconfirmed(&live);
        return except(db, line, w, kind, detail, e, counts).await;
    }
    let mut tx = db.begin().await?;
    let (result, applied) = match apply {
        Apply::Complete | Apply::Fail => {
            let (to, failure_code, reason) = match apply {
                Apply::Complete => {
                    (WithdrawalStatus::Completed, None, "settlement report shows it paid; provider confirms")
                }
                _ => (
                    WithdrawalStatus::Failed,
                    live.transfer().and_then(|t| t.failure_code.clone()).or_else(|| Some("provider_failed".into())),
                    "settlement report shows it failed; provider confirms",
                ),
            };
            let request = TransitionRequest {
                id: w.id,
                from: w.status,
                to,
                expected_version: Some(w.version),
                actor: &Actor::Settlement,
                reason,
                correlation_id: &format!("settlement:{}", line.report_id),
                failure_code: failure_code.as_deref(),
                evidence: Some(&e),
            };
            match withdrawals::transition(&mut tx, &request).await? {
                TransitionOutcome::Applied(_) => {}
                // Moved meanwhile: the line is matched again by the next run, against what it
                // holds then.
                TransitionOutcome::Stale | TransitionOutcome::Forbidden(_) => {
                    counts.awaiting_confirmation += 1;
                    return Ok(());
                }
            }
            let done = if to == WithdrawalStatus::Completed { "completed" } else { "failed" };
            (LineResult::Matched, Some(done))
        }
        Apply::CreditReturn => {
            let t = live.transfer().cloned().unwrap_or(transfer);
            let reported = Currency::parse(&t.currency).and_then(|c| Amount::new(t.amount, c));
            let Ok(reported) = reported else {
                let detail = "the provider's return names an amount we cannot read: not credited";
                return except(db, line, w, ExceptionKind::Returned, detail.into(), e, counts).await;
            };
            let code = t.return_code.clone().unwrap_or_else(|| "unspecified".into());
            let current = withdrawals::get_in_tx(&mut tx, w.id).await?.unwrap_or_else(|| w.clone());
            match returns::apply(&mut tx, &current, reported, &code, line.event_at, &e).await? {
                returns::Applied::Credited => (LineResult::Returned, Some("return_credited")),
                returns::Applied::AlreadyApplied => (LineResult::Returned, None),
                returns::Applied::NotCompleted => {
                    drop(tx);
                    let detail = "a return of a withdrawal that is not completed: not credited";
                    return except(db, line, w, ExceptionKind::Returned, detail.into(), e, counts).await;
                }
                returns::Applied::AmountMismatch => {
                    drop(tx);
                    let detail = "the provider returns another amount or currency than was paid out: not credited";
                    return except(db, line, w, ExceptionKind::AmountMismatch, detail.into(), e, counts).await;
                }
            }
        }
    };
    let decision = LineDecision { withdrawal_id: Some(w.id), result, applied, evidence: &e };
    if !store::decide_line(&mut tx, line.id, &decision).await? {
        // Another import decided this line first; what this one did rolls back.
        return Ok(());
    }
    tx.commit().await?;
    match (result, applied) {
        (_, Some("completed")) => (counts.matched, counts.completed) = (counts.matched + 1, counts.completed + 1),
        (_, Some("failed")) => (counts.matched, counts.failed) = (counts.matched + 1, counts.failed + 1),
        (_, Some(_)) => counts.returns_credited += 1,
        (LineResult::Returned, None) => counts.returns_already_applied += 1,
        _ => counts.matched += 1,
    }
    Ok(())
}

/// A line decided without moving anything: matched, or an exception with why.
struct Decided<'a> {
    line: &'a LineRow,
    withdrawal: Option<WithdrawalId>,
    exception: Option<(ExceptionKind, String)>,
    evidence: Value,
}

impl<'a> Decided<'a> {
    fn exception(
        line: &'a LineRow,
        withdrawal: Option<WithdrawalId>,
        kind: ExceptionKind,
        detail: String,
        evidence: Value,
    ) -> Self {
        Decided { line, withdrawal, exception: Some((kind, detail)), evidence }
    }
}

/// Records one line's exception (found while confirming it), in its own transaction.
async fn except(
    db: &Db,
    line: &LineRow,
    w: &Withdrawal,
    kind: ExceptionKind,
    detail: String,
    evidence: Value,
    counts: &mut MatchCounts,
) -> crate::storage::Result<()> {
    record(db, &[Decided::exception(line, Some(w.id), kind, detail, evidence)], counts).await
}

/// Records decided lines and opens their exceptions as one batch in one transaction. A line
/// another import decided first touches nothing (and its exception, the same by its dedupe key,
/// opens nothing new).
async fn record(db: &Db, decided: &[Decided<'_>], counts: &mut MatchCounts) -> crate::storage::Result<()> {
    let mut writes = Writes::new();
    let mut handles = Vec::with_capacity(decided.len());
    for d in decided {
        let result = match &d.exception {
            None => LineResult::Matched,
            Some((kind, _)) => kind.line_result().ok_or_else(|| {
                crate::storage::StorageError::corrupt(format!("a line cannot open a {kind} exception"))
            })?,
        };
        let decision = LineDecision { withdrawal_id: d.withdrawal, result, applied: None, evidence: &d.evidence };
        let line = store::decide_line_in(&mut writes, d.line.id, &decision);
        let opened = d.exception.as_ref().map(|(kind, detail)| {
            let day = d.line.event_at.0.date_naive().format("%Y-%m-%d").to_string();
            let exception = NewException {
                kind: *kind,
                // A corrected line (same key, other content) that still differs is a new finding.
                dedupe_key: format!("line:{kind}:{}:{}", d.line.line_key, d.line.content_digest),
                withdrawal_id: d.withdrawal,
                line_id: Some(d.line.id),
                report_date: Some(&day),
                transfer_id: Some(&d.line.transfer_id),
                detail,
                evidence: &d.evidence,
            };
            store::open_exception_in(&mut writes, &exception)
        });
        handles.push((line, opened));
    }
    let mut tx = db.begin().await?;
    let ran = writes.run(&mut tx).await?;
    tx.commit().await?;
    for (d, (line, opened)) in decided.iter().zip(handles) {
        match (opened, &d.exception) {
            _ if !ran.applied(line) => {}
            (None, _) => counts.matched += 1,
            (Some(opened), Some((kind, detail))) if ran.applied(opened) => {
                tracing::warn!(kind = kind.as_str(), line = d.line.line_no, detail, "settlement exception opened");
                counts.exceptions_opened += 1;
            }
            (Some(_), _) => {}
        }
    }
    Ok(())
}

/// Opens a `missing_from_report` exception for every withdrawal completed more than the grace
/// days ago (on a day reports cover) that no report line shows paid. Returns how many opened.
pub async fn sweep_missing(db: &Db, settings: &SettlementSettings) -> crate::storage::Result<usize> {
    let cutoff = DbTime::now().plus(-TimeDelta::days(settings.grace_days));
    // A line that names the withdrawal but waits for the provider's confirmation is not a
    // missing one.
    let awaiting: HashSet<String> = store::awaiting_keys(db).await?.into_iter().collect();
    let mut opened = 0;
    loop {
        let batch = store::missing_from_reports(db, cutoff, 500).await?;
        if batch.is_empty() {
            return Ok(opened);
        }
        let mut tx = db.begin().await?;
        let mut new_here = 0;
        for m in batch.iter().filter(|m| !awaiting.contains(&m.id.to_string())) {
            let e = json!({
                "source": "settlement_reports",
                "completed_at": m.completed_at.0,
                "amount_minor": m.amount,
                "currency": m.currency,
                "grace_days": settings.grace_days,
                "checked_at": Utc::now(),
            });
            let detail = format!(
                "completed at {}, but no imported report shows it paid within {} day(s)",
                m.completed_at.0.format("%Y-%m-%d %H:%M:%SZ"),
                settings.grace_days
            );
            let new = NewException {
                kind: ExceptionKind::MissingFromReport,
                dedupe_key: store::missing_key(m.id),
                withdrawal_id: Some(m.id),
                line_id: None,
                report_date: None,
                transfer_id: None,
                detail: &detail,
                evidence: &e,
            };
            new_here += usize::from(store::open_exception(&mut tx, &new).await?);
        }
        tx.commit().await?;
        opened += new_here;
        if batch.len() < 500 || new_here == 0 {
            return Ok(opened);
        }
    }
}

/// How many days back the daily run looks for a report that was never fetched (the worker was
/// down, the job was never enqueued).
pub const BACKFILL_DAYS: i64 = 7;

/// Enqueues yesterday's import once it is due (after `import_hour` UTC), and the import of any
/// of the [`BACKFILL_DAYS`] before it that has no report and never had an import job; a day
/// whose job was dead-lettered (a refused report) waits for an operator. Called from the
/// worker's sweep. Returns how many imports were enqueued.
pub async fn schedule_daily(db: &Db, settings: &SettlementSettings) -> anyhow::Result<usize> {
    if !settings.daily_import {
        return Ok(0);
    }
    let now = Utc::now();
    let due = now.time() >= chrono::NaiveTime::from_hms_opt(settings.import_hour, 0, 0).unwrap_or_default();
    let first_back = if due { 1 } else { 2 };
    let mut tx = db.begin().await?;
    let mut enqueued = Vec::new();
    for back in first_back..=BACKFILL_DAYS {
        let day = now.date_naive() - TimeDelta::days(back);
        let correlation = format!("settlement-import:{day}");
        if store::has_report(&mut tx, &day.format("%Y-%m-%d").to_string()).await?
            || job_store::exists_with_correlation(&mut tx, JobKind::ImportSettlement, &correlation).await?
        {
            continue;
        }
        enqueue_import(&mut tx, day, &correlation, DbTime::now()).await?;
        enqueued.push(day);
    }
    tx.commit().await?;
    if !enqueued.is_empty() {
        tracing::info!(days = ?enqueued, "settlement imports enqueued");
    }
    Ok(enqueued.len())
}

/// Enqueues an import of `day`'s report (fetched from the provider).
pub async fn enqueue_import(
    tx: &mut Tx,
    day: NaiveDate,
    correlation_id: &str,
    run_at: DbTime,
) -> crate::storage::Result<crate::domain::JobId> {
    job_store::enqueue(tx, &ImportSettlement { date: day, import_id: None }.job(correlation_id, run_at)).await
}

/// Enqueues the import of an operator's stored report (`settlement_imports` row `import_id`), in
/// the transaction that stores it.
pub async fn enqueue_stored_import(
    tx: &mut Tx,
    import_id: uuid::Uuid,
    day: NaiveDate,
) -> crate::storage::Result<crate::domain::JobId> {
    let payload = ImportSettlement { date: day, import_id: Some(import_id) };
    job_store::enqueue(tx, &payload.job(&format!("settlement-import:{import_id}"), DbTime::now())).await
}

/// The `import_settlement` job: fetch the day's report (or read the operator's stored one),
/// import and match it.
pub async fn handle(ctx: &JobContext, payload: ImportSettlement) -> anyhow::Result<()> {
    if let Some(import_id) = payload.import_id {
        return handle_stored(ctx, import_id, payload.date).await;
    }
    let settings = &ctx.config().settlement;
    let bytes = match fetch(ctx.gateway(), payload.date).await {
        Ok(bytes) => bytes,
        Err(why) => {
            let policy = &ctx.config().import_policy;
            let attempts = u32::try_from(ctx.job.attempts + 1).unwrap_or(u32::MAX);
            let elapsed = ctx
                .job
                .first_attempt_at
                .map(|f| (DbTime::now().0 - f.0).to_std().unwrap_or_default())
                .unwrap_or_default();
            let decision = policy.next_delay(attempts, elapsed, None, &mut rand::thread_rng());
            return match decision {
                RetryDecision::RetryAfter(delay) => {
                    let mut tx = ctx.db().begin().await?;
                    job_store::mark_first_attempt(&mut tx, ctx.job.id, ctx.job.lease_token).await?;
                    let run_at = DbTime::after(delay);
                    let how = Finish::Reschedule { run_at, consumed_attempt: true, error: why.code() };
                    ctx.finish_or_rollback(tx, &how).await
                }
                RetryDecision::Exhausted(_) => {
                    let failure = Failure::retries_exhausted(why.code(), why.to_string());
                    ctx.dead_letter(ctx.db().begin().await?, &failure).await
                }
            };
        }
    };
    let by = format!("worker:{}", ctx.worker_id());
    match import(ctx.db(), Some(ctx.gateway()), settings, Some(payload.date), &bytes, Origin::Provider, &by).await {
        Ok(_) => {
            // Lines of earlier days that waited for the provider's confirmation are tried again.
            for day in store::days_awaiting(ctx.db()).await? {
                let counts = match_day(ctx.db(), Some(ctx.gateway()), &day).await?;
                tracing::info!(%day, ?counts, "settlement lines awaiting confirmation matched again");
            }
            ctx.finish_in_own_tx(&Finish::Succeeded).await
        }
        Err(ImportError::Refused(err)) => {
            let failure = Failure::permanent("settlement_report_refused", format!("report of {}: {err}", payload.date));
            ctx.dead_letter(ctx.db().begin().await?, &failure).await
        }
        Err(ImportError::NoDay) => ctx.finish_in_own_tx(&Finish::Succeeded).await,
        Err(ImportError::Storage(err)) => Err(err.into()),
    }
}

/// Imports an operator's stored report. Every step before the last is idempotent (the report is
/// stored once per digest, each line decided once), so a run that crashed or failed part-way is
/// simply run again; the last transaction marks the import `done` (or `failed`, for a report
/// refused since it was accepted), inserts the `settlement.import` audit row the request prepared,
/// and finishes the job, together. An import already finished finishes its job and changes
/// nothing else.
async fn handle_stored(ctx: &JobContext, import_id: uuid::Uuid, date: NaiveDate) -> anyhow::Result<()> {
    let db = ctx.db();
    let Some(row) = store::get_import(db, import_id).await? else {
        let failure = Failure::poison("settlement_import_missing", format!("no settlement import {import_id}"));
        return ctx.dead_letter(db.begin().await?, &failure).await;
    };
    if matches!(row.state.as_str(), "done" | "failed") {
        return ctx.finish_in_own_tx(&Finish::Succeeded).await;
    }
    store::start_import(db, import_id).await?;
    let bytes = store::import_bytes(db, import_id).await?.unwrap_or_default();
    let origin = if row.source == Origin::Provider.as_str() { Origin::Provider } else { Origin::File };
    let by = format!("operator:{}", row.requested_by.0);
    let settings = &ctx.config().settlement;
    let outcome = import(db, Some(ctx.gateway()), settings, Some(date), &bytes, origin, &by).await;
    let (state, summary, error, result) = match outcome {
        Ok(summary) => ("done", Some(serde_json::to_value(&summary)?), None, "ok".to_owned()),
        Err(ImportError::Refused(err)) => {
            ("failed", None, Some(format!("report refused: {err}")), "report_refused".into())
        }
        Err(ImportError::NoDay) => ("failed", None, Some(ImportError::NoDay.to_string()), "date_required".into()),
        // Retried by the worker; what was done stays done.
        Err(ImportError::Storage(err)) => return Err(err.into()),
    };
    let mut tx = db.begin().await?;
    if store::finish_import(&mut tx, import_id, state, summary.as_ref(), error.as_deref()).await? {
        audit::insert(&mut tx, &import_audit(&row, summary.as_ref(), &result)?).await?;
    }
    tracing::info!(%import_id, state, "settlement import finished");
    ctx.finish_or_rollback(tx, &Finish::Succeeded).await
}

/// The `settlement.import` audit row the request prepared, with the outcome filled in.
fn import_audit(row: &store::ImportRow, summary: Option<&Value>, result: &str) -> anyhow::Result<audit::AuditRow> {
    let a = &row.audit.0;
    let text = |key: &str| a.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let mut parameters = a.get("parameters").cloned().unwrap_or_else(|| json!({}));
    parameters["import_id"] = json!(row.id);
    if let Some(s) = summary {
        for key in ["version", "digest", "already_imported", "lines"] {
            parameters[key] = s.get(key).cloned().unwrap_or(Value::Null);
        }
        parameters["exceptions_opened"] = s["matching"]["exceptions_opened"].clone();
    }
    Ok(audit::AuditRow {
        id: uuid::Uuid::now_v7(),
        operator_id: row.requested_by.0,
        operator_name: text("operator_name"),
        role: text("role"),
        action: text("action"),
        target_type: text("target_type"),
        target_id: row.report_date.clone(),
        reason: text("reason"),
        parameters: sqlx::types::Json(parameters),
        result: result.to_owned(),
        at: DbTime::now(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{AccountId, Destination};

    fn withdrawal(status: WithdrawalStatus) -> Withdrawal {
        let usd = Currency::parse("USD").unwrap();
        Withdrawal {
            id: WithdrawalId::new(),
            account_id: AccountId(uuid::Uuid::now_v7()),
            status,
            amount: Amount::new("40.00".parse().unwrap(), usd).unwrap(),
            destination: Destination::parse("bank_account", "12345678", "021000021").unwrap(),
            reference: None,
            failure_code: None,
            version: 2,
            idempotency_key: "k".into(),
            correlation_id: "c".into(),
            created_at: Utc::now(),
            updated_at: Utc::now(),
            sandbox: false,
        }
    }

    fn line(w: &Withdrawal, amount: &str, status: TransferStatus) -> Verdict {
        let t = Transfer {
            id: "tr_1".into(),
            reference: Some(w.id.to_string()),
            amount: amount.parse().unwrap(),
            currency: "USD".into(),
            status,
            failure_code: None,
            return_code: None,
            created_at: None,
            updated_at: None,
        };
        Verdict::of_transfer(w, &t)
    }

    #[test]
    fn every_line_against_every_state_has_one_outcome() {
        use ExceptionKind as K;
        use TransferStatus as T;
        use WithdrawalStatus as S;
        let cases = [
            (S::Completed, T::Paid, Some(Plan::Matched)),
            (S::Processing, T::Paid, Some(Plan::Confirm(Apply::Complete))),
            (S::RequiresReview, T::Paid, Some(Plan::Confirm(Apply::Complete))),
            (S::Failed, T::Paid, None),
            (S::Pending, T::Paid, None),
            (S::Failed, T::Failed, Some(Plan::Matched)),
            (S::Processing, T::Failed, Some(Plan::Confirm(Apply::Fail))),
            (S::RequiresReview, T::Failed, Some(Plan::Confirm(Apply::Fail))),
            (S::Completed, T::Failed, None),
            (S::Completed, T::Returned, Some(Plan::Confirm(Apply::CreditReturn))),
        ];
        for (held, status, wanted) in cases {
            let w = withdrawal(held);
            let got = plan(Some(&w), &line(&w, "40.00", status));
            match wanted {
                Some(plan) => assert_eq!(got, plan, "{held} / {status:?}"),
                None => assert!(matches!(got, Plan::Exception(K::StatusMismatch, _)), "{held} / {status:?}: {got:?}"),
            }
        }
        for held in [S::Processing, S::RequiresReview, S::Failed, S::Pending] {
            let w = withdrawal(held);
            assert!(matches!(plan(Some(&w), &line(&w, "40.00", T::Returned)), Plan::Exception(K::Returned, _)));
        }
        let w = withdrawal(S::Processing);
        let off = plan(Some(&w), &line(&w, "40.01", T::Paid));
        assert!(matches!(&off, Plan::Exception(K::AmountMismatch, why) if why.contains("amount")), "{off:?}");
        assert!(matches!(plan(None, &line(&w, "40.00", T::Paid)), Plan::Exception(K::UnknownTransfer, _)));
    }

    #[test]
    fn only_the_providers_matching_record_confirms_a_safe_outcome() {
        let w = withdrawal(WithdrawalStatus::Completed);
        let returned = line(&w, "40.00", TransferStatus::Returned);
        let paid = line(&w, "40.00", TransferStatus::Paid);
        let failed = line(&w, "40.00", TransferStatus::Failed);
        assert!(Apply::CreditReturn.confirmed_by(&returned));
        assert!(!Apply::CreditReturn.confirmed_by(&paid), "a spurious return is not credited");
        assert!(Apply::Complete.confirmed_by(&paid) && Apply::Complete.confirmed_by(&returned));
        assert!(!Apply::Complete.confirmed_by(&failed) && !Apply::Complete.confirmed_by(&Verdict::NoTransfer));
        assert!(
            Apply::Fail.confirmed_by(&failed)
                && !Apply::Fail.confirmed_by(&Verdict::Pending(Transfer {
                    id: "t".into(),
                    reference: None,
                    amount: 1.into(),
                    currency: "USD".into(),
                    status: TransferStatus::Pending,
                    failure_code: None,
                    return_code: None,
                    created_at: None,
                    updated_at: None,
                }))
        );
        assert_eq!(Apply::CreditReturn.unconfirmed(&paid).0, ExceptionKind::Returned);
        assert_eq!(Apply::Complete.unconfirmed(&failed).0, ExceptionKind::StatusMismatch);
    }
}
