//! Reading: isolation between accounts, pagination, balances, correlation ids, OpenAPI, health.

use std::collections::HashSet;

use serde_json::Value;
use withdrawals::customer::types::{WithdrawalList, WithdrawalView};
use withdrawals::domain::WithdrawalStatus;

use crate::both_backends;
use crate::harness::{problem_code, read, withdrawal_body, TestApp};

both_backends!(
    another_accounts_withdrawal_is_a_404,
    listing_is_newest_first_and_cursor_paginated,
    listing_filters_by_status_and_rejects_bad_parameters,
    the_correlation_id_is_echoed_or_generated,
    openapi_health_and_readiness_are_served,
);

async fn another_accounts_withdrawal_is_a_404(app: TestApp) {
    let alice = app.customer("100.00").await;
    let mallory = app.customer("100.00").await;
    let created: WithdrawalView =
        read(app.post_withdrawal(&alice, "k", &withdrawal_body("10.00")).send().await.unwrap()).await;
    let id = created.id;

    let own = app.get(&alice, &format!("/v1/withdrawals/{id}")).send().await.unwrap();
    assert_eq!(own.status(), 200);
    assert_eq!(read::<WithdrawalView>(own).await.id, id);

    let foreign = app.get(&mallory, &format!("/v1/withdrawals/{id}")).send().await.unwrap();
    let (status, code, _) = problem_code(foreign).await;
    assert_eq!((status, code.as_str()), (404, "not_found"));
    let cancel = app
        .client
        .post(app.url(&format!("/v1/withdrawals/{id}/cancel")))
        .bearer_auth(&mallory.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 404);
    let garbage = app.get(&alice, "/v1/withdrawals/not-a-uuid").send().await.unwrap();
    assert_eq!(garbage.status(), 404);
    let listed: WithdrawalList = read(app.get(&mallory, "/v1/withdrawals").send().await.unwrap()).await;
    assert!(listed.data.is_empty());
    assert_eq!(app.usd_balance(&alice).await.1, "10.00", "the foreign cancel changed nothing");
}

async fn listing_is_newest_first_and_cursor_paginated(app: TestApp) {
    let alice = app.customer("1000.00").await;
    let mut created = Vec::new();
    for i in 0..7 {
        let response = app.post_withdrawal(&alice, &format!("k{i}"), &withdrawal_body(&format!("{}.00", i + 1)));
        created.push(read::<WithdrawalView>(response.send().await.unwrap()).await.id);
    }

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/withdrawals?limit=3&cursor={c}"),
            None => "/v1/withdrawals?limit=3".to_owned(),
        };
        let page: WithdrawalList = read(app.get(&alice, &path).send().await.unwrap()).await;
        pages += 1;
        seen.extend(page.data.iter().map(|item| item.id));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }

    assert_eq!(pages, 3);
    created.reverse();
    assert_eq!(seen, created, "newest first, each exactly once");
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 7);
}

async fn listing_filters_by_status_and_rejects_bad_parameters(app: TestApp) {
    let alice = app.customer("1000.00").await;
    let first: WithdrawalView =
        read(app.post_withdrawal(&alice, "a", &withdrawal_body("1.00")).send().await.unwrap()).await;
    app.post_withdrawal(&alice, "b", &withdrawal_body("2.00")).send().await.unwrap();
    let id = first.id;
    app.client.post(app.url(&format!("/v1/withdrawals/{id}/cancel"))).bearer_auth(&alice.api_key).send().await.unwrap();

    let failed: WithdrawalList = read(app.get(&alice, "/v1/withdrawals?status=failed").send().await.unwrap()).await;
    let pending: WithdrawalList = read(app.get(&alice, "/v1/withdrawals?status=pending").send().await.unwrap()).await;

    assert_eq!(failed.data.len(), 1);
    assert_eq!((failed.data[0].id, failed.data[0].status), (id, WithdrawalStatus::Failed));
    assert_eq!(pending.data.len(), 1);
    // A well-formed cursor from before any stored instant (year -4713), as schemathesis suggested:
    // a 422, not a database error.
    let ancient = format!("cursor={}", hex_encode(&format!("-210866803200000001|{}", uuid::Uuid::nil())));
    for (query, expected) in [
        ("status=paid", "invalid_status"),
        ("limit=0", "invalid_limit"),
        ("limit=101", "invalid_limit"),
        ("cursor=zz", "invalid_cursor"),
        (ancient.as_str(), "invalid_cursor"),
    ] {
        let response = app.get(&alice, &format!("/v1/withdrawals?{query}")).send().await.unwrap();
        let (status, code, _) = problem_code(response).await;
        assert_eq!((status, code.as_str()), (422, expected), "{query}");
    }
}

