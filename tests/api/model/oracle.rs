//! What an operator's decision must answer, as a pure function of what the provider shows
//! (SPEC §8.1's table): the reference the model checks every answer against.

use super::*;

/// A transfer as the provider shows it to a lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shown {
    Nothing,
    Pending,
    Paid,
    Failed,
}

/// Everything a resolve's answer depends on, read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct View {
    pub(super) status: WithdrawalStatus,
    pub(super) version: i64,
    pub(super) shown: Shown,
    pub(super) transfer_id: Option<String>,
    /// Lookups for it fail (the model's own fault rule).
    pub(super) outage: bool,
    /// The last attempt's outcome is unknown and it may still reach the provider.
    pub(super) in_flight: bool,
    /// A reconciliation job of it is scheduled or running.
    pub(super) reconciling: bool,
}

/// The answer (status, problem code) a resolve must get when the world looks like `v`.
pub(super) fn expected_answer(op: Op, v: &View) -> (u16, &'static str) {
    if v.status != WithdrawalStatus::RequiresReview {
        return (409, "not_in_review");
    }
    if op == Op::Reconcile {
        return (200, "");
    }
    if v.outage {
        return (503, "provider_unavailable");
    }
    let applies = if v.reconciling { (409, "reconciliation_in_progress") } else { (200, "") };
    match op {
        Op::CompleteWithProvidersId if v.shown == Shown::Paid => applies,
        Op::CompleteWithProvidersId | Op::CompleteWithWrongId => (422, "provider_reference_mismatch"),
        Op::Fail | Op::Retry => match v.shown {
            Shown::Nothing if v.in_flight => (409, "attempt_in_flight"),
            Shown::Nothing | Shown::Failed => applies,
            Shown::Pending => (409, "transfer_pending_at_provider"),
            Shown::Paid => (409, "transfer_paid_at_provider"),
        },
        Op::Reconcile => unreachable!("answered above"),
    }
}

/// The answers acceptable for a resolve sent between two reads of the world: the service reads
/// the provider, the in-flight evidence and the live jobs each once, somewhere in between, and
/// each of them changes at most once in that time (a transfer settles, an attempt's grace ends,
/// a reconciliation finishes), so any mix of before and after is possible — nothing else.
pub(super) fn acceptable_answers(op: Op, before: &View, after: &View) -> BTreeSet<(u16, &'static str)> {
    let mut answers = BTreeSet::new();
    for (shown, in_flight, reconciling) in [
        (before, before, before),
        (before, before, after),
        (before, after, before),
        (before, after, after),
        (after, before, before),
        (after, before, after),
        (after, after, before),
        (after, after, after),
    ] {
        let mixed = View {
            shown: shown.shown,
            transfer_id: shown.transfer_id.clone(),
            in_flight: in_flight.in_flight,
            reconciling: reconciling.reconciling,
            ..before.clone()
        };
        answers.insert(expected_answer(op, &mixed));
    }
    if after.version != before.version {
        // Moved by someone else meanwhile (a reconciliation): the version we sent is stale.
        answers.insert((409, "stale_version"));
    }
    answers
}
