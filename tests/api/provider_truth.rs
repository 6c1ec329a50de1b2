//! Issue 16: no decision — by a worker, reconciliation or an operator — moves money against the
//! provider's own record. Review decisions are checked live against the provider (SPEC §8.1),
//! every transfer read is checked against the withdrawal (SPEC §4 "mismatch"), a pending transfer
//! is polled for the whole reconciliation window (SPEC §7), and large decisions need a second
//! operator. Both backends, the provider mock over real HTTP.

use std::process::Command;
use std::time::Duration;

use provider_mocks::{FaultConfig, FaultEffect, FaultRule, RouteMatch, Settlement, SettlementMode, TransferStatus};
use rust_decimal::Decimal;
use serde_json::{json, Value};
use withdrawals::config::AppConfig;
use withdrawals::customer::types::WithdrawalView;
use withdrawals::domain::{DecisionStatus, Evidence, ReviewAction, VerdictKind, WithdrawalId, WithdrawalStatus};
use withdrawals::ops::types::{Page, ResolveStatus, Resolved, ReviewDecisionView, WithdrawalDetail};
use withdrawals::storage::audit::{self, AuditFilter};
use withdrawals::storage::{dead_letters, reconciliations, withdrawals as store};

use crate::both_backends;
use crate::harness::{operator_id, problem_code, read, serve_extra, worker_config, Customer, TestApp};
use crate::ops::{paid_but_unknown, rejected_withdrawal, resolve, version_of};

both_backends!(
    failing_or_retrying_while_the_provider_holds_a_pending_transfer_is_refused_and_complete_waits_for_paid,
    an_unreachable_provider_refuses_every_money_decision_and_an_allowed_one_stores_the_answer,
    a_create_answer_with_a_different_amount_is_never_completed,
    a_lookup_with_a_different_amount_is_never_completed,
    complete_is_refused_when_the_providers_amount_differs,
    a_pending_transfer_is_polled_past_the_attempt_cap_until_it_settles,
    a_returned_transfer_found_by_reconciliation_completes_the_withdrawal,
    a_large_decision_waits_for_a_second_operator_who_is_not_the_first,
    the_cli_lists_approves_and_rejects_pending_decisions,
    a_waiting_decision_is_superseded_when_reconciliation_settles_the_withdrawal_first,
    a_decision_requested_on_a_version_that_moved_meanwhile_is_not_stored,
);

const WAIT: Duration = Duration::from_secs(25);

fn usd(amount: &str) -> Decimal {
    amount.parse().unwrap()
}

/// What the provider really paid under this withdrawal's key (paid or returned transfers).
fn provider_paid(app: &TestApp, id: WithdrawalId) -> Decimal {
    app.provider
        .mock
        .transfers()
        .iter()
        .filter(|t| t.idempotency_key == id.to_string())
        .filter(|t| matches!(t.status, TransferStatus::Paid | TransferStatus::Returned))
        .map(|t| t.amount)
        .sum()
}

fn transfer_id(app: &TestApp, id: WithdrawalId) -> String {
    app.provider.mock.transfers().into_iter().find(|t| t.idempotency_key == id.to_string()).expect("a transfer").id
}

/// A withdrawal of 40.00 (of 100.00) whose transfer the provider accepted as `pending` and still
/// holds pending after the reconciliation window closed: `requires_review`, funds held. The
/// transfer settles `settles_paid`-ly `delay_ms` after it was created.
async fn pending_in_review(app: &TestApp, delay_ms: u64) -> (WithdrawalId, Customer) {
    app.provider.mock.set_settlement(Settlement { mode: SettlementMode::Async, delay_ms, fail_ratio: 0.0 });
    let mut config = worker_config("w-pending");
    config.pending_poll = Duration::from_millis(50);
    config.reconcile_policy.max_elapsed = Duration::from_millis(600);
    let stop = app.start_worker(app.gateway.clone(), config);
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k-pending", "40.00").await;
    app.wait_for_status(id, WithdrawalStatus::RequiresReview, WAIT).await;
    stop.cancel();
    app.provider.mock.set_settlement(Settlement::default());
    (id, alice)
}

