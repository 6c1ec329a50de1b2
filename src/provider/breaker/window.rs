//! The sliding window of recent outcomes: a count window of single calls, or a time window of
//! time-sliced buckets, with the running total the thresholds are judged on.

use std::collections::VecDeque;
use std::time::Instant;

use super::BreakerConfig;
use crate::config::SlidingWindow;

/// A time window is kept as at most about this many buckets, so memory stays bounded whatever the call rate.
pub(super) const TIME_BUCKETS: u32 = 64;

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Tally {
    pub(super) calls: u32,
    pub(super) failures: u32,
    pub(super) slow: u32,
}

impl Tally {
    pub(super) fn add(&mut self, other: Tally) {
        self.calls = self.calls.saturating_add(other.calls);
        self.failures = self.failures.saturating_add(other.failures);
        self.slow = self.slow.saturating_add(other.slow);
    }

    pub(super) fn sub(&mut self, other: Tally) {
        self.calls = self.calls.saturating_sub(other.calls);
        self.failures = self.failures.saturating_sub(other.failures);
        self.slow = self.slow.saturating_sub(other.slow);
    }

    /// Rates are only meaningful once `minimum` calls are in: below that, one failure would be 100%.
    pub(super) fn over_threshold(&self, config: &BreakerConfig, minimum: u32) -> bool {
        if self.calls == 0 || self.calls < minimum {
            return false;
        }
        let percent = |n: u32| f64::from(n) * 100.0 / f64::from(self.calls);
        percent(self.failures) >= config.failure_rate_threshold || percent(self.slow) >= config.slow_call_rate_threshold
    }
}

/// In a count window each bucket holds one call; in a time window, the calls of one slice starting at `start`.
#[derive(Debug)]
pub(super) struct Bucket {
    pub(super) start: Instant,
    pub(super) tally: Tally,
}

/// Invariant: `total` is the sum of the buckets' tallies.
#[derive(Debug)]
pub(super) struct Window {
    pub(super) kind: SlidingWindow,
    pub(super) buckets: VecDeque<Bucket>,
    pub(super) total: Tally,
}

impl Window {
    pub(super) fn new(kind: SlidingWindow) -> Self {
        Window { kind, buckets: VecDeque::new(), total: Tally::default() }
    }

    pub(super) fn record(&mut self, now: Instant, sample: Tally) {
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
