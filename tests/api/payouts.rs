//! Paying out (SPEC §4, §5): the worker, the provider over real HTTP, retries, the breaker,
//! leases and fencing. Every scenario ends in one explainable state with the ledger exact.

use std::time::Duration;

use chrono::TimeDelta;
use provider_mocks::{FaultConfig, FaultEffect, FaultRule, RouteMatch};
use withdrawals::domain::{Actor, Evidence, EvidenceSource, VerdictKind, WithdrawalId, WithdrawalStatus};
use withdrawals::jobs::{JobKind, Queue};
use withdrawals::provider::breaker::{BreakerConfig, BreakerState, SlidingWindow};
use withdrawals::provider::TransferRequest;
use withdrawals::startup;
use withdrawals::storage::jobs::{self as job_store, Finish};
use withdrawals::storage::withdrawals::{self as store, TransitionOutcome, TransitionRequest};
use withdrawals::storage::{attempts, dead_letters, reconciliations};

use crate::both_backends;
use crate::harness::{provider_mock, sql_id, worker_config, TestApp};

both_backends!(
    a_withdrawal_is_paid_once_and_its_hold_settled,
    three_503s_then_success_completes_with_every_attempt_recorded,
    a_429_with_retry_after_is_not_retried_before_it_says,
    an_unavailable_provider_opens_the_breaker_and_deferrals_consume_no_attempts,
    a_worker_that_died_before_calling_is_replaced_and_the_payout_completes,
    process_death_after_the_provider_executed_is_reconciled_to_completed_with_one_execution,
    a_zombie_workers_late_completion_is_rejected_and_changes_nothing,
    the_same_job_delivered_twice_executes_the_transfer_once,
    a_timeout_after_the_provider_committed_is_reconciled_to_completed,
    a_permanent_rejection_is_dead_lettered_once_and_parked_for_review_with_funds_held,
    a_row_reconciliation_moved_during_its_batchs_calls_writes_nothing_and_the_others_complete,
    a_row_whose_version_changed_during_its_batchs_calls_is_not_moved_and_the_others_complete,
    one_rows_failing_write_after_the_batchs_calls_leaves_the_others_completed_and_is_reconciled,
);

const WAIT: Duration = Duration::from_secs(20);

fn executions_for(mock: &provider_mocks::RunningMock, id: WithdrawalId) -> u32 {
    mock.transfers().iter().filter(|t| t.reference == id.to_string()).map(|t| t.executions).sum()
}

fn create_requests(mock: &provider_mocks::RunningMock, id: WithdrawalId) -> Vec<provider_mocks::RequestRecord> {
    mock.requests()
        .into_iter()
        .filter(|r| r.route == provider_mocks::Route::Create && r.idempotency_key.as_deref() == Some(&id.to_string()))
        .collect()
}

async fn a_withdrawal_is_paid_once_and_its_hold_settled(app: TestApp) {
    let provider = provider_mock(2_000).await;
    app.start_worker(startup::gateway(provider.provider.clone()), worker_config("w1"));
    let alice = app.customer("100.00").await;

    let id = app.create_withdrawal(&alice, "k1", "25.00").await;

    let done = app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    assert_eq!(done.version, 3, "pending → processing → completed");
    assert_eq!(app.usd_balance(&alice).await, ("75.00".into(), "0.00".into(), "25.00".into()));
    assert_eq!(executions_for(&provider.mock, id), 1);
    let transfer = provider.mock.transfers().into_iter().find(|t| t.reference == id.to_string()).unwrap();
    assert_eq!(transfer.idempotency_key, id.to_string(), "the withdrawal id is the operation key");
    let recorded = attempts::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].outcome.map(|o| o.as_str()), Some("paid"));
    assert_eq!(recorded[0].provider_transfer_id.as_deref(), Some(transfer.id.as_str()));
    let jobs = job_store::jobs_for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(jobs[0].status, withdrawals::domain::JobStatus::Succeeded);
    // The provider's answer, checked against the withdrawal, is the evidence of the completion.
    let completed =
        withdrawals::storage::withdrawals::transitions(&app.db, app.key(id).await).await.unwrap().pop().unwrap();
    let evidence = Evidence::read(&completed.evidence.expect("evidence on the completion").0).unwrap();
    assert_eq!((evidence.source, evidence.verdict), (EvidenceSource::ProviderCreate, VerdictKind::Paid));
    let shown = evidence.transfer.expect("the provider's transfer");
    assert_eq!((shown.id.as_str(), shown.amount.to_string().as_str()), (transfer.id.as_str(), "25.00"));
    app.assert_ledger_invariant().await;
}