/// The evidence the withdrawal's last move rests on, read as the typed record it was written as
/// (an unknown shape fails the test).
async fn latest_transition_evidence(app: &TestApp, id: WithdrawalId) -> Evidence {
    let transitions = store::transitions(&app.db, app.key(id).await).await.unwrap();
    let stored = transitions.last().and_then(|t| t.evidence.clone()).expect("evidence stored with the move").0;
    Evidence::read(&stored).unwrap_or_else(|e| panic!("{e}: {stored}"))
}

async fn failing_or_retrying_while_the_provider_holds_a_pending_transfer_is_refused_and_complete_waits_for_paid(
    app: TestApp,
) {
    let (id, alice) = pending_in_review(&app, 3_000).await;
    let operator = app.operator("operator").await;
    let version = version_of(&app, id, &operator).await;
    // Why it waits is visible to the customer and the operator (not null).
    let shown: WithdrawalView = read(app.get(&alice, &format!("/v1/withdrawals/{id}")).send().await.unwrap()).await;
    assert_eq!(shown.failure_code.as_deref(), Some("side_effect_unknown"));

    // The reproduced double payment: `fail` released the hold, then the provider paid.
    for action in ["fail", "retry"] {
        let refused =
            resolve(&app, id, &operator, json!({"action": action, "reason": "hurried", "version": version})).await;
        let (status, code, _) = problem_code(refused).await;
        assert_eq!((status, code.as_str()), (409, "transfer_pending_at_provider"), "{action}");
    }
    let reference = transfer_id(&app, id);
    let early = resolve(
        &app,
        id,
        &operator,
        json!({"action": "complete", "reason": "looks paid", "version": version, "provider_reference": reference}),
    )
    .await;
    let (status, code, _) = problem_code(early).await;
    assert_eq!((status, code.as_str()), (422, "provider_reference_mismatch"), "pending is not paid");
    assert_eq!(app.usd_balance(&alice).await, ("60.00".into(), "40.00".into(), "0.00".into()), "nothing moved");

    // The bank settles it: now failing would release money the provider paid out.
    app.eventually("the transfer settles paid", WAIT, || async {
        (provider_paid(&app, id) == usd("40.00")).then_some(())
    })
    .await;
    let paid = resolve(&app, id, &operator, json!({"action": "fail", "reason": "hurried", "version": version})).await;
    assert_eq!(problem_code(paid).await.1, "transfer_paid_at_provider");
    let done = resolve(
        &app,
        id,
        &operator,
        json!({"action": "complete", "reason": "provider paid", "version": version, "provider_reference": reference}),
    )
    .await;
    assert_eq!(done.status(), 200);
    assert_eq!(app.usd_balance(&alice).await, ("60.00".into(), "0.00".into(), "40.00".into()));
    assert_eq!(provider_paid(&app, id), usd("40.00"), "paid_out equals what the provider paid");
    let evidence = latest_transition_evidence(&app, id).await;
    assert_eq!(evidence.verdict, VerdictKind::Paid);
    let transfer = evidence.transfer.expect("the provider's transfer");
    assert_eq!((transfer.id.as_str(), transfer.amount), (reference.as_str(), usd("40.00")));
    let refusals = audit::list(
        &app.db,
        &AuditFilter { action: Some("withdrawal.resolve".into()), limit: 20, ..Default::default() },
    )
    .await
    .unwrap();
    let results: Vec<&str> = refusals.iter().rev().map(|r| r.result.as_str()).collect();
    assert_eq!(
        results,
        [
            "transfer_pending_at_provider",
            "transfer_pending_at_provider",
            "provider_reference_mismatch",
            "transfer_paid_at_provider",
            "ok"
        ]
    );
    app.assert_ledger_invariant().await;
}

