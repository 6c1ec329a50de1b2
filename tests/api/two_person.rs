//! Issue 27: the two-person rule needs two people (SPEC §8). An approval is refused when the
//! approver's current credential was issued (created, rotated, re-enabled) by the requester, or by
//! a local actor with only `DATABASE_URL`; every credential change is audited with its actor.
//! Replay approvals follow the same rule (tests/api/replays.rs). Both backends.

use std::process::Command;

use reqwest::Method;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use uuid::Uuid;
use withdrawals::config::AppConfig;
use withdrawals::domain::{DecisionStatus, WithdrawalId, WithdrawalStatus};
use withdrawals::ops::types::{List, OperatorView, Page, ReviewDecisionView};
use withdrawals::storage::audit::{self, AuditFilter, AuditRow};
use withdrawals::storage::withdrawals as store;

use crate::both_backends;
use crate::harness::{operator_id, problem_code, read, serve_extra, TestApp};
use crate::ops::{call, rejected_withdrawal, version_of};

both_backends!(
    a_token_the_requester_rotated_cannot_approve_their_large_fail_but_another_admins_can,
    a_token_the_requester_re_enabled_cannot_approve_until_its_holder_rotates_it,
    operators_create_with_only_the_database_is_audited_as_the_local_actor_and_cannot_approve_until_rotated,
    every_role_rotates_its_own_token_and_only_an_admin_rotates_anothers,
);

/// The ops API of a second app on the same database whose two-person threshold is 20 USD (the
/// withdrawals here are 25.00).
async fn strict_app(app: &TestApp) -> String {
    let mut config = AppConfig::default();
    config.review.approval_thresholds.default_max = Decimal::from(20);
    serve_extra(app, config).await
}

async fn post(app: &TestApp, base: &str, path: &str, token: &str, body: Value) -> reqwest::Response {
    app.client.post(format!("{base}{path}")).bearer_auth(token).json(&body).send().await.unwrap()
}

/// `requester` asks to `fail` withdrawal `id` (25.00, over the threshold): 202, pending.
async fn request_fail(app: &TestApp, base: &str, id: WithdrawalId, requester: &str) {
    let version = version_of(app, id, requester).await;
    let requested = post(
        app,
        base,
        &format!("/ops/v1/withdrawals/{id}/resolve"),
        requester,
        json!({"action": "fail", "reason": "bad account", "version": version}),
    )
    .await;
    assert_eq!(requested.status(), 202);
}

async fn approve(app: &TestApp, base: &str, id: WithdrawalId, token: &str) -> reqwest::Response {
    post(app, base, &format!("/ops/v1/withdrawals/{id}/decision/approve"), token, json!({"reason": "checked"})).await
}

/// The refusal leaves everything as it was: the decision waits, the withdrawal is in review and
/// the 25.00 are still held.
async fn assert_still_pending(app: &TestApp, id: WithdrawalId, alice: &crate::harness::Customer, token: &str) {
    let waiting: Page<ReviewDecisionView> = app.ops_get(token, "/ops/v1/review-decisions").await;
    assert_eq!((waiting.data[0].withdrawal_id, waiting.data[0].status), (id.0, DecisionStatus::Pending), "{waiting:?}");
    let w = store::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!(w.status, WithdrawalStatus::RequiresReview);
    assert_eq!(app.usd_balance(alice).await, ("75.00".into(), "25.00".into(), "0.00".into()), "no money moved");
    app.assert_ledger_invariant().await;
}

async fn audit_of(app: &TestApp, action: &str) -> Vec<AuditRow> {
    let filter = AuditFilter { action: Some(action.to_owned()), limit: 100, ..Default::default() };
    audit::list(&app.db, &filter).await.unwrap()
}