async fn three_503s_then_success_completes_with_every_attempt_recorded(app: TestApp) {
    let provider = provider_mock(2_000).await;
    let mut rule = FaultRule::new(RouteMatch::Create, FaultEffect::Status { code: 503, retry_after_secs: None });
    rule.times = Some(3);
    provider.mock.set_faults(FaultConfig { rules: vec![rule] });
    let config = worker_config("w1");
    let policy = config.submit_policy.clone();
    app.start_worker(startup::gateway(provider.provider.clone()), config);
    let alice = app.customer("100.00").await;

    let id = app.create_withdrawal(&alice, "k1", "25.00").await;

    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    let recorded = attempts::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    let outcomes: Vec<_> = recorded.iter().map(|a| a.outcome.unwrap().as_str()).collect();
    assert_eq!(outcomes, ["retryable", "retryable", "retryable", "paid"]);
    assert!(recorded[..3]
        .iter()
        .all(|a| a.http_status == Some(503) && a.side_effect == withdrawals::domain::SideEffect::NotStarted));
    let jobs = job_store::jobs_for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(jobs[0].attempts, 3, "each 503 consumed one attempt");
    // Each gap between calls is a delay drawn from the policy (plus the time to run a job).
    let calls = create_requests(&provider.mock, id);
    assert_eq!(calls.len(), 4);
    for (n, pair) in calls.windows(2).enumerate() {
        let gap = (pair[1].at - pair[0].at).to_std().unwrap();
        let ceiling = policy.backoff_ceiling(n as u32 + 1);
        assert!(gap <= ceiling + Duration::from_millis(750), "gap {gap:?} after attempt {} exceeds {ceiling:?}", n + 1);
    }
    assert_eq!(executions_for(&provider.mock, id), 1);
    app.assert_ledger_invariant().await;
}

async fn a_429_with_retry_after_is_not_retried_before_it_says(app: TestApp) {
    let provider = provider_mock(2_000).await;
    let mut rule = FaultRule::new(RouteMatch::Create, FaultEffect::Status { code: 429, retry_after_secs: Some(2) });
    rule.times = Some(1);
    provider.mock.set_faults(FaultConfig { rules: vec![rule] });
    app.start_worker(startup::gateway(provider.provider.clone()), worker_config("w1"));
    let alice = app.customer("100.00").await;

    let id = app.create_withdrawal(&alice, "k1", "25.00").await;

    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    let calls = create_requests(&provider.mock, id);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].outcome, "status:429");
    let gap = (calls[1].at - calls[0].at).to_std().unwrap();
    assert!(gap >= Duration::from_secs(2), "retried after {gap:?}, before Retry-After: 2");
    app.assert_ledger_invariant().await;
}

async fn an_unavailable_provider_opens_the_breaker_and_deferrals_consume_no_attempts(app: TestApp) {
    let provider = provider_mock(2_000).await;
    provider.mock.set_faults(FaultConfig {
        rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::Status { code: 503, retry_after_secs: None })],
    });
    let breaker = BreakerConfig {
        window: SlidingWindow::Count { size: 4 },
        minimum_number_of_calls: 4,
        failure_rate_threshold: 50.0,
        wait_duration_in_open: Duration::from_millis(400),
        permitted_calls_in_half_open: 1,
        ..BreakerConfig::default()
    };
    let gateway = startup::gateway_with(provider.provider.clone(), breaker);
    let mut config = worker_config("w1");
    config.submit_policy.max_attempts = 50;
    app.start_worker(gateway.clone(), config);
    let alice = app.customer("100.00").await;
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(app.create_withdrawal(&alice, &format!("k{i}"), "5.00").await);
    }

    app.eventually("the breaker to open", WAIT, || async {
        (gateway.breaker.state() == BreakerState::Open).then_some(())
    })
    .await;
    let deferred = app
        .eventually("a deferred job", WAIT, || async {
            for id in &ids {
                let job = job_store::jobs_for_withdrawal(&app.db, app.key(*id).await).await.unwrap().remove(0);
                if job.last_error.as_deref() == Some("circuit breaker open") {
                    return Some(*id);
                }
            }
            None
        })
        .await;
    provider.mock.set_faults(FaultConfig::default());

    for id in &ids {
        app.wait_for_status(*id, WithdrawalStatus::Completed, WAIT).await;
    }
    assert_ne!(gateway.breaker.state(), BreakerState::Open, "the breaker closed after recovery");
    for id in &ids {
        let job = job_store::jobs_for_withdrawal(&app.db, app.key(*id).await).await.unwrap().remove(0);
        let calls = attempts::for_withdrawal(&app.db, app.key(*id).await).await.unwrap();
        let failed_calls =
            calls.iter().filter(|a| a.outcome == Some(withdrawals::domain::AttemptResult::Retryable)).count() as i64;
        assert_eq!(job.attempts, failed_calls, "only real calls consume attempts ({id})");
        assert_eq!(executions_for(&provider.mock, *id), 1);
    }
    let deferred_job = job_store::jobs_for_withdrawal(&app.db, app.key(deferred).await).await.unwrap().remove(0);
    assert!(deferred_job.receives > deferred_job.attempts + 1, "it ran without calling: {deferred_job:?}");
    app.assert_ledger_invariant().await;
}

