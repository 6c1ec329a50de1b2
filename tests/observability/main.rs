//! Observability end to end (SPEC §9), in its own test binary because it reads process-wide
//! state: the Prometheus recorder and the log subscriber. The scenarios here take one lock so
//! each sees only its own counters and log lines, and every metric is asserted exactly, as the
//! difference between a scrape before and a scrape after.

#[path = "../api/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use harness::{provider_mock, worker_config, TestApp};
use provider_mocks::{FaultConfig, FaultEffect, FaultRule, RouteMatch};
use serde_json::Value;
use withdrawals::customer::types::WithdrawalView;
use withdrawals::domain::{Category, WithdrawalStatus};
use withdrawals::ops::types::Overview;
use withdrawals::provider::breaker::{BreakerConfig, SlidingWindow};
use withdrawals::startup;
use withdrawals::storage::{dead_letters, jobs as job_store};

both_backends!(
    dead_letters_and_breaker_transitions_show_exact_values_in_metrics,
    a_correlation_id_reaches_the_job_the_provider_the_dead_letter_and_every_log_line,
    a_batched_payouts_stale_move_is_logged_with_its_jobs_correlation_id,
    a_failed_authentication_is_logged_at_warn_with_its_source_and_key_prefix_never_the_secret,
    every_applied_transition_is_counted_once_on_commit_by_storage_and_none_that_rolled_back,
);

const WAIT: Duration = Duration::from_secs(20);

/// One scenario at a time: counters and captured logs are process-wide.
async fn exclusive() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(())).lock().await
}

/// Every log line of this process, as JSON, after redaction (installed once, before any app).
fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = buffer.clone();
        withdrawals::telemetry::init_with(withdrawals::telemetry::LogFormat::Json, move || Capture(sink.clone()));
        buffer
    })
    .clone()
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every sample of a scrape: `name{labels}` → value.
async fn scrape(app: &TestApp) -> BTreeMap<String, f64> {
    let text = app.metrics().send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' ').and_then(|(k, v)| v.parse().ok().map(|v| (k.to_owned(), v))))
        .collect()
}

fn delta(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>, key: &str) -> f64 {
    after.get(key).copied().unwrap_or(0.0) - before.get(key).copied().unwrap_or(0.0)
}

/// Storage counts every transition it applies, once its transaction commits: a customer's
/// cancel, a worker's moves, a dead letter's parking and an operator's decision are counted
/// without their callers counting, and a move whose transaction rolled back is not.
async fn every_applied_transition_is_counted_once_on_commit_by_storage_and_none_that_rolled_back(app: TestApp) {
    use withdrawals::domain::Actor;
    use withdrawals::storage::withdrawals::{self as store, TransitionOutcome, TransitionRequest};
    let _one_at_a_time = exclusive().await;
    let key = |from: &str, to: &str| format!("withdrawal_transitions_total{{from=\"{from}\",to=\"{to}\"}}");
    let alice = app.customer("100.00").await;
    let before = scrape(&app).await;

    // Rolled back, then committed: the same move, counted once.
    let moved = app.create_withdrawal(&alice, "moved", "1.00").await;
    let request = TransitionRequest {
        key: app.key(moved).await,
        from: WithdrawalStatus::Pending,
        to: WithdrawalStatus::Processing,
        expected_version: None,
        actor: &Actor::Operator("observability test".into()),
        reason: "a move whose transaction rolls back",
        correlation_id: "observability",
        failure_code: None,
        evidence: None,
    };
    let mut tx = app.db.begin().await.unwrap();
    assert!(matches!(store::transition(&mut tx, &request).await.unwrap(), TransitionOutcome::Applied(_)));
    drop(tx);
    assert_eq!(delta(&before, &scrape(&app).await, &key("pending", "processing")), 0.0, "a rolled-back move");
    let mut tx = app.db.begin().await.unwrap();
    assert!(matches!(store::transition(&mut tx, &request).await.unwrap(), TransitionOutcome::Applied(_)));
    // Settled, so the worker started below has nothing to do with it.
    let settle = TransitionRequest {
        from: WithdrawalStatus::Processing,
        to: WithdrawalStatus::Failed,
        failure_code: Some("test"),
        ..request
    };
    assert!(matches!(store::transition(&mut tx, &settle).await.unwrap(), TransitionOutcome::Applied(_)));
    tx.commit().await.unwrap();
    let committed = scrape(&app).await;
    assert_eq!(delta(&before, &committed, &key("pending", "processing")), 1.0, "a committed move");
    assert_eq!(delta(&before, &committed, &key("processing", "failed")), 1.0, "a committed move");

    // The customer cancels (and cancelling again moves and counts nothing).
    let cancelled = app.create_withdrawal(&alice, "cancelled", "2.00").await;
    for expected in [200, 409] {
        let response = app
            .client
            .post(app.url(&format!("/v1/withdrawals/{cancelled}/cancel")))
            .bearer_auth(&alice.api_key)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), expected);
    }

    // A worker's moves and a dead letter's parking, then an operator's decision.
    let provider = provider_mock(2_000).await;
    provider
        .mock
        .set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::InvalidAccount)] });
    let parked = app.create_withdrawal(&alice, "parked", "3.00").await;
    app.start_worker(
        startup::gateway_with(provider.provider.clone(), BreakerConfig::default()),
        worker_config("w-count"),
    );
    let version = app.wait_for_status(parked, WithdrawalStatus::RequiresReview, WAIT).await.version;
    let operator = app.operator("operator").await;
    let resolved = app
        .client
        .post(app.url(&format!("/ops/v1/withdrawals/{parked}/resolve")))
        .bearer_auth(&operator)
        .json(&serde_json::json!({"action": "fail", "reason": "invalid account", "version": version}))
        .send()
        .await
        .unwrap();
    assert!(resolved.status().is_success(), "{}", resolved.text().await.unwrap());

    let after = scrape(&app).await;
    for (from, to, want) in [
        ("pending", "processing", 2.0),
        ("pending", "failed", 1.0),
        ("processing", "requires_review", 1.0),
        ("requires_review", "failed", 1.0),
        ("processing", "failed", 1.0),
        ("processing", "completed", 0.0),
    ] {
        assert_eq!(delta(&before, &after, &key(from, to)), want, "{from} -> {to}");
    }
}

