//! The chaos run's checks catch what they claim to (the run itself is `withdrawals-tools chaos`,
//! run small by `scripts/test`): a completed withdrawal the provider never paid, a key executed
//! twice, a second transfer for one withdrawal, a lost or unannounced withdrawal, a secret in a
//! log, a withdrawal the provider paid that is `failed`, an account whose `paid_out` is not what
//! the provider paid, a withdrawal left unfinished. And the chaos run's scripted operators do what
//! they claim to: press every button on a withdrawal whose transfer is still pending, and get it
//! refused until the provider settles. And the chaos run's settlement phase: over two days of the
//! provider's clock, every injected report discrepancy is found once as an open exception of its
//! kind, the real return is credited once and the spurious one not at all, the malformed report
//! stores nothing — and its checks notice a discrepancy that went unfound or a line left unmatched;
//! with too few completed withdrawals it injects only what needs none; with two providers, each
//! provider's discrepancies are found at that provider, a line for the other's withdrawal is an
//! `unknown_transfer`, and the checks notice a withdrawal matched in the wrong provider's report or
//! a report checked against the wrong provider's record. And the two-provider run's checks
//! (`--providers 2`): a withdrawal moved past a provider that refused connections is counted as
//! moved and paid at the second, and a key the first provider also executed is found at two
//! providers and as a move away from an execution.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use provider_mocks::{
    FaultConfig, FaultEffect, FaultRule, RouteMatch, Settlement, SettlementMode, TransferRecord, TransferStatus,
};
use rust_decimal::Decimal;
use withdrawals::config::AppConfig;
use withdrawals::domain::{AmountLimits, WithdrawalStatus};
use withdrawals_tools::chaos::checks::{check, Secrets};
use withdrawals_tools::chaos::load::Accepted;
use withdrawals_tools::chaos::operator::{Button, Desk, Limits, Operator};
use withdrawals_tools::chaos::settlement;
use withdrawals_tools::chaos::two_providers;

use crate::both_backends;
use crate::harness::{provider_mock, serve_extra, worker_config, TestApp};

both_backends!(
    the_chaos_checks_find_doubled_missing_and_leaked_money,
    the_chaos_checks_find_money_paid_against_the_ledger,
    the_chaos_operators_are_refused_until_the_provider_settles,
    the_chaos_settlement_phase_finds_each_discrepancy_once_and_credits_the_real_return_once,
    the_chaos_settlement_phase_with_few_completions_injects_only_the_unknown_transfer,
    the_chaos_settlement_phase_with_two_providers_finds_each_ones_discrepancies_at_that_provider,
    the_two_provider_checks_count_a_move_and_find_a_key_executed_at_both,
);

