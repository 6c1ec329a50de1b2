//! Matching a day's lines of one provider's report to its withdrawals (SPEC §14.2, §16): which
//! withdrawal a line may match ([`owned_by`]), the pure [`plan`], the provider's live confirmation
//! of a safe outcome, and the recording of matches and exceptions.

use std::collections::HashMap;

use chrono::Utc;

use crate::domain::settlement::{ExceptionKind, LineApplied, LineResult, LineStatus};
use crate::domain::{
    Actor, Amount, Currency, Evidence, EvidenceSource, HeldRecord, LineEvidence, ReportLineRecord, StoredEvidence,
    VerdictKind, Withdrawal, WithdrawalId, WithdrawalKey, WithdrawalStatus,
};
use crate::provider::{Gateway, Transfer, TransferStatus, Verdict};
use crate::storage::batch::Writes;
use crate::storage::settlement::{self as store, LineDecision, LineRow, NewException};
use crate::storage::withdrawals::{self as withdrawals, TransitionOutcome, TransitionRequest};
use crate::storage::{returns, Db};

use super::{MatchCounts, ReportProvider};

/// Lines recorded per transaction when the report alone decides them.
const DECIDED_PER_BATCH: usize = 500;

/// Matches every line of `from`'s report of the day still undecided (of any version): the
/// withdrawals they name, and where each was sent last, are read in one query each per 500; the
/// lines the report alone decides (matched, exceptions) are recorded in batches of
/// [`DECIDED_PER_BATCH`] in one transaction each, and only the lines whose safe outcome needs the
/// provider's confirmation are taken one by one, asked of `from`'s gateway.
pub async fn match_day(db: &Db, from: ReportProvider<'_>, day: &str) -> crate::storage::Result<MatchCounts> {
    let mut counts = MatchCounts::default();
    let gateway = from.gateway;
    let lines = store::unmatched_lines_of_day(db, from.name, day).await?;
    // A line names a withdrawal of its own account only (its account was resolved from the key at
    // import; a line on the system account names none of ours): read by (account, id).
    let keys: Vec<WithdrawalKey> = lines
        .iter()
        .filter_map(|l| l.idempotency_key.parse().ok().map(|id| WithdrawalKey { account: l.account_id, id }))
        .collect();
    let held: HashMap<WithdrawalKey, Withdrawal> =
        withdrawals::get_many_keyed(db, &keys).await?.into_iter().map(|w| (w.key(), w)).collect();
    let sent_to = store::latest_providers(db, &held.keys().copied().collect::<Vec<_>>()).await?;
    let mut decided = Vec::new();
    let mut to_confirm = Vec::new();
    for line in &lines {
        let named = line
            .idempotency_key
            .parse::<WithdrawalId>()
            .ok()
            .and_then(|id| held.get(&WithdrawalKey { account: line.account_id, id }));
        let Some(transfer) = as_transfer(line) else {
            return Err(crate::storage::StorageError::corrupt(format!("settlement line {} is unreadable", line.id)));
        };
        let w = match named {
            Some(w) => match owned_by(from.name, sent_to.get(&w.key()).map(String::as_str)) {
                Owner::Here => Some(w),
                // Another provider's withdrawal: this report's line is a transfer of none of ours.
                Owner::Elsewhere(other) => {
                    let verdict = line_verdict(None, &transfer);
                    let detail = format!(
                        "the line names withdrawal {}, which was sent to provider {other}, not {}: not matched",
                        w.id, from.name
                    );
                    let evidence = evidence(line, None, verdict.kind(), None);
                    decided.push(LineDecided::foreign(line, w.id, detail, evidence));
                    continue;
                }
            },
            None => None,
        };
        let verdict = line_verdict(w, &transfer);
        let evidence = evidence(line, w, verdict.kind(), None);
        match plan(w, &verdict) {
            Plan::Matched => {
                decided.push(LineDecided { line, withdrawal: w.map(|w| w.id), exception: None, names: None, evidence })
            }
            Plan::Exception(kind, detail) => {
                decided.push(LineDecided::exception(line, w.map(|w| w.id), kind, detail, evidence))
            }
            Plan::Confirm(apply) => {
                if let Some(w) = w {
                    to_confirm.push((line, w, transfer, verdict.kind(), apply));
                }
            }
        }
    }
    for batch in decided.chunks(DECIDED_PER_BATCH) {
        record(db, batch, &mut counts).await?;
    }
    for (line, w, transfer, verdict, apply) in to_confirm {
        confirm(db, gateway, line, w, transfer, verdict, apply, &mut counts).await?;
    }
    Ok(counts)
}

