//! After a two-provider chaos run (SPEC §16): the failover invariants, checked against both
//! mocks' record of what they executed, the attempts (each names its provider) and the moves the
//! transition log records (`processing` → `processing`, reason `failover from <a> to <b>: …`,
//! evidence `source: failover`).
//!
//! Violations:
//! - one operation key (the withdrawal id) executed at two providers — paid, or at risk of being
//!   paid, twice;
//! - a withdrawal moved away from a provider that had executed its transfer, or that executed
//!   it later with no attempt there since the move (a request in flight at the move) — the move
//!   the rule forbids, whether or not the next provider then paid; a withdrawal that moved back
//!   and was paid there on a later attempt is fine;
//! - a transfer executed at a provider where the withdrawal has no attempt recorded (the service
//!   would not know where to ask);
//! - attempts that change provider without the move recorded in the log, or a move whose evidence
//!   does not read as one.
//!
//! A key executed twice at one provider is already a violation of [`super::checks`]; it is
//! counted here per provider. The report also says how many withdrawals **moved**, how many
//! **waited** for the first provider (an attempt there may have moved money, and they ended there
//! without moving), and what each provider executed and paid. Pure over what it is given
//! ([`judge`]); [`check`] reads the database.
//!
//! Counted, not (yet) a violation: moves whose log entry comes before the entry of the state it
//! leaves ([`out_of_order`]; the service writes a move decided at the claim before the claim's
//! own `pending` → `processing` entry — a finding for the service, see the README).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use provider_mocks::TransferRecord;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::checks::{paid, status_name};
use super::providers::{OutageReport, FIRST};
use crate::store::chaos::{
    failover_entries, logs_of_moved, provider_attempts, FailoverEntry, LogEntry, ProviderAttempt,
};
use withdrawals::domain::failover::MoveRecord;
use withdrawals::domain::{AttemptResult, SideEffect, WithdrawalStatus};
use withdrawals::storage::{verify, Db};

#[derive(Debug, Default, Serialize)]
pub struct TwoProviders {
    pub providers: Vec<String>,
    /// The first provider's outage, as it happened.
    pub outage: Option<OutageReport>,
    /// Withdrawals with at least one recorded move, and the moves by route and by the rule's reason.
    pub moved: u64,
    pub moves: BTreeMap<String, u64>,
    pub moves_by_rule: BTreeMap<String, u64>,
    /// Withdrawals whose attempts went to two providers.
    pub attempted_at_two_providers: u64,
    /// Withdrawals that never moved, had an attempt at the first provider that may have moved money
    /// (no outcome, or unknown), and ended there; and those of them whose such attempt started
    /// during the outage.
    pub waited: u64,
    pub waited_through_outage: u64,
    /// Per provider: transfers executed, paid (`paid` or `returned`), completed withdrawals whose
    /// latest attempt went there.
    pub executed_at: BTreeMap<String, u64>,
    pub paid_at: BTreeMap<String, u64>,
    pub completed_at: BTreeMap<String, u64>,
    pub keys_at_two_providers: u64,
    pub keys_executed_twice_at_one_provider: BTreeMap<String, u64>,
    pub executed_without_attempt: u64,
    pub moved_away_from_an_execution: u64,
    pub unrecorded_switches: u64,
    /// Moves whose log entry does not follow an entry into `processing` in the log's order.
    pub moves_logged_out_of_order: u64,
    /// Every answer each provider gave, by kind (the mocks' request logs).
    pub answers: BTreeMap<String, BTreeMap<String, u64>>,
    pub violations: Vec<String>,
}

/// A move as the transition log records it.
#[derive(Debug, Clone)]
pub struct Moved {
    pub withdrawal_id: Uuid,
    pub from: String,
    pub to: String,
    pub rule: String,
    pub at: DateTime<Utc>,
}

/// Reads the attempts, the moves and the final states, and judges them against what each
/// provider executed (`at`: provider name → its mock's transfers).
pub async fn check(
    db: &Db,
    at: &[(&str, &[TransferRecord])],
    outage: Option<(DateTime<Utc>, DateTime<Utc>)>,
) -> anyhow::Result<TwoProviders> {
    let attempts = provider_attempts(db).await?;
    let mut unreadable = Vec::new();
    let moves: Vec<Moved> = failover_entries(db)
        .await?
        .into_iter()
        .filter_map(|e| read_move(&e).map_err(|why| unreadable.push(why)).ok())
        .collect();
    let states: HashMap<Uuid, String> =
        verify::withdrawal_outcomes(db).await?.into_iter().map(|w| (w.id, w.status)).collect();
    let mut report = judge(at, &attempts, &moves, &states, outage);
    report.violations.extend(unreadable);
    report.moves_logged_out_of_order = out_of_order(&logs_of_moved(db).await?);
    Ok(report)
}

