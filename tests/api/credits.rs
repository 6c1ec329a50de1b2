//! Money enters only through an audited door (issue 27, SPEC §1.2, §8):
//! `POST /ops/v1/accounts/{id}/credits` with an `Idempotency-Key`, treasury or admin; the
//! API's amount grammar, limits and codes; a balance that can never overflow.

use reqwest::Response;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use withdrawals::config::AppConfig;
use withdrawals::domain::{AccountId, AmountLimits};
use withdrawals::ops::types::CreditView;
use withdrawals::storage::accounts;
use withdrawals::storage::audit::{self, AuditFilter};

use crate::both_backends;
use crate::harness::{operator_id, problem_code, read, Backend, Customer, TestApp};

both_backends!(
    with = app_with_a_large_credit_limit;
    a_treasury_credit_raises_the_balance_names_its_actor_on_the_ledger_and_is_audited,
    replaying_a_credit_key_answers_the_same_credit_and_credits_once,
    only_treasury_and_admin_may_credit_and_a_low_role_is_refused_before_its_body,
    every_bad_amount_is_refused_with_the_apis_code_and_moves_nothing,
    a_credit_that_would_overflow_the_balance_is_refused_and_moves_nothing,
    creating_a_funded_account_locally_is_a_credit_by_the_local_actor,
);

/// USD credits up to 10^20, past 64-bit minor units, so the balance's own limit is what refuses;
/// other currencies keep the default limit.
async fn app_with_a_large_credit_limit(backend: Backend) -> TestApp {
    let config = AppConfig {
        credit_limits: AmountLimits::parse("USD=100000000000000000000", Decimal::from(100_000_000)).unwrap(),
        ..AppConfig::default()
    };
    TestApp::spawn_with(backend, config).await
}

async fn credit(app: &TestApp, token: &str, account: AccountId, key: Option<&str>, body: Value) -> Response {
    let mut request = app.client.post(app.url(&format!("/ops/v1/accounts/{account}/credits"))).bearer_auth(token);
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.json(&body).send().await.unwrap()
}

fn usd(amount: &str, reason: &str) -> Value {
    json!({"amount": amount, "currency": "USD", "reason": reason})
}

