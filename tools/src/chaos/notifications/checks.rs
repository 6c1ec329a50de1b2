//! The notification checks of a chaos run, as pure functions over what was recorded (the outbox,
//! the notifications, the dead letters, the transition logs, the receiver's receipts):
//!
//! - [`coverage`]: every event of an account with an endpoint was delivered at least once (a 2xx
//!   the receiver recorded, by event id) or its notification is `undeliverable` with a
//!   `notification_undeliverable` dead letter; and nothing the service recorded as delivered went
//!   unacknowledged by the receiver.
//! - [`committed`]: every request the receiver got was signed with its endpoint's secret, names an
//!   event in the outbox of that endpoint's account, and says what that committed change left:
//!   the same type, withdrawal and version as the stored event, and at that version the status
//!   the withdrawal's transition log reached ([`statuses_by_version`]) — so nothing was announced
//!   for a change that did not commit.
//! - [`compare`]: the payout path of accounts whose endpoint is dead is not slower than that of
//!   the others.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;
use uuid::Uuid;

use super::super::receiver::Receipt;
use crate::store::notify::{StoredEvent, StoredNotification};
use withdrawals::domain::{EventId, EventType, NotificationStatus, WithdrawalStatus};

/// The most violations one check lists (the count is in the report either way).
const LISTED: usize = 50;

fn push(violations: &mut Vec<String>, what: String) {
    if violations.len() < LISTED {
        violations.push(what);
    }
}

pub(super) fn wire(event: Uuid) -> String {
    EventId(event).wire()
}

/// What [`coverage`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Coverage {
    /// Events of accounts with an endpoint.
    pub events: u64,
    pub delivered: u64,
    /// Not delivered, and `undeliverable` with its dead letter.
    pub dead_lettered: u64,
    /// Neither (each one is a violation).
    pub missing: u64,
    /// Recorded `delivered` by the service with no 2xx at the receiver (each one is a violation).
    pub delivered_unacknowledged: u64,
    /// Listed in the section's own `violations`.
    #[serde(skip)]
    pub violations: Vec<String>,
}

/// See the module doc. `delivered`: the event ids the receiver answered 2xx to (well signed);
/// `dead_letters`: the correlation ids (event ids) of `notification_undeliverable` dead letters.
pub fn coverage(
    events: &[StoredEvent],
    with_endpoint: &HashSet<Uuid>,
    notifications: &[StoredNotification],
    delivered: &HashSet<String>,
    dead_letters: &HashSet<String>,
) -> Coverage {
    let mut c = Coverage::default();
    let by_event: HashMap<Uuid, &StoredNotification> = notifications.iter().map(|n| (n.event_id, n)).collect();
    for e in events.iter().filter(|e| with_endpoint.contains(&e.account_id)) {
        c.events += 1;
        let id = wire(e.id);
        let notification = by_event.get(&e.id);
        if delivered.contains(&id) {
            c.delivered += 1;
            continue;
        }
        let undeliverable = notification.is_some_and(|n| n.status == NotificationStatus::Undeliverable);
        if undeliverable && dead_letters.contains(&id) {
            c.dead_lettered += 1;
            continue;
        }
        c.missing += 1;
        let state = match notification {
            None if !e.fanned_out => "never fanned out".to_owned(),
            None => "fanned out with no notification".to_owned(),
            Some(n) if undeliverable => format!("undeliverable after {} attempts but no dead letter", n.attempts),
            Some(n) => format!("notification {} after {} attempts", n.status, n.attempts),
        };
        push(
            &mut c.violations,
            format!(
                "event {id} ({}, withdrawal {}) was neither delivered nor dead-lettered: {state}",
                e.event_type, e.withdrawal_id
            ),
        );
    }
    for n in notifications.iter().filter(|n| n.status == NotificationStatus::Delivered) {
        if !delivered.contains(&wire(n.event_id)) {
            c.delivered_unacknowledged += 1;
            push(
                &mut c.violations,
                format!(
                    "notification of event {} is recorded delivered but the receiver never answered it 2xx",
                    wire(n.event_id)
                ),
            );
        }
    }
    c
}