async fn an_unreachable_provider_refuses_every_money_decision_and_an_allowed_one_stores_the_answer(app: TestApp) {
    let (id, alice) = rejected_withdrawal(&app).await;
    let operator = app.operator("operator").await;
    let version = version_of(&app, id, &operator).await;
    assert_eq!(store::find(&app.db, id).await.unwrap().unwrap().failure_code.as_deref(), Some("dependency_rejected"));
    app.provider
        .mock
        .set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Lookup, FaultEffect::LookupUnavailable)] });
    for action in ["fail", "retry"] {
        let blind = resolve(&app, id, &operator, json!({"action": action, "reason": "r", "version": version})).await;
        let (status, code, _) = problem_code(blind).await;
        assert_eq!((status, code.as_str()), (503, "provider_unavailable"), "{action}: never decide blind");
    }
    assert_eq!(app.usd_balance(&alice).await.1, "25.00", "nothing moved");

    app.provider.mock.set_faults(FaultConfig::default());
    let failed =
        resolve(&app, id, &operator, json!({"action": "fail", "reason": "bad account", "version": version})).await;
    assert_eq!(failed.status(), 200);
    let evidence = latest_transition_evidence(&app, id).await;
    assert_eq!((evidence.verdict, evidence.action), (VerdictKind::NoTransfer, Some(ReviewAction::Fail)));
    // The evidence timeline shows it.
    let shown: WithdrawalDetail = app.ops_get(&operator, &format!("/ops/v1/withdrawals/{id}")).await;
    let last = shown.transitions.last().unwrap().evidence.as_ref().expect("the move's evidence");
    assert_eq!(Evidence::read(last).unwrap().verdict, VerdictKind::NoTransfer);
    assert_eq!(app.usd_balance(&alice).await, ("100.00".into(), "0.00".into(), "0.00".into()));
    app.assert_ledger_invariant().await;
}

