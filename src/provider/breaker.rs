//! Circuit breaker with resilience4j semantics, guarding calls to one payout provider.
//!
//! Owns: the state machine (closed → open → half-open → closed/open, plus the admin-forced states), the
//! sliding window of recent outcomes, and the permit protocol that ties each outcome back to the state the
//! call was admitted under. Must not: sleep, start timers or tasks, do I/O, decide which errors count as
//! failures (the caller classifies into [`CallOutcome`]) or retry anything (that is `retry`'s job). Time comes
//! only from an injected [`Clock`], so every transition is deterministic under test. There is no `async` here:
//! the internal `std::sync::Mutex` guards short bookkeeping only, never an `.await`, I/O or user code
//! (listeners run after it is released).

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub use crate::config::{BreakerConfig, BreakerConfigError, SlidingWindow};

/// A time window is kept as at most about this many buckets, so memory stays bounded whatever the call rate.
const TIME_BUCKETS: u32 = 64;

/// Source of "now". Monotonic (`Instant`) because a wall-clock jump must never open or close a breaker.
pub trait Clock: Send + Sync + fmt::Debug {
    fn now(&self) -> Instant;
}

/// The production clock: `Instant::now()`.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to; share it as `Arc<ManualClock>` between a test and its breaker.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Instant>,
}

impl ManualClock {
    pub fn new() -> Self {
        Self { now: Mutex::new(Instant::now()) }
    }

    /// Moves time forward; an advance that would overflow `Instant` leaves the clock where it is.
    pub fn advance(&self, by: Duration) {
        let mut now = lock(&self.now);
        *now = now.checked_add(by).unwrap_or(*now);
    }

    pub fn set(&self, to: Instant) {
        *lock(&self.now) = to;
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *lock(&self.now)
    }
}

pub use crate::domain::BreakerState;

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
            window: Window { kind: config.window, buckets: VecDeque::new(), total: Tally::default() },
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

#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    calls: u32,
    failures: u32,
    slow: u32,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.calls = self.calls.saturating_add(other.calls);
        self.failures = self.failures.saturating_add(other.failures);
        self.slow = self.slow.saturating_add(other.slow);
    }

    fn sub(&mut self, other: Tally) {
        self.calls = self.calls.saturating_sub(other.calls);
        self.failures = self.failures.saturating_sub(other.failures);
        self.slow = self.slow.saturating_sub(other.slow);
    }

    /// Rates are only meaningful once `minimum` calls are in: below that, one failure would be 100%.
    fn over_threshold(&self, config: &BreakerConfig, minimum: u32) -> bool {
        if self.calls == 0 || self.calls < minimum {
            return false;
        }
        let percent = |n: u32| f64::from(n) * 100.0 / f64::from(self.calls);
        percent(self.failures) >= config.failure_rate_threshold || percent(self.slow) >= config.slow_call_rate_threshold
    }
}

/// In a count window each bucket holds one call; in a time window, the calls of one slice starting at `start`.
#[derive(Debug)]
struct Bucket {
    start: Instant,
    tally: Tally,
}

/// Invariant: `total` is the sum of the buckets' tallies.
#[derive(Debug)]
struct Window {
    kind: SlidingWindow,
    buckets: VecDeque<Bucket>,
    total: Tally,
}

impl Window {
    fn record(&mut self, now: Instant, sample: Tally) {
        match self.kind {
            SlidingWindow::Count { size } => {
                if self.buckets.len() >= size as usize {
                    if let Some(oldest) = self.buckets.pop_front() {
                        self.total.sub(oldest.tally);
                    }
                }
                self.buckets.push_back(Bucket { start: now, tally: sample });
            }
            SlidingWindow::Time { duration } => {
                while let Some(oldest) = self.buckets.front() {
                    if now.saturating_duration_since(oldest.start) < duration {
                        break;
                    }
                    self.total.sub(oldest.tally);
                    self.buckets.pop_front();
                }
                let slice = duration / TIME_BUCKETS;
                match self.buckets.back_mut() {
                    Some(last) if now.saturating_duration_since(last.start) < slice => last.tally.add(sample),
                    _ => self.buckets.push_back(Bucket { start: now, tally: sample }),
                }
            }
        }
        self.total.add(sample);
    }
}

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
mod tests {
    use super::*;
    use std::sync::Mutex as StdMutex;