/// Whose withdrawal a line of `report`'s may match (SPEC §16).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner<'a> {
    /// Its latest attempt went to the report's provider, or it was never attempted (then the
    /// line is judged as ever: a provider's `paid` line for a withdrawal we never sent is a
    /// status mismatch, and only a provider that confirms it live can make it more).
    Here,
    /// Its latest attempt went to this other provider: the money, if any moved, is there.
    Elsewhere(&'a str),
}

/// Whether a withdrawal whose latest attempt went to `sent_to` (none: never attempted) is the
/// report provider's. A withdrawal moves to another provider only when no attempt at the first
/// can have moved money (SPEC §16), so the latest attempt's provider is the one that may have
/// paid it. Pure.
pub fn owned_by<'a>(report: &str, sent_to: Option<&'a str>) -> Owner<'a> {
    match sent_to {
        Some(other) if other != report => Owner::Elsewhere(other),
        Some(_) | None => Owner::Here,
    }
}

/// What a line asks for, judged on the report alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The line agrees with what we hold: nothing to do.
    Matched,
    /// A safe outcome, applied once the provider's live record agrees.
    Confirm(Apply),
    /// An exception for operators, with why.
    Exception(ExceptionKind, String),
}

/// The safe outcomes a line can apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apply {
    Complete,
    Fail,
    CreditReturn,
}

impl Apply {
    /// Does the provider's live verdict confirm this?
    fn confirmed_by(self, live: &Verdict) -> bool {
        match self {
            Apply::Complete => matches!(live, Verdict::Paid(_) | Verdict::Returned(_)),
            Apply::Fail => matches!(live, Verdict::Failed(_)),
            Apply::CreditReturn => matches!(live, Verdict::Returned(_)),
        }
    }

    /// The exception when the provider's record does not confirm the line.
    fn unconfirmed(self, live: &Verdict) -> (ExceptionKind, String) {
        let says = live.kind();
        match self {
            Apply::Complete => {
                (ExceptionKind::StatusMismatch, format!("the report shows it paid; the provider's record says {says}"))
            }
            Apply::Fail => (
                ExceptionKind::StatusMismatch,
                format!("the report shows it failed; the provider's record says {says}"),
            ),
            Apply::CreditReturn => (
                ExceptionKind::Returned,
                format!("the report shows a return the provider's record does not (it says {says}): not credited"),
            ),
        }
    }
}

/// The decision on one line (SPEC §14.2), from the withdrawal under its operation key (if any)
/// and the line read as the provider's transfer. Pure.
pub fn plan(withdrawal: Option<&Withdrawal>, line: &Verdict) -> Plan {
    use WithdrawalStatus::{Completed, Failed, Pending, Processing, RequiresReview};
    let Some(w) = withdrawal else {
        return Plan::Exception(ExceptionKind::UnknownTransfer, "no withdrawal has this operation key".into());
    };
    let held = w.status;
    match line {
        Verdict::Mismatch(_, m) => Plan::Exception(
            ExceptionKind::AmountMismatch,
            format!("the report's {} {} from the withdrawal's", m.fields.join(", "), differ(m.fields.len())),
        ),
        Verdict::Paid(_) => match held {
            Completed => Plan::Matched,
            Processing | RequiresReview => Plan::Confirm(Apply::Complete),
            Failed | Pending => Plan::Exception(
                ExceptionKind::StatusMismatch,
                format!("the provider paid a withdrawal we hold as {held}"),
            ),
        },
        Verdict::Failed(_) => match held {
            Failed => Plan::Matched,
            Processing | RequiresReview => Plan::Confirm(Apply::Fail),
            Completed | Pending => Plan::Exception(
                ExceptionKind::StatusMismatch,
                format!("the provider failed a withdrawal we hold as {held}"),
            ),
        },
        Verdict::Returned(_) => match held {
            Completed => Plan::Confirm(Apply::CreditReturn),
            Pending | Processing | RequiresReview | Failed => Plan::Exception(
                ExceptionKind::Returned,
                format!("a return of a withdrawal we hold as {held}, never completed: not credited"),
            ),
        },
        // A report line is a transfer with a status: it never reads as these.
        other @ (Verdict::Pending(_) | Verdict::NoTransfer | Verdict::InFlight | Verdict::Unavailable(_)) => {
            Plan::Exception(ExceptionKind::StatusMismatch, format!("a report line read as {}", other.kind()))
        }
    }
}

