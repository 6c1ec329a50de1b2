//! Issue 30 (SPEC §15): the provider's signed events. The route checks the signature, the
//! timestamp and the body, stores the event and answers at once; a job decides on the provider's
//! own record (the stateful mock, over HTTP), so a forged, replayed, stale or out-of-order event
//! changes nothing, and a true one moves the withdrawal once, through the guarded transitions.
//! Several providers (SPEC §16): each has its own route and secrets, its events are stored under
//! its name and decided by asking it, and its event ids are its own.

use std::time::Duration;

use provider_contract::webhook::{header_value, PROVIDER_SIGNATURE_HEADER};
use provider_mocks::{FaultConfig, FaultEffect, FaultRule, RouteMatch, Settlement, SettlementMode};
use serde_json::{json, Value};
use sqlx::Connection;
use withdrawals::domain::{WebhookEventId, WebhookResult, WithdrawalId, WithdrawalStatus};
use withdrawals::ops::types::{Page, WebhookEventView};
use withdrawals::provider::{Gateways, LookupOutcome};
use withdrawals::storage::webhooks::{self as store, EventFilter, EventRow};
use withdrawals::storage::withdrawals as withdrawal_store;

use crate::harness::{
    fresh_database, problem_code, provider_mock, serve_extra_with, sql_id, test_config, worker_config, Backend,
    Customer, ProviderHarness, TestApp,
};
use crate::ops::cli;
use crate::{both_backends, on_connection};

both_backends!(
    with = webhook_app;
    a_valid_event_is_applied_once_on_the_providers_record,
    refused_requests_store_and_apply_nothing,
    a_rotated_second_secret_is_accepted,
    a_paid_after_failed_never_revives_the_withdrawal,
    a_well_signed_event_the_record_contradicts_moves_no_money,
    a_returned_event_re_credits_exactly_once,
    a_webhook_and_a_poll_racing_make_one_transition,
    an_event_for_a_transfer_we_do_not_know_is_an_exception,
    operators_read_each_event_and_what_it_came_to,
    with_webhooks_healthy_the_event_decides_and_polling_waits,
    a_returned_event_for_an_open_withdrawal_completes_and_credits_it_once,
    each_providers_events_come_to_its_own_route_and_are_decided_by_asking_it,
    event_ids_are_unique_per_provider_and_operators_filter_by_provider,
    an_event_from_a_provider_the_withdrawal_is_not_at_moves_no_money,
);

const WAIT: Duration = Duration::from_secs(25);
const SECRET: &str = "whsec_current_0123456789";
const OLD_SECRET: &str = "whsec_previous_0123456789";

/// An app that accepts events signed with either secret (a rotation in progress).
async fn webhook_app(backend: Backend) -> TestApp {
    let mut config = test_config();
    config.webhooks.secrets = withdrawals::config::WebhookSettings::secrets_from(&format!("{SECRET},{OLD_SECRET}"));
    config.webhooks.max_body_bytes = 4 * 1024;
    TestApp::spawn_with(backend, config).await
}

/// A worker that never polls a pending transfer within a test: only an event can decide it.
fn patient_worker(app: &TestApp) -> tokio_util::sync::CancellationToken {
    let mut config = worker_config("w-webhooks");
    config.pending_poll = Duration::from_secs(600);
    config.reconcile_policy.base_delay = Duration::from_secs(600);
    config.reconcile_policy.max_delay = Duration::from_secs(600);
    app.start_worker(app.gateway.clone(), config)
}

/// The provider's record of a withdrawal's transfer, as its API shows it.
async fn provider_transfer(app: &TestApp, id: WithdrawalId) -> Value {
    match app.provider.provider.lookup(&id.to_string(), "webhook-test").await {
        LookupOutcome::Found(transfers) => serde_json::to_value(&transfers[0]).unwrap(),
        other => panic!("the provider has no transfer for {id}: {other:?}"),
    }
}

fn event(event_id: &str, kind: &str, transfer: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"id": event_id, "type": kind, "created_at": chrono::Utc::now(), "data": transfer}))
        .unwrap()
}

/// POSTs `body` with the signature header `signature` (none when `None`).
async fn post_raw(app: &TestApp, body: Vec<u8>, signature: Option<String>) -> reqwest::Response {
    let mut request =
        app.client.post(app.url("/webhooks/provider")).header("content-type", "application/json").body(body);
    if let Some(signature) = signature {
        request = request.header(PROVIDER_SIGNATURE_HEADER, signature);
    }
    request.send().await.unwrap()
}

/// POSTs `body` signed now with `secret`, as the provider does.
async fn deliver(app: &TestApp, body: Vec<u8>, secret: &str) -> reqwest::Response {
    let signature = header_value(&[secret], chrono::Utc::now().timestamp(), &body);
    post_raw(app, body, Some(signature)).await
}

/// The event stored under `event_id`, once its job has decided it.
async fn decided(app: &TestApp, event_id: &str) -> EventRow {
    app.eventually("the event decided", WAIT, || async {
        store::by_event_id(&app.db, "default", event_id).await.unwrap().filter(|e| e.result.is_some())
    })
    .await
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    on_connection!(&app.database_url, |conn| sqlx::query_scalar::<_, i64>(sql).fetch_one(&mut conn).await.unwrap())
}

/// A withdrawal in `processing` whose transfer the provider holds `pending`, decided by nothing
/// but an event (the worker's polls are minutes away).
async fn pending_at_provider(app: &TestApp, customer: &Customer, key: &str) -> WithdrawalId {
    let id = app.create_withdrawal(customer, key, "40.00").await;
    app.eventually("the transfer at the provider", WAIT, || async {
        app.provider.mock.transfers().into_iter().any(|t| t.idempotency_key == id.to_string()).then_some(())
    })
    .await;
    app.wait_for_status(id, WithdrawalStatus::Processing, WAIT).await;
    id
}

/// [`pending_at_provider`], then the provider's record once the transfer reaches `status`.
async fn settled_at_provider(app: &TestApp, customer: &Customer, key: &str, status: &str) -> (WithdrawalId, Value) {
    let id = pending_at_provider(app, customer, key).await;
    let transfer = app
        .eventually("the provider's record settled", WAIT, || async {
            let t = provider_transfer(app, id).await;
            (t["status"] == status).then_some(t)
        })
        .await;
    (id, transfer)
}

fn async_settlement(delay_ms: u64, fail_ratio: f64) -> Settlement {
    Settlement { mode: SettlementMode::Async, delay_ms, fail_ratio }
}