async fn dead_letters_and_breaker_transitions_show_exact_values_in_metrics(app: TestApp) {
    let _one_at_a_time = exclusive().await;
    let provider = provider_mock(2_000).await;
    // Two 503s fill a window of two calls: the breaker opens, waits, lets one call through.
    let mut outage = FaultRule::new(RouteMatch::Create, FaultEffect::Status { code: 503, retry_after_secs: None });
    outage.times = Some(2);
    provider.mock.set_faults(FaultConfig { rules: vec![outage] });
    let breaker = BreakerConfig {
        window: SlidingWindow::Count { size: 2 },
        minimum_number_of_calls: 2,
        failure_rate_threshold: 50.0,
        wait_duration_in_open: Duration::from_millis(300),
        permitted_calls_in_half_open: 1,
        ..BreakerConfig::default()
    };
    app.start_worker(startup::gateway_with(provider.provider.clone(), breaker), worker_config("w-metrics"));
    let alice = app.customer("100.00").await;
    let before = scrape(&app).await;

    let paid = app.create_withdrawal(&alice, "paid", "10.00").await;
    app.wait_for_status(paid, WithdrawalStatus::Completed, WAIT).await;
    provider
        .mock
        .set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::InvalidAccount)] });
    for key in ["rejected-1", "rejected-2"] {
        let id = app.create_withdrawal(&alice, key, "5.00").await;
        app.wait_for_status(id, WithdrawalStatus::RequiresReview, WAIT).await;
    }
    withdrawals::gauges::refresh_database_gauges(&app.db).await.unwrap();
    let after = scrape(&app).await;

    let exact = [
        ("withdrawals_created_total{currency=\"USD\"}", 3.0),
        ("withdrawal_transitions_total{from=\"pending\",to=\"processing\"}", 3.0),
        ("withdrawal_transitions_total{from=\"processing\",to=\"completed\"}", 1.0),
        ("withdrawal_transitions_total{from=\"processing\",to=\"requires_review\"}", 2.0),
        (
            "dead_letters_total{queue=\"payouts\",job_type=\"submit_payout\",category=\"dependency_rejected\",error_code=\"invalid_account\"}",
            2.0,
        ),
        ("circuit_breaker_transitions_total{breaker=\"payout_provider\",provider=\"default\",from=\"closed\",to=\"open\"}", 1.0),
        ("circuit_breaker_transitions_total{breaker=\"payout_provider\",provider=\"default\",from=\"open\",to=\"half_open\"}", 1.0),
        ("circuit_breaker_transitions_total{breaker=\"payout_provider\",provider=\"default\",from=\"half_open\",to=\"closed\"}", 1.0),
        ("provider_request_duration_seconds_count{provider=\"default\",outcome=\"retryable\"}", 2.0),
        ("provider_request_duration_seconds_count{provider=\"default\",outcome=\"success\"}", 1.0),
        ("provider_request_duration_seconds_count{provider=\"default\",outcome=\"permanent\"}", 2.0),
        ("job_retries_total{queue=\"payouts\",kind=\"submit_payout\"}", 2.0),
        ("job_retries_exhausted_total{queue=\"payouts\",kind=\"submit_payout\"}", 0.0),
    ];
    let mut wrong = Vec::new();
    for (key, want) in exact {
        let got = delta(&before, &after, key);
        if got != want {
            wrong.push(format!("{key}: got {got}, want {want}"));
        }
    }
    // Gauges are the state now, not a difference.
    for (key, want) in [
        ("circuit_breaker_state{breaker=\"payout_provider\",provider=\"default\"}", 0.0),
        ("withdrawals_by_state{state=\"completed\"}", 1.0),
        ("withdrawals_by_state{state=\"requires_review\"}", 2.0),
        ("withdrawals_by_state{state=\"processing\"}", 0.0),
        ("withdrawals_by_state{state=\"pending\"}", 0.0),
        ("dead_letters_open", 2.0),
        ("jobs_live{queue=\"payouts\",status=\"scheduled\"}", 0.0),
        ("jobs_live{queue=\"payouts\",status=\"running\"}", 0.0),
        ("jobs_due{queue=\"reconciliation\"}", 0.0),
    ] {
        let got = after.get(key).copied();
        if got != Some(want) {
            wrong.push(format!("{key}: got {got:?}, want {want}"));
        }
    }
    let all: Vec<String> = after.keys().cloned().collect();
    assert!(wrong.is_empty(), "{}\n\nscraped:\n{}", wrong.join("\n"), all.join("\n"));

    // The overview the on-call engineer reads says the same.
    let token = app.operator("viewer").await;
    let overview: Overview =
        app.client.get(app.url("/ops/v1/overview")).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
    let count = |state: WithdrawalStatus| overview.withdrawals.iter().find(|w| w.state == state).unwrap().count;
    assert_eq!(count(WithdrawalStatus::Completed), 1);
    assert_eq!(count(WithdrawalStatus::RequiresReview), 2);
    assert_eq!(overview.dead_letters.open, 2);
    let by_category = &overview.dead_letters.by_category[0];
    assert_eq!((by_category.category, by_category.open), (Category::DependencyRejected, 2));
    app.assert_ledger_invariant().await;
}

