//! `/metrics` (SPEC §9): what happened is a metric before it is an incident.

use std::sync::OnceLock;
use std::time::Duration;

use provider_mocks::{FaultConfig, FaultEffect, FaultRule, RouteMatch};
use withdrawals::domain::settlement::ExceptionKind;
use withdrawals::domain::WithdrawalStatus;
use withdrawals::storage::settlement::{self as settlement_store, NewException};

use crate::both_backends;
use crate::harness::TestApp;

both_backends!(
    payouts_dead_letters_and_database_gauges_show_up_in_prometheus_text,
    every_settlement_exception_kind_reads_zero_until_one_opens_and_then_its_count_and_age_show,
    the_every_tick_state_counts_read_only_the_moving_states_and_agree_with_the_full_count,
);

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

    let _gauges = database_gauges_exclusive().await;
    withdrawals::metrics::refresh_database_gauges(&app.db).await.unwrap();
    let text = app.metrics().send().await.unwrap().text().await.unwrap();

    for (prefix, what) in [
        ("withdrawals_created_total{currency=\"USD\"}", "creations"),
        ("withdrawal_transitions_total{from=\"processing\",to=\"completed\"}", "transitions by from/to"),
        ("withdrawal_transitions_total{from=\"processing\",to=\"requires_review\"}", "parking"),
        ("job_attempts_total{queue=\"payouts\",kind=\"submit_payout\"}", "job attempts"),
        ("provider_request_duration_seconds_count{outcome=\"success\"}", "provider latency by outcome"),
        ("provider_request_duration_seconds_count{outcome=\"permanent\"}", "provider latency of rejections"),
        (
            "dead_letters_total{queue=\"payouts\",job_type=\"submit_payout\",category=\"dependency_rejected\",error_code=\"invalid_account\"}",
            "dead-letter arrivals",
        ),
        ("withdrawals_by_state{state=\"completed\"}", "withdrawals by state"),
        ("withdrawals_by_state{state=\"requires_review\"}", "the review queue"),
        ("dead_letters_open", "open dead-letter depth"),
    ] {
        let value = sample(&text, prefix).unwrap_or_else(|| panic!("{what}: no `{prefix}` in\n{text}"));
        assert!(value >= 1.0, "{what}: {prefix} = {value}");
    }
    assert!(sample(&text, "withdrawals_oldest_in_state_seconds{state=\"requires_review\"}").is_some());
    assert!(sample(&text, "dead_letters_oldest_open_seconds").is_some());
}

/// Database gauges are process-wide and each scenario here sets them from its own database: one
/// refresh-and-read at a time, so one app's zeros are not read as another's counts (and one
/// backend's open exception not as the other's). Tests elsewhere that refresh only ever write
/// zeros to the settlement gauges, which the polling below rides over.
async fn database_gauges_exclusive() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(())).lock().await
}

/// Refreshes the database gauges and scrapes until `prefix` reads a value `accept`s.
async fn refreshed_until(app: &TestApp, prefix: &str, accept: impl Fn(f64) -> bool) -> f64 {
    app.eventually(&format!("`{prefix}` to change"), Duration::from_secs(10), || async {
        withdrawals::metrics::refresh_database_gauges(&app.db).await.unwrap();
        let text = app.metrics().send().await.unwrap().text().await.unwrap();
        sample(&text, prefix).filter(|v| accept(*v))
    })
    .await
}

fn open_gauge(kind: ExceptionKind) -> String {
    format!("settlement_exceptions_open{{kind=\"{}\"}}", kind.as_str())
}

async fn every_settlement_exception_kind_reads_zero_until_one_opens_and_then_its_count_and_age_show(app: TestApp) {
    let _one_at_a_time = database_gauges_exclusive().await;
    // The app installs the recorder in its own task; a gauge set before that would be lost.
    withdrawals::metrics::install();

    // A fresh service: every kind exists, at zero, and so does the oldest age.
    withdrawals::metrics::refresh_database_gauges(&app.db).await.unwrap();
    let text = app.metrics().send().await.unwrap().text().await.unwrap();
    for kind in ExceptionKind::ALL {
        assert_eq!(sample(&text, &open_gauge(kind)), Some(0.0), "{kind}: no zero sample in\n{text}");
    }
    assert_eq!(sample(&text, "settlement_exception_oldest_open_age_seconds "), Some(0.0));

    // One unknown transfer opens, two days ago.
    let evidence = serde_json::json!({"source": "test"});
    let mut tx = app.db.begin().await.unwrap();
    let opened = settlement_store::open_exception(
        &mut tx,
        &NewException {
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

    let open = refreshed_until(&app, &open_gauge(ExceptionKind::UnknownTransfer), |v| v == 1.0).await;
    assert_eq!(open, 1.0);
    let age = refreshed_until(&app, "settlement_exception_oldest_open_age_seconds ", |v| v > 0.0).await;
    assert!((2.0 * 86_400.0..3.0 * 86_400.0).contains(&age), "oldest open age {age} s, opened two days ago");
    let text = app.metrics().send().await.unwrap().text().await.unwrap();
    for kind in ExceptionKind::ALL.into_iter().filter(|k| *k != ExceptionKind::UnknownTransfer) {
        assert_eq!(sample(&text, &open_gauge(kind)), Some(0.0), "{kind} stays at zero");
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
        let mut v: Vec<(String, i64, Option<String>)> =
            rows.iter().map(|r| (r.status.clone(), r.count, r.oldest_change.map(|t| t.0.to_rfc3339()))).collect();
        v.sort();
        v
    };
    let expected: Vec<_> = all.into_iter().filter(|r| moving.iter().any(|m| m.as_str() == r.status)).collect();
    assert_eq!(view(&some), view(&expected));
    assert_eq!(
        view(&some).iter().map(|(s, c, _)| (s.as_str(), *c)).collect::<Vec<_>>(),
        [("pending", 2), ("requires_review", 1)],
        "only the moving states, counted"
    );
}
