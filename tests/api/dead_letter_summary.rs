//! The triage summary (SPEC §8.2) reads a maintained open set (issue 8); it must stay exactly
//! what the events say through every way a dead letter opens and closes: dead-lettering, an
//! operator's close, a withdrawal settling, a replay that succeeds and one that dead-letters again.

use std::time::Duration;

use provider_mocks::{FaultConfig, FaultEffect, FaultRule, RouteMatch};
use reqwest::Method;
use serde_json::{json, Value};
use uuid::Uuid;
use withdrawals::domain::{ReplayStatus, WithdrawalId, WithdrawalStatus};
use withdrawals::jobs::JobKind;
use withdrawals::ops::types::ReplayRunView;
use withdrawals::storage::dead_letters::{self, SummaryRow};
use withdrawals::storage::jobs::{self as job_store, NewJob};
use withdrawals::storage::{metrics, verify, DbTime};

use crate::both_backends;
use crate::harness::{typed, TestApp};

both_backends!(the_summary_stays_exact_through_dead_lettering_closing_settling_and_replaying);

const WAIT: Duration = Duration::from_secs(30);

/// The summary as (category, error_code, open), after checking it equals the recount from the
/// raw tables (counts and oldest open failure) and that the gauge agrees.
async fn exact_summary(app: &TestApp, step: &str) -> Vec<(String, String, i64)> {
    let maintained = dead_letters::summary(&app.db).await.unwrap();
    let recomputed = verify::open_dead_letters_from_events(&app.db).await.unwrap();
    assert_eq!(maintained, recomputed, "after {step}: the maintained summary differs from the events");
    let gauge = metrics::open_dead_letters(&app.db).await.unwrap();
    assert_eq!(gauge.count, recomputed.iter().map(|g| g.open).sum::<i64>(), "after {step}: the gauge");
    assert_eq!(gauge.oldest, recomputed.iter().filter_map(|g| g.oldest_open).min(), "after {step}: the gauge");
    maintained
        .into_iter()
        .map(|SummaryRow { category, error_code, open, .. }| (category.to_string(), error_code, open))
        .collect()
}

fn groups(rows: &[(&str, &str, i64)]) -> Vec<(String, String, i64)> {
    rows.iter().map(|(c, e, n)| (c.to_string(), e.to_string(), *n)).collect()
}

