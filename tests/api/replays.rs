//! Replay (SPEC §8.3): deliberate, bounded, rate-limited, pausable, approved when large, and
//! never paying twice.

use std::time::Duration;

use chrono::TimeDelta;
use provider_mocks::{FaultConfig, FaultEffect, FaultRule, Route, RouteMatch};
use reqwest::Method;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use withdrawals::config::AppConfig;
use withdrawals::domain::{
    Category, DeadLetterId, JobId, JobKey, JobStatus, LetterEvent, ReplayItemStatus, ReplayStatus,
};
use withdrawals::domain::{WithdrawalId, WithdrawalStatus};
use withdrawals::http::error::Problem;
use withdrawals::jobs::{JobKind, Queue};
use withdrawals::ops::types::{DeadLetterView, DryRun, List, OperatorView, ReplayProgress, ReplayRunView};
use withdrawals::storage::dead_letters;
use withdrawals::storage::jobs::{self as job_store, Finish, NewJob};
use withdrawals::storage::DbTime;

use crate::both_backends;
use crate::harness::{problem_code, read, typed, Backend, TestApp};

both_backends!(
    with = app;
    a_dry_run_reports_count_and_sample_and_changes_nothing,
    a_replay_pays_each_withdrawal_once_and_leaves_the_envelope_untouched,
    releases_hold_the_rate_limit,
    pause_stops_releases_resume_continues_and_cancel_stops_for_good,
    a_run_whose_jobs_keep_dead_lettering_pauses_itself,
    two_concurrent_replays_of_one_dead_letter_replay_it_once,
    a_large_run_waits_for_a_second_operators_approval,
    a_large_run_is_not_approved_with_a_token_its_starter_issued,
    a_replay_after_a_schema_change_upgrades_v1_payloads_and_skips_what_cannot_be_upgraded,
    an_operator_replays_within_limits_and_an_admin_beyond_them,
    replaying_a_side_effect_unknown_letter_asks_the_provider_first_and_pays_each_withdrawal_once,
);

const WAIT: Duration = Duration::from_secs(30);

async fn app(backend: Backend) -> TestApp {
    let mut config = AppConfig::default();
    config.replay.approval_threshold = 250;
    TestApp::spawn_with(backend, config).await
}

/// `n` withdrawals of 1.00 the provider rejected (see `TestApp::rejected_withdrawals`).
async fn rejected(app: &TestApp, n: usize) -> Vec<WithdrawalId> {
    app.rejected_withdrawals(n, "100000.00", "1.00").await.0
}

async fn letters_of(app: &TestApp, ids: &[WithdrawalId]) -> Vec<Uuid> {
    let mut out = Vec::new();
    for id in ids {
        out.push(dead_letters::for_withdrawal(&app.db, app.key(*id).await).await.unwrap().remove(0).id.0);
    }
    out
}

async fn post(app: &TestApp, path: &str, token: &str, body: Value) -> reqwest::Response {
    app.client.request(Method::POST, app.url(path)).bearer_auth(token).json(&body).send().await.unwrap()
}

async fn run_status(app: &TestApp, run: &str, token: &str) -> ReplayRunView {
    app.ops_get(token, &format!("/ops/v1/replays/{run}")).await
}

/// A started run's answer: 201 and the run.
async fn started(response: reqwest::Response) -> ReplayRunView {
    assert_eq!(response.status(), 201);
    read(response).await
}

/// A run's progress (every single-run answer carries it).
fn progress(run: &ReplayRunView) -> &ReplayProgress {
    run.progress.as_ref().expect("a run's progress")
}

fn start_body(letters: &[Uuid], rate: i64) -> Value {
    json!({"reason": "provider fixed the account check", "dead_letter_ids": letters, "expected_payload_version": 2,
           "destination_queue": "payouts", "rate_per_second": rate, "max_concurrency": 100})
}

