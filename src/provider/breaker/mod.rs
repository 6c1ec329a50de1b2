//! Circuit breaker with resilience4j semantics, guarding calls to one payout provider.
//!
//! Owns: the state machine (closed → open → half-open → closed/open, plus the admin-forced states), the
//! sliding window of recent outcomes, and the permit protocol that ties each outcome back to the state the
//! call was admitted under. Must not: sleep, start timers or tasks, do I/O, decide which errors count as
//! failures (the caller classifies into [`CallOutcome`]) or retry anything (that is `retry`'s job). Time comes
//! only from an injected [`Clock`], so every transition is deterministic under test. There is no `async` here:
//! the internal `std::sync::Mutex` guards short bookkeeping only, never an `.await`, I/O or user code
//! (listeners run after it is released).

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub use crate::config::{BreakerConfig, BreakerConfigError, SlidingWindow};

mod clock;
mod window;

pub use crate::domain::BreakerState;
pub use clock::{Clock, ManualClock, SystemClock};

/// How a permitted call ended, as classified by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    Success,
    Failure,
    /// A permanent error (e.g. invalid account): says nothing about the provider's health, so it counts
    /// neither way; in half-open it just frees its probe slot.
    Ignored,
}

/// The call was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("circuit breaker is {state}; retry in {retry_in:?}")]
pub struct Rejected {
    pub state: BreakerState,
    /// Open: time left until the wait ends. HalfOpen: zero, because the probes are merely busy and a slot
    /// frees as soon as one is recorded, which no clock can predict. ForcedOpen: `wait_duration_in_open`,
    /// as a polite back-off hint, since only an admin can end it.
    pub retry_in: Duration,
}

type Listener = Box<dyn Fn(&str, BreakerState, BreakerState) + Send + Sync>;
/// `(from, to)`, reported to listeners once the lock is released.
type Transition = (BreakerState, BreakerState);

/// A resilience4j-style circuit breaker. `Send + Sync`; share it behind an `Arc`.
pub struct CircuitBreaker {
    name: String,
    config: BreakerConfig,
    clock: Arc<dyn Clock>,
    inner: Arc<Mutex<Inner>>,
    listeners: Vec<Listener>,
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker").field("name", &self.name).field("state", &self.state()).finish_non_exhaustive()
    }
}

impl CircuitBreaker {
    /// Starts closed with an empty window. Zero counts in `config` are raised to 1 (see [`BreakerConfig::validate`]).
    pub fn new(name: impl Into<String>, mut config: BreakerConfig, clock: Arc<dyn Clock>) -> Self {
        config.minimum_number_of_calls = config.minimum_number_of_calls.max(1);
        config.permitted_calls_in_half_open = config.permitted_calls_in_half_open.max(1);
        if let SlidingWindow::Count { size } = &mut config.window {
            *size = (*size).max(1);
        }
        let inner = Inner {
            state: BreakerState::Closed,
            generation: 0,
            window: Window::new(config.window),
            probes_in_flight: 0,
            probes: Tally::default(),
            opened_at: clock.now(),
        };
        Self { name: name.into(), config, clock, inner: Arc::new(Mutex::new(inner)), listeners: Vec::new() }
    }

