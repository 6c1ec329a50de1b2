//! Ledger verification (SPEC §14.4): `GET /ops/v1/ledger/verify` and `withdrawals ledger verify`
//! pass on an exact ledger and fail — 409 `ledger_violation`, a non-zero exit — naming the
//! account, currency and amounts when a row was slipped into the ledger behind the service's back.

use std::time::Duration;

use withdrawals::domain::WithdrawalStatus;
use withdrawals::ops::types::LedgerCheck;

use crate::both_backends;
use crate::harness::{problem_code, read, TestApp};
use crate::ops::cli;

both_backends!(
    ledger_verify_passes_on_an_exact_ledger_and_names_a_tampered_row,
    ledger_verify_reports_a_balance_past_64_bits_as_a_finding_not_an_error,
    ledger_verify_reports_a_real_balance_on_sqlite_as_a_finding_not_an_error,
    the_database_refuses_a_funding_entry_without_an_actor_and_a_balance_past_64_bits,
);

async fn verify_finding(app: &TestApp, viewer: &str) -> String {
    let response = app.client.get(app.url("/ops/v1/ledger/verify")).bearer_auth(viewer).send().await.unwrap();
    let (status, code, body) = problem_code(response).await;
    assert_eq!((status, code.as_str()), (409, "ledger_violation"), "{body:?}");
    body.detail.as_str().to_owned()
}