async fn wait_run(app: &TestApp, run: &str, token: &str, status: ReplayStatus) -> ReplayRunView {
    app.eventually(&format!("run {run} to be {status}"), WAIT, || async {
        let body = run_status(app, run, token).await;
        (body.status == status).then_some(body)
    })
    .await
}

fn executions(app: &TestApp, id: WithdrawalId) -> u32 {
    app.provider.mock.transfers().iter().filter(|t| t.reference == id.to_string()).map(|t| t.executions).sum()
}

async fn a_dry_run_reports_count_and_sample_and_changes_nothing(app: TestApp) {
    let ids = rejected(&app, 3).await;
    let operator = app.operator("admin").await;
    let before: Vec<_> = futures::future::join_all(
        ids.iter().map(|id| async { job_store::jobs_for_withdrawal(&app.db, app.key(*id).await).await }),
    )
    .await;

    let response = post(
        &app,
        "/ops/v1/replays",
        &operator,
        json!({
        "reason": "check the blast radius", "filter": {"category": "dependency_rejected"},
        "expected_payload_version": 2, "destination_queue": "payouts", "dry_run": true}),
    )
    .await;

    assert_eq!(response.status(), 200);
    let body: DryRun = read(response).await;
    assert_eq!(body.count, 3);
    assert_eq!(body.sample.len(), 3);
    assert_eq!(body.sample[0].category, Category::DependencyRejected);
    let after: Vec<_> = futures::future::join_all(
        ids.iter().map(|id| async { job_store::jobs_for_withdrawal(&app.db, app.key(*id).await).await }),
    )
    .await;
    let count = |v: &Vec<Result<Vec<job_store::JobRow>, _>>| v.iter().map(|r| r.as_ref().unwrap().len()).sum::<usize>();
    assert_eq!(count(&before), count(&after), "no job enqueued");
    for id in &ids {
        let w = withdrawals::storage::withdrawals::find(&app.db, *id).await.unwrap().unwrap();
        assert_eq!(w.status, WithdrawalStatus::RequiresReview);
        let letter = dead_letters::for_withdrawal(&app.db, app.key(*id).await).await.unwrap().remove(0);
        assert!(dead_letters::events(&app.db, &letter).await.unwrap().is_empty());
    }

    // The dry run names exactly which letters it selected; a start that expects another
    // selection is refused, and a filter that narrows nothing is never "retry all".
    let digest = body.selection_digest;
    assert_eq!(digest.len(), 32);
    let start = |filter: Value, digest: &str| {
        json!({"reason": "go", "filter": filter, "expected_payload_version": 2, "destination_queue": "payouts",
               "expected_selection_digest": digest})
    };
    let stale =
        post(&app, "/ops/v1/replays", &operator, start(json!({"category": "dependency_rejected"}), "00ff")).await;
    let (status, code, _) = problem_code(stale).await;
    assert_eq!((status, code.as_str()), (409, "selection_changed"));
    let everything = post(&app, "/ops/v1/replays", &operator, start(json!({}), &digest)).await;
    let (status, code, _) = problem_code(everything).await;
    assert_eq!((status, code.as_str()), (422, "filter_required"));
    assert!(withdrawals::storage::replays::list_runs(&app.db, None, 10).await.unwrap().is_empty(), "nothing started");
    let started =
        post(&app, "/ops/v1/replays", &operator, start(json!({"category": "dependency_rejected"}), &digest)).await;
    assert_eq!(started.status(), 201, "the confirmed selection starts");
}

