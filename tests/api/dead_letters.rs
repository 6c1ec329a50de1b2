//! Dead letters and reconciliation (SPEC §5–§7): nothing exhausted is lost, nothing unknown is
//! retried blindly, and every parked withdrawal carries its evidence.

use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use provider_mocks::{FaultConfig, FaultEffect, FaultRule, RouteMatch};
use sqlx::Connection;
use withdrawals::domain::{Actor, WithdrawalId, WithdrawalStatus};
use withdrawals::jobs::worker::{Handler, Worker};
use withdrawals::jobs::{JobKind, JobType, Queue};
use withdrawals::startup;
use withdrawals::storage::dead_letters;
use withdrawals::storage::jobs::{self as job_store, NewJob};
use withdrawals::storage::withdrawals::{self as store, TransitionOutcome, TransitionRequest};
use withdrawals::storage::{attempts, reconciliations, DbTime};

use crate::both_backends;
use crate::harness::{provider_mock, worker_config, TestApp};

both_backends!(
    repeated_timeouts_before_commit_until_max_elapsed_end_in_retries_exhausted,
    a_timeout_before_commit_is_reconciled_as_not_found_and_retried_under_the_same_key,
    a_lookup_outage_for_the_whole_window_ends_in_side_effect_unknown,
    malformed_and_unknown_version_payloads_are_dead_lettered_with_raw_bytes_and_the_queue_moves_on,
    a_panicking_handler_is_dead_lettered_as_a_code_bug_and_the_worker_keeps_working,
    a_database_outage_mid_job_is_retried_with_jittered_backoff_then_dead_lettered_as_infrastructure,
    a_handler_that_keeps_failing_for_another_reason_is_dead_lettered_as_a_code_bug,
    a_dead_letter_store_outage_loses_nothing_and_dead_letters_exactly_once_after_recovery,
    a_late_worker_after_reconciliation_completed_the_withdrawal_changes_nothing,
    a_lease_that_expired_max_receives_times_is_dead_lettered_as_crashed,
    a_withdrawal_stuck_in_processing_is_swept_into_reconciliation,
    dead_letter_rows_cannot_be_updated_or_deleted,
    the_production_schema_has_no_fault_injection,
    the_triage_queries_explain_on_both_backends,
    a_job_rejected_on_its_first_run_is_dead_lettered_with_that_runs_time_as_its_first_attempt,
    a_payload_naming_a_withdrawal_that_does_not_exist_is_dead_lettered_on_its_first_run_as_bad_payload,
);

const WAIT: Duration = Duration::from_secs(25);

/// A breaker that stays closed through a test's deliberate failures.
fn patient_breaker() -> withdrawals::provider::breaker::BreakerConfig {
    withdrawals::provider::breaker::BreakerConfig { minimum_number_of_calls: 1_000, ..Default::default() }
}

fn transfers_for(mock: &provider_mocks::RunningMock, id: WithdrawalId) -> usize {
    mock.transfers().iter().filter(|t| t.reference == id.to_string()).count()
}

async fn repeated_timeouts_before_commit_until_max_elapsed_end_in_retries_exhausted(app: TestApp) {
    let provider = provider_mock(150).await;
    provider.mock.set_faults(FaultConfig {
        rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::TimeoutBeforeCommit { ms: 1_000 })],
    });
    let mut config = worker_config("w1");
    config.submit_policy.max_elapsed = Duration::from_millis(1_500);
    config.submit_policy.max_attempts = 1_000;
    config.in_flight_grace = Duration::from_millis(200);
    app.start_worker(startup::gateway_with(provider.provider.clone(), patient_breaker()), config);
    let alice = app.customer("100.00").await;

    let id = app.create_withdrawal(&alice, "k1", "25.00").await;

    app.wait_for_status(id, WithdrawalStatus::RequiresReview, WAIT).await;
    let letters = dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        (letters[0].category.as_str(), letters[0].side_effect_state.as_str()),
        ("retries_exhausted", "not_started")
    );
    assert_eq!(letters[0].error_code, "timeout_after_send");
    let calls = attempts::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert!(calls.len() >= 2, "retried under the same key before giving up: {}", calls.len());
    let results = reconciliations::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert!(
        results.iter().all(|r| r.result == withdrawals::domain::ReconciliationResult::NotFound),
        "each timeout was reconciled before any retry"
    );
    assert_eq!(transfers_for(&provider.mock, id), 0, "nothing was ever paid");
    assert_eq!(app.usd_balance(&alice).await.1, "25.00", "held until an operator decides");
    app.assert_ledger_invariant().await;

    // Reconciliation proved nothing executed, so a deliberate retry is allowed and gets a fresh
    // budget: once the provider answers again, it pays, once.
    provider.mock.set_faults(FaultConfig::default());
    let operator = app.operator("operator").await;
    let version = store::find(&app.db, id).await.unwrap().unwrap().version;
    let retry = app
        .client
        .post(app.url(&format!("/ops/v1/withdrawals/{id}/resolve")))
        .bearer_auth(&operator)
        .json(&serde_json::json!({"action": "retry", "reason": "provider healthy again", "version": version}))
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), 200);
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    assert_eq!(transfers_for(&provider.mock, id), 1);
    app.assert_ledger_invariant().await;
}

