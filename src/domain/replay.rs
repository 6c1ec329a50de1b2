//! The replay run state machine of SPEC §8.3, and the states of a run's items.
//!
//! A run moves by operator actions (approve, pause, resume, cancel) and by its releaser
//! (complete, auto-pause). Two actions can lead to the same state from different places (approve
//! and resume both lead to `running`), so the table is over `(state, action)`, matched
//! exhaustively with no catch-all: a new state or action refuses to compile until every pair is
//! decided. Persistence (the guarded write) lives in `storage::replays`, which takes its allowed
//! `from` states from [`ReplayAction::from_states`].

use crate::text_enum;

text_enum! {
    /// Where a replay run stands.
    pub enum ReplayStatus("replay run status", 5) {
        /// Over the approval threshold: waits for a second operator.
        AwaitingApproval = "awaiting_approval",
        /// The releaser is releasing its items.
        Running = "running",
        /// Stopped by an operator or by the auto-pause; resumable.
        Paused = "paused",
        /// Every item handled (terminal).
        Completed = "completed",
        /// Stopped for good; pending items cancelled (terminal).
        Cancelled = "cancelled",
    }
}

text_enum! {
    /// What happened to one dead letter of a run: `pending` moves on exactly once.
    pub enum ReplayItemStatus("replay item status", 5) {
        Pending = "pending",
        /// A new job was enqueued for it.
        Released = "released",
        /// Its side effect was unknown: a reconciliation was enqueued instead.
        Reconciling = "reconciling",
        /// Not released, with the reason in the item's detail.
        Skipped = "skipped",
        /// Its run was cancelled first.
        Cancelled = "cancelled",
    }
}

impl ReplayStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, ReplayStatus::Completed | ReplayStatus::Cancelled)
    }
}

/// What moves a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplayAction {
    /// A second operator lets a run over the approval threshold start.
    Approve,
    /// An operator, or the releaser on too many new dead letters, stops releasing.
    Pause,
    Resume,
    Cancel,
    /// The releaser found nothing pending and nothing in flight.
    Complete,
}

impl ReplayAction {
    pub const ALL: [ReplayAction; 5] = [
        ReplayAction::Approve,
        ReplayAction::Pause,
        ReplayAction::Resume,
        ReplayAction::Cancel,
        ReplayAction::Complete,
    ];

    /// The states this action may start from, in [`ReplayStatus::ALL`] order.
    pub fn from_states(self) -> Vec<ReplayStatus> {
        ReplayStatus::ALL.into_iter().filter(|from| check_replay_transition(*from, self).is_ok()).collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a replay run that is {from} cannot {action:?}")]
pub struct ReplayTransitionError {
    pub from: ReplayStatus,
    pub action: ReplayAction,
}

/// The one table of a run's moves: the state `action` leads to from `from`.
pub fn check_replay_transition(
    from: ReplayStatus,
    action: ReplayAction,
) -> Result<ReplayStatus, ReplayTransitionError> {
    use ReplayAction::*;
    use ReplayStatus::*;
    match (from, action) {
        (AwaitingApproval, Approve) => Ok(Running),
        (Running, Pause) => Ok(Paused),
        (Paused, Resume) => Ok(Running),
        (AwaitingApproval | Running | Paused, Cancel) => Ok(Cancelled),
        (Running, Complete) => Ok(Completed),
        (AwaitingApproval, Pause | Resume | Complete)
        | (Running, Approve | Resume)
        | (Paused, Approve | Pause | Complete)
        | (Completed | Cancelled, Approve | Pause | Resume | Cancel | Complete) => {
            Err(ReplayTransitionError { from, action })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ReplayAction::*;
    use super::ReplayStatus::*;
    use super::*;

    const ALLOWED: [(ReplayStatus, ReplayAction, ReplayStatus); 7] = [
        (AwaitingApproval, Approve, Running),
        (Running, Pause, Paused),
        (Paused, Resume, Running),
        (AwaitingApproval, Cancel, Cancelled),
        (Running, Cancel, Cancelled),
        (Paused, Cancel, Cancelled),
        (Running, Complete, Completed),
    ];

    #[test]
    fn every_allowed_pair_leads_to_its_state() {
        for (from, action, to) in ALLOWED {
            assert_eq!(check_replay_transition(from, action), Ok(to), "{from} {action:?}");
        }
    }

    #[test]
    fn every_other_pair_is_forbidden() {
        let mut forbidden = 0;
        for from in ReplayStatus::ALL {
            for action in ReplayAction::ALL {
                if ALLOWED.iter().any(|(f, a, _)| (*f, *a) == (from, action)) {
                    continue;
                }
                assert_eq!(check_replay_transition(from, action), Err(ReplayTransitionError { from, action }));
                forbidden += 1;
            }
        }
        assert_eq!(forbidden, 25 - ALLOWED.len());
    }

    #[test]
    fn terminal_runs_never_move() {
        for from in [Completed, Cancelled] {
            assert!(from.is_terminal());
            assert!(ReplayAction::ALL.into_iter().all(|a| check_replay_transition(from, a).is_err()));
        }
    }

    #[test]
    fn approve_and_resume_reach_running_from_different_states() {
        assert_eq!(Approve.from_states(), vec![AwaitingApproval]);
        assert_eq!(Resume.from_states(), vec![Paused]);
        assert_eq!(Pause.from_states(), vec![Running]);
        assert_eq!(Complete.from_states(), vec![Running]);
        assert_eq!(Cancel.from_states(), vec![AwaitingApproval, Running, Paused]);
    }

    #[test]
    fn states_round_trip_through_their_names() {
        crate::assert_text_enum_round_trips!(ReplayStatus);
        crate::assert_text_enum_round_trips!(ReplayItemStatus);
    }
}