/// Moves (`processing` → `processing`, `failover from …`) whose predecessor in their
/// withdrawal's log, in the log's order, is not an entry into `processing`. `log`: by
/// withdrawal, each in the log's order.
pub fn out_of_order(log: &[LogEntry]) -> u64 {
    let follows_processing = |i: usize| {
        i > 0
            && log[i - 1].withdrawal_id == log[i].withdrawal_id
            && log[i - 1].to_status == WithdrawalStatus::Processing
    };
    (0..log.len()).filter(|&i| log[i].reason.starts_with("failover from ") && !follows_processing(i)).count() as u64
}

/// A log entry's move, from its typed evidence; an error says why it is no move.
fn read_move(entry: &FailoverEntry) -> Result<Moved, String> {
    let id = entry.withdrawal_id;
    let evidence = entry.evidence.as_ref().map(|e| &e.0).unwrap_or(&Value::Null);
    if evidence["source"] != "failover" {
        return Err(format!(
            "withdrawal {id}: the move `{}` has evidence of source {}",
            entry.reason, evidence["source"]
        ));
    }
    let record: MoveRecord = serde_json::from_value(evidence["failover"].clone()).map_err(|e| {
        format!("withdrawal {id}: the move `{}` has evidence that does not read as one: {e}", entry.reason)
    })?;
    if !entry.reason.starts_with(&format!("failover from {} to {}", record.from, record.to)) {
        return Err(format!(
            "withdrawal {id}: the move's reason `{}` names other providers than its evidence",
            entry.reason
        ));
    }
    Ok(Moved { withdrawal_id: id, from: record.from, to: record.to, rule: record.rule, at: entry.at.0 })
}

/// May this attempt have moved money, as far as the service knew when it ended: no outcome (the
/// process died mid-call), or unknown (a timeout, a lost connection, a 5xx after sending).
fn uncertain(a: &ProviderAttempt) -> bool {
    a.outcome.is_none_or(|o| o == AttemptResult::Unknown) || a.side_effect == SideEffect::Unknown
}