fn differ(fields: usize) -> &'static str {
    if fields == 1 {
        "differs"
    } else {
        "differ"
    }
}

/// The line as the provider's transfer (what [`Verdict::of_transfer`] judges).
fn as_transfer(line: &LineRow) -> Option<Transfer> {
    let currency = Currency::parse(&line.currency).ok()?;
    let amount = Amount::from_minor(line.amount_minor, currency).ok()?;
    let status = match line.status {
        LineStatus::Paid => TransferStatus::Paid,
        LineStatus::Failed => TransferStatus::Failed,
        LineStatus::Returned => TransferStatus::Returned,
    };
    Some(Transfer {
        id: line.transfer_id.clone(),
        reference: Some(line.reference.clone()),
        amount: amount.value(),
        currency: line.currency.clone(),
        status,
        failure_code: None,
        return_code: None,
        created_at: None,
        updated_at: Some(line.event_at.0),
    })
}

/// The evidence of a line's match: the line itself, what we held, and the provider's live answer
/// when one was asked for.
fn evidence(
    line: &LineRow,
    withdrawal: Option<&Withdrawal>,
    verdict: VerdictKind,
    live: Option<Evidence>,
) -> LineEvidence {
    LineEvidence {
        source: EvidenceSource::SettlementReport,
        report_id: line.report_id,
        line: line.line_no,
        line_key: line.line_key.clone(),
        report_line: ReportLineRecord {
            transfer_id: line.transfer_id.clone(),
            idempotency_key: line.idempotency_key.clone(),
            reference: line.reference.clone(),
            amount_minor: line.amount_minor,
            currency: line.currency.clone(),
            fee_minor: line.fee_minor,
            status: line.status,
            event_at: line.event_at.0,
        },
        verdict,
        ours: withdrawal.map(|w| HeldRecord {
            withdrawal_id: w.id,
            status: w.status,
            amount: w.amount.value(),
            currency: w.amount.currency().code().to_owned(),
            version: w.version,
        }),
        provider_record: live,
        matched_at: Utc::now(),
    }
}

/// The line as judged on the report: against the withdrawal under its key, or — with none to
/// check it against — named by its own status.
fn line_verdict(withdrawal: Option<&Withdrawal>, transfer: &Transfer) -> Verdict {
    match withdrawal {
        Some(w) => Verdict::of_transfer(w, transfer),
        None => match transfer.status {
            TransferStatus::Failed => Verdict::Failed(transfer.clone()),
            TransferStatus::Returned => Verdict::Returned(transfer.clone()),
            // A report line is paid, failed or returned (`as_transfer`): never pending.
            TransferStatus::Paid | TransferStatus::Pending => Verdict::Paid(transfer.clone()),
        },
    }
}