async fn the_chaos_checks_find_doubled_missing_and_leaked_money(app: TestApp) {
    app.start_default_worker();
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "25.00").await;
    app.wait_for_status(id, WithdrawalStatus::Completed, std::time::Duration::from_secs(20)).await;
    let paid: Vec<TransferRecord> = app.provider.mock.transfers();
    assert_eq!(paid.len(), 1);
    let accepted: HashMap<String, Accepted> = [("k1".to_owned(), Accepted { id: id.to_string() })].into();
    let dir = tempfile::tempdir().unwrap();
    let clean_log = dir.path().join("clean.log");
    std::fs::write(&clean_log, "paid to ****5678\n").unwrap();
    let secrets =
        Secrets { account_numbers: HashSet::from(["12345678".to_owned()]), strings: vec![alice.api_key.clone()] };

    let clean = check(&app.db, &accepted, &paid, std::slice::from_ref(&clean_log), &secrets).await.unwrap();
    assert_eq!(clean.violations, Vec::<String>::new());
    assert_eq!(clean.final_states.get("completed"), Some(&1));
    assert_eq!(clean.paid_transfers, 1);

    let found = |transfers: Vec<TransferRecord>, accepted: &HashMap<String, Accepted>, log: &std::path::Path| {
        let (db, transfers, accepted, log) = (app.db.clone(), transfers, accepted.clone(), log.to_path_buf());
        let secrets = Secrets { account_numbers: secrets.account_numbers.clone(), strings: secrets.strings.clone() };
        async move { check(&db, &accepted, &transfers, &[log], &secrets).await.unwrap().violations.join("\n") }
    };
    let unpaid = found(vec![], &accepted, &clean_log).await;
    assert!(unpaid.contains("is completed (decided by worker) with 0 paid transfers"), "{unpaid}");

    let mut twice = paid.clone();
    twice[0].executions = 2;
    let doubled = found(twice, &accepted, &clean_log).await;
    assert!(doubled.contains("paid twice"), "{doubled}");

    let mut second = paid[0].clone();
    second.id = "tr_second".into();
    second.idempotency_key = "another-key".into();
    let two = found(vec![paid[0].clone(), second], &accepted, &clean_log).await;
    assert!(two.contains("has 2 transfers at the provider"), "{two}");

    let mut failed = paid.clone();
    failed[0].status = TransferStatus::Failed;
    let contradicted = found(failed, &accepted, &clean_log).await;
    assert!(contradicted.contains("is completed (decided by worker) with 0 paid transfers"), "{contradicted}");

    let lost =
        found(paid.clone(), &[("k2".to_owned(), Accepted { id: uuid::Uuid::new_v4().to_string() })].into(), &clean_log)
            .await;
    assert!(lost.contains("lost: withdrawal"), "{lost}");
    assert!(lost.contains("no customer was told about it"), "{lost}");

    let leaky_log = dir.path().join("leaky.log");
    std::fs::write(&leaky_log, format!("account 12345678 key {}\n", alice.api_key)).unwrap();
    let leaked = found(paid.clone(), &accepted, &leaky_log).await;
    assert!(leaked.contains("full account number ending 5678"), "{leaked}");
    app.assert_ledger_invariant().await;
}

fn no_secrets() -> Secrets {
    Secrets { account_numbers: HashSet::new(), strings: vec![] }
}

async fn violations(app: &TestApp, accepted: &HashMap<String, Accepted>, transfers: &[TransferRecord]) -> String {
    check(&app.db, accepted, transfers, &[], &no_secrets()).await.unwrap().violations.join("\n")
}

async fn the_chaos_checks_find_money_paid_against_the_ledger(app: TestApp) {
    app.start_default_worker();
    let alice = app.customer("100.00").await;
    let paid_id = app.create_withdrawal(&alice, "k1", "25.00").await;
    app.wait_for_status(paid_id, WithdrawalStatus::Completed, Duration::from_secs(20)).await;
    // The second one the provider fails: the hold goes back to alice.
    let fails = FaultEffect::SettleFailed { failure_code: "rejected_by_bank".into() };
    app.provider.mock.set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Create, fails)] });
    let failed_id = app.create_withdrawal(&alice, "k2", "10.00").await;
    app.wait_for_status(failed_id, WithdrawalStatus::Failed, Duration::from_secs(20)).await;
    app.provider.mock.set_faults(FaultConfig::default());
    let truth = app.provider.mock.transfers();
    assert_eq!(truth.len(), 2);
    let accepted: HashMap<String, Accepted> = [
        ("k1".to_owned(), Accepted { id: paid_id.to_string() }),
        ("k2".to_owned(), Accepted { id: failed_id.to_string() }),
    ]
    .into();
    let clean = check(&app.db, &accepted, &truth, &[], &no_secrets()).await.unwrap();
    assert_eq!(clean.violations, Vec::<String>::new());
    assert_eq!(clean.paid_out_balances_checked, 1);
    let record = |id: withdrawals::domain::WithdrawalId| {
        truth.iter().find(|t| t.idempotency_key == id.to_string()).unwrap().clone()
    };

    // A return is money that went out: still paid, still explained.
    let mut returned = record(paid_id);
    returned.status = TransferStatus::Returned;
    assert_eq!(violations(&app, &accepted, &[returned, record(failed_id)]).await, "");

    // The provider paid the withdrawal the service failed (and released): paid twice.
    let mut paid_too = record(failed_id);
    paid_too.status = TransferStatus::Paid;
    let doubled = violations(&app, &accepted, &[record(paid_id), paid_too]).await;
    assert!(
        doubled.contains(&format!("paid but failed: the provider paid transfer {}", record(failed_id).id)),
        "{doubled}"
    );
    assert!(
        doubled.contains(&format!("account {} paid_out 25.00 USD but the provider paid 35.00 USD", alice.account_id)),
        "{doubled}"
    );

    // The ledger says paid out, the provider says it never paid.
    let mut unpaid = record(paid_id);
    unpaid.status = TransferStatus::Failed;
    let missing = violations(&app, &accepted, &[unpaid, record(failed_id)]).await;
    assert!(
        missing.contains(&format!("account {} paid_out 25.00 USD but the provider paid 0 USD", alice.account_id)),
        "{missing}"
    );

    // Money paid under a key that is no withdrawal's belongs to no account.
    let mut stray = record(paid_id);
    stray.id = "tr_stray".into();
    stray.idempotency_key = uuid::Uuid::new_v4().to_string();
    stray.reference = stray.idempotency_key.clone();
    let strays = violations(&app, &accepted, &[record(paid_id), record(failed_id), stray.clone()]).await;
    assert!(
        strays.contains(&format!("transfer tr_stray under key {}, which is no withdrawal's", stray.idempotency_key)),
        "{strays}"
    );

    // A withdrawal still in flight is not an end state.
    app.execute_raw("UPDATE withdrawals SET status = 'processing' WHERE status = 'completed'").await;
    let stuck = violations(&app, &accepted, &truth).await;
    assert!(stuck.contains(&format!("stuck: withdrawal {paid_id} is still processing")), "{stuck}");
}