/// A withdrawal's status at each version (index `v - 1`), from its transition log (`from`, `to`)
/// oldest first: the creation, then at each step the earliest remaining move from the status
/// reached (a move leaves a status only after it was reached, so the chain, not the clock, has
/// the last word when two moves share a timestamp). A move that fits nowhere ends the chain.
pub fn statuses_by_version(moves: &[(Option<WithdrawalStatus>, WithdrawalStatus)]) -> Vec<WithdrawalStatus> {
    // A move that stays in its state (a provider failover's log row, SPEC §16) changes no
    // version: it is no step of the chain.
    let mut left: Vec<&(Option<WithdrawalStatus>, WithdrawalStatus)> =
        moves.iter().filter(|(from, to)| *from != Some(*to)).collect();
    let Some(first) = left.iter().position(|(from, _)| from.is_none()) else { return Vec::new() };
    let mut chain = vec![left.remove(first).1];
    while let Some(next) = left.iter().position(|(from, _)| *from == chain.last().copied()) {
        chain.push(left.remove(next).1);
    }
    chain
}

/// The status an event of type `kind` shows its withdrawal in.
fn announced(kind: EventType) -> WithdrawalStatus {
    match kind {
        EventType::Created => WithdrawalStatus::Pending,
        EventType::Completed | EventType::Returned => WithdrawalStatus::Completed,
        EventType::Failed => WithdrawalStatus::Failed,
        EventType::RequiresReview => WithdrawalStatus::RequiresReview,
    }
}

/// What [`committed`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Committed {
    /// Well-signed requests, checked against the outbox and the transition log.
    pub checked: u64,
    /// Requests whose signature did not verify under their endpoint's secret.
    pub refused_signatures: u64,
    /// Requests for an event the outbox does not have, or that says something else than the
    /// committed change (type, withdrawal, version, status, account).
    pub not_committed: u64,
    /// Listed in the section's own `violations`.
    #[serde(skip)]
    pub violations: Vec<String>,
}

/// See the module doc. `slot_accounts[slot]`: the account whose endpoint is slot `slot`;
/// `logs`: each withdrawal's status by version; `returned`: the withdrawals the bank returned.
pub fn committed(
    receipts: &[Receipt],
    events: &HashMap<String, &StoredEvent>,
    slot_accounts: &[Uuid],
    logs: &HashMap<Uuid, Vec<WithdrawalStatus>>,
    returned: &HashSet<Uuid>,
) -> Committed {
    let mut c = Committed::default();
    for r in receipts {
        if !r.signature_valid {
            c.refused_signatures += 1;
            push(
                &mut c.violations,
                format!("slot {} got event {:?} with a signature that does not verify", r.slot, r.event_id),
            );
            continue;
        }
        c.checked += 1;
        if let Some(why) = disagreement(r, events, slot_accounts, logs, returned) {
            c.not_committed += 1;
            push(
                &mut c.violations,
                format!("event {:?} ({}) delivered to slot {}: {why}", r.event_id, r.event_type, r.slot),
            );
        }
    }
    c
}