/// A line's safe outcome, applied only once the provider's live record agrees; anything else is
/// an exception, and a provider that cannot answer leaves the line for the next run.
#[allow(clippy::too_many_arguments)]
async fn confirm(
    db: &Db,
    gateway: Option<&Gateway>,
    line: &LineRow,
    w: &Withdrawal,
    transfer: Transfer,
    line_verdict: VerdictKind,
    apply: Apply,
    counts: &mut MatchCounts,
) -> crate::storage::Result<()> {
    // The report is a day old: nothing moves money until the provider's record, asked now,
    // agrees (amount and currency checked by the verdict).
    let live = match gateway {
        Some(g) => match g.lookup(&w.id.to_string(), &format!("settlement:{}", line.report_id)).await {
            Ok(answer) => Verdict::of_lookup(w, &answer, false),
            Err(_) => Verdict::Unavailable("the provider breaker is open".into()),
        },
        None => Verdict::Unavailable("no provider is configured in this process".into()),
    };
    let live_evidence = match gateway {
        Some(g) => live.evidence(w, Utc::now()).from_provider(&g.name),
        None => live.evidence(w, Utc::now()),
    };
    if let Verdict::Unavailable(why) = &live {
        tracing::info!(line = line.line_no, why, "settlement line awaits the provider's confirmation");
        counts.awaiting_confirmation += 1;
        return Ok(());
    }
    let e = evidence(line, Some(w), line_verdict, Some(live_evidence));
    let stored = StoredEvidence::from(e.clone());
    if let Verdict::Mismatch(_, m) = &live {
        let detail =
            format!("the provider's record's {} {} from the withdrawal's", m.fields.join(", "), differ(m.fields.len()));
        return except(db, line, w, ExceptionKind::AmountMismatch, detail, e, counts).await;
    }
    if !apply.confirmed_by(&live) {
        let (kind, detail) = apply.unconfirmed(&live);
        return except(db, line, w, kind, detail, e, counts).await;
    }
    let mut tx = db.begin().await?;
    let (result, applied) = match apply {
        Apply::Complete | Apply::Fail => {
            let (to, failure_code, reason) = match apply {
                Apply::Complete => {
                    (WithdrawalStatus::Completed, None, "settlement report shows it paid; provider confirms")
                }
                _ => (
                    WithdrawalStatus::Failed,
                    live.transfer().and_then(|t| t.failure_code.clone()).or_else(|| Some("provider_failed".into())),
                    "settlement report shows it failed; provider confirms",
                ),
            };
            let request = TransitionRequest {
                key: w.key(),
                from: w.status,
                to,
                expected_version: Some(w.version),
                actor: &Actor::Settlement,
                reason,
                correlation_id: &format!("settlement:{}", line.report_id),
                failure_code: failure_code.as_deref(),
                evidence: Some(&stored),
            };
            match withdrawals::transition(&mut tx, &request).await? {
                TransitionOutcome::Applied(_) => {}
                // Moved meanwhile: the line is matched again by the next run, against what it
                // holds then.
                TransitionOutcome::Stale | TransitionOutcome::Forbidden(_) => {
                    counts.awaiting_confirmation += 1;
                    return Ok(());
                }
            }
            let done = if to == WithdrawalStatus::Completed { LineApplied::Completed } else { LineApplied::Failed };
            (LineResult::Matched, Some(done))
        }
        Apply::CreditReturn => {
            let t = live.transfer().cloned().unwrap_or(transfer);
            let reported = Currency::parse(&t.currency).and_then(|c| Amount::new(t.amount, c));
            let Ok(reported) = reported else {
                let detail = "the provider's return names an amount we cannot read: not credited";
                return except(db, line, w, ExceptionKind::Returned, detail.into(), e, counts).await;
            };
            let code = t.return_code.clone().unwrap_or_else(|| "unspecified".into());
            let current = withdrawals::get_in_tx(&mut tx, w.key()).await?.unwrap_or_else(|| w.clone());
            match returns::apply(&mut tx, &current, reported, &code, line.event_at, &stored).await? {
                returns::Applied::Credited => (LineResult::Returned, Some(LineApplied::ReturnCredited)),
                returns::Applied::AlreadyApplied => (LineResult::Returned, None),
                returns::Applied::NotCompleted => {
                    drop(tx);
                    let detail = "a return of a withdrawal that is not completed: not credited";
                    return except(db, line, w, ExceptionKind::Returned, detail.into(), e, counts).await;
                }
                returns::Applied::AmountMismatch => {
                    drop(tx);
                    let detail = "the provider returns another amount or currency than was paid out: not credited";
                    return except(db, line, w, ExceptionKind::AmountMismatch, detail.into(), e, counts).await;
                }
            }
        }
    };
    let decision = LineDecision { withdrawal_id: Some(w.id), result, applied, evidence: &e };
    if !store::decide_line(&mut tx, line, &decision).await? {
        // Another import decided this line first; what this one did rolls back.
        return Ok(());
    }
    tx.commit().await?;
    match (result, applied) {
        (_, Some(LineApplied::Completed)) => {
            (counts.matched, counts.completed) = (counts.matched + 1, counts.completed + 1)
        }
        (_, Some(LineApplied::Failed)) => (counts.matched, counts.failed) = (counts.matched + 1, counts.failed + 1),
        (_, Some(LineApplied::ReturnCredited)) => counts.returns_credited += 1,
        (LineResult::Returned, None) => counts.returns_already_applied += 1,
        (
            LineResult::Matched
            | LineResult::AmountMismatch
            | LineResult::StatusMismatch
            | LineResult::UnknownTransfer
            | LineResult::SeenBefore,
            None,
        ) => counts.matched += 1,
    }
    Ok(())
}