async fn a_replay_pays_each_withdrawal_once_and_leaves_the_envelope_untouched(app: TestApp) {
    let ids = rejected(&app, 3).await;
    let letters = letters_of(&app, &ids).await;
    let envelope_before = dead_letters::get(&app.db, DeadLetterId(letters[0])).await.unwrap().unwrap();
    let operator = app.operator("admin").await;

    let run = started(post(&app, "/ops/v1/replays", &operator, start_body(&letters, 50)).await).await;
    let run_id = run.id.to_string();
    let done = wait_run(&app, &run_id, &operator, ReplayStatus::Completed).await;
    for id in &ids {
        app.wait_for_status(*id, WithdrawalStatus::Completed, WAIT).await;
        assert_eq!(executions(&app, *id), 1, "paid once");
    }
    assert_eq!(progress(&done).released, 3);
    assert_eq!(
        dead_letters::get(&app.db, DeadLetterId(letters[0])).await.unwrap().unwrap(),
        envelope_before,
        "envelope untouched"
    );
    let operator_view: DeadLetterView = app.ops_get(&operator, &format!("/ops/v1/dead-letters/{}", letters[0])).await;
    let first_event = &operator_view.events.as_ref().expect("a letter's events")[0];
    assert_eq!(first_event.action, LetterEvent::Replayed);
    assert_eq!(first_event.replay_job_status, Some(Some(JobStatus::Succeeded)), "the handling state shows the outcome");
    let first = dead_letters::get(&app.db, DeadLetterId(letters[0])).await.unwrap().unwrap();
    let events = dead_letters::events(&app.db, &first).await.unwrap();
    let actions: Vec<&str> = events.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["replayed", "closed"], "replayed, then closed when the withdrawal completed");
    assert_eq!(events[0].details.as_ref().unwrap().0["run_id"], run_id);
    assert!(events[1].reason.starts_with("withdrawal completed: "), "{}", events[1].reason);
    let final_status = run_status(&app, &run_id, &operator).await;
    assert_eq!(progress(&final_status).succeeded, 3);
    app.assert_ledger_invariant().await;
}

async fn releases_hold_the_rate_limit(app: TestApp) {
    let ids = rejected(&app, 200).await;
    let letters = letters_of(&app, &ids).await;
    let operator = app.operator("admin").await;
    let rate = 25;

    let run = started(post(&app, "/ops/v1/replays", &operator, start_body(&letters, rate)).await).await;
    let run_id = run.id.to_string();
    wait_run(&app, &run_id, &operator, ReplayStatus::Completed).await;

    let items = withdrawals::storage::replays::items(&app.db, run_id.parse().unwrap()).await.unwrap();
    let mut times: Vec<_> = items.iter().filter_map(|i| i.released_at).collect();
    times.sort();
    assert_eq!(times.len(), 200);
    let span = (times.last().unwrap().0 - times[0].0).to_std().unwrap().as_secs_f64();
    let observed = (times.len() - 1) as f64 / span;
    // The limit is a ceiling: never more than 10% over it. Below it only a starved machine (two
    // cores running the whole suite) lags; half the rate still shows releases are paced by the
    // limiter, not by something slower (a release at 22.4/s failed this once with a 10% floor).
    assert!(
        observed <= rate as f64 * 1.1 && observed >= rate as f64 * 0.5,
        "released {observed:.1}/s against a limit of {rate}/s"
    );
}

