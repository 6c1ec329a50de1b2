//! Credential lifecycle (issue 17): API keys created, listed and revoked for rotation; operators
//! disabled, enabled and their tokens rotated — admin only, every action audited, refusals too;
//! revokes take effect on the next request with no cache in between; the CLI over HTTP and
//! `--direct`; nothing secret listed or audited.

use std::process::Command;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use withdrawals::credentials::{self, API_KEY_PREFIX};
use withdrawals::customer::types::WithdrawalView;
use withdrawals::domain::{Role, WithdrawalStatus};
use withdrawals::ops::types::{ApiKeyView, AuditEntry, KeyStatus, List, OperatorStatus, OperatorView, Page};
use withdrawals::storage::audit::{self, AuditFilter, AuditRow};

use crate::both_backends;
use crate::console::{http_sign_in, session_cookie};
use crate::harness::{operator_id, problem_code, read, typed, TestApp};
use crate::ops::call;

both_backends!(
    a_revoked_key_is_refused_on_the_next_request_by_every_instance,
    a_second_key_keeps_working_after_the_first_is_revoked,
    a_disabled_operator_is_refused_their_console_session_ends_and_enable_restores_access,
    rotating_a_token_refuses_the_old_one_at_once_and_accepts_the_new_one,
    the_last_enabled_admin_cannot_be_disabled_even_by_two_admins_at_once,
    every_lifecycle_route_refuses_a_non_admin_with_403_before_the_body_and_audits_it,
    the_cli_manages_keys_and_operators_through_the_api_and_directly_when_it_is_down,
);

const WAIT: Duration = Duration::from_secs(20);

fn key_id(api_key: &str) -> uuid::Uuid {
    credentials::parse(API_KEY_PREFIX, api_key).expect("an API key").0
}

/// What must never be shown again once issued: the secret, and its stored hash.
fn secret_forms(token: &str) -> [String; 2] {
    let secret = token.rsplit_once('_').unwrap().1.to_owned();
    let hash = hex::encode(credentials::hash(&secret));
    [secret, hash]
}

fn assert_no_secret(text: &str, tokens: &[&str]) {
    for token in tokens {
        for form in secret_forms(token) {
            assert!(!text.contains(&form), "a secret or its hash leaked into: {text}");
        }
    }
}

/// The rows of `action`, without the harness operators' enrolment (each rotates their own token
/// once when created).
async fn audit_rows(app: &TestApp, action: &str) -> Vec<AuditRow> {
    let filter = AuditFilter { action: Some(action.into()), limit: 100, ..Default::default() };
    let rows = audit::list(&app.db, &filter).await.unwrap();
    rows.into_iter().filter(|r| r.reason != withdrawals::provisioning::ENROLMENT_REASON).collect()
}

async fn balances_status(app: &TestApp, base: &str, api_key: &str) -> u16 {
    app.client.get(format!("{base}/v1/balances")).bearer_auth(api_key).send().await.unwrap().status().as_u16()
}

