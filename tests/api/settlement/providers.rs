//! Settlement with several providers (SPEC §14, §16; issue 31): a report is one provider's — fetched
//! from it, stored and versioned as its own — and its lines match only the withdrawals sent to
//! that provider; a line naming another provider's withdrawal is an `unknown_transfer` exception
//! that moves nothing; the missing sweep looks only at the provider's own withdrawals; an unknown
//! provider is refused; the daily import runs per provider, from each one's own hour. Two provider
//! mocks over real HTTP (`acme` first for USD, `bolt` second), through the gateways a providers
//! file builds (`startup::gateways_from`, as `serve` does).

use std::time::Duration;

use chrono::TimeDelta;
use provider_mocks::{ReportFault, ReportFaultConfig};
use rust_decimal::Decimal;
use serde_json::{json, Value};
use uuid::Uuid;
use withdrawals::config::providers::Providers;
use withdrawals::domain::settlement::{ExceptionKind, ImportState, LineResult};
use withdrawals::domain::{WithdrawalId, WithdrawalStatus};
use withdrawals::jobs::settlement as settlement_job;
use withdrawals::jobs::JobKind;
use withdrawals::ops::types::{ExceptionView, ImportView, List, Page, ReportView};
use withdrawals::provider::Gateways;
use withdrawals::storage::settlement as store;
use withdrawals::storage::{attempts, DbTime};

use super::{app, import_state, refusal, WAIT};
use crate::both_backends;
use crate::harness::{provider_mock, read, typed, worker_config, ProviderHarness, TestApp};

both_backends!(with = app;
    a_providers_report_matches_only_its_own_withdrawals_and_another_providers_is_an_unknown_transfer,
    an_import_naming_an_unknown_provider_is_refused_and_stores_nothing,
    the_daily_import_is_scheduled_and_fetched_per_provider_from_its_own_hour,
);

/// Two providers over real HTTP, both paying USD: `acme` (priority 1) and `bolt` (priority 2),
/// their breakers opening only when forced; `settlement` is each one's providers-file entry.
pub(crate) struct Two {
    pub acme: ProviderHarness,
    pub bolt: ProviderHarness,
    pub gateways: Gateways,
    pub providers: Providers,
}

pub(crate) async fn acme_and_bolt(acme_settlement: Value, bolt_settlement: Value) -> Two {
    let (acme, bolt) = (provider_mock(2_000).await, provider_mock(2_000).await);
    let never_opens = json!({"failure_rate": 1.0, "window_s": 60, "min_calls": 100000, "open_s": 1});
    let entry = |name: &str, url: String, priority: u32, settlement: &Value| {
        let mut entry = json!({"name": name, "url": url, "currencies": ["USD"], "priority": priority,
                               "api_key_env": "KEY", "breaker": never_opens});
        if !settlement.is_null() {
            entry["settlement"] = settlement.clone();
        }
        entry
    };
    let file = json!({"providers": [
        entry("acme", acme.mock.url(), 1, &acme_settlement),
        entry("bolt", bolt.mock.url(), 2, &bolt_settlement),
    ]});
    let env = |name: &str| (name == "KEY").then(|| "test-provider-key".to_owned());
    let providers = Providers::parse(&file.to_string(), false, &env).unwrap();
    let default = withdrawals::provider::breaker::BreakerConfig::default();
    let gateways = withdrawals::startup::gateways_from(
        &providers,
        &default,
        Duration::from_millis(500),
        Duration::from_millis(2_000),
    )
    .unwrap();
    Two { acme, bolt, gateways, providers }
}

impl Two {
    /// A worker on every queue reaching both providers, with no grace days (a completed
    /// withdrawal missing from an imported day is an exception at once) and no daily import of
    /// its own.
    pub fn start_worker(&self, app: &TestApp, id: &str) -> tokio_util::sync::CancellationToken {
        let mut config = worker_config(id);
        config.settlement.grace_days = 0;
        config.settlement.daily_import = false;
        app.start_worker(self.gateways.clone(), config)
    }

    /// An ops API on the app's database reaching both providers; its base URL.
    pub async fn serve(&self, app: &TestApp) -> String {
        let mut config = crate::harness::test_config();
        config.settlement.grace_days = 0;
        crate::harness::serve_extra_with(app, config, self.gateways.clone()).await
    }
}

