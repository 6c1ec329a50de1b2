//! Settlement reconciliation (SPEC §14): the provider mock's report and our parser agree on the
//! contract; an import matches every line to its withdrawal with the evidence stored, applies safe
//! outcomes only once the provider's live record agrees, opens an exception for every other
//! result, is idempotent, versions a corrected report with its differences, refuses a malformed
//! one whole; returns are re-credited once; the daily job imports and dead-letters a refused
//! report; `ledger verify --date` compares a day's totals with the report's. With several
//! providers ([`providers`]), a report is one provider's and matches only its withdrawals.

use std::time::Duration;

use chrono::NaiveDate;
use provider_mocks::{FaultConfig, FaultEffect, FaultRule, ReportFault, ReportFaultConfig, RouteMatch};
use rust_decimal::Decimal;
use serde_json::{json, Value};
use uuid::Uuid;
use withdrawals::config::AppConfig;
use withdrawals::customer::types::WithdrawalView;
use withdrawals::domain::settlement::{
    parse_report, ExceptionKind, ExceptionStatus, ImportState, LineResult, LineStatus, Resolution,
};
use withdrawals::domain::Category;
use withdrawals::domain::{WithdrawalId, WithdrawalStatus};
use withdrawals::http::error::Problem;
use withdrawals::jobs::settlement::{self as settlement_job, ImportSummary};
use withdrawals::jobs::Queue;
use withdrawals::ops::types::{
    AuditEntry, DeadLetterView, ExceptionView, ImportView, LedgerCheck, List, Page, ReportView, WithdrawalDetail,
};
use withdrawals::storage::settlement as store;
use withdrawals::storage::{returns, DbTime};

use crate::both_backends;
use crate::harness::{read, typed, worker_config, Backend, Customer, TestApp};

/// The app with no grace: a completed withdrawal missing from an imported day is an exception at
/// once (the grace days themselves are a clock comparison, covered by the storage query's cutoff).
async fn app(backend: Backend) -> TestApp {
    let mut config = AppConfig::default();
    config.settlement.grace_days = 0;
    TestApp::spawn_with(backend, config).await
}

both_backends!(with = app;
    the_providers_report_parses_and_a_bad_line_refuses_it_whole,
    a_days_report_matches_every_line_and_opens_an_exception_for_each_difference,
    a_paid_line_completes_a_processing_withdrawal_only_once_the_provider_confirms_it,
    a_withdrawal_whose_line_awaits_confirmation_is_not_missing_from_the_report,
    lines_that_contradict_our_state_are_status_mismatches_and_move_nothing,
    a_corrected_report_is_a_new_version_with_its_differences,
    a_malformed_report_is_refused_whole_and_applies_nothing,
    the_daily_job_imports_the_report_and_dead_letters_a_refused_one,
    a_refused_return_is_credited_later_once_the_providers_record_shows_it,
    a_large_report_imports_as_a_job_to_done_with_its_progress_and_one_audit_row,
    an_interrupted_import_run_again_finishes_exactly_once,
    an_unavailable_report_is_retried_by_the_imports_own_policy_not_reconciliations,
);

/// Several providers: each report is one provider's, matched only to its withdrawals.
pub(crate) mod providers;

/// The app with small report limits: 4 KiB and 5 lines.
async fn limited(backend: Backend) -> TestApp {
    let mut config = AppConfig::default();
    config.settlement.grace_days = 0;
    config.settlement.max_report_bytes = 4096;
    config.settlement.max_report_lines = 5;
    TestApp::spawn_with(backend, config).await
}

/// The tests of the report limits, on their own app.
mod limits {
    use super::*;

    both_backends!(with = limited;
        a_report_over_the_byte_or_line_limit_is_refused_and_nothing_is_stored,
        a_report_dated_after_tomorrow_or_holding_a_nul_is_refused_and_nothing_is_stored,
    );
}

const WAIT: Duration = Duration::from_secs(25);
const HEADER: &str = "transfer_id,idempotency_key,reference,amount,currency,fee,status,event_at\n";