async fn a_revoked_key_is_refused_on_the_next_request_by_every_instance(app: TestApp) {
    let alice = app.customer("100.00").await;
    let admin = app.operator("admin").await;
    let second = crate::harness::serve_extra(&app, Default::default()).await;
    assert_eq!(balances_status(&app, &app.base_url, &alice.api_key).await, 200);
    assert_eq!(balances_status(&app, &second, &alice.api_key).await, 200);

    let key = key_id(&alice.api_key);
    let revoked = call(
        &app,
        Method::POST,
        &format!("/ops/v1/api-keys/{key}/revoke"),
        Some(&admin),
        Some(json!({"reason": "leaked in a support ticket"})),
    )
    .await;

    assert_eq!(revoked.status(), 200);
    let body: ApiKeyView = read(revoked).await;
    assert_eq!((body.status, body.revoked_reason.as_deref()), (KeyStatus::Revoked, Some("leaked in a support ticket")));
    // The very next request, on this instance and on another one sharing the database.
    let (status, code, _) =
        problem_code(app.client.get(app.url("/v1/balances")).bearer_auth(&alice.api_key).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (401, "unauthorized"));
    assert_eq!(balances_status(&app, &second, &alice.api_key).await, 401);
    let refused_create =
        app.post_withdrawal(&alice, "after-revoke", &crate::harness::withdrawal_body("1.00")).send().await.unwrap();
    assert_eq!(refused_create.status(), 401);
    let again = call(
        &app,
        Method::POST,
        &format!("/ops/v1/api-keys/{key}/revoke"),
        Some(&admin),
        Some(json!({"reason": "twice"})),
    )
    .await;
    let (status, code, _) = problem_code(again).await;
    assert_eq!((status, code.as_str()), (409, "already_revoked"));
    let unknown = call(
        &app,
        Method::POST,
        &format!("/ops/v1/api-keys/{}/revoke", uuid::Uuid::now_v7()),
        Some(&admin),
        Some(json!({"reason": "no such key"})),
    )
    .await;
    assert_eq!(unknown.status(), 404);

    let rows = audit_rows(&app, "api_key.revoke").await;
    let results: Vec<&str> = rows.iter().map(|r| r.result.as_str()).collect();
    assert_eq!(results, ["not_found", "already_revoked", "ok"], "newest first, refusals included");
    assert_eq!(
        (rows[2].target_id.as_str(), rows[2].reason.as_str()),
        (key.to_string().as_str(), "leaked in a support ticket")
    );
    assert_eq!(rows[2].parameters.0["account_id"], alice.account_id.to_string());
}

