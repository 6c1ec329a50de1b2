//! The failover rule (SPEC §16): when may a withdrawal move from provider A to the next provider
//! for its currency? Only while A cannot be called, and only if no attempt at A could have moved
//! money — every attempt at A refused before its request left (`not_started`), or A's own lookup
//! proved "no such transfer" after the last one. Otherwise it waits for A, however long A's outage
//! lasts: a payout that may exist at A sent to B is a payout made twice. A permanent rejection is
//! A's answer, not a reason to move. Pure: the caller gathers A's attempts, its lookup and its
//! breaker; the move itself is a recorded decision with those as its evidence.

use serde::{Deserialize, Serialize};

use super::{AttemptResult, BreakerState, SideEffect};

/// One attempt at the current provider, as far as the rule needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptFacts {
    pub side_effect: SideEffect,
    pub result: AttemptResult,
}

/// What is known about the withdrawal at its current provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtProvider<'a> {
    /// The provider's breaker as this process sees it (an operator's force-open included).
    pub breaker: BreakerState,
    /// Every attempt made there, oldest first.
    pub attempts: &'a [AttemptFacts],
    /// The provider's own lookup answered "no such transfer", definitively, after the last attempt.
    pub not_found_after_last_attempt: bool,
}

/// What the rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failover {
    /// The provider can be called: stay with it.
    Stay,
    /// Move to the next provider for the currency: nothing at the current one can pay.
    Move(MoveReason),
    /// Wait for the current provider (deferred, as any call while its breaker is open).
    Wait(WaitReason),
    /// The provider answered for good: its rejection stands; nothing moves.
    Answered,
}

/// Why a move is safe: the evidence the recorded move names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveReason {
    /// No attempt was made at the current provider.
    NeverCalled,
    /// Every attempt was refused before its request left.
    AllNotStarted,
    /// The provider's lookup proved no transfer after the last attempt.
    LookupFoundNothing,
}

/// Why it must wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReason {
    /// An attempt may have reached the provider (unknown outcome, or accepted) and no lookup has
    /// proved otherwise.
    MayHaveMovedMoney,
    /// No other provider pays the currency.
    NoOtherProvider,
}

/// A recorded move (the evidence of its transition-log entry): from where to where, why it was
/// safe, and the facts at the first provider it rested on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveRecord {
    pub from: String,
    pub to: String,
    /// The rule's reason, as [`Failover::as_str`] names it.
    pub rule: String,
    /// The first provider's breaker when the move was decided.
    pub breaker: BreakerState,
    /// Every attempt at the first provider, oldest first.
    pub attempts: Vec<AttemptSeen>,
    /// Its lookup proved "no such transfer" after the last attempt.
    pub not_found_after_last_attempt: bool,
}

/// One attempt as a move's evidence keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptSeen {
    pub attempt_no: i64,
    pub side_effect: SideEffect,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<AttemptResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
}

/// The rule's facts from the attempts recorded at one provider, oldest first (outcome, side
/// effect): each attempt's facts, and whether the provider's lookup proved "no such transfer"
/// after the last. An attempt whose side effect was unknown and that a lookup later resolved as
/// never executed is stored as outcome `unknown`, side effect `not_started` (SPEC §7's controlled
/// retry): the last such attempt is the lookup's proof (it may have reached the provider, and the
/// lookup says it did not); an earlier one, followed only by attempts, counts as not started.
pub fn facts_at(recorded: &[(Option<AttemptResult>, SideEffect)]) -> (Vec<AttemptFacts>, bool) {
    let mut not_found_after_last = false;
    let facts = recorded
        .iter()
        .enumerate()
        .map(|(i, &(outcome, side_effect))| {
            let resolved = outcome == Some(AttemptResult::Unknown) && side_effect == SideEffect::NotStarted;
            let last = i + 1 == recorded.len();
            not_found_after_last = resolved && last;
            let side_effect = if resolved && last { SideEffect::Unknown } else { side_effect };
            AttemptFacts { side_effect, result: outcome.unwrap_or(AttemptResult::Unknown) }
        })
        .collect();
    (facts, not_found_after_last)
}

impl Failover {
    pub fn as_str(self) -> &'static str {
        match self {
            Failover::Stay => "stay",
            Failover::Move(MoveReason::NeverCalled) => "move: never called",
            Failover::Move(MoveReason::AllNotStarted) => "move: every attempt not_started",
            Failover::Move(MoveReason::LookupFoundNothing) => "move: lookup found no transfer",
            Failover::Wait(WaitReason::MayHaveMovedMoney) => "wait: an attempt may have moved money",
            Failover::Wait(WaitReason::NoOtherProvider) => "wait: no other provider for the currency",
            Failover::Answered => "answered: a permanent rejection stands",
        }
    }
}