/// Issue 27: a balance whose total no longer fits 64 bits made the check's sum fail (PostgreSQL:
/// `bigint out of range`, a 500). The row is staged as a database from before migration 0018
/// could hold it: that migration's floor (a CHECK on PostgreSQL, a trigger on SQLite) is lifted
/// for the write.
async fn ledger_verify_reports_a_balance_past_64_bits_as_a_finding_not_an_error(app: TestApp) {
    let alice = app.customer("100.00").await;
    let viewer = app.operator("viewer").await;
    let account = alice.account_id.0;
    if app.database_url.starts_with("sqlite:") {
        app.execute_raw("DROP TRIGGER balances_money_is_integer_on_update").await;
        app.execute_raw(&format!(
            "UPDATE balances SET available = 9223372036854775807, paid_out = 9223372036854775807 WHERE account_id = X'{}'",
            account.simple()
        ))
        .await;
    } else {
        app.execute_raw("ALTER TABLE balances DROP CONSTRAINT balances_total_fits_64_bits").await;
        app.execute_raw(&format!(
            "UPDATE balances SET available = 9223372036854775807, paid_out = 9223372036854775807 WHERE account_id = '{account}'"
        ))
        .await;
    }

    let detail = verify_finding(&app, &viewer).await;

    assert!(detail.contains(&account.to_string()), "{detail}");
    assert!(detail.contains("past 64-bit minor units"), "{detail}");
    assert_eq!(withdrawals::gauges::refresh_ledger_gauge(&app.db).await.unwrap(), 1, "a finding, not an error");
    let out = cli(&app, &viewer, &["ledger", "verify"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ledger_violation"));
}

/// Issue 27: on SQLite an overflowing sum was stored as the REAL 1.84467440737096e+19, and
/// `ledger verify` then answered 500. PostgreSQL cannot hold this: its money columns are
/// `bigint`, which refuses a non-integer or out-of-range value on write (see the test above for
/// what can be corrupt there). Staged as a database from before migration 0018 could hold it.
async fn ledger_verify_reports_a_real_balance_on_sqlite_as_a_finding_not_an_error(app: TestApp) {
    let alice = app.customer("100.00").await;
    let viewer = app.operator("viewer").await;
    if !app.database_url.starts_with("sqlite:") {
        let refused = sqlx_error(
            &app,
            &format!("UPDATE balances SET available = 1.84467440737096e+19 WHERE account_id = '{}'", alice.account_id),
        )
        .await;
        assert!(refused.contains("out of range"), "PostgreSQL refuses it on write: {refused}");
        return;
    }
    let account = alice.account_id.0;
    app.execute_raw("DROP TRIGGER balances_money_is_integer_on_update").await;
    app.execute_raw(&format!(
        "UPDATE balances SET available = 1.84467440737096e+19 WHERE account_id = X'{}'",
        account.simple()
    ))
    .await;
    app.execute_raw("DROP TRIGGER ledger_entries_money_is_integer").await;
    app.execute_raw(&format!(
        "INSERT INTO ledger_entries (id, account_id, currency, kind, available_delta, held_delta, paid_out_delta, created_at, actor)
         VALUES (X'{}', X'{}', 'USD', 'funding', 0.5, 0, 0, '2026-12-04T00:00:00.000000Z', 'tamperer')",
        uuid::Uuid::now_v7().simple(),
        account.simple()
    ))
    .await;

    let detail = verify_finding(&app, &viewer).await;

    assert!(detail.contains(&account.to_string()), "{detail}");
    assert!(detail.contains("balance available is not an integer amount: 1.84467440737096e+19"), "{detail}");
    assert!(detail.contains("1 ledger entry with non-integer amounts"), "{detail}");
    assert_eq!(withdrawals::gauges::refresh_ledger_gauge(&app.db).await.unwrap(), 1, "a finding, not an error");
}

/// Migration 0018's floor under the application's checks: a new funding entry names its actor,
/// and no balance's total passes 64 bits (SQLite would otherwise store a REAL).
async fn the_database_refuses_a_funding_entry_without_an_actor_and_a_balance_past_64_bits(app: TestApp) {
    let alice = app.customer("100.00").await;
    let (id, account) = (uuid::Uuid::now_v7(), alice.account_id.0);
    let (no_actor, overflow) = if app.database_url.starts_with("sqlite:") {
        (
            format!(
                "INSERT INTO ledger_entries (id, account_id, currency, kind, available_delta, held_delta, paid_out_delta, created_at)
                 VALUES (X'{}', X'{}', 'USD', 'funding', 500, 0, 0, '2026-12-04T00:00:00.000000Z')",
                id.simple(),
                account.simple()
            ),
            format!(
                "UPDATE balances SET available = available + 9223372036854775807 WHERE account_id = X'{}'",
                account.simple()
            ),
        )
    } else {
        (
            format!(
                "INSERT INTO ledger_entries (id, account_id, currency, kind, available_delta, held_delta, paid_out_delta, created_at)
                 VALUES ('{id}', '{account}', 'USD', 'funding', 500, 0, 0, now())"
            ),
            format!("UPDATE balances SET paid_out = 9223372036854775807 WHERE account_id = '{account}'"),
        )
    };
    let refused = sqlx_error(&app, &no_actor).await;
    assert!(refused.contains("actor"), "{refused}");
    let refused = sqlx_error(&app, &overflow).await;
    assert!(refused.contains("balance_overflow") || refused.contains("balances_total_fits_64_bits"), "{refused}");
    assert_eq!(app.usd_balance(&alice).await.0, "100.00");
    app.assert_ledger_invariant().await;
}

/// Runs one statement behind the app's back and returns the database's refusal.
async fn sqlx_error(app: &TestApp, sql: &str) -> String {
    use sqlx::{Connection, Executor};
    let result = if app.database_url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(&app.database_url).await.unwrap();
        conn.execute(sql).await.map(|_| ())
    } else {
        let mut conn = sqlx::PgConnection::connect(&app.database_url).await.unwrap();
        conn.execute(sql).await.map(|_| ())
    };
    format!("{:?}", result.expect_err("the database refuses it"))
}

async fn ledger_verify_passes_on_an_exact_ledger_and_names_a_tampered_row(app: TestApp) {
    let stop = app.start_default_worker();
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "30.00").await;
    app.wait_for_status(id, WithdrawalStatus::Completed, Duration::from_secs(25)).await;
    stop.cancel();
    let viewer = app.operator("viewer").await;

    let clean = app.client.get(app.url("/ops/v1/ledger/verify")).bearer_auth(&viewer).send().await.unwrap();
    assert_eq!(clean.status(), 200);
    assert!(read::<LedgerCheck>(clean).await.clean);
    let out = cli(&app, &viewer, &["ledger", "verify"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(withdrawals::gauges::refresh_ledger_gauge(&app.db).await.unwrap(), 0, "the periodic check");
    assert!(String::from_utf8_lossy(&out.stdout).contains("ledger verified"));

    // A ledger entry inserted directly, with no balance change behind it: 5.00 that never arrived.
    let account = alice.account_id.0;
    let sql = if app.database_url.starts_with("sqlite:") {
        format!(
            "INSERT INTO ledger_entries (id, account_id, currency, kind, available_delta, held_delta, paid_out_delta, created_at, actor)
             VALUES (X'{}', X'{}', 'USD', 'funding', 500, 0, 0, '2026-12-04T00:00:00.000000Z', 'tamperer')",
            uuid::Uuid::now_v7().simple(),
            account.simple()
        )
    } else {
        format!(
            "INSERT INTO ledger_entries (id, account_id, currency, kind, available_delta, held_delta, paid_out_delta, created_at, actor)
             VALUES ('{}', '{account}', 'USD', 'funding', 500, 0, 0, now(), 'tamperer')",
            uuid::Uuid::now_v7()
        )
    };
    app.execute_raw(&sql).await;

    let tampered = app.client.get(app.url("/ops/v1/ledger/verify")).bearer_auth(&viewer).send().await.unwrap();
    let (status, code, body) = problem_code(tampered).await;
    assert_eq!((status, code.as_str()), (409, "ledger_violation"));
    let detail = body.detail.as_str();
    assert!(detail.contains(&account.to_string()) && detail.contains("USD"), "{detail}");
    assert!(detail.contains("ledger available 75.00") && detail.contains("balance available 70.00"), "{detail}");
    assert!(detail.contains("funded 105.00"), "{detail}");

    assert_eq!(
        withdrawals::gauges::refresh_ledger_gauge(&app.db).await.unwrap(),
        1,
        "the periodic check exports one violation"
    );
    let out = cli(&app, &viewer, &["ledger", "verify"]);
    assert!(!out.status.success(), "a difference is a non-zero exit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ledger_violation") && stderr.contains(&account.to_string()), "{stderr}");
}
