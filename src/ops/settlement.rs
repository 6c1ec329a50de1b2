//! Settlement reconciliation for operators (SPEC §14): import a provider's report of a day
//! (fetched from that provider, or a file's CSV; SPEC §16) as a job and follow its progress, list
//! the imported versions, list and show settlement exceptions, resolve one with a reason and a
//! note, and credit a refused return once the provider's record shows it (checked live).
//! Importing, resolving and crediting are audited; resolving records a finding and moves no money.

use chrono::{NaiveDate, Utc};

use super::acts::{SettlementExceptionResolve, SettlementImport, SettlementReturnCredit};
use super::types::{
    CreditReturnRequest, ExceptionQuery, ExceptionView, ImportListQuery, ImportRequest, ImportSummary, ImportView,
    List, Page, ReportQuery, ReportView, ResolveExceptionRequest,
};
use super::{
    decode_cursor, encode_cursor, page, page_limit, Action, Audited, Operator, Ops, OpsError, OpsResult, Role,
};
use crate::config::providers::DEFAULT_PROVIDER;
use crate::domain::settlement::{ExceptionKind, ExceptionStatus, Resolution};
use crate::domain::{Amount, Currency, SettlementExceptionId, StoredEvidence};
use crate::jobs::settlement::{self as settlement, ImportError, ReportSource};
use crate::provider::{ReportFetch, Verdict};
use crate::storage::audit::PreparedAudit;
use crate::storage::settlement::{self as store, ExceptionFilter, ExceptionRow};
use crate::storage::{returns, withdrawals, DbTime};

/// A `YYYY-MM-DD` day an operator typed.
pub fn parse_day(raw: &str, field: &str) -> OpsResult<NaiveDate> {
    NaiveDate::parse_from_str(raw.trim(), "%Y-%m-%d")
        .map_err(|_| OpsError::invalid("invalid_date", field, "a day is YYYY-MM-DD"))
}

/// The provider an import names (SPEC §16), checked against those this process knows: its
/// gateways, else its providers file, else the lone `default`. None named is the primary
/// provider. An unknown name is 422 `unknown_provider`, naming the known ones.
fn provider_named(ops: &Ops<'_>, asked: Option<&str>) -> OpsResult<String> {
    let known: Vec<String> = match (ops.gateways, ops.config.providers.as_ref()) {
        (Some(gateways), _) => gateways.all().map(|g| g.name.clone()).collect(),
        (None, Some(providers)) => providers.all().iter().map(|p| p.name.clone()).collect(),
        (None, None) => vec![DEFAULT_PROVIDER.to_owned()],
    };
    match asked.map(str::trim) {
        None | Some("") => Ok(known.first().cloned().unwrap_or_else(|| DEFAULT_PROVIDER.to_owned())),
        Some(name) if known.iter().any(|k| k == name) => Ok(name.to_owned()),
        Some(name) => Err(OpsError::invalid(
            "unknown_provider",
            "provider",
            format!("no provider {:?} is configured (known: {})", as_typed(name), known.join(", ")),
        )),
    }
}

/// A provider name as an operator typed it, for a message or the audit: at most 40 characters,
/// redacted (a name is `[a-z0-9_-]{1,32}`, so anything longer is a mistake, or worse).
fn as_typed(name: &str) -> String {
    crate::redact::text(&name.chars().take(40).collect::<String>())
}