async fn a_timeout_before_commit_is_reconciled_as_not_found_and_retried_under_the_same_key(app: TestApp) {
    let provider = provider_mock(200).await;
    let mut rule = FaultRule::new(RouteMatch::Create, FaultEffect::TimeoutBeforeCommit { ms: 800 });
    rule.times = Some(1);
    provider.mock.set_faults(FaultConfig { rules: vec![rule] });
    let mut config = worker_config("w1");
    config.in_flight_grace = Duration::from_millis(300);
    app.start_worker(startup::gateway(provider.provider.clone()), config);
    let alice = app.customer("100.00").await;

    let id = app.create_withdrawal(&alice, "k1", "25.00").await;

    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    let results = reconciliations::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    let decisive = results.iter().find(|r| r.follow_up_job_id.is_some()).expect("a controlled retry");
    assert_eq!(decisive.result, withdrawals::domain::ReconciliationResult::NotFound);
    let jobs = job_store::jobs_for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    let retry = jobs.iter().find(|j| Some(j.id) == decisive.follow_up_job_id).unwrap();
    assert_eq!(retry.kind, JobKind::SubmitPayout.as_str());
    let payload: serde_json::Value = serde_json::from_slice(&retry.payload).unwrap();
    assert_eq!(payload["reconciliation_result_id"], decisive.id.to_string(), "linked to the evidence");
    let calls = attempts::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].error_code.as_deref(), Some("timeout_after_send"));
    assert_eq!(transfers_for(&provider.mock, id), 1, "one execution");
    let transfer = provider.mock.transfers().into_iter().find(|t| t.reference == id.to_string()).unwrap();
    assert_eq!(transfer.idempotency_key, id.to_string(), "the same idempotency key");
    app.assert_ledger_invariant().await;
}

async fn a_lookup_outage_for_the_whole_window_ends_in_side_effect_unknown(app: TestApp) {
    let provider = provider_mock(200).await;
    provider.mock.set_faults(FaultConfig {
        rules: vec![
            FaultRule::new(RouteMatch::Create, FaultEffect::TimeoutAfterCommit { ms: 800 }),
            FaultRule::new(RouteMatch::Lookup, FaultEffect::LookupUnavailable),
        ],
    });
    let mut config = worker_config("w1");
    config.reconcile_policy.max_elapsed = Duration::from_millis(800);
    app.start_worker(startup::gateway_with(provider.provider.clone(), patient_breaker()), config);
    let alice = app.customer("100.00").await;

    let id = app.create_withdrawal(&alice, "k1", "25.00").await;

    app.wait_for_status(id, WithdrawalStatus::RequiresReview, WAIT).await;
    let letters = dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        (letters[0].category.as_str(), letters[0].side_effect_state.as_str()),
        ("side_effect_unknown", "unknown")
    );
    assert_eq!((letters[0].owner.as_str(), letters[0].job_type.as_str()), ("operator", "reconcile_payout"));
    let results: Vec<String> = reconciliations::for_withdrawal(&app.db, app.key(id).await)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.result.to_string())
        .collect();
    assert!(results.iter().any(|r| r == "unavailable"), "{results:?}");
    assert_eq!(results.last().map(String::as_str), Some("window_expired"));
    assert_eq!(transfers_for(&provider.mock, id), 1, "it was paid once and never resubmitted");
    assert_eq!(app.usd_balance(&alice).await.1, "25.00");
    app.assert_ledger_invariant().await;
}

