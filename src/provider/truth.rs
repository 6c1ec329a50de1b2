//! The provider's record against ours (SPEC §4 "mismatch", §7, §8.1): every transfer the provider
//! shows is checked against the withdrawal before anything is decided from it, and a lookup's
//! answer becomes one [`Verdict`] that reconciliation and operator decisions both act on.
//!
//! Pure: no I/O. Whether an attempt may still be in flight (so that "no transfer" is not yet
//! definitive) is the caller's knowledge, passed in.

use serde::Serialize;

use super::{LookupOutcome, Transfer, TransferStatus};
use crate::domain::{BothRecords, Evidence, EvidenceSource, OurRecord, TransferRecord, VerdictKind, Withdrawal};

/// Which fields of the provider's transfer differ from the withdrawal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    /// `amount`, `currency`, `reference`, in that order.
    pub fields: Vec<&'static str>,
}

impl Mismatch {
    /// The error code operators see: `amount_mismatch`, `currency_mismatch`, … or
    /// `provider_mismatch` when several differ.
    pub fn code(&self) -> String {
        match self.fields.as_slice() {
            [one] => format!("{one}_mismatch"),
            _ => "provider_mismatch".to_owned(),
        }
    }
}

/// Checks one transfer against the withdrawal it claims to pay: amount (by value), currency and
/// reference (the withdrawal id, which is also the operation key).
pub fn check(withdrawal: &Withdrawal, transfer: &Transfer) -> Result<(), Mismatch> {
    let mut fields = Vec::new();
    if transfer.amount != withdrawal.amount.value() {
        fields.push("amount");
    }
    if transfer.currency != withdrawal.amount.currency().code() {
        fields.push("currency");
    }
    if transfer.reference.as_deref() != Some(withdrawal.id.to_string().as_str()) {
        fields.push("reference");
    }
    if fields.is_empty() {
        Ok(())
    } else {
        Err(Mismatch { fields })
    }
}

/// Both records side by side, as stored in the evidence of a mismatch.
pub fn both_records(withdrawal: &Withdrawal, transfer: &Transfer) -> BothRecords {
    BothRecords {
        ours: OurRecord {
            withdrawal_id: withdrawal.id,
            amount: withdrawal.amount.value(),
            currency: withdrawal.amount.currency().code().to_owned(),
            reference: withdrawal.id.to_string(),
        },
        provider: transfer.record(),
    }
}

