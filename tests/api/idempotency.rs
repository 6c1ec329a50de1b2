//! SPEC §3 idempotency: replay, reuse, missing key, in-flight, per-account scope, concurrency.

use futures::future::join_all;
use serde_json::Value;
use withdrawals::customer::types::WithdrawalView;
use withdrawals::domain::{IdempotencyKey, WithdrawalId, WithdrawalStatus};
use withdrawals::storage::idempotency::{self, Begin, IdempotencySettings};
use withdrawals::storage::{jobs, withdrawals as store};

use crate::both_backends;
use crate::harness::{problem_code, read, withdrawal_body, TestApp};

both_backends!(
    first_request_creates_a_pending_withdrawal_holds_funds_and_enqueues_its_job,
    same_key_and_body_replays_the_stored_response,
    same_key_with_a_different_body_is_rejected_as_reused,
    missing_idempotency_key_is_a_400,
    keys_are_scoped_per_account,
    a_request_whose_key_is_in_flight_gets_a_409,
    a_rejected_request_frees_its_key_for_a_retry,
    an_abandoned_claim_is_taken_over_after_the_lock_timeout,
    twenty_concurrent_requests_with_one_key_create_exactly_one_withdrawal,
    a_key_past_its_retention_is_forgotten_and_purged,
    a_takeover_never_overwrites_a_claim_that_completed_meanwhile,
    a_replay_is_answered_from_its_record_even_when_the_balance_no_longer_covers_it,
);

async fn first_request_creates_a_pending_withdrawal_holds_funds_and_enqueues_its_job(app: TestApp) {
    let alice = app.customer("1000.00").await;

    let response = app.post_withdrawal(&alice, "key-1", &withdrawal_body("125.50")).send().await.unwrap();

    assert_eq!(response.status(), 201);
    assert!(response.headers().get("idempotent-replayed").is_none());
    assert!(response.headers().get("x-correlation-id").is_some());
    let body: WithdrawalView = read(response).await;
    assert_eq!(body.status, WithdrawalStatus::Pending);
    assert_eq!((body.amount.as_str(), body.currency.as_str()), ("125.50", "USD"));
    assert_eq!(body.destination.account_number, "****5678");
    assert_eq!(body.version, 1);
    assert_eq!(app.usd_balance(&alice).await, ("874.50".into(), "125.50".into(), "0.00".into()));
    let id = WithdrawalId(body.id);
    let jobs = jobs::jobs_for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(jobs.len(), 1, "creating a withdrawal enqueues exactly its submit job");
    assert_eq!((jobs[0].kind.as_str(), jobs[0].status.as_str()), ("submit_payout", "scheduled"));
    app.assert_ledger_invariant().await;
}

async fn same_key_and_body_replays_the_stored_response(app: TestApp) {
    let alice = app.customer("1000.00").await;
    let first = app.post_withdrawal(&alice, "key-1", &withdrawal_body("125.50")).send().await.unwrap();
    assert_eq!(first.status(), 201);
    let first_body = first.text().await.unwrap();

    // "125.5" means the same amount as "125.50": the same request.
    let again = app.post_withdrawal(&alice, "key-1", &withdrawal_body("125.5")).send().await.unwrap();

    assert_eq!(again.status(), 201);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.text().await.unwrap(), first_body);
    assert_eq!(store::count_for_account(&app.db, alice.account_id).await.unwrap(), 1);
    assert_eq!(app.usd_balance(&alice).await.1, "125.50", "held once");
    app.assert_ledger_invariant().await;
}

async fn same_key_with_a_different_body_is_rejected_as_reused(app: TestApp) {
    let alice = app.customer("1000.00").await;
    assert_eq!(app.post_withdrawal(&alice, "key-1", &withdrawal_body("125.50")).send().await.unwrap().status(), 201);

    let response = app.post_withdrawal(&alice, "key-1", &withdrawal_body("99.00")).send().await.unwrap();

    let (status, code, _) = problem_code(response).await;
    assert_eq!((status, code.as_str()), (422, "idempotency_key_reused"));
    assert_eq!(store::count_for_account(&app.db, alice.account_id).await.unwrap(), 1);
}

