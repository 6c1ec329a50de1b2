//! The guarded write of SPEC §1.1 at the storage layer.

use futures::future::join_all;
use withdrawals::customer::types::WithdrawalView;
use withdrawals::domain::{Actor, WithdrawalId, WithdrawalKey, WithdrawalStatus};
use withdrawals::storage::batch::Writes;
use withdrawals::storage::withdrawals::{self as store, TransitionOutcome, TransitionRequest};

use crate::both_backends;
use crate::harness::{read, withdrawal_body, TestApp};

both_backends!(
    a_guarded_transition_that_lost_the_race_changes_nothing_and_reports_it,
    a_stale_version_changes_nothing,
    a_forbidden_transition_changes_nothing,
    completing_settles_the_hold_and_failing_releases_it,
    a_batched_transition_of_a_read_withdrawal_settles_once_and_a_stale_one_writes_nothing,
);

async fn pending_withdrawal(app: &TestApp) -> WithdrawalId {
    let alice = app.customer("100.00").await;
    let body: WithdrawalView =
        read(app.post_withdrawal(&alice, "k", &withdrawal_body("25.00")).send().await.unwrap()).await;
    WithdrawalId(body.id)
}

fn request(key: WithdrawalKey, from: WithdrawalStatus, to: WithdrawalStatus, actor: &Actor) -> TransitionRequest<'_> {
    TransitionRequest {
        key,
        from,
        to,
        expected_version: None,
        actor,
        reason: "test",
        correlation_id: "c",
        failure_code: None,
        evidence: None,
    }
}

async fn apply(app: &TestApp, req: &TransitionRequest<'_>) -> TransitionOutcome {
    let mut tx = app.db.begin().await.unwrap();
    let outcome = store::transition(&mut tx, req).await.unwrap();
    tx.commit().await.unwrap();
    outcome
}

async fn a_guarded_transition_that_lost_the_race_changes_nothing_and_reports_it(app: TestApp) {
    let id = pending_withdrawal(&app).await;
    let workers: Vec<Actor> = (0..8).map(|i| Actor::Worker(format!("w{i}"))).collect();

    let outcomes = join_all(workers.iter().map(|w| {
        let app = &app;
        async move {
            apply(app, &request(app.key(id).await, WithdrawalStatus::Pending, WithdrawalStatus::Processing, w)).await
        }
    }))
    .await;

    let applied = outcomes.iter().filter(|o| matches!(o, TransitionOutcome::Applied(_))).count();
    let stale = outcomes.iter().filter(|o| matches!(o, TransitionOutcome::Stale)).count();
    assert_eq!((applied, stale), (1, 7), "exactly one claim wins; the others are told they lost");
    let withdrawal = store::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!((withdrawal.status, withdrawal.version), (WithdrawalStatus::Processing, 2));
    let transitions = store::transitions(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(transitions.len(), 2, "created + the one applied move, nothing from the losers");
    app.assert_ledger_invariant().await;
}

async fn a_stale_version_changes_nothing(app: TestApp) {
    let id = pending_withdrawal(&app).await;
    let worker = Actor::Worker("w".into());
    assert!(matches!(
        apply(&app, &request(app.key(id).await, WithdrawalStatus::Pending, WithdrawalStatus::Processing, &worker))
            .await,
        TransitionOutcome::Applied(_)
    ));
    let operator = Actor::Operator("op".into());
    let mut late = request(app.key(id).await, WithdrawalStatus::Processing, WithdrawalStatus::Failed, &operator);
    late.expected_version = Some(1);

    assert_eq!(apply(&app, &late).await, TransitionOutcome::Stale);

    late.expected_version = Some(2);
    assert!(matches!(apply(&app, &late).await, TransitionOutcome::Applied(w) if w.version == 3));
    app.assert_ledger_invariant().await;
}

async fn a_forbidden_transition_changes_nothing(app: TestApp) {
    let id = pending_withdrawal(&app).await;
    let actor = Actor::System;

    let outcome =
        apply(&app, &request(app.key(id).await, WithdrawalStatus::Pending, WithdrawalStatus::Completed, &actor)).await;

    assert!(matches!(outcome, TransitionOutcome::Forbidden(_)));
    let withdrawal = store::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!((withdrawal.status, withdrawal.version), (WithdrawalStatus::Pending, 1));
}

async fn completing_settles_the_hold_and_failing_releases_it(app: TestApp) {
    let alice = app.customer("100.00").await;
    let mut ids = Vec::new();
    for key in ["a", "b"] {
        let body: WithdrawalView =
            read(app.post_withdrawal(&alice, key, &withdrawal_body("30.00")).send().await.unwrap()).await;
        ids.push(WithdrawalId(body.id));
    }
    let worker = Actor::Worker("w".into());
    for id in &ids {
        apply(&app, &request(app.key(*id).await, WithdrawalStatus::Pending, WithdrawalStatus::Processing, &worker))
            .await;
    }

    apply(&app, &request(app.key(ids[0]).await, WithdrawalStatus::Processing, WithdrawalStatus::Completed, &worker))
        .await;
    let mut fail = request(app.key(ids[1]).await, WithdrawalStatus::Processing, WithdrawalStatus::Failed, &worker);
    fail.failure_code = Some("rejected_by_bank");
    apply(&app, &fail).await;

    assert_eq!(app.usd_balance(&alice).await, ("70.00".into(), "0.00".into(), "30.00".into()));
    let failed = store::find(&app.db, ids[1]).await.unwrap().unwrap();
    assert_eq!(failed.failure_code.as_deref(), Some("rejected_by_bank"));
    app.assert_ledger_invariant().await;
}

/// The payout handler's path: the guarded update in the caller's batch, the transition row and
/// ledger entries only once it applied. The loser read the same withdrawal and tries to settle
/// it the other way: its ledger write (a release of a hold already settled) must never run.
async fn a_batched_transition_of_a_read_withdrawal_settles_once_and_a_stale_one_writes_nothing(app: TestApp) {
    let alice = app.customer("100.00").await;
    let body: WithdrawalView =
        read(app.post_withdrawal(&alice, "k", &withdrawal_body("25.00")).send().await.unwrap()).await;
    let id = WithdrawalId(body.id);
    let worker = Actor::Worker("w".into());
    apply(&app, &request(app.key(id).await, WithdrawalStatus::Pending, WithdrawalStatus::Processing, &worker)).await;
    let read = store::find(&app.db, id).await.unwrap().unwrap();

    let mut settled = Vec::new();
    for to in [WithdrawalStatus::Completed, WithdrawalStatus::Failed] {
        let req = request(app.key(id).await, WithdrawalStatus::Processing, to, &worker);
        let mut tx = app.db.begin().await.unwrap();
        let mut writes = Writes::new();
        let known = store::transition_known_in(&mut writes, &req).unwrap();
        let counts = writes.run(&mut tx).await.unwrap();
        settled.push(known.settle(&mut tx, &counts, &read, &req, Writes::new()).await.unwrap());
        tx.commit().await.unwrap();
    }

    assert_eq!(settled, [true, false], "the first settles, the second finds it moved");
    let now = store::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!((now.status, now.version), (WithdrawalStatus::Completed, 3));
    let transitions = store::transitions(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(transitions.len(), 3, "created, processing, completed: nothing from the stale move");
    assert_eq!(app.usd_balance(&alice).await, ("75.00".into(), "0.00".into(), "25.00".into()), "settled once");
    app.assert_ledger_invariant().await;
}