async fn credit_rows(app: &TestApp, account: AccountId) -> Vec<audit::AuditRow> {
    audit::list(
        &app.db,
        &AuditFilter {
            action: Some("account.credit".into()),
            target_id: Some(account.to_string()),
            limit: 100,
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

async fn a_treasury_credit_raises_the_balance_names_its_actor_on_the_ledger_and_is_audited(app: TestApp) {
    let alice = app.customer("100.00").await;
    let treasury = app.operator("treasury").await;
    let treasury_id = operator_id(&treasury);

    let response =
        credit(&app, &treasury, alice.account_id, Some("wire-4711"), usd("250.5", "wire 4711 received")).await;

    assert_eq!(response.status(), 201);
    assert!(response.headers().get("idempotent-replayed").is_none());
    let body: CreditView = read(response).await;
    assert_eq!((body.amount.as_str(), body.currency.as_str()), ("250.50", "USD"));
    assert_eq!(body.actor, format!("operator:{treasury_id}"));
    assert_eq!(body.idempotency_key, "wire-4711");
    assert_eq!(app.usd_balance(&alice).await, ("350.50".into(), "0.00".into(), "0.00".into()));
    let entries = accounts::funding_entries(&app.db, alice.account_id).await.unwrap();
    assert_eq!(entries.len(), 2, "the account's creation and this credit: {entries:?}");
    let entry = &entries[1];
    assert_eq!((entry.amount, entry.actor.clone()), (25_050, Some(format!("operator:{treasury_id}"))));
    assert_eq!(body.ledger_entry_id, entry.id);
    let rows = credit_rows(&app, alice.account_id).await;
    let row = &rows[0];
    assert_eq!(
        (row.operator_id, row.role.as_str(), row.result.as_str(), row.reason.as_str()),
        (treasury_id, "treasury", "ok", "wire 4711 received")
    );
    assert_eq!(row.parameters.0["ledger_entry_id"], body.ledger_entry_id.to_string());
    assert_eq!(row.parameters.0["idempotency_key"], "wire-4711");
    app.assert_ledger_invariant().await;
}

async fn replaying_a_credit_key_answers_the_same_credit_and_credits_once(app: TestApp) {
    let alice = app.customer("100.00").await;
    let admin = app.operator("admin").await;
    let first = credit(&app, &admin, alice.account_id, Some("k-1"), usd("40.00", "top-up")).await;
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.unwrap();

    // The same request again — the amount written another way is the same amount.
    for amount in ["40.00", "40"] {
        let again = credit(&app, &admin, alice.account_id, Some("k-1"), usd(amount, "top-up")).await;
        assert_eq!(again.status(), 201);
        assert_eq!(again.headers().get("idempotent-replayed").unwrap(), "true");
        assert_eq!(again.json::<Value>().await.unwrap(), first, "the stored answer, exactly");
    }
    // The key with another request is refused, as on the customer API.
    let reused = credit(&app, &admin, alice.account_id, Some("k-1"), usd("41.00", "top-up")).await;
    let (status, code, body) = problem_code(reused).await;
    assert_eq!((status, code.as_str()), (422, "idempotency_key_reused"), "{body:?}");
    let missing = credit(&app, &admin, alice.account_id, None, usd("41.00", "top-up")).await;
    assert_eq!(problem_code(missing).await.1, "idempotency_key_missing");

    assert_eq!(app.usd_balance(&alice).await.0, "140.00", "credited once");
    assert_eq!(accounts::funding_entries(&app.db, alice.account_id).await.unwrap().len(), 2);
    let results: Vec<String> = credit_rows(&app, alice.account_id).await.into_iter().map(|r| r.result).collect();
    assert_eq!(results, ["idempotency_key_reused", "replayed", "replayed", "ok", "ok"], "newest first");
    app.assert_ledger_invariant().await;
}

async fn only_treasury_and_admin_may_credit_and_a_low_role_is_refused_before_its_body(app: TestApp) {
    let alice = app.customer("100.00").await;
    for role in ["viewer", "operator"] {
        let token = app.operator(role).await;
        // A body that is not even JSON: the role is checked first.
        let response = app
            .client
            .post(app.url(&format!("/ops/v1/accounts/{}/credits", alice.account_id)))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        let (status, code, _) = problem_code(response).await;
        assert_eq!((status, code.as_str()), (403, "forbidden"), "{role}");
    }
    let forbidden = credit_rows(&app, alice.account_id).await;
    assert_eq!(forbidden.iter().filter(|r| r.result == "forbidden").count(), 2, "each refusal is audited");

    for role in ["treasury", "admin"] {
        let token = app.operator(role).await;
        let response = credit(&app, &token, alice.account_id, Some(role), usd("1.00", "test credit")).await;
        assert_eq!(response.status(), 201, "{role}");
    }
    let treasury = app.operator("treasury").await;
    let nobody = credit(&app, &treasury, AccountId::new(), Some("k"), usd("1.00", "test credit")).await;
    assert_eq!(problem_code(nobody).await.0, 404);
    // The system account (the owner of work about no withdrawal, a row since migration 0024) is no
    // customer's: it takes no credit.
    let system = credit(&app, &treasury, AccountId::SYSTEM, Some("k2"), usd("1.00", "test credit")).await;
    assert_eq!(problem_code(system).await.0, 404);
    // Treasury is not an operator: it cannot resolve reviews or replay.
    let replays =
        app.client.post(app.url("/ops/v1/replays")).bearer_auth(&treasury).json(&json!({})).send().await.unwrap();
    assert_eq!(problem_code(replays).await.0, 403);
    assert_eq!(app.usd_balance(&alice).await.0, "102.00");
    app.assert_ledger_invariant().await;
}

async fn every_bad_amount_is_refused_with_the_apis_code_and_moves_nothing(app: TestApp) {
    let alice = app.customer("100.00").await;
    let treasury = app.operator("treasury").await;
    let cases = [
        ("1e3", "USD", "invalid_amount"),
        ("1_000", "USD", "invalid_amount"),
        ("+5", "USD", "invalid_amount"),
        ("5.", "USD", "invalid_amount"),
        (".5", "USD", "invalid_amount"),
        ("1e-2", "USD", "invalid_amount"),
        ("1e20", "USD", "invalid_amount"),
        ("", "USD", "invalid_amount"),
        ("0", "USD", "amount_not_positive"),
        ("-5.00", "USD", "amount_not_positive"),
        ("1.001", "USD", "amount_too_precise"),
        ("100000000000000000001", "USD", "amount_over_limit"),
        ("100000000.01", "EUR", "amount_over_limit"),
        ("5.00", "ZZZ", "unsupported_currency"),
    ];
    for (i, (amount, currency, expected)) in cases.into_iter().enumerate() {
        let body = json!({"amount": amount, "currency": currency, "reason": "bad amount"});
        let response = credit(&app, &treasury, alice.account_id, Some(&format!("bad-{i}")), body).await;
        let (status, code, body) = problem_code(response).await;
        assert_eq!((status, code.as_str()), (422, expected), "{amount:?} {currency}: {body:?}");
        let field = if expected == "unsupported_currency" { "currency" } else { "amount" };
        assert_eq!(body.field.as_deref(), Some(field), "{amount:?}");
    }
    assert_eq!(app.usd_balance(&alice).await.0, "100.00");
    assert_eq!(accounts::funding_entries(&app.db, alice.account_id).await.unwrap().len(), 1);
    app.assert_ledger_invariant().await;
}

/// Issue 27: on SQLite two fundings of 92 233 720 368 547 758.00 made the balance the REAL
/// 1.84467440737096e+19, after which balances and `ledger verify` answered 500.
async fn a_credit_that_would_overflow_the_balance_is_refused_and_moves_nothing(app: TestApp) {
    let created = withdrawals::provisioning::create_account(&app.db, "whale", None).await.unwrap();
    let whale = Customer { account_id: created.account_id, api_key: created.api_key };
    let treasury = app.operator("treasury").await;
    let near_max = "92233720368547758.00";
    let first = credit(&app, &treasury, whale.account_id, Some("w-1"), usd(near_max, "large")).await;
    assert_eq!(first.status(), 201);

    let second = credit(&app, &treasury, whale.account_id, Some("w-2"), usd(near_max, "large")).await;

    let (status, code, body) = problem_code(second).await;
    assert_eq!((status, code.as_str()), (422, "balance_overflow"), "{body:?}");
    let small = credit(&app, &treasury, whale.account_id, Some("w-3"), usd("0.08", "one cent too many")).await;
    assert_eq!(problem_code(small).await.1, "balance_overflow", "past i64::MAX by one minor unit");
    let fits = credit(&app, &treasury, whale.account_id, Some("w-4"), usd("0.07", "exactly the maximum")).await;
    assert_eq!(fits.status(), 201);
    assert_eq!(app.usd_balance(&whale).await, ("92233720368547758.07".into(), "0.00".into(), "0.00".into()));
    assert_eq!(accounts::funding_entries(&app.db, whale.account_id).await.unwrap().len(), 2);
    let results: Vec<String> = credit_rows(&app, whale.account_id).await.into_iter().map(|r| r.result).collect();
    assert_eq!(results, ["ok", "balance_overflow", "balance_overflow", "ok"]);
    // Money still moves: a withdrawal holds and the invariant holds.
    let id = app.create_withdrawal(&whale, "after", "10.00").await;
    assert!(!id.to_string().is_empty());
    app.assert_ledger_invariant().await;
    let viewer = app.operator("viewer").await;
    let verify = app.client.get(app.url("/ops/v1/ledger/verify")).bearer_auth(&viewer).send().await.unwrap();
    assert_eq!(verify.status(), 200);
}

async fn creating_a_funded_account_locally_is_a_credit_by_the_local_actor(app: TestApp) {
    let alice = app.customer("100.00").await;

    let entries = accounts::funding_entries(&app.db, alice.account_id).await.unwrap();
    assert_eq!(entries.len(), 1);
    let actor = entries[0].actor.clone().unwrap();
    assert!(actor.starts_with("local:"), "{actor}");
    let rows = credit_rows(&app, alice.account_id).await;
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].operator_id, rows[0].operator_name.as_str()), (uuid::Uuid::nil(), actor.as_str()));
    assert_eq!((rows[0].result.as_str(), rows[0].reason.as_str()), ("ok", "initial funding"));
    assert_eq!(rows[0].parameters.0["idempotency_key"], format!("account-create-{}", alice.account_id));
    app.assert_ledger_invariant().await;
}