/// Claims the withdrawal's submit job as a worker that then dies (never finishes, never heartbeats).
async fn claim_and_die(app: &TestApp, lease_ms: i64) -> job_store::ClaimedJob {
    let claimed =
        job_store::claim(&app.db, Queue::Payouts.as_str(), "doomed-worker", 1, TimeDelta::milliseconds(lease_ms))
            .await
            .unwrap();
    assert_eq!(claimed.len(), 1);
    claimed.into_iter().next().unwrap()
}

async fn a_worker_that_died_before_calling_is_replaced_and_the_payout_completes(app: TestApp) {
    let provider = provider_mock(2_000).await;
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "25.00").await;
    claim_and_die(&app, 200).await;

    let mut config = worker_config("w2");
    config.lease = Duration::from_millis(600);
    config.heartbeat = Duration::from_millis(150);
    app.start_worker(startup::gateway(provider.provider.clone()), config);

    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    assert_eq!(executions_for(&provider.mock, id), 1);
    let job = job_store::jobs_for_withdrawal(&app.db, app.key(id).await).await.unwrap().remove(0);
    assert_eq!(job.receives, 2, "received by the dead worker, then by the live one");
    app.assert_ledger_invariant().await;
}

async fn process_death_after_the_provider_executed_is_reconciled_to_completed_with_one_execution(app: TestApp) {
    let provider = provider_mock(2_000).await;
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "25.00").await;
    let job = claim_and_die(&app, 200).await;
    // The doomed worker got as far as the call: processing, attempt started, transfer executed.
    let key = app.key(id).await;
    let mut tx = app.db.begin().await.unwrap();
    let actor = Actor::Worker("doomed-worker".into());
    let claimed = store::transition(&mut tx, &to_processing(key, &actor)).await.unwrap();
    assert!(matches!(claimed, TransitionOutcome::Applied(_)));
    let start = attempts::Start {
        withdrawal: key,
        job: job.id,
        attempt_no: 1,
        worker: "doomed-worker",
        correlation_id: &job.correlation_id,
        provider: "default",
    };
    attempts::start(&mut tx, &start).await.unwrap();
    tx.commit().await.unwrap();
    let request = TransferRequest {
        reference: id.to_string(),
        amount: "25.00".into(),
        currency: "USD".into(),
        destination: withdrawals::domain::Destination::parse("bank_account", "12345678", "021000021").unwrap(),
    };
    provider.provider.submit(&id.to_string(), &job.correlation_id, &request).await;

    let mut config = worker_config("w2");
    config.lease = Duration::from_millis(600);
    config.heartbeat = Duration::from_millis(150);
    app.start_worker(startup::gateway(provider.provider.clone()), config);

    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    let jobs = job_store::jobs_for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!((jobs[0].kind.as_str(), jobs[0].receives), ("submit_payout", 2));
    assert!(
        jobs.iter().any(|j| j.kind == JobKind::ReconcilePayout.as_str()),
        "the second claimer asked reconciliation"
    );
    let results = reconciliations::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(results.iter().map(|r| r.result.as_str()).collect::<Vec<_>>(), ["paid"]);
    assert_eq!(executions_for(&provider.mock, id), 1, "never resubmitted blindly");
    assert_eq!(create_requests(&provider.mock, id).len(), 1);
    assert_eq!(app.usd_balance(&alice).await, ("75.00".into(), "0.00".into(), "25.00".into()));
    app.assert_ledger_invariant().await;
}

