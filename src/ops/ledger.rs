//! Ledger verification (SPEC §14.4): the invariant of §1.2 checked for every account and
//! currency — balances against the sum of their ledger entries, and everything held, available
//! and paid out against what was funded. Any difference is a refusal naming the account, the
//! currency and the amounts, so the API answers 409 and the CLI exits non-zero.

use super::types::LedgerCheck;
use super::{Operator, Ops, OpsError, OpsResult, Role};
use crate::domain::{format_minor, Currency};
use crate::storage::accounts::{self, LedgerViolation};

fn amount(minor: i64, currency: &str) -> String {
    match Currency::parse(currency) {
        Ok(c) => format_minor(minor, c),
        Err(_) => format!("{minor} (minor units)"),
    }
}

/// One difference in words: the balance row, the ledger's sums and what was funded.
fn describe(v: &LedgerViolation) -> String {
    let a = |minor| amount(minor, &v.currency);
    format!(
        "account {} {}: balance available {} held {} paid_out {} (total {}); ledger available {} held {} paid_out {}; funded {}",
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

/// Checks the invariant now. `Ok` when every account and currency agrees; a 409
/// `ledger_violation` naming each difference otherwise.
pub async fn verify(ops: &Ops<'_>, operator: &Operator) -> OpsResult<LedgerCheck> {
    operator.require(Role::Viewer)?;
    let violations = accounts::ledger_violations(ops.db).await?;
    if violations.is_empty() {
        return Ok(LedgerCheck { clean: true });
    }
    let lines: Vec<String> = violations.iter().map(describe).collect();
    Err(OpsError::conflict(
        "ledger_violation",
        format!("{} ledger difference(s): {}", violations.len(), lines.join("; ")),
    ))
}
