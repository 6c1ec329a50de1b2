//! After a chaos run: the invariants, checked against the database, the provider's own record
//! of transfers, and every log line the service wrote.
//!
//! "Paid" at the provider means a transfer whose status is `paid` or `returned` (a return is money
//! that went out first; bringing it back is settlement's business, SPEC §14.3): an account's
//! `paid_out` is what the provider paid for its withdrawals less the returns credited back.
//!
//! Every final decision is attributed to the channel that took it (the actor of the transition
//! into `completed` or `failed`: a worker's submit, reconciliation's poll, a provider webhook,
//! settlement, an operator), and a final state the provider's record contradicts names it. The
//! money checks — the ledger, one execution per key, final states against the provider's record,
//! `paid_out` — hold whichever channel decided, so they are what proves that a forged, stale or
//! disagreeing webhook moved no money ([`Findings::money_violations`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use provider_mocks::{TransferRecord, TransferStatus};
use rust_decimal::Decimal;
use serde::Serialize;
use uuid::Uuid;

use super::load::Accepted;
use crate::store::chaos::final_decisions;
use withdrawals::domain::{AccountId, Currency};
use withdrawals::storage::{accounts, dead_letters, verify, Db};

#[derive(Debug, Default, Serialize)]
pub struct Findings {
    pub final_states: BTreeMap<String, u64>,
    pub withdrawals_in_database: u64,
    pub transfers_at_provider: u64,
    pub provider_executions_checked: u64,
    pub paid_transfers: u64,
    /// Account balances whose `paid_out` was compared with what the provider paid.
    pub paid_out_balances_checked: u64,
    pub review_with_dead_letter: u64,
    pub review_with_reconciliation: u64,
    /// Final decisions by the state they reached and the channel that took them.
    pub decided_by: BTreeMap<String, BTreeMap<String, u64>>,
    /// Violations of the money checks (ledger, executions per key, final states against the
    /// provider's record, `paid_out`), whichever channel decided.
    pub money_violations: u64,
    pub log_bytes_scanned: u64,
    pub dead_letters_scanned: u64,
    pub violations: Vec<String>,
}

pub struct Secrets {
    pub account_numbers: HashSet<String>,
    pub strings: Vec<String>,
}

