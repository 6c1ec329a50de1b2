//! Holding funds (SPEC §1.2): no overdraft under concurrency, cancel releases the hold.

use futures::future::join_all;
use withdrawals::customer::types::WithdrawalView;
use withdrawals::domain::{Actor, WithdrawalId, WithdrawalStatus};
use withdrawals::storage::withdrawals::{self as store, TransitionOutcome, TransitionRequest};

use crate::both_backends;
use crate::harness::{problem_code, read, withdrawal_body, TestApp};

both_backends!(
    fifty_concurrent_withdrawals_against_a_balance_for_ten_accept_exactly_ten,
    cancelling_a_pending_withdrawal_releases_its_hold,
    cancelling_a_withdrawal_that_is_no_longer_pending_is_a_409,
);

async fn fifty_concurrent_withdrawals_against_a_balance_for_ten_accept_exactly_ten(app: TestApp) {
    let alice = app.customer("100.00").await;

    let responses = join_all((0..50).map(|i| {
        let request = app.post_withdrawal(&alice, &format!("key-{i}"), &withdrawal_body("10.00"));
        async move { request.send().await.unwrap() }
    }))
    .await;

    let mut accepted = 0;
    let mut refused = 0;
    for response in responses {
        if response.status() == 201 {
            accepted += 1;
        } else {
            let (status, code, body) = problem_code(response).await;
            assert_eq!((status, code.as_str()), (422, "insufficient_funds"), "{body:?}");
            refused += 1;
        }
    }
    assert_eq!((accepted, refused), (10, 40));
    assert_eq!(app.usd_balance(&alice).await, ("0.00".into(), "100.00".into(), "0.00".into()));
    assert_eq!(store::count_for_account(&app.db, alice.account_id).await.unwrap(), 10);
    app.assert_ledger_invariant().await;
}

async fn cancelling_a_pending_withdrawal_releases_its_hold(app: TestApp) {
    let alice = app.customer("100.00").await;
    let created: WithdrawalView =
        read(app.post_withdrawal(&alice, "k", &withdrawal_body("40.00")).send().await.unwrap()).await;
    let id = created.id;

    let response = app
        .client
        .post(app.url(&format!("/v1/withdrawals/{id}/cancel")))
        .bearer_auth(&alice.api_key)
        .send()
        .await
        .unwrap();

    assert_eq!(response.status(), 200);
    let body: WithdrawalView = read(response).await;
    assert_eq!(body.status, WithdrawalStatus::Failed);
    assert_eq!(body.failure_code.as_deref(), Some("cancelled_by_customer"));
    assert_eq!(body.version, 2);
    assert_eq!(app.usd_balance(&alice).await, ("100.00".into(), "0.00".into(), "0.00".into()));
    let transitions = store::transitions(&app.db, app.key(WithdrawalId(id)).await).await.unwrap();
    let last = transitions.last().unwrap();
    assert_eq!(
        (last.from_status.map(|s| s.as_str()), last.to_status.as_str(), last.actor.as_str()),
        (Some("pending"), "failed", "customer")
    );
    app.assert_ledger_invariant().await;
}

async fn cancelling_a_withdrawal_that_is_no_longer_pending_is_a_409(app: TestApp) {
    let alice = app.customer("100.00").await;
    let created: WithdrawalView =
        read(app.post_withdrawal(&alice, "k", &withdrawal_body("40.00")).send().await.unwrap()).await;
    let id = WithdrawalId(created.id);
    // A worker claimed it.
    let mut tx = app.db.begin().await.unwrap();
    let worker = Actor::Worker("w1".into());
    let claimed = store::transition(
        &mut tx,
        &TransitionRequest {
            key: app.key(id).await,
            from: WithdrawalStatus::Pending,
            to: WithdrawalStatus::Processing,
            expected_version: None,
            actor: &worker,
            reason: "claimed",
            correlation_id: "c",
            failure_code: None,
            evidence: None,
        },
    )
    .await
    .unwrap();
    assert!(matches!(claimed, TransitionOutcome::Applied(_)));
    tx.commit().await.unwrap();

    let response = app
        .client
        .post(app.url(&format!("/v1/withdrawals/{id}/cancel")))
        .bearer_auth(&alice.api_key)
        .send()
        .await
        .unwrap();

    let (status, code, _) = problem_code(response).await;
    assert_eq!((status, code.as_str()), (409, "withdrawal_not_cancellable"));
    assert_eq!(app.usd_balance(&alice).await, ("60.00".into(), "40.00".into(), "0.00".into()), "still held");
    app.assert_ledger_invariant().await;
}