async fn a_create_answer_with_a_different_amount_is_never_completed(app: TestApp) {
    let add = usd("1.00");
    app.provider
        .mock
        .set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::WrongAmount { add })] });
    app.start_default_worker();
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "40.00").await;

    let w = app.wait_for_status(id, WithdrawalStatus::RequiresReview, WAIT).await;

    assert_eq!(w.failure_code.as_deref(), Some("provider_mismatch"));
    let letters = dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        (letters[0].category.as_str(), letters[0].error_code.as_str()),
        ("provider_mismatch", "amount_mismatch")
    );
    assert_eq!(letters[0].owner, "finance operations");
    // Both records are in the evidence.
    assert!(letters[0].error_message.contains(r#""amount":"40.00""#), "{}", letters[0].error_message);
    assert!(letters[0].error_message.contains(r#""amount":"41.00""#), "{}", letters[0].error_message);
    assert_eq!(app.usd_balance(&alice).await, ("60.00".into(), "40.00".into(), "0.00".into()), "never completed");
    // The attempt records the mismatch the submit saw, in the run that saw it: no detour
    // through reconciliation.
    let recorded = withdrawals::storage::attempts::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(
        recorded.iter().map(|a| a.outcome).collect::<Vec<_>>(),
        vec![Some(withdrawals::domain::AttemptResult::Mismatch)]
    );
    let jobs = withdrawals::storage::jobs::jobs_for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(jobs.iter().map(|j| j.kind.as_str()).collect::<Vec<_>>(), vec!["submit_payout"], "{jobs:?}");

    let operator = app.operator("operator").await;
    let version = version_of(&app, id, &operator).await;
    let reference = transfer_id(&app, id);
    let complete = resolve(
        &app,
        id,
        &operator,
        json!({"action": "complete", "reason": "r", "version": version, "provider_reference": reference}),
    )
    .await;
    let (status, code, body) = problem_code(complete).await;
    assert_eq!((status, code.as_str()), (422, "provider_reference_mismatch"));
    assert!(body.detail.as_str().contains("amount"), "{body:?}");
    let fail = resolve(&app, id, &operator, json!({"action": "fail", "reason": "r", "version": version})).await;
    assert_eq!(problem_code(fail).await.1, "provider_mismatch");
    app.assert_ledger_invariant().await;
}

/// A worker whose provider client gives up after 300 ms (so a held request is a timeout).
fn impatient_worker(app: &TestApp, config: withdrawals::jobs::worker::WorkerConfig) {
    let provider = withdrawals::provider::HttpProvider::new(withdrawals::provider::ProviderConfig {
        base_url: app.provider.mock.url(),
        api_key: secrecy::SecretString::from("test-provider-key"),
        connect_timeout: Duration::from_millis(300),
        request_timeout: Duration::from_millis(300),
    })
    .unwrap();
    app.start_worker(withdrawals::startup::gateway(std::sync::Arc::new(provider)), config);
}

async fn a_lookup_with_a_different_amount_is_never_completed(app: TestApp) {
    app.provider.mock.set_faults(FaultConfig {
        rules: vec![
            FaultRule::new(RouteMatch::Create, FaultEffect::TimeoutAfterCommit { ms: 2_000 }),
            FaultRule::new(RouteMatch::Lookup, FaultEffect::WrongAmount { add: usd("-0.01") }),
        ],
    });
    impatient_worker(&app, worker_config("w-impatient"));
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "40.00").await;

    let w = app.wait_for_status(id, WithdrawalStatus::RequiresReview, WAIT).await;

    assert_eq!(w.failure_code.as_deref(), Some("provider_mismatch"));
    let results = reconciliations::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    let mismatch = results
        .iter()
        .find(|r| r.result == withdrawals::domain::ReconciliationResult::Mismatch)
        .expect("a mismatch result");
    assert!(mismatch.detail.contains(r#""amount":"39.99""#), "{}", mismatch.detail);
    assert_eq!(
        dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap()[0].category,
        withdrawals::domain::Category::ProviderMismatch
    );
    assert_eq!(app.usd_balance(&alice).await, ("60.00".into(), "40.00".into(), "0.00".into()), "never completed");
    app.assert_ledger_invariant().await;
}

async fn complete_is_refused_when_the_providers_amount_differs(app: TestApp) {
    let (id, alice) = paid_but_unknown(&app).await;
    let operator = app.operator("operator").await;
    let version = version_of(&app, id, &operator).await;
    let reference = transfer_id(&app, id);
    // A transfer id the provider does not know (read by id to say so).
    let made_up = json!({"action": "complete", "reason": "r", "version": version, "provider_reference": "tr_made_up"});
    let (_, code, refused) = problem_code(resolve(&app, id, &operator, made_up).await).await;
    assert_eq!(code, "provider_reference_mismatch");
    let detail = refused.detail.as_str();
    assert!(detail.contains(&format!("paid this withdrawal as transfer {reference}")), "{detail}");
    assert!(detail.contains("the provider has no transfer tr_made_up"), "{detail}");
    let body = json!({"action": "complete", "reason": "provider shows it paid", "version": version, "provider_reference": reference});
    app.provider.mock.set_faults(FaultConfig {
        rules: vec![FaultRule::new(RouteMatch::Lookup, FaultEffect::WrongAmount { add: usd("100.00") })],
    });

    let (status, code, _) = problem_code(resolve(&app, id, &operator, body.clone()).await).await;

    assert_eq!((status, code.as_str()), (422, "provider_reference_mismatch"));
    assert_eq!(app.usd_balance(&alice).await.2, "0.00", "nothing settled");
    app.provider.mock.set_faults(FaultConfig::default());
    assert_eq!(resolve(&app, id, &operator, body).await.status(), 200);
    assert_eq!(app.usd_balance(&alice).await, ("75.00".into(), "0.00".into(), "25.00".into()));
    app.assert_ledger_invariant().await;
}

async fn a_pending_transfer_is_polled_past_the_attempt_cap_until_it_settles(app: TestApp) {
    app.provider.mock.set_settlement(Settlement { mode: SettlementMode::Async, delay_ms: 1_500, fail_ratio: 0.0 });
    let mut config = worker_config("w-patient");
    config.pending_poll = Duration::from_millis(50);
    // Two lookups would have been the end of it before: a pending answer is not capped.
    config.reconcile_policy.max_attempts = 2;
    config.reconcile_policy.max_elapsed = Duration::from_secs(20);
    app.start_worker(app.gateway.clone(), config);
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "40.00").await;

    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;

    let pending = reconciliations::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert!(
        pending.iter().filter(|r| r.result == withdrawals::domain::ReconciliationResult::Pending).count() >= 2,
        "{pending:#?}"
    );
    assert!(dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap().is_empty());
    assert_eq!(app.usd_balance(&alice).await.2, "40.00");
    assert_eq!(provider_paid(&app, id), usd("40.00"));
    app.assert_ledger_invariant().await;
}

async fn a_returned_transfer_found_by_reconciliation_completes_the_withdrawal(app: TestApp) {
    app.provider.mock.set_faults(FaultConfig {
        rules: vec![
            FaultRule::new(RouteMatch::Create, FaultEffect::TimeoutAfterCommit { ms: 2_000 }),
            FaultRule::new(RouteMatch::Lookup, FaultEffect::LookupUnavailable),
        ],
    });
    impatient_worker(&app, worker_config("w-impatient"));
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "40.00").await;
    app.eventually("the transfer executes", WAIT, || async { (provider_paid(&app, id) > Decimal::ZERO).then_some(()) })
        .await;
    assert!(app.provider.mock.return_transfer(&id.to_string(), "R01"));
    app.provider.mock.set_faults(FaultConfig::default());

    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;

    // The provider did pay; the return's re-credit is settlement's (SPEC §14.3, issue 19).
    let results = reconciliations::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert!(results.iter().any(|r| r.result == withdrawals::domain::ReconciliationResult::Returned), "{results:#?}");
    let transfer = latest_transition_evidence(&app, id).await.transfer.expect("the provider's transfer");
    assert_eq!(transfer.return_code.as_deref(), Some("R01"));
    assert_eq!(app.usd_balance(&alice).await.2, "40.00");
    app.assert_ledger_invariant().await;
}

/// The ops API of a second app on the same database whose two-person threshold is 20 USD.
async fn strict_app(app: &TestApp) -> String {
    let mut config = AppConfig::default();
    config.review.approval_thresholds.default_max = usd("20");
    serve_extra(app, config).await
}

async fn ops_at(app: &TestApp, base: &str, path: &str, token: &str, body: Value) -> reqwest::Response {
    app.client.post(format!("{base}{path}")).bearer_auth(token).json(&body).send().await.unwrap()
}

async fn a_large_decision_waits_for_a_second_operator_who_is_not_the_first(app: TestApp) {
    let base = strict_app(&app).await;
    let (id, alice) = rejected_withdrawal(&app).await;
    let (first, second, viewer) =
        (app.operator("operator").await, app.operator("operator").await, app.operator("viewer").await);
    let version = version_of(&app, id, &first).await;
    let resolve_path = format!("/ops/v1/withdrawals/{id}/resolve");
    let approve_path = format!("/ops/v1/withdrawals/{id}/decision/approve");

    let requested = ops_at(
        &app,
        &base,
        &resolve_path,
        &first,
        json!({"action": "fail", "reason": "bad account", "version": version}),
    )
    .await;

    assert_eq!(requested.status(), 202);
    let requested: Resolved = read(requested).await;
    assert_eq!(requested.status, Some(ResolveStatus::PendingApproval));
    let decision = requested.decision.expect("the stored decision");
    assert_eq!(Evidence::read(&decision.request_evidence).unwrap().verdict, VerdictKind::NoTransfer);
    assert_eq!(app.usd_balance(&alice).await.1, "25.00", "nothing moves before the approval");
    let again =
        ops_at(&app, &base, &resolve_path, &first, json!({"action": "fail", "reason": "again", "version": version}))
            .await;
    assert_eq!(problem_code(again).await.1, "decision_pending");
    let own = ops_at(&app, &base, &approve_path, &first, json!({"reason": "me too"})).await;
    let (status, code, _) = problem_code(own).await;
    assert_eq!((status, code.as_str()), (403, "second_operator_required"));
    let read_only = ops_at(&app, &base, &approve_path, &viewer, json!({"reason": "viewer"})).await;
    assert_eq!(read_only.status(), 403);
    // Approval asks the provider again: unreachable now, so nothing applies and it stays pending.
    app.provider
        .mock
        .set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Lookup, FaultEffect::LookupUnavailable)] });
    let blind = ops_at(&app, &base, &approve_path, &second, json!({"reason": "checked"})).await;
    assert_eq!(problem_code(blind).await.1, "provider_unavailable");
    app.provider.mock.set_faults(FaultConfig::default());

    let approved = ops_at(&app, &base, &approve_path, &second, json!({"reason": "checked the account"})).await;

    assert_eq!(approved.status(), 200);
    assert_eq!(app.usd_balance(&alice).await, ("100.00".into(), "0.00".into(), "0.00".into()));
    // The move rests on the answer to the approver's own question, typed as it was written.
    let evidence = latest_transition_evidence(&app, id).await;
    assert_eq!(evidence.verdict, VerdictKind::NoTransfer);
    assert_eq!(evidence.action, Some(ReviewAction::Fail));
    let approval = evidence.approval.expect("the approval it rests on");
    assert_eq!(approval.decision_id, decision.id);
    assert_eq!((approval.requested_by, approval.approved_by), (operator_id(&first), operator_id(&second)));
    let shown: WithdrawalDetail = app.ops_get(&first, &format!("/ops/v1/withdrawals/{id}")).await;
    assert_eq!(shown.review_decisions[0].status, DecisionStatus::Approved);
    let rows = audit::list(&app.db, &AuditFilter { target_id: Some(id.to_string()), limit: 20, ..Default::default() })
        .await
        .unwrap();
    let trail: Vec<(&str, &str)> = rows.iter().rev().map(|r| (r.action.as_str(), r.result.as_str())).collect();
    assert_eq!(
        trail,
        [
            ("withdrawal.resolve", "pending_approval"),
            ("withdrawal.resolve", "decision_pending"),
            ("withdrawal.decision.approve", "second_operator_required"),
            ("withdrawal.decision.approve", "forbidden"),
            ("withdrawal.decision.approve", "provider_unavailable"),
            ("withdrawal.decision.approve", "ok"),
        ]
    );
    app.assert_ledger_invariant().await;
}

