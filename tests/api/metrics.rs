//! `/metrics` (SPEC §9): what happened is a metric before it is an incident.

use provider_mocks::{FaultConfig, FaultEffect, FaultRule, RouteMatch};
use withdrawals::domain::WithdrawalStatus;

use crate::both_backends;
use crate::harness::TestApp;

both_backends!(payouts_dead_letters_and_database_gauges_show_up_in_prometheus_text);

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