async fn a_second_key_keeps_working_after_the_first_is_revoked(app: TestApp) {
    let alice = app.customer("100.00").await;
    let admin = app.operator("admin").await;
    let account = alice.account_id;

    let created = call(
        &app,
        Method::POST,
        &format!("/ops/v1/accounts/{account}/keys"),
        Some(&admin),
        Some(json!({"label": "payroll service, 2025 rotation"})),
    )
    .await;
    assert_eq!(created.status(), 201);
    let created: ApiKeyView = read(created).await;
    let new_key = created.api_key.clone().expect("the new key, shown once");
    assert!(new_key.starts_with("wdk_"));
    assert_eq!(created.label.as_deref(), Some("payroll service, 2025 rotation"));
    assert_eq!(created.account_id, account.0);
    // Both work while the client moves over; both see the same account.
    let first_id = app.create_withdrawal(&alice, "old-key", "10.00").await;
    let with_new = crate::harness::Customer { account_id: account, api_key: new_key.clone() };
    let second_id = app.create_withdrawal(&with_new, "new-key", "5.00").await;
    let seen: WithdrawalView =
        read(app.get(&with_new, &format!("/v1/withdrawals/{first_id}")).send().await.unwrap()).await;
    assert_eq!(seen.id, first_id.0, "the new key reads the old key's withdrawal: one account");

    let revoke = call(
        &app,
        Method::POST,
        &format!("/ops/v1/api-keys/{}/revoke", key_id(&alice.api_key)),
        Some(&admin),
        Some(json!({"reason": "rotated to the payroll key"})),
    )
    .await;
    assert_eq!(revoke.status(), 200);

    assert_eq!(balances_status(&app, &app.base_url, &alice.api_key).await, 401);
    assert_eq!(balances_status(&app, &app.base_url, &new_key).await, 200);
    let shown: WithdrawalView =
        read(app.get(&with_new, &format!("/v1/withdrawals/{second_id}")).send().await.unwrap()).await;
    assert_eq!(shown.status, WithdrawalStatus::Pending);
    assert_eq!(app.usd_balance(&with_new).await.1, "15.00", "the account's holds are untouched by the rotation");

    // The list: both keys, ids, labels, times, status; the last use shows up; no secret, no hash.
    let listed = app
        .eventually("the new key's last use to be recorded", WAIT, || {
            let (app, admin) = (&app, &admin);
            async move {
                let body: Value =
                    call(app, Method::GET, &format!("/ops/v1/accounts/{account}/keys"), Some(admin), None)
                        .await
                        .json()
                        .await
                        .unwrap();
                body["data"].as_array().unwrap().iter().all(|k| k["last_used_at"].is_string()).then_some(body)
            }
        })
        .await;
    let keys: List<ApiKeyView> = typed(listed.clone());
    let keys = keys.data;
    assert_eq!(keys.len(), 2);
    assert_eq!((keys[0].id, keys[0].status), (key_id(&alice.api_key), KeyStatus::Revoked));
    assert_eq!(keys[0].revoked_reason.as_deref(), Some("rotated to the payroll key"));
    assert_eq!((keys[1].status, keys[1].label.as_deref()), (KeyStatus::Active, Some("payroll service, 2025 rotation")));
    // The wire shape itself: exactly these members, no secret and no hash among them.
    let mut fields: Vec<&str> = listed["data"][1].as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort();
    assert_eq!(
        fields,
        ["account_id", "created_at", "id", "label", "last_used_at", "revoked_at", "revoked_reason", "status"]
    );
    assert_no_secret(&listed.to_string(), &[&alice.api_key, &new_key]);
    let trail: Value = call(&app, Method::GET, "/ops/v1/audit", Some(&admin), None).await.json().await.unwrap();
    assert_no_secret(&trail.to_string(), &[&alice.api_key, &new_key, &admin]);
    let created_rows = audit_rows(&app, "api_key.create").await;
    assert_eq!(created_rows.len(), 1);
    assert_eq!(created_rows[0].target_id, account.to_string());
    assert_eq!(created_rows[0].parameters.0["key_id"], created.id.to_string());

    // A key for an account that does not exist, and an unreadable label, are refused.
    let nobody = call(
        &app,
        Method::POST,
        &format!("/ops/v1/accounts/{}/keys", uuid::Uuid::now_v7()),
        Some(&admin),
        Some(json!({})),
    )
    .await;
    assert_eq!(nobody.status(), 404);
    let bad_label = call(
        &app,
        Method::POST,
        &format!("/ops/v1/accounts/{account}/keys"),
        Some(&admin),
        Some(json!({"label": "x".repeat(101)})),
    )
    .await;
    let (status, code, _) = problem_code(bad_label).await;
    assert_eq!((status, code.as_str()), (422, "invalid_label"));
    app.assert_ledger_invariant().await;
}