/// Two operators work a review queue whose transfers are still pending at the provider: every
/// button is refused until the provider settles; then the paid one is completed with the
/// provider's transfer id and the failed one, over the two-person threshold, is failed by one
/// operator and approved by the other (its requester cannot).
async fn the_chaos_operators_are_refused_until_the_provider_settles(app: TestApp) {
    const SETTLE: Duration = Duration::from_secs(6);
    let mut config = worker_config("w-chaos-ops");
    // A short window and quick polls: pending transfers reach review well before they settle.
    config.pending_poll = Duration::from_millis(50);
    config.reconcile_policy.max_elapsed = Duration::from_millis(300);
    app.start_worker(app.gateway.clone(), config);
    let mut two_person = AppConfig::default();
    two_person.review.approval_thresholds = AmountLimits { default_max: Decimal::from(20), ..AmountLimits::default() };
    two_person.review.in_flight_grace = Duration::from_millis(2_500);
    let ops_url = serve_extra(&app, two_person).await;
    let alice = app.customer("100.00").await;
    let settle =
        |fail_ratio: f64| Settlement { mode: SettlementMode::Async, delay_ms: SETTLE.as_millis() as u64, fail_ratio };

    let started = Instant::now();
    app.provider.mock.set_settlement(settle(0.0));
    let small = app.create_withdrawal(&alice, "will-pay", "10.00").await;
    app.wait_for_status(small, WithdrawalStatus::RequiresReview, Duration::from_secs(10)).await;
    app.provider.mock.set_settlement(settle(1.0));
    let large = app.create_withdrawal(&alice, "will-fail", "30.00").await;
    app.wait_for_status(large, WithdrawalStatus::RequiresReview, Duration::from_secs(10)).await;

    let desk = Desk::new(
        &ops_url,
        &app.provider.mock.url(),
        Limits {
            pace: Duration::from_millis(1),
            max_requests: 1_000,
            deadline: Instant::now() + Duration::from_secs(60),
        },
    )
    .unwrap();
    let a = Operator {
        name: "A".into(),
        token: app.operator("operator").await,
        order: [Button::Fail, Button::Retry, Button::Complete],
        newest_first: false,
    };
    let b = Operator {
        name: "B".into(),
        token: app.operator("operator").await,
        order: [Button::Retry, Button::Fail, Button::Complete],
        newest_first: true,
    };
    assert!(!desk.one_pass(&a).await, "a pending transfer keeps the pass unsettled");
    assert!(!desk.one_pass(&b).await);
    let transfers = app.provider.mock.transfers();
    assert!(
        transfers.iter().all(|t| t.status == TransferStatus::Pending),
        "the operators' first passes must meet both transfers pending (after {:?}): {transfers:?}",
        started.elapsed()
    );
    for id in [small, large] {
        let w = withdrawals::storage::withdrawals::find(&app.db, id).await.unwrap().unwrap();
        assert_eq!(w.status, WithdrawalStatus::RequiresReview, "nothing moves while the provider has not settled");
    }

    app.eventually("the provider settles both transfers", Duration::from_secs(30), || async {
        let t = app.provider.mock.transfers();
        t.iter().all(|t| t.status != TransferStatus::Pending).then_some(())
    })
    .await;
    assert!(!desk.one_pass(&a).await, "A completes the paid one and asks to fail the failed one");
    app.wait_for_status(small, WithdrawalStatus::Completed, Duration::from_secs(1)).await;
    assert!(!desk.one_pass(&b).await, "B approves A's decision");
    app.wait_for_status(large, WithdrawalStatus::Failed, Duration::from_secs(1)).await;
    assert!(desk.one_pass(&a).await, "an empty queue leaves nothing to do");

    let report = desk.report();
    let tally = serde_json::to_value(&report.actions).unwrap();
    assert_eq!(
        tally,
        serde_json::json!({
            "fail": {"transfer_pending_at_provider": 4, "transfer_paid_at_provider": 1, "pending_approval": 1},
            "retry": {"transfer_pending_at_provider": 4, "transfer_paid_at_provider": 1, "decision_pending": 1},
            "complete": {"provider_reference_mismatch": 4, "ok": 1},
            "approve": {"second_operator_required": 1, "ok": 1},
        })
    );
    assert_eq!(report.anomalies, Vec::<String>::new());
    assert_eq!(report.pending_at_provider_in_review, 2);

    let accepted: HashMap<String, Accepted> = [
        ("will-pay".to_owned(), Accepted { id: small.to_string() }),
        ("will-fail".to_owned(), Accepted { id: large.to_string() }),
    ]
    .into();
    assert_eq!(violations(&app, &accepted, &app.provider.mock.transfers()).await, "");
    assert_eq!(app.usd_balance(&alice).await, ("90.00".to_owned(), "0.00".to_owned(), "10.00".to_owned()));
    app.assert_ledger_invariant().await;
}