async fn pause_stops_releases_resume_continues_and_cancel_stops_for_good(app: TestApp) {
    let ids = rejected(&app, 30).await;
    let letters = letters_of(&app, &ids).await;
    let operator = app.operator("admin").await;
    let run = started(post(&app, "/ops/v1/replays", &operator, start_body(&letters, 5)).await).await;
    let run_id = run.id.to_string();
    let released = |body: &ReplayRunView| progress(body).released;
    app.eventually("two releases", WAIT, || async {
        (released(&run_status(&app, &run_id, &operator).await) >= 2).then_some(())
    })
    .await;

    let paused =
        post(&app, &format!("/ops/v1/replays/{run_id}/pause"), &operator, json!({"reason": "watch the provider"}))
            .await;
    assert_eq!(paused.status(), 200);
    tokio::time::sleep(Duration::from_millis(300)).await; // a release already past its checks may land
    let at_pause = released(&run_status(&app, &run_id, &operator).await);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(released(&run_status(&app, &run_id, &operator).await), at_pause, "paused: nothing released");

    let resumed =
        post(&app, &format!("/ops/v1/replays/{run_id}/resume"), &operator, json!({"reason": "provider fine"})).await;
    assert_eq!(resumed.status(), 200);
    app.eventually("releases after resume", WAIT, || async {
        (released(&run_status(&app, &run_id, &operator).await) > at_pause).then_some(())
    })
    .await;

    let cancelled =
        post(&app, &format!("/ops/v1/replays/{run_id}/cancel"), &operator, json!({"reason": "enough"})).await;
    assert_eq!(cancelled.status(), 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let at_cancel = run_status(&app, &run_id, &operator).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let later = run_status(&app, &run_id, &operator).await;
    assert_eq!(later.status, ReplayStatus::Cancelled);
    assert_eq!(released(&later), released(&at_cancel), "cancelled: nothing more released");
    assert!(progress(&later).cancelled > 0);
    assert_eq!(progress(&later).pending, 0);
    let again = post(&app, &format!("/ops/v1/replays/{run_id}/resume"), &operator, json!({"reason": "oops"})).await;
    let (status, code, _) = problem_code(again).await;
    assert_eq!((status, code.as_str()), (409, "invalid_run_state"), "cancel is for good");
    let trail = run_audit(&app, &run_id).await;
    assert_eq!(
        trail,
        [
            ("replay.resume".to_owned(), "oops".to_owned(), "invalid_run_state".to_owned()),
            ("replay.cancel".into(), "enough".into(), "ok".into()),
            ("replay.resume".into(), "provider fine".into(), "ok".into()),
            ("replay.pause".into(), "watch the provider".into(), "ok".into()),
            ("replay.start".into(), "provider fixed the account check".into(), "ok".into()),
        ],
        "exactly one audit row per action, with its reason"
    );
}

/// (action, reason, result) of the audit rows about `run`, newest first.
async fn run_audit(app: &TestApp, run: &str) -> Vec<(String, String, String)> {
    let filter =
        withdrawals::storage::audit::AuditFilter { target_id: Some(run.to_owned()), limit: 100, ..Default::default() };
    withdrawals::storage::audit::list(&app.db, &filter)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.action, r.reason, r.result))
        .collect()
}

async fn a_run_whose_jobs_keep_dead_lettering_pauses_itself(app: TestApp) {
    let ids = rejected(&app, 6).await;
    let letters = letters_of(&app, &ids).await;
    app.provider
        .mock
        .set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::InvalidAccount)] });
    let operator = app.operator("admin").await;
    let mut body = start_body(&letters, 20);
    body["auto_pause_threshold"] = json!(2);
    body["max_concurrency"] = json!(1);

    let run = started(post(&app, "/ops/v1/replays", &operator, body).await).await;
    let run_id = run.id.to_string();

    let paused = wait_run(&app, &run_id, &operator, ReplayStatus::Paused).await;
    assert!(paused.paused_reason.as_deref().unwrap().starts_with("auto-paused"), "{paused:?}");
    assert!(progress(&paused).new_dead_letters >= 2);
    assert!(progress(&paused).pending > 0, "stopped before releasing everything");
}

async fn two_concurrent_replays_of_one_dead_letter_replay_it_once(app: TestApp) {
    let ids = rejected(&app, 1).await;
    let letters = letters_of(&app, &ids).await;
    let first = app.operator("admin").await;
    let second = app.operator("admin").await;

    let (a, b) = tokio::join!(
        post(&app, "/ops/v1/replays", &first, start_body(&letters, 10)),
        post(&app, "/ops/v1/replays", &second, start_body(&letters, 10))
    );

    let mut statuses = [a.status().as_u16(), b.status().as_u16()];
    statuses.sort();
    assert_eq!(statuses, [201, 409]);
    let (winner, loser) = if a.status() == 201 { (a, b) } else { (b, a) };
    let run: ReplayRunView = read(winner).await;
    let (_, code, problem) = problem_code(loser).await;
    assert_eq!(code, "already_replaying");
    assert!(problem.detail.as_str().contains(&run.id.to_string()), "names the first run: {problem:?}");
    app.wait_for_status(ids[0], WithdrawalStatus::Completed, WAIT).await;
    assert_eq!(executions(&app, ids[0]), 1);
}