fn cli_at(base: &str, token: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_withdrawals"))
        .args(args)
        .env("WITHDRAWALS_URL", base)
        .env("WITHDRAWALS_TOKEN", token)
        .output()
        .expect("run the withdrawals binary")
}

async fn the_cli_lists_approves_and_rejects_pending_decisions(app: TestApp) {
    let base = strict_app(&app).await;
    let (id, alice) = rejected_withdrawal(&app).await;
    let (first, second) = (app.operator("operator").await, app.operator("operator").await);
    let version = version_of(&app, id, &first).await.to_string();
    let id_text = id.to_string();

    let requested = cli_at(
        &base,
        &first,
        &["review", "resolve", &id_text, "fail", "--reason", "bad account", "--version", &version],
    );
    assert!(requested.status.success(), "{}", String::from_utf8_lossy(&requested.stderr));
    assert!(String::from_utf8_lossy(&requested.stdout).contains("waits for a second operator"));
    let listed = cli_at(&base, &second, &["review", "decisions", "--json"]);
    let listed: Page<ReviewDecisionView> = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.data[0].withdrawal_id, id.0);
    assert_eq!(listed.data[0].requested_by_name, "operator op", "the requester by name");
    let table = cli_at(&base, &second, &["review", "decisions"]);
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("operator op"),
        "{}",
        String::from_utf8_lossy(&table.stdout)
    );
    let own = cli_at(&base, &first, &["review", "approve", &id_text, "--reason", "me"]);
    assert!(!own.status.success());
    assert!(
        String::from_utf8_lossy(&own.stderr).contains("second_operator_required"),
        "{}",
        String::from_utf8_lossy(&own.stderr)
    );

    let rejected = cli_at(&base, &second, &["review", "reject", &id_text, "--reason", "customer called, wait"]);

    assert!(rejected.status.success(), "{}", String::from_utf8_lossy(&rejected.stderr));
    let w = store::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!(w.status, WithdrawalStatus::RequiresReview, "a rejection moves nothing");
    assert_eq!(app.usd_balance(&alice).await.1, "25.00");
    // A new request, approved by the second operator.
    let again =
        cli_at(&base, &first, &["review", "resolve", &id_text, "fail", "--reason", "confirmed", "--version", &version]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    let approved = cli_at(&base, &second, &["review", "approve", &id_text, "--reason", "confirmed with the bank"]);
    assert!(approved.status.success(), "{}", String::from_utf8_lossy(&approved.stderr));
    assert!(String::from_utf8_lossy(&approved.stdout).contains("failed"));
    assert_eq!(app.usd_balance(&alice).await, ("100.00".into(), "0.00".into(), "0.00".into()));
    app.assert_ledger_invariant().await;
}

