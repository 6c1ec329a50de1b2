//! The provider circuit breaker's settings (SPEC §6): its window, thresholds and timings, with
//! their defaults, checked at load time. The breaker itself is `provider::breaker`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which recent calls the closed state judges by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SlidingWindow {
    /// The last `size` recorded calls.
    Count { size: u32 },
    /// Calls recorded within the last `duration`. Calls are grouped into slices of `duration / 64`, and a slice
    /// ages out once its *first* call is `duration` old, so a call may be forgotten up to one slice early: the
    /// price of bounded memory at any call rate.
    Time {
        #[serde(rename = "duration_ms", with = "crate::config::millis")]
        duration: Duration,
    },
}

/// Breaker settings. Durations travel as whole milliseconds in `*_ms` fields; missing fields take defaults
/// and unknown ones are rejected, so a typo cannot silently fall back to a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BreakerConfig {
    pub window: SlidingWindow,
    /// Percent in (0, 100]: the closed window opens when `failures / calls * 100 >= threshold`.
    pub failure_rate_threshold: f64,
    /// Percent in (0, 100]: calls taking at least `slow_call_duration` (failed or not) count as slow.
    pub slow_call_rate_threshold: f64,
    #[serde(rename = "slow_call_duration_ms", with = "crate::config::millis")]
    pub slow_call_duration: Duration,
    /// No rate is evaluated before the window holds this many calls (capped at a count window's size).
    pub minimum_number_of_calls: u32,
    #[serde(rename = "wait_duration_in_open_ms", with = "crate::config::millis")]
    pub wait_duration_in_open: Duration,
    pub permitted_calls_in_half_open: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            window: SlidingWindow::Count { size: 20 },
            failure_rate_threshold: 50.0,
            slow_call_rate_threshold: 100.0,
            slow_call_duration: Duration::from_secs(5),
            minimum_number_of_calls: 10,
            wait_duration_in_open: Duration::from_secs(30),
            permitted_calls_in_half_open: 3,
        }
    }
}

/// Why a [`BreakerConfig`] was refused by [`BreakerConfig::validate`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BreakerConfigError {
    #[error("the sliding window must hold at least one call or last longer than zero")]
    EmptyWindow,
    #[error("{field} must be a percentage in (0, 100], got {value}")]
    Threshold { field: &'static str, value: f64 },
    #[error("{0} must be at least 1")]
    Zero(&'static str),
}

impl BreakerConfig {
    /// Checks a config at load time. `provider::breaker::CircuitBreaker::new` stays infallible: it raises zero counts to 1 so
    /// a bad config can never wedge a breaker, but the service should refuse such a config before that.
    pub fn validate(&self) -> Result<(), BreakerConfigError> {
        if matches!(self.window, SlidingWindow::Count { size: 0 })
            || matches!(self.window, SlidingWindow::Time { duration } if duration.is_zero())
        {
            return Err(BreakerConfigError::EmptyWindow);
        }
        for (field, value) in [
            ("failure_rate_threshold", self.failure_rate_threshold),
            ("slow_call_rate_threshold", self.slow_call_rate_threshold),
        ] {
            if !(value > 0.0 && value <= 100.0) {
                return Err(BreakerConfigError::Threshold { field, value });
            }
        }
        if self.minimum_number_of_calls == 0 {
            return Err(BreakerConfigError::Zero("minimum_number_of_calls"));
        }
        if self.permitted_calls_in_half_open == 0 {
            return Err(BreakerConfigError::Zero("permitted_calls_in_half_open"));
        }
        Ok(())
    }
}