/// `POST /ops/v1/settlement/imports` as an operator; the status and the JSON answer.
async fn import(app: &TestApp, token: &str, body: Value) -> (u16, Value) {
    let response =
        app.client.post(app.url("/ops/v1/settlement/imports")).bearer_auth(token).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A refused import's answer, as the problem it must be.
fn refusal(answer: &Value) -> Problem {
    typed(answer.clone())
}

/// An import through the API as an operator: 202 and the queued import, then its progress polled
/// (with a deadline) while a worker on the settlement queue, with no grace days like the app, runs
/// its job; the import once finished.
pub(crate) async fn import_job(app: &TestApp, token: &str, body: Value) -> ImportView {
    let (status, answer) = import(app, token, body).await;
    assert_eq!(status, 202, "{answer}");
    let queued: ImportView = typed(answer);
    assert_eq!(queued.state, ImportState::Queued);
    let _importer = app.settlement_worker();
    import_state(app, token, queued.id, |v| v.state.is_final()).await
}

/// The first dead letter `GET /ops/v1/dead-letters?{filter}` lists, polled until there is one.
async fn first_dead_letter(app: &TestApp, token: &str, filter: &str) -> DeadLetterView {
    app.eventually("a dead letter", WAIT, || async {
        let url = app.url(&format!("/ops/v1/dead-letters?{filter}"));
        let page: Page<DeadLetterView> = read(app.client.get(url).bearer_auth(token).send().await.unwrap()).await;
        page.data.into_iter().next()
    })
    .await
}

/// Polls `GET /ops/v1/settlement/imports/{id}` until `until` holds (or fails at the deadline).
async fn import_state(app: &TestApp, token: &str, id: Uuid, until: impl Fn(&ImportView) -> bool) -> ImportView {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let url = app.url(&format!("/ops/v1/settlement/imports/{id}"));
        let view: ImportView = read(app.client.get(url).bearer_auth(token).send().await.unwrap()).await;
        if until(&view) {
            return view;
        }
        assert!(std::time::Instant::now() < deadline, "the import did not get there in time: {view:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// [`import_job`] done: its summary.
pub(crate) async fn imported(app: &TestApp, token: &str, body: Value) -> ImportSummary {
    let view = import_job(app, token, body).await;
    assert_eq!(view.state, ImportState::Done, "{view:?}");
    view.summary.expect("a finished import's summary")
}

async fn exceptions(app: &TestApp, token: &str, query: &str) -> Vec<ExceptionView> {
    let url = app.url(&format!("/ops/v1/settlement/exceptions?{query}"));
    let page: Page<ExceptionView> = read(app.client.get(url).bearer_auth(token).send().await.unwrap()).await;
    page.data
}

/// Completed withdrawals of `amount` each, one per key, from one account.
async fn completed(app: &TestApp, customer: &Customer, keys: &[&str], amount: &str) -> Vec<WithdrawalId> {
    let mut ids = Vec::new();
    for key in keys {
        ids.push(app.create_withdrawal(customer, key, amount).await);
    }
    for id in &ids {
        app.wait_for_status(*id, WithdrawalStatus::Completed, WAIT).await;
    }
    ids
}

fn line(id: WithdrawalId, amount: &str, status: &str, at: &str) -> String {
    format!("tr_{id},{id},{id},{amount},USD,0.00,{status},{at}\n")
}

fn result_of(lines: &[store::LineRow], status: &str) -> Option<LineResult> {
    lines.iter().find(|l| l.status.as_str() == status).and_then(|l| l.result)
}

async fn the_providers_report_parses_and_a_bad_line_refuses_it_whole(app: TestApp) {
    let stop = app.start_default_worker();
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "12.34").await;
    app.wait_for_status(id, WithdrawalStatus::Completed, Duration::from_secs(25)).await;
    stop.cancel();
    let mock = &app.provider.mock;
    let today = mock.now().date_naive();

    let report = parse_report(mock.settlement_report(today).as_bytes()).expect("the provider's report parses");
    let ours: Vec<_> = report.lines.iter().filter(|l| l.idempotency_key == id.to_string()).collect();
    assert_eq!(ours.len(), 1, "{:?}", report.lines);
    assert_eq!(
        (ours[0].status, ours[0].amount.to_minor(), ours[0].amount.currency().code()),
        (LineStatus::Paid, 1234, "USD")
    );
    assert_eq!(ours[0].line, 2, "the first line after the header");

    mock.set_report_faults(ReportFaultConfig {
        rules: vec![ReportFault::DuplicateLine { idempotency_key: id.to_string() }],
    });
    let err = parse_report(mock.settlement_report(today).as_bytes()).unwrap_err();
    assert_eq!(err.line, 3, "{err}");
    assert!(err.reason.contains("duplicates"), "{err}");

    mock.set_report_faults(ReportFaultConfig {
        rules: vec![ReportFault::MalformedLine { date: today, amount: "12,34".into() }],
    });
    let err = parse_report(mock.settlement_report(today).as_bytes()).unwrap_err();
    assert!(err.reason.contains("amount `12,34`"), "{err}");
    assert!(err.line >= 2, "{err}");
}

async fn a_days_report_matches_every_line_and_opens_an_exception_for_each_difference(app: TestApp) {
    let operator = app.operator("operator").await;
    let stop = app.start_default_worker();
    let alice = app.customer("1000.00").await;
    let ids = completed(&app, &alice, &["ok", "wrong", "spurious", "returned", "omitted"], "10.00").await;
    stop.cancel();
    let [ok, wrong, spurious, returned, omitted] = ids[..] else { unreachable!() };
    let mock = &app.provider.mock;
    let today = mock.now().date_naive();
    assert!(mock.return_transfer_at(&returned.to_string(), "R01", mock.now()));
    mock.set_report_faults(ReportFaultConfig {
        rules: vec![
            ReportFault::WrongAmount { idempotency_key: wrong.to_string(), amount: Decimal::new(1001, 2) },
            ReportFault::SpuriousReturn { idempotency_key: spurious.to_string() },
            ReportFault::OmitPaid { idempotency_key: omitted.to_string() },
            ReportFault::UnknownTransfer {
                transfer_id: "tr_ghost".into(),
                idempotency_key: "ghost-key".into(),
                reference: None,
                amount: Decimal::new(500, 2),
                currency: "USD".into(),
                date: today,
            },
        ],
    });
    let (available_before, _, paid_before) = app.usd_balance(&alice).await;
    assert_eq!((available_before.as_str(), paid_before.as_str()), ("950.00", "50.00"));

    let first = imported(&app, &operator, json!({"date": today})).await;
    assert!(!first.already_imported);
    assert_eq!((first.version, first.date), (1, today));
    // ok, returned, spurious: paid lines matched; the real return credited; three exceptions
    // from lines (amount, spurious return, ghost) and one missing.
    assert_eq!(first.matching.matched, 3, "{first:?}");
    assert_eq!(first.matching.returns_credited, 1, "{first:?}");
    assert_eq!(first.matching.exceptions_opened, 3, "{first:?}");
    assert_eq!(first.missing_opened, 1, "{first:?}");
    assert_eq!(first.matching.awaiting_confirmation, 0, "{first:?}");

    let open = exceptions(&app, &operator, "").await;
    let kind_of = |id: Option<WithdrawalId>| {
        open.iter().filter(|e| e.withdrawal_id == id.map(|i| i.0)).map(|e| e.kind).collect::<Vec<_>>()
    };
    assert_eq!(kind_of(Some(wrong)), [ExceptionKind::AmountMismatch]);
    assert_eq!(kind_of(Some(spurious)), [ExceptionKind::Returned]);
    assert_eq!(kind_of(Some(omitted)), [ExceptionKind::MissingFromReport]);
    assert_eq!(kind_of(None), [ExceptionKind::UnknownTransfer]);
    assert_eq!(open.len(), 4, "{open:#?}");
    let of_kind = |kind: ExceptionKind| open.iter().find(|e| e.kind == kind).unwrap();
    assert_eq!(of_kind(ExceptionKind::UnknownTransfer).transfer_id.as_deref(), Some("tr_ghost"));
    let spurious_e = of_kind(ExceptionKind::Returned);
    assert_eq!(spurious_e.evidence["provider_record"]["verdict"], "paid", "{spurious_e:#?}");
    let wrong_e = of_kind(ExceptionKind::AmountMismatch);
    assert_eq!(wrong_e.evidence["report_line"]["amount_minor"], 1001, "{wrong_e:#?}");
    let filtered = exceptions(&app, &operator, "kind=missing_from_report").await;
    assert_eq!(filtered.len(), 1);

    // Every line is evidence on its withdrawal, shown with its exceptions in review.
    let shown: WithdrawalDetail = app.ops_get(&operator, &format!("/ops/v1/withdrawals/{wrong}")).await;
    assert_eq!(shown.settlement_lines[0].result, Some(LineResult::AmountMismatch), "{shown:#?}");
    assert_eq!(shown.settlement_lines[0].amount, "10.01", "{shown:#?}");
    assert_eq!(shown.settlement_exceptions[0].kind, ExceptionKind::AmountMismatch, "{shown:#?}");
    let lines = store::lines_for_withdrawal(&app.db, app.key(ok).await).await.unwrap();
    assert_eq!(result_of(&lines, "paid"), Some(LineResult::Matched));
    let evidence = &lines[0].evidence.as_ref().unwrap().0;
    assert_eq!(evidence["source"], "settlement_report");
    assert_eq!(evidence["ours"]["status"], "completed");
    let returned_lines = store::lines_for_withdrawal(&app.db, app.key(returned).await).await.unwrap();
    assert_eq!(result_of(&returned_lines, "paid"), Some(LineResult::Matched));
    assert_eq!(result_of(&returned_lines, "returned"), Some(LineResult::Returned));
    assert_eq!(
        returned_lines
            .iter()
            .find(|l| l.status == withdrawals::domain::settlement::LineStatus::Returned)
            .unwrap()
            .applied,
        Some(withdrawals::domain::settlement::LineApplied::ReturnCredited)
    );
    assert_eq!(
        result_of(&store::lines_for_withdrawal(&app.db, app.key(spurious).await).await.unwrap(), "returned"),
        Some(LineResult::Returned)
    );

    // The real return is credited once; the spurious one not at all.
    assert!(returns::for_withdrawal(&app.db, app.key(returned).await).await.unwrap().is_some());
    assert!(returns::for_withdrawal(&app.db, app.key(spurious).await).await.unwrap().is_none());
    let (available, held, paid_out) = app.usd_balance(&alice).await;
    assert_eq!((available.as_str(), held.as_str(), paid_out.as_str()), ("960.00", "0.00", "40.00"));
    let shown: WithdrawalView =
        read(app.get(&alice, &format!("/v1/withdrawals/{returned}")).send().await.unwrap()).await;
    assert_eq!(
        (shown.status, shown.returned.as_ref().map(|r| r.return_code.as_str())),
        (WithdrawalStatus::Completed, Some("R01"))
    );
    app.assert_ledger_invariant().await;

    // The same report again changes nothing.
    let again = imported(&app, &operator, json!({"date": today})).await;
    assert!(again.already_imported, "{again:?}");
    assert_eq!((again.report_id, again.version), (first.report_id, 1));
    assert_eq!(again.matching, Default::default(), "{again:?}");
    assert_eq!(again.missing_opened, 0);
    assert_eq!(exceptions(&app, &operator, "").await.len(), 4);
    assert_eq!(app.usd_balance(&alice).await.0, "960.00");
    app.assert_ledger_invariant().await;

    // The day's totals differ from the report's — a paid line missing, another amount, a line for
    // no withdrawal of ours, a return the provider's record does not show: 409 naming them.
    let verify = |date: NaiveDate| {
        app.client.get(app.url(&format!("/ops/v1/ledger/verify?date={date}"))).bearer_auth(&operator).send()
    };
    let (status, code, body) = crate::harness::problem_code(verify(today).await.unwrap()).await;
    assert_eq!((status, code.as_str()), (409, "settlement_totals_differ"), "{body:?}");
    let detail = body.detail.as_str();
    assert!(detail.contains("USD paid out: ours 50.00 report 45.01"), "{detail}");
    assert!(detail.contains("USD returned: ours 10.00 report 20.00"), "{detail}");
    let (status, code, _) = crate::harness::problem_code(verify(today.pred_opt().unwrap()).await.unwrap()).await;
    assert_eq!((status, code.as_str()), (404, "report_not_imported"));

    // Resolving records the finding, audited; twice is a conflict. Money does not move.
    let id = wrong_e.id;
    let resolve = |note: &str| {
        app.client
            .post(app.url(&format!("/ops/v1/settlement/exceptions/{id}/resolve")))
            .bearer_auth(&operator)
            .json(&json!({"reason": "escalated_to_provider", "note": note}))
            .send()
    };
    let (status, code, _) = crate::harness::problem_code(resolve(" ").await.unwrap()).await;
    assert_eq!((status, code.as_str()), (422, "note_required"));
    let done: ExceptionView = read(resolve("case 4411 with the provider").await.unwrap()).await;
    assert_eq!((done.status, done.resolution), (ExceptionStatus::Resolved, Some(Resolution::EscalatedToProvider)));
    let (status, code, _) = crate::harness::problem_code(resolve("again").await.unwrap()).await;
    assert_eq!((status, code.as_str()), (409, "already_resolved"));
    assert_eq!(exceptions(&app, &operator, "").await.len(), 3);
    assert_eq!(exceptions(&app, &operator, "status=resolved").await.len(), 1);
    let viewer = app.operator("viewer").await;
    let refused = app
        .client
        .post(app.url(&format!("/ops/v1/settlement/exceptions/{id}/resolve")))
        .bearer_auth(&viewer)
        .json(&json!({"reason": "not_ours", "note": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    let audit: Page<AuditEntry> = app.ops_get(&app.operator("admin").await, "/ops/v1/audit?limit=50").await;
    let actions: Vec<(String, String)> = audit.data.into_iter().map(|r| (r.action, r.result)).collect();
    for wanted in [
        ("settlement.import", "ok"),
        ("settlement_exception.resolve", "ok"),
        ("settlement_exception.resolve", "already_resolved"),
        ("settlement_exception.resolve", "forbidden"),
    ] {
        assert!(actions.iter().any(|(a, r)| (a.as_str(), r.as_str()) == wanted), "{wanted:?} in {actions:?}");
    }
    assert_eq!(app.usd_balance(&alice).await.0, "960.00");
    app.assert_ledger_invariant().await;
}

/// A withdrawal the provider paid (on the mock's clock, `offset` from now) but whose answer never
/// arrived: it stays `processing`, its reconciliation waiting (only the payout queue ran).
async fn paid_but_unanswered(app: &TestApp, offset: chrono::TimeDelta) -> (WithdrawalId, Customer) {
    let mock = &app.provider.mock;
    mock.set_clock_offset(offset);
    mock.set_faults(FaultConfig {
        rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::TimeoutAfterCommit { ms: 4_000 })],
    });
    let mut config = worker_config("w-payouts-only");
    config.queues = vec![withdrawals::jobs::Queue::Payouts.as_str()];
    let stop = app.start_worker(app.gateway.clone(), config);
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "25.00").await;
    // The attempt finished (timed out) with its outcome unknown, and the job handed over to
    // reconciliation.
    app.eventually("the attempt's outcome unknown", WAIT, || async {
        let attempts = withdrawals::storage::attempts::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
        let done = attempts
            .last()
            .is_some_and(|a| a.finished_at.is_some() && a.side_effect == withdrawals::domain::SideEffect::Unknown);
        let key = app.key(id).await;
        let mut tx = app.db.begin().await.unwrap();
        let handed_over =
            withdrawals::storage::jobs::has_live_job(&mut tx, key, withdrawals::jobs::JobKind::ReconcilePayout)
                .await
                .unwrap();
        (done && handed_over).then_some(())
    })
    .await;
    stop.cancel();
    mock.set_faults(FaultConfig::default());
    assert_eq!(app.wait_for_status(id, WithdrawalStatus::Processing, WAIT).await.status, WithdrawalStatus::Processing);
    (id, alice)
}

async fn a_paid_line_completes_a_processing_withdrawal_only_once_the_provider_confirms_it(app: TestApp) {
    let operator = app.operator("operator").await;
    let mock = &app.provider.mock;
    // Paid by the provider yesterday; we learn it today.
    let (id, alice) = paid_but_unanswered(&app, chrono::TimeDelta::days(-1)).await;
    let today = mock.now().date_naive();
    assert_eq!(today, chrono::Utc::now().date_naive().pred_opt().unwrap());

    // The provider cannot confirm: nothing moves, the line waits.
    mock.set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Lookup, FaultEffect::LookupUnavailable)] });
    let waiting = imported(&app, &operator, json!({"date": today})).await;
    assert_eq!((waiting.matching.awaiting_confirmation, waiting.matching.completed), (1, 0), "{waiting:?}");
    let held = withdrawals::storage::withdrawals::find(&app.db, id).await.unwrap().unwrap();
    assert_eq!(held.status, WithdrawalStatus::Processing);
    assert_eq!(result_of(&store::lines_for_withdrawal(&app.db, app.key(id).await).await.unwrap(), "paid"), None);

    // Once it can, the next daily run (here: tomorrow's report, empty so far) matches the waiting
    // line again and completes the withdrawal, with the line and the provider's answer as evidence.
    mock.set_faults(FaultConfig::default());
    let mut tx = app.db.begin().await.unwrap();
    settlement_job::enqueue_import(&mut tx, "default", today.succ_opt().unwrap(), "next-day", DbTime::now())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut config = worker_config("w-settlement-only");
    config.queues = vec![withdrawals::jobs::Queue::Settlement.as_str()];
    let stop = app.start_worker(app.gateway.clone(), config);
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    stop.cancel();
    let again = imported(&app, &operator, json!({"date": today})).await;
    assert!(again.already_imported);
    assert_eq!((again.matching.completed, again.matching.awaiting_confirmation), (0, 0), "{again:?}");
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    let transitions = withdrawals::storage::withdrawals::transitions(&app.db, app.key(id).await).await.unwrap();
    let last = transitions.last().unwrap();
    assert_eq!(last.actor, "settlement");
    let evidence = &last.evidence.as_ref().expect("evidence stored with the transition").0;
    assert_eq!(evidence["source"], "settlement_report");
    assert_eq!(evidence["provider_record"]["verdict"], "paid");
    assert_eq!(evidence["provider_record"]["transfer"]["amount"], "25.00");
    let lines = store::lines_for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(lines[0].applied, Some(withdrawals::domain::settlement::LineApplied::Completed));
    assert_eq!(app.usd_balance(&alice).await, ("75.00".into(), "0.00".into(), "25.00".into()));
    app.assert_ledger_invariant().await;

    // The day's totals agree with the report's: it was paid on the report's day (its paid line),
    // though we completed it a day later.
    let clean: LedgerCheck = app.ops_get(&operator, &format!("/ops/v1/ledger/verify?date={today}")).await;
    assert!(clean.clean, "{clean:?}");
    assert_eq!((clean.totals[0].ours_paid.as_str(), clean.totals[0].report_paid.as_str()), ("25.00", "25.00"));
}