async fn the_correlation_id_is_echoed_or_generated(app: TestApp) {
    let alice = app.customer("100.00").await;

    let echoed = app
        .post_withdrawal(&alice, "k", &withdrawal_body("1.00"))
        .header("X-Correlation-Id", "corr-123")
        .send()
        .await
        .unwrap();
    let generated = app.get(&alice, "/v1/balances").send().await.unwrap();

    assert_eq!(echoed.headers()["x-correlation-id"], "corr-123");
    let id = withdrawals::domain::WithdrawalId(read::<WithdrawalView>(echoed).await.id);
    let transitions = withdrawals::storage::withdrawals::transitions(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(transitions[0].correlation_id, "corr-123", "the id reaches what the request wrote");
    let jobs = withdrawals::storage::jobs::jobs_for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(jobs[0].correlation_id, "corr-123", "and the job it enqueued");
    let generated_id = generated.headers()["x-correlation-id"].to_str().unwrap();
    assert!(uuid::Uuid::parse_str(generated_id).is_ok());
}

async fn openapi_health_and_readiness_are_served(app: TestApp) {
    let doc: Value = app.client.get(app.url("/openapi.json")).send().await.unwrap().json().await.unwrap();
    for path in ["/v1/withdrawals", "/v1/withdrawals/{id}", "/v1/withdrawals/{id}/cancel", "/v1/balances"] {
        assert!(doc["paths"][path].is_object(), "OpenAPI documents {path}");
    }
    assert!(doc["components"]["schemas"]["WithdrawalView"].is_object());
    // Every authenticated operation documents its 401 (schemathesis found cancel without one).
    for (path, operations) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/v1/") {
            continue;
        }
        for (method, operation) in operations.as_object().unwrap() {
            assert!(operation["responses"]["401"].is_object(), "{method} {path} does not document 401");
        }
    }

    let health = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);

    // A database whose newest migration is not the one this binary embeds (its checksum
    // differs) is not ready.
    let shorter =
        if app.database_url.starts_with("sqlite") { "substr(checksum, 2)" } else { "substring(checksum from 2)" };
    app.execute_raw(&format!(
        "UPDATE _sqlx_migrations SET checksum = {shorter} WHERE version = (SELECT MAX(version) FROM _sqlx_migrations)"
    ))
    .await;
    let (status, code, _) = problem_code(app.client.get(app.url("/readyz")).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (503, "not_ready"), "another migration applied");

    // A database whose migrations are behind this binary (the newest one not applied) is not
    // ready; the process is still alive.
    app.execute_raw("DELETE FROM _sqlx_migrations WHERE version = (SELECT MAX(version) FROM _sqlx_migrations)").await;
    let behind = app.client.get(app.url("/readyz")).send().await.unwrap();
    let (status, code, _) = problem_code(behind).await;
    assert_eq!((status, code.as_str()), (503, "not_ready"), "migrations behind");
    assert_eq!(app.client.get(app.url("/healthz")).send().await.unwrap().status(), 200);

    app.db.close().await;
    let not_ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    let (status, code, body) = problem_code(not_ready).await;
    assert_eq!((status, code.as_str()), (503, "not_ready"));
    assert!(!format!("{body:?}").contains("pool"), "no internal detail in the body: {body:?}");
}

fn hex_encode(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}