async fn a_token_the_requester_rotated_cannot_approve_their_large_fail_but_another_admins_can(app: TestApp) {
    let base = strict_app(&app).await;
    let (id, alice) = rejected_withdrawal(&app).await;
    let (a, b, c) = (app.operator("admin").await, app.operator("admin").await, app.operator("admin").await);
    let b_id = operator_id(&b);
    request_fail(&app, &base, id, &a).await;

    // A hands themself a working token for B.
    let rotated = post(&app, &base, &format!("/ops/v1/operators/{b_id}/rotate-token"), &a, json!({})).await;
    assert_eq!(rotated.status(), 200);
    let rotated: OperatorView = read(rotated).await;
    assert_eq!(rotated.credential_issued_by, Some(operator_id(&a)), "{rotated:?}");
    let b_by_a = rotated.token.expect("the new token, shown once");
    let refused = approve(&app, &base, id, &b_by_a).await;

    let (status, code, problem) = problem_code(refused).await;
    assert_eq!((status, code.as_str()), (403, "approval_needs_another_person"), "{problem:?}");
    assert_still_pending(&app, id, &alice, &c).await;
    let rotation = audit_of(&app, "operator.rotate_token").await;
    let by_a = rotation.iter().find(|r| r.target_id == b_id.to_string()).expect("the rotation is audited");
    assert_eq!((by_a.operator_id, by_a.result.as_str()), (operator_id(&a), "ok"));
    assert_eq!(by_a.parameters.0["self_rotation"], false);
    let refusals = audit_of(&app, "withdrawal.decision.approve").await;
    assert_eq!(refusals[0].result, "approval_needs_another_person");
    assert_eq!(refusals[0].operator_id, b_id);

    // C, who issued nothing and whose token A did not issue, is a second person.
    let approved = approve(&app, &base, id, &c).await;

    assert_eq!(approved.status(), 200);
    assert_eq!(app.usd_balance(&alice).await, ("100.00".into(), "0.00".into(), "0.00".into()));
    app.assert_ledger_invariant().await;
}

async fn a_token_the_requester_re_enabled_cannot_approve_until_its_holder_rotates_it(app: TestApp) {
    let base = strict_app(&app).await;
    let (id, alice) = rejected_withdrawal(&app).await;
    let (a, b) = (app.operator("admin").await, app.operator("operator").await);
    let b_id = operator_id(&b);
    request_fail(&app, &base, id, &a).await;
    let reason = json!({"reason": "on leave"});
    assert_eq!(post(&app, &base, &format!("/ops/v1/operators/{b_id}/disable"), &a, reason).await.status(), 200);
    let reason = json!({"reason": "back"});
    assert_eq!(post(&app, &base, &format!("/ops/v1/operators/{b_id}/enable"), &a, reason).await.status(), 200);

    // B's token is the one B made their own, but A decided that it counts again.
    let refused = approve(&app, &base, id, &b).await;

    let (status, code, _) = problem_code(refused).await;
    assert_eq!((status, code.as_str()), (403, "approval_needs_another_person"));
    assert_still_pending(&app, id, &alice, &b).await;
    let enabled = audit_of(&app, "operator.enable").await;
    assert_eq!((enabled[0].operator_id, enabled[0].target_id.as_str()), (operator_id(&a), b_id.to_string().as_str()));

    // B rotates their own token: now it is theirs, and B may approve.
    let own = post(&app, &base, &format!("/ops/v1/operators/{b_id}/rotate-token"), &b, json!({})).await;
    let own: OperatorView = read(own).await;
    assert_eq!(own.own_token, Some(true));
    let approved = approve(&app, &base, id, own.token.as_deref().unwrap()).await;
    assert_eq!(approved.status(), 200);
    assert_eq!(app.usd_balance(&alice).await, ("100.00".into(), "0.00".into(), "0.00".into()));
    app.assert_ledger_invariant().await;
}

