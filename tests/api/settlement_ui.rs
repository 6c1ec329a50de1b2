//! Settlement for operators (SPEC §14, §8): `withdrawals settlement …` and `ledger verify --date`
//! run as the real binary against the API, and the console's settlement pages in a real headless
//! Chromium. Each day is built the same way: one withdrawal paid by the provider mock, whose
//! report shows it with another amount (an `amount_mismatch` exception once imported).

use std::time::Duration;

use chrono::NaiveDate;
use fantoccini::Locator;
use provider_mocks::{ReportFault, ReportFaultConfig};
use serde_json::json;
use withdrawals::domain::settlement::{ExceptionKind, ExceptionStatus, Resolution};
use withdrawals::domain::{WithdrawalId, WithdrawalStatus};
use withdrawals::ops::types::{ExceptionView, List, Page, ReportView};
use withdrawals::storage::audit::{self, AuditFilter};

use crate::both_backends;
use crate::browser::Browser;
use crate::harness::TestApp;
use crate::ops::cli;

both_backends!(
    the_cli_imports_a_day_and_lists_shows_and_resolves_its_exception_once,
    the_cli_imports_a_report_file_and_refuses_a_malformed_one_naming_its_line,
    an_operator_resolves_a_settlement_exception_in_the_console,
    a_viewer_sees_a_settlement_exception_but_no_resolve_form,
    the_cli_imports_one_providers_report_and_refuses_an_unknown_provider,
);

/// A completed withdrawal of 12.34 USD, and the provider's report of its day showing 12.00.
async fn a_day_with_a_wrong_amount(app: &TestApp) -> (WithdrawalId, NaiveDate) {
    let id = a_paid_withdrawal(app).await;
    app.provider.mock.set_report_faults(ReportFaultConfig {
        rules: vec![ReportFault::WrongAmount { idempotency_key: id.to_string(), amount: "12.00".parse().unwrap() }],
    });
    (id, app.provider.mock.now().date_naive())
}

/// A withdrawal of 12.34 USD the provider paid; the worker is stopped afterwards.
async fn a_paid_withdrawal(app: &TestApp) -> WithdrawalId {
    let stop = app.start_default_worker();
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "12.34").await;
    app.wait_for_status(id, WithdrawalStatus::Completed, Duration::from_secs(25)).await;
    stop.cancel();
    id
}