async fn a_valid_event_is_applied_once_on_the_providers_record(app: TestApp) {
    app.provider.mock.set_settlement(async_settlement(200, 0.0));
    let _worker = patient_worker(&app).drop_guard();
    let alice = app.customer("100.00").await;
    let (id, transfer) = settled_at_provider(&app, &alice, "k-paid", "paid").await;

    // First, the right status with another amount: the record confirms `paid`, not this event.
    let mut other_amount = transfer.clone();
    other_amount["amount"] = json!("39.00");
    assert_eq!(deliver(&app, event("evt_amount", "transfer.paid", &other_amount), SECRET).await.status(), 202);
    let refused = decided(&app, "evt_amount").await;
    assert_eq!(refused.result, Some(WebhookResult::Mismatch), "{refused:?}");
    assert_eq!(refused.detail.as_deref(), Some("the event's transfer differs from the provider's record in amount"));
    let still = withdrawal_store::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!(still.status, WithdrawalStatus::Processing, "no money moved on another amount");

    let body = event("evt_paid_1", "transfer.paid", &transfer);
    let accepted = deliver(&app, body.clone(), SECRET).await;
    assert_eq!(accepted.status(), 202);
    assert_eq!(accepted.json::<Value>().await.unwrap(), json!({"status": "accepted"}));
    let stored = decided(&app, "evt_paid_1").await;
    assert_eq!(stored.result, Some(WebhookResult::Applied), "{stored:?}");
    assert_eq!(stored.provider, "default", "the bare route is the default provider's");
    assert_eq!(store::body(&app.db, stored.id).await.unwrap().unwrap(), body, "the raw body, byte for byte");
    assert!(stored.headers.0.get("provider-signature").is_some(), "{:?}", stored.headers);
    let done = app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    let attempts = withdrawals::storage::attempts::for_withdrawal(&app.db, done.key()).await.unwrap();
    assert!(attempts.iter().all(|a| a.provider == "default"), "a lone provider is `default`: {attempts:?}");
    let history = withdrawal_store::transitions(&app.db, done.key()).await.unwrap();
    let last = history.last().unwrap();
    assert_eq!((last.actor.as_str(), last.to_status), ("webhook", WithdrawalStatus::Completed));
    let evidence = &last.evidence.as_ref().expect("the decision's evidence").0;
    assert_eq!(evidence["source"], "provider_webhook");
    assert_eq!(evidence["verdict"], "paid", "the provider's answer: {evidence}");
    assert_eq!(evidence["event"]["event_id"], "evt_paid_1", "the event beside it: {evidence}");
    assert_eq!(evidence["event"]["data"]["id"], transfer["id"]);

    // The same event again (the provider retrying): 200, nothing stored or moved.
    let again = deliver(&app, body, SECRET).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.json::<Value>().await.unwrap(), json!({"status": "duplicate"}));
    assert_eq!(count(&app, "SELECT COUNT(*) FROM webhook_events").await, 2);
    let after = withdrawal_store::transitions(&app.db, done.key()).await.unwrap();
    assert_eq!(after.len(), history.len(), "no second transition");
    assert_eq!(app.usd_balance(&alice).await, ("60.00".into(), "0.00".into(), "40.00".into()));
    app.assert_ledger_invariant().await;
}

async fn refused_requests_store_and_apply_nothing(app: TestApp) {
    app.provider.mock.set_settlement(async_settlement(100, 0.0));
    let _worker = patient_worker(&app).drop_guard();
    let alice = app.customer("100.00").await;
    let (id, transfer) = settled_at_provider(&app, &alice, "k-refused", "paid").await;
    let body = event("evt_refused", "transfer.paid", &transfer);
    let now = chrono::Utc::now().timestamp();
    let valid = header_value(&[SECRET], now, &body);
    let signature_of = |secret: &str, t: i64| header_value(&[secret], t, &body);
    let digest = valid.split("v1=").nth(1).unwrap().to_owned();
    let cases: Vec<(&str, Vec<u8>, Option<String>, &str)> = vec![
        ("no header", body.clone(), None, "webhook_signature_invalid"),
        ("a wrong secret", body.clone(), Some(signature_of("whsec_someone_else", now)), "webhook_signature_invalid"),
        (
            "another body",
            event("evt_refused", "transfer.failed", &transfer),
            Some(valid.clone()),
            "webhook_signature_invalid",
        ),
        ("no timestamp", body.clone(), Some(format!("v1={digest}")), "webhook_signature_invalid"),
        ("two timestamps", body.clone(), Some(format!("t={now},t={now},v1={digest}")), "webhook_signature_invalid"),
        ("no v1", body.clone(), Some(format!("t={now},v0={digest}")), "webhook_signature_invalid"),
        ("a short v1", body.clone(), Some(format!("t={now},v1={}", &digest[..40])), "webhook_signature_invalid"),
        ("not key=value", body.clone(), Some("garbage".into()), "webhook_signature_invalid"),
        ("another timestamp", body.clone(), Some(format!("t={},v1={digest}", now - 1)), "webhook_signature_invalid"),
        ("a stale timestamp", body.clone(), Some(signature_of(SECRET, now - 360)), "webhook_timestamp_stale"),
        ("a future timestamp", body.clone(), Some(signature_of(SECRET, now + 360)), "webhook_timestamp_stale"),
    ];
    for (what, body, signature, code) in cases {
        let response = post_raw(&app, body, signature).await;
        let (status, got, problem) = problem_code(response).await;
        assert_eq!((status, got.as_str()), (400, code), "{what}: {problem:?}");
        assert!(!format!("{problem:?}").contains("transfer.paid"), "the body is not echoed: {problem:?}");
    }
    // Validly signed, but not an event; and a body over the limit, refused before it is read.
    let not_event = br#"{"hello": "world"}"#.to_vec();
    let (status, code, _) = problem_code(deliver(&app, not_event, SECRET).await).await;
    assert_eq!((status, code.as_str()), (400, "webhook_malformed"));
    let mut huge = transfer.clone();
    huge["padding"] = Value::String("x".repeat(5 * 1024));
    let (status, code, _) = problem_code(deliver(&app, event("evt_huge", "transfer.paid", &huge), SECRET).await).await;
    assert_eq!((status, code.as_str()), (400, "webhook_malformed"), "over WEBHOOK_MAX_BODY_BYTES");

    assert_eq!(count(&app, "SELECT COUNT(*) FROM webhook_events").await, 0, "nothing stored");
    assert_eq!(count(&app, "SELECT COUNT(*) FROM jobs WHERE kind = 'apply_webhook_event'").await, 0);
    let current = withdrawal_store::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!(current.status, WithdrawalStatus::Processing, "nothing applied");
    // The same body, signed properly, is then taken: the refusals were about the request only.
    assert_eq!(deliver(&app, body, SECRET).await.status(), 202);
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    app.assert_ledger_invariant().await;
}