async fn poison_job(app: &TestApp, n: u8) -> withdrawals::domain::JobKey {
    let mut tx = app.db.begin().await.unwrap();
    let id = job_store::enqueue(
        &mut tx,
        &NewJob {
            kind: JobKind::SubmitPayout.into(),
            payload: format!("{{\"withdrawal_id\": {n} oops").into_bytes(),
            payload_version: 2,
            run_at: DbTime::now(),
            correlation_id: format!("poison-{n}"),
            account_id: withdrawals::domain::AccountId::SYSTEM,
            withdrawal_id: None,
        },
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    id
}

async fn letters_of(app: &TestApp, id: WithdrawalId) -> Vec<dead_letters::DeadLetter> {
    dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap()
}

async fn ops(app: &TestApp, method: Method, path: &str, token: &str, body: Option<Value>) -> Value {
    let mut request = app.client.request(method, app.url(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert!(status.is_success(), "{path}: {status} {body}");
    body
}

/// Starts a replay of `letter` and waits until the run has released it and finished.
async fn replay(app: &TestApp, admin: &str, letter: Uuid) {
    let run = ops(
        app,
        Method::POST,
        "/ops/v1/replays",
        admin,
        Some(json!({"reason": "provider fixed", "dead_letter_ids": [letter], "expected_payload_version": 2,
                    "destination_queue": "payouts", "rate_per_second": 50, "max_concurrency": 10})),
    )
    .await;
    let run: ReplayRunView = typed(run);
    let path = format!("/ops/v1/replays/{}", run.id);
    app.eventually("the replay run to complete", WAIT, || async {
        (typed::<ReplayRunView>(ops(app, Method::GET, &path, admin, None).await).status == ReplayStatus::Completed)
            .then_some(())
    })
    .await;
}

async fn the_summary_stays_exact_through_dead_lettering_closing_settling_and_replaying(app: TestApp) {
    // Arrange: three withdrawals the provider rejects and two poison jobs, in two groups.
    app.provider
        .mock
        .set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::InvalidAccount)] });
    app.start_default_worker();
    let alice = app.customer("1000.00").await;
    let mut rejected = Vec::new();
    for key in ["r1", "r2", "r3"] {
        rejected.push(app.create_withdrawal(&alice, key, "10.00").await);
    }
    let poison = [poison_job(&app, 1).await, poison_job(&app, 2).await];
    for id in &rejected {
        app.wait_for_status(*id, WithdrawalStatus::RequiresReview, WAIT).await;
    }
    for job in poison {
        app.eventually("the poison job's dead letter", WAIT, || async {
            (!dead_letters::for_job(&app.db, job).await.unwrap().is_empty()).then_some(())
        })
        .await;
    }
    let (operator, admin) = (app.operator("operator").await, app.operator("admin").await);
    assert_eq!(
        exact_summary(&app, "dead-lettering").await,
        groups(&[("dependency_rejected", "invalid_account", 3), ("bad_payload", "undecodable_payload", 2)])
    );

    // An operator closes one poison letter (`add_event` with `closed`).
    let letter = dead_letters::for_job(&app.db, poison[0]).await.unwrap().remove(0).id;
    let close = json!({"reason": "producer fixed"});
    ops(&app, Method::POST, &format!("/ops/v1/dead-letters/{letter}/close"), &operator, Some(close)).await;
    assert_eq!(
        exact_summary(&app, "an operator's close").await,
        groups(&[("dependency_rejected", "invalid_account", 3), ("bad_payload", "undecodable_payload", 1)])
    );

    // A withdrawal settles: failing it closes its letter in the transition (`close_settled`).
    let failed = rejected[0];
    let version = withdrawals::storage::withdrawals::find(&app.db, failed).await.unwrap().unwrap().version;
    let resolve = json!({"action": "fail", "reason": "invalid account", "version": version});
    ops(&app, Method::POST, &format!("/ops/v1/withdrawals/{failed}/resolve"), &operator, Some(resolve)).await;
    assert_eq!(
        exact_summary(&app, "a withdrawal settling").await,
        groups(&[("dependency_rejected", "invalid_account", 2), ("bad_payload", "undecodable_payload", 1)])
    );

    // A replay that the provider rejects again: the first letter stays open (replayed, not
    // closed) and a second one opens.
    let again = rejected[2];
    replay(&app, &admin, letters_of(&app, again).await[0].id.0).await;
    app.eventually("the replayed job's second dead letter", WAIT, || async {
        (letters_of(&app, again).await.len() == 2).then_some(())
    })
    .await;
    app.wait_for_status(again, WithdrawalStatus::RequiresReview, WAIT).await;
    assert_eq!(
        exact_summary(&app, "a replay dead-lettered again").await,
        groups(&[("dependency_rejected", "invalid_account", 3), ("bad_payload", "undecodable_payload", 1)])
    );

    // A replay that pays: the withdrawal completes and closes its letter.
    app.provider.mock.set_faults(FaultConfig::default());
    let paid = rejected[1];
    replay(&app, &admin, letters_of(&app, paid).await[0].id.0).await;
    app.wait_for_status(paid, WithdrawalStatus::Completed, WAIT).await;
    assert_eq!(
        exact_summary(&app, "a replay that paid").await,
        groups(&[("dependency_rejected", "invalid_account", 2), ("bad_payload", "undecodable_payload", 1)])
    );

    // Settling the twice-rejected withdrawal closes both its letters, the last two in the group,
    // and the empty group leaves the summary.
    let version = withdrawals::storage::withdrawals::find(&app.db, again).await.unwrap().unwrap().version;
    let resolve = json!({"action": "fail", "reason": "account cannot be paid", "version": version});
    ops(&app, Method::POST, &format!("/ops/v1/withdrawals/{again}/resolve"), &operator, Some(resolve)).await;
    assert_eq!(
        exact_summary(&app, "settling both letters").await,
        groups(&[("bad_payload", "undecodable_payload", 1)])
    );
    app.assert_ledger_invariant().await;
}
