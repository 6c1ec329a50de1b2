//! The operator surface (SPEC §8): roles on every route, one audit row per action, resolving the
//! review queue against the provider's record, dead-letter triage — over HTTP and the CLI.

use std::process::Command;
use std::time::Duration;

use provider_mocks::{FaultConfig, FaultEffect, FaultRule, RouteMatch};
use reqwest::Method;
use serde_json::{json, Value};
use withdrawals::domain::{Category, LetterState, ReplayStatus, Role, SideEffect, WithdrawalId, WithdrawalStatus};
use withdrawals::ops::types::{
    AuditEntry, DeadLetterGroup, DeadLetterView, List, OpsWithdrawal, Page, ReplayRunView, Resolved, WithdrawalDetail,
};
use withdrawals::storage::audit::{self, AuditFilter};
use withdrawals::storage::dead_letters;

use crate::both_backends;
use crate::harness::{problem_code, read, worker_config, TestApp};

both_backends!(
    every_ops_route_checks_the_callers_role,
    every_action_writes_exactly_one_audit_row_with_its_reason,
    complete_is_checked_against_the_providers_record,
    fail_releases_the_funds_and_the_ledger_holds,
    retry_and_fail_are_refused_when_the_provider_paid_and_reconcile_settles_it,
    a_stale_version_is_a_409,
    retry_after_a_known_unexecuted_failure_pays_out_once,
    dead_letters_are_listed_summarised_shown_and_closed,
    the_cli_runs_the_review_and_dead_letter_commands_through_the_api,
    the_dead_letter_export_round_trips_every_envelope_with_its_events_and_deletes_nothing,
    an_operator_reconciles_a_withdrawal_stuck_in_processing_now,
    the_readme_incident_credentials_revoked_then_replayed_runs_end_to_end,
    a_viewers_malformed_post_is_refused_for_its_role_first_and_audited,
    the_role_extractor_refuses_before_the_path_id_and_the_body_on_every_guarded_route,
);

const WAIT: Duration = Duration::from_secs(25);

/// A withdrawal the provider rejected: `requires_review`, one `dependency_rejected` dead letter.
pub(crate) async fn rejected_withdrawal(app: &TestApp) -> (WithdrawalId, crate::harness::Customer) {
    app.provider
        .mock
        .set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::InvalidAccount)] });
    let stop = app.start_default_worker();
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "25.00").await;
    app.wait_for_status(id, WithdrawalStatus::RequiresReview, WAIT).await;
    stop.cancel();
    app.provider.mock.set_faults(FaultConfig::default());
    (id, alice)
}

/// A withdrawal the provider paid but whose outcome the service never learned: the call timed
/// out after the commit and every lookup failed until the window closed.
pub(crate) async fn paid_but_unknown(app: &TestApp) -> (WithdrawalId, crate::harness::Customer) {
    app.provider.mock.set_faults(FaultConfig {
        rules: vec![
            FaultRule::new(RouteMatch::Create, FaultEffect::TimeoutAfterCommit { ms: 3_000 }),
            FaultRule::new(RouteMatch::Lookup, FaultEffect::LookupUnavailable),
        ],
    });
    let mut config = worker_config("w-unknown");
    config.reconcile_policy.max_elapsed = Duration::from_millis(500);
    // The worker's client times out quickly; it talks to the app's mock through its own client.
    let provider = withdrawals::provider::HttpProvider::new(withdrawals::provider::ProviderConfig {
        base_url: app.provider.mock.url(),
        api_key: secrecy::SecretString::from("test-provider-key"),
        connect_timeout: Duration::from_millis(300),
        request_timeout: Duration::from_millis(300),
    })
    .unwrap();
    let stop = app.start_worker(withdrawals::startup::gateway(std::sync::Arc::new(provider)), config);
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "25.00").await;
    app.wait_for_status(id, WithdrawalStatus::RequiresReview, WAIT).await;
    stop.cancel();
    app.provider.mock.set_faults(FaultConfig::default());
    (id, alice)
}