impl Transfer {
    /// The transfer as evidence keeps it.
    pub fn record(&self) -> TransferRecord {
        TransferRecord {
            id: self.id.clone(),
            reference: self.reference.clone(),
            amount: self.amount,
            currency: self.currency.clone(),
            status: self.status,
            failure_code: self.failure_code.clone(),
            return_code: self.return_code.clone(),
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

/// What the provider's record says about a withdrawal, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Definitively no transfer under the key (and no attempt that could still create one).
    NoTransfer,
    /// No transfer yet, but an attempt may still reach the provider: not definitive.
    InFlight,
    Pending(Transfer),
    Paid(Transfer),
    /// Paid, then returned by the bank: the payout happened.
    Returned(Transfer),
    Failed(Transfer),
    /// The provider's transfer does not match the withdrawal: nothing may be decided from it.
    Mismatch(Transfer, Mismatch),
    /// The provider could not answer (or the breaker is open): never decide blind.
    Unavailable(String),
}

impl Verdict {
    /// The verdict on a lookup by the operation key. `in_flight` says whether an attempt of ours
    /// may still reach the provider (so an empty answer is not yet final).
    pub fn of_lookup(withdrawal: &Withdrawal, answer: &LookupOutcome, in_flight: bool) -> Verdict {
        match answer {
            LookupOutcome::NotFound if in_flight => Verdict::InFlight,
            LookupOutcome::NotFound => Verdict::NoTransfer,
            LookupOutcome::Unavailable(e) => Verdict::Unavailable(format!("{}: {}", e.code, e.message)),
            LookupOutcome::Found(transfers) => {
                // One transfer per key is the contract; if several come back, each must match and
                // any that may pay wins over a failed one (never release money on a partial view).
                let mut best: Option<Verdict> = None;
                for t in transfers {
                    let v = Verdict::of_transfer(withdrawal, t);
                    if matches!(v, Verdict::Mismatch(..)) {
                        return v;
                    }
                    if best.as_ref().is_none_or(|b| v.rank() > b.rank()) {
                        best = Some(v);
                    }
                }
                best.unwrap_or(Verdict::NoTransfer)
            }
        }
    }

    /// The verdict on one transfer the provider showed (a create answer, a get).
    pub fn of_transfer(withdrawal: &Withdrawal, transfer: &Transfer) -> Verdict {
        if let Err(mismatch) = check(withdrawal, transfer) {
            return Verdict::Mismatch(transfer.clone(), mismatch);
        }
        let t = transfer.clone();
        match transfer.status {
            TransferStatus::Pending => Verdict::Pending(t),
            TransferStatus::Paid => Verdict::Paid(t),
            TransferStatus::Returned => Verdict::Returned(t),
            TransferStatus::Failed => Verdict::Failed(t),
        }
    }

    /// Among several transfers: paid beats pending beats failed. Every verdict is named, so a new
    /// one must be ranked where it is added.
    fn rank(&self) -> u8 {
        match self {
            Verdict::Paid(_) | Verdict::Returned(_) => 3,
            Verdict::Pending(_) => 2,
            Verdict::Failed(_) => 1,
            Verdict::NoTransfer | Verdict::InFlight | Verdict::Mismatch(..) | Verdict::Unavailable(_) => 0,
        }
    }

    /// May money have moved (or still move) under this verdict? Only "no transfer" and "failed"
    /// prove it did not; everything else keeps the hold.
    pub fn may_pay(&self) -> bool {
        !matches!(self, Verdict::NoTransfer | Verdict::Failed(_))
    }

    pub fn transfer(&self) -> Option<&Transfer> {
        match self {
            Verdict::Pending(t) | Verdict::Paid(t) | Verdict::Returned(t) | Verdict::Failed(t) => Some(t),
            Verdict::Mismatch(t, _) => Some(t),
            Verdict::NoTransfer | Verdict::InFlight | Verdict::Unavailable(_) => None,
        }
    }

    /// The verdict's name, as evidence and reports store it.
    pub fn kind(&self) -> VerdictKind {
        match self {
            Verdict::NoTransfer => VerdictKind::NoTransfer,
            Verdict::InFlight => VerdictKind::InFlight,
            Verdict::Pending(_) => VerdictKind::Pending,
            Verdict::Paid(_) => VerdictKind::Paid,
            Verdict::Returned(_) => VerdictKind::Returned,
            Verdict::Failed(_) => VerdictKind::Failed,
            Verdict::Mismatch(..) => VerdictKind::Mismatch,
            Verdict::Unavailable(_) => VerdictKind::Unavailable,
        }
    }

    /// The evidence a decision taken on this verdict rests on: what the provider said to a
    /// lookup by the operation key, when.
    pub fn evidence(&self, withdrawal: &Withdrawal, asked_at: chrono::DateTime<chrono::Utc>) -> Evidence {
        self.evidence_from(EvidenceSource::ProviderLookup, withdrawal, asked_at)
    }

    /// [`evidence`](Self::evidence) of an answer from `source`.
    pub fn evidence_from(
        &self,
        source: EvidenceSource,
        withdrawal: &Withdrawal,
        asked_at: chrono::DateTime<chrono::Utc>,
    ) -> Evidence {
        let mut e = Evidence::of(source, self.kind(), asked_at);
        match self {
            Verdict::Mismatch(t, m) => {
                e.mismatch = Some(m.fields.iter().map(|f| (*f).to_owned()).collect());
                e.records = Some(both_records(withdrawal, t));
            }
            Verdict::Unavailable(why) => e.detail = Some(why.clone()),
            Verdict::NoTransfer | Verdict::InFlight => {}
            Verdict::Pending(t) | Verdict::Paid(t) | Verdict::Returned(t) | Verdict::Failed(t) => {
                e.transfer = Some(t.record())
            }
        }
        e
    }
}

/// What a provider event (SPEC §15) comes to. The event is a trigger, never proof: `claim` is the
/// status it announces, `verdict` the provider's current record under the withdrawal's key, and
/// only what the record confirms is acted on, through the guarded transitions reconciliation
/// uses. A late event (its `paid` after the record's `returned`) is a no-op; a record that
/// contradicts the event moves nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventAction {
    /// The record confirms `paid`: complete the withdrawal (open: processing or in review).
    Complete,
    /// The record confirms `failed`: fail the open withdrawal, releasing its hold.
    Fail,
    /// The record confirms `returned`: re-credit it once through the returns path (SPEC §14.3),
    /// completing it first when it is still open (a returned transfer was paid).
    Return { complete_first: bool },
    /// The record agrees and nothing is left to change.
    NoOp(&'static str),
    /// The record contradicts the event: nothing moves.
    Mismatch(String),
    /// The record confirms the event, but contradicts what we decided (the provider reports paid
    /// or returned a withdrawal we failed, or failed one we completed): nothing moves; operators
    /// get an exception.
    Contradiction(&'static str),
    /// The provider could not answer: ask again later.
    Ask,
}

/// The one decision table for provider events (tested exhaustively below). `claim` is the status
/// the event's type announces and `claimed` the transfer its body describes: an event whose
/// transfer is not the record's — another id, reference, amount or currency, or a status its own
/// type does not announce — moves nothing, whatever the record says.
pub fn on_event(
    claim: TransferStatus,
    claimed: &Transfer,
    verdict: &Verdict,
    ours: crate::domain::WithdrawalStatus,
) -> EventAction {
    use crate::domain::WithdrawalStatus as W;
    use TransferStatus as T;
    let record = match verdict {
        Verdict::Unavailable(_) => return EventAction::Ask,
        Verdict::Mismatch(_, m) => {
            return EventAction::Mismatch(format!("the provider's record differs in {}", m.fields.join(", ")))
        }
        Verdict::NoTransfer | Verdict::InFlight => {
            return EventAction::Mismatch("the provider has no transfer under the operation key".into())
        }
        Verdict::Pending(t) | Verdict::Paid(t) | Verdict::Returned(t) | Verdict::Failed(t) => t,
    };
    if claimed.status != claim {
        return EventAction::Mismatch(format!("the event's type says {claim}; its transfer says {}", claimed.status));
    }
    let differs: Vec<&str> = [
        ("id", claimed.id != record.id),
        ("reference", claimed.reference != record.reference),
        ("amount", claimed.amount != record.amount),
        ("currency", claimed.currency != record.currency),
    ]
    .into_iter()
    .filter_map(|(field, differs)| differs.then_some(field))
    .collect();
    if !differs.is_empty() {
        return EventAction::Mismatch(format!(
            "the event's transfer differs from the provider's record in {}",
            differs.join(", ")
        ));
    }
    let record = record.status;
    if record != claim {
        return match (claim, record) {
            (T::Paid, T::Returned) => EventAction::NoOp("late: the provider's record has moved on to returned"),
            _ => EventAction::Mismatch(format!("the event says {claim}; the provider's record says {record}")),
        };
    }
    let open = matches!(ours, W::Processing | W::RequiresReview);
    match (record, ours) {
        (_, W::Pending) => EventAction::Mismatch("the withdrawal was never sent to the provider".into()),
        (T::Pending, _) => EventAction::NoOp("a pending transfer: nothing to decide"),
        (T::Paid, _) if open => EventAction::Complete,
        (T::Paid, W::Completed) => EventAction::NoOp("already completed"),
        (T::Paid, _) => EventAction::Contradiction("the provider reports paid a withdrawal we failed"),
        (T::Failed, _) if open => EventAction::Fail,
        (T::Failed, W::Failed) => EventAction::NoOp("already failed"),
        (T::Failed, _) => EventAction::Contradiction("the provider reports failed a withdrawal we completed"),
        (T::Returned, _) if open => EventAction::Return { complete_first: true },
        (T::Returned, W::Completed) => EventAction::Return { complete_first: false },
        (T::Returned, _) => EventAction::Contradiction("the provider reports returned a withdrawal we failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{AccountId, Amount, Currency, Destination, WithdrawalId, WithdrawalStatus};
    use rust_decimal::Decimal;
    use serde_json::json;

    #[test]
    fn transfer_statuses_read_and_write_their_wire_names() {
        crate::assert_text_enum_round_trips!(TransferStatus);
    }

    fn withdrawal(amount: &str) -> Withdrawal {
        let usd = Currency::parse("USD").unwrap();
        Withdrawal {
            id: WithdrawalId::new(),
            account_id: AccountId(uuid::Uuid::now_v7()),
            status: WithdrawalStatus::RequiresReview,
            amount: Amount::new(amount.parse().unwrap(), usd).unwrap(),
            destination: Destination::parse("bank_account", "12345678", "021000021").unwrap(),
            reference: None,
            failure_code: None,
            version: 3,
            idempotency_key: "k".into(),
            correlation_id: "c".into(),
            created_at: chrono::Utc::now(),
            updated_at: chrono::Utc::now(),
            sandbox: false,
        }
    }

    fn transfer(w: &Withdrawal, amount: &str, currency: &str, status: TransferStatus) -> Transfer {
        Transfer {
            id: format!("tr_{}", uuid::Uuid::new_v4()),
            reference: Some(w.id.to_string()),
            amount: amount.parse::<Decimal>().unwrap(),
            currency: currency.into(),
            status,
            failure_code: None,
            return_code: None,
            created_at: None,
            updated_at: None,
        }
    }

    #[test]
    fn amounts_are_compared_by_value_and_every_differing_field_is_named() {
        let w = withdrawal("40.00");
        assert_eq!(check(&w, &transfer(&w, "40", "USD", TransferStatus::Paid)), Ok(()));
        assert_eq!(check(&w, &transfer(&w, "40.0", "USD", TransferStatus::Paid)), Ok(()));
        let off = check(&w, &transfer(&w, "40.01", "USD", TransferStatus::Paid)).unwrap_err();
        assert_eq!((off.fields.clone(), off.code()), (vec!["amount"], "amount_mismatch".to_owned()));
        let mut other = transfer(&w, "40.00", "EUR", TransferStatus::Paid);
        other.reference = Some("someone-else".into());
        let both = check(&w, &other).unwrap_err();
        assert_eq!((both.fields.clone(), both.code()), (vec!["currency", "reference"], "provider_mismatch".to_owned()));
        let mut missing = transfer(&w, "40.00", "USD", TransferStatus::Paid);
        missing.reference = None;
        assert_eq!(check(&w, &missing).unwrap_err().fields, vec!["reference"]);
    }

    #[test]
    fn a_mismatch_wins_over_any_status_and_only_no_transfer_or_failed_rule_out_a_payment() {
        let w = withdrawal("40.00");
        let wrong = transfer(&w, "41.00", "USD", TransferStatus::Failed);
        assert!(matches!(Verdict::of_transfer(&w, &wrong), Verdict::Mismatch(..)), "a failed mismatch is a mismatch");
        let found = |ts: Vec<Transfer>| Verdict::of_lookup(&w, &LookupOutcome::Found(ts), false);
        // Several transfers under one key (never by contract): one that may pay wins.
        let failed = transfer(&w, "40.00", "USD", TransferStatus::Failed);
        let pending = transfer(&w, "40.00", "USD", TransferStatus::Pending);
        assert_eq!(found(vec![failed.clone(), pending.clone()]).kind(), VerdictKind::Pending);
        assert_eq!(found(vec![failed.clone()]).kind(), VerdictKind::Failed);
        assert_eq!(found(vec![pending, wrong]).kind(), VerdictKind::Mismatch);
        assert_eq!(Verdict::of_lookup(&w, &LookupOutcome::NotFound, true), Verdict::InFlight);
        assert_eq!(Verdict::of_lookup(&w, &LookupOutcome::NotFound, false), Verdict::NoTransfer);
        let may_pay: Vec<(&str, bool)> = [
            Verdict::NoTransfer,
            Verdict::InFlight,
            Verdict::Failed(failed.clone()),
            Verdict::Pending(failed.clone()),
            Verdict::Paid(failed.clone()),
            Verdict::Returned(failed.clone()),
            Verdict::Unavailable("x".into()),
        ]
        .iter()
        .map(|v| (v.kind().as_str(), v.may_pay()))
        .collect();
        assert_eq!(
            may_pay,
            [
                ("no_transfer", false),
                ("in_flight", true),
                ("failed", false),
                ("pending", true),
                ("paid", true),
                ("returned", true),
                ("unavailable", true)
            ]
        );
    }

    /// Every (event, record, our state) triple: only a record that confirms the event acts, a
    /// `paid` never revives a failed withdrawal, and a late `paid` after `returned` is a no-op.
    #[test]
    fn provider_events_act_only_on_what_the_record_confirms() {
        use crate::domain::WithdrawalStatus as W;
        use EventAction as A;
        use TransferStatus as T;
        let w = withdrawal("40.00");
        let base = transfer(&w, "40.00", "USD", T::Paid);
        let with_status = |status| Transfer { status, ..base.clone() };
        let of = |status| Verdict::of_transfer(&w, &with_status(status));
        // The event as the provider would send it: the record's transfer, in the claimed status.
        let on_event = |claim, verdict: &Verdict, ours| on_event(claim, &with_status(claim), verdict, ours);
        let wrong_amount = Verdict::of_transfer(&w, &transfer(&w, "40.01", "USD", T::Paid));
        let mismatch = |s: &str| A::Mismatch(s.to_owned());
        for claim in [T::Paid, T::Failed, T::Returned] {
            for ours in W::ALL {
                assert_eq!(on_event(claim, &Verdict::Unavailable("down".into()), ours), A::Ask);
                assert_eq!(on_event(claim, &wrong_amount, ours), mismatch("the provider's record differs in amount"));
                for none in [Verdict::NoTransfer, Verdict::InFlight] {
                    assert_eq!(
                        on_event(claim, &none, ours),
                        mismatch("the provider has no transfer under the operation key")
                    );
                }
                assert_eq!(
                    on_event(claim, &of(T::Pending), ours),
                    A::Mismatch(format!("the event says {claim}; the provider's record says pending"))
                );
            }
        }
        // An event whose own transfer is not the record's moves nothing, even when the record
        // would confirm its status.
        let paid = of(T::Paid);
        let event = |edit: &dyn Fn(&mut Transfer)| {
            let mut claimed = with_status(T::Paid);
            edit(&mut claimed);
            super::on_event(T::Paid, &claimed, &paid, W::Processing)
        };
        let differs =
            |fields: &str| mismatch(&format!("the event's transfer differs from the provider's record in {fields}"));
        assert_eq!(event(&|_| ()), A::Complete);
        assert_eq!(event(&|t| t.amount = "41.00".parse().unwrap()), differs("amount"));
        assert_eq!(event(&|t| t.currency = "EUR".into()), differs("currency"));
        assert_eq!(event(&|t| t.id = "tr_other".into()), differs("id"));
        assert_eq!(event(&|t| t.reference = None), differs("reference"));
        assert_eq!(
            event(&|t| t.status = T::Pending),
            mismatch("the event's type says paid; its transfer says pending")
        );
        let table: &[(T, T, W, A)] = &[
            (T::Paid, T::Paid, W::Pending, mismatch("the withdrawal was never sent to the provider")),
            (T::Paid, T::Paid, W::Processing, A::Complete),
            (T::Paid, T::Paid, W::RequiresReview, A::Complete),
            (T::Paid, T::Paid, W::Completed, A::NoOp("already completed")),
            (T::Paid, T::Paid, W::Failed, A::Contradiction("the provider reports paid a withdrawal we failed")),
            (T::Failed, T::Failed, W::Processing, A::Fail),
            (T::Failed, T::Failed, W::RequiresReview, A::Fail),
            (T::Failed, T::Failed, W::Failed, A::NoOp("already failed")),
            (
                T::Failed,
                T::Failed,
                W::Completed,
                A::Contradiction("the provider reports failed a withdrawal we completed"),
            ),
            (T::Returned, T::Returned, W::Processing, A::Return { complete_first: true }),
            (T::Returned, T::Returned, W::RequiresReview, A::Return { complete_first: true }),
            (T::Returned, T::Returned, W::Completed, A::Return { complete_first: false }),
            (
                T::Returned,
                T::Returned,
                W::Failed,
                A::Contradiction("the provider reports returned a withdrawal we failed"),
            ),
            // Out of order: a paid after the record's returned is late, not news.
            (T::Paid, T::Returned, W::Completed, A::NoOp("late: the provider's record has moved on to returned")),
            (T::Paid, T::Returned, W::Processing, A::NoOp("late: the provider's record has moved on to returned")),
            // A paid after failed never revives; a failed or returned the record does not show moves nothing.
            (T::Paid, T::Failed, W::Failed, mismatch("the event says paid; the provider's record says failed")),
            (T::Paid, T::Failed, W::Processing, mismatch("the event says paid; the provider's record says failed")),
            (T::Failed, T::Paid, W::Processing, mismatch("the event says failed; the provider's record says paid")),
            (
                T::Failed,
                T::Returned,
                W::Completed,
                mismatch("the event says failed; the provider's record says returned"),
            ),
            (T::Returned, T::Paid, W::Completed, mismatch("the event says returned; the provider's record says paid")),
            (T::Returned, T::Failed, W::Failed, mismatch("the event says returned; the provider's record says failed")),
        ];
        for (claim, record, ours, expected) in table {
            assert_eq!(&on_event(*claim, &of(*record), *ours), expected, "{claim} on {record}, ours {ours}");
        }
    }

    #[test]
    fn the_evidence_of_a_mismatch_holds_both_records() {
        let w = withdrawal("40.00");
        let t = transfer(&w, "39.99", "USD", TransferStatus::Paid);
        let e = Verdict::of_transfer(&w, &t).evidence(&w, chrono::Utc::now()).to_json();
        assert_eq!(e["verdict"], "mismatch");
        assert_eq!(e["mismatch"], json!(["amount"]));
        assert_eq!(e["records"]["ours"]["amount"], "40.00");
        assert_eq!(e["records"]["provider"]["amount"], "39.99");
        assert_eq!(e["records"]["provider"]["id"], t.id.as_str());
    }

    #[test]
    fn the_evidence_of_every_verdict_reads_back_as_it_was_written() {
        let w = withdrawal("40.00");
        let paid = transfer(&w, "40.00", "USD", TransferStatus::Paid);
        let verdicts = [
            Verdict::NoTransfer,
            Verdict::InFlight,
            Verdict::Pending(paid.clone()),
            Verdict::Paid(paid.clone()),
            Verdict::Returned(paid.clone()),
            Verdict::Failed(paid.clone()),
            Verdict::of_transfer(&w, &transfer(&w, "41.00", "EUR", TransferStatus::Paid)),
            Verdict::Unavailable("http_503: down".into()),
        ];
        for v in verdicts {
            let e = v.evidence(&w, chrono::Utc::now()).for_action(crate::domain::ReviewAction::Complete).naming("tr_1");
            let stored = e.to_json();
            assert_eq!(Evidence::read(&stored).as_ref(), Ok(&e), "{stored}");
            assert_eq!(stored["verdict"], v.kind().as_str());
            assert_eq!(e.transfer().map(|t| t.id.as_str()), v.transfer().map(|t| t.id.as_str()), "{stored}");
        }
        assert!(Evidence::read(&json!({"verdict": "paid"})).is_err(), "a shape without source and time is unreadable");
    }
}