async fn a_large_run_waits_for_a_second_operators_approval(app: TestApp) {
    let ids = rejected(&app, 3).await;
    let letters = letters_of(&app, &ids).await;
    // This app's threshold is 250; a smaller one for this test comes from a second app sharing the database.
    let mut config = AppConfig::default();
    config.replay.approval_threshold = 2;
    let strict = crate::harness::serve_extra(&app, config).await;
    let admin = withdrawals::domain::Role::Admin;
    let starter =
        withdrawals::provisioning::create_enrolled_operator(&app.db, "Ada Starter", admin).await.unwrap().token;
    let approver =
        withdrawals::provisioning::create_enrolled_operator(&app.db, "Grace Approver", admin).await.unwrap().token;

    let run = started(post_to(&strict, "/ops/v1/replays", &starter, start_body(&letters, 20)).await).await;
    assert_eq!(run.status, ReplayStatus::AwaitingApproval);
    let run_id = run.id.to_string();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(progress(&run_status(&app, &run_id, &approver).await).released, 0, "nothing released before approval");

    let listed = |query: &'static str| {
        let (app, approver) = (&app, &approver);
        async move {
            let response =
                app.client.get(app.url(&format!("/ops/v1/replays{query}"))).bearer_auth(approver).send().await.unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap())
        }
    };
    let (status, waiting) = listed("?status=awaiting_approval").await;
    assert_eq!(status, 200);
    let waiting: List<ReplayRunView> = typed(waiting);
    assert_eq!(waiting.data.len(), 1, "the run is listed as awaiting approval");
    assert_eq!(waiting.data[0].id, run.id);
    assert_eq!(progress(&waiting.data[0]).pending, 3);
    assert_eq!(typed::<List<ReplayRunView>>(listed("?status=running").await.1).data.len(), 0);
    let (status, bad) = listed("?status=bogus").await;
    assert_eq!((status, typed::<Problem>(bad).code.as_str()), (422, "invalid_status"));

    let own = post_to(&strict, &format!("/ops/v1/replays/{run_id}/approve"), &starter, json!({"reason": "mine"})).await;
    let (status, code, _) = problem_code(own).await;
    assert_eq!((status, code.as_str()), (403, "second_operator_required"));
    let approved = post_to(
        &strict,
        &format!("/ops/v1/replays/{run_id}/approve"),
        &approver,
        json!({"reason": "checked the sample"}),
    )
    .await;
    assert_eq!(approved.status(), 200);
    // Who started and who approved, by name (issue 21), not only by id.
    let shown = run_status(&app, &run_id, &approver).await;
    assert_eq!(
        (shown.started_by_name.as_str(), shown.approved_by_name.as_deref()),
        ("Ada Starter", Some("Grace Approver"))
    );
    assert_eq!(waiting.data[0].started_by_name, "Ada Starter");

    wait_run(&app, &run_id, &approver, ReplayStatus::Completed).await;
    for id in &ids {
        app.wait_for_status(*id, WithdrawalStatus::Completed, WAIT).await;
    }
    let trail = run_audit(&app, &run_id).await;
    let actions: Vec<(&str, &str)> = trail.iter().map(|(a, _, r)| (a.as_str(), r.as_str())).collect();
    assert_eq!(
        actions,
        [("replay.approve", "ok"), ("replay.approve", "second_operator_required"), ("replay.start", "ok")]
    );
}

