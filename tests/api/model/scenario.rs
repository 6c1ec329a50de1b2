//! The steps a case is made of, how they are generated, and the scripted interleavings.

use super::*;

/// One step of a case.
#[derive(Debug, Clone)]
pub(super) enum Step {
    /// The customer asks for a withdrawal; the provider will treat its first create per `create`,
    /// transfers created from now on settle per `settle`, and lookups for it fail if
    /// `lookups_down`. With `until_sent`, the next step waits until its first create reached the
    /// provider (so the settlement applies to it); without, the next step races the worker.
    Submit { cents: u32, create: CreateFault, settle: Settle, lookups_down: bool, until_sent: bool },
    /// An operator decides about a withdrawal in review (any withdrawal when none is). With
    /// `on_arrival` the operator first waits for the review queue to be non-empty (unless the
    /// system is quiescent) and acts the moment something arrives: the hurried operator. With
    /// `lift_outage` the provider answers its lookups again just before.
    Operator { pick: u8, op: Op, lift_outage: bool, on_arrival: bool },
    /// Two operators decide about the same withdrawal at the same moment (see `Operator`).
    TwoOperators { pick: u8, first: Op, second: Op },
    /// Lookups for one open withdrawal start failing (`down`), or one outage ends.
    Outage { pick: u8, down: bool },
    /// The customer cancels a withdrawal (the latest one when `pick` is `None`).
    Cancel { pick: Option<u8> },
    /// A create the service stopped waiting for (its attempt timed out before the provider
    /// committed) reaches the provider after all, within the in-flight grace: the test sends the
    /// same request under the same key, as the network would have. No-op if none may still land.
    LateArrival { pick: u8 },
    /// Wait until the system is quiescent: no withdrawal pending or processing, no live job
    /// (and, if asked, no transfer pending at the provider).
    Advance { until_provider_settled: bool },
}

/// What the provider does with a withdrawal's first create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CreateFault {
    None,
    /// Executes it as a `failed` transfer.
    SettleFailed,
    /// Holds the request, executes nothing, drops the connection.
    TimeoutBeforeCommit,
    /// Executes it, holds the request, drops the connection.
    TimeoutAfterCommit,
    /// 422 `invalid_account`, executes nothing.
    Rejected,
}

impl CreateFault {
    pub(super) fn effect(self) -> Option<FaultEffect> {
        match self {
            CreateFault::None => None,
            CreateFault::SettleFailed => Some(FaultEffect::SettleFailed { failure_code: "account_closed".into() }),
            CreateFault::TimeoutBeforeCommit => Some(FaultEffect::TimeoutBeforeCommit { ms: HOLD_MS }),
            CreateFault::TimeoutAfterCommit => Some(FaultEffect::TimeoutAfterCommit { ms: HOLD_MS }),
            CreateFault::Rejected => Some(FaultEffect::InvalidAccount),
        }
    }
}

/// How the provider settles the transfers it creates from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Settle {
    Immediate,
    /// `pending` for `delay_ms`, then `paid` (or `failed` when `fails`).
    Async {
        delay_ms: u64,
        fails: bool,
    },
}

impl Settle {
    pub(super) fn slow(self) -> bool {
        matches!(self, Settle::Async { delay_ms, .. } if delay_ms > QUICK_SETTLEMENT_MS.end() * 2)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Fail,
    Retry,
    /// `complete` with the id of the transfer the provider shows (whatever its status).
    CompleteWithProvidersId,
    CompleteWithWrongId,
    Reconcile,
}

impl Op {
    pub(super) fn action(self) -> &'static str {
        match self {
            Op::Fail => "fail",
            Op::Retry => "retry",
            Op::CompleteWithProvidersId | Op::CompleteWithWrongId => "complete",
            Op::Reconcile => "reconcile",
        }
    }
}

pub(super) fn create_fault() -> impl Strategy<Value = CreateFault> {
    prop_oneof![
        3 => Just(CreateFault::None),
        1 => Just(CreateFault::SettleFailed),
        2 => Just(CreateFault::TimeoutBeforeCommit),
        2 => Just(CreateFault::TimeoutAfterCommit),
        1 => Just(CreateFault::Rejected),
    ]
}

pub(super) fn settle() -> impl Strategy<Value = Settle> {
    prop_oneof![
        3 => Just(Settle::Immediate),
        2 => (QUICK_SETTLEMENT_MS, any::<bool>()).prop_map(|(delay_ms, fails)| Settle::Async { delay_ms, fails }),
        2 => (SLOW_SETTLEMENT_MS, any::<bool>()).prop_map(|(delay_ms, fails)| Settle::Async { delay_ms, fails }),
    ]
}

pub(super) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Fail),
        2 => Just(Op::Retry),
        2 => Just(Op::CompleteWithProvidersId),
        1 => Just(Op::CompleteWithWrongId),
        1 => Just(Op::Reconcile),
    ]
}