pub(crate) async fn call(
    app: &TestApp,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> reqwest::Response {
    let mut request = app.client.request(method, app.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    request.send().await.unwrap()
}

pub(crate) async fn version_of(app: &TestApp, id: WithdrawalId, token: &str) -> i64 {
    app.ops_get::<WithdrawalDetail>(token, &format!("/ops/v1/withdrawals/{id}")).await.withdrawal.version
}

pub(crate) async fn resolve(app: &TestApp, id: WithdrawalId, token: &str, body: Value) -> reqwest::Response {
    call(app, Method::POST, &format!("/ops/v1/withdrawals/{id}/resolve"), Some(token), Some(body)).await
}

async fn every_ops_route_checks_the_callers_role(app: TestApp) {
    let (id, alice) = rejected_withdrawal(&app).await;
    let letter = dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap().remove(0).id;
    let viewer = app.operator("viewer").await;
    let operator = app.operator("operator").await;
    let admin = app.operator("admin").await;
    // A replay run to read and to control.
    let run: ReplayRunView = read(call(&app, Method::POST, "/ops/v1/replays", Some(&admin), Some(json!({
        "reason": "matrix", "dead_letter_ids": [letter], "expected_payload_version": 2, "destination_queue": "payouts"})))
        .await)
    .await;
    let run = run.id;
    let reads = [
        format!("/ops/v1/replays/{run}"),
        "/ops/v1/withdrawals".to_owned(),
        format!("/ops/v1/withdrawals/{id}"),
        "/ops/v1/dead-letters".to_owned(),
        "/ops/v1/dead-letters/summary".to_owned(),
        format!("/ops/v1/dead-letters/{letter}"),
        "/ops/v1/audit".to_owned(),
        "/ops/v1/breakers".to_owned(),
        "/ops/v1/overview".to_owned(),
        "/ops/v1/webhook-endpoints".to_owned(),
        "/ops/v1/notifications".to_owned(),
    ];
    // Bodies without a reason: an authorised caller gets 422, so nothing changes.
    let writes = [
        (format!("/ops/v1/withdrawals/{id}/resolve"), json!({"action": "fail", "reason": "", "version": 1}), false),
        (format!("/ops/v1/dead-letters/{letter}/close"), json!({"reason": ""}), false),
        (format!("/ops/v1/withdrawals/{id}/reconcile"), json!({"reason": ""}), false),
        (
            "/ops/v1/replays".to_owned(),
            json!({"reason": "", "dead_letter_ids": [letter], "expected_payload_version": 2, "destination_queue": "payouts"}),
            false,
        ),
        (format!("/ops/v1/replays/{run}/pause"), json!({"reason": ""}), false),
        (format!("/ops/v1/replays/{run}/resume"), json!({"reason": ""}), false),
        (format!("/ops/v1/replays/{run}/cancel"), json!({"reason": ""}), false),
        (format!("/ops/v1/replays/{run}/approve"), json!({"reason": ""}), true),
        ("/ops/v1/breakers/payout_provider/force-open".to_owned(), json!({"reason": ""}), true),
        ("/ops/v1/breakers/payout_provider/force-closed".to_owned(), json!({"reason": ""}), true),
        ("/ops/v1/breakers/payout_provider/release".to_owned(), json!({"reason": ""}), true),
        (format!("/ops/v1/notifications/{}/redeliver", uuid::Uuid::now_v7()), json!({"reason": ""}), false),
    ];

    for (who, token, read, write, admin_write) in [
        ("no token", None, 401, 401, 401),
        ("customer key", Some(alice.api_key.as_str()), 401, 401, 401),
        ("viewer", Some(viewer.as_str()), 200, 403, 403),
        ("operator", Some(operator.as_str()), 200, 422, 403),
        ("admin", Some(admin.as_str()), 200, 422, 422),
    ] {
        for path in &reads {
            let status = call(&app, Method::GET, path, token, None).await.status().as_u16();
            assert_eq!(status, read, "{who} GET {path}");
        }
        for (path, body, admin_only) in &writes {
            let status = call(&app, Method::POST, path, token, Some(body.clone())).await.status().as_u16();
            let expected = if *admin_only { admin_write } else { write };
            assert_eq!(status, expected, "{who} POST {path}");
        }
    }
    let letters =
        dead_letters::list(&app.db, &dead_letters::DeadLetterFilter { limit: 10, ..Default::default() }).await.unwrap();
    assert_eq!(letters.len(), 1, "no role closed the dead letter without a reason");
}

async fn audit_rows(app: &TestApp) -> Vec<audit::AuditRow> {
    audit::list(&app.db, &AuditFilter { limit: 1_000, ..AuditFilter::default() }).await.unwrap()
}

async fn every_action_writes_exactly_one_audit_row_with_its_reason(app: TestApp) {
    let (id, _) = rejected_withdrawal(&app).await;
    let letter = dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap().remove(0).id;
    let operator = app.operator("operator").await;
    let version = version_of(&app, id, &operator).await;
    // Closed during triage first (resolving the withdrawal would close it too, as settled).
    let before = audit_rows(&app).await.len();
    call(
        &app,
        Method::POST,
        &format!("/ops/v1/dead-letters/{letter}/close"),
        Some(&operator),
        Some(json!({"reason": "handled by fail"})),
    )
    .await;
    let rows = audit_rows(&app).await;
    assert_eq!(rows.len(), before + 1);
    assert_eq!(
        (rows[0].action.as_str(), rows[0].reason.as_str(), rows[0].result.as_str()),
        ("dead_letter.close", "handled by fail", "ok")
    );
    let listed: Page<AuditEntry> = app.ops_get(&operator, "/ops/v1/audit?action=dead_letter.close").await;
    assert_eq!(listed.data.len(), 1);
    let actions: Vec<(&str, Value, &str, &str)> = vec![
        (
            "stale resolve",
            json!({"action": "fail", "reason": "customer asked", "version": version - 1}),
            "withdrawal.resolve",
            "stale_version",
        ),
        (
            "fail",
            json!({"action": "fail", "reason": "invalid account confirmed", "version": version}),
            "withdrawal.resolve",
            "ok",
        ),
    ];
    for (what, body, action, result) in actions {
        let before = audit_rows(&app).await.len();
        resolve(&app, id, &operator, body.clone()).await;
        let rows = audit_rows(&app).await;
        assert_eq!(rows.len(), before + 1, "{what}: exactly one audit row");
        let row = &rows[0];
        assert_eq!((row.action.as_str(), row.result.as_str()), (action, result), "{what}");
        assert_eq!(row.reason, body["reason"].as_str().unwrap());
        assert_eq!(row.target_id, id.to_string());
        assert_eq!(row.role, Role::Operator);
    }
}

async fn complete_is_checked_against_the_providers_record(app: TestApp) {
    let (id, alice) = paid_but_unknown(&app).await;
    let operator = app.operator("operator").await;
    let version = version_of(&app, id, &operator).await;

    let unknown = resolve(&app, id, &operator, json!({"action": "complete", "reason": "bank says paid", "version": version, "provider_reference": "tr_not_real"})).await;
    let (status, code, _) = problem_code(unknown).await;
    assert_eq!((status, code.as_str()), (422, "provider_reference_mismatch"));

    let transfer = app.provider.mock.transfers().into_iter().find(|t| t.reference == id.to_string()).unwrap();
    let done = resolve(&app, id, &operator, json!({"action": "complete", "reason": "provider shows it paid", "version": version, "provider_reference": transfer.id})).await;
    assert_eq!(done.status(), 200);
    let w = withdrawals::storage::withdrawals::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!(w.status, WithdrawalStatus::Completed);
    assert_eq!(app.usd_balance(&alice).await, ("75.00".into(), "0.00".into(), "25.00".into()));
    app.assert_ledger_invariant().await;
}

async fn fail_releases_the_funds_and_the_ledger_holds(app: TestApp) {
    let (id, alice) = rejected_withdrawal(&app).await;
    let operator = app.operator("operator").await;
    let version = version_of(&app, id, &operator).await;
    let letters = withdrawals::storage::dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(letters.len(), 1);
    let open = |app: &TestApp| {
        let db = app.db.clone();
        async move { withdrawals::storage::metrics::open_dead_letters(&db).await.unwrap().count }
    };
    assert_eq!(open(&app).await, 1);

    let response =
        resolve(&app, id, &operator, json!({"action": "fail", "reason": "invalid account", "version": version})).await;

    assert_eq!(response.status(), 200);
    let body: Resolved = read(response).await;
    assert_eq!(body.withdrawal.status, WithdrawalStatus::Failed);
    assert_eq!(body.withdrawal.failure_code.as_deref(), Some("rejected_by_operator"));
    assert_eq!(app.usd_balance(&alice).await, ("100.00".into(), "0.00".into(), "0.00".into()));
    // Its dead letter is settled with it: closed by the transition, the envelope untouched.
    assert_eq!(open(&app).await, 0, "a settled withdrawal's dead letter leaves the triage queue");
    let events = withdrawals::storage::dead_letters::events(&app.db, &letters[0]).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].action, withdrawals::domain::LetterEvent::Closed);
    assert!(events[0].reason.starts_with("withdrawal failed: "), "{}", events[0].reason);
    assert_eq!(withdrawals::storage::dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap(), letters);
    app.assert_ledger_invariant().await;
}