/// The invariants and counts over what the run saw. `attempts` oldest first per withdrawal;
/// `states`: each withdrawal's final status.
pub fn judge(
    at: &[(&str, &[TransferRecord])],
    attempts: &[ProviderAttempt],
    moves: &[Moved],
    states: &HashMap<Uuid, String>,
    outage: Option<(DateTime<Utc>, DateTime<Utc>)>,
) -> TwoProviders {
    let mut r = TwoProviders { providers: at.iter().map(|(p, _)| (*p).to_owned()).collect(), ..Default::default() };
    let violation = |r: &mut TwoProviders, v: String| {
        if r.violations.len() < 200 {
            r.violations.push(v);
        }
    };
    let mut by_withdrawal: BTreeMap<Uuid, Vec<&ProviderAttempt>> = BTreeMap::new();
    for a in attempts {
        by_withdrawal.entry(a.withdrawal_id).or_default().push(a);
    }
    for list in by_withdrawal.values_mut() {
        list.sort_by_key(|a| a.attempt_no);
    }
    let mut moves_of: BTreeMap<Uuid, Vec<&Moved>> = BTreeMap::new();
    for m in moves {
        moves_of.entry(m.withdrawal_id).or_default().push(m);
        *r.moves.entry(format!("{} -> {}", m.from, m.to)).or_default() += 1;
        *r.moves_by_rule.entry(m.rule.clone()).or_default() += 1;
    }
    r.moved = moves_of.len() as u64;

    // What each provider executed, by key.
    let mut executed: BTreeMap<&str, Vec<(&str, &TransferRecord)>> = BTreeMap::new();
    for (provider, transfers) in at {
        r.executed_at.insert((*provider).to_owned(), transfers.len() as u64);
        r.paid_at.insert((*provider).to_owned(), transfers.iter().filter(|t| paid(t)).count() as u64);
        for t in transfers.iter() {
            executed.entry(t.idempotency_key.as_str()).or_default().push((provider, t));
            if t.executions > 1 {
                *r.keys_executed_twice_at_one_provider.entry((*provider).to_owned()).or_default() += 1;
            }
            let attempted_here = Uuid::parse_str(&t.idempotency_key)
                .ok()
                .and_then(|id| by_withdrawal.get(&id))
                .is_some_and(|list| list.iter().any(|a| a.provider == *provider));
            if !attempted_here {
                r.executed_without_attempt += 1;
                violation(
                    &mut r,
                    format!(
                        "{provider} executed transfer {} ({}) under key {}, which has no attempt recorded at {provider}",
                        t.id,
                        status_name(t.status),
                        t.idempotency_key
                    ),
                );
            }
        }
    }
    for (key, places) in &executed {
        let providers: BTreeSet<&str> = places.iter().map(|(p, _)| *p).collect();
        if providers.len() > 1 {
            r.keys_at_two_providers += 1;
            let what: Vec<String> =
                places.iter().map(|(p, t)| format!("{p} ({} {})", t.id, status_name(t.status))).collect();
            violation(&mut r, format!("key {key} executed at two providers: {}", what.join(", ")));
        }
    }

    // Moves: never away from a provider that had executed the key, nor from one that executed
    // it later without being asked again (the request was in flight at the move); and every
    // change of provider between attempts recorded as one, in order.
    for (id, list) in &moves_of {
        let key = id.to_string();
        for m in list {
            let Some((_, t)) = executed.get(key.as_str()).into_iter().flatten().find(|(p, _)| *p == m.from) else {
                continue;
            };
            let asked_again =
                by_withdrawal.get(id).is_some_and(|a| a.iter().any(|a| a.provider == m.from && a.started_at.0 > m.at));
            let wrong = if t.created_at <= m.at {
                Some("had executed its transfer")
            } else if !asked_again {
                Some("executed its transfer after the move, with no attempt there since")
            } else {
                None
            };
            if let Some(what) = wrong {
                r.moved_away_from_an_execution += 1;
                violation(
                    &mut r,
                    format!(
                        "withdrawal {id} moved from {} to {} at {} ({}), but {} {what}: {} ({}, created {})",
                        m.from,
                        m.to,
                        m.at.to_rfc3339(),
                        m.rule,
                        m.from,
                        t.id,
                        status_name(t.status),
                        t.created_at.to_rfc3339()
                    ),
                );
            }
        }
    }
    for (id, list) in &by_withdrawal {
        let switches: Vec<(&str, &str)> = list
            .windows(2)
            .filter(|w| w[0].provider != w[1].provider)
            .map(|w| (w[0].provider.as_str(), w[1].provider.as_str()))
            .collect();
        let recorded: Vec<(&str, &str)> =
            moves_of.get(id).into_iter().flatten().map(|m| (m.from.as_str(), m.to.as_str())).collect();
        let first = list.first().map(|a| a.provider.as_str());
        // A move is recorded with the attempt it leads to, so before the first attempt there may be
        // a move from a provider never called.
        let expected: Vec<(&str, &str)> = match recorded.first() {
            Some(&(from, _)) if first.is_some_and(|p| p != from) => recorded[1..].to_vec(),
            _ => recorded.clone(),
        };
        if switches != expected {
            r.unrecorded_switches += 1;
            violation(
                &mut r,
                format!(
                    "withdrawal {id}: its attempts changed provider {switches:?}, the log records moves {recorded:?}"
                ),
            );
        }
        let providers: BTreeSet<&str> = list.iter().map(|a| a.provider.as_str()).collect();
        r.attempted_at_two_providers += u64::from(providers.len() > 1);
        let last = list.last().map(|a| a.provider.as_str()).unwrap_or_default();
        if states.get(id).is_some_and(|s| s == "completed") {
            *r.completed_at.entry(last.to_owned()).or_default() += 1;
        }
        if !moves_of.contains_key(id) && last == FIRST {
            let unsure: Vec<&&ProviderAttempt> = list.iter().filter(|a| a.provider == FIRST && uncertain(a)).collect();
            if !unsure.is_empty() {
                r.waited += 1;
                let during = |a: &&&ProviderAttempt| {
                    outage.is_some_and(|(from, to)| a.started_at.0 >= from && a.started_at.0 <= to)
                };
                r.waited_through_outage += u64::from(unsure.iter().any(during));
            }
        }
    }
    r
}