async fn a_rotated_second_secret_is_accepted(app: TestApp) {
    app.provider.mock.set_settlement(async_settlement(100, 0.0));
    let _worker = patient_worker(&app).drop_guard();
    let alice = app.customer("100.00").await;
    let (id, transfer) = settled_at_provider(&app, &alice, "k-rotated", "paid").await;
    // Signed with the old secret only, and one header carrying a wrong and the new signature.
    assert_eq!(deliver(&app, event("evt_old", "transfer.paid", &transfer), OLD_SECRET).await.status(), 202);
    let body = event("evt_both", "transfer.paid", &transfer);
    let both = header_value(&["whsec_wrong", SECRET], chrono::Utc::now().timestamp(), &body);
    assert_eq!(post_raw(&app, body, Some(both)).await.status(), 202);
    let first = decided(&app, "evt_old").await;
    let second = decided(&app, "evt_both").await;
    let mut results = [first.result.unwrap(), second.result.unwrap()];
    results.sort();
    assert_eq!(results, [WebhookResult::Applied, WebhookResult::NoOp], "one moved it, the other found it done");
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    app.assert_ledger_invariant().await;
}

async fn a_paid_after_failed_never_revives_the_withdrawal(app: TestApp) {
    app.provider.mock.set_settlement(async_settlement(100, 1.0));
    let _worker = patient_worker(&app).drop_guard();
    let alice = app.customer("100.00").await;
    let (id, failed) = settled_at_provider(&app, &alice, "k-failed", "failed").await;
    assert_eq!(deliver(&app, event("evt_failed", "transfer.failed", &failed), SECRET).await.status(), 202);
    assert_eq!(decided(&app, "evt_failed").await.result, Some(WebhookResult::Applied));
    app.wait_for_status(id, WithdrawalStatus::Failed, WAIT).await;
    assert_eq!(app.usd_balance(&alice).await, ("100.00".into(), "0.00".into(), "0.00".into()), "hold released");

    // A `paid` for the same transfer, arriving late (or forged): the record says failed.
    let mut paid = failed.clone();
    paid["status"] = json!("paid");
    paid["failure_code"] = Value::Null;
    assert_eq!(deliver(&app, event("evt_paid_late", "transfer.paid", &paid), SECRET).await.status(), 202);
    let late = decided(&app, "evt_paid_late").await;
    assert_eq!(late.result, Some(WebhookResult::Mismatch), "{late:?}");
    assert!(late.detail.as_deref().unwrap().contains("the provider's record says failed"), "{late:?}");
    let current = withdrawal_store::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!(current.status, WithdrawalStatus::Failed);
    assert_eq!(app.usd_balance(&alice).await, ("100.00".into(), "0.00".into(), "0.00".into()), "nothing moved");
    app.assert_ledger_invariant().await;
}

async fn a_well_signed_event_the_record_contradicts_moves_no_money(app: TestApp) {
    app.provider.mock.set_settlement(async_settlement(600_000, 0.0));
    let _worker = patient_worker(&app).drop_guard();
    let alice = app.customer("100.00").await;
    let id = pending_at_provider(&app, &alice, "k-forged").await;
    let record = provider_transfer(&app, id).await;
    assert_eq!(record["status"], "pending");
    // Signed with our secret (a leaked one, or a confused provider): says paid; the record does not.
    let mut forged = record.clone();
    forged["status"] = json!("paid");
    assert_eq!(deliver(&app, event("evt_forged", "transfer.paid", &forged), SECRET).await.status(), 202);
    let stored = decided(&app, "evt_forged").await;
    assert_eq!(stored.result, Some(WebhookResult::Mismatch), "{stored:?}");
    assert_eq!(stored.detail.as_deref(), Some("the event says paid; the provider's record says pending"));
    assert_eq!(stored.provider_record.as_ref().unwrap().0["verdict"], "pending", "the record it rested on");
    // Another amount, status matching nothing we hold either.
    let mut other_amount = record.clone();
    other_amount["amount"] = json!("39.00");
    assert_eq!(deliver(&app, event("evt_amount", "transfer.paid", &other_amount), SECRET).await.status(), 202);
    assert_eq!(decided(&app, "evt_amount").await.result, Some(WebhookResult::Mismatch));

    let current = withdrawal_store::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!(current.status, WithdrawalStatus::Processing, "no money moved");
    assert_eq!(app.usd_balance(&alice).await, ("60.00".into(), "40.00".into(), "0.00".into()));
    app.assert_ledger_invariant().await;
}

async fn a_returned_event_re_credits_exactly_once(app: TestApp) {
    let _worker = patient_worker(&app).drop_guard();
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k-returned", "25.50").await;
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    assert_eq!(app.usd_balance(&alice).await, ("74.50".into(), "0.00".into(), "25.50".into()));
    // Before the bank returns it, a `returned` event is contradicted by the record.
    let paid = provider_transfer(&app, id).await;
    let mut early = paid.clone();
    early["status"] = json!("returned");
    assert_eq!(deliver(&app, event("evt_returned_early", "transfer.returned", &early), SECRET).await.status(), 202);
    assert_eq!(decided(&app, "evt_returned_early").await.result, Some(WebhookResult::Mismatch));
    assert_eq!(app.usd_balance(&alice).await, ("74.50".into(), "0.00".into(), "25.50".into()));

    assert!(app.provider.mock.return_transfer(&id.to_string(), "R01"));
    let returned = provider_transfer(&app, id).await;
    assert_eq!(returned["status"], "returned");
    assert_eq!(deliver(&app, event("evt_returned", "transfer.returned", &returned), SECRET).await.status(), 202);
    assert_eq!(decided(&app, "evt_returned").await.result, Some(WebhookResult::Applied));
    assert_eq!(app.usd_balance(&alice).await, ("100.00".into(), "0.00".into(), "0.00".into()), "re-credited");
    // The provider sends it again under a new event id, and a late `paid` arrives after it.
    assert_eq!(deliver(&app, event("evt_returned_2", "transfer.returned", &returned), SECRET).await.status(), 202);
    assert_eq!(deliver(&app, event("evt_paid_after", "transfer.paid", &paid), SECRET).await.status(), 202);
    let again = decided(&app, "evt_returned_2").await;
    assert_eq!(
        (again.result, again.detail.as_deref()),
        (Some(WebhookResult::NoOp), Some("the return was credited before"))
    );
    let late = decided(&app, "evt_paid_after").await;
    assert_eq!(late.result, Some(WebhookResult::NoOp), "{late:?}");
    assert_eq!(app.usd_balance(&alice).await, ("100.00".into(), "0.00".into(), "0.00".into()), "exactly once");
    let key = app.key(id).await;
    assert_eq!(withdrawal_store::find(&app.db, id).await.unwrap().unwrap().status, WithdrawalStatus::Completed);
    let returns = format!("SELECT COUNT(*) FROM payout_returns WHERE account_id = {}", sql_id(&app, key.account.0));
    assert_eq!(count(&app, &returns).await, 1);
    app.assert_ledger_invariant().await;
}

