//! `/metrics` (SPEC §9): what happened is a metric before it is an incident.
//!
//! The recorder is process-wide and every test of this binary writes it at once: a refresh from
//! another test's database sets the same gauges a moment later. So these scenarios never read a
//! database gauge back from `/metrics` (issue 27, "process-global metric gauges race"): a refresh
//! returns what it read from *this* test's database ([`DatabaseGauges`]), and its export is
//! rendered through a recorder of the test's own ([`rendered`]). Counters are read from `/metrics`
//! only as "grew by at least this test's events", which holds whatever runs beside it.

use std::time::Duration;

use provider_mocks::{FaultConfig, FaultEffect, FaultRule, RouteMatch};
use withdrawals::domain::settlement::ExceptionKind;
use withdrawals::domain::WithdrawalStatus;
use withdrawals::gauges::{DatabaseGauges, LedgerCheck};
use withdrawals::storage::settlement::{self as settlement_store, NewException};

use crate::both_backends;
use crate::harness::TestApp;

both_backends!(
    payouts_dead_letters_and_database_gauges_show_up_in_prometheus_text,
    every_settlement_exception_kind_reads_zero_until_one_opens_and_then_its_count_and_age_show,
    the_every_tick_state_counts_read_only_the_moving_states_and_agree_with_the_full_count,
    a_ledger_check_that_cannot_run_exports_ledger_check_failing_not_zero_violations,
    a_worker_started_without_metrics_bind_says_so_at_start,
);

/// The Prometheus text of what `export` records, through a recorder of this test's own (no other
/// test writes it).
fn rendered(export: impl FnOnce()) -> String {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, export);
    handle.render()
}

/// The value of the first sample whose line starts with `prefix` (metric name plus labels).
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok())
}

async fn payouts_dead_letters_and_database_gauges_show_up_in_prometheus_text(app: TestApp) {
    app.start_default_worker();
    let alice = app.customer("100.00").await;
    let paid = app.create_withdrawal(&alice, "paid", "10.00").await;
    app.wait_for_status(paid, WithdrawalStatus::Completed, std::time::Duration::from_secs(20)).await;
    app.provider
        .mock
        .set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::InvalidAccount)] });
    let rejected = app.create_withdrawal(&alice, "rejected", "10.00").await;
    app.wait_for_status(rejected, WithdrawalStatus::RequiresReview, std::time::Duration::from_secs(20)).await;

    let gauges = withdrawals::gauges::refresh_database_gauges(&app.db).await.unwrap();
    // What a serving process runs (startup.rs): the refresh loop, which puts every database
    // gauge on `/metrics` at once — without it, `ledger_check_failing` was there only when
    // another test of this process had run a ledger check first.
    let refresher = tokio_util::sync::CancellationToken::new();
    tokio::spawn(withdrawals::gauges::refresh_loop(
        app.db.clone(),
        std::time::Duration::from_secs(3600),
        refresher.clone(),
    ));
    let _stop_refresher = refresher.drop_guard();
    let text = app
        .eventually("the refresh loop's gauges on /metrics", std::time::Duration::from_secs(10), || async {
            let text = app.metrics().send().await.unwrap().text().await.unwrap();
            text.lines().any(|l| l.starts_with("ledger_check_failing ")).then_some(text)
        })
        .await;

    // Counters only grow: at least this test's events, whatever else runs.
    for (prefix, what) in [
        ("withdrawals_created_total{currency=\"USD\"}", "creations"),
        ("withdrawal_transitions_total{from=\"processing\",to=\"completed\"}", "transitions by from/to"),
        ("withdrawal_transitions_total{from=\"processing\",to=\"requires_review\"}", "parking"),
        ("job_attempts_total{queue=\"payouts\",kind=\"submit_payout\"}", "job attempts"),
        ("provider_request_duration_seconds_count{provider=\"default\",outcome=\"success\"}", "provider latency by outcome"),
        ("provider_request_duration_seconds_count{provider=\"default\",outcome=\"permanent\"}", "provider latency of rejections"),
        (
            "dead_letters_total{queue=\"payouts\",job_type=\"submit_payout\",category=\"dependency_rejected\",error_code=\"invalid_account\"}",
            "dead-letter arrivals",
        ),
    ] {
        let value = sample(&text, prefix).unwrap_or_else(|| panic!("{what}: no `{prefix}` in\n{text}"));
        assert!(value >= 1.0, "{what}: {prefix} = {value}");
    }
    // The database gauges: this database's answer, exactly, and how it is exported.
    let count = |state: WithdrawalStatus| gauges.withdrawals.iter().find(|(s, _, _)| *s == state).map(|(_, c, _)| *c);
    assert_eq!(count(WithdrawalStatus::Completed), Some(1));
    assert_eq!(count(WithdrawalStatus::RequiresReview), Some(1));
    assert_eq!(gauges.dead_letters_open, 1);
    let exported = rendered(|| gauges.export());
    for line in [
        "withdrawals_by_state{state=\"completed\"} 1",
        "withdrawals_by_state{state=\"requires_review\"} 1",
        "withdrawals_by_state{state=\"pending\"} 0",
        "dead_letters_open 1",
        "jobs_due{queue=\"reconciliation\"} 0",
    ] {
        assert!(exported.lines().any(|l| l == line), "no `{line}` in\n{exported}");
    }
    assert!(sample(&exported, "withdrawals_oldest_in_state_seconds{state=\"requires_review\"}").is_some());
    assert!(sample(&exported, "dead_letters_oldest_open_seconds").is_some());
    // And the process-wide families exist on `/metrics`.
    for family in ["withdrawals_by_state{", "dead_letters_open ", "ledger_check_failing ", "auth_failures_total{"] {
        assert!(text.lines().any(|l| l.starts_with(family)), "no `{family}` on /metrics:\n{text}");
    }
}