async fn lines_that_contradict_our_state_are_status_mismatches_and_move_nothing(app: TestApp) {
    let operator = app.operator("operator").await;
    let mock = &app.provider.mock;
    let stop = app.start_default_worker();
    let alice = app.customer("100.00").await;
    let paid = completed(&app, &alice, &["paid"], "10.00").await[0];
    mock.set_faults(FaultConfig {
        rules: vec![FaultRule::new(
            RouteMatch::Create,
            FaultEffect::SettleFailed { failure_code: "account_closed".into() },
        )],
    });
    let failed = app.create_withdrawal(&alice, "failed", "20.00").await;
    app.wait_for_status(failed, WithdrawalStatus::Failed, WAIT).await;
    stop.cancel();
    mock.set_faults(FaultConfig::default());
    let before = app.usd_balance(&alice).await;

    // A report (a file) that says the opposite of what we hold, and a return of a payout we never
    // completed.
    let at = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let csv = format!(
        "{HEADER}{}{}{}",
        line(paid, "10.00", "failed", &at),
        line(failed, "20.00", "paid", &at),
        line(failed, "20.00", "returned", &at)
    );
    let summary = imported(&app, &operator, json!({"csv": csv})).await;
    assert_eq!(summary.source, settlement_job::ReportSource::File);
    assert_eq!(summary.matching.exceptions_opened, 3, "{summary:?}");
    let open = exceptions(&app, &operator, "").await;
    let kinds: Vec<(ExceptionKind, Option<uuid::Uuid>)> = open.iter().map(|e| (e.kind, e.withdrawal_id)).collect();
    assert!(kinds.contains(&(ExceptionKind::StatusMismatch, Some(paid.0))), "{kinds:?}");
    assert!(kinds.contains(&(ExceptionKind::StatusMismatch, Some(failed.0))), "{kinds:?}");
    assert!(kinds.contains(&(ExceptionKind::Returned, Some(failed.0))), "{kinds:?}");
    assert!(returns::for_withdrawal(&app.db, app.key(failed).await).await.unwrap().is_none());
    for (id, status) in [(paid, WithdrawalStatus::Completed), (failed, WithdrawalStatus::Failed)] {
        assert_eq!(withdrawals::storage::withdrawals::find(&app.db, id).await.unwrap().unwrap().status, status);
    }
    assert_eq!(app.usd_balance(&alice).await, before);
    app.assert_ledger_invariant().await;
}

