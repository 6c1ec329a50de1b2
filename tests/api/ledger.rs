//! Ledger verification (SPEC §14.4): `GET /ops/v1/ledger/verify` and `withdrawals ledger verify`
//! pass on an exact ledger and fail — 409 `ledger_violation`, a non-zero exit — naming the
//! account, currency and amounts when a row was slipped into the ledger behind the service's back.

use std::time::Duration;

use serde_json::Value;
use withdrawals::domain::WithdrawalStatus;

use crate::both_backends;
use crate::harness::{problem_code, TestApp};
use crate::ops::cli;

both_backends!(ledger_verify_passes_on_an_exact_ledger_and_names_a_tampered_row,);

async fn ledger_verify_passes_on_an_exact_ledger_and_names_a_tampered_row(app: TestApp) {
    let stop = app.start_default_worker();
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "30.00").await;
    app.wait_for_status(id, WithdrawalStatus::Completed, Duration::from_secs(25)).await;
    stop.cancel();
    let viewer = app.operator("viewer").await;

    let clean = app.client.get(app.url("/ops/v1/ledger/verify")).bearer_auth(&viewer).send().await.unwrap();
    assert_eq!(clean.status(), 200);
    assert_eq!(clean.json::<Value>().await.unwrap()["clean"], true);
    let out = cli(&app, &viewer, &["ledger", "verify"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(withdrawals::metrics::refresh_ledger_gauge(&app.db).await.unwrap(), 0, "the periodic check");
    assert!(String::from_utf8_lossy(&out.stdout).contains("ledger verified"));

    // A ledger entry inserted directly, with no balance change behind it: 5.00 that never arrived.
    let account = alice.account_id.0;
    let sql = if app.database_url.starts_with("sqlite:") {
        format!(
            "INSERT INTO ledger_entries (id, account_id, currency, kind, available_delta, held_delta, paid_out_delta, created_at)
             VALUES (X'{}', X'{}', 'USD', 'funding', 500, 0, 0, '2026-12-04T00:00:00.000000Z')",
            uuid::Uuid::now_v7().simple(),
            account.simple()
        )
    } else {
        format!(
            "INSERT INTO ledger_entries (id, account_id, currency, kind, available_delta, held_delta, paid_out_delta, created_at)
             VALUES ('{}', '{account}', 'USD', 'funding', 500, 0, 0, now())",
            uuid::Uuid::now_v7()
        )
    };
    app.execute_raw(&sql).await;

    let tampered = app.client.get(app.url("/ops/v1/ledger/verify")).bearer_auth(&viewer).send().await.unwrap();
    let (status, code, body) = problem_code(tampered).await;
    assert_eq!((status, code.as_str()), (409, "ledger_violation"));
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains(&account.to_string()) && detail.contains("USD"), "{detail}");
    assert!(detail.contains("ledger available 75.00") && detail.contains("balance available 70.00"), "{detail}");
    assert!(detail.contains("funded 105.00"), "{detail}");

    assert_eq!(
        withdrawals::metrics::refresh_ledger_gauge(&app.db).await.unwrap(),
        1,
        "the periodic check exports one violation"
    );
    let out = cli(&app, &viewer, &["ledger", "verify"]);
    assert!(!out.status.success(), "a difference is a non-zero exit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ledger_violation") && stderr.contains(&account.to_string()), "{stderr}");
}