fn open_gauge(kind: ExceptionKind) -> String {
    format!("settlement_exceptions_open{{kind=\"{}\"}}", kind.as_str())
}

fn age_gauge(kind: ExceptionKind) -> String {
    format!("settlement_exception_oldest_open_age_seconds{{kind=\"{}\"}}", kind.as_str())
}

async fn every_settlement_exception_kind_reads_zero_until_one_opens_and_then_its_count_and_age_show(app: TestApp) {
    // A fresh service: every kind exists, at zero, with a zero age.
    let gauges = DatabaseGauges::read(&app.db, false).await.unwrap();
    assert_eq!(gauges.settlement_exceptions.len(), ExceptionKind::ALL.len());
    let text = rendered(|| gauges.export());
    for kind in ExceptionKind::ALL {
        assert_eq!(sample(&text, &open_gauge(kind)), Some(0.0), "{kind}: no zero sample in\n{text}");
        assert_eq!(sample(&text, &age_gauge(kind)), Some(0.0), "{kind}: no zero age in\n{text}");
    }

    // One unknown transfer opens, two days ago.
    let evidence = serde_json::json!({"source": "test"});
    let mut tx = app.db.begin().await.unwrap();
    let opened = settlement_store::open_exception(
        &mut tx,
        &NewException {
            account_id: withdrawals::domain::AccountId::SYSTEM,
            kind: ExceptionKind::UnknownTransfer,
            dedupe_key: "line:unknown_transfer:tr_metrics|paid|0".to_owned(),
            withdrawal_id: None,
            line_id: None,
            report_date: Some("2026-12-01"),
            transfer_id: Some("tr_metrics"),
            detail: "no withdrawal has this operation key",
            evidence: &evidence,
        },
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert!(opened);
    let two_days_ago = chrono::Utc::now() - chrono::TimeDelta::days(2);
    app.execute_raw(&format!(
        "UPDATE settlement_exceptions SET opened_at = '{}'",
        two_days_ago.format("%Y-%m-%dT%H:%M:%S%.6fZ")
    ))
    .await;

    let gauges = DatabaseGauges::read(&app.db, false).await.unwrap();
    let text = rendered(|| gauges.export());
    assert_eq!(sample(&text, &open_gauge(ExceptionKind::UnknownTransfer)), Some(1.0));
    let age = sample(&text, &age_gauge(ExceptionKind::UnknownTransfer)).unwrap();
    assert!((2.0 * 86_400.0..3.0 * 86_400.0).contains(&age), "oldest open age {age} s, opened two days ago");
    for kind in ExceptionKind::ALL.into_iter().filter(|k| *k != ExceptionKind::UnknownTransfer) {
        assert_eq!(sample(&text, &open_gauge(kind)), Some(0.0), "{kind} stays at zero");
        assert_eq!(sample(&text, &age_gauge(kind)), Some(0.0), "{kind}'s age stays at zero: the page reads it by kind");
    }
}

/// The gauges' every-tick refresh counts the states a withdrawal passes through (pending,
/// processing, requires_review) through the status index, not the whole history: the same counts
/// and ages as the full `GROUP BY` for those states, and nothing of the final ones (which the full
/// refresh, every 20 ticks, counts).
async fn the_every_tick_state_counts_read_only_the_moving_states_and_agree_with_the_full_count(app: TestApp) {
    use withdrawals::storage::metrics as queries;
    let stop = app.start_default_worker();
    let alice = app.customer("100.00").await;
    let paid = app.create_withdrawal(&alice, "paid", "10.00").await;
    app.wait_for_status(paid, WithdrawalStatus::Completed, Duration::from_secs(20)).await;
    app.provider
        .mock
        .set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::InvalidAccount)] });
    let parked = app.create_withdrawal(&alice, "parked", "10.00").await;
    app.wait_for_status(parked, WithdrawalStatus::RequiresReview, Duration::from_secs(20)).await;
    stop.cancel();
    app.create_withdrawal(&alice, "waiting-1", "1.00").await;
    app.create_withdrawal(&alice, "waiting-2", "1.00").await;

    let moving = [WithdrawalStatus::Pending, WithdrawalStatus::Processing, WithdrawalStatus::RequiresReview];
    let some = queries::withdrawals_in_states(&app.db, &moving).await.unwrap();
    let all = queries::withdrawals_by_state(&app.db).await.unwrap();
    let view = |rows: &[queries::StateCount]| {
        let mut v: Vec<(WithdrawalStatus, i64, Option<String>)> =
            rows.iter().map(|r| (r.status, r.count, r.oldest_change.map(|t| t.0.to_rfc3339()))).collect();
        v.sort();
        v
    };
    let expected: Vec<_> = all.into_iter().filter(|r| moving.contains(&r.status)).collect();
    assert_eq!(view(&some), view(&expected));
    assert_eq!(
        view(&some).iter().map(|(s, c, _)| (s.as_str(), *c)).collect::<Vec<_>>(),
        [("pending", 2), ("requires_review", 1)],
        "only the moving states, counted"
    );
}