    /// Adds a listener called with `(name, from, to)` on every state change, in order, after the lock is
    /// released (so it may call back into the breaker). Transitions made concurrently by different threads
    /// may reach listeners in either order. A listener must not panic: it runs on the caller's thread.
    pub fn with_listener(mut self, f: impl Fn(&str, BreakerState, BreakerState) + Send + Sync + 'static) -> Self {
        self.listeners.push(Box::new(f));
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// The current state. Like resilience4j, it stays `Open` after the wait has ended until the next
    /// [`try_acquire`](Self::try_acquire) moves it to half-open: there are no timers.
    pub fn state(&self) -> BreakerState {
        lock(&self.inner).state
    }

    /// Admits a call or says why not. An expired open wait turns into half-open here, lazily.
    pub fn try_acquire(&self) -> Result<Permit, Rejected> {
        let now = self.clock.now();
        let wait = self.config.wait_duration_in_open;
        let permitted = self.config.permitted_calls_in_half_open;
        let mut inner = lock(&self.inner);
        let mut change = None;
        let admitted = match inner.state {
            BreakerState::Closed => Ok(PermitKind::Closed),
            BreakerState::ForcedClosed => Ok(PermitKind::Untracked),
            BreakerState::ForcedOpen => Err(Rejected { state: BreakerState::ForcedOpen, retry_in: wait }),
            BreakerState::Open => {
                let waited = now.saturating_duration_since(inner.opened_at);
                if waited < wait {
                    Err(Rejected { state: BreakerState::Open, retry_in: wait - waited })
                } else {
                    change = inner.transition(BreakerState::HalfOpen, now);
                    inner.admit_probe(permitted)
                }
            }
            BreakerState::HalfOpen => inner.admit_probe(permitted),
        };
        let generation = inner.generation;
        drop(inner);
        self.notify(change);
        admitted.map(|kind| Permit { inner: Arc::clone(&self.inner), generation, kind, settled: false })
    }

    /// Records how an admitted call ended; `elapsed` is its duration, for the slow-call rate.
    ///
    /// An outcome whose permit predates the latest transition (or a reset) is dropped: it describes the
    /// provider as it was judged before, and feeding it into a fresh window or a half-open trial would let
    /// calls that were never probes decide the probe verdict.
    pub fn record(&self, mut permit: Permit, outcome: CallOutcome, elapsed: Duration) {
        if !Arc::ptr_eq(&permit.inner, &self.inner) {
            tracing::warn!(breaker = %self.name, "permit from another breaker recorded here; released unrecorded");
            return; // dropping it releases its slot on the breaker that issued it
        }
        permit.settled = true;
        let now = self.clock.now();
        let slow = elapsed >= self.config.slow_call_duration;
        let sample = match outcome {
            CallOutcome::Success => Some(Tally { calls: 1, failures: 0, slow: u32::from(slow) }),
            CallOutcome::Failure => Some(Tally { calls: 1, failures: 1, slow: u32::from(slow) }),
            CallOutcome::Ignored => None,
        };
        let mut inner = lock(&self.inner);
        if permit.generation != inner.generation {
            drop(inner);
            tracing::debug!(breaker = %self.name, ?outcome, "late outcome from an earlier state ignored");
            return;
        }
        let change = match permit.kind {
            PermitKind::Untracked => None,
            PermitKind::Closed => inner.record_closed(now, sample, &self.config),
            PermitKind::Probe => inner.record_probe(now, sample, &self.config),
        };
        drop(inner);
        self.notify(change);
    }

    /// Rejects every call until [`reset`](Self::reset) or another force.
    pub fn force_open(&self) {
        self.force(BreakerState::ForcedOpen);
    }

    /// Admits every call and records nothing until [`reset`](Self::reset) or another force.
    pub fn force_closed(&self) {
        self.force(BreakerState::ForcedClosed);
    }

    /// Back to closed with an empty window, from any state. Calls admitted before the reset are stale.
    pub fn reset(&self) {
        let now = self.clock.now();
        let change = lock(&self.inner).transition(BreakerState::Closed, now);
        self.notify(change);
    }

    /// Forcing the state it is already in changes nothing, not even in-flight permits.
    fn force(&self, to: BreakerState) {
        let now = self.clock.now();
        let change = {
            let mut inner = lock(&self.inner);
            if inner.state == to {
                None
            } else {
                inner.transition(to, now)
            }
        };
        self.notify(change);
    }

    fn notify(&self, change: Option<Transition>) {
        if let Some((from, to)) = change {
            tracing::debug!(breaker = %self.name, %from, %to, "circuit breaker state change");
            for listener in &self.listeners {
                listener(&self.name, from, to);
            }
        }
    }
}

/// Proof that a call was admitted; hand it to [`CircuitBreaker::record`]. Dropped unrecorded (e.g. the
/// future was cancelled) it frees its half-open slot and counts nothing, so a lost probe cannot leave the
/// breaker half-open forever.
#[must_use = "pass the permit to CircuitBreaker::record, or the call's outcome is lost"]
pub struct Permit {
    inner: Arc<Mutex<Inner>>,
    generation: u64,
    kind: PermitKind,
    settled: bool,
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit").field("generation", &self.generation).field("kind", &self.kind).finish()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.settled || self.kind != PermitKind::Probe {
            return;
        }
        let mut inner = lock(&self.inner);
        if inner.generation == self.generation {
            inner.probes_in_flight = inner.probes_in_flight.saturating_sub(1);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PermitKind {
    Closed,
    Probe,
    /// Forced closed: admitted, never counted.
    Untracked,
}

use window::{Tally, Window};

#[derive(Debug)]
struct Inner {
    state: BreakerState,
    /// Bumped on every transition and reset; permits carry the value they were issued under.
    generation: u64,
    window: Window,
    probes_in_flight: u32,
    /// Recorded half-open probes. Invariant: `probes_in_flight + probes.calls <= permitted_calls_in_half_open`.
    probes: Tally,
    opened_at: Instant,
}

impl Inner {
    /// Every transition starts from scratch: empty window, no probes, a new generation.
    fn transition(&mut self, to: BreakerState, now: Instant) -> Option<Transition> {
        let from = std::mem::replace(&mut self.state, to);
        self.generation = self.generation.wrapping_add(1);
        self.window.buckets.clear();
        self.window.total = Tally::default();
        self.probes_in_flight = 0;
        self.probes = Tally::default();
        self.opened_at = now;
        (from != to).then_some((from, to))
    }

    /// Ignored outcomes are not recorded at all, so they can neither open the breaker nor dilute its rates.
    fn record_closed(&mut self, now: Instant, sample: Option<Tally>, config: &BreakerConfig) -> Option<Transition> {
        self.window.record(now, sample?);
        // As in resilience4j, a count window never waits for more calls than it can hold.
        let minimum = match config.window {
            SlidingWindow::Count { size } => config.minimum_number_of_calls.min(size),
            SlidingWindow::Time { .. } => config.minimum_number_of_calls,
        };
        if self.window.total.over_threshold(config, minimum) {
            self.transition(BreakerState::Open, now)
        } else {
            None
        }
    }

    /// As in resilience4j, the verdict waits until every permitted probe is recorded, then judges them alone
    /// (the half-open window has `minimum = size = permitted`). An ignored probe frees its slot, counting nothing.
    fn record_probe(&mut self, now: Instant, sample: Option<Tally>, config: &BreakerConfig) -> Option<Transition> {
        self.probes_in_flight = self.probes_in_flight.saturating_sub(1);
        self.probes.add(sample?);
        let permitted = config.permitted_calls_in_half_open;
        if self.probes.calls < permitted {
            return None;
        }
        let verdict =
            if self.probes.over_threshold(config, permitted) { BreakerState::Open } else { BreakerState::Closed };
        self.transition(verdict, now)
    }

    fn admit_probe(&mut self, permitted: u32) -> Result<PermitKind, Rejected> {
        if self.probes_in_flight.saturating_add(self.probes.calls) < permitted {
            self.probes_in_flight += 1;
            Ok(PermitKind::Probe)
        } else {
            Err(Rejected { state: BreakerState::HalfOpen, retry_in: Duration::ZERO })
        }
    }
}

/// Poison recovery: no code that can panic runs under these locks, so the data is consistent even if a
/// holder panicked elsewhere, and refusing service would turn one panic into an outage.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