/// Issue 27: the same two-person rule as review decisions — a token the starter issued (here by
/// rotating it) is not a second person; an admin who issued nothing is.
async fn a_large_run_is_not_approved_with_a_token_its_starter_issued(app: TestApp) {
    let ids = rejected(&app, 3).await;
    let letters = letters_of(&app, &ids).await;
    let mut config = AppConfig::default();
    config.replay.approval_threshold = 2;
    let strict = crate::harness::serve_extra(&app, config).await;
    let (a, b, c) = (app.operator("admin").await, app.operator("admin").await, app.operator("admin").await);
    let run = started(post_to(&strict, "/ops/v1/replays", &a, start_body(&letters, 20)).await).await;
    assert_eq!(run.status, ReplayStatus::AwaitingApproval);
    let run_id = run.id.to_string();
    let b_id = crate::harness::operator_id(&b);
    let rotated: OperatorView =
        read(post_to(&strict, &format!("/ops/v1/operators/{b_id}/rotate-token"), &a, json!({})).await).await;
    let b_by_a = rotated.token.as_deref().expect("the new token, shown once");

    let refused =
        post_to(&strict, &format!("/ops/v1/replays/{run_id}/approve"), b_by_a, json!({"reason": "looks fine"})).await;

    let (status, code, _) = problem_code(refused).await;
    assert_eq!((status, code.as_str()), (403, "approval_needs_another_person"));
    let shown = run_status(&app, &run_id, &c).await;
    assert_eq!((shown.status, progress(&shown).released), (ReplayStatus::AwaitingApproval, 0));
    let approved =
        post_to(&strict, &format!("/ops/v1/replays/{run_id}/approve"), &c, json!({"reason": "checked"})).await;
    assert_eq!(approved.status(), 200);
    wait_run(&app, &run_id, &c, ReplayStatus::Completed).await;
    let actions: Vec<(String, String)> =
        run_audit(&app, &run_id).await.into_iter().map(|(action, _, result)| (action, result)).collect();
    assert_eq!(
        actions,
        [
            ("replay.approve".to_owned(), "ok".to_owned()),
            ("replay.approve".to_owned(), "approval_needs_another_person".to_owned()),
            ("replay.start".to_owned(), "ok".to_owned()),
        ]
    );
    app.assert_ledger_invariant().await;
}

async fn post_to(base: &str, path: &str, token: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new().post(format!("{base}{path}")).bearer_auth(token).json(&body).send().await.unwrap()
}

