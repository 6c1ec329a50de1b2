//! Settlement reports (SPEC §14.1): the provider mock's report and our parser agree on the
//! contract — a paid withdrawal is one `paid` line under its operation key with its exact amount —
//! and a malformed or duplicated line refuses the whole report, naming the line.

use std::time::Duration;

use provider_mocks::{ReportFault, ReportFaultConfig};
use withdrawals::domain::settlement::{parse_report, LineStatus};
use withdrawals::domain::WithdrawalStatus;

use crate::both_backends;
use crate::harness::TestApp;

both_backends!(the_providers_report_parses_and_a_bad_line_refuses_it_whole,);

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