/// An ops server whose missing sweep has no grace days, as the chaos run's processes have.
async fn settlement_ops(app: &TestApp) -> String {
    let mut config = AppConfig::default();
    config.settlement.grace_days = 0;
    serve_extra(app, config).await
}

/// Where the settlement phase works: the ops API at `ops_url` as `token`, and the mock at
/// `mock_url` (of `provider`; `None`: the one provider).
fn settlement_api<'a>(
    app: &'a TestApp,
    ops_url: &'a str,
    mock_url: &'a str,
    token: &'a str,
    provider: Option<&'a str>,
) -> settlement::Api<'a> {
    settlement::Api { http: &app.client, base_url: ops_url, mock_url, operator_token: token, provider }
}

async fn completed(app: &TestApp, alice: &crate::harness::Customer, keys: std::ops::Range<u32>) -> Vec<String> {
    let mut ids = Vec::new();
    for i in keys {
        let id = app.create_withdrawal(alice, &format!("k{i}"), &format!("{}.25", 10 + i)).await;
        app.wait_for_status(id, WithdrawalStatus::Completed, Duration::from_secs(20)).await;
        ids.push(id.to_string());
    }
    ids
}

async fn the_chaos_settlement_phase_finds_each_discrepancy_once_and_credits_the_real_return_once(app: TestApp) {
    let stop = app.start_default_worker();
    let alice = app.customer("1000.00").await;
    let mock = &app.provider.mock;
    let start_day = mock.now().date_naive();
    // Three paid on the provider's first day, three on the next: two reports to import.
    let mut ids = completed(&app, &alice, 0..3).await;
    mock.set_clock_offset(chrono::TimeDelta::days(1));
    ids.extend(completed(&app, &alice, 3..6).await);
    stop.cancel();
    let _importer = app.settlement_worker();
    let ops_url = settlement_ops(&app).await;
    let token = app.operator("operator").await;
    let mock_url = mock.url();
    let api = settlement_api(&app, &ops_url, &mock_url, &token, None);

    let mut run = settlement::exercise(&app.db, &api, 7, start_day).await;
    let truth = mock.transfers();
    settlement::check(&app.db, &mut run, &[("default", &truth)]).await.unwrap();

    assert_eq!(run.violations, Vec::<String>::new());
    assert_eq!(run.days, vec![start_day, start_day.succ_opt().unwrap()]);
    assert_eq!((run.refused_status, run.refused_code.as_deref()), (Some(422), Some("report_refused")));
    assert!(run.refused_line.is_some_and(|l| l >= 2), "{:?}", run.refused_line);
    assert_eq!(run.reports_after_refusal, Some(0));
    assert_eq!(run.reports.len(), 2, "one version of each day: {:?}", run.reports);
    assert_eq!(run.reimport.as_ref().unwrap()["already_imported"], true);
    let kinds = |pairs: &[(&str, u64)]| pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect();
    assert_eq!(
        run.exceptions,
        kinds(&[("amount_mismatch", 1), ("missing_from_report", 1), ("returned", 1), ("unknown_transfer", 1)])
    );
    // Six paid lines less the omitted one, the spurious and the real return, the unknown transfer.
    assert_eq!(run.lines, 5 + 2 + 1);
    assert_eq!(run.matched, 4, "every paid line but the wrong amount: {:?}", run.line_results);
    assert_eq!(run.returns_credited, 1);
    assert_eq!(run.ledger_verify, "200 clean");
    let d = &run.injected;
    let chosen: HashSet<String> = [&d.omit_paid, &d.wrong_amount, &d.spurious_return, &d.bank_return]
        .into_iter()
        .map(|t| t.as_ref().expect("six completions are enough").withdrawal_id.to_string())
        .collect();
    assert_eq!(chosen.len(), 4, "four different withdrawals");
    assert!(chosen.iter().all(|id| ids.contains(id)));
    let returned = d.bank_return.clone().unwrap();
    let paid_out = format!("{}.00", 10 * 6 + (0..6).sum::<i64>()).parse::<Decimal>().unwrap() + Decimal::new(150, 2)
        - Decimal::new(returned.amount_minor, 2);
    let balance = app.usd_balance(&alice).await;
    assert_eq!(balance.2.parse::<Decimal>().unwrap(), paid_out, "paid out, less the one return: {balance:?}");
    app.assert_ledger_invariant().await;
    // The provider still counts the returned transfer as paid; the ledger has it back.
    let accepted: HashMap<String, Accepted> =
        ids.iter().enumerate().map(|(i, id)| (format!("k{i}"), Accepted { id: id.clone() })).collect();
    assert_eq!(violations(&app, &accepted, &mock.transfers()).await, "");

    // The checks notice a discrepancy no longer open, and a withdrawal no line matches.
    let omitted = d.omit_paid.as_ref().unwrap().withdrawal_id;
    app.execute_raw("UPDATE settlement_exceptions SET status = 'resolved' WHERE kind = 'missing_from_report'").await;
    let unmatched = ids.iter().find(|id| !chosen.contains(*id)).unwrap();
    let sql_id = if app.database_url.starts_with("sqlite:") {
        format!("X'{}'", unmatched.replace('-', ""))
    } else {
        format!("'{unmatched}'")
    };
    app.execute_raw(&format!("UPDATE settlement_lines SET result = 'status_mismatch' WHERE withdrawal_id = {sql_id}"))
        .await;
    let mut again = settlement::SettlementRun {
        provider: run.provider.clone(),
        injected: run.injected.clone(),
        ..Default::default()
    };
    settlement::check(&app.db, &mut again, &[("default", &truth)]).await.unwrap();
    let found = again.violations.join("\n");
    assert!(found.contains(&format!("missing_from_report exception on withdrawal {omitted} is resolved")), "{found}");
    assert!(found.contains(&format!("completed withdrawal {unmatched} has no matched settlement line")), "{found}");
}