/// A line decided without moving anything: matched, or an exception with why.
struct LineDecided<'a> {
    line: &'a LineRow,
    /// The withdrawal the line is matched to (the line's own, and its exception's).
    withdrawal: Option<WithdrawalId>,
    exception: Option<(ExceptionKind, String)>,
    /// The withdrawal the exception names though the line is not matched to it: the other
    /// provider's withdrawal a line names (shown on that withdrawal's review page).
    names: Option<WithdrawalId>,
    evidence: LineEvidence,
}

impl<'a> LineDecided<'a> {
    fn exception(
        line: &'a LineRow,
        withdrawal: Option<WithdrawalId>,
        kind: ExceptionKind,
        detail: String,
        evidence: LineEvidence,
    ) -> Self {
        LineDecided { line, withdrawal, exception: Some((kind, detail)), names: None, evidence }
    }

    /// A line naming another provider's withdrawal: matched to nothing (so it never counts as
    /// that withdrawal reported paid), an `unknown_transfer` exception naming the withdrawal.
    fn foreign(line: &'a LineRow, named: WithdrawalId, detail: String, evidence: LineEvidence) -> Self {
        LineDecided {
            line,
            withdrawal: None,
            exception: Some((ExceptionKind::UnknownTransfer, detail)),
            names: Some(named),
            evidence,
        }
    }
}

/// Records one line's exception (found while confirming it), in its own transaction.
async fn except(
    db: &Db,
    line: &LineRow,
    w: &Withdrawal,
    kind: ExceptionKind,
    detail: String,
    evidence: LineEvidence,
    counts: &mut MatchCounts,
) -> crate::storage::Result<()> {
    record(db, &[LineDecided::exception(line, Some(w.id), kind, detail, evidence)], counts).await
}