async fn a_corrected_report_is_a_new_version_with_its_differences(app: TestApp) {
    let operator = app.operator("operator").await;
    let stop = app.start_default_worker();
    let alice = app.customer("100.00").await;
    let ids = completed(&app, &alice, &["a", "b", "c"], "10.00").await;
    stop.cancel();
    let at = |s: &str| format!("{}T{s}Z", app.provider.mock.now().date_naive());
    let first = format!(
        "{HEADER}{}{}",
        line(ids[0], "10.01", "paid", &at("01:00:00")),
        line(ids[1], "10.00", "paid", &at("02:00:00"))
    );
    let v1 = imported(&app, &operator, json!({"csv": first})).await;
    assert_eq!((v1.version, v1.matching.exceptions_opened, v1.matching.matched), (1, 1, 1), "{v1:?}");

    // The provider corrects the first line's amount and adds a line it had left out.
    let second = format!(
        "{HEADER}{}{}{}",
        line(ids[0], "10.00", "paid", &at("01:00:00")),
        line(ids[1], "10.00", "paid", &at("02:00:00")),
        line(ids[2], "10.00", "paid", &at("03:00:00"))
    );
    let v2 = imported(&app, &operator, json!({"csv": second, "date": v1.date})).await;
    assert!(!v2.already_imported);
    assert_eq!(v2.version, 2);
    assert_eq!((v2.differences.added, v2.differences.changed, v2.differences.removed), (1, 1, 0), "{v2:?}");
    assert_eq!(v2.seen_before, 1, "the unchanged line is not matched again");
    assert_eq!((v2.matching.matched, v2.matching.exceptions_opened), (2, 0), "{v2:?}");
    for id in &ids {
        let lines = store::lines_for_withdrawal(&app.db, app.key(*id).await).await.unwrap();
        assert!(lines.iter().any(|l| l.result == Some(LineResult::Matched)), "{id}: {lines:?}");
    }
    let reports: List<ReportView> =
        app.ops_get(&operator, &format!("/ops/v1/settlement/reports?date={}", v1.date)).await;
    let versions: Vec<i32> = reports.data.iter().map(|r| r.version).collect();
    assert_eq!(versions, [2, 1]);
    let differences = &reports.data[0].differences;
    assert_eq!(differences["changed"], 1);
    assert_eq!(differences["changed_keys"].as_array().unwrap().len(), 1);
    // The first version's exception stays for an operator to resolve as `provider_corrected`.
    let first_exception = exceptions(&app, &operator, "kind=amount_mismatch").await;
    assert_eq!(first_exception.len(), 1);
    let id = first_exception[0].id;
    let resolved = app
        .client
        .post(app.url(&format!("/ops/v1/settlement/exceptions/{id}/resolve")))
        .bearer_auth(&operator)
        .json(&json!({"reason": "provider_corrected", "note": "version 2 shows 10.00"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resolved.status(), 200);

    // A third version that gets the same line wrong in another way is a new finding, not
    // absorbed by the resolved one.
    let third = format!(
        "{HEADER}{}{}{}",
        line(ids[0], "9.99", "paid", &at("01:00:00")),
        line(ids[1], "10.00", "paid", &at("02:00:00")),
        line(ids[2], "10.00", "paid", &at("03:00:00"))
    );
    let v3 = imported(&app, &operator, json!({"csv": third})).await;
    assert_eq!((v3.version, v3.differences.changed, v3.seen_before), (3, 1, 2), "{v3:?}");
    assert_eq!(v3.matching.exceptions_opened, 1, "{v3:?}");
    let open = exceptions(&app, &operator, "kind=amount_mismatch").await;
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].evidence["report_line"]["amount_minor"], 999);

    // A file whose lines are of another day than the one named is refused.
    let (status, answer) = import(&app, &operator, json!({"csv": second, "date": "2001-01-01"})).await;
    assert_eq!((status, refusal(&answer).code.as_str()), (422, "report_refused"), "{answer}");
    app.assert_ledger_invariant().await;
}