async fn missing_idempotency_key_is_a_400(app: TestApp) {
    let alice = app.customer("1000.00").await;

    let response = app
        .client
        .post(app.url("/v1/withdrawals"))
        .bearer_auth(&alice.api_key)
        .json(&withdrawal_body("10.00"))
        .send()
        .await
        .unwrap();

    let (status, code, body) = problem_code(response).await;
    assert_eq!((status, code.as_str()), (400, "idempotency_key_missing"));
    assert_eq!(body.field.as_deref(), Some("Idempotency-Key"));
    assert_eq!(store::count_for_account(&app.db, alice.account_id).await.unwrap(), 0);
}

async fn keys_are_scoped_per_account(app: TestApp) {
    let alice = app.customer("1000.00").await;
    let bob = app.customer("1000.00").await;

    let a = app.post_withdrawal(&alice, "shared-key", &withdrawal_body("10.00")).send().await.unwrap();
    let b = app.post_withdrawal(&bob, "shared-key", &withdrawal_body("20.00")).send().await.unwrap();

    assert_eq!((a.status(), b.status()), (reqwest::StatusCode::CREATED, reqwest::StatusCode::CREATED));
    assert!(b.headers().get("idempotent-replayed").is_none());
    assert_eq!(app.usd_balance(&bob).await.1, "20.00");
}

async fn a_request_whose_key_is_in_flight_gets_a_409(app: TestApp) {
    let alice = app.customer("1000.00").await;
    let key = IdempotencyKey::parse("busy-key").unwrap();
    // Another request with the same key and body holds the claim: phase one done, creation running.
    let claim =
        idempotency::begin(&app.db, alice.account_id, &key, &fingerprint_of("10.00"), IdempotencySettings::default())
            .await
            .unwrap();
    assert!(matches!(claim, Begin::Proceed(_)));

    let response = app.post_withdrawal(&alice, "busy-key", &withdrawal_body("10.00")).send().await.unwrap();
    let (status, code, _) = problem_code(response).await;
    assert_eq!((status, code.as_str()), (409, "idempotency_request_in_progress"));

    // A different body under the same key is a reuse, in flight or not.
    let response = app.post_withdrawal(&alice, "busy-key", &withdrawal_body("99.00")).send().await.unwrap();
    let (status, code, _) = problem_code(response).await;
    assert_eq!((status, code.as_str()), (422, "idempotency_key_reused"));
    assert_eq!(store::count_for_account(&app.db, alice.account_id).await.unwrap(), 0);
    assert_eq!(app.usd_balance(&alice).await.1, "0.00", "nothing held");
}

/// The fingerprint the server computes for `withdrawal_body(amount)`.
fn fingerprint_of(amount: &str) -> Vec<u8> {
    withdrawals::http::request_fingerprint(&withdrawal_body(amount)).expect("a valid request")
}

async fn a_rejected_request_frees_its_key_for_a_retry(app: TestApp) {
    let alice = app.customer("5.00").await;

    let response = app.post_withdrawal(&alice, "key-1", &withdrawal_body("10.00")).send().await.unwrap();
    let (status, code, _) = problem_code(response).await;
    assert_eq!((status, code.as_str()), (422, "insufficient_funds"));

    withdrawals::provisioning::fund_account(
        &app.db,
        alice.account_id,
        withdrawals::domain::Amount::new(rust_decimal::Decimal::from(20), "USD".parse().unwrap()).unwrap(),
    )
    .await
    .unwrap();
    let retry = app.post_withdrawal(&alice, "key-1", &withdrawal_body("10.00")).send().await.unwrap();

    assert_eq!(retry.status(), 201, "nothing was created the first time, so the key is free");
    assert_eq!(app.usd_balance(&alice).await, ("15.00".into(), "10.00".into(), "0.00".into()));
    app.assert_ledger_invariant().await;
}