/// The rule. `next_exists`: another provider pays the withdrawal's currency.
pub fn failover(at: &AtProvider<'_>, next_exists: bool) -> Failover {
    if at.attempts.iter().any(|a| a.result == AttemptResult::Permanent) {
        return Failover::Answered;
    }
    if !matches!(at.breaker, BreakerState::Open | BreakerState::ForcedOpen) {
        return Failover::Stay;
    }
    let safe = if at.attempts.is_empty() {
        Some(MoveReason::NeverCalled)
    } else if at.attempts.iter().all(|a| a.side_effect == SideEffect::NotStarted) {
        Some(MoveReason::AllNotStarted)
    } else if at.not_found_after_last_attempt {
        Some(MoveReason::LookupFoundNothing)
    } else {
        None
    };
    match (safe, next_exists) {
        (Some(_), false) => Failover::Wait(WaitReason::NoOtherProvider),
        (Some(reason), true) => Failover::Move(reason),
        (None, _) => Failover::Wait(WaitReason::MayHaveMovedMoney),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOT_STARTED: AttemptFacts =
        AttemptFacts { side_effect: SideEffect::NotStarted, result: AttemptResult::Retryable };
    const UNKNOWN: AttemptFacts = AttemptFacts { side_effect: SideEffect::Unknown, result: AttemptResult::Unknown };
    const PENDING: AttemptFacts = AttemptFacts { side_effect: SideEffect::Confirmed, result: AttemptResult::Pending };
    const REJECTED: AttemptFacts =
        AttemptFacts { side_effect: SideEffect::NotStarted, result: AttemptResult::Permanent };

    /// Every breaker state × attempt history × lookup × next provider: the table the SPEC states.
    #[test]
    fn a_withdrawal_moves_only_when_nothing_at_the_first_provider_can_pay() {
        use BreakerState as B;
        use Failover::*;
        use MoveReason::*;
        use WaitReason::*;
        let histories: [(&str, &[AttemptFacts]); 6] = [
            ("none", &[]),
            ("not_started", &[NOT_STARTED]),
            ("not_started twice", &[NOT_STARTED, NOT_STARTED]),
            ("unknown", &[UNKNOWN]),
            ("not_started then unknown", &[NOT_STARTED, UNKNOWN]),
            ("accepted pending", &[PENDING]),
        ];
        for breaker in BreakerState::ALL {
            let open = matches!(breaker, B::Open | B::ForcedOpen);
            for (name, attempts) in histories {
                for not_found in [false, true] {
                    for next in [false, true] {
                        let at = AtProvider { breaker, attempts, not_found_after_last_attempt: not_found };
                        let safe = match (attempts.is_empty(), attempts.iter().all(|a| *a == NOT_STARTED), not_found) {
                            (true, _, _) => Some(NeverCalled),
                            (false, true, _) => Some(AllNotStarted),
                            (false, false, true) => Some(LookupFoundNothing),
                            (false, false, false) => None,
                        };
                        let expected = match (open, safe, next) {
                            (false, _, _) => Stay,
                            (true, None, _) => Wait(MayHaveMovedMoney),
                            (true, Some(_), false) => Wait(NoOtherProvider),
                            (true, Some(reason), true) => Move(reason),
                        };
                        assert_eq!(
                            failover(&at, next),
                            expected,
                            "{breaker}, attempts {name}, not found after: {not_found}, next: {next}"
                        );
                    }
                }
            }
        }
        // The cases by name, as the README's table states them.
        let open =
            |attempts, not_found| AtProvider { breaker: B::Open, attempts, not_found_after_last_attempt: not_found };
        assert_eq!(failover(&open(&[NOT_STARTED], false), true), Move(AllNotStarted), "refused connections: move");
        assert_eq!(failover(&open(&[UNKNOWN], false), true), Wait(MayHaveMovedMoney), "timeout after commit: wait");
        assert_eq!(failover(&open(&[UNKNOWN], true), true), Move(LookupFoundNothing), "A's lookup says none: move");
        assert_eq!(failover(&open(&[PENDING], true), true), Move(LookupFoundNothing));
        let forced = AtProvider { breaker: B::ForcedOpen, attempts: &[], not_found_after_last_attempt: false };
        assert_eq!(failover(&forced, true), Move(NeverCalled), "an operator's force-open counts as open");
        // A permanent rejection is the answer, open breaker or not, whatever else is known.
        for breaker in BreakerState::ALL {
            for attempts in [&[REJECTED][..], &[NOT_STARTED, REJECTED], &[UNKNOWN, REJECTED]] {
                let at = AtProvider { breaker, attempts, not_found_after_last_attempt: true };
                assert_eq!(failover(&at, true), Answered, "{breaker}");
            }
        }
        assert_eq!(Move(AllNotStarted).as_str(), "move: every attempt not_started");
    }

    /// The recorded rows become the rule's facts: a lookup's resolution is the proof only when it
    /// resolved the last attempt.
    #[test]
    fn recorded_attempts_become_facts() {
        use AttemptResult as R;
        use SideEffect as S;
        let resolved = (Some(R::Unknown), S::NotStarted);
        let refused = (Some(R::Retryable), S::NotStarted);
        let timed_out = (Some(R::Unknown), S::Unknown);
        let unfinished = (None, S::Unknown);
        let (f, nf) = facts_at(&[resolved]);
        assert_eq!((f[0].side_effect, nf), (S::Unknown, true));
        let open = |f: &[AttemptFacts], nf| {
            failover(&AtProvider { breaker: BreakerState::Open, attempts: f, not_found_after_last_attempt: nf }, true)
        };
        assert_eq!(open(&f, nf), Failover::Move(MoveReason::LookupFoundNothing));
        let (f, nf) = facts_at(&[resolved, refused]);
        assert_eq!((f[0].side_effect, nf), (S::NotStarted, false));
        assert_eq!(open(&f, nf), Failover::Move(MoveReason::AllNotStarted));
        let (f, nf) = facts_at(&[resolved, timed_out]);
        assert_eq!(open(&f, nf), Failover::Wait(WaitReason::MayHaveMovedMoney));
        let (f, nf) = facts_at(&[unfinished]);
        assert_eq!((f[0].result, nf), (R::Unknown, false));
        assert_eq!(open(&f, nf), Failover::Wait(WaitReason::MayHaveMovedMoney));
        assert_eq!(facts_at(&[]), (Vec::new(), false));
    }
}