async fn a_webhook_and_a_poll_racing_make_one_transition(app: TestApp) {
    app.provider.mock.set_settlement(async_settlement(100, 0.0));
    let worker = patient_worker(&app);
    let alice = app.customer("100.00").await;
    let (id, transfer) = settled_at_provider(&app, &alice, "k-race", "paid").await;
    worker.cancel();
    // The poll due now and the event arrive together; two workers take them at once.
    let key = app.key(id).await;
    app.execute_raw(&format!(
        "UPDATE jobs SET run_at = created_at WHERE withdrawal_id = {} AND kind = 'reconcile_payout' AND status = 'scheduled'",
        sql_id(&app, id.0)
    ))
    .await;
    assert_eq!(deliver(&app, event("evt_race", "transfer.paid", &transfer), SECRET).await.status(), 202);
    let _a = app.start_worker(app.gateway.clone(), worker_config("w-race-a")).drop_guard();
    let _b = app.start_worker(app.gateway.clone(), worker_config("w-race-b")).drop_guard();
    decided(&app, "evt_race").await;
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    app.eventually("the poll done", WAIT, || async {
        let live = count(
            &app,
            &format!(
                "SELECT COUNT(*) FROM jobs WHERE withdrawal_id = {} AND status IN ('scheduled', 'running')",
                sql_id(&app, id.0)
            ),
        )
        .await;
        (live == 0).then_some(())
    })
    .await;
    let history = withdrawal_store::transitions(&app.db, key).await.unwrap();
    let completions: Vec<_> = history.iter().filter(|t| t.to_status == WithdrawalStatus::Completed).collect();
    assert_eq!(completions.len(), 1, "one transition: {history:?}");
    // The event says which side won: `applied` if it moved the withdrawal, `no_op` if the poll did.
    let raced = decided(&app, "evt_race").await;
    let expected = match completions[0].actor.as_str() {
        "webhook" => WebhookResult::Applied,
        "reconciliation" => WebhookResult::NoOp,
        other => panic!("completed by {other}"),
    };
    assert_eq!(raced.result, Some(expected), "{raced:?} / {history:?}");
    assert_eq!(app.usd_balance(&alice).await, ("60.00".into(), "0.00".into(), "40.00".into()));
    app.assert_ledger_invariant().await;
}

async fn an_event_for_a_transfer_we_do_not_know_is_an_exception(app: TestApp) {
    let _worker = patient_worker(&app).drop_guard();
    // A transfer someone made at the provider under a key that is no withdrawal of ours.
    let stranger = uuid::Uuid::new_v4().to_string();
    let created = app
        .client
        .post(format!("{}/v1/transfers", app.provider.mock.url()))
        .bearer_auth("test-provider-key")
        .header("Idempotency-Key", &stranger)
        .json(&json!({"reference": stranger, "amount": "12.00", "currency": "USD",
                      "destination": {"type": "bank_account", "account_number": "12345678", "bank_code": "021000021"}}))
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success(), "{}", created.text().await.unwrap());
    let transfer: Value = created.json().await.unwrap();
    assert_eq!(deliver(&app, event("evt_stranger", "transfer.paid", &transfer), SECRET).await.status(), 202);
    let stored = decided(&app, "evt_stranger").await;
    assert_eq!(stored.result, Some(WebhookResult::UnknownTransfer), "{stored:?}");
    let exceptions = count(
        &app,
        &format!(
            "SELECT COUNT(*) FROM settlement_exceptions WHERE kind = 'unknown_transfer' AND transfer_id = '{}'",
            transfer["id"].as_str().unwrap()
        ),
    )
    .await;
    assert_eq!(exceptions, 1, "one exception for operators");
    // A transfer the provider does not show at all: forged, nothing opened.
    let forged = json!({"id": "tr_forged", "reference": uuid::Uuid::new_v4().to_string(), "amount": "5.00", "currency": "USD", "status": "paid"});
    assert_eq!(deliver(&app, event("evt_nobody", "transfer.paid", &forged), SECRET).await.status(), 202);
    let nobody = decided(&app, "evt_nobody").await;
    assert_eq!(
        (nobody.result, nobody.detail.as_deref()),
        (Some(WebhookResult::Mismatch), Some("the provider shows no such transfer"))
    );
    assert_eq!(count(&app, "SELECT COUNT(*) FROM settlement_exceptions").await, 1);
    // An event of a type the service does not handle is taken and recorded, nothing more.
    let other = deliver(&app, event("evt_other", "transfer.created", &transfer), SECRET).await;
    assert_eq!(other.status(), 200);
    let ignored = store::by_event_id(&app.db, "default", "evt_other").await.unwrap().unwrap();
    assert_eq!(ignored.result, Some(WebhookResult::NoOp));
}