/// The summary's lines for the report's `two_providers`.
pub fn describe(t: &Value) -> Vec<String> {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let phases: Vec<String> = t["outage"]["phases"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            format!(
                "{} {:.1} s from {:.1} s, requests reaching it {}",
                p["phase"].as_str().unwrap_or("?"),
                p["seconds"].as_f64().unwrap_or(0.0),
                p["from_seconds"].as_f64().unwrap_or(0.0),
                p["requests_reaching_it"]
            )
        })
        .collect();
    vec![
        format!(
            "two providers {}: {} down ({}; refusal seen: {}, {} connections cut)",
            t["providers"],
            t["outage"]["provider"].as_str().unwrap_or("?"),
            if phases.is_empty() { "never".to_owned() } else { phases.join(", ") },
            t["outage"]["refusal_verified"],
            n(&t["outage"]["connections_cut"])
        ),
        format!(
            "failover: {} withdrawals moved {} by rule {}; {} attempted at two providers; {} waited for {FIRST} ({} through the outage); {} moves logged out of order",
            n(&t["moved"]),
            t["moves"],
            t["moves_by_rule"],
            n(&t["attempted_at_two_providers"]),
            n(&t["waited"]),
            n(&t["waited_through_outage"]),
            n(&t["moves_logged_out_of_order"])
        ),
        format!(
            "per provider: executed {}, paid {}, completed {}; keys at two providers {}, executed twice at one {}, \
             executed without an attempt there {}, moved away from an execution {}, unrecorded switches {}",
            t["executed_at"],
            t["paid_at"],
            t["completed_at"],
            n(&t["keys_at_two_providers"]),
            t["keys_executed_twice_at_one_provider"],
            n(&t["executed_without_attempt"]),
            n(&t["moved_away_from_an_execution"]),
            n(&t["unrecorded_switches"])
        ),
        format!("provider answers: {}", t["answers"]),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use provider_mocks::{Destination, TransferStatus};
    use rust_decimal::Decimal;
    use withdrawals::storage::DbTime;

    fn transfer(key: Uuid, status: TransferStatus) -> TransferRecord {
        let now = Utc::now();
        TransferRecord {
            id: format!("tr_{}", Uuid::new_v4().simple()),
            idempotency_key: key.to_string(),
            reference: key.to_string(),
            amount: Decimal::new(1000, 2),
            currency: "USD".into(),
            destination: Destination::BankAccount { account_number: "12345678".into(), bank_code: "001".into() },
            status,
            failure_code: None,
            return_code: None,
            executions: 1,
            created_at: now,
            updated_at: now,
        }
    }

    fn attempt(id: Uuid, no: i64, provider: &str, outcome: Option<AttemptResult>, side: SideEffect) -> ProviderAttempt {
        ProviderAttempt {
            withdrawal_id: id,
            attempt_no: no,
            provider: provider.into(),
            started_at: DbTime::now(),
            outcome,
            side_effect: side,
        }
    }

    fn moved(id: Uuid, from: &str, to: &str) -> Moved {
        let rule = "move: every attempt not_started".into();
        Moved { withdrawal_id: id, from: from.into(), to: to.into(), rule, at: Utc::now() }
    }

    #[test]
    fn a_recorded_move_and_a_wait_are_counted_and_break_nothing() {
        let (moved_one, waited_one) = (Uuid::new_v4(), Uuid::new_v4());
        let acme = [transfer(waited_one, TransferStatus::Paid)];
        let bolt = [transfer(moved_one, TransferStatus::Paid)];
        let attempts = [
            attempt(moved_one, 1, "acme", Some(AttemptResult::Retryable), SideEffect::NotStarted),
            attempt(moved_one, 2, "bolt", Some(AttemptResult::Paid), SideEffect::Confirmed),
            attempt(waited_one, 1, "acme", Some(AttemptResult::Unknown), SideEffect::Unknown),
            attempt(waited_one, 2, "acme", Some(AttemptResult::Paid), SideEffect::Confirmed),
        ];
        let states = [(moved_one, "completed".to_owned()), (waited_one, "completed".to_owned())].into();
        let r =
            judge(&[("acme", &acme), ("bolt", &bolt)], &attempts, &[moved(moved_one, "acme", "bolt")], &states, None);
        assert_eq!(r.violations, Vec::<String>::new());
        assert_eq!((r.moved, r.attempted_at_two_providers, r.waited), (1, 1, 1));
        assert_eq!(r.paid_at, [("acme".to_owned(), 1), ("bolt".to_owned(), 1)].into());
        assert_eq!(r.completed_at, [("acme".to_owned(), 1), ("bolt".to_owned(), 1)].into());
    }

    #[test]
    fn a_move_before_any_attempt_is_not_a_switch() {
        let id = Uuid::new_v4();
        let bolt = [transfer(id, TransferStatus::Paid)];
        let attempts = [attempt(id, 1, "bolt", Some(AttemptResult::Paid), SideEffect::Confirmed)];
        let r =
            judge(&[("acme", &[]), ("bolt", &bolt)], &attempts, &[moved(id, "acme", "bolt")], &HashMap::new(), None);
        assert_eq!(r.violations, Vec::<String>::new());
        assert_eq!((r.moved, r.attempted_at_two_providers), (1, 0));
    }

    #[test]
    fn a_key_at_two_providers_a_move_away_from_an_execution_and_an_unrecorded_switch_are_violations() {
        let id = Uuid::new_v4();
        let acme = [transfer(id, TransferStatus::Paid)];
        let bolt = [transfer(id, TransferStatus::Paid)];
        let attempts = [
            attempt(id, 1, "acme", None, SideEffect::Unknown),
            attempt(id, 2, "bolt", Some(AttemptResult::Paid), SideEffect::Confirmed),
        ];
        let both = [("acme", &acme[..]), ("bolt", &bolt[..])];
        let r = judge(&both, &attempts, &[moved(id, "acme", "bolt")], &HashMap::new(), None);
        let text = r.violations.join("\n");
        assert_eq!((r.keys_at_two_providers, r.moved_away_from_an_execution), (1, 1), "{text}");
        assert!(text.contains("executed at two providers") && text.contains("moved from acme to bolt"), "{text}");

        let unrecorded = judge(&both, &attempts, &[], &HashMap::new(), None);
        assert_eq!(unrecorded.unrecorded_switches, 1, "{:?}", unrecorded.violations);
    }

    #[test]
    fn a_withdrawal_that_moves_back_and_is_paid_on_a_later_attempt_there_is_fine() {
        let id = Uuid::new_v4();
        let there = moved(id, "acme", "bolt");
        let back = Moved { at: Utc::now(), ..moved(id, "bolt", "acme") };
        let attempts = [
            attempt(id, 1, "bolt", Some(AttemptResult::Retryable), SideEffect::NotStarted),
            attempt(id, 2, "acme", Some(AttemptResult::Paid), SideEffect::Confirmed),
        ];
        let acme = [transfer(id, TransferStatus::Paid)];
        let r = judge(&[("acme", &acme), ("bolt", &[])], &attempts, &[there.clone(), back], &HashMap::new(), None);
        assert_eq!(r.violations, Vec::<String>::new());
        assert_eq!(r.moves.len(), 2);

        // Paid at acme, but with no attempt there after the move away: a request in flight.
        let late = judge(&[("acme", &acme), ("bolt", &[])], &attempts[..1], &[there], &HashMap::new(), None);
        assert_eq!(late.moved_away_from_an_execution, 1, "{:?}", late.violations);
    }

    #[test]
    fn a_move_logged_before_the_claim_it_follows_is_out_of_order() {
        let id = Uuid::new_v4();
        let entry = |from: Option<WithdrawalStatus>, to, reason: &str| LogEntry {
            withdrawal_id: id,
            from_status: from,
            to_status: to,
            reason: reason.into(),
        };
        let (pending, processing) = (WithdrawalStatus::Pending, WithdrawalStatus::Processing);
        let created = entry(None, pending, "created");
        let claim = entry(Some(pending), processing, "worker claimed the submit job");
        let moved = entry(Some(processing), processing, "failover from acme to bolt: move: never called");
        assert_eq!(out_of_order(&[created.clone(), claim.clone(), moved.clone()]), 0);
        assert_eq!(out_of_order(&[created, moved.clone(), claim]), 1);
        assert_eq!(out_of_order(&[moved]), 1);
    }

    #[test]
    fn a_transfer_where_no_attempt_went_is_a_violation() {
        let id = Uuid::new_v4();
        let bolt = [transfer(id, TransferStatus::Failed)];
        let attempts = [attempt(id, 1, "acme", Some(AttemptResult::Retryable), SideEffect::NotStarted)];
        let r = judge(&[("acme", &[]), ("bolt", &bolt)], &attempts, &[], &HashMap::new(), None);
        assert_eq!(r.executed_without_attempt, 1);
        assert!(r.violations[0].contains("no attempt recorded at bolt"), "{:?}", r.violations);
    }
}