pub(super) fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => (1u32..=5_000, create_fault(), settle(), prop::bool::weighted(0.4), prop::bool::weighted(0.8))
            .prop_map(|(cents, create, settle, lookups_down, until_sent)| {
                Step::Submit { cents, create, settle, lookups_down, until_sent }
            }),
        5 => (any::<u8>(), op(), prop::bool::weighted(0.6), prop::bool::weighted(0.7))
            .prop_map(|(pick, op, lift_outage, on_arrival)| Step::Operator { pick, op, lift_outage, on_arrival }),
        1 => (any::<u8>(), op(), op()).prop_map(|(pick, first, second)| Step::TwoOperators { pick, first, second }),
        3 => prop::bool::weighted(0.3).prop_map(|until_provider_settled| Step::Advance { until_provider_settled }),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(pick, down)| Step::Outage { pick, down }),
        1 => prop::option::of(any::<u8>()).prop_map(|pick| Step::Cancel { pick }),
        1 => any::<u8>().prop_map(|pick| Step::LateArrival { pick }),
    ]
}

pub(super) fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(step(), 2..=12)
}

/// Interleavings every run covers whatever the seed, after the generated ones: the hurried
/// decisions SPEC §8.1 must refuse, each set up so that it arises (the model still decides what
/// the answers must be).
pub(super) fn scripted_cases() -> Vec<(&'static str, Vec<Step>)> {
    use Step::*;
    let submit = |create, settle, lookups_down| Submit { cents: 1_234, create, settle, lookups_down, until_sent: true };
    let hurried = |op, lift_outage| Operator { pick: 0, op, lift_outage, on_arrival: true };
    let slow = |fails| Settle::Async { delay_ms: 2_000, fails };
    vec![
        (
            "timed out before the provider committed, lookups down: refused while the provider is down, \
             then while the attempt may still arrive",
            vec![
                submit(CreateFault::TimeoutBeforeCommit, Settle::Immediate, true),
                hurried(Op::Fail, false),
                hurried(Op::Retry, true),
            ],
        ),
        (
            "timed out before the provider committed, and the request lands late after all (within the grace)",
            vec![
                submit(CreateFault::TimeoutBeforeCommit, Settle::Immediate, true),
                hurried(Op::Fail, true),
                LateArrival { pick: 0 },
                hurried(Op::Retry, false),
            ],
        ),
        (
            "slow settlement outlasts the window: refused while pending, then settled paid and completed",
            vec![
                submit(CreateFault::None, slow(false), false),
                hurried(Op::Fail, false),
                hurried(Op::CompleteWithProvidersId, false),
                Advance { until_provider_settled: true },
                hurried(Op::CompleteWithWrongId, false),
                hurried(Op::Retry, false),
                hurried(Op::CompleteWithProvidersId, false),
            ],
        ),
        (
            "quick settlements, paid and failed: polled until settled, never parked",
            vec![
                submit(CreateFault::None, Settle::Async { delay_ms: 250, fails: false }, false),
                submit(CreateFault::None, Settle::Async { delay_ms: 250, fails: true }, false),
                Advance { until_provider_settled: true },
            ],
        ),
        (
            "slow settlement that fails: retried once the provider shows it failed",
            vec![
                submit(CreateFault::None, slow(true), false),
                Advance { until_provider_settled: true },
                hurried(Op::Retry, false),
            ],
        ),
        (
            "paid but unknown: fail and retry refused as paid, reconcile completes it",
            vec![
                submit(CreateFault::TimeoutAfterCommit, Settle::Immediate, true),
                hurried(Op::Fail, true),
                hurried(Op::Retry, false),
                hurried(Op::Reconcile, false),
            ],
        ),
        (
            "rejected, then a reconciliation running while the operator decides",
            vec![
                submit(CreateFault::Rejected, Settle::Immediate, true),
                hurried(Op::Reconcile, false),
                Operator { pick: 0, op: Op::Fail, lift_outage: true, on_arrival: false },
            ],
        ),
        (
            "two operators at once: one decision applies, the other is stale",
            vec![
                submit(CreateFault::Rejected, Settle::Immediate, false),
                TwoOperators { pick: 0, first: Op::Fail, second: Op::Retry },
                submit(CreateFault::TimeoutAfterCommit, Settle::Immediate, true),
                Operator { pick: 0, op: Op::Reconcile, lift_outage: false, on_arrival: true },
                Advance { until_provider_settled: false },
                Outage { pick: 0, down: false },
                TwoOperators { pick: 0, first: Op::CompleteWithProvidersId, second: Op::CompleteWithProvidersId },
            ],
        ),
        (
            "a cancel racing the worker",
            vec![
                Submit {
                    cents: 500,
                    create: CreateFault::None,
                    settle: Settle::Immediate,
                    lookups_down: false,
                    until_sent: false,
                },
                Cancel { pick: None },
            ],
        ),
    ]
}

// ---------------------------------------------------------------------------------------------
// What an operator's decision must answer (SPEC §8.1), from what the provider shows.