/// Why a well-signed receipt does not announce a committed change, if it does not.
fn disagreement(
    r: &Receipt,
    events: &HashMap<String, &StoredEvent>,
    slot_accounts: &[Uuid],
    logs: &HashMap<Uuid, Vec<WithdrawalStatus>>,
    returned: &HashSet<Uuid>,
) -> Option<String> {
    let Some(e) = events.get(&r.event_id) else {
        return Some("no such event in the outbox: no committed change wrote it".to_owned());
    };
    if slot_accounts.get(r.slot) != Some(&e.account_id) {
        return Some(format!("the event is account {}'s, not this endpoint's", e.account_id));
    }
    if r.event_type != e.event_type
        || r.withdrawal_id != e.withdrawal_id.to_string()
        || r.version != e.withdrawal_version
    {
        return Some(format!(
            "it says {} of withdrawal {} at version {}, the outbox {} of {} at version {}",
            r.event_type, r.withdrawal_id, r.version, e.event_type, e.withdrawal_id, e.withdrawal_version
        ));
    }
    let Ok(kind) = e.event_type.parse::<EventType>() else {
        return Some(format!("unknown event type {}", e.event_type));
    };
    let Ok(status) = r.status.parse::<WithdrawalStatus>() else {
        return Some(format!("data.status {:?} is no withdrawal status", r.status));
    };
    if status != announced(kind) {
        return Some(format!("a {kind} event shows the withdrawal {status}"));
    }
    // A bank return writes no transition but moves the version on past the last one (the
    // withdrawal stays completed): its event is one version after the log's end.
    let at = match kind {
        EventType::Returned => r.version - 2,
        _ => r.version - 1,
    };
    let logged = usize::try_from(at).ok().and_then(|i| logs.get(&e.withdrawal_id)?.get(i).copied());
    let log_len = logs.get(&e.withdrawal_id).map_or(0, Vec::len) as i64;
    if kind == EventType::Returned && r.version != log_len + 1 {
        return Some(format!("a return at version {}, the transition log's last is {log_len}", r.version));
    }
    if logged != Some(status) {
        let logged = logged.map_or_else(|| "no such version".to_owned(), |s| s.to_string());
        return Some(format!("at version {} the transition log has {logged}, the event {status}", r.version));
    }
    match kind {
        EventType::Created if r.version != 1 => Some(format!("a creation at version {}", r.version)),
        EventType::Returned if !returned.contains(&e.withdrawal_id) => Some("no return is recorded".to_owned()),
        _ => None,
    }
}

/// Deliveries by event id: how many distinct events got a 2xx, and how many got more than one.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Redelivery {
    pub delivered_events: u64,
    /// Events answered 2xx more than once (at-least-once delivery at work).
    pub redelivered_events: u64,
    /// 2xx answers beyond the first of each event.
    pub duplicate_deliveries: u64,
}

pub fn redelivery(receipts: &[Receipt]) -> Redelivery {
    let mut per_event: BTreeMap<&str, u64> = BTreeMap::new();
    for r in receipts.iter().filter(|r| r.signature_valid && r.answer.delivered()) {
        *per_event.entry(r.event_id.as_str()).or_default() += 1;
    }
    Redelivery {
        delivered_events: per_event.len() as u64,
        redelivered_events: per_event.values().filter(|n| **n > 1).count() as u64,
        duplicate_deliveries: per_event.values().map(|n| n - 1).sum(),
    }
}

/// Accept → `completed` latencies of the accounts with a dead endpoint against the others'.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub dead_endpoint_withdrawals: u64,
    pub dead_endpoint_median_ms: f64,
    pub live_endpoint_withdrawals: u64,
    pub live_endpoint_median_ms: f64,
    /// Dead over live medians.
    pub ratio: f64,
    /// The most the dead half's median may be: `factor × live + floor`.
    pub allowed_ms: f64,
    /// None: too few completions on one side to say.
    pub within: Option<bool>,
}

pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    crate::bench::load::percentile(&sorted, 0.5)
}