/// v1 `submit_payout` jobs (from before the schema change) for existing withdrawals whose own
/// jobs are taken out of the way.
async fn v1_jobs(app: &TestApp, jobs: &[(WithdrawalId, Value)]) {
    let own = job_store::claim(&app.db, Queue::Payouts.as_str(), "test", 10, TimeDelta::seconds(60)).await.unwrap();
    let mut accounts = Vec::new();
    for (id, _) in jobs {
        accounts.push(app.key(*id).await.account);
    }
    let mut tx = app.db.begin().await.unwrap();
    for job in own {
        job_store::finish(&mut tx, job.key(), job.lease_token, &Finish::Succeeded).await.unwrap();
    }
    for ((id, payload), account) in jobs.iter().zip(accounts) {
        job_store::enqueue(
            &mut tx,
            &NewJob {
                kind: JobKind::SubmitPayout.into(),
                payload: serde_json::to_vec(payload).unwrap(),
                payload_version: 1,
                run_at: DbTime::now(),
                correlation_id: "pre-deploy".into(),
                account_id: account,
                withdrawal_id: Some(*id),
            },
        )
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
}

async fn a_replay_after_a_schema_change_upgrades_v1_payloads_and_skips_what_cannot_be_upgraded(app: TestApp) {
    let alice = app.customer("100.00").await;
    let good = app.create_withdrawal(&alice, "good", "10.00").await;
    let broken = app.create_withdrawal(&alice, "broken", "10.00").await;
    v1_jobs(
        &app,
        &[(good, json!({"withdrawal_id": good.to_string()})), (broken, json!({"withdrawal_id": "not-a-uuid"}))],
    )
    .await;
    app.provider
        .mock
        .set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::InvalidAccount)] });
    app.start_default_worker();
    app.wait_for_status(good, WithdrawalStatus::RequiresReview, WAIT).await;
    app.wait_for_status(broken, WithdrawalStatus::RequiresReview, WAIT).await;
    app.provider.mock.set_faults(FaultConfig::default());
    let letters = letters_of(&app, &[good, broken]).await;
    for letter in &letters {
        assert_eq!(dead_letters::get(&app.db, DeadLetterId(*letter)).await.unwrap().unwrap().payload_version, 1);
    }
    let operator = app.operator("admin").await;
    let mut body = start_body(&letters, 20);
    body["expected_payload_version"] = json!(1);

    let run = started(post(&app, "/ops/v1/replays", &operator, body).await).await;
    let run_id = run.id.to_string();
    let done = wait_run(&app, &run_id, &operator, ReplayStatus::Completed).await;

    app.wait_for_status(good, WithdrawalStatus::Completed, WAIT).await;
    assert_eq!(executions(&app, good), 1);
    let items = done.items.as_ref().expect("a run's items");
    let skipped = items.iter().find(|i| i.dead_letter_id == letters[1]).unwrap();
    assert_eq!(skipped.status, ReplayItemStatus::Skipped);
    assert!(skipped.detail.as_deref().unwrap().contains("withdrawal_id is not a UUID"), "{skipped:?}");
    let released = items.iter().find(|i| i.dead_letter_id == letters[0]).unwrap();
    let job = job_store::job_row(
        &app.db,
        JobKey { account: app.key(good).await.account, id: JobId(released.job_id.expect("a released item's job")) },
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(job.payload_version, 2, "released as the current version");
    assert_eq!(
        withdrawals::storage::withdrawals::find(&app.db, broken).await.unwrap().unwrap().status,
        WithdrawalStatus::RequiresReview
    );
    app.assert_ledger_invariant().await;
}

async fn an_operator_replays_within_limits_and_an_admin_beyond_them(app: TestApp) {
    let ids = rejected(&app, 1).await;
    let letters = letters_of(&app, &ids).await;
    let operator = app.operator("operator").await;

    let too_fast = post(&app, "/ops/v1/replays", &operator, start_body(&letters, 50)).await;

    let (status, code, _) = problem_code(too_fast).await;
    assert_eq!((status, code.as_str()), (403, "admin_required"));
    let mut gentle = start_body(&letters, 10);
    gentle["max_concurrency"] = json!(4);
    assert_eq!(post(&app, "/ops/v1/replays", &operator, gentle).await.status(), 201);
}