async fn retry_and_fail_are_refused_when_the_provider_paid_and_reconcile_settles_it(app: TestApp) {
    let (unknown, alice) = paid_but_unknown(&app).await;
    let operator = app.operator("operator").await;
    let version = version_of(&app, unknown, &operator).await;
    // Asked live, the provider shows the transfer paid: resending would pay twice.
    let refused =
        resolve(&app, unknown, &operator, json!({"action": "retry", "reason": "try again", "version": version})).await;
    let (status, code, body) = problem_code(refused).await;
    assert_eq!((status, code.as_str()), (409, "transfer_paid_at_provider"));
    assert!(body.detail.as_str().contains("complete"), "offers complete instead");
    // Failing it would release funds the provider paid out: refused the same way.
    let fail =
        resolve(&app, unknown, &operator, json!({"action": "fail", "reason": "give up", "version": version})).await;
    let (status, code, _) = problem_code(fail).await;
    assert_eq!((status, code.as_str()), (409, "transfer_paid_at_provider"));
    assert_eq!(app.usd_balance(&alice).await, ("75.00".into(), "25.00".into(), "0.00".into()), "nothing moved");

    // Reconcile instead: the provider is answering again and shows it paid.
    let reconcile = resolve(
        &app,
        unknown,
        &operator,
        json!({"action": "reconcile", "reason": "provider back", "version": version}),
    )
    .await;
    assert_eq!(reconcile.status(), 200);
    app.start_default_worker();
    app.wait_for_status(unknown, WithdrawalStatus::Completed, WAIT).await;
    let executions: u32 =
        app.provider.mock.transfers().iter().filter(|t| t.reference == unknown.to_string()).map(|t| t.executions).sum();
    assert_eq!(executions, 1, "paid once");
    app.assert_ledger_invariant().await;
}