async fn a_correlation_id_reaches_the_job_the_provider_the_dead_letter_and_every_log_line(app: TestApp) {
    let logs = captured_logs();
    let _one_at_a_time = exclusive().await;
    let correlation = format!("corr-{}", uuid::Uuid::new_v4().simple());
    app.provider
        .mock
        .set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::InvalidAccount)] });
    app.start_default_worker();
    let alice = app.customer("100.00").await;

    let response = app
        .post_withdrawal(&alice, "traced", &harness::withdrawal_body("12.34"))
        .header("X-Correlation-Id", &correlation)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["x-correlation-id"], correlation.as_str(), "the response");
    let id = withdrawals::domain::WithdrawalId(response.json::<WithdrawalView>().await.unwrap().id);
    app.wait_for_status(id, WithdrawalStatus::RequiresReview, WAIT).await;

    let jobs = job_store::jobs_for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].correlation_id, correlation, "the job");
    let requests: Vec<_> = app
        .provider
        .mock
        .requests()
        .into_iter()
        .filter(|r| r.idempotency_key.as_deref() == Some(&id.to_string()))
        .collect();
    assert!(!requests.is_empty());
    assert!(
        requests.iter().all(|r| r.correlation_id.as_deref() == Some(correlation.as_str())),
        "the provider request header: {requests:?}"
    );
    let letters = dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].correlation_id, correlation, "the dead letter");

    // The log lines: the request's, the job's and the provider call's all carry the id, and
    // every line that names this withdrawal or its job names the correlation id too.
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("one JSON object per line")).collect();
    let mentions = |line: &Value, needle: &str| line.to_string().contains(needle);
    let ours: Vec<&Value> = lines
        .iter()
        .filter(|l| mentions(l, &id.to_string()) || mentions(l, &jobs[0].id.to_string()) || mentions(l, &correlation))
        .collect();
    for line in &ours {
        assert!(mentions(line, &correlation), "a line about this withdrawal without its correlation id: {line}");
    }
    let job_id = jobs[0].id.to_string();
    let with_message = |m: &str| ours.iter().find(|l| l["message"].as_str().is_some_and(|s| s.contains(m)));
    let created = with_message("withdrawal created").expect("the request's line");
    assert_eq!(created["withdrawal_id"], id.to_string());
    let called = with_message("provider called").expect("the provider call's line");
    let job_span =
        called["spans"].as_array().unwrap().iter().find(|s| s["name"] == "job").expect("inside the job span");
    assert_eq!(job_span["job_id"], job_id);
    assert_eq!(job_span["withdrawal_id"], id.to_string());
    assert_eq!(job_span["correlation_id"], correlation);
    assert_eq!(job_span["attempt"], 1);
    assert!(ours.iter().any(|l| l["level"] == "WARN" || l["level"] == "ERROR"), "the dead-lettering is logged");
    assert!(!text.contains("12345678"), "no full account number in the logs");
}