async fn enqueue_raw(app: &TestApp, kind: &'static str, version: i64, payload: &[u8]) -> withdrawals::domain::JobKey {
    enqueue_raw_on(app, Queue::Payouts.as_str(), kind, version, payload).await
}

async fn enqueue_raw_on(
    app: &TestApp,
    queue: &'static str,
    kind: &'static str,
    version: i64,
    payload: &[u8],
) -> withdrawals::domain::JobKey {
    let mut tx = app.db.begin().await.unwrap();
    let id = job_store::enqueue(
        &mut tx,
        &NewJob {
            kind: JobType::Extension { queue, kind },
            payload: payload.to_vec(),
            payload_version: version,
            run_at: DbTime::now(),
            correlation_id: "poison-test".into(),
            account_id: withdrawals::domain::AccountId::SYSTEM,
            withdrawal_id: None,
        },
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    id
}

async fn wait_for_job_status(app: &TestApp, job: withdrawals::domain::JobKey, status: &str) {
    app.eventually(&format!("job {job} to be {status}"), WAIT, || async {
        let letters = dead_letters::for_job(&app.db, job).await.unwrap();
        let counts = job_store::job_status(&app.db, job).await.unwrap();
        (counts.map(|s| s.as_str()) == Some(status)).then_some(letters)
    })
    .await;
}

async fn malformed_and_unknown_version_payloads_are_dead_lettered_with_raw_bytes_and_the_queue_moves_on(app: TestApp) {
    let provider = provider_mock(2_000).await;
    let alice = app.customer("100.00").await;
    let garbage = b"{\"withdrawal_id\": 12345678901 oops".to_vec();
    let malformed = enqueue_raw(&app, JobKind::SubmitPayout.as_str(), 1, &garbage).await;
    let from_the_future =
        enqueue_raw(&app, JobKind::SubmitPayout.as_str(), 99, br#"{"withdrawal_id":"x","new_field":true}"#).await;
    let behind = app.create_withdrawal(&alice, "k1", "25.00").await;

    app.start_worker(startup::gateway(provider.provider.clone()), worker_config("w1"));

    app.wait_for_status(behind, WithdrawalStatus::Completed, WAIT).await;
    wait_for_job_status(&app, malformed, "dead").await;
    wait_for_job_status(&app, from_the_future, "dead").await;
    let bad = dead_letters::for_job(&app.db, malformed).await.unwrap().remove(0);
    assert_eq!(
        (bad.category.as_str(), bad.error_code.as_str(), bad.error_class.as_str()),
        ("bad_payload", "undecodable_payload", "poison")
    );
    assert!(bad.payload.is_none());
    let raw = String::from_utf8(bad.raw_payload.clone().unwrap()).unwrap();
    assert_eq!(raw, "{\"withdrawal_id\": *******8901 oops", "the raw bytes, redacted");
    assert_eq!((bad.owner.as_str(), bad.runbook.as_str()), ("producing team", "runbooks/dead-letter-bad-payload.md"));
    let future = dead_letters::for_job(&app.db, from_the_future).await.unwrap().remove(0);
    assert_eq!((future.error_code.as_str(), future.payload_version), ("unknown_payload_version", 99));
    assert_eq!(future.raw_payload.as_deref(), Some(&br#"{"withdrawal_id":"x","new_field":true}"#[..]));
    app.assert_ledger_invariant().await;
}

fn exploding_handler() -> Handler {
    Arc::new(|_ctx| Box::pin(async { panic!("boom: invariant violated in test handler") }))
}

async fn a_panicking_handler_is_dead_lettered_as_a_code_bug_and_the_worker_keeps_working(app: TestApp) {
    let provider = provider_mock(2_000).await;
    let alice = app.customer("100.00").await;
    let exploding = enqueue_raw(&app, "explode", 1, b"{}").await;
    let worker = Worker::new(app.db.clone(), startup::gateway(provider.provider.clone()), worker_config("w1"))
        .with_handler("explode", 1, exploding_handler());
    tokio::spawn(worker.run(app.shutdown_token()));

    wait_for_job_status(&app, exploding, "dead").await;
    let after = app.create_withdrawal(&alice, "k1", "25.00").await;

    app.wait_for_status(after, WithdrawalStatus::Completed, WAIT).await;
    let letter = dead_letters::for_job(&app.db, exploding).await.unwrap().remove(0);
    assert_eq!((letter.category.as_str(), letter.error_class.as_str()), ("code_bug", "panic"));
    assert!(letter.error_message.contains("boom: invariant violated"), "{}", letter.error_message);
    assert!(letter.stack.as_deref().is_some_and(|s| !s.is_empty()), "the panic's backtrace is kept");
    assert_eq!(letter.owner, "service team");
}

/// One run of a job whose database is down: the run's scheduled time (the row's `run_at`) and
/// when it failed.
#[derive(Debug, Clone, Copy)]
struct OutageRun {
    scheduled: DbTime,
    failed: DbTime,
}

/// A handler whose database goes down mid-job: it reads its own job row (the database is up),
/// then its next statement meets a database that is not there — PostgreSQL: a connection to a
/// closed port; SQLite: a file in a directory that does not exist — and fails with the driver's
/// own error, as an outage gives it.
fn handler_meeting_a_database_outage(runs: Arc<std::sync::Mutex<Vec<OutageRun>>>, gone: String) -> Handler {
    Arc::new(move |ctx| {
        let (runs, gone) = (runs.clone(), gone.clone());
        Box::pin(async move {
            let row = job_store::job_row(ctx.db(), ctx.job.key()).await?.expect("its own job");
            let outage = match ctx.db().backend() {
                withdrawals::storage::Backend::Postgres => {
                    sqlx::PgConnection::connect(&gone).await.map(|_| ()).map_err(anyhow::Error::from)
                }
                withdrawals::storage::Backend::Sqlite => {
                    sqlx::SqliteConnection::connect(&gone).await.map(|_| ()).map_err(anyhow::Error::from)
                }
            };
            runs.lock().unwrap().push(OutageRun { scheduled: row.run_at, failed: DbTime::now() });
            outage.map_err(|e| e.context("writing the job's outcome"))
        })
    })
}

async fn a_database_outage_mid_job_is_retried_with_jittered_backoff_then_dead_lettered_as_infrastructure(app: TestApp) {
    let provider = provider_mock(2_000).await;
    let gone = match app.db.backend() {
        withdrawals::storage::Backend::Postgres => "postgres://postgres@127.0.0.1:1/gone".to_owned(),
        withdrawals::storage::Backend::Sqlite => "sqlite:///nonexistent-directory/gone.db?mode=rw".to_owned(),
    };
    let runs = Arc::new(std::sync::Mutex::new(Vec::new()));
    let job = enqueue_raw(&app, "writes_through_an_outage", 1, b"{}").await;
    let mut config = worker_config("w1");
    let policy = withdrawals::jobs::retry::RetryPolicy {
        base_delay: Duration::from_millis(400),
        max_delay: Duration::from_millis(800),
        max_attempts: 5,
        max_elapsed: Duration::from_secs(60),
        max_retry_after: Duration::ZERO,
    };
    config.handler_error_policy = policy.clone();
    let worker = Worker::new(app.db.clone(), startup::gateway(provider.provider.clone()), config).with_handler(
        "writes_through_an_outage",
        1,
        handler_meeting_a_database_outage(runs.clone(), gone),
    );
    tokio::spawn(worker.run(app.shutdown_token()));

    wait_for_job_status(&app, job, "dead").await;
    let letter = dead_letters::for_job(&app.db, job).await.unwrap().remove(0);
    assert_eq!(
        (letter.category.as_str(), letter.error_code.as_str(), letter.error_class.as_str()),
        ("infrastructure", "infrastructure_error", "retryable"),
        "our own database's fault, not a code bug: {}",
        letter.error_message
    );
    assert_eq!(
        (letter.owner.as_str(), letter.runbook.as_str()),
        ("service team", "runbooks/dead-letter-infrastructure.md")
    );
    assert!(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(&letter.runbook).exists(), "the runbook page exists");
    assert!(letter.error_message.contains("writing the job's outcome"), "{}", letter.error_message);
    assert_eq!(letter.attempts, 5, "every run counted, the final one included");

    // Five runs, each scheduled by the policy: backoff ceilings of 400, 800, 800, 800 ms, each
    // delay drawn at random below its ceiling (full jitter) — not a fixed delay.
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 5, "{runs:?}");
    let delays: Vec<i64> = runs.windows(2).map(|w| (w[1].scheduled.0 - w[0].failed.0).num_milliseconds()).collect();
    for (i, delay) in delays.iter().enumerate() {
        let ceiling = policy.backoff_ceiling(i as u32 + 1).as_millis() as i64;
        assert!(
            (0..=ceiling + 50).contains(delay),
            "retry {} scheduled {delay} ms later (ceiling {ceiling} ms)",
            i + 1
        );
    }
    // Not one fixed delay (the runs' scheduled times carry no pickup latency): under full jitter
    // the chance that four draws below 400–800 ms land within 50 ms of each other is about 1 in 4 000.
    let spread = delays.iter().max().unwrap() - delays.iter().min().unwrap();
    assert!(spread > 50, "the delays vary from retry to retry: {delays:?}");
    // Under full jitter the chance that all four land in the top tenth of their range is 1 in 10 000.
    assert!(
        delays
            .iter()
            .enumerate()
            .any(|(i, d)| (*d as f64) < 0.9 * policy.backoff_ceiling(i as u32 + 1).as_millis() as f64),
        "the delays are jittered, not the ceilings: {delays:?}"
    );
}

async fn a_handler_that_keeps_failing_for_another_reason_is_dead_lettered_as_a_code_bug(app: TestApp) {
    let provider = provider_mock(2_000).await;
    let job = enqueue_raw(&app, "always_wrong", 1, b"{}").await;
    let wrong: Handler = Arc::new(|ctx| {
        Box::pin(async move {
            // The database answers; the code is wrong about what it finds.
            let row = job_store::job_row(ctx.db(), ctx.job.key()).await?.expect("its own job");
            anyhow::bail!("job {} has no withdrawal to pay", row.id)
        })
    });
    let mut config = worker_config("w1");
    config.handler_error_policy.max_attempts = 3;
    let worker = Worker::new(app.db.clone(), startup::gateway(provider.provider.clone()), config).with_handler(
        "always_wrong",
        1,
        wrong,
    );
    tokio::spawn(worker.run(app.shutdown_token()));

    wait_for_job_status(&app, job, "dead").await;
    let letter = dead_letters::for_job(&app.db, job).await.unwrap().remove(0);
    assert_eq!(
        (letter.category.as_str(), letter.error_code.as_str(), letter.error_class.as_str(), letter.attempts),
        ("code_bug", "handler_error", "bug", 3)
    );
    assert!(letter.error_message.contains("has no withdrawal to pay"), "{}", letter.error_message);
}

/// Makes every dead-letter insert fail, as an unavailable store would, or stops doing so. The
/// production schema has no such switch (migration 0021 removed `fault_flags`): the test installs
/// a failing trigger in its own throwaway database, with straight SQL, and drops it again.
async fn dead_letter_store_outage(app: &TestApp, on: bool) {
    let statements: &[&str] = match (app.database_url.starts_with("sqlite"), on) {
        (true, true) => &["CREATE TRIGGER test_dead_letter_store_outage BEFORE INSERT ON dead_letters \
                           BEGIN SELECT RAISE(ABORT, 'dead-letter store unavailable (test outage)'); END"],
        (true, false) => &["DROP TRIGGER test_dead_letter_store_outage"],
        (false, true) => &[
            "CREATE FUNCTION test_dead_letter_store_outage() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'dead-letter store unavailable (test outage)'; END $$",
            "CREATE TRIGGER test_dead_letter_store_outage BEFORE INSERT ON dead_letters \
             FOR EACH ROW EXECUTE FUNCTION test_dead_letter_store_outage()",
        ],
        (false, false) => &[
            "DROP TRIGGER test_dead_letter_store_outage ON dead_letters",
            "DROP FUNCTION test_dead_letter_store_outage()",
        ],
    };
    for sql in statements {
        app.execute_raw(sql).await;
    }
}

async fn a_dead_letter_store_outage_loses_nothing_and_dead_letters_exactly_once_after_recovery(app: TestApp) {
    let provider = provider_mock(2_000).await;
    dead_letter_store_outage(&app, true).await;
    let poison = enqueue_raw(&app, JobKind::SubmitPayout.as_str(), 1, b"not json").await;
    app.start_worker(startup::gateway(provider.provider.clone()), worker_config("w1"));

    let tried = app
        .eventually("the worker to fail to dead-letter twice", WAIT, || async {
            let job = job_store::job_row(&app.db, poison).await.unwrap().unwrap();
            (job.receives >= 2).then_some(job)
        })
        .await;
    assert_ne!(tried.status, withdrawals::domain::JobStatus::Dead, "not counted as done while the store is down");
    assert!(dead_letters::for_job(&app.db, poison).await.unwrap().is_empty());

    dead_letter_store_outage(&app, false).await;

    wait_for_job_status(&app, poison, "dead").await;
    tokio::time::sleep(Duration::from_millis(300)).await; // any duplicate would land in this time
    let letters = dead_letters::for_job(&app.db, poison).await.unwrap();
    assert_eq!(letters.len(), 1, "dead-lettered exactly once");
    assert_eq!(letters[0].raw_payload.as_deref(), Some(&b"not json"[..]));
}

async fn a_late_worker_after_reconciliation_completed_the_withdrawal_changes_nothing(app: TestApp) {
    let provider = provider_mock(5_000).await;
    let mut slow = FaultRule::new(RouteMatch::Create, FaultEffect::Latency { ms: 1_000 });
    slow.times = Some(1);
    provider.mock.set_faults(FaultConfig { rules: vec![slow] });
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "25.00").await;
    app.start_worker(startup::gateway(provider.provider.clone()), worker_config("w1"));
    app.eventually("the worker to be inside its provider call", WAIT, || async {
        let calls = attempts::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
        (calls.len() == 1).then_some(())
    })
    .await;

    // Meanwhile reconciliation decided: paid.
    let mut tx = app.db.begin().await.unwrap();
    let decided = store::transition(
        &mut tx,
        &TransitionRequest {
            key: app.key(id).await,
            from: WithdrawalStatus::Processing,
            to: WithdrawalStatus::Completed,
            expected_version: None,
            actor: &Actor::Reconciliation,
            reason: "reconciliation found it paid",
            correlation_id: "recon",
            failure_code: None,
            evidence: None,
        },
    )
    .await
    .unwrap();
    assert!(matches!(decided, TransitionOutcome::Applied(_)));
    tx.commit().await.unwrap();

    app.eventually("the late worker to record its outcome", WAIT, || async {
        let calls = attempts::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
        calls[0].outcome
    })
    .await;
    let current = store::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!((current.status, current.version), (WithdrawalStatus::Completed, 3), "the late worker moved nothing");
    let transitions = store::transitions(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(transitions.last().unwrap().actor, "reconciliation");
    assert_eq!(app.usd_balance(&alice).await, ("75.00".into(), "0.00".into(), "25.00".into()), "settled once");
    app.assert_ledger_invariant().await;
}

async fn a_lease_that_expired_max_receives_times_is_dead_lettered_as_crashed(app: TestApp) {
    let provider = provider_mock(2_000).await;
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "25.00").await;
    let mut config = worker_config("reaper");
    config.max_receives = 2;
    let reaper = Worker::new(app.db.clone(), startup::gateway(provider.provider.clone()), config);

    for round in 1..=2 {
        let claimed =
            job_store::claim(&app.db, Queue::Payouts.as_str(), "crashing-worker", 1, TimeDelta::zero()).await.unwrap();
        assert_eq!(claimed.len(), 1, "round {round}");
        tokio::time::sleep(Duration::from_millis(5)).await;
        let buried = reaper.reap_once().await.unwrap();
        assert_eq!(buried, usize::from(round == 2), "round {round}");
    }

    let current = store::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!(current.status, WithdrawalStatus::RequiresReview);
    let letter = dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap().remove(0);
    assert_eq!(
        (letter.category.as_str(), letter.error_code.as_str(), letter.side_effect_state.as_str()),
        ("crashed", "lease_expired", "not_started")
    );
    app.assert_ledger_invariant().await;
}

async fn a_withdrawal_stuck_in_processing_is_swept_into_reconciliation(app: TestApp) {
    let provider = provider_mock(2_000).await;
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "25.00").await;
    // A worker moved it to processing and its job vanished (e.g. killed by hand).
    app.stuck_in_processing(id).await;
    let mut config = worker_config("w1");
    config.processing_sla = Duration::from_millis(100);

    app.start_worker(startup::gateway(provider.provider.clone()), config);

    app.eventually("a reconciliation result", WAIT, || async {
        let results = reconciliations::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
        (!results.is_empty()).then_some(())
    })
    .await;
    // Never called, so the provider has nothing: a controlled retry pays it.
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    assert_eq!(transfers_for(&provider.mock, id), 1);
    app.assert_ledger_invariant().await;
}

async fn dead_letter_rows_cannot_be_updated_or_deleted(app: TestApp) {
    let poison = enqueue_raw(&app, JobKind::SubmitPayout.as_str(), 7, b"{}").await;
    let provider = provider_mock(2_000).await;
    app.start_worker(startup::gateway(provider.provider.clone()), worker_config("w1"));
    wait_for_job_status(&app, poison, "dead").await;

    // Straight SQL, as a careless script would: the database itself refuses. On PostgreSQL the
    // service's own role is refused by privilege (42501, before any trigger runs), and the owner,
    // who keeps every right, by the append-only trigger.
    let (update, delete) = match app.database_url.starts_with("sqlite") {
        true => {
            let mut conn = sqlx::SqliteConnection::connect(&app.database_url).await.unwrap();
            let update = sqlx::query("UPDATE dead_letters SET error_message = 'tampered'").execute(&mut conn).await;
            let delete = sqlx::query("DELETE FROM dead_letters").execute(&mut conn).await;
            (update.is_err(), delete.is_err())
        }
        false => {
            let mut service = sqlx::PgConnection::connect(&app.service_url).await.unwrap();
            for statement in ["UPDATE dead_letters SET error_message = 'tampered'", "DELETE FROM dead_letters"] {
                let refused = sqlx::query(statement).execute(&mut service).await.expect_err(statement);
                let code = refused.as_database_error().and_then(|e| e.code()).map(|c| c.into_owned());
                assert_eq!(code.as_deref(), Some("42501"), "{statement} as the service: {refused}");
            }
            let mut owner = sqlx::PgConnection::connect(&app.database_url).await.unwrap();
            let update = sqlx::query("UPDATE dead_letters SET error_message = 'tampered'").execute(&mut owner).await;
            let delete = sqlx::query("DELETE FROM dead_letters").execute(&mut owner).await;
            for refused in [&update, &delete] {
                let message = refused.as_ref().map(|_| String::new()).unwrap_or_else(|e| e.to_string());
                assert!(message.contains("dead_letters is append-only"), "the owner meets the trigger: {message}");
            }
            (update.is_err(), delete.is_err())
        }
    };

    assert!(update && delete, "update refused: {update}, delete refused: {delete}");
    let letters = dead_letters::for_job(&app.db, poison).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_ne!(letters[0].error_message, "tampered");
}

/// No drill switch in production (issue 28): after every migration, no `fault_flags` table and
/// no trigger on `dead_letters` but the ones that keep it append-only.
async fn the_production_schema_has_no_fault_injection(app: TestApp) {
    let (tables, triggers): (Vec<String>, Vec<String>) = if app.database_url.starts_with("sqlite") {
        let mut conn = sqlx::SqliteConnection::connect(&app.database_url).await.unwrap();
        let names = |kind: &'static str| {
            sqlx::query_scalar::<_, String>(
                "SELECT name FROM sqlite_master WHERE type = $1 AND (type = 'table' OR tbl_name = 'dead_letters') \
                 ORDER BY name",
            )
            .bind(kind)
        };
        (names("table").fetch_all(&mut conn).await.unwrap(), names("trigger").fetch_all(&mut conn).await.unwrap())
    } else {
        let mut conn = sqlx::PgConnection::connect(&app.database_url).await.unwrap();
        let tables = sqlx::query_scalar::<_, String>(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let triggers = sqlx::query_scalar::<_, String>(
            "SELECT tgname::text FROM pg_trigger WHERE tgrelid = 'dead_letters'::regclass AND NOT tgisinternal \
             ORDER BY 1",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        (tables, triggers)
    };
    assert!(tables.iter().any(|t| t == "dead_letters"), "the catalog was read: {tables:?}");
    assert!(!tables.iter().any(|t| t == "fault_flags"), "{tables:?}");
    let expected: &[&str] = if app.database_url.starts_with("sqlite") {
        &["dead_letters_no_delete", "dead_letters_no_update"]
    } else {
        &["dead_letters_immutable"]
    };
    assert_eq!(triggers, expected);
}

/// The benchmark reads the plans of the very queries triage sends (one SQL text for both).
async fn the_triage_queries_explain_on_both_backends(app: TestApp) {
    use withdrawals::storage::dead_letters::{explain_list, explain_summary, DeadLetterFilter};
    let filter = DeadLetterFilter {
        category: Some("dependency_rejected".into()),
        error_code: Some("invalid_account".into()),
        limit: 50,
        ..DeadLetterFilter::default()
    };
    let summary = explain_summary(&app.db).await.unwrap();
    let list = explain_list(&app.db, &filter).await.unwrap();
    assert!(summary.iter().any(|l| l.contains("dead_letters")), "{summary:#?}");
    assert!(list.iter().any(|l| l.contains("dead_letters")), "{list:#?}");
}

async fn a_job_rejected_on_its_first_run_is_dead_lettered_with_that_runs_time_as_its_first_attempt(app: TestApp) {
    // Arrange: the provider refuses every payout.
    app.provider
        .mock
        .set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::InvalidAccount)] });
    app.start_default_worker();
    let alice = app.customer("100.00").await;
    let before = DbTime::now();

    // Act: one withdrawal, refused on its first (and only) run.
    let id = app.create_withdrawal(&alice, "first-run", "10.00").await;
    app.wait_for_status(id, WithdrawalStatus::RequiresReview, WAIT).await;

    // Assert: the envelope says when that run was, not null.
    let letter = dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap().remove(0);
    assert_eq!((letter.category.as_str(), letter.attempts), ("dependency_rejected", 1));
    let first = letter.first_attempt_at.expect("a first run's dead letter has its first attempt's time");
    assert!(
        before.0 <= first.0 && first.0 <= letter.failed_at.0,
        "{first:?} within [{before:?}, {:?}]",
        letter.failed_at
    );
    app.assert_ledger_invariant().await;
}