async fn an_abandoned_claim_is_taken_over_after_the_lock_timeout(app: TestApp) {
    let alice = app.customer("100.00").await;
    let key = IdempotencyKey::parse("crashed-key").unwrap();
    let fingerprint = fingerprint_of("10.00");
    let no_wait = IdempotencySettings { lock_timeout: chrono::TimeDelta::zero(), ..IdempotencySettings::default() };
    // A request claimed the key and died before its creation transaction committed.
    let dead = idempotency::begin(&app.db, alice.account_id, &key, &fingerprint, no_wait).await.unwrap();
    let Begin::Proceed(dead_claim) = dead else { panic!("first claim must proceed") };

    let taken = idempotency::begin(&app.db, alice.account_id, &key, &fingerprint, no_wait).await.unwrap();

    assert!(matches!(taken, Begin::Proceed(_)), "an expired claim is taken over: {taken:?}");
    // The dead request's late completion is fenced off.
    let mut tx = app.db.begin().await.unwrap();
    let fenced = idempotency::complete(&mut tx, &key, dead_claim, 201, b"{}", Some(WithdrawalId::new())).await.unwrap();
    assert!(!fenced, "the old claim can no longer store a response");
}

async fn twenty_concurrent_requests_with_one_key_create_exactly_one_withdrawal(app: TestApp) {
    let alice = app.customer("1000.00").await;
    let body = withdrawal_body("50.00");

    let responses =
        join_all((0..20).map(|_| async { app.post_withdrawal(&alice, "same-key", &body).send().await.unwrap() })).await;

    let mut created = Vec::new();
    let mut replayed = Vec::new();
    let mut in_progress = 0;
    for response in responses {
        match (response.status().as_u16(), response.headers().contains_key("idempotent-replayed")) {
            (201, false) => created.push(response.json::<Value>().await.unwrap()),
            (201, true) => replayed.push(response.json::<Value>().await.unwrap()),
            (409, _) => {
                let (_, code, _) = problem_code(response).await;
                assert_eq!(code, "idempotency_request_in_progress");
                in_progress += 1;
            }
            (status, _) => panic!("unexpected status {status}"),
        }
    }
    assert_eq!(created.len(), 1, "exactly one request creates");
    assert_eq!(created.len() + replayed.len() + in_progress, 20);
    assert!(replayed.iter().all(|r| r["id"] == created[0]["id"]), "replays return the one withdrawal");
    assert_eq!(store::count_for_account(&app.db, alice.account_id).await.unwrap(), 1);
    assert_eq!(app.usd_balance(&alice).await, ("950.00".into(), "50.00".into(), "0.00".into()));
    app.assert_ledger_invariant().await;
}