async fn a_stale_version_is_a_409(app: TestApp) {
    let (id, alice) = rejected_withdrawal(&app).await;
    let operator = app.operator("operator").await;
    let version = version_of(&app, id, &operator).await;

    let response =
        resolve(&app, id, &operator, json!({"action": "fail", "reason": "dup", "version": version + 7})).await;

    let (status, code, body) = problem_code(response).await;
    assert_eq!((status, code.as_str()), (409, "stale_version"));
    assert!(body.detail.as_str().contains(&version.to_string()), "names the current version");
    assert_eq!(app.usd_balance(&alice).await.1, "25.00", "nothing changed");
}

async fn dead_letters_are_listed_summarised_shown_and_closed(app: TestApp) {
    let (id, _) = rejected_withdrawal(&app).await;
    let viewer = app.operator("viewer").await;
    let operator = app.operator("operator").await;

    let summary: List<DeadLetterGroup> = app.ops_get(&viewer, "/ops/v1/dead-letters/summary").await;
    let group = &summary.data[0];
    assert_eq!(
        (group.category, group.error_code.as_str(), group.open),
        (Category::DependencyRejected, "invalid_account", 1)
    );
    let filtered: Page<DeadLetterView> =
        app.ops_get(&viewer, "/ops/v1/dead-letters?category=dependency_rejected&error_code=invalid_account").await;
    let letter = &filtered.data[0];
    assert_eq!(letter.withdrawal_id, Some(id.0));
    let other: Page<DeadLetterView> = app.ops_get(&viewer, "/ops/v1/dead-letters?category=code_bug").await;
    assert!(other.data.is_empty());
    let letter_id = letter.id;
    let shown: DeadLetterView = app.ops_get(&viewer, &format!("/ops/v1/dead-letters/{letter_id}")).await;
    assert_eq!((shown.owner.as_str(), shown.state), ("integration owner", LetterState::Open));

    let closed = call(
        &app,
        Method::POST,
        &format!("/ops/v1/dead-letters/{letter_id}/close"),
        Some(&operator),
        Some(json!({"reason": "customer contacted"})),
    )
    .await;
    assert_eq!(closed.status(), 200);
    let again = call(
        &app,
        Method::POST,
        &format!("/ops/v1/dead-letters/{letter_id}/close"),
        Some(&operator),
        Some(json!({"reason": "again"})),
    )
    .await;
    let (status, code, _) = problem_code(again).await;
    assert_eq!((status, code.as_str()), (409, "already_closed"));
    let open: Page<DeadLetterView> = app.ops_get(&viewer, "/ops/v1/dead-letters").await;
    assert!(open.data.is_empty(), "closed ones leave the default (open) list");
    let archived: Page<DeadLetterView> = app.ops_get(&viewer, "/ops/v1/dead-letters?state=closed").await;
    assert_eq!(archived.data[0].id, letter_id, "archived, never deleted");
    let summary: List<DeadLetterGroup> = app.ops_get(&viewer, "/ops/v1/dead-letters/summary").await;
    assert!(summary.data.is_empty());
}

pub(crate) fn cli(app: &TestApp, token: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_withdrawals"))
        .args(args)
        .env("WITHDRAWALS_URL", &app.base_url)
        .env("WITHDRAWALS_TOKEN", token)
        .output()
        .expect("run the withdrawals binary")
}