async fn the_chaos_settlement_phase_with_few_completions_injects_only_the_unknown_transfer(app: TestApp) {
    let stop = app.start_default_worker();
    let alice = app.customer("100.00").await;
    completed(&app, &alice, 0..2).await;
    stop.cancel();
    let _importer = app.settlement_worker();
    let ops_url = settlement_ops(&app).await;
    let token = app.operator("operator").await;
    let mock_url = app.provider.mock.url();
    let api = settlement_api(&app, &ops_url, &mock_url, &token, None);

    let mut run = settlement::exercise(&app.db, &api, 7, app.provider.mock.now().date_naive()).await;
    settlement::check(&app.db, &mut run, &[("default", &app.provider.mock.transfers())]).await.unwrap();

    assert_eq!(run.violations, Vec::<String>::new());
    assert!(run.injected.skipped.as_deref().is_some_and(|s| s.contains("only 2 completed")), "{:?}", run.injected);
    assert!(run.injected.omit_paid.is_none() && run.injected.bank_return.is_none());
    assert_eq!(run.exceptions, [("unknown_transfer".to_owned(), 1)].into());
    assert_eq!((run.lines, run.matched, run.returns_credited), (3, 2, 0));
    let summary = settlement::describe(&serde_json::to_value(&run).unwrap()).join("\n");
    assert!(summary.contains("only 2 completed"), "{summary}");
    assert!(summary.contains("ledger verify 200 clean"), "{summary}");
}

