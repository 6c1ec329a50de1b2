//! The withdrawal state machine of SPEC §1.1: five states and one pure transition function.
//!
//! The table is matched exhaustively with no catch-all, so adding a state refuses to compile
//! until every pair involving it has been decided. Persistence (the guarded compare-and-set
//! write) lives in `storage`; this module only says which moves exist and what they do to money.

use std::fmt;

crate::text_enum! {
    /// Where a withdrawal is (SPEC §1.1).
    #[derive(utoipa::ToSchema)]
    pub enum WithdrawalStatus("withdrawal status", 5) {
        /// Funds held, job enqueued, not yet sent to the provider.
        Pending = "pending",
        /// A worker owns it; the provider may or may not have been called.
        Processing = "processing",
        /// Automation is exhausted or unsafe; a human (or reconciliation) decides.
        RequiresReview = "requires_review",
        /// The provider confirmed the payout (terminal).
        Completed = "completed",
        /// Definitively not paid; held funds released (terminal).
        Failed = "failed",
    }
}

impl WithdrawalStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, WithdrawalStatus::Completed | WithdrawalStatus::Failed)
    }
}

/// What a transition does to the account's balances (SPEC §1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerEffect {
    None,
    /// held → paid out.
    SettleHold,
    /// held → available (compensation).
    ReleaseHold,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a withdrawal cannot move from {from} to {to}")]
pub struct TransitionError {
    pub from: WithdrawalStatus,
    pub to: WithdrawalStatus,
}

/// The one table of allowed moves (SPEC §1.1). Returns the ledger effect of an allowed move.
pub fn check_transition(from: WithdrawalStatus, to: WithdrawalStatus) -> Result<LedgerEffect, TransitionError> {
    use WithdrawalStatus::*;
    match (from, to) {
        (Pending, Processing) => Ok(LedgerEffect::None),
        (Pending, Failed) => Ok(LedgerEffect::ReleaseHold),
        (Processing, Completed) => Ok(LedgerEffect::SettleHold),
        (Processing, Failed) => Ok(LedgerEffect::ReleaseHold),
        (Processing, RequiresReview) => Ok(LedgerEffect::None),
        (RequiresReview, Processing) => Ok(LedgerEffect::None),
        (RequiresReview, Completed) => Ok(LedgerEffect::SettleHold),
        (RequiresReview, Failed) => Ok(LedgerEffect::ReleaseHold),
        (Pending, Pending | RequiresReview | Completed)
        | (Processing, Pending | Processing)
        | (RequiresReview, Pending | RequiresReview)
        | (Completed, Pending | Processing | RequiresReview | Completed | Failed)
        | (Failed, Pending | Processing | RequiresReview | Completed | Failed) => Err(TransitionError { from, to }),
    }
}

/// The moves that park a withdrawal automation gave up on in `requires_review`: through
/// `processing` if it was still `pending`, so every move is one [`check_transition`] allows and
/// each is recorded. None from `requires_review` (already there) or a final state.
pub fn path_to_review(from: WithdrawalStatus) -> &'static [(WithdrawalStatus, WithdrawalStatus)] {
    use WithdrawalStatus::*;
    match from {
        Pending => &[(Pending, Processing), (Processing, RequiresReview)],
        Processing => &[(Processing, RequiresReview)],
        RequiresReview | Completed | Failed => &[],
    }
}

/// Who moved a withdrawal; recorded on every transition row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    Customer,
    Worker(String),
    Reconciliation,
    /// Settlement matching (SPEC §14.2), acting on a report line the provider confirmed.
    Settlement,
    /// A provider event's job (SPEC §15), acting on the provider's record the event led it to.
    Webhook,
    Operator(String),
    System,
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::Customer => f.write_str("customer"),
            Actor::Worker(id) => write!(f, "worker:{id}"),
            Actor::Reconciliation => f.write_str("reconciliation"),
            Actor::Settlement => f.write_str("settlement"),
            Actor::Webhook => f.write_str("webhook"),
            Actor::Operator(id) => write!(f, "operator:{id}"),
            Actor::System => f.write_str("system"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::WithdrawalStatus::*;
    use super::*;

    const ALLOWED: [(WithdrawalStatus, WithdrawalStatus, LedgerEffect); 8] = [
        (Pending, Processing, LedgerEffect::None),
        (Pending, Failed, LedgerEffect::ReleaseHold),
        (Processing, Completed, LedgerEffect::SettleHold),
        (Processing, Failed, LedgerEffect::ReleaseHold),
        (Processing, RequiresReview, LedgerEffect::None),
        (RequiresReview, Processing, LedgerEffect::None),
        (RequiresReview, Completed, LedgerEffect::SettleHold),
        (RequiresReview, Failed, LedgerEffect::ReleaseHold),
    ];

    #[test]
    fn every_allowed_pair_has_its_ledger_effect() {
        for (from, to, effect) in ALLOWED {
            assert_eq!(check_transition(from, to), Ok(effect), "{from} -> {to}");
        }
    }

    #[test]
    fn every_other_pair_is_forbidden() {
        let mut forbidden = 0;
        for from in WithdrawalStatus::ALL {
            for to in WithdrawalStatus::ALL {
                if ALLOWED.iter().any(|(f, t, _)| (*f, *t) == (from, to)) {
                    continue;
                }
                assert_eq!(check_transition(from, to), Err(TransitionError { from, to }));
                forbidden += 1;
            }
        }
        assert_eq!(forbidden, 25 - ALLOWED.len());
    }

    #[test]
    fn terminal_states_never_move() {
        for from in [Completed, Failed] {
            assert!(from.is_terminal());
            for to in WithdrawalStatus::ALL {
                assert!(check_transition(from, to).is_err());
            }
        }
    }

    #[test]
    fn the_path_to_review_is_made_of_allowed_moves() {
        for from in WithdrawalStatus::ALL {
            let path = path_to_review(from);
            for (f, t) in path {
                assert!(check_transition(*f, *t).is_ok(), "{f} -> {t}");
            }
            assert_eq!(path.first().map(|m| m.0).unwrap_or(from), from);
            if let Some(last) = path.last() {
                assert_eq!(last.1, RequiresReview);
            }
        }
    }

    #[test]
    fn statuses_round_trip_through_their_names() {
        for s in WithdrawalStatus::ALL {
            assert_eq!(s.as_str().parse::<WithdrawalStatus>(), Ok(s));
        }
        assert!("paid".parse::<WithdrawalStatus>().is_err());
    }
}