async fn a_key_past_its_retention_is_forgotten_and_purged(app: TestApp) {
    let alice = app.customer("100.00").await;
    let expired = IdempotencySettings { retention: chrono::TimeDelta::zero(), ..IdempotencySettings::default() };
    // Five completed records whose retention is already over, one still in progress (its
    // request may still be running) and one within its retention: only the five go.
    for (name, settings, complete) in [
        ("old-key", expired, true),
        ("old-1", expired, true),
        ("old-2", expired, true),
        ("old-3", expired, true),
        ("old-4", expired, true),
        ("running", expired, false),
        ("young", IdempotencySettings::default(), true),
    ] {
        let key = IdempotencyKey::parse(name).unwrap();
        let Begin::Proceed(claim) =
            idempotency::begin(&app.db, alice.account_id, &key, &fingerprint_of("10.00"), settings).await.unwrap()
        else {
            panic!("first use proceeds")
        };
        if complete {
            let mut tx = app.db.begin().await.unwrap();
            assert!(idempotency::complete(&mut tx, &key, claim, 201, b"{}", None).await.unwrap());
            tx.commit().await.unwrap();
        }
    }

    // In batches of two: three small transactions, all five expired records gone.
    let purged = idempotency::purge_expired(&app.db, 2).await.unwrap();
    assert_eq!(idempotency::purge_expired(&app.db, 2).await.unwrap(), 0, "nothing left to purge");
    let young = IdempotencyKey::parse("young").unwrap();
    let kept = idempotency::begin(&app.db, alice.account_id, &young, &fingerprint_of("10.00"), expired).await.unwrap();
    assert_eq!(kept, Begin::Replay { status: 201, body: b"{}".to_vec() }, "a record within its retention stays");
    let reused = app.post_withdrawal(&alice, "old-key", &withdrawal_body("20.00")).send().await.unwrap();

    assert_eq!(purged, 5);
    assert_eq!(reused.status(), 201, "an expired key is a new key");
    assert!(reused.headers().get("idempotent-replayed").is_none());
}

/// A retry that finds a stale claim must not overwrite it if the first request completes while
/// the retry decides (it would create a second withdrawal and pay twice).
async fn a_takeover_never_overwrites_a_claim_that_completed_meanwhile(app: TestApp) {
    let alice = app.customer("100.00").await;
    let key = IdempotencyKey::parse("racy-key").unwrap();
    let fingerprint = fingerprint_of("10.00");
    let no_wait = IdempotencySettings { lock_timeout: chrono::TimeDelta::zero(), ..IdempotencySettings::default() };
    let Begin::Proceed(first) =
        idempotency::begin(&app.db, alice.account_id, &key, &fingerprint, no_wait).await.unwrap()
    else {
        panic!("first claim proceeds")
    };
    // The first request is completing: its transaction has stored the response, not yet committed.
    let mut tx = app.db.begin().await.unwrap();
    assert!(idempotency::complete(&mut tx, &key, first, 201, b"{\"first\":true}", None).await.unwrap());

    let db = app.db.clone();
    let (account, retry_key, retry_fingerprint) = (alice.account_id, key.clone(), fingerprint.clone());
    let retry =
        tokio::spawn(async move { idempotency::begin(&db, account, &retry_key, &retry_fingerprint, no_wait).await });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await; // the retry is now waiting or deciding
    tx.commit().await.unwrap();
    let decided = retry.await.unwrap().unwrap();

    assert!(!matches!(decided, Begin::Proceed(_)), "a completed claim was taken over: {decided:?}");
    let again = idempotency::begin(&app.db, alice.account_id, &key, &fingerprint, no_wait).await.unwrap();
    assert_eq!(again, Begin::Replay { status: 201, body: b"{\"first\":true}".to_vec() });
}

async fn a_replay_is_answered_from_its_record_even_when_the_balance_no_longer_covers_it(app: TestApp) {
    let alice = app.customer("100.00").await;
    let first = app.post_withdrawal(&alice, "key-1", &withdrawal_body("60.00")).send().await.unwrap();
    assert_eq!(first.status(), 201);
    let first_body = first.text().await.unwrap();
    assert_eq!(app.usd_balance(&alice).await.0, "40.00");

    // A new key's create runs its hold and its key record in one statement: the retry's hold
    // fails (40.00 < 60.00), but the key is known, and a known key answers from its record.
    let again = app.post_withdrawal(&alice, "key-1", &withdrawal_body("60.00")).send().await.unwrap();

    assert_eq!(again.status(), 201, "a replay, not insufficient_funds");
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.text().await.unwrap(), first_body);
    assert_eq!(store::count_for_account(&app.db, alice.account_id).await.unwrap(), 1);
    assert_eq!(app.usd_balance(&alice).await, ("40.00".into(), "60.00".into(), "0.00".into()));
    app.assert_ledger_invariant().await;
}
