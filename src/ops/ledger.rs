//! Ledger verification (SPEC §14.4): the invariant of §1.2 checked for every account and
//! currency — balances against the sum of their ledger entries, and everything held, available
//! and paid out against what was funded. Any difference is a refusal naming the account, the
//! currency and the amounts, so the API answers 409 and the CLI exits non-zero.

use super::types::{DayTotalView, LedgerCheck, LedgerQuery};
use super::{Operator, Ops, OpsError, OpsResult, Role};
use crate::domain::{format_minor, Currency};
use crate::storage::accounts::{self, LedgerViolation};
use crate::storage::settlement;

fn amount(minor: i128, currency: &str) -> String {
    match (Currency::parse(currency), i64::try_from(minor)) {
        (Ok(c), Ok(minor)) => format_minor(minor, c),
        _ => format!("{minor} (minor units)"),
    }
}

/// One difference in words: the balance row, the ledger's sums and what was funded, and first
/// any stored value that is not money (a corrupt row is a finding, never a 500).
fn describe(v: &LedgerViolation) -> String {
    let a = |minor| amount(minor, &v.currency);
    let corrupt = if v.corrupt.is_empty() { String::new() } else { format!(" corrupt: {};", v.corrupt.join(", ")) };
    format!(
        "account {} {}:{corrupt} balance available {} held {} paid_out {} (total {}); ledger available {} held {} paid_out {}; funded {}",
        v.account_id,
        v.currency,
        a(v.available),
        a(v.held),
        a(v.paid_out),
        a(v.available + v.held + v.paid_out),
        a(v.ledger_available),
        a(v.ledger_held),
        a(v.ledger_paid_out),
        a(v.funded),
    )
}

/// Checks the invariant now and, for a day, our totals against that day's settlement report
/// (its latest version): paid out by completion day against its `paid` lines, returns by return
/// day against its `returned` lines, per currency. `Ok` when everything agrees; a 409
/// `ledger_violation` (or `settlement_totals_differ`) naming each difference otherwise, and a 404
/// `report_not_imported` for a day with no imported report.
pub async fn verify(ops: &Ops<'_>, operator: &Operator, q: LedgerQuery) -> OpsResult<LedgerCheck> {
    operator.require(Role::Viewer)?;
    let date = q.date.as_deref().map(|d| super::settlement::parse_day(d, "date")).transpose()?;
    let violations = accounts::ledger_violations(ops.db).await?;
    if !violations.is_empty() {
        let lines: Vec<String> = violations.iter().map(describe).collect();
        return Err(OpsError::conflict(
            "ledger_violation",
            format!("{} ledger difference(s): {}", violations.len(), lines.join("; ")),
        ));
    }
    let Some(date) = date else { return Ok(LedgerCheck { clean: true, date: None, totals: Vec::new() }) };
    let Some(totals) = settlement::day_totals(ops.db, date).await? else {
        return Err(OpsError::refused(
            super::RefusalKind::NotFound,
            "report_not_imported",
            format!("no settlement report of {date} is imported: run `withdrawals settlement import --date {date}`"),
        ));
    };
    let mut currencies: Vec<&String> = totals.keys().collect();
    currencies.sort();
    let mut differences = Vec::new();
    let mut views = Vec::new();
    for currency in currencies {
        let t = &totals[currency];
        let a = |minor: i64| amount(i128::from(minor), currency);
        if t.ours_paid != t.report_paid {
            differences.push(format!("{currency} paid out: ours {} report {}", a(t.ours_paid), a(t.report_paid)));
        }
        if t.ours_returned != t.report_returned {
            differences.push(format!(
                "{currency} returned: ours {} report {}",
                a(t.ours_returned),
                a(t.report_returned)
            ));
        }
        views.push(DayTotalView {
            currency: currency.clone(),
            ours_paid: a(t.ours_paid),
            report_paid: a(t.report_paid),
            ours_returned: a(t.ours_returned),
            report_returned: a(t.report_returned),
        });
    }
    if !differences.is_empty() {
        return Err(OpsError::conflict(
            "settlement_totals_differ",
            format!(
                "{date}: {} difference(s) against the settlement report: {}",
                differences.len(),
                differences.join("; ")
            ),
        ));
    }
    Ok(LedgerCheck { clean: true, date: Some(date), totals: views })
}