/// A batch of payouts logs each row's lines inside that row's job span: the stale move of a row
/// that reconciliation settled during the batch's calls carries the row's correlation id.
async fn a_batched_payouts_stale_move_is_logged_with_its_jobs_correlation_id(app: TestApp) {
    let logs = captured_logs();
    let _one_at_a_time = exclusive().await;
    let provider = provider_mock(5_000).await;
    // Every create waits, so one withdrawal can be moved while the batch's calls are in flight.
    provider.mock.set_faults(FaultConfig {
        rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::Latency { ms: 1_500 })],
    });
    let alice = app.customer("100.00").await;
    let mut rows = Vec::new();
    for key in ["s1", "s2"] {
        let correlation = format!("corr-{}", uuid::Uuid::new_v4().simple());
        let response = app
            .post_withdrawal(&alice, key, &harness::withdrawal_body("10.00"))
            .header("X-Correlation-Id", &correlation)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
        let id = withdrawals::domain::WithdrawalId(response.json::<WithdrawalView>().await.unwrap().id);
        rows.push((id, correlation));
    }
    // One claim takes both (created before the worker starts): one batch.
    app.start_worker(startup::gateway(provider.provider.clone()), worker_config("w1"));
    for (id, _) in &rows {
        app.wait_for_status(*id, WithdrawalStatus::Processing, WAIT).await;
    }
    app.eventually("the batch's calls to reach the provider", WAIT, || async {
        let requests = provider.mock.requests();
        rows.iter()
            .all(|(id, _)| requests.iter().any(|r| r.idempotency_key.as_deref() == Some(id.to_string().as_str())))
            .then_some(())
    })
    .await;
    let (stale, correlation) = rows[1].clone();
    app.reconcile_completed(stale).await;
    app.wait_for_status(rows[0].0, WithdrawalStatus::Completed, WAIT).await;

    let stale_line = || {
        let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("one JSON object per line"))
            .find(|l| l.to_string().contains("stale_transition") && l.to_string().contains(&stale.to_string()))
    };
    let line = app.eventually("the worker's stale move to be logged", WAIT, || async { stale_line() }).await;
    assert!(line.to_string().contains(&correlation), "the stale move's line without its job's correlation id: {line}");
    app.assert_ledger_invariant().await;
}

/// Issue 27: each failed authentication is a warn line naming the surface, the source address and
/// the credential's public prefix (`wdk_<id>` / `wdo_<id>`), and never its secret.
async fn a_failed_authentication_is_logged_at_warn_with_its_source_and_key_prefix_never_the_secret(app: TestApp) {
    let logs = captured_logs();
    let _one_at_a_time = exclusive().await;
    let alice = app.customer("10.00").await;
    let viewer = app.operator("viewer").await;
    let secret = format!("{:064x}", rand_secret());
    let (key_public, _) = alice.api_key.rsplit_once('_').unwrap();
    let (token_public, _) = viewer.rsplit_once('_').unwrap();

    let customer = app.client.get(app.url("/v1/balances")).bearer_auth(format!("{key_public}_{secret}")).send();
    assert_eq!(customer.await.unwrap().status(), 401);
    let ops = app.client.get(app.url("/ops/v1/overview")).bearer_auth(format!("{token_public}_{secret}")).send();
    assert_eq!(ops.await.unwrap().status(), 401);

    let failed_lines = |public: &str| {
        let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("one JSON object per line"))
            .filter(|l| l["message"] == "authentication failed" && l.to_string().contains(public))
            .collect::<Vec<_>>()
    };
    for (public, surface) in [(key_public, "customer_api"), (token_public, "ops_api")] {
        let lines = app
            .eventually("the failure's warn line", WAIT, || async {
                Some(failed_lines(public)).filter(|l| !l.is_empty())
            })
            .await;
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0];
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["surface"], surface);
        assert_eq!(line["key_prefix"], public, "the public prefix, whole");
        assert_eq!(line["reason"], "wrong_secret");
        assert_eq!(line["source"], "127.0.0.1");
    }
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(!text.contains(&secret), "the presented secret is never logged");
    let (_, real_secret) = alice.api_key.rsplit_once('_').unwrap();
    assert!(!text.contains(real_secret), "nor the key's real one");
}

/// 256 random bits, so the secret searched for in the logs is this test's alone.
fn rand_secret() -> u128 {
    uuid::Uuid::new_v4().as_u128()
}