fn to_processing(key: withdrawals::domain::WithdrawalKey, actor: &Actor) -> TransitionRequest<'_> {
    TransitionRequest {
        key,
        from: WithdrawalStatus::Pending,
        to: WithdrawalStatus::Processing,
        expected_version: None,
        actor,
        reason: "test",
        correlation_id: "c",
        failure_code: None,
        evidence: None,
    }
}

async fn a_zombie_workers_late_completion_is_rejected_and_changes_nothing(app: TestApp) {
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "25.00").await;
    let zombie = claim_and_die(&app, 0).await;
    tokio::time::sleep(Duration::from_millis(5)).await; // let the zero-length lease lapse
    assert!(job_store::expire_leases(&app.db, 5).await.unwrap().is_empty());
    let live =
        job_store::claim(&app.db, Queue::Payouts.as_str(), "live-worker", 1, TimeDelta::seconds(30)).await.unwrap();
    assert_eq!(live.len(), 1);
    assert_ne!(live[0].lease_token, zombie.lease_token);

    // The zombie wakes up and tries to finish: move the withdrawal and complete the job.
    let key = app.key(id).await;
    let mut tx = app.db.begin().await.unwrap();
    let actor = Actor::Worker("zombie".into());
    store::transition(&mut tx, &to_processing(key, &actor)).await.unwrap();
    let fenced = job_store::finish(&mut tx, zombie.key(), zombie.lease_token, &Finish::Succeeded).await.unwrap();
    assert!(!fenced, "the old lease token no longer matches");
    drop(tx); // the caller rolls back, as JobContext::finish_or_rollback does

    let current = store::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!((current.status, current.version), (WithdrawalStatus::Pending, 1));
    let job = job_store::jobs_for_withdrawal(&app.db, app.key(id).await).await.unwrap().remove(0);
    assert_eq!((job.status.as_str(), job.receives), ("running", 2), "still the live worker's");
    let live_finish = {
        let mut tx = app.db.begin().await.unwrap();
        let ok = job_store::finish(&mut tx, live[0].key(), live[0].lease_token, &Finish::Release).await.unwrap();
        tx.commit().await.unwrap();
        ok
    };
    assert!(live_finish, "the live lease still works");
    app.assert_ledger_invariant().await;
}

async fn the_same_job_delivered_twice_executes_the_transfer_once(app: TestApp) {
    let provider = provider_mock(5_000).await;
    let mut slow = FaultRule::new(RouteMatch::Create, FaultEffect::Latency { ms: 1_500 });
    slow.times = Some(1);
    provider.mock.set_faults(FaultConfig { rules: vec![slow] });
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "25.00").await;
    // Worker one's lease runs out during its slow call (no heartbeat in time), so the job is
    // delivered again, to worker two, while worker one is still inside the call.
    let mut first = worker_config("w1");
    first.lease = Duration::from_millis(400);
    first.heartbeat = Duration::ZERO;
    first.max_receives = 1_000;
    app.start_worker(startup::gateway(provider.provider.clone()), first);
    app.eventually("worker one to call the provider", WAIT, || async {
        (!create_requests(&provider.mock, id).is_empty()).then_some(())
    })
    .await;
    let mut second = worker_config("w2");
    second.lease = Duration::from_millis(400);
    second.heartbeat = Duration::from_millis(100);
    app.start_worker(startup::gateway(provider.provider.clone()), second);

    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    tokio::time::sleep(Duration::from_millis(1_700)).await; // worker one's call returns and is fenced off

    let jobs = job_store::jobs_for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert!(
        jobs.iter().any(|j| j.kind == JobKind::ReconcilePayout.as_str()),
        "the second delivery handed over to reconciliation"
    );
    assert_eq!(executions_for(&provider.mock, id), 1, "one provider execution");
    assert_eq!(create_requests(&provider.mock, id).len(), 1, "the second delivery did not call again");
    assert_eq!(attempts::for_withdrawal(&app.db, app.key(id).await).await.unwrap().len(), 1, "one attempt");
    let current = store::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!((current.status, current.version), (WithdrawalStatus::Completed, 3), "one outcome");
    assert_eq!(app.usd_balance(&alice).await, ("75.00".into(), "0.00".into(), "25.00".into()), "settled once");
    app.assert_ledger_invariant().await;
}