async fn operators_read_each_event_and_what_it_came_to(app: TestApp) {
    app.provider.mock.set_settlement(async_settlement(600_000, 0.0));
    let _worker = patient_worker(&app).drop_guard();
    let alice = app.customer("100.00").await;
    let id = pending_at_provider(&app, &alice, "k-ops").await;
    let mut forged = provider_transfer(&app, id).await;
    forged["status"] = json!("paid");
    let body = event("evt_ops", "transfer.paid", &forged);
    assert_eq!(deliver(&app, body.clone(), SECRET).await.status(), 202);
    let stored = decided(&app, "evt_ops").await;
    let viewer = app.operator("viewer").await;

    // The ops API: by result, newest first; one event with its raw body and the record.
    let path = "/ops/v1/webhook-events?result=mismatch";
    let page: withdrawals::ops::types::Page<WebhookEventView> = app.ops_get(&viewer, path).await;
    assert_eq!(page.data.len(), 1, "{page:?}");
    assert_eq!((page.data[0].event_id.as_str(), page.data[0].result.as_str()), ("evt_ops", "mismatch"));
    assert_eq!(page.data[0].withdrawal_id, Some(id.0));
    let none: withdrawals::ops::types::Page<WebhookEventView> =
        app.ops_get(&viewer, "/ops/v1/webhook-events?result=applied").await;
    assert!(none.data.is_empty());
    let shown: WebhookEventView = app.ops_get(&viewer, &format!("/ops/v1/webhook-events/{}", stored.id)).await;
    let raw = String::from_utf8(body.clone()).unwrap();
    assert_eq!(shown.body, Some(withdrawals::redact::text(&raw)), "the body, redacted for display");
    assert_eq!(shown.provider_record.as_ref().unwrap()["verdict"], "pending");
    let bad = app.client.get(app.url("/ops/v1/webhook-events?result=maybe")).bearer_auth(&viewer).send().await.unwrap();
    assert_eq!(problem_code(bad).await.1, "invalid_result");
    let anonymous = app.client.get(app.url("/ops/v1/webhook-events")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);

    // The CLI, through the same route.
    let listed = cli(&app, &viewer, &["webhooks", "list", "--result", "mismatch"]);
    let table = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    assert!(table.contains(&stored.id.to_string()) && table.contains("mismatch"), "{table}");
    assert!(table.contains(" default "), "the provider column: {table}");
    let show = cli(&app, &viewer, &["webhooks", "show", &stored.id.to_string()]);
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(text.contains("evt_ops") && text.contains("\"verdict\": \"pending\""), "{text}");
    assert!(text.contains("provider:    default"), "{text}");
    let refused = cli(&app, &viewer, &["webhooks", "show", "not-an-id"]);
    assert!(!refused.status.success());
    assert_eq!(String::from_utf8_lossy(&refused.stderr).trim().lines().count(), 1, "one line");
}

/// The provider's own events, end to end: the mock sends a signed event when a transfer settles.
/// While events arrive, a pending transfer is polled every ten minutes, and its event completes it
/// within seconds of the settle; when events stop, polling returns to its own pace by itself.
async fn with_webhooks_healthy_the_event_decides_and_polling_waits(app: TestApp) {
    let url = app.url("/webhooks/provider");
    let settings =
        provider_mocks::WebhookSettings { url: Some(url), secrets: vec![SECRET.into()], ..Default::default() };
    app.provider.mock.set_webhooks(settings).unwrap();
    let mut config = worker_config("w-healthy");
    config.pending_poll = Duration::from_millis(50);
    config.webhook_healthy_within = Duration::from_secs(3600);
    config.pending_poll_with_webhooks = Duration::from_secs(600);
    // A window longer than the slow pace (the pace never outlasts what is left of the window).
    config.reconcile_policy.max_elapsed = Duration::from_secs(3600);
    let first_worker = app.start_worker(app.gateway.clone(), config.clone());
    let alice = app.customer("100.00").await;

    // A first payout, paid at once: its event makes webhooks healthy.
    let warm = app.create_withdrawal(&alice, "k-warm", "10.00").await;
    app.wait_for_status(warm, WithdrawalStatus::Completed, WAIT).await;
    app.eventually("the first event stored", WAIT, || async { store::last_received_at(&app.db).await.unwrap() }).await;

    // A pending one: polled once, then not again for ten minutes.
    // Settled well after its first poll, even on a loaded machine.
    app.provider.mock.set_settlement(async_settlement(4_000, 0.0));
    let id = app.create_withdrawal(&alice, "k-slow", "40.00").await;
    let key = app.key(id).await;
    let deferred = app
        .eventually("the pending poll deferred", WAIT, || async {
            let jobs = withdrawals::storage::jobs::jobs_for_withdrawal(&app.db, key).await.unwrap();
            jobs.into_iter().find(|j| {
                j.kind == "reconcile_payout"
                    && j.attempts >= 1
                    && j.run_at.0 > chrono::Utc::now() + chrono::TimeDelta::minutes(9)
            })
        })
        .await;
    assert_eq!(deferred.status, withdrawals::domain::JobStatus::Scheduled);
    let asked = withdrawals::storage::reconciliations::for_withdrawal(&app.db, key).await.unwrap();
    assert!(
        !asked.is_empty() && asked.iter().all(|r| r.provider == "default"),
        "results name their provider: {asked:?}"
    );

    // The mock settles it and sends `transfer.paid`: completed by the event, long before any poll.
    let done = app.wait_for_status(id, WithdrawalStatus::Completed, Duration::from_secs(20)).await;
    let history = withdrawal_store::transitions(&app.db, done.key()).await.unwrap();
    assert_eq!(history.last().unwrap().actor, "webhook", "{history:?}");
    // Counted by the channel that decided (this process's recorder, shared by the tests: at least this one).
    let metrics = app.metrics().send().await.unwrap().text().await.unwrap();
    let by_webhook = metrics
        .lines()
        .find_map(|l| l.strip_prefix("reconciliation_decisions_total{source=\"webhook\"} "))
        .and_then(|v| v.parse::<f64>().ok());
    assert!(by_webhook.is_some_and(|n| n >= 1.0), "{by_webhook:?}");
    let delivered = app.provider.mock.webhook_deliveries();
    assert!(
        delivered
            .iter()
            .any(|d| d.event_type == provider_contract::webhook::EventType::TransferPaid && d.status == Some(202)),
        "{delivered:?}"
    );
    first_worker.cancel();

    // Events stop (a worker that counts them healthy for 300 ms only): a pending transfer is
    // polled at the policy's own pace again.
    app.provider.mock.set_settlement(async_settlement(600_000, 0.0));
    config.webhook_healthy_within = Duration::from_millis(300);
    app.eventually("no event for 300 ms", WAIT, || async {
        let last = store::last_received_at(&app.db).await.unwrap().unwrap();
        (last.0 + chrono::TimeDelta::milliseconds(300) < chrono::Utc::now()).then_some(())
    })
    .await;
    let _second = app.start_worker(app.gateway.clone(), config).drop_guard();
    let stuck = app.create_withdrawal(&alice, "k-stuck", "5.00").await;
    let stuck_key = app.key(stuck).await;
    app.eventually("polled again and again", WAIT, || async {
        let jobs = withdrawals::storage::jobs::jobs_for_withdrawal(&app.db, stuck_key).await.unwrap();
        jobs.into_iter().find(|j| j.kind == "reconcile_payout" && j.attempts >= 3)
    })
    .await;
    app.assert_ledger_invariant().await;
}