/// Accepts a report for import: the CSV given, or the day's report fetched from the provider. The
/// report is `provider`'s (the primary one unless the request names another; an unknown name is
/// 422 `unknown_provider`): fetched from it, stored as its report and matched only to its
/// withdrawals. The report is checked whole first (size, lines, form, day; a refusal is 422
/// `report_refused` and stores nothing), then stored with its job in one transaction: the answer
/// is the queued import (202), and the settlement job imports and matches it
/// (`jobs::settlement`). Every import goes this one way, small or large. The `settlement.import`
/// audit row is prepared here and inserted by the job's final transaction, with the import's
/// outcome; a refused request is audited here.
pub async fn import(ops: &Ops<'_>, operator: &Operator, req: ImportRequest) -> OpsResult<ImportView> {
    let target = req.date.map(|d| d.to_string()).unwrap_or_else(|| "file".to_owned());
    let parameters = serde_json::json!({
        "date": req.date, "source": if req.csv.is_some() { "file" } else { "provider" },
        "bytes": req.csv.as_ref().map(String::len),
        "provider": req.provider.as_deref().map(as_typed),
    });
    ops.perform(operator, &SettlementImport::ACT, target, "", parameters, async |audited| {
        let provider = provider_named(ops, req.provider.as_deref())?;
        audited.parameters["provider"] = serde_json::json!(provider);
        let (bytes, origin) = match (req.csv, req.date) {
            (Some(csv), _) => (csv.into_bytes(), ReportSource::File),
            (None, Some(date)) => {
                let gateway = ops.gateways.and_then(|gs| gs.get(&provider)).ok_or_else(|| {
                    OpsError::unavailable("provider_unavailable", "this process cannot reach the provider")
                })?;
                let bytes = settlement::fetch(gateway, date).await.map_err(|e| match e {
                    ReportFetch::NotPublished => OpsError::refused(
                        super::RefusalKind::NotFound,
                        "report_not_published",
                        format!("provider {provider} has not published the report of {date}"),
                    ),
                    other => OpsError::unavailable("provider_unavailable", other.to_string()),
                })?;
                (bytes, ReportSource::Provider)
            }
            (None, None) => {
                return Err(OpsError::invalid("date_or_csv_required", "date", "give the report's date or its CSV"))
            }
        };
        let (date, report) = settlement::check(&ops.config.settlement, req.date, &bytes).map_err(refusal)?;
        let row = store::ImportRow {
            id: uuid::Uuid::now_v7(),
            provider,
            state: crate::domain::settlement::ImportState::Queued,
            report_date: date.to_string(),
            source: origin,
            digest: report.digest.clone(),
            line_count: i32::try_from(report.lines.len()).unwrap_or(i32::MAX),
            requested_by: operator.id,
            audit: sqlx::types::Json(PreparedAudit::of(audited.row(operator, "ok"))),
            summary: None,
            error: None,
            created_at: DbTime::now(),
            finished_at: None,
        };
        drop(report);
        let mut tx = ops.db.begin().await?;
        store::insert_import(&mut tx, &row, &bytes).await?;
        settlement::enqueue_stored_import(&mut tx, row.id, date).await?;
        tx.commit().await?;
        let (provider, lines) = (row.provider.as_str(), row.line_count);
        tracing::info!(import_id = %row.id, provider, %date, lines, "settlement import queued");
        import_view(ops.db, row).await
    })
    .await
}

fn refusal(e: ImportError) -> OpsError {
    match e {
        ImportError::Refused(err) => OpsError::invalid("report_refused", "csv", format!("report refused: {err}")),
        ImportError::NoDay => OpsError::invalid("date_required", "date", "the report has no lines: give its date"),
        ImportError::Storage(err) => err.into(),
    }
}

async fn import_view(db: &crate::storage::Db, row: store::ImportRow) -> OpsResult<ImportView> {
    let (_, done, exceptions) = store::import_progress(db, &row.provider, &row.report_date, &row.digest).await?;
    Ok(ImportView {
        id: row.id,
        provider: row.provider,
        state: row.state,
        date: row.report_date,
        source: row.source,
        digest: row.digest,
        lines: i64::from(row.line_count),
        lines_done: done,
        matched: (done - exceptions).max(0),
        exceptions,
        requested_by: row.requested_by.0,
        created_at: row.created_at.0,
        finished_at: row.finished_at.map(|t| t.0),
        summary: row.summary.and_then(|s| serde_json::from_value::<ImportSummary>(s.0).ok()),
        error: row.error,
    })
}