/// Records decided lines and opens their exceptions as one batch in one transaction. A line
/// another import decided first touches nothing (and its exception, the same by its dedupe key,
/// opens nothing new).
async fn record(db: &Db, decided: &[LineDecided<'_>], counts: &mut MatchCounts) -> crate::storage::Result<()> {
    let mut writes = Writes::new();
    let mut handles = Vec::with_capacity(decided.len());
    for d in decided {
        let result = match &d.exception {
            None => LineResult::Matched,
            Some((kind, _)) => kind.line_result().ok_or_else(|| {
                crate::storage::StorageError::corrupt(format!("a line cannot open a {kind} exception"))
            })?,
        };
        let decision = LineDecision { withdrawal_id: d.withdrawal, result, applied: None, evidence: &d.evidence };
        let line = store::decide_line_in(&mut writes, d.line, &decision);
        let exception_evidence = d.evidence.to_json();
        let opened = d.exception.as_ref().map(|(kind, detail)| {
            let day = d.line.event_at.0.date_naive().format("%Y-%m-%d").to_string();
            let exception = NewException {
                account_id: d.line.account_id,
                kind: *kind,
                // A corrected line (same key, other content) that still differs is a new finding.
                dedupe_key: format!("line:{kind}:{}:{}", d.line.line_key, d.line.content_digest),
                withdrawal_id: d.withdrawal.or(d.names),
                line_id: Some(d.line.id),
                report_date: Some(&day),
                transfer_id: Some(&d.line.transfer_id),
                detail,
                evidence: &exception_evidence,
            };
            store::open_exception_at_in(&mut writes, &d.line.provider, &exception)
        });
        handles.push((line, opened));
    }
    let mut tx = db.begin().await?;
    let ran = writes.run(&mut tx).await?;
    tx.commit().await?;
    for (d, (line, opened)) in decided.iter().zip(handles) {
        match (opened, &d.exception) {
            _ if !ran.applied(line) => {}
            (None, _) => counts.matched += 1,
            (Some(opened), Some((kind, detail))) if ran.applied(opened) => {
                tracing::warn!(kind = kind.as_str(), line = d.line.line_no, detail, "settlement exception opened");
                counts.exceptions_opened += 1;
            }
            (Some(_), _) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{AccountId, Destination};

    fn withdrawal(status: WithdrawalStatus) -> Withdrawal {
        let usd = Currency::parse("USD").unwrap();
        Withdrawal {
            id: WithdrawalId::new(),
            account_id: AccountId(uuid::Uuid::now_v7()),
            status,
            amount: Amount::new("40.00".parse().unwrap(), usd).unwrap(),
            destination: Destination::parse("bank_account", "12345678", "021000021").unwrap(),
            reference: None,
            failure_code: None,
            version: 2,
            idempotency_key: "k".into(),
            correlation_id: "c".into(),
            created_at: Utc::now(),
            updated_at: Utc::now(),
            sandbox: false,
        }
    }

    fn line(w: &Withdrawal, amount: &str, status: TransferStatus) -> Verdict {
        let t = Transfer {
            id: "tr_1".into(),
            reference: Some(w.id.to_string()),
            amount: amount.parse().unwrap(),
            currency: "USD".into(),
            status,
            failure_code: None,
            return_code: None,
            created_at: None,
            updated_at: None,
        };
        Verdict::of_transfer(w, &t)
    }

    #[test]
    fn every_line_against_every_state_has_one_outcome() {
        use ExceptionKind as K;
        use TransferStatus as T;
        use WithdrawalStatus as S;
        let cases = [
            (S::Completed, T::Paid, Some(Plan::Matched)),
            (S::Processing, T::Paid, Some(Plan::Confirm(Apply::Complete))),
            (S::RequiresReview, T::Paid, Some(Plan::Confirm(Apply::Complete))),
            (S::Failed, T::Paid, None),
            (S::Pending, T::Paid, None),
            (S::Failed, T::Failed, Some(Plan::Matched)),
            (S::Processing, T::Failed, Some(Plan::Confirm(Apply::Fail))),
            (S::RequiresReview, T::Failed, Some(Plan::Confirm(Apply::Fail))),
            (S::Completed, T::Failed, None),
            (S::Completed, T::Returned, Some(Plan::Confirm(Apply::CreditReturn))),
        ];
        for (held, status, wanted) in cases {
            let w = withdrawal(held);
            let got = plan(Some(&w), &line(&w, "40.00", status));
            match wanted {
                Some(plan) => assert_eq!(got, plan, "{held} / {status:?}"),
                None => assert!(matches!(got, Plan::Exception(K::StatusMismatch, _)), "{held} / {status:?}: {got:?}"),
            }
        }
        for held in [S::Processing, S::RequiresReview, S::Failed, S::Pending] {
            let w = withdrawal(held);
            assert!(matches!(plan(Some(&w), &line(&w, "40.00", T::Returned)), Plan::Exception(K::Returned, _)));
        }
        let w = withdrawal(S::Processing);
        let off = plan(Some(&w), &line(&w, "40.01", T::Paid));
        assert!(matches!(&off, Plan::Exception(K::AmountMismatch, why) if why.contains("amount")), "{off:?}");
        assert!(matches!(plan(None, &line(&w, "40.00", T::Paid)), Plan::Exception(K::UnknownTransfer, _)));
    }

    #[test]
    fn a_withdrawal_is_the_report_providers_only_when_its_latest_attempt_went_there() {
        assert_eq!(owned_by("bolt", Some("bolt")), Owner::Here);
        assert_eq!(owned_by("bolt", Some("acme")), Owner::Elsewhere("acme"));
        assert_eq!(owned_by("default", Some("default")), Owner::Here, "the one-provider case");
        assert_eq!(owned_by("bolt", None), Owner::Here, "never attempted: judged on the line as ever");
    }

    #[test]
    fn only_the_providers_matching_record_confirms_a_safe_outcome() {
        let w = withdrawal(WithdrawalStatus::Completed);
        let returned = line(&w, "40.00", TransferStatus::Returned);
        let paid = line(&w, "40.00", TransferStatus::Paid);
        let failed = line(&w, "40.00", TransferStatus::Failed);
        assert!(Apply::CreditReturn.confirmed_by(&returned));
        assert!(!Apply::CreditReturn.confirmed_by(&paid), "a spurious return is not credited");
        assert!(Apply::Complete.confirmed_by(&paid) && Apply::Complete.confirmed_by(&returned));
        assert!(!Apply::Complete.confirmed_by(&failed) && !Apply::Complete.confirmed_by(&Verdict::NoTransfer));
        assert!(
            Apply::Fail.confirmed_by(&failed)
                && !Apply::Fail.confirmed_by(&Verdict::Pending(Transfer {
                    id: "t".into(),
                    reference: None,
                    amount: 1.into(),
                    currency: "USD".into(),
                    status: TransferStatus::Pending,
                    failure_code: None,
                    return_code: None,
                    created_at: None,
                    updated_at: None,
                }))
        );
        assert_eq!(Apply::CreditReturn.unconfirmed(&paid).0, ExceptionKind::Returned);
        assert_eq!(Apply::Complete.unconfirmed(&failed).0, ExceptionKind::StatusMismatch);
    }
}