pub async fn check(
    db: &Db,
    accepted: &HashMap<String, Accepted>,
    transfers: &[TransferRecord],
    logs: &[PathBuf],
    secrets: &Secrets,
) -> anyhow::Result<Findings> {
    let mut f = Findings::default();
    let violation = |f: &mut Findings, v: String| {
        if f.violations.len() < 200 {
            f.violations.push(v);
        }
    };
    let money = |f: &mut Findings, v: String| {
        f.money_violations += 1;
        violation(f, v);
    };

    // Every accepted withdrawal exists once, in a final state; nothing exists that was not accepted.
    let outcomes = verify::withdrawal_outcomes(db).await?;
    f.withdrawals_in_database = outcomes.len() as u64;
    let by_id: HashMap<String, &verify::WithdrawalOutcome> = outcomes.iter().map(|w| (w.id.to_string(), w)).collect();
    let accepted_ids: HashSet<&str> = accepted.values().map(|a| a.id.as_str()).collect();
    for (key, a) in accepted {
        match by_id.get(&a.id) {
            None => violation(&mut f, format!("lost: withdrawal {} (key {key}) was accepted but is not stored", a.id)),
            Some(w) if w.idempotency_key != *key => violation(
                &mut f,
                format!("withdrawal {} answered key {key} but stores key {}", a.id, w.idempotency_key),
            ),
            Some(_) => {}
        }
    }
    for w in &outcomes {
        *f.final_states.entry(w.status.clone()).or_default() += 1;
        if !accepted_ids.contains(w.id.to_string().as_str()) {
            violation(&mut f, format!("withdrawal {} exists but no customer was told about it", w.id));
        }
        if matches!(w.status.as_str(), "pending" | "processing") {
            violation(&mut f, format!("stuck: withdrawal {} is still {}", w.id, w.status));
        }
    }

    // Every requires_review has evidence: a dead letter or a reconciliation result.
    let evidence: HashMap<String, verify::ReviewEvidence> =
        verify::review_evidence(db).await?.into_iter().map(|e| (e.withdrawal_id.to_string(), e)).collect();
    for e in evidence.values() {
        if e.dead_letters > 0 {
            f.review_with_dead_letter += 1;
        }
        if e.reconciliations > 0 {
            f.review_with_reconciliation += 1;
        }
        if e.dead_letters == 0 && e.reconciliations == 0 {
            violation(&mut f, format!("withdrawal {} is in requires_review with no evidence", e.withdrawal_id));
        }
    }

    // Which channel took each final decision.
    let mut channel: HashMap<String, String> = HashMap::new();
    for d in final_decisions(db).await? {
        *f.decided_by.entry(d.to_status.as_str().to_owned()).or_default().entry(d.channel().to_owned()).or_default() +=
            1;
        channel.insert(d.withdrawal_id.to_string(), d.channel().to_owned());
    }
    let by =
        |id: &str| channel.get(id).map_or_else(|| "no recorded decision".to_owned(), |c| format!("decided by {c}"));

    // The ledger invariant, exact for every account.
    for v in accounts::ledger_violations(db).await? {
        money(&mut f, format!("ledger invariant violated: {v:?}"));
    }

    // The provider: at most one execution per idempotency key, at most one transfer per
    // withdrawal, and paid transfers matched one to one with completed withdrawals.
    f.transfers_at_provider = transfers.len() as u64;
    let mut per_reference: HashMap<&str, Vec<&TransferRecord>> = HashMap::new();
    for t in transfers {
        f.provider_executions_checked += 1;
        if t.executions > 1 {
            money(&mut f, format!("paid twice: key {} executed {} times", t.idempotency_key, t.executions));
        }
        per_reference.entry(t.reference.as_str()).or_default().push(t);
    }
    for (reference, ts) in &per_reference {
        if ts.len() > 1 {
            money(&mut f, format!("withdrawal {reference} has {} transfers at the provider", ts.len()));
        }
    }
    for t in transfers.iter().filter(|t| paid(t)) {
        f.paid_transfers += 1;
        match by_id.get(&t.reference) {
            None => money(&mut f, format!("transfer {} paid for unknown withdrawal {}", t.id, t.reference)),
            Some(w) => {
                let explained = match w.status.as_str() {
                    "completed" => true,
                    "requires_review" => {
                        evidence.get(&t.reference).is_some_and(|e| e.paid_evidence > 0 || e.unknown_evidence > 0)
                    }
                    "failed" => {
                        // The double payment a blind `fail` makes: the hold went back to the
                        // customer, and the provider paid the money out as well.
                        money(
                            &mut f,
                            format!(
                                "paid but failed: the provider paid transfer {} ({}) for withdrawal {}, which is failed ({}) and its funds released",
                                t.id,
                                status_name(t.status),
                                w.id,
                                by(&t.reference)
                            ),
                        );
                        true
                    }
                    _ => false,
                };
                if !explained {
                    money(&mut f, format!("transfer {} is paid but withdrawal {} is {}", t.id, w.id, w.status));
                }
                let paid_minor = (t.amount * rust_decimal::Decimal::from(100)).trunc();
                if paid_minor != rust_decimal::Decimal::from(w.amount) {
                    money(
                        &mut f,
                        format!(
                            "transfer {} paid {} for withdrawal {} of {} minor units ({})",
                            t.id,
                            t.amount,
                            w.id,
                            w.amount,
                            by(&t.reference)
                        ),
                    );
                }
            }
        }
    }
    for w in outcomes.iter().filter(|w| w.status == "completed") {
        let paid_count =
            per_reference.get(w.id.to_string().as_str()).map_or(0, |ts| ts.iter().filter(|t| paid(t)).count());
        if paid_count != 1 {
            let id = w.id.to_string();
            money(&mut f, format!("withdrawal {id} is completed ({}) with {paid_count} paid transfers", by(&id)));
        }
    }

    // Every account's `paid_out` is what the provider paid for that account's withdrawals
    // (transfers by idempotency key, which is the withdrawal id).
    let mut provider_paid: BTreeMap<(Uuid, String), Decimal> = BTreeMap::new();
    for t in transfers.iter().filter(|t| paid(t)) {
        match by_id.get(&t.idempotency_key) {
            None => money(
                &mut f,
                format!(
                    "the provider paid transfer {} under key {}, which is no withdrawal's",
                    t.id, t.idempotency_key
                ),
            ),
            Some(w) => *provider_paid.entry((w.account_id, t.currency.clone())).or_default() += t.amount,
        }
    }
    let mut ledger_paid: BTreeMap<(Uuid, String), Decimal> = BTreeMap::new();
    let account_ids: HashSet<Uuid> = outcomes.iter().map(|w| w.account_id).collect();
    for account in account_ids {
        for b in accounts::balances(db, AccountId(account)).await? {
            f.paid_out_balances_checked += 1;
            let scale = Currency::parse(&b.currency).map(|c| c.minor_units()).unwrap_or(2);
            ledger_paid.insert((account, b.currency.clone()), Decimal::new(b.paid_out, scale));
        }
    }
    // A return settlement credited back (SPEC §14.3) left `paid_out` again.
    let mut returned: BTreeMap<(Uuid, String), Decimal> = BTreeMap::new();
    for r in verify::returned_by_account(db).await? {
        let scale = Currency::parse(&r.currency).map(|c| c.minor_units()).unwrap_or(2);
        returned.insert((r.account_id, r.currency.clone()), Decimal::new(r.returned_minor, scale));
    }
    let keys: std::collections::BTreeSet<&(Uuid, String)> =
        provider_paid.keys().chain(ledger_paid.keys()).chain(returned.keys()).collect();
    for key in keys {
        let ours = ledger_paid.get(key).copied().unwrap_or_default();
        let theirs = provider_paid.get(key).copied().unwrap_or_default();
        let back = returned.get(key).copied().unwrap_or_default();
        if ours != theirs - back {
            let less = if back.is_zero() { String::new() } else { format!(", less {back} {} credited back", key.1) };
            money(
                &mut f,
                format!(
                    "account {} paid_out {} {} but the provider paid {} {} for its withdrawals{less}",
                    key.0, ours, key.1, theirs, key.1
                ),
            );
        }
    }

    // Nothing secret kept: no full account number or credential in dead letters or logs.
    for d in verify::dead_letter_texts(db).await? {
        f.dead_letters_scanned += 1;
        let mut text = format!("{} {}", d.error_message, d.stack.unwrap_or_default());
        if let Some(p) = d.payload {
            text.push_str(&p.0.to_string());
        }
        if let Some(raw) = d.raw_payload {
            text.push_str(&String::from_utf8_lossy(&raw));
        }
        if let Some(leak) = leak(&text, secrets) {
            violation(&mut f, format!("dead letter {} keeps {leak}", d.id));
        }
    }
    // The triage summary (the maintained open set) agrees with the events, through every kill.
    let maintained = dead_letters::summary(db).await?;
    let recomputed = verify::open_dead_letters_from_events(db).await?;
    if maintained != recomputed {
        violation(&mut f, format!("dead-letter summary {maintained:?} differs from the events: {recomputed:?}"));
    }
    for log in logs {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        f.log_bytes_scanned += text.len() as u64;
        if let Some(leak) = leak(&text, secrets) {
            violation(&mut f, format!("{} logs {leak}", log.display()));
        }
    }
    Ok(f)
}