/// See [`Comparison`]: judged only with at least `min_samples` on each side.
pub fn compare(dead_ms: &[f64], live_ms: &[f64], factor: f64, floor_ms: f64, min_samples: usize) -> Comparison {
    let (dead, live) = (median(dead_ms), median(live_ms));
    let allowed_ms = factor * live + floor_ms;
    let enough = dead_ms.len() >= min_samples && live_ms.len() >= min_samples;
    Comparison {
        dead_endpoint_withdrawals: dead_ms.len() as u64,
        dead_endpoint_median_ms: dead,
        live_endpoint_withdrawals: live_ms.len() as u64,
        live_endpoint_median_ms: live,
        ratio: if live > 0.0 { dead / live } else { 0.0 },
        allowed_ms,
        within: enough.then_some(dead <= allowed_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::receiver::Answer;
    use super::*;
    use WithdrawalStatus::*;

    fn event(account: Uuid, withdrawal: Uuid, kind: &str, version: i64) -> StoredEvent {
        StoredEvent {
            id: Uuid::now_v7(),
            account_id: account,
            withdrawal_id: withdrawal,
            event_type: kind.to_owned(),
            withdrawal_version: version,
            fanned_out: true,
        }
    }

    fn notification(e: &StoredEvent, status: NotificationStatus) -> StoredNotification {
        StoredNotification { event_id: e.id, endpoint_id: Uuid::now_v7(), status, attempts: 3 }
    }

    fn receipt(slot: usize, e: &StoredEvent, status: &str) -> Receipt {
        Receipt {
            slot,
            event_id: wire(e.id),
            event_type: e.event_type.clone(),
            withdrawal_id: e.withdrawal_id.to_string(),
            status: status.to_owned(),
            version: e.withdrawal_version,
            signature_valid: true,
            answer: Answer::Ok,
            body: None,
        }
    }

    #[test]
    fn an_event_is_covered_when_delivered_or_undeliverable_with_its_dead_letter_and_not_otherwise() {
        let (account, other, w) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let delivered = event(account, w, "withdrawal.created", 1);
        let dead = event(account, w, "withdrawal.completed", 3);
        let no_letter = event(account, w, "withdrawal.returned", 3);
        let pending = event(account, w, "withdrawal.failed", 3);
        let mut unfanned = event(account, w, "withdrawal.requires_review", 3);
        unfanned.fanned_out = false;
        let elsewhere = event(other, w, "withdrawal.created", 1);
        let events = [&delivered, &dead, &no_letter, &pending, &unfanned, &elsewhere].map(Clone::clone);
        let notifications = [
            notification(&delivered, NotificationStatus::Delivered),
            notification(&dead, NotificationStatus::Undeliverable),
            notification(&no_letter, NotificationStatus::Undeliverable),
            notification(&pending, NotificationStatus::Pending),
        ];
        let acknowledged = HashSet::from([wire(delivered.id)]);
        let letters = HashSet::from([wire(dead.id)]);
        let c = coverage(&events, &HashSet::from([account]), &notifications, &acknowledged, &letters);
        assert_eq!((c.events, c.delivered, c.dead_lettered, c.missing), (5, 1, 1, 3), "{:?}", c.violations);
        assert!(c.violations[0].contains("but no dead letter"), "{}", c.violations[0]);
        assert!(c.violations[1].contains("notification pending"), "{}", c.violations[1]);
        assert!(c.violations[2].contains("never fanned out"), "{}", c.violations[2]);
    }

    #[test]
    fn a_delivery_the_receiver_never_acknowledged_is_a_violation() {
        let account = Uuid::now_v7();
        let e = event(account, Uuid::now_v7(), "withdrawal.created", 1);
        let n = [notification(&e, NotificationStatus::Delivered)];
        let c = coverage(&[e], &HashSet::from([account]), &n, &HashSet::new(), &HashSet::new());
        assert_eq!((c.missing, c.delivered_unacknowledged), (1, 1));
    }

    #[test]
    fn the_chain_orders_moves_by_status_not_only_by_clock() {
        let moves = [
            (None, Pending),
            (Some(RequiresReview), Completed), // same timestamp as the move into review, listed first
            (Some(Processing), RequiresReview),
            (Some(Pending), Processing),
            (Some(Processing), Processing), // a failover
        ];
        let chain = statuses_by_version(&moves);
        assert_eq!(chain, [Pending, Processing, RequiresReview, Completed]);
        let failover = [
            (None, Pending),
            (Some(Pending), Processing),
            (Some(Processing), Processing),
            (Some(Processing), Completed),
        ];
        // The failover's log row bumps no version (`failover_in` changes no state): completed is v3.
        assert_eq!(statuses_by_version(&failover), [Pending, Processing, Completed]);
        assert_eq!(statuses_by_version(&[(Some(Pending), Processing)]), Vec::<WithdrawalStatus>::new());
    }

    #[test]
    fn a_receipt_must_say_what_the_committed_change_left() {
        let (account, w) = (Uuid::now_v7(), Uuid::now_v7());
        let created = event(account, w, "withdrawal.created", 1);
        let completed = event(account, w, "withdrawal.completed", 3);
        // A return bumps the version past the log's last transition (it writes none).
        let returned = event(account, w, "withdrawal.returned", 4);
        let review = event(account, w, "withdrawal.requires_review", 3);
        let stored: Vec<&StoredEvent> = vec![&created, &completed, &returned, &review];
        let events: HashMap<String, &StoredEvent> = stored.iter().map(|e| (wire(e.id), *e)).collect();
        let logs = HashMap::from([(w, vec![Pending, Processing, Completed])]);
        let slots = [account, Uuid::now_v7()];
        let good =
            [receipt(0, &created, "pending"), receipt(0, &completed, "completed"), receipt(0, &returned, "completed")];
        let all_returned = HashSet::from([w]);
        let c = committed(&good, &events, &slots, &logs, &all_returned);
        assert_eq!((c.checked, c.not_committed, c.refused_signatures), (3, 0, 0), "{:?}", c.violations);

        let mut forged = receipt(0, &created, "pending");
        forged.signature_valid = false;
        let mut unknown = receipt(0, &created, "pending");
        unknown.event_id = wire(Uuid::now_v7());
        let bad = [
            forged,
            unknown,
            receipt(1, &created, "pending"),        // another account's endpoint
            receipt(0, &completed, "failed"),       // says another status than its type
            receipt(0, &review, "requires_review"), // the log never reached review at version 3
            receipt(0, &returned, "completed"),     // no return recorded (below)
        ];
        let returned_at_3 = event(account, w, "withdrawal.returned", 3);
        let c = committed(
            &[receipt(0, &returned_at_3, "completed")],
            &HashMap::from([(wire(returned_at_3.id), &returned_at_3)]),
            &slots,
            &logs,
            &all_returned,
        );
        assert_eq!(c.not_committed, 1, "a return at the completion's own version: {:?}", c.violations);
        assert!(c.violations[0].contains("a return at version 3"), "{}", c.violations[0]);
        let c = committed(&bad, &events, &slots, &logs, &HashSet::new());
        assert_eq!((c.checked, c.not_committed, c.refused_signatures), (5, 5, 1), "{:?}", c.violations);
        assert!(c.violations[1].contains("no such event"), "{}", c.violations[1]);
        assert!(c.violations[2].contains("not this endpoint's"), "{}", c.violations[2]);
        assert!(c.violations[4].contains("transition log has completed"), "{}", c.violations[4]);
        assert!(c.violations[5].contains("no return"), "{}", c.violations[5]);
    }

    #[test]
    fn redeliveries_are_counted_by_event_id_over_2xx_answers_only() {
        let e = event(Uuid::now_v7(), Uuid::now_v7(), "withdrawal.created", 1);
        let f = event(Uuid::now_v7(), Uuid::now_v7(), "withdrawal.created", 1);
        let mut failed = receipt(0, &f, "pending");
        failed.answer = Answer::Error;
        let mut slow = receipt(0, &e, "pending");
        slow.answer = Answer::Slow;
        let r = redelivery(&[
            receipt(0, &e, "pending"),
            slow,
            receipt(0, &e, "pending"),
            failed,
            receipt(0, &f, "pending"),
        ]);
        assert_eq!(r, Redelivery { delivered_events: 2, redelivered_events: 1, duplicate_deliveries: 2 });
    }

    #[test]
    fn the_dead_half_may_be_slower_only_within_the_tolerance_and_with_enough_samples() {
        let live: Vec<f64> = (0..40).map(|i| 1_000.0 + f64::from(i)).collect();
        let near: Vec<f64> = live.iter().map(|v| v * 1.4).collect();
        let far: Vec<f64> = live.iter().map(|v| v * 3.0).collect();
        assert_eq!(compare(&near, &live, 1.5, 500.0, 20).within, Some(true));
        let c = compare(&far, &live, 1.5, 500.0, 20);
        assert_eq!(c.within, Some(false));
        assert!((c.ratio - 3.0).abs() < 0.01 && c.allowed_ms > 2_000.0, "{c:?}");
        assert_eq!(compare(&far[..5], &live, 1.5, 500.0, 20).within, None, "too few to say");
        let fast: Vec<f64> = vec![10.0; 40];
        assert_eq!(compare(&[400.0; 40], &fast, 1.5, 500.0, 20).within, Some(true), "the floor absorbs noise");
    }
}