async fn operators_create_with_only_the_database_is_audited_as_the_local_actor_and_cannot_approve_until_rotated(
    app: TestApp,
) {
    let base = strict_app(&app).await;
    let (id, alice) = rejected_withdrawal(&app).await;
    let a = app.operator("operator").await;
    request_fail(&app, &base, id, &a).await;

    // No token, no API: only DATABASE_URL.
    let created = Command::new(env!("CARGO_BIN_EXE_withdrawals"))
        .args(["operators", "create", "--name", "Mallory", "--role", "admin", "--json"])
        .env("DATABASE_URL", &app.database_url)
        .env("USER", "mallory-shell")
        .env_remove("WITHDRAWALS_TOKEN")
        .output()
        .expect("run the withdrawals binary");
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let created: Value = serde_json::from_slice(&created.stdout).unwrap();
    let mallory = created["token"].as_str().unwrap().to_owned();
    let mallory_id = created["operator_id"].as_str().unwrap().to_owned();

    let rows = audit_of(&app, "operator.create").await;
    let row = rows.iter().find(|r| r.target_id == mallory_id).expect("operators create is audited");
    assert_eq!(
        (row.operator_id, row.operator_name.as_str(), row.result.as_str()),
        (Uuid::nil(), "local:mallory-shell", "ok")
    );
    assert_eq!(row.parameters.0["role"], "admin");
    let refused = approve(&app, &base, id, &mallory).await;
    let (status, code, problem) = problem_code(refused).await;
    assert_eq!((status, code.as_str()), (403, "approval_needs_another_person"), "{problem:?}");
    assert!(problem.detail.as_str().contains("database access"), "{problem:?}");
    assert_still_pending(&app, id, &alice, &a).await;
    // The local actor is no operator anyone can list or sign in as.
    let listed: List<OperatorView> = app.ops_get(&mallory, "/ops/v1/operators").await;
    assert!(!listed.data.iter().any(|o| o.id == Uuid::nil()), "{listed:?}");
    let mine = listed.data.iter().find(|o| o.id.to_string() == mallory_id).unwrap();
    assert_eq!(mine.credential_issuer_name.as_deref(), Some("local:mallory-shell"));

    // The holder makes the token their own (audited); then it counts as a person.
    let own = post(&app, &base, &format!("/ops/v1/operators/{mallory_id}/rotate-token"), &mallory, json!({})).await;
    let own: OperatorView = read(own).await;
    let approved = approve(&app, &base, id, own.token.as_deref().unwrap()).await;

    assert_eq!(approved.status(), 200);
    let trail: Vec<(String, String)> =
        audit_of(&app, "operator.rotate_token").await.iter().map(|r| (r.target_id.clone(), r.result.clone())).collect();
    assert!(trail.contains(&(mallory_id.clone(), "ok".into())), "{trail:?}");
    app.assert_ledger_invariant().await;
}

async fn every_role_rotates_its_own_token_and_only_an_admin_rotates_anothers(app: TestApp) {
    let (viewer, operator, other) =
        (app.operator("viewer").await, app.operator("operator").await, app.operator("operator").await);
    let other_id = operator_id(&other);

    for token in [&viewer, &operator] {
        // Another's token: 403 before the body is read (garbage is not a 422).
        let garbage = app
            .client
            .post(app.url(&format!("/ops/v1/operators/{other_id}/rotate-token")))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        let (status, code, _) = problem_code(garbage).await;
        assert_eq!((status, code.as_str()), (403, "forbidden"));
        // One's own: a new token, the old one refused.
        let path = format!("/ops/v1/operators/{}/rotate-token", operator_id(token));
        let rotated = call(&app, Method::POST, &path, Some(token), Some(json!({"reason": "mine"}))).await;
        assert_eq!(rotated.status(), 200);
        let rotated: OperatorView = read(rotated).await;
        assert_eq!(rotated.credential_issued_by, Some(operator_id(token)));
        let fresh = rotated.token.as_deref().unwrap();
        assert_eq!(call(&app, Method::GET, "/ops/v1/audit", Some(token), None).await.status(), 401);
        assert_eq!(call(&app, Method::GET, "/ops/v1/review-decisions", Some(fresh), None).await.status(), 200);
    }
    assert_eq!(call(&app, Method::GET, "/ops/v1/review-decisions", Some(&other), None).await.status(), 200);
}
