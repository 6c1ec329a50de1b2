//! The daily `import_settlement` job (SPEC §14): scheduling (yesterday's report and a week of
//! backfill), the job that fetches, imports and matches, and its retries and dead letters.

use chrono::{NaiveDate, TimeDelta, Utc};
use serde_json::json;

use crate::config::SettlementSettings;
use crate::dead_letter::Failure;
use crate::domain::job::{ImportSettlement, JobKind};
use crate::domain::settlement::ImportState;
use crate::jobs::context::JobContext;
use crate::jobs::retry::RetryDecision;
use crate::storage::jobs::{self as job_store, Finish};
use crate::storage::settlement::{self as store};
use crate::storage::{audit, Db, DbTime, Tx};

use super::import::{fetch, import};
use super::matching::match_day;
use super::{ImportError, ImportSummary, ReportSource};

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
    Ok(job_store::enqueue(tx, &ImportSettlement { date: day, import_id: None }.job(correlation_id, run_at)).await?.id)
}

/// Enqueues the import of an operator's stored report (`settlement_imports` row `import_id`), in
/// the transaction that stores it.
pub async fn enqueue_stored_import(
    tx: &mut Tx,
    import_id: uuid::Uuid,
    day: NaiveDate,
) -> crate::storage::Result<crate::domain::JobId> {
    let payload = ImportSettlement { date: day, import_id: Some(import_id) };
    Ok(job_store::enqueue(tx, &payload.job(&format!("settlement-import:{import_id}"), DbTime::now())).await?.id)
}

/// The `import_settlement` job: fetch the day's report (or read the operator's stored one),
/// import and match it.
pub async fn handle(ctx: &JobContext, payload: ImportSettlement) -> anyhow::Result<()> {
    if let Some(import_id) = payload.import_id {
        return handle_stored(ctx, import_id, payload.date).await;
    }
    let settings = &ctx.config().settlement;
    let bytes = match fetch(ctx.gateways().primary(), payload.date).await {
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
                    job_store::mark_first_attempt(&mut tx, ctx.job.key(), ctx.job.lease_token).await?;
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
    match import(
        ctx.db(),
        Some(ctx.gateways().primary()),
        settings,
        Some(payload.date),
        &bytes,
        ReportSource::Provider,
        &by,
    )
    .await
    {
        Ok(_) => {
            // Lines of earlier days that waited for the provider's confirmation are tried again.
            for day in store::days_awaiting(ctx.db()).await? {
                let counts = match_day(ctx.db(), Some(ctx.gateways().primary()), &day).await?;
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
    if row.state.is_final() {
        return ctx.finish_in_own_tx(&Finish::Succeeded).await;
    }
    store::start_import(db, import_id).await?;
    let bytes = store::import_bytes(db, import_id).await?.unwrap_or_default();
    let origin = row.source;
    let by = format!("operator:{}", row.requested_by.0);
    let settings = &ctx.config().settlement;
    let outcome = import(db, Some(ctx.gateways().primary()), settings, Some(date), &bytes, origin, &by).await;
    let (state, summary, error, result) = match outcome {
        Ok(summary) => (ImportState::Done, Some(summary), None, "ok"),
        Err(ImportError::Refused(err)) => {
            (ImportState::Failed, None, Some(format!("report refused: {err}")), "report_refused")
        }
        Err(ImportError::NoDay) => (ImportState::Failed, None, Some(ImportError::NoDay.to_string()), "date_required"),
        // Retried by the worker; what was done stays done.
        Err(ImportError::Storage(err)) => return Err(err.into()),
    };
    let mut tx = db.begin().await?;
    let stored_summary = summary.as_ref().map(serde_json::to_value).transpose()?;
    if store::finish_import(&mut tx, import_id, state, stored_summary.as_ref(), error.as_deref()).await? {
        audit::insert(&mut tx, &import_audit(&row, summary.as_ref(), result)).await?;
    }
    tracing::info!(%import_id, %state, "settlement import finished");
    ctx.finish_or_rollback(tx, &Finish::Succeeded).await
}

/// The `settlement.import` audit row the request prepared, with the outcome filled in.
fn import_audit(row: &store::ImportRow, summary: Option<&ImportSummary>, result: &str) -> audit::AuditRow {
    let prepared = &row.audit.0;
    let mut parameters = prepared.parameters.clone();
    parameters["import_id"] = json!(row.id);
    if let Some(s) = summary {
        parameters["version"] = json!(s.version);
        parameters["digest"] = json!(s.digest);
        parameters["already_imported"] = json!(s.already_imported);
        parameters["lines"] = json!(s.lines);
        parameters["exceptions_opened"] = json!(s.matching.exceptions_opened);
    }
    prepared.finish(row.requested_by, &row.report_date, parameters, result)
}