/// SPEC §5: `withdrawals dlq export --before DATE` writes every dead letter that failed before
/// the date — open and closed, oldest first — as JSON lines: each line is the envelope `dlq show`
/// gives, with its handling events. Nothing is deleted.
async fn the_dead_letter_export_round_trips_every_envelope_with_its_events_and_deletes_nothing(app: TestApp) {
    app.provider
        .mock
        .set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::InvalidAccount)] });
    let stop = app.start_default_worker();
    let alice = app.customer("100.00").await;
    let first = app.create_withdrawal(&alice, "k1", "25.00").await;
    app.wait_for_status(first, WithdrawalStatus::RequiresReview, WAIT).await;
    let second = app.create_withdrawal(&alice, "k2", "30.00").await;
    app.wait_for_status(second, WithdrawalStatus::RequiresReview, WAIT).await;
    stop.cancel();
    let viewer = app.operator("viewer").await;
    let operator = app.operator("operator").await;
    let letters: Page<DeadLetterView> = app.ops_get(&viewer, "/ops/v1/dead-letters?order=oldest_first").await;
    let ids: Vec<String> = letters.data.iter().map(|l| l.id.to_string()).collect();
    assert_eq!(ids.len(), 2);
    let newest_first: Page<DeadLetterView> = app.ops_get(&viewer, "/ops/v1/dead-letters").await;
    assert_eq!(newest_first.data[0].id.to_string(), ids[1], "the default order is newest first");
    let closed = cli(&app, &operator, &["dlq", "close", &ids[0], "--reason", "handled, archived"]);
    assert!(closed.status.success(), "{}", String::from_utf8_lossy(&closed.stderr));

    let tomorrow = (chrono::Utc::now() + chrono::TimeDelta::days(1)).format("%Y-%m-%d").to_string();
    let export = cli(&app, &viewer, &["dlq", "export", "--before", &tomorrow]);
    assert!(export.status.success(), "{}", String::from_utf8_lossy(&export.stderr));
    assert!(String::from_utf8_lossy(&export.stderr).contains("exported 2 dead letters"));
    let lines: Vec<Value> = String::from_utf8(export.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(lines.iter().map(|l| l["id"].as_str().unwrap().to_owned()).collect::<Vec<_>>(), ids, "oldest first");
    for mut line in lines {
        let id = line["id"].as_str().unwrap().to_owned();
        let mut shown: Value = call(&app, Method::GET, &format!("/ops/v1/dead-letters/{id}"), Some(&viewer), None)
            .await
            .json()
            .await
            .unwrap();
        let back: withdrawals::ops::types::DeadLetterView = serde_json::from_value(line.clone()).expect("reads back");
        assert_eq!(back.id.to_string(), id);
        // The age is the reader's clock; everything else is the stored record.
        line.as_object_mut().unwrap().remove("age_seconds");
        shown.as_object_mut().unwrap().remove("age_seconds");
        assert_eq!(line, shown, "the exported line is the envelope with its events");
    }
    let closed_line: DeadLetterView = {
        let again = cli(&app, &viewer, &["dlq", "export", "--before", &tomorrow, "--category", "dependency_rejected"]);
        serde_json::from_str(String::from_utf8(again.stdout).unwrap().lines().next().unwrap()).unwrap()
    };
    let events = closed_line.events.as_ref().expect("an exported letter's events");
    assert_eq!((closed_line.state, events[0].reason.as_str()), (LetterState::Closed, "handled, archived"));

    // Before both failed, or of another category: nothing. And nothing was deleted.
    for args in [&["--before", "2020-01-01"][..], &["--before", &tomorrow, "--category", "code_bug"][..]] {
        let none = cli(&app, &viewer, &[&["dlq", "export"][..], args].concat());
        assert!(none.status.success(), "{}", String::from_utf8_lossy(&none.stderr));
        assert!(none.stdout.is_empty(), "{args:?}");
    }
    let bad = cli(&app, &viewer, &["dlq", "export", "--before", "last tuesday"]);
    assert!(!bad.status.success());
    assert_eq!(String::from_utf8(bad.stderr).unwrap().trim_end().lines().count(), 1);
    let all: Page<DeadLetterView> = app.ops_get(&viewer, "/ops/v1/dead-letters?state=all").await;
    assert_eq!(all.data.len(), 2, "an export deletes nothing");
}

/// Issue 21: `POST /ops/v1/withdrawals/{id}/reconcile` (and `withdrawals review reconcile`)
/// reconciles a `processing` withdrawal now — the provider decides, audited — and refuses what
/// it does not apply to.
async fn an_operator_reconciles_a_withdrawal_stuck_in_processing_now(app: TestApp) {
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "stuck", "25.00").await;
    app.stuck_in_processing(id).await;
    let viewer = app.operator("viewer").await;
    let operator = app.operator("operator").await;
    let path = format!("/ops/v1/withdrawals/{id}/reconcile");

    let forbidden = call(&app, Method::POST, &path, Some(&viewer), Some(json!({"reason": "look"}))).await;
    assert_eq!(forbidden.status(), 403);
    let no_reason = call(&app, Method::POST, &path, Some(&operator), Some(json!({"reason": " "}))).await;
    assert_eq!(problem_code(no_reason).await.1, "reason_required");
    let queued =
        cli(&app, &operator, &["review", "reconcile", &id.to_string(), "--reason", "worker killed mid-call, INC-2003"]);
    assert!(queued.status.success(), "{}", String::from_utf8_lossy(&queued.stderr));
    assert!(String::from_utf8_lossy(&queued.stdout).contains(&format!("reconciling {id}")));
    let again = call(&app, Method::POST, &path, Some(&operator), Some(json!({"reason": "twice"}))).await;
    assert_eq!(again.status(), 409);
    assert_eq!(problem_code(again).await.1, "reconciliation_queued", "one reconciliation at a time");
    let pending = app.create_withdrawal(&alice, "not-processing", "5.00").await;
    let wrong = call(
        &app,
        Method::POST,
        &format!("/ops/v1/withdrawals/{pending}/reconcile"),
        Some(&operator),
        Some(json!({"reason": "x"})),
    )
    .await;
    assert_eq!(problem_code(wrong).await.1, "not_processing");

    // The provider never saw it: reconciliation finds nothing and a controlled retry pays it once.
    let stop = app.start_default_worker();
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    stop.cancel();
    let results = withdrawals::storage::reconciliations::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert!(!results.is_empty(), "the reconciliation's result is stored as evidence");
    let rows = audit::list(&app.db, &AuditFilter { limit: 100, ..AuditFilter::default() }).await.unwrap();
    let reconciles: Vec<(&str, &str)> = rows
        .iter()
        .filter(|r| r.action == "withdrawal.reconcile")
        .map(|r| (r.result.as_str(), r.reason.as_str()))
        .collect();
    assert!(reconciles.contains(&("ok", "worker killed mid-call, INC-2003")), "{reconciles:?}");
    assert!(
        reconciles.iter().any(|(result, _)| *result == "forbidden"),
        "the viewer's refusal is audited: {reconciles:?}"
    );
    let paid = app.provider.mock.transfers().iter().filter(|t| t.reference == id.to_string()).count();
    assert_eq!(paid, 1, "paid once");
    app.assert_ledger_invariant().await;
}