async fn a_disabled_operator_is_refused_their_console_session_ends_and_enable_restores_access(app: TestApp) {
    let admin = app.operator("admin").await;
    let ops = app.operator("operator").await;
    let id = operator_id(&ops);
    let plain = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let cookie = session_cookie(&http_sign_in(&app.base_url, &ops, "/ops/overview", false).await);
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let console = || async {
        plain.get(app.url("/ops/overview")).header("cookie", &cookie).send().await.unwrap().status().as_u16()
    };
    assert_eq!(console().await, 200);
    assert_eq!(call(&app, Method::GET, "/ops/v1/overview", Some(&ops), None).await.status(), 200);

    let disabled = call(
        &app,
        Method::POST,
        &format!("/ops/v1/operators/{id}/disable"),
        Some(&admin),
        Some(json!({"reason": "laptop stolen"})),
    )
    .await;

    assert_eq!(disabled.status(), 200);
    let body: OperatorView = read(disabled).await;
    assert_eq!((body.status, body.sessions_ended), (OperatorStatus::Disabled, Some(1)));
    let (status, code, _) = problem_code(call(&app, Method::GET, "/ops/v1/overview", Some(&ops), None).await).await;
    assert_eq!((status, code.as_str()), (401, "unauthorized"));
    assert_eq!(console().await, 303, "the console session ended: back to sign-in");
    let sign_in = http_sign_in(&app.base_url, &ops, "/ops/overview", false).await;
    assert_eq!(sign_in.status(), 401, "and a new sign-in is refused");
    let listed: List<OperatorView> = app.ops_get(&admin, "/ops/v1/operators").await;
    let row = listed.data.iter().find(|o| o.id == id).unwrap();
    assert_eq!((row.status, row.disabled_reason.as_deref()), (OperatorStatus::Disabled, Some("laptop stolen")));
    let twice = call(
        &app,
        Method::POST,
        &format!("/ops/v1/operators/{id}/disable"),
        Some(&admin),
        Some(json!({"reason": "again"})),
    )
    .await;
    assert_eq!(problem_code(twice).await.1, "already_disabled");

    let enabled = call(
        &app,
        Method::POST,
        &format!("/ops/v1/operators/{id}/enable"),
        Some(&admin),
        Some(json!({"reason": "laptop found, disk encrypted"})),
    )
    .await;

    assert_eq!(enabled.status(), 200);
    assert_eq!(
        call(&app, Method::GET, "/ops/v1/overview", Some(&ops), None).await.status(),
        200,
        "the same token works again"
    );
    assert_eq!(console().await, 303, "the old console session stays ended: enabling brings no sign-in back");
    assert_eq!(http_sign_in(&app.base_url, &ops, "/ops/overview", false).await.status(), 303, "a fresh sign-in works");
    let not_disabled = call(
        &app,
        Method::POST,
        &format!("/ops/v1/operators/{id}/enable"),
        Some(&admin),
        Some(json!({"reason": "again"})),
    )
    .await;
    assert_eq!(problem_code(not_disabled).await.1, "not_disabled");
    let disables = audit_rows(&app, "operator.disable").await;
    assert_eq!(disables.iter().map(|r| r.result.as_str()).collect::<Vec<_>>(), ["already_disabled", "ok"]);
    assert_eq!(
        (disables[1].target_id.as_str(), disables[1].reason.as_str()),
        (id.to_string().as_str(), "laptop stolen")
    );
    let enables = audit_rows(&app, "operator.enable").await;
    assert_eq!(enables.iter().map(|r| r.result.as_str()).collect::<Vec<_>>(), ["not_disabled", "ok"]);
}

async fn rotating_a_token_refuses_the_old_one_at_once_and_accepts_the_new_one(app: TestApp) {
    let admin = app.operator("admin").await;
    let viewer = app.operator("viewer").await;
    let id = operator_id(&viewer);
    let plain = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let cookie = session_cookie(&http_sign_in(&app.base_url, &viewer, "/ops/overview", false).await);
    let cookie = cookie.split(';').next().unwrap().to_owned();

    let rotated = call(
        &app,
        Method::POST,
        &format!("/ops/v1/operators/{id}/rotate-token"),
        Some(&admin),
        Some(json!({"reason": "token pasted in a chat"})),
    )
    .await;

    assert_eq!(rotated.status(), 200);
    let body: OperatorView = read(rotated).await;
    let new_token = body.token.clone().expect("the new token, shown once");
    assert_eq!(operator_id(&new_token), id, "the same operator, a new secret");
    assert_eq!((body.own_token, body.sessions_ended), (Some(false), Some(1)));
    assert_eq!(
        call(&app, Method::GET, "/ops/v1/audit", Some(&viewer), None).await.status(),
        401,
        "the old token, at once"
    );
    assert_eq!(call(&app, Method::GET, "/ops/v1/audit", Some(&new_token), None).await.status(), 200);
    let page = plain.get(app.url("/ops/overview")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(page.status(), 303, "a console session signed in with the old token ended");

    // An admin rotates their own token: told so, and the new one is theirs from now on.
    let own = call(
        &app,
        Method::POST,
        &format!("/ops/v1/operators/{}/rotate-token", operator_id(&admin)),
        Some(&admin),
        Some(json!({})),
    )
    .await;
    assert_eq!(own.status(), 200);
    let own: OperatorView = read(own).await;
    assert_eq!(own.own_token, Some(true));
    let admin_now = own.token.expect("the new token, shown once");
    assert_eq!(call(&app, Method::GET, "/ops/v1/operators", Some(&admin), None).await.status(), 401);
    let listed: Value =
        call(&app, Method::GET, "/ops/v1/operators", Some(&admin_now), None).await.json().await.unwrap();
    let operators: List<OperatorView> = typed(listed.clone());
    let rotated_at = |who: uuid::Uuid| operators.data.iter().find(|o| o.id == who).unwrap().token_rotated_at;
    assert!(rotated_at(id).is_some() && rotated_at(operator_id(&admin)).is_some());
    assert_no_secret(&listed.to_string(), &[&admin, &admin_now, &viewer, &new_token]);

    let rows = audit_rows(&app, "operator.rotate_token").await;
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[1].target_id.as_str(), rows[1].reason.as_str()),
        (id.to_string().as_str(), "token pasted in a chat")
    );
    assert_eq!(rows[0].parameters.0["self_rotation"], true);
    let everything: Value =
        call(&app, Method::GET, "/ops/v1/audit", Some(&admin_now), None).await.json().await.unwrap();
    assert_no_secret(&everything.to_string(), &[&admin, &admin_now, &viewer, &new_token]);
    let unknown = call(
        &app,
        Method::POST,
        &format!("/ops/v1/operators/{}/rotate-token", uuid::Uuid::now_v7()),
        Some(&admin_now),
        Some(json!({})),
    )
    .await;
    assert_eq!(unknown.status(), 404);
}