/// The bank returned it before we learned it was paid: the `returned` event completes the open
/// withdrawal and credits the return in one decision; a poll that completed it first (without
/// crediting: reconciliation never credits) leaves the credit to the event.
async fn a_returned_event_for_an_open_withdrawal_completes_and_credits_it_once(app: TestApp) {
    app.provider.mock.set_settlement(async_settlement(100, 0.0));
    let _worker = patient_worker(&app).drop_guard();
    let alice = app.customer("100.00").await;
    let (open, _) = settled_at_provider(&app, &alice, "k-open-returned", "paid").await;
    let (polled, _) = settled_at_provider(&app, &alice, "k-polled-returned", "paid").await;
    for id in [open, polled] {
        assert!(app.provider.mock.return_transfer(&id.to_string(), "R02"));
    }
    // A poll completed the second one first.
    app.reconcile_completed(polled).await;
    for (event_id, id) in [("evt_open_returned", open), ("evt_polled_returned", polled)] {
        let returned = provider_transfer(&app, id).await;
        assert_eq!(deliver(&app, event(event_id, "transfer.returned", &returned), SECRET).await.status(), 202);
        assert_eq!(decided(&app, event_id).await.result, Some(WebhookResult::Applied), "{event_id}");
        let done = withdrawal_store::find(&app.db, id).await.unwrap().unwrap();
        assert_eq!(done.status, WithdrawalStatus::Completed);
    }
    assert_eq!(app.usd_balance(&alice).await, ("100.00".into(), "0.00".into(), "0.00".into()), "both credited once");
    app.assert_ledger_invariant().await;
}

const ACME_SECRET: &str = "whsec_acme_0123456789";
const BOLT_SECRET: &str = "whsec_bolt_0123456789";

/// A second app on the test's database, configured by a providers file as `serve` reads it, each
/// provider over a mock of its own: `bolt` (USD, first choice) and `acme` (USD after bolt, and
/// EUR), each with its own webhook secrets, and `cash` (EUR only), which has none. No provider is
/// called `default`, and `PROVIDER_WEBHOOK_SECRET` is set too: with a file it signs nothing.
struct Several {
    base_url: String,
    acme: ProviderHarness,
    bolt: ProviderHarness,
    gateways: Gateways,
}

impl Several {
    async fn serve(app: &TestApp) -> Several {
        let (acme, bolt) = (provider_mock(2_000).await, provider_mock(2_000).await);
        let file = json!({"providers": [
            {"name": "acme", "url": acme.mock.url(), "currencies": ["USD", "EUR"], "priority": 2,
             "api_key_env": "KEY", "webhook_secrets_env": "ACME_WEBHOOK_SECRETS"},
            {"name": "bolt", "url": bolt.mock.url(), "currencies": ["USD"], "priority": 1,
             "api_key_env": "KEY", "webhook_secrets_env": "BOLT_WEBHOOK_SECRETS"},
            {"name": "cash", "url": acme.mock.url(), "currencies": ["EUR"], "priority": 1, "api_key_env": "KEY"},
        ]});
        let env = |name: &str| match name {
            "KEY" => Some("test-provider-key".to_owned()),
            "ACME_WEBHOOK_SECRETS" => Some(ACME_SECRET.to_owned()),
            "BOLT_WEBHOOK_SECRETS" => Some(format!("whsec_bolt_retired,{BOLT_SECRET}")),
            _ => None,
        };
        let providers = withdrawals::config::providers::Providers::parse(&file.to_string(), false, &env).unwrap();
        let breaker = withdrawals::provider::breaker::BreakerConfig::default();
        let gateways = withdrawals::startup::gateways_from(
            &providers,
            &breaker,
            Duration::from_millis(300),
            Duration::from_millis(2_000),
        )
        .unwrap();
        let mut config = test_config();
        config.webhooks.secrets = withdrawals::config::WebhookSettings::secrets_from(SECRET);
        config.providers = Some(providers);
        let base_url = serve_extra_with(app, config, gateways.clone()).await;
        Several { base_url, acme, bolt, gateways }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }
}

/// POSTs `body` to `url`, signed now with `secret`.
async fn deliver_at(app: &TestApp, url: &str, body: Vec<u8>, secret: &str) -> reqwest::Response {
    let signature = header_value(&[secret], chrono::Utc::now().timestamp(), &body);
    let request = app.client.post(url).header("content-type", "application/json");
    request.header(PROVIDER_SIGNATURE_HEADER, signature).body(body).send().await.unwrap()
}

/// The value of the `webhook_events_total` sample carrying every one of `labels`, if there is one.
fn webhook_count(metrics: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with(withdrawals::metrics::WEBHOOK_EVENTS) && l.contains('{'))
        .find(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// SPEC §16: bolt's mock sends its own signed event to bolt's route when it pays; the event is
/// stored under bolt and decided by asking bolt (acme never heard of the transfer), which completes
/// the withdrawal. bolt's route refuses the same body signed with acme's secret, and acme's route
/// bolt's. A name that is no provider, a provider without secrets and the bare route of a file
/// with no `default` are one and the same 404, counted under no provider.
async fn each_providers_events_come_to_its_own_route_and_are_decided_by_asking_it(app: TestApp) {
    let several = Several::serve(&app).await;
    let bolt_route = several.url("/webhooks/provider/bolt");
    several.bolt.mock.set_settlement(async_settlement(300, 0.0));
    let sends = provider_mocks::WebhookSettings {
        url: Some(bolt_route.clone()),
        secrets: vec![BOLT_SECRET.into()],
        ..Default::default()
    };
    several.bolt.mock.set_webhooks(sends).unwrap();
    // Only an event decides within the test: the worker's polls are minutes away.
    let mut config = worker_config("w-several-webhooks");
    config.pending_poll = Duration::from_secs(600);
    config.reconcile_policy.base_delay = Duration::from_secs(600);
    config.reconcile_policy.max_delay = Duration::from_secs(600);
    let _worker = app.start_worker(several.gateways.clone(), config).drop_guard();
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k-bolt", "40.00").await;

    let done = app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    let history = withdrawal_store::transitions(&app.db, done.key()).await.unwrap();
    assert_eq!(history.last().unwrap().actor, "webhook", "completed by bolt's event: {history:?}");
    let attempts = withdrawals::storage::attempts::for_withdrawal(&app.db, done.key()).await.unwrap();
    assert!(attempts.iter().all(|a| a.provider == "bolt"), "{attempts:?}");
    assert!(several.acme.mock.transfers().is_empty(), "acme never saw the transfer");
    let events = store::list(&app.db, &EventFilter { limit: 10, ..EventFilter::default() }).await.unwrap();
    let paid = events.iter().find(|e| e.event_type == "transfer.paid").expect("bolt's transfer.paid stored");
    assert!(events.iter().all(|e| e.provider == "bolt"), "stored under the route's provider: {events:?}");
    assert_eq!(paid.result, Some(WebhookResult::Applied), "bolt's own record confirmed it: {paid:?}");
    assert_eq!(paid.withdrawal_id, Some(id));

    // The same body signed with the other provider's secret, at each route: not its signature.
    let body = store::body(&app.db, paid.id).await.unwrap().unwrap();
    let acme_route = several.url("/webhooks/provider/acme");
    for (route, secret) in [(&bolt_route, ACME_SECRET), (&acme_route, BOLT_SECRET)] {
        let (status, code, _) = problem_code(deliver_at(&app, route, body.clone(), secret).await).await;
        assert_eq!((status, code.as_str()), (400, "webhook_signature_invalid"), "{route} signed with {secret}");
    }
    // Signed with bolt's secret at bolt's route, it is what it is: bolt's event, a duplicate.
    let again = deliver_at(&app, &bolt_route, body.clone(), BOLT_SECRET).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.json::<Value>().await.unwrap(), json!({"status": "duplicate"}));
    assert_eq!(count(&app, "SELECT COUNT(*) FROM webhook_events").await, events.len() as i64, "nothing more stored");

    // Routes that are not served: the answer of any unknown path, and no hint which names exist.
    let (_, _, unknown_path) =
        problem_code(deliver_at(&app, &several.url("/nowhere"), vec![], BOLT_SECRET).await).await;
    for path in
        ["/webhooks/provider/nope", "/webhooks/provider/cash", "/webhooks/provider", "/webhooks/provider/default"]
    {
        let (status, code, problem) =
            problem_code(deliver_at(&app, &several.url(path), body.clone(), BOLT_SECRET).await).await;
        assert_eq!((status, code.as_str()), (404, "not_found"), "{path}");
        assert_eq!(format!("{problem:?}"), format!("{unknown_path:?}"), "{path}");
    }

    // Counted under the route's provider; a name that is none makes no series.
    let metrics = app.metrics().send().await.unwrap().text().await.unwrap();
    let refused = [("provider", "bolt"), ("type", "unknown"), ("result", "bad_signature")];
    assert!(webhook_count(&metrics, &refused).is_some_and(|n| n >= 1.0), "{metrics}");
    let applied = [("provider", "bolt"), ("type", "transfer.paid"), ("result", "applied")];
    assert!(webhook_count(&metrics, &applied).is_some_and(|n| n >= 1.0), "{metrics}");
    let from_zero = [("provider", "cash"), ("type", "transfer.returned"), ("result", "mismatch")];
    assert!(webhook_count(&metrics, &from_zero).is_some(), "every configured provider's series, from zero");
    assert_eq!(webhook_count(&metrics, &[("provider", "nope")]), None, "no label for a name that is no provider");
    assert!(!metrics.contains("provider=\"nope\""));
    app.assert_ledger_invariant().await;
}