async fn the_cli_runs_the_review_and_dead_letter_commands_through_the_api(app: TestApp) {
    let (id, alice) = rejected_withdrawal(&app).await;
    let viewer = app.operator("viewer").await;
    let operator = app.operator("operator").await;

    let listed = cli(&app, &viewer, &["review", "list", "--account", &alice.account_id.to_string(), "--json"]);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    let listed: Page<OpsWithdrawal> = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.data[0].id, id.0);
    let other = cli(&app, &viewer, &["review", "list", "--account", &uuid::Uuid::new_v4().to_string(), "--json"]);
    let other: Page<OpsWithdrawal> = serde_json::from_slice(&other.stdout).unwrap();
    assert!(other.data.is_empty(), "filtered by account");
    let summary = cli(&app, &viewer, &["dlq", "summary"]);
    assert!(String::from_utf8_lossy(&summary.stdout).contains("invalid_account"));
    let shown = cli(&app, &viewer, &["review", "show", &id.to_string()]);
    assert!(String::from_utf8_lossy(&shown.stdout).contains("dependency_rejected"));

    let forbidden =
        cli(&app, &viewer, &["review", "resolve", &id.to_string(), "fail", "--reason", "x", "--version", "3"]);
    assert!(!forbidden.status.success());
    let stderr = String::from_utf8(forbidden.stderr).unwrap();
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("403 forbidden"), "{stderr}");

    let version = listed.data[0].version.to_string();
    let resolved = cli(
        &app,
        &operator,
        &["review", "resolve", &id.to_string(), "fail", "--reason", "invalid account", "--version", &version],
    );
    assert!(resolved.status.success(), "{}", String::from_utf8_lossy(&resolved.stderr));
    assert!(String::from_utf8_lossy(&resolved.stdout).contains("failed"));
    assert_eq!(app.usd_balance(&alice).await.0, "100.00");
    let trail = cli(&app, &viewer, &["audit", "--json"]);
    let trail: Page<AuditEntry> = serde_json::from_slice(&trail.stdout).unwrap();
    assert_eq!((trail.data[0].result.as_str(), trail.data[0].reason.as_str()), ("ok", "invalid account"));
    app.assert_ledger_invariant().await;
}

async fn retry_after_a_known_unexecuted_failure_pays_out_once(app: TestApp) {
    app.provider.mock.set_faults(FaultConfig {
        rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::Status { code: 503, retry_after_secs: None })],
    });
    let mut config = worker_config("w-exhaust");
    config.submit_policy.max_attempts = 2;
    let gateway = withdrawals::startup::gateway_with(
        app.provider.provider.clone(),
        withdrawals::provider::breaker::BreakerConfig { minimum_number_of_calls: 1_000, ..Default::default() },
    );
    app.start_worker(gateway, config);
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "25.00").await;
    app.wait_for_status(id, WithdrawalStatus::RequiresReview, WAIT).await;
    app.provider.mock.set_faults(FaultConfig::default());
    let operator = app.operator("operator").await;
    let version = version_of(&app, id, &operator).await;

    let response =
        resolve(&app, id, &operator, json!({"action": "retry", "reason": "provider recovered", "version": version}))
            .await;

    assert_eq!(response.status(), 200);
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    let executions: u32 =
        app.provider.mock.transfers().iter().filter(|t| t.reference == id.to_string()).map(|t| t.executions).sum();
    assert_eq!(executions, 1, "paid once");
    assert_eq!(app.usd_balance(&alice).await, ("75.00".into(), "0.00".into(), "25.00".into()));
    app.assert_ledger_invariant().await;
}

