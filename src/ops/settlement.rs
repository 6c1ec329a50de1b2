//! Settlement reconciliation for operators (SPEC §14): import a day's report (fetched from the
//! provider, or a file's CSV), list the imported versions, list and show settlement exceptions,
//! and resolve one with a reason and a note. Importing and resolving are audited; resolving
//! records a finding and moves no money (money moves only through review, checked live).

use chrono::{NaiveDate, Utc};

use super::acts::{SettlementExceptionResolve, SettlementImport};
use super::types::{
    ExceptionQuery, ExceptionView, ImportRequest, ImportSummary, List, Page, ReportQuery, ReportView,
    ResolveExceptionRequest,
};
use super::{
    decode_cursor, encode_cursor, page, page_limit, Action, Audited, Operator, Ops, OpsError, OpsResult, Role,
};
use crate::domain::settlement::{ExceptionKind, ExceptionStatus};
use crate::domain::SettlementExceptionId;
use crate::jobs::settlement::{self as settlement, ImportError, Origin};
use crate::provider::ReportFetch;
use crate::storage::settlement::{self as store, ExceptionFilter, ExceptionRow};

/// A `YYYY-MM-DD` day an operator typed.
pub fn parse_day(raw: &str, field: &str) -> OpsResult<NaiveDate> {
    NaiveDate::parse_from_str(raw.trim(), "%Y-%m-%d")
        .map_err(|_| OpsError::invalid("invalid_date", field, "a day is YYYY-MM-DD"))
}

/// Imports a report: the CSV given, or the day's report fetched from the provider.
pub async fn import(ops: &Ops<'_>, operator: &Operator, req: ImportRequest) -> OpsResult<ImportSummary> {
    ops.authorize(operator, &SettlementImport::ACT, "").await?;
    let target = req.date.map(|d| d.to_string()).unwrap_or_else(|| "file".to_owned());
    let parameters = serde_json::json!({
        "date": req.date, "source": if req.csv.is_some() { "file" } else { "provider" },
        "bytes": req.csv.as_ref().map(String::len),
    });
    let audited = Audited::new(&SettlementImport::ACT, target, "", parameters);
    let done = async {
        let (bytes, origin) = match (&req.csv, req.date) {
            (Some(csv), _) => (csv.clone().into_bytes(), Origin::File),
            (None, Some(date)) => {
                let gateway = ops.gateway.ok_or_else(|| {
                    OpsError::unavailable("provider_unavailable", "this process cannot reach the provider")
                })?;
                let bytes = settlement::fetch(gateway, date).await.map_err(|e| match e {
                    ReportFetch::NotPublished => OpsError::refused(
                        super::RefusalKind::NotFound,
                        "report_not_published",
                        format!("the provider has not published the report of {date}"),
                    ),
                    other => OpsError::unavailable("provider_unavailable", other.to_string()),
                })?;
                (bytes, Origin::Provider)
            }
            (None, None) => {
                return Err(OpsError::invalid("date_or_csv_required", "date", "give the report's date or its CSV"))
            }
        };
        let by = format!("operator:{}", operator.id);
        let settings = &ops.config.settlement;
        settlement::import(ops.db, ops.gateway, settings, req.date, &bytes, origin, &by).await.map_err(|e| match e {
            ImportError::Refused(err) => OpsError::invalid("report_refused", "csv", format!("report refused: {err}")),
            ImportError::NoDay => OpsError::invalid("date_required", "date", "the report has no lines: give its date"),
            ImportError::Storage(err) => err.into(),
        })
    };
    match done.await {
        Ok(summary) => {
            let mut audited = audited;
            audited.target_id = summary.date.to_string();
            audited.parameters["version"] = summary.version.into();
            audited.parameters["digest"] = summary.digest.clone().into();
            audited.parameters["already_imported"] = summary.already_imported.into();
            audited.parameters["exceptions_opened"] = summary.matching.exceptions_opened.into();
            let mut tx = ops.db.begin().await?;
            audited.record_ok(&mut tx, operator).await?;
            tx.commit().await?;
            Ok(summary)
        }
        Err(err) => Err(audited.refuse(ops, operator, err).await),
    }
}

/// Imported report versions, newest first.
pub async fn reports(ops: &Ops<'_>, operator: &Operator, q: ReportQuery) -> OpsResult<List<ReportView>> {
    operator.require(Role::Viewer)?;
    let date = q.date.as_deref().map(|d| parse_day(d, "date")).transpose()?.map(|d| d.to_string());
    let rows = store::list_reports(ops.db, date.as_deref(), page_limit(q.limit)?).await?;
    let data = rows
        .into_iter()
        .map(|r| ReportView {
            id: r.id.0,
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
    let rows = store::list_exceptions(ops.db, &ExceptionFilter { kind, status, after, limit: limit + 1 }).await?;
    Ok(page(rows, limit, |e| encode_cursor(e.opened_at, e.id.0), view))
}

/// A withdrawal's exceptions (for its review page).
pub(super) async fn exceptions_for_withdrawal(
    db: &crate::storage::Db,
    id: crate::domain::WithdrawalId,
) -> OpsResult<Vec<ExceptionView>> {
    Ok(store::exceptions_for_withdrawal(db, id).await?.iter().map(view).collect())
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
    ops.authorize(operator, &SettlementExceptionResolve::ACT, &id.to_string()).await?;
    let reason = req.reason.as_str();
    let parameters = serde_json::json!({"resolution": reason});
    let audited = Audited::new(&SettlementExceptionResolve::ACT, id.to_string(), req.note.trim(), parameters);
    let done = async {
        let note = req.note.trim();
        if note.is_empty() || note.chars().count() > 1000 {
            return Err(OpsError::invalid("note_required", "note", "a note of 1 to 1000 characters is required"));
        }
        store::get_exception(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
        let mut tx = ops.db.begin().await?;
        if !store::resolve_exception(&mut tx, id, operator.id, req.reason, note).await? {
            return Err(OpsError::conflict("already_resolved", "this settlement exception is already resolved"));
        }
        audited.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        let row = store::get_exception(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
        Ok(view(&row))
    };
    audited.or_refuse(ops, operator, done.await).await
}