async fn a_waiting_decision_is_superseded_when_reconciliation_settles_the_withdrawal_first(app: TestApp) {
    let base = strict_app(&app).await;
    let (id, alice) = paid_but_unknown(&app).await;
    let (first, second) = (app.operator("operator").await, app.operator("operator").await);
    let version = version_of(&app, id, &first).await;
    let reference = transfer_id(&app, id);
    let resolve_path = format!("/ops/v1/withdrawals/{id}/resolve");
    let complete = json!({"action": "complete", "reason": "paid", "version": version, "provider_reference": reference});
    assert_eq!(ops_at(&app, &base, &resolve_path, &first, complete).await.status(), 202);
    // Meanwhile someone asks the provider again, and reconciliation completes it.
    let reconcile = json!({"action": "reconcile", "reason": "provider back", "version": version});
    assert_eq!(ops_at(&app, &base, &resolve_path, &second, reconcile).await.status(), 200);
    app.start_default_worker();
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;

    let approve_path = format!("/ops/v1/withdrawals/{id}/decision/approve");
    let approve = ops_at(&app, &base, &approve_path, &second, json!({"reason": "ok"})).await;
    let (status, code, _) = problem_code(approve).await;

    assert_eq!((status, code.as_str()), (404, "no_pending_decision"));
    let shown: WithdrawalDetail = app.ops_get(&first, &format!("/ops/v1/withdrawals/{id}")).await;
    let decision = &shown.review_decisions[0];
    assert_eq!(decision.status, DecisionStatus::Superseded);
    assert!(decision.decision_reason.as_deref().unwrap().contains("completed by reconciliation"), "{decision:?}");
    assert_eq!(app.usd_balance(&alice).await, ("75.00".into(), "0.00".into(), "25.00".into()), "settled once");
    app.assert_ledger_invariant().await;
}

