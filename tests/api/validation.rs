//! Bad input gets a clear problem+json with a stable code and the field, and changes nothing.

use serde_json::json;

use crate::both_backends;
use crate::harness::{problem_code, withdrawal_body, TestApp};
use withdrawals::storage::withdrawals as store;

both_backends!(
    invalid_requests_are_rejected_with_their_field,
    malformed_json_is_a_400,
    an_oversized_body_is_a_413,
    a_bad_or_missing_api_key_is_a_401,
);

async fn invalid_requests_are_rejected_with_their_field(app: TestApp) {
    let alice = app.customer("100.00").await;
    let dest = json!({"type": "bank_account", "account_number": "12345678", "bank_code": "021000021"});
    let cases = [
        (json!({"amount": "-5.00", "currency": "USD", "destination": dest}), "amount_not_positive", "amount"),
        (json!({"amount": "0", "currency": "USD", "destination": dest}), "amount_not_positive", "amount"),
        (json!({"amount": "1.001", "currency": "USD", "destination": dest}), "amount_too_precise", "amount"),
        (json!({"amount": "ten", "currency": "USD", "destination": dest}), "invalid_amount", "amount"),
        (json!({"amount": "2000000", "currency": "USD", "destination": dest}), "amount_over_limit", "amount"),
        (json!({"amount": 10.5, "currency": "USD", "destination": dest}), "invalid_field", "amount"),
        (json!({"amount": "10.00", "currency": "ZZZ", "destination": dest}), "unsupported_currency", "currency"),
        (json!({"currency": "USD", "destination": dest}), "invalid_field", "body"),
        (
            json!({"amount": "10.00", "currency": "USD", "destination": {"type": "card", "account_number": "12345678", "bank_code": "021000021"}}),
            "invalid_destination",
            "destination.type",
        ),
        (
            json!({"amount": "10.00", "currency": "USD", "destination": {"type": "bank_account", "account_number": "12", "bank_code": "021000021"}}),
            "invalid_destination",
            "destination.account_number",
        ),
        (
            json!({"amount": "10.00", "currency": "USD", "destination": {"type": "bank_account", "account_number": "12345678", "bank_code": "!"}}),
            "invalid_destination",
            "destination.bank_code",
        ),
        (
            json!({"amount": "10.00", "currency": "USD", "destination": dest, "reference": "x".repeat(141)}),
            "invalid_reference",
            "reference",
        ),
        (
            json!({"amount": "10.00", "currency": "USD", "destination": dest, "reference": "invoice \u{202E}gpj.exe"}),
            "invalid_reference",
            "reference",
        ),
        (
            json!({"amount": "10.00", "currency": "USD", "destination": dest, "reference": "rent\u{200B}al"}),
            "invalid_reference",
            "reference",
        ),
        (json!({"amount": "+5", "currency": "USD", "destination": dest}), "invalid_amount", "amount"),
        (json!({"amount": " 5.00 ", "currency": "USD", "destination": dest}), "invalid_amount", "amount"),
        (json!({"amount": "5.", "currency": "USD", "destination": dest}), "invalid_amount", "amount"),
        (json!({"amount": ".5", "currency": "USD", "destination": dest}), "invalid_amount", "amount"),
        (
            json!({"amount": "10.00", "currency": "USD", "destination": dest, "surprise": 1}),
            "invalid_field",
            "surprise",
        ),
    ];
    for (i, (body, expected_code, expected_field)) in cases.into_iter().enumerate() {
        let response = app.post_withdrawal(&alice, &format!("key-{i}"), &body).send().await.unwrap();
        let (status, code, problem) = problem_code(response).await;
        assert_eq!((status, code.as_str()), (422, expected_code), "case {i}: {problem:?}");
        assert_eq!(problem.field.as_deref(), Some(expected_field), "case {i}: {problem:?}");
        assert!(!problem.detail.is_empty());
    }
    assert_eq!(store::count_for_account(&app.db, alice.account_id).await.unwrap(), 0);
    assert_eq!(app.usd_balance(&alice).await.0, "100.00");
}

async fn malformed_json_is_a_400(app: TestApp) {
    let alice = app.customer("100.00").await;

    let response = app
        .client
        .post(app.url("/v1/withdrawals"))
        .bearer_auth(&alice.api_key)
        .header("Idempotency-Key", "k")
        .header("content-type", "application/json")
        .body("{\"amount\": \"10.00\",")
        .send()
        .await
        .unwrap();

    let (status, code, _) = problem_code(response).await;
    assert_eq!((status, code.as_str()), (400, "malformed_json"));
}

async fn an_oversized_body_is_a_413(app: TestApp) {
    let alice = app.customer("100.00").await;
    let mut body = withdrawal_body("10.00");
    body["reference"] = json!("x".repeat(64 * 1024));

    let response = app.post_withdrawal(&alice, "k", &body).send().await.unwrap();

    let (status, code, _) = problem_code(response).await;
    assert_eq!((status, code.as_str()), (413, "payload_too_large"));
}

async fn a_bad_or_missing_api_key_is_a_401(app: TestApp) {
    let alice = app.customer("100.00").await;
    let last = if alice.api_key.ends_with('0') { '1' } else { '0' };
    let forged = format!("{}{last}", &alice.api_key[..alice.api_key.len() - 1]);
    for auth in [None, Some("wdk_nonsense".to_owned()), Some(forged), Some("Basic abc".to_owned())] {
        let mut request = app.client.get(app.url("/v1/balances"));
        if let Some(token) = &auth {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.headers().get("www-authenticate").map(|v| v.to_str().unwrap()), Some("Bearer"));
        let (status, code, _) = problem_code(response).await;
        assert_eq!((status, code.as_str()), (401, "unauthorized"), "{auth:?}");
    }
    let response = app
        .client
        .post(app.url("/v1/withdrawals"))
        .header("Idempotency-Key", "k")
        .json(&withdrawal_body("1.00"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
}