async fn a_malformed_report_is_refused_whole_and_applies_nothing(app: TestApp) {
    let operator = app.operator("operator").await;
    let mock = &app.provider.mock;
    let stop = app.start_default_worker();
    let alice = app.customer("100.00").await;
    completed(&app, &alice, &["a"], "10.00").await;
    stop.cancel();
    let today = mock.now().date_naive();
    mock.set_report_faults(ReportFaultConfig {
        rules: vec![ReportFault::MalformedLine { date: today, amount: "ten".into() }],
    });
    let (status, answer) = import(&app, &operator, json!({"date": today})).await;
    assert_eq!((status, refusal(&answer).code.as_str()), (422, "report_refused"), "{answer}");
    assert!(refusal(&answer).detail.as_str().contains("amount `ten`"), "{answer}");
    let bad_file = format!("{HEADER}tr_1,k1,r1,1.00,USD,0.00,paid,2026-12-03T10:00:00Z\ntr_1,k1,r1,1.00,USD,0.00,paid,2026-12-03T10:00:00Z\n");
    let (status, answer) = import(&app, &operator, json!({"csv": bad_file})).await;
    assert_eq!((status, refusal(&answer).code.as_str()), (422, "report_refused"), "{answer}");
    assert!(refusal(&answer).detail.as_str().contains("line 3"), "{answer}");
    assert!(store::list_reports(&app.db, None, None, 10).await.unwrap().is_empty(), "nothing stored");
    assert!(exceptions(&app, &operator, "status=all").await.is_empty(), "nothing applied");
    let (status, answer) = import(&app, &operator, json!({})).await;
    assert_eq!((status, refusal(&answer).code.as_str()), (422, "date_or_csv_required"));

    // Corrected by the provider, the same day imports.
    mock.set_report_faults(ReportFaultConfig::default());
    let summary = imported(&app, &operator, json!({"date": today})).await;
    assert_eq!((summary.version, summary.matching.matched), (1, 1), "{summary:?}");
}