async fn replaying_a_side_effect_unknown_letter_asks_the_provider_first_and_pays_each_withdrawal_once(app: TestApp) {
    // Arrange: two payouts whose outcome nobody learnt — the provider executed `paid` (its answer
    // lost after the commit) and not `unpaid` (lost before) — and lookups down for the whole
    // reconciliation window: two `side_effect_unknown` letters.
    let provider = crate::harness::provider_mock(200).await;
    let alice = app.customer("100.00").await;
    let paid = app.create_withdrawal(&alice, "paid", "10.00").await;
    let unpaid = app.create_withdrawal(&alice, "unpaid", "15.00").await;
    let on_create = |id: WithdrawalId, effect| FaultRule {
        idempotency_key: Some(id.to_string()),
        ..FaultRule::new(RouteMatch::Create, effect)
    };
    provider.mock.set_faults(FaultConfig {
        rules: vec![
            on_create(paid, FaultEffect::TimeoutAfterCommit { ms: 800 }),
            on_create(unpaid, FaultEffect::TimeoutBeforeCommit { ms: 800 }),
            FaultRule::new(RouteMatch::Lookup, FaultEffect::LookupUnavailable),
        ],
    });
    let mut config = crate::harness::worker_config("w1");
    config.reconcile_policy.max_elapsed = Duration::from_millis(800);
    config.in_flight_grace = Duration::from_millis(400);
    let patient =
        withdrawals::provider::breaker::BreakerConfig { minimum_number_of_calls: 1_000, ..Default::default() };
    let gateway = withdrawals::startup::gateway_with(provider.provider.clone(), patient);
    let hasty = CancellationToken::new();
    let worker =
        tokio::spawn(withdrawals::jobs::worker::Worker::new(app.db.clone(), gateway, config).run(hasty.clone()));
    for id in [paid, unpaid] {
        app.wait_for_status(id, WithdrawalStatus::RequiresReview, WAIT).await;
        let letter = dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap().remove(0);
        assert_eq!(letter.side_effect_state.as_str(), "unknown");
    }
    assert_eq!(provider.mock.transfers().len(), 1, "only `paid` was executed");
    provider.mock.set_faults(FaultConfig::default());
    // The outage is over: the hasty worker (a 200 ms provider timeout, an 800 ms window) stops
    // before anything is replayed, and one with the ordinary test clocks takes over, so a loaded
    // machine cannot turn a slow answer after the replay into a second dead letter.
    hasty.cancel();
    worker.await.unwrap().unwrap();
    app.start_worker(
        crate::harness::gateway_to(provider.mock.url(), Duration::from_secs(5)),
        crate::harness::worker_config("w2"),
    );
    let seen_before = provider.mock.requests().len();

    // Act: replay both letters.
    let letters = letters_of(&app, &[paid, unpaid]).await;
    let admin = app.operator("admin").await;
    let body = json!({"reason": "provider lookups are back", "dead_letter_ids": letters, "expected_payload_version": 1,
                      "destination_queue": "reconciliation", "rate_per_second": 50, "max_concurrency": 100});
    assert_eq!(post(&app, "/ops/v1/replays", &admin, body).await.status(), 201);

    // Assert: both complete; for each, the provider was asked by the operation key before
    // anything else. `paid` completes without a second create; `unpaid` is created exactly once
    // more (the controlled retry reconciliation proved safe).
    for id in [paid, unpaid] {
        app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    }
    let after: Vec<_> = provider.mock.requests().into_iter().skip(seen_before).collect();
    let routes = |id: WithdrawalId| -> Vec<Route> {
        after.iter().filter(|r| r.idempotency_key.as_deref() == Some(&id.to_string())).map(|r| r.route).collect()
    };
    let (paid_routes, unpaid_routes) = (routes(paid), routes(unpaid));
    assert_eq!(paid_routes.first(), Some(&Route::Lookup), "{paid_routes:?}");
    assert!(!paid_routes.contains(&Route::Create), "no second create for a paid withdrawal: {paid_routes:?}");
    assert_eq!(unpaid_routes.first(), Some(&Route::Lookup), "{unpaid_routes:?}");
    assert_eq!(unpaid_routes.iter().filter(|r| **r == Route::Create).count(), 1, "{unpaid_routes:?}");
    let executions = |id: WithdrawalId| -> u32 {
        provider.mock.transfers().iter().filter(|t| t.reference == id.to_string()).map(|t| t.executions).sum()
    };
    assert_eq!((executions(paid), executions(unpaid)), (1, 1), "each paid once");
    let jobs = job_store::jobs_for_withdrawal(&app.db, app.key(unpaid).await).await.unwrap();
    let retry = jobs.iter().rev().find(|j| j.kind == JobKind::SubmitPayout.as_str()).unwrap();
    let retry: Value = serde_json::from_slice(&retry.payload).unwrap();
    assert!(retry["reconciliation_result_id"].is_string(), "a controlled retry, on reconciliation's proof: {retry}");
    let (available, held, paid_out) = app.usd_balance(&alice).await;
    assert_eq!((available.as_str(), held.as_str(), paid_out.as_str()), ("75.00", "0.00", "25.00"));
    app.assert_ledger_invariant().await;
}
