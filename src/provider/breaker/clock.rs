//! Where the breaker's "now" comes from: the system's monotonic clock, or a manual one for tests.

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::lock;

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