async fn a_payload_naming_a_withdrawal_that_does_not_exist_is_dead_lettered_on_its_first_run_as_bad_payload(
    app: TestApp,
) {
    // Arrange: a submit and a reconciliation whose withdrawal was never created.
    let provider = provider_mock(2_000).await;
    let (missing_submit, missing_reconcile) = (WithdrawalId::new(), WithdrawalId::new());
    let submit = serde_json::json!({"withdrawal_id": missing_submit, "operation_key": missing_submit.to_string()});
    let submit = enqueue_raw(&app, JobKind::SubmitPayout.as_str(), 2, submit.to_string().as_bytes()).await;
    let reconcile = serde_json::json!({"withdrawal_id": missing_reconcile, "reason": "unknown_outcome"});
    let reconcile = enqueue_raw_on(
        &app,
        Queue::Reconciliation.as_str(),
        JobKind::ReconcilePayout.as_str(),
        1,
        reconcile.to_string().as_bytes(),
    )
    .await;
    let before = DbTime::now();

    // Act
    app.start_worker(startup::gateway(provider.provider.clone()), worker_config("w1"));
    wait_for_job_status(&app, submit, "dead").await;
    wait_for_job_status(&app, reconcile, "dead").await;

    // Assert: poison at once — no handler-error retries, its raw bytes kept, nothing sent.
    for job in [submit, reconcile] {
        let letter = dead_letters::for_job(&app.db, job).await.unwrap().remove(0);
        assert_eq!(
            (letter.category.as_str(), letter.error_code.as_str(), letter.error_class.as_str(), letter.attempts),
            ("bad_payload", "unknown_withdrawal", "poison", 1)
        );
        assert!(letter.raw_payload.is_some() && letter.payload.is_some(), "the payload and its raw bytes are kept");
        assert!(letter.first_attempt_at.is_some_and(|t| before.0 <= t.0), "{:?}", letter.first_attempt_at);
        let row = job_store::job_row(&app.db, job).await.unwrap().unwrap();
        assert_eq!(row.receives, 1, "run once, never retried as a handler error");
    }
    assert!(provider.mock.transfers().is_empty(), "nothing was sent to the provider");
}