async fn the_last_enabled_admin_cannot_be_disabled_even_by_two_admins_at_once(app: TestApp) {
    let only = app.operator("admin").await;
    let only_id = operator_id(&only);
    let own = call(
        &app,
        Method::POST,
        &format!("/ops/v1/operators/{only_id}/disable"),
        Some(&only),
        Some(json!({"reason": "leaving"})),
    )
    .await;
    let (status, code, body) = problem_code(own).await;
    assert_eq!((status, code.as_str()), (409, "last_admin"));
    assert!(body.detail.as_str().contains("another admin"), "says what to do: {body:?}");
    assert_eq!(call(&app, Method::GET, "/ops/v1/operators", Some(&only), None).await.status(), 200, "still in");
    assert_eq!(audit_rows(&app, "operator.disable").await[0].result, "last_admin");

    // Two admins disable each other at the same moment: exactly one wins, one admin remains.
    // A few rounds, each between the survivor of the last and a new admin.
    let mut survivor = only;
    for round in 0..4 {
        let newcomer = app.operator("admin").await;
        let (a_path, b_path) = (
            format!("/ops/v1/operators/{}/disable", operator_id(&newcomer)),
            format!("/ops/v1/operators/{}/disable", operator_id(&survivor)),
        );
        let (a, b) = tokio::join!(
            call(&app, Method::POST, &a_path, Some(&survivor), Some(json!({"reason": "race a"}))),
            call(&app, Method::POST, &b_path, Some(&newcomer), Some(json!({"reason": "race b"}))),
        );
        let statuses = [a.status().as_u16(), b.status().as_u16()];
        assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1, "round {round}: one disable wins: {statuses:?}");
        assert!(
            statuses.iter().all(|s| [200, 401, 409].contains(s)),
            "round {round}: the other is refused: {statuses:?}"
        );
        let operators = withdrawals::storage::credentials::list_operators(&app.db).await.unwrap();
        let enabled: Vec<_> = operators.iter().filter(|o| o.role == Role::Admin && o.disabled_at.is_none()).collect();
        assert_eq!(enabled.len(), 1, "round {round}");
        if enabled[0].id == operator_id(&newcomer) {
            survivor = newcomer;
        }
    }
}