async fn a_timeout_after_the_provider_committed_is_reconciled_to_completed(app: TestApp) {
    let provider = provider_mock(300).await;
    provider.mock.set_faults(FaultConfig {
        rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::TimeoutAfterCommit { ms: 2_000 })],
    });
    app.start_worker(startup::gateway(provider.provider.clone()), worker_config("w1"));
    let alice = app.customer("100.00").await;

    let id = app.create_withdrawal(&alice, "k1", "25.00").await;

    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    let submit = job_store::jobs_for_withdrawal(&app.db, app.key(id).await).await.unwrap().remove(0);
    assert_eq!(submit.status, withdrawals::domain::JobStatus::Succeeded, "handed over, not retried");
    let recorded = attempts::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(recorded.len(), 1);
    assert_eq!(
        (recorded[0].outcome.map(|o| o.as_str()), recorded[0].side_effect.as_str()),
        (Some("unknown"), "unknown")
    );
    let results = reconciliations::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(results.iter().map(|r| r.result.as_str()).collect::<Vec<_>>(), ["paid"], "found → completed");
    let completed =
        withdrawals::storage::withdrawals::transitions(&app.db, app.key(id).await).await.unwrap().pop().unwrap();
    let evidence = Evidence::read(&completed.evidence.expect("evidence on the completion").0).unwrap();
    assert_eq!((evidence.source, evidence.verdict), (EvidenceSource::ProviderLookup, VerdictKind::Paid));
    assert_eq!(create_requests(&provider.mock, id).len(), 1, "no second transfer attempted");
    assert_eq!(executions_for(&provider.mock, id), 1);
    app.assert_ledger_invariant().await;
}

async fn a_permanent_rejection_is_dead_lettered_once_and_parked_for_review_with_funds_held(app: TestApp) {
    let provider = provider_mock(2_000).await;
    provider
        .mock
        .set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::InvalidAccount)] });
    app.start_worker(startup::gateway(provider.provider.clone()), worker_config("w1"));
    let alice = app.customer("100.00").await;

    let id = app.create_withdrawal(&alice, "k1", "25.00").await;

    app.wait_for_status(id, WithdrawalStatus::RequiresReview, WAIT).await;
    let job = job_store::jobs_for_withdrawal(&app.db, app.key(id).await).await.unwrap().remove(0);
    assert_eq!((job.status.as_str(), job.last_error.as_deref()), ("dead", Some("invalid_account")));
    assert_eq!(create_requests(&provider.mock, id).len(), 1, "a permanent error is not retried");
    assert_eq!(app.usd_balance(&alice).await.1, "25.00", "still held until someone decides");
    let letters = dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(letters.len(), 1);
    let letter = &letters[0];
    assert_eq!(
        (letter.category.as_str(), letter.error_code.as_str(), letter.side_effect_state.as_str()),
        ("dependency_rejected", "invalid_account", "confirmed")
    );
    // The one run that was rejected counts: `attempts` is runs, the final one included.
    assert_eq!((letter.owner.as_str(), letter.attempts), ("integration owner", 1));
    // The build that failed it, for the runbook: the crate version and the git commit.
    assert_eq!(letter.worker_version, withdrawals::VERSION);
    let (version, commit) = letter.worker_version.split_once('+').expect("version+commit");
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    assert!(commit == "unknown" || (commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())), "{commit}");
    assert_eq!(letter.idempotency_key.as_deref(), Some(id.to_string().as_str()));
    let payload = letter.payload.as_ref().unwrap();
    assert_eq!(payload.0["withdrawal_id"], id.to_string());
    app.assert_ledger_invariant().await;
}