/// Money went out: `paid`, or `returned` after it was paid.
pub(super) fn paid(t: &TransferRecord) -> bool {
    matches!(t.status, TransferStatus::Paid | TransferStatus::Returned)
}

/// A transfer's status as the provider writes it.
pub(super) fn status_name(status: TransferStatus) -> &'static str {
    match status {
        TransferStatus::Pending => "pending",
        TransferStatus::Paid => "paid",
        TransferStatus::Failed => "failed",
        TransferStatus::Returned => "returned",
    }
}

/// The first secret found in `text`, described without repeating it.
pub(super) fn leak(text: &str, secrets: &Secrets) -> Option<String> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            if secrets.account_numbers.contains(&text[start..i]) {
                return Some(format!("a full account number ending {}", &text[i - 4..i]));
            }
        } else {
            i += 1;
        }
    }
    secrets
        .strings
        .iter()
        .find(|s| text.contains(s.as_str()))
        .map(|s| format!("a credential starting {}…", &s[..6.min(s.len())]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets() -> Secrets {
        Secrets { account_numbers: ["1234567890".to_owned()].into(), strings: vec!["wdk_secretkey".to_owned()] }
    }

    #[test]
    fn a_full_account_number_or_a_credential_is_a_leak_and_a_masked_one_is_not() {
        assert!(leak("paid to 1234567890 today", &secrets()).unwrap().contains("ending 7890"));
        assert!(leak("key wdk_secretkey used", &secrets()).is_some());
        assert_eq!(leak("paid to ******7890, ref 12345678901", &secrets()), None, "masked, or a longer number");
        assert_eq!(leak("", &secrets()), None);
    }
}
