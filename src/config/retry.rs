//! Retry policies (SPEC §5): one per job kind — a payout's submit, a reconciliation, a
//! settlement import, a handler that failed instead of deciding — with their defaults, checked
//! at load time. How a policy decides the next delay is `jobs::retry`'s.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A retry policy. Durations travel as whole milliseconds in `*_ms` fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Ceiling of the first retry's delay; each later ceiling doubles it.
    #[serde(rename = "base_delay_ms", with = "crate::config::millis")]
    pub base_delay: Duration,
    /// The cap on any backoff ceiling (a `Retry-After` hint is capped separately, by `max_retry_after`).
    #[serde(rename = "max_delay_ms", with = "crate::config::millis")]
    pub max_delay: Duration,
    /// Total attempts allowed, the first one included: 1 means never retry.
    pub max_attempts: u32,
    /// Time budget measured from the start of the first attempt; no retry is scheduled past it.
    #[serde(rename = "max_elapsed_ms", with = "crate::config::millis")]
    pub max_elapsed: Duration,
    /// A provider's `Retry-After` is honoured up to this, so one bad header cannot park a payout for days.
    #[serde(rename = "max_retry_after_ms", with = "crate::config::millis")]
    pub max_retry_after: Duration,
}

/// Why [`RetryPolicy::validate`] refused a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("base_delay must be greater than zero")]
    ZeroBaseDelay,
    #[error("max_delay ({max_delay:?}) must be at least base_delay ({base_delay:?})")]
    MaxDelayBelowBase { base_delay: Duration, max_delay: Duration },
    #[error("max_attempts must be at least 1")]
    ZeroMaxAttempts,
    #[error("max_elapsed must be greater than zero")]
    ZeroMaxElapsed,
}

impl RetryPolicy {
    /// Default for submitting a payout to a provider: about an hour of patience, a few minutes between tries
    /// at most. A starting point the service may override from config, not a contract.
    pub fn payout_submit() -> Self {
        Self {
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(5 * 60),
            max_attempts: 8,
            max_elapsed: Duration::from_secs(60 * 60),
            max_retry_after: Duration::from_secs(10 * 60),
        }
    }

    /// Default for reconciliation jobs, which can wait: up to a day, many slow attempts. Overridable likewise.
    pub fn reconciliation() -> Self {
        Self {
            base_delay: Duration::from_secs(5),
            max_delay: Duration::from_secs(10 * 60),
            // Sized to the window: at the 10 min cap full jitter averages 5 min, so about 290
            // unanswered lookups fill 24 h (pending answers have no cap: `next_poll`).
            max_attempts: 300,
            max_elapsed: Duration::from_secs(24 * 60 * 60),
            max_retry_after: Duration::from_secs(10 * 60),
        }
    }

    /// Default for fetching a day's settlement report (SPEC §14) that the provider could not serve:
    /// a minute at first, half an hour at most, for up to 12 hours — the report of a day is
    /// useful all the next day, and an unavailable report endpoint is usually a provider incident.
    /// Its own policy: tuning reconciliation never changes it.
    pub fn settlement_import() -> Self {
        Self {
            base_delay: Duration::from_secs(60),
            max_delay: Duration::from_secs(30 * 60),
            max_attempts: 40,
            max_elapsed: Duration::from_secs(12 * 60 * 60),
            max_retry_after: Duration::from_secs(30 * 60),
        }
    }

    /// Default for a handler that fails instead of deciding (our database down, a bug): a
    /// second at first, a minute at most, ten runs or an hour (SPEC §5: our own faults are
    /// retried with the same backoff and jitter, then dead-lettered). Overridable likewise.
    pub fn handler_errors() -> Self {
        Self {
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            max_attempts: 10,
            max_elapsed: Duration::from_secs(60 * 60),
            max_retry_after: Duration::ZERO,
        }
    }

    /// Checks a policy at load time. `jobs::retry`'s `next_delay` never panics on an invalid policy, but
    /// it may give up at once (zero attempts or budget) or retry immediately (zero base), which is rarely meant.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.base_delay.is_zero() {
            return Err(PolicyError::ZeroBaseDelay);
        }
        if self.max_delay < self.base_delay {
            return Err(PolicyError::MaxDelayBelowBase { base_delay: self.base_delay, max_delay: self.max_delay });
        }
        if self.max_attempts == 0 {
            return Err(PolicyError::ZeroMaxAttempts);
        }
        if self.max_elapsed.is_zero() {
            return Err(PolicyError::ZeroMaxElapsed);
        }
        Ok(())
    }
}