    const WAIT: Duration = Duration::from_secs(30);
    const FAST: Duration = Duration::from_millis(10);
    const MS: Duration = Duration::from_millis(1);

    /// Count window of 10, opens at 50% failures once 4 calls are in, 2 half-open probes.
    fn config() -> BreakerConfig {
        BreakerConfig {
            window: SlidingWindow::Count { size: 10 },
            minimum_number_of_calls: 4,
            wait_duration_in_open: WAIT,
            permitted_calls_in_half_open: 2,
            ..BreakerConfig::default()
        }
    }

    fn breaker_with(config: BreakerConfig) -> (CircuitBreaker, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new());
        (CircuitBreaker::new("provider-x", config, clock.clone()), clock)
    }

    fn call(breaker: &CircuitBreaker, outcome: CallOutcome) {
        let permit = breaker.try_acquire().expect("call should be permitted");
        breaker.record(permit, outcome, FAST);
    }

    /// Opens the breaker with four failures, then lets the open wait run out.
    fn open_and_wait(breaker: &CircuitBreaker, clock: &ManualClock) {
        (0..4).for_each(|_| call(breaker, CallOutcome::Failure));
        assert_eq!(breaker.state(), BreakerState::Open);
        clock.advance(WAIT);
    }

    #[test]
    fn stays_closed_below_the_minimum_number_of_calls_even_at_full_failure() {
        let (breaker, _clock) = breaker_with(config());

        (0..3).for_each(|_| call(&breaker, CallOutcome::Failure));

        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[test]
    fn opens_exactly_when_the_failure_rate_reaches_the_threshold() {
        let (breaker, _clock) = breaker_with(config());
        call(&breaker, CallOutcome::Success);
        call(&breaker, CallOutcome::Failure);
        call(&breaker, CallOutcome::Success);
        assert_eq!(breaker.state(), BreakerState::Closed);

        call(&breaker, CallOutcome::Failure); // 2 of 4 = 50%

        assert_eq!(breaker.state(), BreakerState::Open);
    }

    #[test]
    fn stays_closed_just_below_the_threshold() {
        let (breaker, _clock) = breaker_with(config());

        [CallOutcome::Failure, CallOutcome::Success, CallOutcome::Success, CallOutcome::Success, CallOutcome::Failure]
            .into_iter()
            .for_each(|outcome| call(&breaker, outcome)); // 1/4 then 2/5 = 40%

        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[test]
    fn a_count_window_only_remembers_the_last_calls() {
        let (breaker, _clock) = breaker_with(BreakerConfig { window: SlidingWindow::Count { size: 4 }, ..config() });
        call(&breaker, CallOutcome::Failure);

        (0..4).for_each(|_| call(&breaker, CallOutcome::Success)); // pushes the failure out
        call(&breaker, CallOutcome::Failure);

        assert_eq!(breaker.state(), BreakerState::Closed); // 1 of the last 4, not 2
    }

    #[test]
    fn rejects_while_open_with_the_time_left_until_the_wait_ends() {
        let (breaker, clock) = breaker_with(config());
        (0..4).for_each(|_| call(&breaker, CallOutcome::Failure));

        clock.advance(Duration::from_secs(10));
        let rejected = breaker.try_acquire().expect_err("open breaker must reject");

        assert_eq!(rejected, Rejected { state: BreakerState::Open, retry_in: Duration::from_secs(20) });
    }

    #[test]
    fn goes_half_open_only_once_the_wait_has_fully_elapsed() {
        let (breaker, clock) = breaker_with(config());
        (0..4).for_each(|_| call(&breaker, CallOutcome::Failure));

        clock.advance(WAIT - MS);
        let too_early = breaker.try_acquire();
        clock.advance(MS);
        let on_time = breaker.try_acquire();

        assert_eq!(too_early.expect_err("1 ms early").retry_in, MS);
        assert!(on_time.is_ok());
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
    }

    #[test]
    fn hands_out_exactly_the_permitted_probes_in_half_open_and_rejects_the_next() {
        let (breaker, clock) = breaker_with(config());
        open_and_wait(&breaker, &clock);

        let probes = [breaker.try_acquire(), breaker.try_acquire()];
        let extra = breaker.try_acquire();

        assert!(probes.iter().all(Result::is_ok));
        assert_eq!(
            extra.expect_err("third probe"),
            Rejected { state: BreakerState::HalfOpen, retry_in: Duration::ZERO }
        );
    }

    #[test]
    fn closes_with_a_fresh_window_when_the_half_open_probes_succeed() {
        let (breaker, clock) = breaker_with(config());
        open_and_wait(&breaker, &clock);

        call(&breaker, CallOutcome::Success);
        assert_eq!(breaker.state(), BreakerState::HalfOpen); // waits for every probe
        call(&breaker, CallOutcome::Success);

        assert_eq!(breaker.state(), BreakerState::Closed);
        (0..3).for_each(|_| call(&breaker, CallOutcome::Failure)); // old failures are gone: 3 < minimum
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[test]
    fn reopens_and_restarts_the_wait_when_half_open_probes_fail() {
        let (breaker, clock) = breaker_with(config());
        open_and_wait(&breaker, &clock);

        call(&breaker, CallOutcome::Success);
        call(&breaker, CallOutcome::Failure); // 1 of 2 = 50%

        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(breaker.try_acquire().expect_err("reopened").retry_in, WAIT);
    }

    #[test]
    fn forgets_failures_that_aged_out_of_a_time_window() {
        let window = SlidingWindow::Time { duration: Duration::from_secs(60) };
        let (breaker, clock) = breaker_with(BreakerConfig { window, ..config() });
        (0..3).for_each(|_| call(&breaker, CallOutcome::Failure));

        clock.advance(Duration::from_secs(60));
        call(&breaker, CallOutcome::Failure);
        (0..3).for_each(|_| call(&breaker, CallOutcome::Success));

        assert_eq!(breaker.state(), BreakerState::Closed); // 1 of 4 counts, not 4 of 7
    }

    #[test]
    fn a_time_window_still_counts_failures_just_inside_it() {
        let window = SlidingWindow::Time { duration: Duration::from_secs(60) };
        let (breaker, clock) = breaker_with(BreakerConfig { window, ..config() });
        (0..3).for_each(|_| call(&breaker, CallOutcome::Failure));

        clock.advance(Duration::from_secs(60) - MS);
        call(&breaker, CallOutcome::Success);

        assert_eq!(breaker.state(), BreakerState::Open); // 3 of 4
    }

    #[test]
    fn opens_when_slow_successes_reach_the_slow_call_rate_threshold() {
        let slow = Duration::from_secs(2);
        let (breaker, _clock) =
            breaker_with(BreakerConfig { slow_call_duration: slow, slow_call_rate_threshold: 75.0, ..config() });

        for elapsed in [slow, FAST, slow * 3, slow] {
            let permit = breaker.try_acquire().expect("closed");
            breaker.record(permit, CallOutcome::Success, elapsed);
        }

        assert_eq!(breaker.state(), BreakerState::Open);
    }

    #[test]
    fn never_opens_on_ignored_outcomes() {
        let (breaker, _clock) = breaker_with(config());

        (0..50).for_each(|_| call(&breaker, CallOutcome::Ignored));
        (0..3).for_each(|_| call(&breaker, CallOutcome::Success));
        call(&breaker, CallOutcome::Failure);

        assert_eq!(breaker.state(), BreakerState::Closed); // 1 of 4: the ignored calls were not counted
    }

    #[test]
    fn an_ignored_probe_frees_its_slot_without_counting() {
        let (breaker, clock) = breaker_with(config());
        open_and_wait(&breaker, &clock);
        let first = breaker.try_acquire().expect("probe");
        let _second = breaker.try_acquire().expect("probe");

        breaker.record(first, CallOutcome::Ignored, FAST);

        assert!(breaker.try_acquire().is_ok());
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
    }

    #[test]
    fn a_dropped_permit_frees_its_half_open_slot() {
        let (breaker, clock) = breaker_with(config());
        open_and_wait(&breaker, &clock);
        let first = breaker.try_acquire().expect("probe");
        let _second = breaker.try_acquire().expect("probe");

        drop(first);

        assert!(breaker.try_acquire().is_ok());
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
    }

    #[test]
    fn forced_open_rejects_everything_until_reset() {
        let (breaker, clock) = breaker_with(config());

        breaker.force_open();
        clock.advance(WAIT * 10);
        let rejected = breaker.try_acquire();
        breaker.reset();

        assert_eq!(rejected.expect_err("forced open"), Rejected { state: BreakerState::ForcedOpen, retry_in: WAIT });
        assert_eq!(breaker.state(), BreakerState::Closed);
        assert!(breaker.try_acquire().is_ok());
    }

    #[test]
    fn forced_closed_permits_everything_and_records_nothing() {
        let (breaker, _clock) = breaker_with(config());

        breaker.force_closed();
        (0..20).for_each(|_| call(&breaker, CallOutcome::Failure));
        breaker.reset();
        (0..3).for_each(|_| call(&breaker, CallOutcome::Failure));

        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[test]
    fn reset_returns_to_closed_with_an_empty_window() {
        let (breaker, _clock) = breaker_with(config());
        (0..3).for_each(|_| call(&breaker, CallOutcome::Failure));

        breaker.reset();
        (0..3).for_each(|_| call(&breaker, CallOutcome::Success));
        call(&breaker, CallOutcome::Failure);

        assert_eq!(breaker.state(), BreakerState::Closed); // 1 of 4, not 4 of 7
    }

    #[test]
    fn the_listener_sees_every_transition_in_order() {
        let seen = Arc::new(StdMutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let clock = Arc::new(ManualClock::new());
        let breaker =
            CircuitBreaker::new("provider-x", config(), clock.clone()).with_listener(move |name, from, to| {
                sink.lock().expect("test lock").push(format!("{name}: {from} -> {to}"));
            });

        open_and_wait(&breaker, &clock);
        (0..2).for_each(|_| call(&breaker, CallOutcome::Success));
        breaker.force_open();
        breaker.force_closed();
        breaker.reset();

        let expected = ["closed -> open", "open -> half_open", "half_open -> closed", "closed -> forced_open"]
            .into_iter()
            .chain(["forced_open -> forced_closed", "forced_closed -> closed"])
            .map(|t| format!("provider-x: {t}"))
            .collect::<Vec<_>>();
        assert_eq!(*seen.lock().expect("test lock"), expected);
    }

    #[test]
    fn a_late_outcome_from_before_a_transition_does_not_affect_the_new_state() {
        let (breaker, clock) = breaker_with(config());
        let slow_closed_calls: Vec<_> = (0..4).map(|_| breaker.try_acquire().expect("closed")).collect();
        open_and_wait(&breaker, &clock);
        let probe = breaker.try_acquire().expect("probe");

        slow_closed_calls.into_iter().for_each(|late| breaker.record(late, CallOutcome::Failure, FAST));
        breaker.record(probe, CallOutcome::Success, FAST);

        assert_eq!(breaker.state(), BreakerState::HalfOpen); // only 1 of 2 probes is in
        call(&breaker, CallOutcome::Success);
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[test]
    fn config_round_trips_through_json_with_millisecond_fields() {
        let config = BreakerConfig { window: SlidingWindow::Time { duration: Duration::from_secs(60) }, ..config() };

        let json = serde_json::to_value(&config).expect("serialize");
        let back: BreakerConfig = serde_json::from_value(json.clone()).expect("deserialize");

        assert_eq!(back, config);
        assert_eq!(json["window"], serde_json::json!({"type": "time", "duration_ms": 60_000}));
        assert_eq!(json["wait_duration_in_open_ms"], 30_000);
        assert!(serde_json::from_str::<BreakerConfig>(r#"{"wait_duration_in_open": 5}"#).is_err());
    }

    #[test]
    fn validate_accepts_the_defaults_and_rejects_nonsense() {
        let nan = BreakerConfig { failure_rate_threshold: f64::NAN, ..config() };
        let zero_probes = BreakerConfig { permitted_calls_in_half_open: 0, ..config() };

        assert_eq!(BreakerConfig::default().validate(), Ok(()));
        assert!(matches!(nan.validate(), Err(BreakerConfigError::Threshold { field: "failure_rate_threshold", .. })));
        assert_eq!(zero_probes.validate(), Err(BreakerConfigError::Zero("permitted_calls_in_half_open")));
        let empty = BreakerConfig { window: SlidingWindow::Count { size: 0 }, ..config() };
        assert_eq!(empty.validate(), Err(BreakerConfigError::EmptyWindow));
    }

    #[test]
    fn breaker_and_permit_can_cross_threads() {
        fn assert_send_sync<T: Send + Sync>() {}

        assert_send_sync::<CircuitBreaker>();
        assert_send_sync::<Permit>();
    }
}