async fn the_daily_job_imports_the_report_and_dead_letters_a_refused_one(app: TestApp) {
    let mock = &app.provider.mock;
    let mut config = worker_config("w-settlement");
    config.settlement.grace_days = 0;
    let stop = app.start_worker(app.gateway.clone(), config.clone());
    let alice = app.customer("100.00").await;
    let id = completed(&app, &alice, &["a"], "10.00").await[0];
    stop.cancel();
    let today = mock.now().date_naive();

    let mut settings = config.settlement;
    settings.daily_import = true;
    settings.import_hour = 0;
    // Yesterday and the week before it (never fetched) once each; never twice.
    assert_eq!(settlement_job::schedule_daily(&app.db, &settings, &app.gateway.clone().into(), None).await.unwrap(), 7);
    assert_eq!(settlement_job::schedule_daily(&app.db, &settings, &app.gateway.clone().into(), None).await.unwrap(), 0);
    settings.daily_import = false;
    assert_eq!(settlement_job::schedule_daily(&app.db, &settings, &app.gateway.clone().into(), None).await.unwrap(), 0);

    // Today's import, as the job runs it.
    let mut tx = app.db.begin().await.unwrap();
    settlement_job::enqueue_import(&mut tx, "default", today, "test-import", DbTime::now()).await.unwrap();
    tx.commit().await.unwrap();
    let stop = app.start_worker(app.gateway.clone(), config.clone());
    let day = today.format("%Y-%m-%d").to_string();
    app.eventually("today's report imported by the job", WAIT, || async {
        let reports = store::list_reports(&app.db, None, Some(&day), 10).await.unwrap();
        let lines = store::lines_for_withdrawal(&app.db, app.key(id).await).await.unwrap();
        (!reports.is_empty() && result_of(&lines, "paid") == Some(LineResult::Matched)).then_some(())
    })
    .await;

    // A malformed report is refused whole: the job is dead-lettered, nothing is stored.
    let tomorrow = today.succ_opt().unwrap();
    mock.set_report_faults(ReportFaultConfig {
        rules: vec![ReportFault::MalformedLine { date: tomorrow, amount: "1.2.3".into() }],
    });
    let mut tx = app.db.begin().await.unwrap();
    settlement_job::enqueue_import(&mut tx, "default", tomorrow, "test-refused", DbTime::now()).await.unwrap();
    tx.commit().await.unwrap();
    let operator = app.operator("operator").await;
    let letter = first_dead_letter(&app, &operator, "error_code=settlement_report_refused").await;
    stop.cancel();
    assert_eq!(letter.category, Category::DependencyRejected, "{letter:#?}");
    assert!(letter.error_message.contains("line 2"), "{letter:#?}");
    let tomorrow_day = tomorrow.format("%Y-%m-%d").to_string();
    assert!(store::list_reports(&app.db, None, Some(&tomorrow_day), 10).await.unwrap().is_empty());
    app.assert_ledger_invariant().await;
}

async fn a_withdrawal_whose_line_awaits_confirmation_is_not_missing_from_the_report(app: TestApp) {
    let operator = app.operator("operator").await;
    let mock = &app.provider.mock;
    let (id, _alice) = paid_but_unanswered(&app, chrono::TimeDelta::zero()).await;
    let today = mock.now().date_naive();
    mock.set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Lookup, FaultEffect::LookupUnavailable)] });
    let waiting = imported(&app, &operator, json!({"date": today})).await;
    assert_eq!(waiting.matching.awaiting_confirmation, 1, "{waiting:?}");

    // Reconciliation completes it meanwhile; the missing sweep (no grace) must not count it
    // missing: the report names it, in a line not judged yet.
    mock.set_faults(FaultConfig::default());
    let mut config = worker_config("w-reconcile-only");
    config.queues = vec![withdrawals::jobs::Queue::Reconciliation.as_str()];
    let stop = app.start_worker(app.gateway.clone(), config);
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    stop.cancel();
    let mut settings = AppConfig::default().settlement;
    settings.grace_days = 0;
    assert_eq!(settlement_job::sweep_missing(&app.db, &settings, "default").await.unwrap(), 0);

    // The next run matches the line against what we hold now: matched, nothing applied twice.
    let again = imported(&app, &operator, json!({"date": today})).await;
    assert_eq!((again.matching.matched, again.matching.completed, again.missing_opened), (1, 0, 0), "{again:?}");
    assert!(exceptions(&app, &operator, "status=all").await.is_empty());
    app.assert_ledger_invariant().await;
}

/// A report of `n` paid lines of `day`, of transfers that are not ours.
fn report_of(day: NaiveDate, n: usize) -> String {
    let mut csv = HEADER.to_owned();
    for i in 0..n {
        csv += &format!("tr_{i},key-{i},r{i},1.00,USD,0.00,paid,{day}T10:00:00Z\n");
    }
    csv
}

async fn a_report_over_the_byte_or_line_limit_is_refused_and_nothing_is_stored(app: TestApp) {
    let operator = app.operator("operator").await;
    let today = chrono::Utc::now().date_naive();
    let padded = format!("{HEADER}tr_1,k1,{},1.00,USD,0.00,paid,{today}T10:00:00Z\n", "r".repeat(5000));
    let (status, answer) = import(&app, &operator, json!({"csv": padded})).await;
    assert_eq!((status, refusal(&answer).code.as_str()), (413, "report_too_large"), "{answer}");
    // A body far over the limit is refused from its length, before it is read.
    let response = app
        .client
        .post(app.url("/ops/v1/settlement/imports"))
        .bearer_auth(&operator)
        .header("content-type", "application/json")
        .body(vec![b' '; 400_000])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    // The unread body leaves the connection unusable: it is closed, never reused for the next
    // request (which then failed at random with a broken pipe).
    assert_eq!(response.headers().get("connection").and_then(|v| v.to_str().ok()), Some("close"));
    let answer: Value = response.json().await.unwrap();
    assert_eq!(refusal(&answer).code, "report_too_large", "{answer}");
    let (status, answer) = import(&app, &operator, json!({"csv": report_of(today, 6)})).await;
    assert_eq!((status, refusal(&answer).code.as_str()), (422, "report_refused"), "{answer}");
    assert!(refusal(&answer).detail.as_str().contains("more than 5 lines"), "{answer}");
    assert!(store::list_reports(&app.db, None, None, 10).await.unwrap().is_empty(), "nothing stored");
    assert!(exceptions(&app, &operator, "status=all").await.is_empty(), "nothing applied");

    // At the limits, the report imports.
    let summary = imported(&app, &operator, json!({"csv": report_of(today, 5)})).await;
    assert_eq!((summary.lines, summary.matching.exceptions_opened), (5, 5), "{summary:?}");
}