async fn a_row_reconciliation_moved_during_its_batchs_calls_writes_nothing_and_the_others_complete(app: TestApp) {
    let provider = provider_mock(5_000).await;
    // Every create waits, so one withdrawal can be moved while the batch's calls are in flight.
    provider.mock.set_faults(FaultConfig {
        rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::Latency { ms: 1_500 })],
    });
    let alice = app.customer("100.00").await;
    let mut ids = Vec::new();
    for key in ["b1", "b2", "b3"] {
        ids.push(app.create_withdrawal(&alice, key, "10.00").await);
    }
    // One claim takes all three (created before the worker starts): one batch.
    app.start_worker(startup::gateway(provider.provider.clone()), worker_config("w1"));
    for id in &ids {
        app.wait_for_status(*id, WithdrawalStatus::Processing, WAIT).await;
    }
    app.eventually("the batch's three calls to reach the provider", WAIT, || async {
        ids.iter().all(|id| !create_requests(&provider.mock, *id).is_empty()).then_some(())
    })
    .await;

    // Reconciliation settles the middle one meanwhile.
    let stale = ids[1];
    app.reconcile_completed(stale).await;

    // The batch's answers arrive: the others complete by the worker, in the same batch.
    for id in [ids[0], ids[2]] {
        let done = app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
        assert_eq!(done.version, 3, "pending → processing → completed");
        let last = store::transitions(&app.db, app.key(id).await).await.unwrap().pop().unwrap();
        assert_eq!((last.to_status.as_str(), last.actor.as_str()), ("completed", "worker:w1"));
    }
    app.eventually("the stale row's job to finish", WAIT, || async {
        let jobs = job_store::jobs_for_withdrawal(&app.db, app.key(stale).await).await.unwrap();
        (jobs.len() == 1 && jobs[0].status == withdrawals::domain::JobStatus::Succeeded).then_some(())
    })
    .await;

    // The stale row wrote its own records (the attempt's outcome, the job's finish) and nothing
    // else: no second move, no second settle.
    let current = store::find(&app.db, stale).await.unwrap().unwrap();
    assert_eq!((current.status, current.version), (WithdrawalStatus::Completed, 3));
    let moves: Vec<_> = store::transitions(&app.db, app.key(stale).await)
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.to_status, t.actor))
        .filter(|(to, _)| *to == WithdrawalStatus::Completed)
        .collect();
    assert_eq!(moves, vec![(WithdrawalStatus::Completed, "reconciliation".to_owned())]);
    let entries = withdrawals::storage::accounts::entries_for_withdrawal(&app.db, app.key(stale).await).await.unwrap();
    assert_eq!(
        entries.iter().filter(|e| e.kind == withdrawals::domain::EntryKind::Settle).count(),
        1,
        "settled once: {entries:?}"
    );
    let recorded = attempts::for_withdrawal(&app.db, app.key(stale).await).await.unwrap();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].outcome.map(|o| o.as_str()), Some("paid"), "the late worker still records its own attempt");
    assert_eq!(app.usd_balance(&alice).await, ("70.00".into(), "0.00".into(), "30.00".into()));
    for id in &ids {
        assert_eq!(executions_for(&provider.mock, *id), 1);
    }
    app.assert_ledger_invariant().await;
}

/// The SQL literal of a withdrawal id on the app's backend.
/// Three withdrawals of 10.00 created before the worker starts, so one claim takes them all: one
/// batch.
async fn three_for_one_batch(app: &TestApp, alice: &crate::harness::Customer) -> Vec<WithdrawalId> {
    let mut ids = Vec::new();
    for key in ["b1", "b2", "b3"] {
        ids.push(app.create_withdrawal(alice, key, "10.00").await);
    }
    ids
}

async fn assert_completed_by_the_batch(app: &TestApp, id: WithdrawalId) {
    let done = app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    assert_eq!(done.version, 3, "pending → processing → completed");
    let last = store::transitions(&app.db, app.key(id).await).await.unwrap().pop().unwrap();
    assert_eq!((last.to_status.as_str(), last.actor.as_str()), ("completed", "worker:w1"));
}