/// The providers the withdrawal's attempts went to, oldest first.
async fn attempted_at(app: &TestApp, id: WithdrawalId) -> Vec<String> {
    let attempts = attempts::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    attempts.into_iter().map(|a| a.provider).collect()
}

/// `POST {ops}/ops/v1/settlement/imports` as `token`: the status and the JSON answer.
async fn post_import(app: &TestApp, ops: &str, token: &str, body: Value) -> (u16, Value) {
    let response = app
        .client
        .post(format!("{ops}/ops/v1/settlement/imports"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// An import through the ops API at `ops`, run by the workers already running: the finished
/// import.
async fn imported_at(app: &TestApp, ops: &str, token: &str, body: Value) -> ImportView {
    let (status, answer) = post_import(app, ops, token, body).await;
    assert_eq!(status, 202, "{answer}");
    let queued: ImportView = typed(answer);
    let done = import_state(app, token, queued.id, |v| v.state.is_final()).await;
    assert_eq!(done.state, ImportState::Done, "{done:?}");
    done
}

async fn exceptions_at(app: &TestApp, ops: &str, token: &str, query: &str) -> Vec<ExceptionView> {
    let url = format!("{ops}/ops/v1/settlement/exceptions?{query}");
    let page: Page<ExceptionView> = read(app.client.get(url).bearer_auth(token).send().await.unwrap()).await;
    page.data
}

/// `acme` pays two withdrawals; with its breaker forced open, `bolt` pays two more. Bolt's report
/// of the day — which also shows a transfer under the key of one of acme's withdrawals — imported
/// as bolt's matches bolt's two withdrawals only; the line naming acme's withdrawal is an
/// `unknown_transfer` exception naming it, which neither matches nor moves it, and acme's
/// withdrawals are not missing from bolt's report. Acme's own report (the primary provider's,
/// imported without naming it) then matches acme's, and the one it leaves out is missing from it.
async fn a_providers_report_matches_only_its_own_withdrawals_and_another_providers_is_an_unknown_transfer(
    app: TestApp,
) {
    let two = acme_and_bolt(Value::Null, Value::Null).await;
    let _worker = two.start_worker(&app, "w-two-providers").drop_guard();
    let ops = two.serve(&app).await;
    let operator = app.operator("operator").await;
    let alice = app.customer("100.00").await;
    let mut at_acme = Vec::new();
    for key in ["a1", "a2"] {
        at_acme.push(app.create_withdrawal(&alice, key, "10.00").await);
    }
    for id in &at_acme {
        app.wait_for_status(*id, WithdrawalStatus::Completed, WAIT).await;
    }
    two.gateways.get("acme").unwrap().breaker.force_open();
    let mut at_bolt = Vec::new();
    for key in ["b1", "b2"] {
        at_bolt.push(app.create_withdrawal(&alice, key, "10.00").await);
    }
    for id in &at_bolt {
        app.wait_for_status(*id, WithdrawalStatus::Completed, WAIT).await;
    }
    two.gateways.get("acme").unwrap().breaker.reset();
    let ([a1, a2], [b1, b2]) = ([at_acme[0], at_acme[1]], [at_bolt[0], at_bolt[1]]);
    for (id, provider) in [(a1, "acme"), (a2, "acme"), (b1, "bolt"), (b2, "bolt")] {
        assert_eq!(attempted_at(&app, id).await, [provider], "{id}");
    }
    let today = two.bolt.mock.now().date_naive();
    // Bolt's report also shows a transfer under acme's withdrawal's key (bolt never had it).
    two.bolt.mock.set_report_faults(ReportFaultConfig {
        rules: vec![ReportFault::UnknownTransfer {
            transfer_id: "tr_bolt_stray".into(),
            idempotency_key: a1.to_string(),
            reference: Some(a1.to_string()),
            amount: Decimal::new(1000, 2),
            currency: "USD".into(),
            date: today,
        }],
    });
    // Acme's leaves out the paid line of its second withdrawal.
    two.acme.mock.set_report_faults(ReportFaultConfig {
        rules: vec![ReportFault::OmitPaid { idempotency_key: a2.to_string() }],
    });
    let before = app.usd_balance(&alice).await;
    assert_eq!((before.0.as_str(), before.2.as_str()), ("60.00", "40.00"), "{before:?}");

    let bolts = imported_at(&app, &ops, &operator, json!({"date": today, "provider": "bolt"})).await;

    assert_eq!(bolts.provider, "bolt", "{bolts:?}");
    let summary = bolts.summary.clone().expect("a finished import's summary");
    assert_eq!(summary.provider, "bolt");
    assert_eq!(summary.lines, 3, "{summary:?}");
    assert_eq!(summary.matching.matched, 2, "bolt's two withdrawals: {summary:?}");
    assert_eq!(summary.matching.exceptions_opened, 1, "the line naming acme's withdrawal: {summary:?}");
    assert_eq!(summary.missing_opened, 0, "acme's withdrawals are not missing from bolt's report: {summary:?}");
    assert_eq!((summary.matching.completed, summary.matching.returns_credited), (0, 0), "{summary:?}");
    for id in [b1, b2] {
        let lines = store::lines_for_withdrawal(&app.db, app.key(id).await).await.unwrap();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!((lines[0].provider.as_str(), lines[0].result), ("bolt", Some(LineResult::Matched)));
    }
    assert!(
        store::lines_for_withdrawal(&app.db, app.key(a1).await).await.unwrap().is_empty(),
        "bolt's line is matched to none of acme's withdrawals"
    );
    let open = exceptions_at(&app, &ops, &operator, "").await;
    assert_eq!(open.len(), 1, "{open:#?}");
    let stray = &open[0];
    assert_eq!((stray.kind, stray.provider.as_str()), (ExceptionKind::UnknownTransfer, "bolt"), "{stray:#?}");
    assert_eq!(stray.withdrawal_id, Some(a1.0), "the exception names the withdrawal its key names: {stray:#?}");
    assert_eq!(stray.transfer_id.as_deref(), Some("tr_bolt_stray"));
    assert!(stray.detail.contains("sent to provider acme, not bolt"), "{}", stray.detail);
    assert_eq!(stray.evidence["ours"], Value::Null, "matched to nothing: {stray:#?}");
    assert!(exceptions_at(&app, &ops, &operator, "provider=acme").await.is_empty());
    assert_eq!(exceptions_at(&app, &ops, &operator, "provider=bolt").await.len(), 1);
    // Nothing moved: acme's withdrawal stays as it was, no money came back.
    let held = withdrawals::storage::withdrawals::find(&app.db, a1).await.unwrap().unwrap();
    assert_eq!(held.status, WithdrawalStatus::Completed);
    assert_eq!(app.usd_balance(&alice).await, before);
    app.assert_ledger_invariant().await;

    // Acme's report, the primary provider's: imported when none is named.
    let acmes = imported_at(&app, &ops, &operator, json!({"date": today})).await;
    let summary = acmes.summary.clone().expect("a finished import's summary");
    assert_eq!((acmes.provider.as_str(), summary.provider.as_str()), ("acme", "acme"), "{acmes:?}");
    assert!(!summary.already_imported, "another provider's report of the day: {summary:?}");
    assert_eq!((summary.version, summary.lines), (1, 1), "{summary:?}");
    assert_eq!(summary.matching.matched, 1, "{summary:?}");
    assert_eq!(summary.matching.exceptions_opened, 0, "{summary:?}");
    assert_eq!(summary.missing_opened, 1, "only acme's omitted withdrawal: {summary:?}");
    let lines = store::lines_for_withdrawal(&app.db, app.key(a1).await).await.unwrap();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!((lines[0].provider.as_str(), lines[0].result), ("acme", Some(LineResult::Matched)));
    let missing = exceptions_at(&app, &ops, &operator, "kind=missing_from_report").await;
    assert_eq!(missing.len(), 1, "{missing:#?}");
    assert_eq!((missing[0].withdrawal_id, missing[0].provider.as_str()), (Some(a2.0), "acme"));

    // Each provider's report is its own version 1 of the day, listed with its provider.
    let url = format!("{ops}/ops/v1/settlement/reports?date={today}");
    let reports: List<ReportView> = read(app.client.get(url).bearer_auth(&operator).send().await.unwrap()).await;
    let listed: Vec<(&str, i32)> = reports.data.iter().map(|r| (r.provider.as_str(), r.version)).collect();
    assert_eq!(listed, [("acme", 1), ("bolt", 1)], "{reports:?}");
    let url = format!("{ops}/ops/v1/settlement/reports?provider=bolt");
    let bolts_only: List<ReportView> = read(app.client.get(url).bearer_auth(&operator).send().await.unwrap()).await;
    assert_eq!(bolts_only.data.len(), 1);
    // The same report of bolt again changes nothing.
    let again = imported_at(&app, &ops, &operator, json!({"date": today, "provider": "bolt"})).await;
    let again = again.summary.expect("a summary");
    assert!(again.already_imported, "{again:?}");
    assert_eq!((again.matching.matched, again.matching.exceptions_opened, again.missing_opened), (0, 0, 0));
    assert_eq!(exceptions_at(&app, &ops, &operator, "").await.len(), 2);
    assert_eq!(app.usd_balance(&alice).await, before);
    app.assert_ledger_invariant().await;
}

/// A provider that is not configured is refused with 422 `unknown_provider` naming the known
/// ones, on an API with one provider (`default`) and on one with two; nothing is stored or queued.
async fn an_import_naming_an_unknown_provider_is_refused_and_stores_nothing(app: TestApp) {
    let operator = app.operator("operator").await;
    let today = chrono::Utc::now().date_naive();
    let (status, answer) =
        post_import(&app, &app.base_url, &operator, json!({"date": today, "provider": "bolt"})).await;
    assert_eq!((status, refusal(&answer).code.as_str()), (422, "unknown_provider"), "{answer}");
    assert_eq!(refusal(&answer).field.as_deref(), Some("provider"), "{answer}");
    assert!(refusal(&answer).detail.contains("known: default"), "{answer}");

    let two = acme_and_bolt(Value::Null, Value::Null).await;
    let ops = two.serve(&app).await;
    let csv = format!("{}tr_1,k1,r1,1.00,USD,0.00,paid,{today}T10:00:00Z\n", super::HEADER);
    for body in [json!({"date": today, "provider": "nope"}), json!({"csv": csv, "provider": "ACME"})] {
        let (status, answer) = post_import(&app, &ops, &operator, body).await;
        assert_eq!((status, refusal(&answer).code.as_str()), (422, "unknown_provider"), "{answer}");
        assert!(refusal(&answer).detail.contains("known: acme, bolt"), "{answer}");
    }
    // The one provider's own name, named, is accepted.
    let (status, answer) =
        post_import(&app, &app.base_url, &operator, json!({"csv": csv, "provider": "default"})).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(typed::<ImportView>(answer).provider, "default");
    let listed: List<ImportView> = app.ops_get(&operator, "/ops/v1/settlement/imports").await;
    assert_eq!(listed.data.len(), 1, "only the accepted one is queued: {listed:?}");
    assert!(two.acme.mock.requests().is_empty() && two.bolt.mock.requests().is_empty(), "nothing fetched");
    let audit: Page<withdrawals::ops::types::AuditEntry> =
        app.ops_get(&app.operator("admin").await, "/ops/v1/audit?limit=50").await;
    let refused = audit.data.iter().filter(|r| r.action == "settlement.import" && r.result == "unknown_provider");
    assert_eq!(refused.count(), 3, "every refusal audited");
}

/// The daily import runs per provider: `acme`'s file entry imports daily from 00:00 UTC, `bolt`'s
/// not at all, whatever the single-provider settings say; without a file entry a provider takes
/// those settings. Each provider's jobs fetch its own reports, and a job naming a provider the
/// worker does not know is dead-lettered (`unknown_provider`).
async fn the_daily_import_is_scheduled_and_fetched_per_provider_from_its_own_hour(app: TestApp) {
    let two = acme_and_bolt(json!({"import_hour": 0}), json!({"daily_import": false})).await;
    let mut settings = withdrawals::config::SettlementSettings { daily_import: false, ..Default::default() };
    let schedule = |settings: withdrawals::config::SettlementSettings, providers: Option<&Providers>| {
        let (db, gateways) = (app.db.clone(), two.gateways.clone());
        let providers = providers.cloned();
        async move { settlement_job::schedule_daily(&db, &settings, &gateways, providers.as_ref()).await.unwrap() }
    };
    // Yesterday and the six days before, never fetched, for acme only; never twice.
    assert_eq!(schedule(settings, Some(&two.providers)).await, 7);
    assert_eq!(schedule(settings, Some(&two.providers)).await, 0);
    let yesterday = chrono::Utc::now().date_naive() - TimeDelta::days(1);
    let exists = |correlation: String| {
        let db = app.db.clone();
        async move {
            let mut tx = db.begin().await.unwrap();
            withdrawals::storage::jobs::exists_with_correlation(&mut tx, JobKind::ImportSettlement, &correlation)
                .await
                .unwrap()
        }
    };
    assert!(exists(format!("settlement-import:acme:{yesterday}")).await);
    assert!(!exists(format!("settlement-import:bolt:{yesterday}")).await);
    assert!(!exists(format!("settlement-import:{yesterday}")).await, "no job for a `default` provider");
    // With no file entries, each provider takes the single-provider settings: bolt's days now.
    settings.daily_import = true;
    settings.import_hour = 0;
    assert_eq!(schedule(settings, None).await, 7);
    assert!(exists(format!("settlement-import:bolt:{yesterday}")).await);

    // A job for a provider this worker does not have.
    let mut tx = app.db.begin().await.unwrap();
    settlement_job::enqueue_import(&mut tx, "gone", yesterday, "test-gone", DbTime::now()).await.unwrap();
    tx.commit().await.unwrap();
    let _worker = two.start_worker(&app, "w-daily").drop_guard();
    let day = yesterday.format("%Y-%m-%d").to_string();
    app.eventually("each provider's report of yesterday imported", WAIT, || async {
        let acme = store::list_reports(&app.db, Some("acme"), Some(&day), 10).await.unwrap();
        let bolt = store::list_reports(&app.db, Some("bolt"), Some(&day), 10).await.unwrap();
        (acme.len() == 1 && bolt.len() == 1).then_some(())
    })
    .await;
    let fetched = |mock: &provider_mocks::RunningMock| {
        mock.requests().iter().filter(|r| r.route == provider_mocks::Route::Report).count()
    };
    assert!(fetched(&two.acme.mock) >= 1 && fetched(&two.bolt.mock) >= 1, "each report fetched from its provider");
    let viewer = app.operator("viewer").await;
    let letter = super::first_dead_letter(&app, &viewer, "error_code=unknown_provider").await;
    assert!(letter.error_message.contains("gone"), "{letter:#?}");
    assert!(store::list_reports(&app.db, Some("gone"), None, 10).await.unwrap().is_empty());
}

/// Migration 0032 on a populated database (issue 31): a database at migration 31 holding a
/// report, its line, an exception and an operator import migrates with every row `default`'s, and
/// the keys are per provider afterwards: another provider's report of the same day, version and
/// bytes, and its exception under the same dedupe key, are taken; `default`'s again are refused.
async fn a_one_provider_database_migrates_its_settlement_rows_to_default(backend: crate::harness::Backend) {
    use sqlx::Connection;

    let (url, _dir) = crate::harness::fresh_database(backend).await;
    let source = match backend {
        crate::harness::Backend::Sqlite => "migrations/sqlite",
        crate::harness::Backend::Postgres => "migrations/postgres",
    };
    let older = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(source)).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.split('_').next().unwrap().parse::<i64>().unwrap() <= 31 {
            std::fs::copy(&path, older.path().join(&name)).unwrap();
        }
    }
    let migrator = sqlx::migrate::Migrator::new(older.path()).await.unwrap();
    crate::on_connection!(&url, |conn| migrator.run(&mut conn).await.unwrap());
    let (report, line, exception, import) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let system = withdrawals::domain::AccountId::SYSTEM.0;
    let now = chrono::Utc::now();
    let empty = sqlx::types::Json(json!({}));
    crate::on_connection!(&url, |conn| {
        sqlx::query(
            "INSERT INTO settlement_reports (id, report_date, version, digest, source, line_count, differences,
                                             imported_by, imported_at)
             VALUES ($1, '2026-12-01', 1, 'digest-1', 'provider', 1, $2, 'ops', $3)",
        )
        .bind(report)
        .bind(&empty)
        .bind(now)
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO settlement_lines (id, account_id, report_id, line_no, line_key, content_digest, transfer_id,
                                           idempotency_key, reference, amount_minor, currency, fee_minor, status,
                                           event_at)
             VALUES ($1, $2, $3, 2, 'key', 'd', 'tr_1', 'not-ours', 'r', 250, 'USD', 0, 'paid', $4)",
        )
        .bind(line)
        .bind(system)
        .bind(report)
        .bind(now)
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO settlement_exceptions (id, account_id, kind, status, dedupe_key, line_id, detail, evidence,
                                                opened_at)
             VALUES ($1, $2, 'unknown_transfer', 'open', 'line:unknown_transfer:key:d', $3, 'x', $4, $5)",
        )
        .bind(exception)
        .bind(system)
        .bind(line)
        .bind(&empty)
        .bind(now)
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO settlement_imports (id, state, report_date, source, report, digest, line_count, requested_by,
                                             audit, created_at)
             VALUES ($1, 'done', '2026-12-01', 'provider', $2, 'digest-1', 1, $3, $4, $5)",
        )
        .bind(import)
        .bind(b"csv".to_vec())
        .bind(Uuid::now_v7())
        .bind(&empty)
        .bind(now)
        .execute(&mut conn)
        .await
        .unwrap();
    });

    let db = withdrawals::storage::Db::connect(&url, &withdrawals::storage::PoolSettings::default()).await.unwrap();
    db.migrate().await.unwrap();
    let reports = store::list_reports(&db, None, None, 10).await.unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(
        (reports[0].id.0, reports[0].provider.as_str(), reports[0].digest.as_str()),
        (report, "default", "digest-1")
    );
    let stored = store::get_exception(&db, withdrawals::domain::SettlementExceptionId(exception)).await.unwrap();
    assert_eq!(stored.map(|e| e.provider).as_deref(), Some("default"));
    let lines = store::unmatched_lines_of_day(&db, "default", "2026-12-01").await.unwrap();
    assert_eq!(lines.iter().map(|l| (l.id.0, l.provider.as_str())).collect::<Vec<_>>(), [(line, "default")]);
    db.close().await;

    let imported: Vec<(Uuid, String)> = crate::on_connection!(&url, |conn| {
        sqlx::query_as("SELECT id, provider FROM settlement_imports").fetch_all(&mut conn).await.unwrap()
    });
    assert_eq!(imported, [(import, "default".to_owned())]);
    let taken: [bool; 4] = crate::on_connection!(&url, |conn| {
        let report_of = |provider: &'static str| {
            sqlx::query(
                "INSERT INTO settlement_reports (id, provider, report_date, version, digest, source, line_count,
                                                 differences, imported_by, imported_at)
                 VALUES ($1, $2, '2026-12-01', 1, 'digest-1', 'provider', 1, $3, 'ops', $4)",
            )
            .bind(Uuid::now_v7())
            .bind(provider)
            .bind(sqlx::types::Json(json!({})))
            .bind(now)
        };
        let exception_of = |provider: &'static str| {
            sqlx::query(
                "INSERT INTO settlement_exceptions (id, account_id, provider, kind, status, dedupe_key, detail,
                                                    evidence, opened_at)
                 VALUES ($1, $2, $3, 'unknown_transfer', 'open', 'line:unknown_transfer:key:d', 'x', $4, $5)",
            )
            .bind(Uuid::now_v7())
            .bind(system)
            .bind(provider)
            .bind(sqlx::types::Json(json!({})))
            .bind(now)
        };
        [
            report_of("bolt").execute(&mut conn).await.is_ok(),
            report_of("default").execute(&mut conn).await.is_ok(),
            exception_of("bolt").execute(&mut conn).await.is_ok(),
            exception_of("default").execute(&mut conn).await.is_ok(),
        ]
    });
    assert_eq!(taken, [true, false, true, false], "bolt's report and exception taken; default's again refused");
}

mod populated_migration {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::a_one_provider_database_migrates_its_settlement_rows_to_default(crate::harness::Backend::Sqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::a_one_provider_database_migrates_its_settlement_rows_to_default(crate::harness::Backend::Postgres).await
    }
}