/// The race the chaos run found: operator A asks the provider (slow) while B's `retry` at the same
/// version applies; A's decision must not be stored against the old version (it would block the
/// withdrawal behind `decision_pending`).
async fn a_decision_requested_on_a_version_that_moved_meanwhile_is_not_stored(app: TestApp) {
    use withdrawals::storage::review_decisions::{self, Requested, ReviewDecision};
    let (id, _alice) = rejected_withdrawal(&app).await;
    let operator = app.operator("operator").await;
    let version = version_of(&app, id, &operator).await;
    let retried =
        resolve(&app, id, &operator, json!({"action": "retry", "reason": "B retries", "version": version})).await;
    assert_eq!(retried.status(), 200);
    let requester =
        withdrawals::provisioning::create_enrolled_operator(&app.db, "A", withdrawals::domain::Role::Operator)
            .await
            .unwrap()
            .operator_id;
    let account_id = app.key(id).await.account;
    let decision = |version: i64| ReviewDecision {
        id: withdrawals::domain::DecisionId::new(),
        account_id,
        withdrawal_id: id,
        action: withdrawals::domain::ReviewAction::Fail,
        provider_reference: None,
        version,
        reason: "A fails".into(),
        requested_by: requester,
        requested_at: withdrawals::storage::DbTime::now(),
        request_evidence: sqlx::types::Json(json!({"verdict": "no_transfer"})),
        status: withdrawals::domain::DecisionStatus::Pending,
        decided_by: None,
        decided_at: None,
        decision_reason: None,
    };

    let mut tx = app.db.begin().await.unwrap();
    let stored = review_decisions::insert_pending(&mut tx, &decision(version)).await.unwrap();
    tx.commit().await.unwrap();

    assert_eq!(stored, Requested::Stale);
    assert!(
        review_decisions::pending_for(&app.db, app.key(id).await).await.unwrap().is_none(),
        "nothing blocks the withdrawal"
    );
}