async fn a_report_dated_after_tomorrow_or_holding_a_nul_is_refused_and_nothing_is_stored(app: TestApp) {
    let operator = app.operator("operator").await;
    let today = chrono::Utc::now().date_naive();
    let after_tomorrow = today + chrono::TimeDelta::days(2);
    let (status, answer) = import(&app, &operator, json!({"csv": report_of(after_tomorrow, 1)})).await;
    assert_eq!((status, refusal(&answer).code.as_str()), (422, "report_refused"), "{answer}");
    assert!(refusal(&answer).detail.as_str().contains("after tomorrow"), "{answer}");
    let far = NaiveDate::from_ymd_opt(2030, 1, 2).unwrap();
    let (status, answer) = import(&app, &operator, json!({"csv": report_of(far, 1), "date": far})).await;
    assert_eq!((status, refusal(&answer).code.as_str()), (422, "report_refused"), "{answer}");
    for (column, line) in [
        ("reference", format!("tr_1,k1,r\u{0}1,1.00,USD,0.00,paid,{today}T10:00:00Z\n")),
        ("transfer_id", format!("tr_\u{0},k1,r1,1.00,USD,0.00,paid,{today}T10:00:00Z\n")),
        ("idempotency_key", format!("tr_1,k\u{1b}1,r1,1.00,USD,0.00,paid,{today}T10:00:00Z\n")),
    ] {
        let (status, answer) = import(&app, &operator, json!({"csv": format!("{HEADER}{line}")})).await;
        assert_eq!((status, refusal(&answer).code.as_str()), (422, "report_refused"), "{column}: {answer}");
        assert!(refusal(&answer).detail.as_str().contains(column), "{answer}");
    }
    assert!(store::list_reports(&app.db, None, None, 10).await.unwrap().is_empty(), "nothing stored");
    assert!(exceptions(&app, &operator, "status=all").await.is_empty(), "nothing applied");

    // Tomorrow's report (a provider ahead of UTC) is accepted.
    let tomorrow = today + chrono::TimeDelta::days(1);
    let summary = imported(&app, &operator, json!({"csv": report_of(tomorrow, 1)})).await;
    assert_eq!(summary.date, tomorrow);
}

async fn a_refused_return_is_credited_later_once_the_providers_record_shows_it(app: TestApp) {
    let operator = app.operator("operator").await;
    let viewer = app.operator("viewer").await;
    let mock = &app.provider.mock;
    let stop = app.start_default_worker();
    let alice = app.customer("100.00").await;
    let id = completed(&app, &alice, &["a"], "10.00").await[0];
    stop.cancel();

    // The report shows a return the provider's record does not: refused, an exception.
    let at = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let csv = format!("{HEADER}{}{}", line(id, "10.00", "paid", &at), line(id, "10.00", "returned", &at));
    let summary = imported(&app, &operator, json!({"csv": csv})).await;
    assert_eq!(summary.matching.exceptions_opened, 1, "{summary:?}");
    let open = exceptions(&app, &operator, "kind=returned").await;
    assert_eq!(open.len(), 1, "{open:?}");
    let exception = open[0].id;
    let before = app.usd_balance(&alice).await;
    assert_eq!((before.0.as_str(), before.2.as_str()), ("90.00", "10.00"), "{before:?}");

    let credit = |token: String, note: &'static str| {
        let url = app.url(&format!("/ops/v1/settlement/exceptions/{exception}/credit-return"));
        let request = app.client.post(url).bearer_auth(token).json(&json!({"note": note}));
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    // Still not returned at the provider: refused, nothing credited.
    let (status, answer) = credit(operator.clone(), "bank says returned").await;
    assert_eq!((status, refusal(&answer).code.as_str()), (409, "return_not_at_provider"), "{answer}");
    assert_eq!(app.usd_balance(&alice).await, before);
    let (status, _) = credit(viewer, "a viewer").await;
    assert_eq!(status, 403);

    // The provider's record now shows the return: credited once, the exception resolved.
    assert!(mock.return_transfer_at(&id.to_string(), "R03", mock.now()));
    let (status, answer) = credit(operator.clone(), "provider confirmed the return").await;
    assert_eq!(status, 200, "{answer}");
    let resolved: ExceptionView = typed(answer);
    assert_eq!((resolved.status, resolved.resolution), (ExceptionStatus::Resolved, Some(Resolution::ResolvedInReview)));
    let after = app.usd_balance(&alice).await;
    assert_eq!((after.0.as_str(), after.2.as_str()), ("100.00", "0.00"), "{after:?}");
    let stored = returns::for_withdrawal(&app.db, app.key(id).await).await.unwrap().expect("the return is stored");
    assert_eq!((stored.return_code.as_str(), stored.amount_minor), ("R03", 1000));
    assert_eq!(stored.evidence.0["source"], "operator_credit_return", "{:?}", stored.evidence);

    // Never twice.
    let (status, answer) = credit(operator.clone(), "again").await;
    assert_eq!((status, refusal(&answer).code.as_str()), (409, "already_resolved"), "{answer}");
    assert_eq!(app.usd_balance(&alice).await, after);
    app.assert_ledger_invariant().await;
}

/// The `settlement.import` audit rows.
async fn import_audit_rows(app: &TestApp) -> Vec<withdrawals::storage::audit::AuditRow> {
    let filter = withdrawals::storage::audit::AuditFilter {
        action: Some("settlement.import".into()),
        limit: 100,
        ..Default::default()
    };
    withdrawals::storage::audit::list(&app.db, &filter).await.unwrap()
}

async fn a_large_report_imports_as_a_job_to_done_with_its_progress_and_one_audit_row(app: TestApp) {
    let operator = app.operator("operator").await;
    let stop = app.start_default_worker();
    let alice = app.customer("100.00").await;
    let ours = completed(&app, &alice, &["a", "b", "c"], "10.00").await;
    stop.cancel();
    let today = chrono::Utc::now().date_naive();
    let at = format!("{today}T10:00:00Z");
    let mut csv = ours.iter().map(|id| line(*id, "10.00", "paid", &at)).collect::<String>();
    const LINES: usize = 3_000;
    for i in ours.len()..LINES {
        csv += &format!("tr_x{i},not-ours-{i},r{i},1.00,USD,0.00,paid,{at}\n");
    }
    let view = import_job(&app, &operator, json!({"csv": format!("{HEADER}{csv}")})).await;
    assert_eq!(view.state, ImportState::Done, "{view:?}");
    assert_eq!((view.lines, view.lines_done, view.matched, view.exceptions), (3_000, 3_000, 3, 2_997), "{view:?}");
    let summary = view.summary.expect("a finished import's summary");
    assert_eq!((summary.lines, summary.matching.matched, summary.matching.exceptions_opened), (3_000, 3, 2_997));
    let audit = import_audit_rows(&app).await;
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!((audit[0].result.as_str(), audit[0].target_id.as_str()), ("ok", today.to_string().as_str()));
    assert_eq!(audit[0].parameters.0["import_id"], view.id.to_string(), "{:?}", audit[0].parameters);
    // Listed, and read by a viewer.
    let viewer = app.operator("viewer").await;
    let listed: List<ImportView> =
        read(app.client.get(app.url("/ops/v1/settlement/imports")).bearer_auth(&viewer).send().await.unwrap()).await;
    assert_eq!(listed.data[0].id, view.id, "{listed:?}");
    app.assert_ledger_invariant().await;
}