/// The README's "Operating it" incident, command for command.
async fn the_readme_incident_credentials_revoked_then_replayed_runs_end_to_end(app: TestApp) {
    // The provider revokes our credentials: every payout is refused with 401.
    app.provider.mock.set_faults(FaultConfig {
        rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::Status { code: 401, retry_after_secs: None })],
    });
    app.start_default_worker();
    let alice = app.customer("1000.00").await;
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(app.create_withdrawal(&alice, &format!("k{i}"), "10.00").await);
    }
    for id in &ids {
        app.wait_for_status(*id, WithdrawalStatus::RequiresReview, WAIT).await;
    }
    let token = app.operator("operator").await;

    // 1. Triage: what is failing?
    let summary = cli(&app, &token, &["dlq", "summary"]);
    let summary = String::from_utf8(summary.stdout).unwrap();
    assert!(summary.contains("dependency_rejected") && summary.contains("provider_credentials_rejected"), "{summary}");
    let listed = cli(&app, &token, &["dlq", "list", "--error-code", "provider_credentials_rejected", "--json"]);
    let listed: Page<DeadLetterView> = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.data.len(), 4);
    assert_eq!(listed.data[0].side_effect_state, SideEffect::NotStarted);

    // 2. Fix: the integration owner rotates the key (here: the provider accepts us again).
    app.provider.mock.set_faults(FaultConfig::default());

    // 3. Dry run, then replay.
    let selection = [
        "--category",
        "dependency_rejected",
        "--error-code",
        "provider_credentials_rejected",
        "--expected-payload-version",
        "2",
        "--destination",
        "payouts",
    ];
    let dry = cli(
        &app,
        &token,
        &[&["replay", "start", "--reason", "provider key rotated", "--dry-run"][..], &selection[..]].concat(),
    );
    assert!(dry.status.success(), "{}", String::from_utf8_lossy(&dry.stderr));
    assert!(String::from_utf8_lossy(&dry.stdout).contains("dry run: 4 dead letters would be replayed"));
    let started = cli(
        &app,
        &token,
        &[&["replay", "start", "--reason", "provider key rotated", "--rate", "10", "--json"][..], &selection[..]]
            .concat(),
    );
    assert!(started.status.success(), "{}", String::from_utf8_lossy(&started.stderr));
    let run: ReplayRunView = serde_json::from_slice(&started.stdout).unwrap();
    let run_id = run.id.to_string();
    let watched = cli(&app, &token, &["replay", "status", &run_id, "--watch"]);
    assert!(watched.status.success(), "{}", String::from_utf8_lossy(&watched.stderr));

    // 4. All paid, once; the review queue is empty.
    for id in &ids {
        app.wait_for_status(*id, WithdrawalStatus::Completed, WAIT).await;
        let executions: u32 =
            app.provider.mock.transfers().iter().filter(|t| t.reference == id.to_string()).map(|t| t.executions).sum();
        assert_eq!(executions, 1);
    }
    let queue = cli(&app, &token, &["review", "list", "--json"]);
    let queue: Page<OpsWithdrawal> = serde_json::from_slice(&queue.stdout).unwrap();
    assert!(queue.data.is_empty());
    let status = cli(&app, &token, &["replay", "status", &run_id, "--json"]);
    let status: ReplayRunView = serde_json::from_slice(&status.stdout).unwrap();
    let succeeded = status.progress.as_ref().map(|p| p.succeeded);
    assert_eq!((status.status, succeeded), (ReplayStatus::Completed, Some(4)));
    let trail: Page<AuditEntry> = serde_json::from_slice(&cli(&app, &token, &["audit", "--json"]).stdout).unwrap();
    // The customers' funding (`account.credit` by the local actor) and the operator's enrolment
    // (`operator.create` by the local actor, then their own `operator.rotate_token`) are audited
    // too; the operator's actions in the incident are these.
    let actions: Vec<&str> = trail
        .data
        .iter()
        .map(|r| r.action.as_str())
        .filter(|a| !["account.credit", "operator.create", "operator.rotate_token"].contains(a))
        .collect();
    assert_eq!(actions, ["replay.start", "replay.dry_run"], "one audit row per action, newest first");
    app.assert_ledger_invariant().await;
}