/// Event ids are each provider's own: `evt_shared` from acme and from bolt are two events (202
/// each); bolt's again is bolt's duplicate. Operators list one provider's events (the ops API and
/// `withdrawals webhooks list --provider`), and the last-received gauge is per provider.
async fn event_ids_are_unique_per_provider_and_operators_filter_by_provider(app: TestApp) {
    let several = Several::serve(&app).await;
    let transfer = json!({"id": "tr_shared", "reference": uuid::Uuid::new_v4().to_string(), "amount": "5.00",
                          "currency": "USD", "status": "paid"});
    let body = event("evt_shared", "transfer.paid", &transfer);
    let route = |name: &str| several.url(&format!("/webhooks/provider/{name}"));
    assert_eq!(deliver_at(&app, &route("acme"), body.clone(), ACME_SECRET).await.status(), 202);
    let at_bolt = deliver_at(&app, &route("bolt"), body.clone(), BOLT_SECRET).await;
    assert_eq!(at_bolt.status(), 202, "another provider's event, though its id is the same");
    let again = deliver_at(&app, &route("bolt"), body.clone(), BOLT_SECRET).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.json::<Value>().await.unwrap(), json!({"status": "duplicate"}));
    assert_eq!(count(&app, "SELECT COUNT(*) FROM webhook_events WHERE event_id = 'evt_shared'").await, 2);
    let acme = store::by_event_id(&app.db, "acme", "evt_shared").await.unwrap().expect("acme's");
    let bolt = store::by_event_id(&app.db, "bolt", "evt_shared").await.unwrap().expect("bolt's");
    assert!(acme.job_id.is_some() && bolt.job_id.is_some() && acme.job_id != bolt.job_id, "each its own job");
    assert!(store::by_event_id(&app.db, "default", "evt_shared").await.unwrap().is_none());

    // Operators: one provider's events, through the ops API and the CLI.
    let viewer = app.operator("viewer").await;
    let ids = |page: Page<WebhookEventView>| -> Vec<(String, WebhookEventId)> {
        page.data.into_iter().map(|e| (e.provider, WebhookEventId(e.id))).collect()
    };
    let bolts = ids(app.ops_get(&viewer, "/ops/v1/webhook-events?provider=bolt").await);
    assert_eq!(bolts, [("bolt".to_owned(), bolt.id)]);
    let all = ids(app.ops_get(&viewer, "/ops/v1/webhook-events").await);
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(ids(app.ops_get(&viewer, "/ops/v1/webhook-events?provider=default").await).is_empty());
    let listed = cli(&app, &viewer, &["webhooks", "list", "--provider", "acme"]);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    let table = String::from_utf8_lossy(&listed.stdout);
    assert!(table.contains(&acme.id.to_string()) && table.contains(" acme "), "{table}");
    assert!(!table.contains(&bolt.id.to_string()), "{table}");

    // The last-received gauge, from this database, per provider (exported through a recorder of
    // this test's own: every test of the binary writes the process-wide one).
    let gauges = withdrawals::gauges::DatabaseGauges::read(&app.db, false).await.unwrap();
    let senders: Vec<&str> = gauges.webhook_last_received.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(senders, ["acme", "bolt"]);
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    ::metrics::with_local_recorder(&recorder, || gauges.export());
    let text = handle.render();
    let at = |provider: &str| {
        let prefix = format!("{}{{provider=\"{provider}\"}} ", withdrawals::metrics::WEBHOOK_LAST_RECEIVED);
        text.lines().find_map(|l| l.strip_prefix(&prefix)?.parse::<f64>().ok())
    };
    let received = acme.received_at.0.timestamp() as f64;
    assert_eq!(at("acme"), Some(received), "{text}");
    assert!(at("bolt").is_some_and(|t| t >= received), "{text}");
}

mod migration {
    use super::*;