/// One import with its progress.
pub async fn import_status(ops: &Ops<'_>, operator: &Operator, id: uuid::Uuid) -> OpsResult<ImportView> {
    operator.require(Role::Viewer)?;
    let row = store::get_import(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
    import_view(ops.db, row).await
}

/// The latest imports with their progress, newest first.
pub async fn imports(ops: &Ops<'_>, operator: &Operator, q: ImportListQuery) -> OpsResult<List<ImportView>> {
    operator.require(Role::Viewer)?;
    let rows = store::list_imports(ops.db, page_limit(q.limit)?).await?;
    let mut data = Vec::with_capacity(rows.len());
    for row in rows {
        data.push(import_view(ops.db, row).await?);
    }
    Ok(List { data })
}

/// Imported report versions, newest first.
pub async fn reports(ops: &Ops<'_>, operator: &Operator, q: ReportQuery) -> OpsResult<List<ReportView>> {
    operator.require(Role::Viewer)?;
    let date = q.date.as_deref().map(|d| parse_day(d, "date")).transpose()?.map(|d| d.to_string());
    let provider = q.provider.as_deref().filter(|p| !p.is_empty());
    let rows = store::list_reports(ops.db, provider, date.as_deref(), page_limit(q.limit)?).await?;
    let data = rows
        .into_iter()
        .map(|r| ReportView {
            id: r.id.0,
            provider: r.provider,
            date: r.report_date,
            version: r.version,
            digest: r.digest,
            source: r.source,
            lines: r.line_count,
            differences: r.differences.0,
            imported_by: r.imported_by,
            imported_at: r.imported_at.0,
        })
        .collect();
    Ok(List { data })
}

fn view(e: &ExceptionRow) -> ExceptionView {
    ExceptionView {
        id: e.id.0,
        provider: e.provider.clone(),
        kind: e.kind,
        status: e.status,
        withdrawal_id: e.withdrawal_id.map(|w| w.0),
        report_date: e.report_date.clone(),
        transfer_id: e.transfer_id.clone(),
        detail: e.detail.clone(),
        evidence: e.evidence.0.clone(),
        opened_at: e.opened_at.0,
        age_seconds: (Utc::now() - e.opened_at.0).num_seconds().max(0),
        resolved_at: e.resolved_at.map(|t| t.0),
        resolved_by: e.resolved_by.map(|o| o.0),
        resolution: e.resolution,
        resolution_note: e.resolution_note.clone(),
    }
}

/// Settlement exceptions by kind and status (`open` unless asked; `all` for both), oldest first.
pub async fn exceptions(ops: &Ops<'_>, operator: &Operator, q: ExceptionQuery) -> OpsResult<Page<ExceptionView>> {
    operator.require(Role::Viewer)?;
    let kind = match q.kind.as_deref().filter(|k| !k.is_empty()) {
        Some(k) => Some(k.parse::<ExceptionKind>().map_err(|_| {
            let kinds: Vec<&str> = ExceptionKind::ALL.iter().map(|k| k.as_str()).collect();
            OpsError::invalid("invalid_kind", "kind", format!("kind is one of {}", kinds.join(", ")))
        })?),
        None => None,
    };
    let status = match q.status.as_deref().filter(|s| !s.is_empty()).unwrap_or("open") {
        "all" => None,
        s => Some(
            s.parse::<ExceptionStatus>()
                .map_err(|_| OpsError::invalid("invalid_status", "status", "status is open, resolved or all"))?,
        ),
    };
    let limit = page_limit(q.limit)?;
    let after = q.cursor.as_deref().map(decode_cursor).transpose()?.map(|(at, id)| (at, SettlementExceptionId(id)));
    let provider = q.provider.filter(|p| !p.is_empty());
    let filter = ExceptionFilter { kind, provider, status, after, limit: limit + 1 };
    let rows = store::list_exceptions(ops.db, &filter).await?;
    Ok(page(rows, limit, |e| encode_cursor(e.opened_at, e.id.0), view))
}

/// A withdrawal's exceptions (for its review page).
pub(super) async fn exceptions_for_withdrawal(
    db: &crate::storage::Db,
    withdrawal: crate::domain::WithdrawalKey,
) -> OpsResult<Vec<ExceptionView>> {
    Ok(store::exceptions_for_withdrawal(db, withdrawal).await?.iter().map(view).collect())
}

/// One exception with its evidence.
pub async fn exception(ops: &Ops<'_>, operator: &Operator, id: SettlementExceptionId) -> OpsResult<ExceptionView> {
    operator.require(Role::Viewer)?;
    let row = store::get_exception(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
    Ok(view(&row))
}

/// Resolves an open exception with a reason and a note (required), audited.
pub async fn resolve(
    ops: &Ops<'_>,
    operator: &Operator,
    id: SettlementExceptionId,
    req: ResolveExceptionRequest,
) -> OpsResult<ExceptionView> {
    let parameters = serde_json::json!({"resolution": req.reason});
    let act = &SettlementExceptionResolve::ACT;
    ops.perform(operator, act, id.to_string(), req.note.trim(), parameters, async |audited| {
        let note = req.note.trim();
        if note.is_empty() || note.chars().count() > 1000 {
            return Err(OpsError::invalid("note_required", "note", "a note of 1 to 1000 characters is required"));
        }
        let row = store::get_exception(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
        let mut tx = ops.db.begin().await?;
        if !store::resolve_exception(&mut tx, &row, operator.id, req.reason, note).await? {
            return Err(OpsError::conflict("already_resolved", "this settlement exception is already resolved"));
        }
        audited.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        let row = store::get_exception(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
        Ok(view(&row))
    })
    .await
}

/// Credits the return a `returned` exception refused (the provider's record did not show it
/// then), once the provider's own record shows it: the record is asked now, and only a `returned`
/// transfer of the withdrawal's own amount and currency credits (SPEC §1.2: every money decision
/// is checked against the provider's record at the moment it is taken). The credit
/// (`storage::returns::apply`: one `payout_returns` row and one `return` ledger entry, with the
/// live record as its evidence), the exception's resolution (`resolved_in_review`) and the audit
/// row commit in one transaction. A return already applied resolves the exception and credits
/// nothing again.
pub async fn credit_return(
    ops: &Ops<'_>,
    operator: &Operator,
    id: SettlementExceptionId,
    req: CreditReturnRequest,
) -> OpsResult<ExceptionView> {
    let note = req.note.trim();
    let act = &SettlementReturnCredit::ACT;
    ops.perform(operator, act, id.to_string(), note, serde_json::json!({}), async |audited| {
        if note.is_empty() || note.chars().count() > 1000 || note.contains('\0') {
            return Err(OpsError::invalid("note_required", "note", "a note of 1 to 1000 characters is required"));
        }
        let row = store::get_exception(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
        if row.kind != ExceptionKind::Returned {
            return Err(OpsError::conflict("not_a_return", format!("this exception is {}, not returned", row.kind)));
        }
        if row.status != ExceptionStatus::Open {
            return Err(OpsError::conflict("already_resolved", "this settlement exception is already resolved"));
        }
        let withdrawal_id = row
            .withdrawal_id
            .ok_or_else(|| OpsError::conflict("no_withdrawal", "this return names no withdrawal of ours"))?;
        let key = crate::domain::WithdrawalKey { account: row.account_id, id: withdrawal_id };
        let w = withdrawals::get(ops.db, key).await?.ok_or_else(OpsError::not_found)?;
        let gateway = ops.provider_for(&w).await?;
        let answer = gateway
            .lookup(&w.id.to_string(), &format!("ops-credit-return-{id}"))
            .await
            .map_err(|_| OpsError::unavailable("provider_unavailable", "the provider breaker is open; try later"))?;
        let live = Verdict::of_lookup(&w, &answer, false);
        let evidence = live.evidence(&w, chrono::Utc::now()).from_provider(&gateway.name).crediting_return(id.0);
        let evidence = StoredEvidence::from(evidence);
        let transfer = match &live {
            Verdict::Returned(t) => t.clone(),
            Verdict::Unavailable(_) => {
                return Err(OpsError::unavailable("provider_unavailable", "the provider did not answer; try later"))
            }
            Verdict::Mismatch(_, m) => {
                return Err(OpsError::conflict(
                    "provider_mismatch",
                    format!(
                        "the provider's record differs from the withdrawal in {}: not credited",
                        m.fields.join(", ")
                    ),
                ))
            }
            other => {
                return Err(OpsError::conflict(
                    "return_not_at_provider",
                    format!("the provider's record says {}, not returned: not credited", other.kind()),
                ))
            }
        };
        let reported =
            Currency::parse(&transfer.currency).ok().and_then(|c| Amount::new(transfer.amount, c).ok()).ok_or_else(
                || OpsError::conflict("provider_mismatch", "the provider's return names an amount we cannot read"),
            )?;
        let code = transfer.return_code.clone().unwrap_or_else(|| "unspecified".into());
        let returned_at = transfer.updated_at.map_or_else(DbTime::now, DbTime);
        let mut tx = ops.db.begin().await?;
        let current = withdrawals::get_in_tx(&mut tx, w.key()).await?.ok_or_else(OpsError::not_found)?;
        let credited = match returns::apply(&mut tx, &current, reported, &code, returned_at, &evidence).await? {
            returns::Applied::Credited => true,
            returns::Applied::AlreadyApplied => false,
            returns::Applied::NotCompleted => {
                return Err(OpsError::conflict(
                    "not_completed",
                    format!("the withdrawal is {}, not completed: nothing to return", current.status),
                ))
            }
            returns::Applied::AmountMismatch => {
                return Err(OpsError::conflict(
                    "provider_mismatch",
                    "the provider returns another amount or currency than was paid out: not credited",
                ))
            }
        };
        if !store::resolve_exception(&mut tx, &row, operator.id, Resolution::ResolvedInReview, note).await? {
            return Err(OpsError::conflict("already_resolved", "this settlement exception is already resolved"));
        }
        let parameters = serde_json::json!({
            "withdrawal_id": w.id, "credited": credited, "return_code": code, "provider_record": evidence,
        });
        let ok = Audited { parameters, ..audited.clone_shallow() };
        ok.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        let row = store::get_exception(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
        Ok(view(&row))
    })
    .await
}