async fn an_interrupted_import_run_again_finishes_exactly_once(app: TestApp) {
    let operator = app.operator("operator").await;
    let mock = &app.provider.mock;
    let stop = app.start_default_worker();
    let alice = app.customer("100.00").await;
    let [paid, returned] = completed(&app, &alice, &["p", "r"], "10.00").await[..] else { unreachable!() };
    stop.cancel();
    assert!(mock.return_transfer_at(&returned.to_string(), "R01", mock.now()));
    let today = chrono::Utc::now().date_naive();
    let at = format!("{today}T10:00:00Z");
    let mut csv = format!(
        "{HEADER}{}{}{}",
        line(paid, "10.00", "paid", &at),
        line(returned, "10.00", "paid", &at),
        line(returned, "10.00", "returned", &at)
    );
    for i in 0..200 {
        csv += &format!("tr_x{i},not-ours-{i},r{i},1.00,USD,0.00,paid,{at}\n");
    }
    let (status, queued) = import(&app, &operator, json!({"csv": csv})).await;
    assert_eq!(status, 202, "{queued}");
    let id = typed::<ImportView>(queued).id;

    // A first run stopped part-way: the report stored and the lines the report alone decides
    // recorded, but the return (which needs the provider's confirmation) not applied, the import
    // not finished and no audit row.
    let settings = withdrawals::config::SettlementSettings { grace_days: 0, ..Default::default() };
    let partial = settlement_job::import(
        &app.db,
        settlement_job::ReportProvider::unreached("default"),
        &settings,
        Some(today),
        csv.as_bytes(),
        settlement_job::ReportSource::File,
        "interrupted-run",
    )
    .await
    .unwrap();
    assert_eq!(partial.matching.awaiting_confirmation, 1, "{partial:?}");
    let midway = import_state(&app, &operator, id, |_| true).await;
    assert_eq!((midway.state, midway.lines_done), (ImportState::Queued, 202), "{midway:?}");
    assert!(import_audit_rows(&app).await.is_empty());
    let before = app.usd_balance(&alice).await;

    // Run again by the job: it finishes the rest, once.
    let mut config = worker_config("w-settlement-import");
    config.queues = vec![Queue::Settlement.as_str()];
    config.settlement.grace_days = 0;
    let stop = app.start_worker(app.gateway.clone(), config.clone());
    let done = import_state(&app, &operator, id, |v| v.state == ImportState::Done).await;
    stop.cancel();
    assert_eq!((done.lines, done.lines_done), (203, 203), "{done:?}");
    assert_eq!(done.matched + done.exceptions, 203, "matched + exceptions = lines: {done:?}");
    assert_eq!(import_audit_rows(&app).await.len(), 1);
    let after = app.usd_balance(&alice).await;
    assert_eq!(after.0, "90.00", "the return credited once: {before:?} → {after:?}");

    // The same job delivered again (a retry after its commit was lost): nothing changes.
    let mut tx = app.db.begin().await.unwrap();
    let again = settlement_job::enqueue_stored_import(&mut tx, id, today).await.unwrap();
    tx.commit().await.unwrap();
    let stop = app.start_worker(app.gateway.clone(), config);
    app.eventually("the repeated job to finish", WAIT, || async {
        let status = withdrawals::storage::jobs::job_status(
            &app.db,
            withdrawals::domain::JobKey { account: withdrawals::domain::AccountId::SYSTEM, id: again },
        )
        .await
        .unwrap();
        (status == Some(withdrawals::domain::JobStatus::Succeeded)).then_some(())
    })
    .await;
    stop.cancel();
    assert_eq!(import_audit_rows(&app).await.len(), 1, "one audit row");
    assert_eq!(app.usd_balance(&alice).await, after, "no money moved twice");
    let reports = store::list_reports(&app.db, None, None, 10).await.unwrap();
    assert_eq!(reports.len(), 1, "the report stored once");
    assert_eq!(reports[0].line_count, 203);
    let lines = store::lines_for_withdrawal(&app.db, app.key(returned).await).await.unwrap();
    assert_eq!(lines.len(), 2, "no line duplicated: {lines:?}");
    assert!(returns::for_withdrawal(&app.db, app.key(returned).await).await.unwrap().is_some());
    app.assert_ledger_invariant().await;
}

/// The import's fetch retries follow its own policy (`import_policy`), not reconciliation's (issue
/// 28: tuning the reconciliation backoff used to change the settlement import's retries too).
/// A provider that answers 503 to every report request, an import policy of two attempts and the
/// production reconciliation policy (300 attempts over a day): the job gives up after exactly two
/// fetches, as `retries_exhausted` on the settlement queue.
async fn an_unavailable_report_is_retried_by_the_imports_own_policy_not_reconciliations(app: TestApp) {
    use wiremock::{matchers::any, Mock, MockServer, ResponseTemplate};
    let provider = MockServer::start().await;
    Mock::given(any()).respond_with(ResponseTemplate::new(503)).mount(&provider).await;
    let mut config = worker_config("w-import-policy");
    config.queues = vec![Queue::Settlement.as_str()];
    config.reconcile_policy = withdrawals::jobs::retry::RetryPolicy::reconciliation();
    config.import_policy = withdrawals::jobs::retry::RetryPolicy {
        base_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(50),
        max_attempts: 2,
        max_elapsed: Duration::from_secs(30),
        max_retry_after: Duration::ZERO,
    };
    let today = app.provider.mock.now().date_naive();
    let mut tx = app.db.begin().await.unwrap();
    settlement_job::enqueue_import(&mut tx, "default", today, "test-unavailable", DbTime::now()).await.unwrap();
    tx.commit().await.unwrap();

    let _worker =
        app.start_worker(crate::harness::gateway_to(provider.uri(), Duration::from_secs(2)), config).drop_guard();

    let operator = app.operator("viewer").await;
    let letter = first_dead_letter(&app, &operator, "queue=settlement").await;
    assert_eq!(letter.category, Category::RetriesExhausted, "{letter:#?}");
    let fetches = provider.received_requests().await.unwrap().len();
    assert_eq!(fetches, 2, "two attempts by the import's policy, not reconciliation's 300");
    assert!(store::list_reports(&app.db, None, Some(&today.to_string()), 10).await.unwrap().is_empty());
}