    /// Applies the migrations numbered below `version` only, as a database deployed before it.
    async fn migrate_before(url: &str, backend: Backend, version: i64) {
        let source = match backend {
            Backend::Sqlite => "migrations/sqlite",
            Backend::Postgres => "migrations/postgres",
        };
        let older = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(source)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.split('_').next().unwrap().parse::<i64>().unwrap() < version {
                std::fs::copy(&path, older.path().join(&name)).unwrap();
            }
        }
        let migrator = sqlx::migrate::Migrator::new(older.path()).await.unwrap();
        on_connection!(url, |conn| migrator.run(&mut conn).await.unwrap());
    }

    /// Migration 33 on a database holding events (SQLite rebuilds the table): every event is kept
    /// as it was, still `default`'s and still a duplicate when it comes again; the same id from
    /// another provider is then another event.
    async fn stored_events_are_kept_and_their_ids_become_per_provider(backend: Backend) {
        let (url, _dir) = fresh_database(backend).await;
        migrate_before(&url, backend, 33).await;
        let (id, job) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
        let at = withdrawals::storage::DbTime(chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap());
        let headers = sqlx::types::Json(json!({"provider-signature": "t=1800000000,v1=00"}));
        on_connection!(&url, |conn| {
            sqlx::query(
                "INSERT INTO webhook_events (id, event_id, event_type, transfer_id, signed_at, received_at, headers,
                                             body, job_id, correlation_id)
                 VALUES ($1, 'evt_before', 'transfer.paid', 'tr_1', $2, $2, $3, $4, $5, 'c-before')",
            )
            .bind(id)
            .bind(at)
            .bind(&headers)
            .bind(b"{\"id\":\"evt_before\"}".to_vec())
            .bind(job)
            .execute(&mut conn)
            .await
            .unwrap();
        });

        withdrawals::startup::migrate_as_owner(&url).await.unwrap();
        let db = withdrawals::storage::Db::connect(&url, &withdrawals::storage::PoolSettings::default()).await.unwrap();
        let kept = store::by_event_id(&db, "default", "evt_before").await.unwrap().expect("the event is kept");
        assert_eq!((kept.id.0, kept.job_id.map(|j| j.0), kept.received_at), (id, Some(job), at));
        assert_eq!((kept.event_type.as_str(), kept.transfer_id.as_deref()), ("transfer.paid", Some("tr_1")));
        assert_eq!((&kept.headers.0, kept.correlation_id.as_str()), (&headers.0, "c-before"));
        assert_eq!(store::body(&db, kept.id).await.unwrap().unwrap(), b"{\"id\":\"evt_before\"}");
        assert_eq!(store::last_received_by_provider(&db).await.unwrap(), [("default".to_owned(), at)]);

        let mut tx = db.begin().await.unwrap();
        assert!(!store::insert(&mut tx, &EventRow { id: WebhookEventId::new(), ..kept.clone() }, b"{}").await.unwrap());
        let bolts = EventRow { id: WebhookEventId::new(), provider: "bolt".to_owned(), ..kept.clone() };
        assert!(store::insert(&mut tx, &bolts, b"{}").await.unwrap(), "bolt's evt_before is another event");
        tx.commit().await.unwrap();
        let senders = store::last_received_by_provider(&db).await.unwrap();
        assert_eq!(senders.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(), ["bolt", "default"]);
        db.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        stored_events_are_kept_and_their_ids_become_per_provider(Backend::Sqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        stored_events_are_kept_and_their_ids_become_per_provider(Backend::Postgres).await
    }
}

/// SPEC §16: W's payout is at bolt (pending). acme, which W never went to, holds a failed transfer
/// under W's key (a stray) and says so in a well-signed `transfer.failed`: acme's record is real,
/// but acme does not hold W's payout — nothing moves (failing W would release funds bolt may still
/// pay); the event is a `mismatch` and an `unknown_transfer` exception names W for operators.
async fn an_event_from_a_provider_the_withdrawal_is_not_at_moves_no_money(app: TestApp) {
    let several = Several::serve(&app).await;
    several.bolt.mock.set_settlement(async_settlement(600_000, 0.0));
    let mut config = worker_config("w-stray-event");
    config.pending_poll = Duration::from_secs(600);
    config.reconcile_policy.base_delay = Duration::from_secs(600);
    config.reconcile_policy.max_delay = Duration::from_secs(600);
    let _worker = app.start_worker(several.gateways.clone(), config).drop_guard();
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k-stray", "40.00").await;
    let key = app.key(id).await;
    app.eventually("W pending at bolt", WAIT, || async {
        let attempts = withdrawals::storage::attempts::for_withdrawal(&app.db, key).await.unwrap();
        attempts.iter().any(|a| a.provider == "bolt" && a.finished_at.is_some()).then_some(())
    })
    .await;
    // A stray at acme under W's key, failed there.
    let failing =
        FaultRule::new(RouteMatch::Create, FaultEffect::SettleFailed { failure_code: "account_closed".into() });
    several.acme.mock.set_faults(FaultConfig { rules: vec![failing] });
    let w = withdrawal_store::get(&app.db, key).await.unwrap().unwrap();
    let request = withdrawals::provider::TransferRequest {
        reference: id.to_string(),
        amount: "40.00".into(),
        currency: "USD".into(),
        destination: w.destination.clone(),
    };
    let stray = match several.acme.provider.submit(&id.to_string(), "stray", &request).await {
        withdrawals::provider::SubmitOutcome::Accepted { transfer, .. } => transfer,
        other => panic!("acme took the stray: {other:?}"),
    };
    let transfer = serde_json::to_value(&stray).unwrap();
    let body = event("evt_stray_failed", "transfer.failed", &transfer);
    let taken = deliver_at(&app, &several.url("/webhooks/provider/acme"), body, ACME_SECRET).await;
    assert_eq!(taken.status(), 202);
    let decided = app
        .eventually("acme's event decided", WAIT, || async {
            let events = store::list(&app.db, &EventFilter { limit: 10, ..EventFilter::default() }).await.unwrap();
            events.into_iter().find(|e| e.event_id == "evt_stray_failed" && e.result.is_some())
        })
        .await;
    assert_eq!(decided.result, Some(WebhookResult::Mismatch), "{decided:?}");
    assert_eq!(decided.provider, "acme");
    let now = withdrawal_store::get(&app.db, key).await.unwrap().unwrap();
    assert_eq!(now.status, WithdrawalStatus::Processing, "nothing moved: W's payout is bolt's");
    let exceptions = count(
        &app,
        &format!(
            "SELECT COUNT(*) FROM settlement_exceptions WHERE kind = 'unknown_transfer' AND withdrawal_id = {}",
            sql_id(&app, id.0)
        ),
    )
    .await;
    assert_eq!(exceptions, 1, "operators see acme's stray");
    app.assert_ledger_invariant().await;
}