/// SPEC §8: the role is checked before the body. A viewer's malformed body on every ops POST
/// route is a 403 (not the 422 an operator would get), and each refusal is audited.
async fn a_viewers_malformed_post_is_refused_for_its_role_first_and_audited(app: TestApp) {
    let (id, _) = rejected_withdrawal(&app).await;
    let letter = dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap().remove(0).id;
    let viewer = app.operator("viewer").await;
    let run = uuid::Uuid::now_v7();
    let routes = [
        (format!("/ops/v1/withdrawals/{id}/resolve"), "withdrawal.resolve"),
        (format!("/ops/v1/withdrawals/{id}/decision/approve"), "withdrawal.decision.approve"),
        (format!("/ops/v1/withdrawals/{id}/decision/reject"), "withdrawal.decision.reject"),
        (format!("/ops/v1/dead-letters/{letter}/close"), "dead_letter.close"),
        ("/ops/v1/replays".to_owned(), "replay.start"),
        (format!("/ops/v1/replays/{run}/pause"), "replay.pause"),
        (format!("/ops/v1/replays/{run}/approve"), "replay.approve"),
    ];
    for (path, action) in routes {
        let response = app
            .client
            .post(app.url(&path))
            .bearer_auth(&viewer)
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        let (status, code, _) = problem_code(response).await;
        assert_eq!((status, code.as_str()), (403, "forbidden"), "{path}");
        let rows = audit::list(&app.db, &AuditFilter { action: Some(action.into()), limit: 5, ..Default::default() })
            .await
            .unwrap();
        assert_eq!(rows.len(), 1, "{path}: one audit row");
        assert_eq!((rows[0].role.as_str(), rows[0].result.as_str()), ("viewer", "forbidden"), "{path}");
    }
    // An operator's malformed body is still a 422 (the body is read once the role allows it).
    let operator = app.operator("operator").await;
    let response = app
        .client
        .post(app.url(&format!("/ops/v1/withdrawals/{id}/resolve")))
        .bearer_auth(&operator)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(problem_code(response).await.0, 422);
}

/// The role extractor (`Authorized<A>`) runs before any other extractor: a caller below the
/// action's role gets 403 even when the path id is not a UUID and the body is not JSON, and the
/// refusal is audited under the action's own name with the raw path id as its target. A caller
/// with the role gets the path's 404 for the same request — so the order is the extractor's, not
/// an accident of the data.
async fn the_role_extractor_refuses_before_the_path_id_and_the_body_on_every_guarded_route(app: TestApp) {
    let viewer = app.operator("viewer").await;
    let operator = app.operator("operator").await;
    let admin = app.operator("admin").await;
    let bad = "not-a-uuid";
    // (method, path, action, role needed)
    let routes = [
        (Method::POST, format!("/ops/v1/withdrawals/{bad}/resolve"), "withdrawal.resolve", "operator"),
        (
            Method::POST,
            format!("/ops/v1/withdrawals/{bad}/decision/approve"),
            "withdrawal.decision.approve",
            "operator",
        ),
        (Method::POST, format!("/ops/v1/withdrawals/{bad}/decision/reject"), "withdrawal.decision.reject", "operator"),
        (Method::POST, format!("/ops/v1/dead-letters/{bad}/close"), "dead_letter.close", "operator"),
        (Method::POST, format!("/ops/v1/replays/{bad}/pause"), "replay.pause", "operator"),
        (Method::POST, format!("/ops/v1/replays/{bad}/resume"), "replay.resume", "operator"),
        (Method::POST, format!("/ops/v1/replays/{bad}/cancel"), "replay.cancel", "operator"),
        (Method::POST, format!("/ops/v1/replays/{bad}/approve"), "replay.approve", "admin"),
        (Method::GET, format!("/ops/v1/accounts/{bad}/keys"), "api_key.list", "admin"),
        (Method::POST, format!("/ops/v1/accounts/{bad}/keys"), "api_key.create", "admin"),
        (Method::POST, format!("/ops/v1/api-keys/{bad}/revoke"), "api_key.revoke", "admin"),
        (Method::POST, format!("/ops/v1/operators/{bad}/disable"), "operator.disable", "admin"),
        (Method::POST, format!("/ops/v1/operators/{bad}/enable"), "operator.enable", "admin"),
        (Method::POST, format!("/ops/v1/accounts/{bad}/credits"), "account.credit", "admin"),
        // `rotate-token` is open to every role (one's own token), so it is not in this list:
        // tests/api/two_person.rs covers who may rotate whose.
    ];
    for (method, path, action, needed) in &routes {
        let below = if *needed == "admin" { &operator } else { &viewer };
        let send = |token: &str| {
            app.client
                .request(method.clone(), app.url(path))
                .bearer_auth(token)
                .header("content-type", "application/json")
                .body("{not json")
                .send()
        };
        let (status, code, _) = problem_code(send(below).await.unwrap()).await;
        assert_eq!((status, code.as_str()), (403, "forbidden"), "{method} {path}");
        let rows =
            audit::list(&app.db, &AuditFilter { action: Some((*action).into()), limit: 5, ..Default::default() })
                .await
                .unwrap();
        assert_eq!(rows.len(), 1, "{path}: one audit row");
        assert_eq!(
            (rows[0].result.as_str(), rows[0].target_id.as_str(), rows[0].parameters.0["body"].as_str()),
            ("forbidden", bad, Some("not read")),
            "{path}"
        );
        // With the role, the same request fails on the path id instead (and writes no audit row).
        let allowed = if *needed == "admin" { &admin } else { &operator };
        let (status, _, _) = problem_code(send(allowed).await.unwrap()).await;
        assert_eq!(status, 404, "{method} {path} with the role");
        let after =
            audit::list(&app.db, &AuditFilter { action: Some((*action).into()), limit: 5, ..Default::default() })
                .await
                .unwrap();
        assert_eq!(after.len(), 1, "{path}: a 404 on the path writes no audit row");
    }
}