/// Six withdrawals paid at `acme` for one customer, six at `bolt` for another (acme's breaker
/// forced open): the settlement phase
/// over both providers finds each one's four discrepancies, its made-up transfer and the line for
/// the other's withdrawal as exceptions of that provider, credits each real return once, and
/// leaves every other withdrawal matched at the provider that paid it. The checks then notice the
/// foreign line matched (as a provider-blind matcher would) and a report held against the other
/// provider's record.
async fn the_chaos_settlement_phase_with_two_providers_finds_each_ones_discrepancies_at_that_provider(app: TestApp) {
    let two = crate::settlement::providers::acme_and_bolt(serde_json::Value::Null, serde_json::Value::Null).await;
    let _worker = two.start_worker(&app, "w-chaos-two-settlement").drop_guard();
    let ops_url = two.serve(&app).await;
    let token = app.operator("operator").await;
    // Two customers: the two bank returns are made on different accounts.
    let (alice, bob) = (app.customer("1000.00").await, app.customer("1000.00").await);
    let at_acme = completed(&app, &alice, 0..6).await;
    two.gateways.get("acme").unwrap().breaker.force_open();
    let at_bolt = completed(&app, &bob, 6..12).await;
    two.gateways.get("acme").unwrap().breaker.reset();
    let (acme_url, bolt_url) = (two.acme.mock.url(), two.bolt.mock.url());
    let apis = [
        settlement_api(&app, &ops_url, &acme_url, &token, Some("acme")),
        settlement_api(&app, &ops_url, &bolt_url, &token, Some("bolt")),
    ];

    let mut runs = settlement::exercise_each(&app.db, &apis, 7, two.acme.mock.now().date_naive()).await;
    let (acme, bolt) = (two.acme.mock.transfers(), two.bolt.mock.transfers());
    let at = [("acme", acme.as_slice()), ("bolt", bolt.as_slice())];
    for run in &mut runs {
        settlement::check(&app.db, run, &at).await.unwrap();
    }

    let kinds = |pairs: &[(&str, u64)]| pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect();
    for (run, (mine, theirs, other)) in runs.iter().zip([(&at_acme, &at_bolt, "bolt"), (&at_bolt, &at_acme, "acme")]) {
        assert_eq!(run.violations, Vec::<String>::new(), "{}", run.provider);
        assert_eq!(run.reports.len(), 1, "{}: {:?}", run.provider, run.reports);
        assert_eq!(
            run.exceptions,
            kinds(&[("amount_mismatch", 1), ("missing_from_report", 1), ("returned", 1), ("unknown_transfer", 2)]),
            "{}",
            run.provider
        );
        // Six paid lines less the omitted one, the spurious and the real return, two unknown.
        assert_eq!((run.lines, run.matched, run.returns_credited), (5 + 2 + 2, 4, 1), "{}", run.provider);
        let d = &run.injected;
        for t in [&d.omit_paid, &d.wrong_amount, &d.spurious_return, &d.bank_return] {
            assert!(mine.contains(&t.as_ref().unwrap().withdrawal_id.to_string()), "{}: {t:?}", run.provider);
        }
        let foreign = d.foreign_line.as_ref().expect("a line for the other provider's withdrawal");
        assert_eq!(foreign.paid_at, other);
        assert!(theirs.contains(&foreign.withdrawal_id.to_string()), "{foreign:?}");
    }
    assert_eq!(
        runs[0].injected.unknown_transfer.as_ref().unwrap().transfer_id,
        runs[1].injected.unknown_transfer.as_ref().unwrap().transfer_id,
        "one made-up transfer id, an exception at each provider"
    );
    app.assert_ledger_invariant().await;

    // Bolt's line for acme's withdrawal, matched as a provider-blind matcher would match it.
    let foreign = runs[1].injected.foreign_line.clone().unwrap();
    let sql_id = if app.database_url.starts_with("sqlite:") {
        format!("X'{}'", foreign.withdrawal_id.simple())
    } else {
        format!("'{}'", foreign.withdrawal_id)
    };
    app.execute_raw(&format!(
        "UPDATE settlement_lines SET result = 'matched', withdrawal_id = {sql_id} WHERE transfer_id = '{}'",
        foreign.transfer_id
    ))
    .await;
    let mut bolts =
        settlement::SettlementRun { provider: "bolt".into(), injected: runs[1].injected.clone(), ..Default::default() };
    settlement::check(&app.db, &mut bolts, &at).await.unwrap();
    let found = bolts.violations.join("\n");
    assert!(
        found.contains(&format!(
            "withdrawal {}, executed at acme, came out matched in bolt's report",
            foreign.withdrawal_id
        )),
        "{found}"
    );

    // Acme's report held against bolt's record: acme's withdrawals are matched in no report of bolt.
    let mut swapped = settlement::SettlementRun { provider: "bolt".into(), ..Default::default() };
    settlement::check(&app.db, &mut swapped, &[("acme", bolt.as_slice()), ("bolt", acme.as_slice())]).await.unwrap();
    let found = swapped.violations.join("\n");
    assert!(
        found
            .contains(&format!("completed withdrawal {} has no matched settlement line in bolt's reports", at_acme[5])),
        "{found}"
    );
}