async fn every_lifecycle_route_refuses_a_non_admin_with_403_before_the_body_and_audits_it(app: TestApp) {
    let alice = app.customer("100.00").await;
    let viewer = app.operator("viewer").await;
    let operator = app.operator("operator").await;
    let admin = app.operator("admin").await;
    let account = alice.account_id;
    let key = key_id(&alice.api_key);
    // Another operator: one's own token is every role's to rotate (tests/api/two_person.rs).
    let target = operator_id(&app.operator("operator").await);
    let reads = [format!("/ops/v1/accounts/{account}/keys"), "/ops/v1/operators".to_owned()];
    let writes = [
        format!("/ops/v1/accounts/{account}/keys"),
        format!("/ops/v1/api-keys/{key}/revoke"),
        format!("/ops/v1/operators/{target}/disable"),
        format!("/ops/v1/operators/{target}/enable"),
        format!("/ops/v1/operators/{target}/rotate-token"),
    ];

    for (who, token) in [("no token", None), ("customer key", Some(alice.api_key.as_str()))] {
        for path in &reads {
            assert_eq!(call(&app, Method::GET, path, token, None).await.status(), 401, "{who} GET {path}");
        }
        for path in &writes {
            assert_eq!(
                call(&app, Method::POST, path, token, Some(json!({"reason": "x"}))).await.status(),
                401,
                "{who} POST {path}"
            );
        }
    }
    for (who, token) in [("viewer", &viewer), ("operator", &operator)] {
        for path in &reads {
            let (status, code, _) = problem_code(call(&app, Method::GET, path, Some(token), None).await).await;
            assert_eq!((status, code.as_str()), (403, "forbidden"), "{who} GET {path}");
        }
        for path in &writes {
            // A well-formed body, a body of the wrong shape, and one that is not JSON at all: the
            // role is refused first every time (never a 422 that reveals the body's rules).
            for body in [json!({"reason": "let me"}), json!({"unexpected": [1, 2]})] {
                let (status, code, _) =
                    problem_code(call(&app, Method::POST, path, Some(token), Some(body)).await).await;
                assert_eq!((status, code.as_str()), (403, "forbidden"), "{who} POST {path}");
            }
            let garbage = app
                .client
                .post(app.url(path))
                .bearer_auth(token)
                .header("content-type", "application/json")
                .body("{not json")
                .send()
                .await
                .unwrap();
            assert_eq!(garbage.status(), 403, "{who} malformed POST {path}");
        }
    }
    // Nothing changed: the key works, the operator is enabled with the same token.
    assert_eq!(balances_status(&app, &app.base_url, &alice.api_key).await, 200);
    assert_eq!(call(&app, Method::GET, "/ops/v1/audit", Some(&operator), None).await.status(), 200);

    // Every refusal is one audit row: who, which action, the target, result `forbidden`.
    let refusals = audit::list(&app.db, &AuditFilter { limit: 1_000, ..Default::default() }).await.unwrap();
    let expected_per_role = [
        ("api_key.list", 1),
        ("operator.list", 1),
        ("api_key.create", 3),
        ("api_key.revoke", 3),
        ("operator.disable", 3),
        ("operator.enable", 3),
        ("operator.rotate_token", 3),
    ];
    for (role, token) in [(Role::Viewer, &viewer), (Role::Operator, &operator)] {
        for (action, count) in expected_per_role {
            // (Leaving out each operator's rotation of their own token when the harness enrolled them.)
            let me = operator_id(token);
            let rows: Vec<_> = refusals
                .iter()
                .filter(|r| r.operator_id == me && r.action == action && r.target_id != me.to_string())
                .collect();
            assert_eq!(rows.len(), count, "{role} {action}: {rows:?}");
            assert!(rows.iter().all(|r| r.result == "forbidden" && r.role == role), "{rows:?}");
        }
    }
    let revoke = refusals.iter().find(|r| r.action == "api_key.revoke").unwrap();
    assert_eq!((revoke.target_type.as_str(), revoke.target_id.as_str()), ("api_key", key.to_string().as_str()));

    // The same malformed bodies from an admin are what they are: 422, not audited as actions.
    let garbage = app
        .client
        .post(app.url(&format!("/ops/v1/operators/{target}/disable")))
        .bearer_auth(&admin)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(problem_code(garbage).await.0, 422);
    let no_reason = call(
        &app,
        Method::POST,
        &format!("/ops/v1/operators/{target}/disable"),
        Some(&admin),
        Some(json!({"reason": " "})),
    )
    .await;
    let (status, code, _) = problem_code(no_reason).await;
    assert_eq!((status, code.as_str()), (422, "reason_required"));
}

