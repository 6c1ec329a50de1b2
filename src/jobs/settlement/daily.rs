//! The daily `import_settlement` job (SPEC §14, §16): scheduling per provider (yesterday's report
//! and a week of backfill, from each provider's own import hour), the job that fetches a
//! provider's report, imports and matches it, and its retries and dead letters.

use chrono::{NaiveDate, TimeDelta, Utc};
use serde_json::json;

use crate::config::providers::{ProviderSettings, Providers, DEFAULT_PROVIDER};
use crate::config::SettlementSettings;
use crate::dead_letter::Failure;
use crate::domain::job::{ImportSettlement, JobKind};
use crate::domain::settlement::ImportState;
use crate::jobs::context::JobContext;
use crate::jobs::retry::RetryDecision;
use crate::provider::Gateways;
use crate::storage::jobs::{self as job_store, Finish};
use crate::storage::settlement::{self as store};
use crate::storage::{audit, Db, DbTime, Tx};

use super::import::{fetch, import};
use super::matching::match_day;
use super::{ImportError, ImportSummary, ReportProvider, ReportSource};

/// How many days back the daily run looks for a report that was never fetched (the worker was
/// down, the job was never enqueued).
pub const BACKFILL_DAYS: i64 = 7;

/// From which hour (UTC) a provider's report of yesterday is fetched daily, or `None` when it is
/// not imported daily: the provider's own `settlement` entry in the providers file when it has
/// one (an hour it leaves out is `SETTLEMENT_IMPORT_HOUR`), else the single-provider settings
/// (`SETTLEMENT_DAILY_IMPORT`, `SETTLEMENT_IMPORT_HOUR`). Pure.
pub fn daily_schedule(settings: &SettlementSettings, provider: Option<&ProviderSettings>) -> Option<u32> {
    match provider.and_then(|p| p.settlement) {
        Some((daily, hour)) => daily.then(|| hour.unwrap_or(settings.import_hour)),
        None => settings.daily_import.then_some(settings.import_hour),
    }
}

/// For every provider with a daily import ([`daily_schedule`]): enqueues yesterday's import once
/// it is due (after the provider's import hour, UTC), and the import of any of the
/// [`BACKFILL_DAYS`] before it that has no report of that provider and never had an import job; a
/// day whose job was dead-lettered (a refused report) waits for an operator. Called from the
/// worker's sweep with its gateways and its providers file (`None` with one provider). Returns
/// how many imports were enqueued.
pub async fn schedule_daily(
    db: &Db,
    settings: &SettlementSettings,
    gateways: &Gateways,
    providers: Option<&Providers>,
) -> anyhow::Result<usize> {
    let mut enqueued = 0;
    for gateway in gateways.all() {
        let name = gateway.name.as_str();
        if let Some(hour) = daily_schedule(settings, providers.and_then(|p| p.get(name))) {
            enqueued += schedule_provider(db, name, hour).await?;
        }
    }
    Ok(enqueued)
}

/// [`schedule_daily`] for one provider, in one transaction.
async fn schedule_provider(db: &Db, provider: &str, import_hour: u32) -> anyhow::Result<usize> {
    let now = Utc::now();
    let due = now.time() >= chrono::NaiveTime::from_hms_opt(import_hour, 0, 0).unwrap_or_default();
    let first_back = if due { 1 } else { 2 };
    let mut tx = db.begin().await?;
    let mut enqueued = Vec::new();
    for back in first_back..=BACKFILL_DAYS {
        let day = now.date_naive() - TimeDelta::days(back);
        let correlation = daily_correlation(provider, day);
        if store::has_report(&mut tx, provider, &day.format("%Y-%m-%d").to_string()).await?
            || job_store::exists_with_correlation(&mut tx, JobKind::ImportSettlement, &correlation).await?
        {
            continue;
        }
        enqueue_import(&mut tx, provider, day, &correlation, DbTime::now()).await?;
        enqueued.push(day);
    }
    tx.commit().await?;
    if !enqueued.is_empty() {
        tracing::info!(provider, days = ?enqueued, "settlement imports enqueued");
    }
    Ok(enqueued.len())
}

/// The correlation id of a provider's daily import of `day`, by which it is enqueued once:
/// `settlement-import:<day>` for `default` (as before providers were named),
/// `settlement-import:<provider>:<day>` for any other.
fn daily_correlation(provider: &str, day: NaiveDate) -> String {
    match provider {
        DEFAULT_PROVIDER => format!("settlement-import:{day}"),
        named => format!("settlement-import:{named}:{day}"),
    }
}

/// Enqueues an import of `provider`'s report of `day` (fetched from it). The payload names the
/// provider unless it is `default` (whose payloads stay as they were before providers were named).
pub async fn enqueue_import(
    tx: &mut Tx,
    provider: &str,
    day: NaiveDate,
    correlation_id: &str,
    run_at: DbTime,
) -> crate::storage::Result<crate::domain::JobId> {
    let provider = (provider != DEFAULT_PROVIDER).then(|| provider.to_owned());
    let payload = ImportSettlement { date: day, import_id: None, provider };
    Ok(job_store::enqueue(tx, &payload.job(correlation_id, run_at)).await?.id)
}