/// The first provider refuses connections (a closed port), its breaker opens after one call, and
/// the withdrawal moves to the second, which pays it: the two-provider checks count one move and
/// find nothing wrong — until the first provider's record shows the same key executed there too.
async fn the_two_provider_checks_count_a_move_and_find_a_key_executed_at_both(app: TestApp) {
    let bolt = provider_mock(500).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let file = serde_json::json!({"providers": [
        {"name": "acme", "url": format!("http://127.0.0.1:{closed}"), "currencies": ["USD"], "priority": 1,
         "api_key_env": "KEY", "breaker": {"failure_rate": 0.5, "window_s": 60, "min_calls": 1, "open_s": 3600}},
        {"name": "bolt", "url": bolt.mock.url(), "currencies": ["USD"], "priority": 2, "api_key_env": "KEY"},
    ]});
    let env = |name: &str| (name == "KEY").then(|| "test-provider-key".to_owned());
    let providers = withdrawals::config::providers::Providers::parse(&file.to_string(), false, &env).unwrap();
    let default = withdrawals::provider::breaker::BreakerConfig::default();
    let (connect, request) = (Duration::from_millis(300), Duration::from_millis(500));
    let gateways = withdrawals::startup::gateways_from(&providers, &default, connect, request).unwrap();
    app.start_worker(gateways, worker_config("w-chaos-two"));
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k-moves", "10.00").await;
    app.wait_for_status(id, WithdrawalStatus::Completed, Duration::from_secs(30)).await;

    let at_bolt = bolt.mock.transfers();
    let clean = two_providers::check(&app.db, &[("acme", &[]), ("bolt", &at_bolt)], None).await.unwrap();
    assert_eq!(clean.violations, Vec::<String>::new());
    assert_eq!((clean.moved, clean.attempted_at_two_providers, clean.keys_at_two_providers), (1, 1, 0));
    assert_eq!(clean.moves_by_rule.get("move: every attempt not_started"), Some(&1), "{:?}", clean.moves_by_rule);
    assert_eq!(clean.paid_at.get("bolt"), Some(&1));
    assert_eq!(clean.completed_at.get("bolt"), Some(&1));

    // Had acme executed the key as well (its attempt was refused, so it cannot have): paid twice.
    let both = two_providers::check(&app.db, &[("acme", &at_bolt), ("bolt", &at_bolt)], None).await.unwrap();
    let found = both.violations.join("\n");
    assert_eq!((both.keys_at_two_providers, both.moved_away_from_an_execution), (1, 1), "{found}");
    assert!(found.contains(&format!("key {id} executed at two providers")), "{found}");
}