/// The binary with both where the API is and where the database is.
fn withdrawals_cli(app: &TestApp, url: &str, token: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_withdrawals"))
        .args(args)
        .env("WITHDRAWALS_URL", url)
        .env("WITHDRAWALS_TOKEN", token)
        .env("DATABASE_URL", &app.database_url)
        .output()
        .expect("run the withdrawals binary")
}

fn ok(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

async fn the_cli_manages_keys_and_operators_through_the_api_and_directly_when_it_is_down(app: TestApp) {
    let alice = app.customer("100.00").await;
    let admin = app.operator("admin").await;
    let viewer = app.operator("viewer").await;
    let account = alice.account_id.to_string();
    let api = app.base_url.clone();

    // Keys: create (printed once), list (no secrets), revoke.
    let created: ApiKeyView = serde_json::from_str(&ok(&withdrawals_cli(
        &app,
        &api,
        &admin,
        &["accounts", "keys", "create", &account, "--label", "mobile app", "--json"],
    )))
    .unwrap();
    let new_key = created.api_key.clone().expect("the new key, shown once");
    assert_eq!(balances_status(&app, &api, &new_key).await, 200);
    let human = ok(&withdrawals_cli(&app, &api, &admin, &["accounts", "keys", "create", &account]));
    assert!(human.contains("api_key:    wdk_") && human.contains("shown once"), "{human}");
    let third_key = human.lines().find_map(|l| l.strip_prefix("api_key:    ")).unwrap().to_owned();
    let table = ok(&withdrawals_cli(&app, &api, &admin, &["accounts", "keys", "list", &account]));
    assert_eq!(table.lines().count(), 4, "a header and three keys: {table}");
    assert!(table.contains("mobile app") && table.contains(&created.id.to_string()[..8]), "{table}");
    let listed = ok(&withdrawals_cli(&app, &api, &admin, &["accounts", "keys", "list", &account, "--json"]));
    assert_no_secret(&format!("{table}{listed}"), &[&alice.api_key, &new_key, &third_key]);
    let revoked = ok(&withdrawals_cli(
        &app,
        &api,
        &admin,
        &["accounts", "keys", "revoke", &key_id(&alice.api_key).to_string(), "--reason", "rotated to mobile app key"],
    ));
    assert!(revoked.contains("fails from the next request on"), "{revoked}");
    assert_eq!(balances_status(&app, &api, &alice.api_key).await, 401);
    assert_eq!(balances_status(&app, &api, &new_key).await, 200);

    // Roles apply to the CLI: a viewer is refused, one line, and the refusal is audited.
    let forbidden = withdrawals_cli(&app, &api, &viewer, &["accounts", "keys", "list", &account]);
    assert!(!forbidden.status.success());
    let stderr = String::from_utf8(forbidden.stderr).unwrap();
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("403 forbidden"), "{stderr}");

    // Operators: list, rotate (printed once), disable, enable.
    let ops = app.operator("operator").await;
    let ops_id = operator_id(&ops).to_string();
    let table = ok(&withdrawals_cli(&app, &api, &admin, &["operators", "list"]));
    assert!(table.contains(&ops_id) && table.contains("enabled"), "{table}");
    assert_no_secret(&table, &[&admin, &viewer, &ops]);
    let rotated =
        ok(&withdrawals_cli(&app, &api, &admin, &["operators", "rotate-token", &ops_id, "--reason", "yearly"]));
    let ops_now = rotated.lines().find_map(|l| l.strip_prefix("token:       ")).unwrap().to_owned();
    assert_eq!(call(&app, Method::GET, "/ops/v1/audit", Some(&ops), None).await.status(), 401);
    assert_eq!(call(&app, Method::GET, "/ops/v1/audit", Some(&ops_now), None).await.status(), 200);
    ok(&withdrawals_cli(&app, &api, &admin, &["operators", "disable", &ops_id, "--reason", "left the team"]));
    assert_eq!(call(&app, Method::GET, "/ops/v1/audit", Some(&ops_now), None).await.status(), 401);
    ok(&withdrawals_cli(&app, &api, &admin, &["operators", "enable", &ops_id, "--reason", "came back"]));
    assert_eq!(call(&app, Method::GET, "/ops/v1/audit", Some(&ops_now), None).await.status(), 200);
    let last_admin = withdrawals_cli(
        &app,
        &api,
        &admin,
        &["operators", "disable", &operator_id(&admin).to_string(), "--reason", "me"],
    );
    assert!(!last_admin.status.success());
    assert!(String::from_utf8_lossy(&last_admin.stderr).contains("409 last_admin"));

    // The API is down (nothing listens at this URL): --direct runs the same routes against the
    // database, with the same token check, role and audit.
    let down = "http://127.0.0.1:9";
    let refused = withdrawals_cli(
        &app,
        down,
        &admin,
        &["accounts", "keys", "revoke", &key_id(&new_key).to_string(), "--reason", "x"],
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("cannot reach"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let direct = ok(&withdrawals_cli(
        &app,
        down,
        &admin,
        &[
            "accounts",
            "keys",
            "revoke",
            &key_id(&new_key).to_string(),
            "--reason",
            "leaked during the outage",
            "--direct",
        ],
    ));
    assert!(direct.contains("revoked"), "{direct}");
    assert_eq!(balances_status(&app, &api, &new_key).await, 401, "the running API sees the direct revoke at once");
    ok(&withdrawals_cli(
        &app,
        down,
        &admin,
        &["operators", "disable", &ops_id, "--reason", "outage lockdown", "--direct"],
    ));
    assert_eq!(call(&app, Method::GET, "/ops/v1/audit", Some(&ops_now), None).await.status(), 401);
    let viewer_direct =
        withdrawals_cli(&app, down, &viewer, &["operators", "enable", &ops_id, "--reason", "x", "--direct"]);
    assert!(String::from_utf8_lossy(&viewer_direct.stderr).contains("403 forbidden"), "--direct enforces the role too");
    let no_token =
        withdrawals_cli(&app, down, "wdo_00000000000000000000000000000000_nope", &["operators", "list", "--direct"]);
    assert!(String::from_utf8_lossy(&no_token.stderr).contains("401 unauthorized"), "and the token");

    let trail_text = ok(&withdrawals_cli(&app, &api, &admin, &["audit", "--json", "--limit", "100"]));
    let trail: Page<AuditEntry> = serde_json::from_str(&trail_text).unwrap();
    let rows: Vec<(String, String, String)> = trail.data.into_iter().map(|r| (r.action, r.result, r.reason)).collect();
    for expected in [
        ("api_key.revoke", "ok", "leaked during the outage"),
        ("operator.disable", "ok", "outage lockdown"),
        ("operator.enable", "forbidden", ""),
        ("api_key.list", "forbidden", ""),
        ("operator.rotate_token", "ok", "yearly"),
        ("operator.disable", "last_admin", "me"),
    ] {
        assert!(
            rows.iter().any(|(a, r, why)| (a.as_str(), r.as_str(), why.as_str()) == expected),
            "{expected:?} in {rows:#?}"
        );
    }
    assert_no_secret(&trail_text, &[&alice.api_key, &new_key, &third_key, &admin, &ops, &ops_now]);
}