/// Enqueues the import of an operator's stored report (`settlement_imports` row `import_id`), in
/// the transaction that stores it.
pub async fn enqueue_stored_import(
    tx: &mut Tx,
    import_id: uuid::Uuid,
    day: NaiveDate,
) -> crate::storage::Result<crate::domain::JobId> {
    // The import's row names its provider.
    let payload = ImportSettlement { date: day, import_id: Some(import_id), provider: None };
    Ok(job_store::enqueue(tx, &payload.job(&format!("settlement-import:{import_id}"), DbTime::now())).await?.id)
}

/// The `import_settlement` job: fetch the provider's report of the day (or read the operator's
/// stored one), import and match it. A payload naming no provider fetches from `default` (else
/// the primary provider: a job stored before providers were named); one naming a provider this
/// worker does not have is dead-lettered (`unknown_provider`).
pub async fn handle(ctx: &JobContext, payload: ImportSettlement) -> anyhow::Result<()> {
    if let Some(import_id) = payload.import_id {
        return handle_stored(ctx, import_id, payload.date).await;
    }
    let gateways = ctx.gateways();
    let gateway = match payload.provider.as_deref() {
        Some(name) => gateways.get(name),
        None => gateways.get(DEFAULT_PROVIDER).or_else(|| Some(gateways.primary())),
    };
    let Some(gateway) = gateway else {
        let name = payload.provider.unwrap_or_default();
        let failure = Failure::permanent("unknown_provider", format!("no provider `{name}` is configured here"));
        return ctx.dead_letter(ctx.db().begin().await?, &failure).await;
    };
    let settings = &ctx.config().settlement;
    let bytes = match fetch(gateway, payload.date).await {
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
    let from = ReportProvider::reached(gateway);
    match import(ctx.db(), from, settings, Some(payload.date), &bytes, ReportSource::Provider, &by).await {
        Ok(_) => {
            // The provider's lines of earlier days that waited for its confirmation are tried
            // again.
            for day in store::days_awaiting(ctx.db(), from.name).await? {
                let counts = match_day(ctx.db(), from, &day).await?;
                let provider = from.name;
                tracing::info!(provider, %day, ?counts, "settlement lines awaiting confirmation matched again");
            }
            ctx.finish_in_own_tx(&Finish::Succeeded).await
        }
        Err(ImportError::Refused(err)) => {
            let why = format!("{}'s report of {}: {err}", from.name, payload.date);
            let failure = Failure::permanent("settlement_report_refused", why);
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
    // A provider this worker cannot reach still has its report imported: its safe outcomes wait.
    let from = ReportProvider { name: &row.provider, gateway: ctx.gateways().get(&row.provider) };
    if from.gateway.is_none() {
        tracing::warn!(provider = from.name, %import_id, "settlement import of a provider this worker cannot reach");
    }
    let outcome = import(db, from, settings, Some(date), &bytes, origin, &by).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(daily_import: bool, import_hour: u32) -> SettlementSettings {
        SettlementSettings { daily_import, import_hour, ..Default::default() }
    }

    fn provider(settlement: Option<(bool, Option<u32>)>) -> ProviderSettings {
        let single = Providers::single("http://127.0.0.1:1", None).unwrap();
        ProviderSettings { settlement, ..single.all()[0].clone() }
    }

    #[test]
    fn a_providers_own_settlement_entry_decides_its_daily_import_and_hour() {
        // No file, or no entry: the single-provider settings.
        assert_eq!(daily_schedule(&settings(true, 6), None), Some(6));
        assert_eq!(daily_schedule(&settings(false, 6), None), None);
        assert_eq!(daily_schedule(&settings(true, 6), Some(&provider(None))), Some(6));
        // An entry decides, whatever the settings say; an hour it leaves out is theirs.
        assert_eq!(daily_schedule(&settings(false, 6), Some(&provider(Some((true, Some(2)))))), Some(2));
        assert_eq!(daily_schedule(&settings(false, 6), Some(&provider(Some((true, None))))), Some(6));
        assert_eq!(daily_schedule(&settings(true, 6), Some(&provider(Some((false, Some(2)))))), None);
    }

    #[test]
    fn a_daily_job_names_its_provider_unless_it_is_default_and_stored_payloads_still_decode() {
        let day = NaiveDate::from_ymd_opt(2026, 12, 4).unwrap();
        assert_eq!(daily_correlation("default", day), "settlement-import:2026-12-04");
        assert_eq!(daily_correlation("bolt", day), "settlement-import:bolt:2026-12-04");
        let stored: ImportSettlement = serde_json::from_str(r#"{"date":"2026-12-04","import_id":null}"#).unwrap();
        assert_eq!(stored.provider, None, "a payload stored before providers were named");
        let default = ImportSettlement { date: day, import_id: None, provider: None };
        assert_eq!(serde_json::to_string(&default).unwrap(), r#"{"date":"2026-12-04","import_id":null}"#);
        let bolt = ImportSettlement { provider: Some("bolt".into()), ..default };
        let json = serde_json::to_string(&bolt).unwrap();
        assert_eq!(serde_json::from_str::<ImportSettlement>(&json).unwrap(), bolt);
    }
}