/// Issue 27: a ledger check whose query fails is exported as `ledger_check_failing 1`, and leaves
/// `ledger_invariant_violations` unwritten (its last answer), never "0 violations".
async fn a_ledger_check_that_cannot_run_exports_ledger_check_failing_not_zero_violations(app: TestApp) {
    let alice = app.customer("10.00").await;
    app.create_withdrawal(&alice, "held", "1.00").await;
    let checked = LedgerCheck::run(&app.db).await;
    assert!(matches!(checked, LedgerCheck::Checked { differences: 0 }), "{checked:?}");
    let text = rendered(|| checked.export());
    assert_eq!(sample(&text, "ledger_check_failing "), Some(0.0), "{text}");
    assert_eq!(sample(&text, "ledger_invariant_violations "), Some(0.0), "{text}");

    // The ledger cannot be read any more (here: its table is gone).
    app.execute_raw("ALTER TABLE ledger_entries RENAME TO ledger_entries_gone").await;
    let failed = LedgerCheck::run(&app.db).await;
    assert!(matches!(failed, LedgerCheck::Failed(_)), "{failed:?}");
    let text = rendered(|| failed.export());
    assert_eq!(sample(&text, "ledger_check_failing "), Some(1.0), "{text}");
    assert_eq!(sample(&text, "ledger_invariant_violations "), None, "no answer is not 0 violations:\n{text}");
    assert!(withdrawals::gauges::refresh_ledger_gauge(&app.db).await.is_err(), "the refresher's check says it failed");
    app.execute_raw("ALTER TABLE ledger_entries_gone RENAME TO ledger_entries").await;
    app.assert_ledger_invariant().await;
}

/// Issue 27: a worker-only process without `METRICS_BIND` serves no `/metrics` at all; it says so
/// in a warn line when it starts.
async fn a_worker_started_without_metrics_bind_says_so_at_start(app: TestApp) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let mut worker = Command::new(env!("CARGO_BIN_EXE_withdrawals"))
        .args(["worker", "--log-format", "json"])
        .env("DATABASE_URL", &app.database_url)
        .env("PROVIDER_URL", app.provider.mock.url())
        .env("PROVIDER_API_KEY", "test-provider-key")
        .env_remove("METRICS_BIND")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = worker.stderr.take().unwrap();
    let (lines, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut warned = None;
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match seen.recv_timeout(left) {
            Ok(line) if line.contains("METRICS_BIND is not set") => {
                warned = Some(line);
                break;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    worker.kill().unwrap();
    let _ = worker.wait();
    let line: serde_json::Value = serde_json::from_str(&warned.expect("a warn line about METRICS_BIND")).unwrap();
    assert_eq!(line["level"], "WARN", "{line}");
}