async fn a_row_whose_version_changed_during_its_batchs_calls_is_not_moved_and_the_others_complete(app: TestApp) {
    let provider = provider_mock(5_000).await;
    // Every create waits, so one withdrawal can change while the batch's calls are in flight.
    provider.mock.set_faults(FaultConfig {
        rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::Latency { ms: 1_500 })],
    });
    let alice = app.customer("100.00").await;
    let ids = three_for_one_batch(&app, &alice).await;
    app.start_worker(startup::gateway(provider.provider.clone()), worker_config("w1"));
    app.eventually("the batch's three calls to reach the provider", WAIT, || async {
        ids.iter().all(|id| !create_requests(&provider.mock, *id).is_empty()).then_some(())
    })
    .await;

    // The middle one changes meanwhile, its status unchanged (a concurrent version bump).
    let changed = ids[1];
    app.execute_raw(&format!("UPDATE withdrawals SET version = version + 1 WHERE id = {}", sql_id(&app, changed.0)))
        .await;

    // The others complete in the batch; the changed one is a stale move: not moved, its own
    // records (the attempt's outcome, the job's finish) written.
    for id in [ids[0], ids[2]] {
        assert_completed_by_the_batch(&app, id).await;
    }
    app.eventually("the changed row's job to finish", WAIT, || async {
        let jobs = job_store::jobs_for_withdrawal(&app.db, app.key(changed).await).await.unwrap();
        (jobs.len() == 1 && jobs[0].status == withdrawals::domain::JobStatus::Succeeded).then_some(())
    })
    .await;
    let current = store::find(&app.db, changed).await.unwrap().unwrap();
    assert_eq!((current.status, current.version), (WithdrawalStatus::Processing, 3), "not moved by the batch");
    assert!(store::transitions(&app.db, app.key(changed).await)
        .await
        .unwrap()
        .iter()
        .all(|t| t.to_status != WithdrawalStatus::Completed));
    let recorded = attempts::for_withdrawal(&app.db, app.key(changed).await).await.unwrap();
    assert_eq!(recorded[0].outcome.map(|o| o.as_str()), Some("paid"), "its attempt's outcome is recorded");
    assert_eq!(app.usd_balance(&alice).await, ("70.00".into(), "10.00".into(), "20.00".into()));
    app.assert_ledger_invariant().await;
}

async fn one_rows_failing_write_after_the_batchs_calls_leaves_the_others_completed_and_is_reconciled(app: TestApp) {
    let provider = provider_mock(2_000).await;
    let alice = app.customer("100.00").await;
    let ids = three_for_one_batch(&app, &alice).await;
    // A trigger refuses the middle row's move to `completed`: its write fails in the batch's
    // closing transaction (and in any other, until the trigger is dropped).
    let failing = ids[1];
    let (target, sqlite) = (sql_id(&app, failing.0), app.database_url.starts_with("sqlite:"));
    if sqlite {
        app.execute_raw(&format!(
            "CREATE TRIGGER test_fail_one_row BEFORE UPDATE ON withdrawals
             WHEN OLD.id = {target} AND NEW.status = 'completed'
             BEGIN SELECT RAISE(ABORT, 'injected failure of one row'); END"
        ))
        .await;
    } else {
        app.execute_raw(
            "CREATE FUNCTION test_fail_one_row() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN RAISE EXCEPTION 'injected failure of one row'; END $$",
        )
        .await;
        app.execute_raw(&format!(
            "CREATE TRIGGER test_fail_one_row BEFORE UPDATE ON withdrawals FOR EACH ROW
             WHEN (OLD.id = {target} AND NEW.status = 'completed') EXECUTE FUNCTION test_fail_one_row()"
        ))
        .await;
    }

    app.start_worker(startup::gateway(provider.provider.clone()), worker_config("w1"));

    // The others' decisions are committed by the batch itself.
    for id in [ids[0], ids[2]] {
        assert_completed_by_the_batch(&app, id).await;
    }
    let stuck = store::find(&app.db, failing).await.unwrap().unwrap();
    assert_eq!(stuck.status, WithdrawalStatus::Processing, "the failing row was not moved");

    // Once the fault is gone, the failing row is reconciled (its attempt had no recorded
    // outcome: the provider is asked, never called again) and completes.
    match sqlite {
        true => app.execute_raw("DROP TRIGGER test_fail_one_row").await,
        false => app.execute_raw("DROP TRIGGER test_fail_one_row ON withdrawals").await,
    }
    app.wait_for_status(failing, WithdrawalStatus::Completed, WAIT).await;
    let last = store::transitions(&app.db, app.key(failing).await).await.unwrap().pop().unwrap();
    assert_eq!((last.to_status.as_str(), last.actor.as_str()), ("completed", "reconciliation"));
    for id in &ids {
        assert_eq!(executions_for(&provider.mock, *id), 1, "each paid once");
    }
    assert_eq!(app.usd_balance(&alice).await, ("70.00".into(), "0.00".into(), "30.00".into()));
    app.assert_ledger_invariant().await;
}