fn stdout(out: &std::process::Output) -> String {
    assert!(out.status.success(), "exit {:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// A refusal: a non-zero exit and one line on stderr.
fn refusal(out: &std::process::Output) -> String {
    assert!(!out.status.success(), "should fail: {}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    stderr
}

async fn the_cli_imports_a_day_and_lists_shows_and_resolves_its_exception_once(app: TestApp) {
    let (id, day) = a_day_with_a_wrong_amount(&app).await;
    let _importer = app.settlement_worker();
    let (operator, viewer) = (app.operator("operator").await, app.operator("viewer").await);
    let day_text = day.to_string();

    let imported = stdout(&cli(&app, &operator, &["settlement", "import", "--date", &day_text]));

    assert!(imported.contains(&format!("imported the report of {day}: version 1")), "{imported}");
    assert!(imported.contains("from provider"), "{imported}");
    assert!(imported.contains("exceptions opened 1,"), "{imported}");
    assert!(imported.contains("see them with: withdrawals settlement exceptions"), "{imported}");
    let again = stdout(&cli(&app, &operator, &["settlement", "import", "--date", &day_text]));
    assert!(again.contains("is already imported (version 1"), "the same report twice changes nothing: {again}");
    assert!(again.contains("exceptions opened 0,"), "{again}");

    let listed: Page<ExceptionView> =
        serde_json::from_str(&stdout(&cli(&app, &viewer, &["settlement", "exceptions", "--json"]))).unwrap();
    let rows = &listed.data;
    assert_eq!(rows.len(), 1, "{listed:?}");
    assert_eq!((rows[0].kind, rows[0].status), (ExceptionKind::AmountMismatch, ExceptionStatus::Open));
    assert_eq!(rows[0].withdrawal_id, Some(id.0));
    let exception = rows[0].id.to_string();
    let table = stdout(&cli(&app, &viewer, &["settlement", "exceptions", "--kind", "amount_mismatch"]));
    assert!(table.lines().any(|l| l.starts_with(&exception) && l.contains(&id.to_string())), "{table}");
    let none = stdout(&cli(&app, &viewer, &["settlement", "exceptions", "--kind", "unknown_transfer", "--json"]));
    assert!(exceptions_in(&none).is_empty(), "filtered by kind");
    let shown = stdout(&cli(&app, &viewer, &["settlement", "show", &exception]));
    assert!(shown.contains("kind:        amount_mismatch") && shown.contains("evidence:"), "{shown}");
    assert!(shown.contains("\"amount_minor\": 1200"), "the report line is in the evidence: {shown}");

    // The report differs from our totals: the day does not verify until the provider corrects it.
    let differs = refusal(&cli(&app, &viewer, &["ledger", "verify", "--date", &day_text]));
    assert!(
        differs.contains("409 settlement_totals_differ") && differs.contains("ours 12.34 report 12.00"),
        "{differs}"
    );

    let forbidden = refusal(&cli(
        &app,
        &viewer,
        &["settlement", "resolve", &exception, "--reason", "accepted_difference", "--note", "viewer tries"],
    ));
    assert!(forbidden.contains("403 forbidden"), "{forbidden}");
    let note = "provider confirmed 12.34 was paid; their report rounds";
    let resolve = ["settlement", "resolve", &exception, "--reason", "accepted_difference", "--note", note];
    let resolved = stdout(&cli(&app, &operator, &resolve));
    assert!(resolved.contains(&format!("resolved {exception} (amount_mismatch) as accepted_difference")), "{resolved}");
    let twice = refusal(&cli(&app, &operator, &resolve));
    assert!(twice.contains("409 already_resolved"), "{twice}");
    let open = stdout(&cli(&app, &viewer, &["settlement", "exceptions", "--json"]));
    assert!(exceptions_in(&open).is_empty(), "no open exception is left");
    let all = exceptions_in(&stdout(&cli(&app, &viewer, &["settlement", "exceptions", "--status", "all", "--json"])));
    assert_eq!(all[0].resolution, Some(Resolution::AcceptedDifference));
    assert_eq!(all[0].resolution_note.as_deref(), Some(note));
    let rows = audit::list(
        &app.db,
        &AuditFilter { action: Some("settlement_exception.resolve".into()), limit: 10, ..Default::default() },
    )
    .await
    .unwrap();
    let results: Vec<&str> = rows.iter().rev().map(|r| r.result.as_str()).collect();
    assert_eq!(results, ["forbidden", "ok", "already_resolved"]);

    // The provider corrects its report: a second version, one line changed, and the day verifies.
    app.provider.mock.set_report_faults(ReportFaultConfig::default());
    let corrected = stdout(&cli(&app, &operator, &["settlement", "import", "--date", &day_text]));
    assert!(corrected.contains("version 2"), "{corrected}");
    assert!(corrected.contains("0 added, 0 removed, 1 changed"), "{corrected}");
    let reports: List<ReportView> =
        serde_json::from_str(&stdout(&cli(&app, &viewer, &["settlement", "reports", "--date", &day_text, "--json"])))
            .unwrap();
    let versions: Vec<i32> = reports.data.iter().map(|r| r.version).collect();
    assert_eq!(versions, [2, 1], "newest first");
    let verified = stdout(&cli(&app, &viewer, &["ledger", "verify", "--date", &day_text]));
    assert!(verified.contains(&format!("{day}: our totals agree with the settlement report")), "{verified}");
    let usd = verified.lines().find(|l| l.starts_with("USD")).unwrap_or_else(|| panic!("a USD row: {verified}"));
    assert_eq!(usd.split_whitespace().collect::<Vec<_>>(), ["USD", "12.34", "12.34", "0.00", "0.00"], "{verified}");
    app.assert_ledger_invariant().await;
}

async fn the_cli_imports_a_report_file_and_refuses_a_malformed_one_naming_its_line(app: TestApp) {
    let id = a_paid_withdrawal(&app).await;
    let _importer = app.settlement_worker();
    let day = app.provider.mock.now().date_naive();
    let operator = app.operator("operator").await;
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("report.csv");
    std::fs::write(&good, app.provider.mock.settlement_report(day)).unwrap();

    // A file names its day by its lines; --date is optional.
    let imported = stdout(&cli(&app, &operator, &["settlement", "import", "--file", good.to_str().unwrap()]));
    assert!(imported.contains(&format!("imported the report of {day}: version 1")), "{imported}");
    assert!(imported.contains("from a file, as provider default's") && imported.contains("matched 1,"), "{imported}");
    assert!(imported.contains("exceptions opened 0,"), "{imported}");
    let reports = || stdout(&cli(&app, &operator, &["settlement", "reports", "--json"]));
    let before = reports();
    assert_eq!(serde_json::from_str::<List<ReportView>>(&before).unwrap().data.len(), 1, "{before}");

    let bad = dir.path().join("bad.csv");
    let at = format!("{day}T12:00:00Z");
    let csv = format!(
        "transfer_id,idempotency_key,reference,amount,currency,fee,status,event_at\n\
         tr_good,{},payout,5.00,USD,0.00,paid,{at}\n\
         tr_bad,{},payout,12.3.4,USD,0.00,paid,{at}\n",
        uuid::Uuid::now_v7(),
        uuid::Uuid::now_v7()
    );
    std::fs::write(&bad, csv).unwrap();
    let refused = refusal(&cli(
        &app,
        &operator,
        &["settlement", "import", "--file", bad.to_str().unwrap(), "--date", &day.to_string()],
    ));

    assert!(refused.contains("422 report_refused: report refused: line 3:"), "{refused}");
    assert!(refused.contains("12.3.4"), "the bad amount is named: {refused}");
    assert_eq!(reports(), before, "nothing of the refused report is stored");
    let open = stdout(&cli(&app, &operator, &["settlement", "exceptions", "--status", "all", "--json"]));
    assert!(exceptions_in(&open).is_empty(), "and nothing of it matched");
    let neither = cli(&app, &operator, &["settlement", "import"]);
    assert_eq!(neither.status.code(), Some(2), "a usage error");
    let usage = String::from_utf8_lossy(&neither.stderr);
    assert!(usage.contains("<--date <DATE>|--file <FILE>>"), "one of them is required: {usage}");
    assert_eq!(
        withdrawals::storage::withdrawals::find(&app.db, id).await.unwrap().unwrap().status,
        WithdrawalStatus::Completed
    );
}

/// Imports the day through the API as an operator; returns the one open exception's id.
async fn import_and_find_the_exception(app: &TestApp, day: NaiveDate) -> String {
    let operator = app.operator("operator").await;
    crate::settlement::imported(app, &operator, json!({"date": day})).await;
    let listed: Page<ExceptionView> = app.ops_get(&operator, "/ops/v1/settlement/exceptions").await;
    listed.data.first().expect("one open exception").id.to_string()
}

/// The exceptions `settlement exceptions --json` printed.
fn exceptions_in(json: &str) -> Vec<ExceptionView> {
    serde_json::from_str::<Page<ExceptionView>>(json).unwrap_or_else(|e| panic!("{e}: {json}")).data
}

async fn exception_status(app: &TestApp, id: &str) -> String {
    let stored = withdrawals::storage::settlement::get_exception(
        &app.db,
        withdrawals::domain::SettlementExceptionId(id.parse().unwrap()),
    )
    .await
    .unwrap()
    .unwrap();
    stored.status.to_string()
}

/// Clicks: "Settlement" in the navigation; the exception's id; "Resolve exception" with a
/// blank note (refused, what was chosen is kept); then again with a note.
async fn an_operator_resolves_a_settlement_exception_in_the_console(app: TestApp) {
    let (id, day) = a_day_with_a_wrong_amount(&app).await;
    let exception = import_and_find_the_exception(&app, day).await;
    let browser = Browser::start(&app).await;
    browser.sign_in(&app.operator("operator").await).await;

    browser.click("a[href='/ops/settlement']").await;
    let list = browser.wait_for_text("Latest reports").await;
    assert!(list.contains(&day.to_string()) && list.contains("provider"), "the imported report: {list}");
    let row = browser.client.find(Locator::Css("#settlement-exceptions tbody tr")).await.unwrap().text().await.unwrap();
    assert!(row.contains(&exception) && row.contains("amount_mismatch") && row.contains(&id.to_string()), "{row}");
    assert!(row.contains("open"), "{row}");
    browser.screenshot("settlement").await;

    browser.click(&format!("#settlement-exceptions a[href='/ops/settlement/exceptions/{exception}']")).await;
    let page = browser.wait_for_text("Evidence").await;
    assert!(page.contains("amount_mismatch") && page.contains("from the withdrawal's"), "{page}");
    let evidence = browser.client.find(Locator::Css("#evidence")).await.unwrap().text().await.unwrap();
    assert!(evidence.contains("\"report_line\"") && evidence.contains("\"amount_minor\": 1200"), "{evidence}");
    browser.screenshot("settlement-exception").await;

    // A note of spaces passes the browser's `required` but not the core: refused, nothing changes.
    browser
        .client
        .find(Locator::Css("#resolve-reason"))
        .await
        .unwrap()
        .select_by_value("accepted_difference")
        .await
        .unwrap();
    browser.fill("#resolve-note", "   ").await;
    browser.click("#submit-resolve").await;
    let refused = browser.wait_for_text("Not done.").await;
    assert!(refused.contains("note_required"), "{refused}");
    let kept = browser.client.find(Locator::Css("#resolve-reason")).await.unwrap().prop("value").await.unwrap();
    assert_eq!(kept.as_deref(), Some("accepted_difference"), "the chosen resolution is kept");
    assert_eq!(exception_status(&app, &exception).await, "open");

    browser.fill("#resolve-note", "provider confirmed the amount paid; their report rounds").await;
    browser.click("#submit-resolve").await;
    let resolved = browser.wait_for_text("The settlement exception is resolved.").await;
    assert!(resolved.contains("accepted_difference"), "{resolved}");
    assert!(resolved.contains("provider confirmed the amount paid; their report rounds"), "{resolved}");
    let status = browser.client.find(Locator::Css("#exception-status")).await.unwrap().text().await.unwrap();
    assert_eq!(status, "resolved");
    assert!(!browser.exists("#resolve-form").await, "a resolved exception has nothing left to resolve");
    assert_eq!(exception_status(&app, &exception).await, "resolved");

    browser.goto("/ops/settlement").await;
    browser.wait_for_text("No settlement exception matches.").await;
    browser.goto("/ops/settlement?kind=amount_mismatch&status=resolved").await;
    let listed = browser.wait_for_text("1 shown, oldest first.").await;
    assert!(listed.contains(&exception), "{listed}");
    let rows = audit::list(
        &app.db,
        &AuditFilter { action: Some("settlement_exception.resolve".into()), limit: 10, ..Default::default() },
    )
    .await
    .unwrap();
    let results: Vec<&str> = rows.iter().rev().map(|r| r.result.as_str()).collect();
    assert_eq!(results, ["note_required", "ok"]);
}

/// Clicks: signs in as a viewer, opens the exception (no resolve form is there), then submits a
/// hand-made form carrying the viewer's own valid CSRF token.
async fn a_viewer_sees_a_settlement_exception_but_no_resolve_form(app: TestApp) {
    let (_id, day) = a_day_with_a_wrong_amount(&app).await;
    let exception = import_and_find_the_exception(&app, day).await;
    let browser = Browser::start(&app).await;
    browser.sign_in(&app.operator("viewer").await).await;

    browser.goto(&format!("/ops/settlement/exceptions/{exception}")).await;
    let page = browser.wait_for_text("Evidence").await;
    assert!(page.contains("Your role (viewer) can view but not resolve settlement exceptions"), "{page}");
    assert!(!browser.exists("#resolve-form").await, "a viewer is not shown the form");

    browser
        .client
        .execute(
            "const csrf = document.querySelector('form[action=\"/ops/sign-out\"] input[name=csrf]').value;
             const f = document.createElement('form');
             f.method = 'post'; f.action = location.pathname + '/resolve';
             for (const [k, v] of Object.entries({csrf, reason: 'not_ours', note: 'viewer tries'})) {
               const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i);
             }
             document.body.appendChild(f); f.submit();",
            vec![],
        )
        .await
        .unwrap();

    let refused = browser.wait_for_text("Not done.").await;
    assert!(refused.contains("this action needs the operator role; you have viewer"), "{refused}");
    assert_eq!(exception_status(&app, &exception).await, "open", "nothing changed");
    let rows = audit::list(
        &app.db,
        &AuditFilter { action: Some("settlement_exception.resolve".into()), limit: 10, ..Default::default() },
    )
    .await
    .unwrap();
    assert_eq!(rows.len(), 1, "the refusal is audited");
    assert_eq!((rows[0].role.as_str(), rows[0].result.as_str()), ("viewer", "forbidden"));
}

/// `withdrawals …` as `token` against the API at `url`.
fn cli_at(url: &str, token: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_withdrawals"))
        .args(args)
        .env("WITHDRAWALS_URL", url)
        .env("WITHDRAWALS_TOKEN", token)
        .output()
        .expect("run the withdrawals binary")
}

/// SPEC §16: `settlement import --provider bolt` fetches bolt's report and matches it to bolt's
/// withdrawal only, the tables name the provider, and an unknown provider is one line and a
/// non-zero exit, with nothing imported.
async fn the_cli_imports_one_providers_report_and_refuses_an_unknown_provider(app: TestApp) {
    let two = crate::settlement::providers::acme_and_bolt(json!(null), json!(null)).await;
    let _worker = two.start_worker(&app, "w-cli-providers").drop_guard();
    let ops = two.serve(&app).await;
    let alice = app.customer("100.00").await;
    let at_acme = app.create_withdrawal(&alice, "a1", "10.00").await;
    app.wait_for_status(at_acme, WithdrawalStatus::Completed, Duration::from_secs(25)).await;
    two.gateways.get("acme").unwrap().breaker.force_open();
    let at_bolt = app.create_withdrawal(&alice, "b1", "12.34").await;
    app.wait_for_status(at_bolt, WithdrawalStatus::Completed, Duration::from_secs(25)).await;
    let (operator, viewer) = (app.operator("operator").await, app.operator("viewer").await);
    let day = two.bolt.mock.now().date_naive().to_string();

    let refused = refusal(&cli_at(&ops, &operator, &["settlement", "import", "--date", &day, "--provider", "nope"]));
    assert!(refused.contains("422 unknown_provider") && refused.contains("known: acme, bolt"), "{refused}");
    let imported = stdout(&cli_at(&ops, &operator, &["settlement", "import", "--date", &day, "--provider", "bolt"]));

    assert!(imported.contains(&format!("imported the report of {day}: version 1")), "{imported}");
    assert!(imported.contains("provider: bolt"), "{imported}");
    assert!(imported.contains("matched 1,") && imported.contains("exceptions opened 0,"), "{imported}");
    assert!(imported.contains("missing from reports: exceptions opened 0"), "acme's is not bolt's: {imported}");
    let reports = stdout(&cli_at(&ops, &viewer, &["settlement", "reports", "--provider", "bolt", "--json"]));
    let reports: List<ReportView> = serde_json::from_str(&reports).unwrap();
    let listed: Vec<&str> = reports.data.iter().map(|r| r.provider.as_str()).collect();
    assert_eq!(listed, ["bolt"], "{reports:?}");
    let table = stdout(&cli_at(&ops, &viewer, &["settlement", "reports"]));
    assert!(table.lines().any(|l| l.starts_with(&day) && l.contains(" bolt ")), "{table}");
    let none = stdout(&cli_at(&ops, &viewer, &["settlement", "exceptions", "--status", "all", "--json"]));
    assert!(exceptions_in(&none).is_empty(), "{none}");
    let lines = withdrawals::storage::settlement::lines_for_withdrawal(&app.db, app.key(at_bolt).await).await.unwrap();
    assert_eq!(lines.iter().map(|l| l.provider.as_str()).collect::<Vec<_>>(), ["bolt"]);
    assert!(withdrawals::storage::settlement::lines_for_withdrawal(&app.db, app.key(at_acme).await)
        .await
        .unwrap()
        .is_empty());
    app.assert_ledger_invariant().await;
}
