//! Retry policy as data: when (and whether) to try a failed provider call again.
//!
//! Owns: exponential backoff with full jitter, honouring a provider's `Retry-After` up to a cap, and the two
//! budgets (attempts and elapsed time). Must not: sleep, read a clock, keep per-call state, classify errors
//! or judge provider health (that is `breaker`'s job). The caller counts attempts and measures elapsed time
//! and passes them in, so a decision is a pure function of its inputs and the injected RNG, and a policy can
//! be stored, compared and loaded from config.

use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

pub use crate::config::{PolicyError, RetryPolicy};

/// Which budget ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exhausted {
    Attempts,
    Elapsed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Wait this long, then make the next attempt.
    RetryAfter(Duration),
    /// Give up; the variant says why.
    Exhausted(Exhausted),
}

impl RetryPolicy {
    /// `min(max_delay, base_delay * 2^(attempts_made - 1))`, with `attempts_made` 0 read as 1.
    ///
    /// Doubles step by step and stops at the cap, so it takes at most ~100 steps and cannot overflow, even
    /// for `attempts_made == u32::MAX` or `Duration::MAX`.
    pub fn backoff_ceiling(&self, attempts_made: u32) -> Duration {
        let mut ceiling = self.base_delay.min(self.max_delay);
        for _ in 1..attempts_made {
            if ceiling >= self.max_delay || ceiling.is_zero() {
                break;
            }
            ceiling = ceiling.saturating_mul(2).min(self.max_delay);
        }
        ceiling
    }

    /// Decides what to do after a failed attempt.
    ///
    /// `attempts_made` (≥ 1) counts the attempts already run, including the one that just failed; `elapsed` is
    /// the time since the first attempt started; `retry_after` is the provider's hint, if any.
    ///
    /// Full jitter: the delay is uniform in `[0, backoff_ceiling(attempts_made)]`, which spreads retries of many
    /// payouts that failed together instead of having them return in lockstep. A `Retry-After` raises the delay
    /// to at least `min(retry_after, max_retry_after)`: the provider's wish is honoured, but capped. Gives up with
    /// [`Exhausted::Attempts`] once `attempts_made >= max_attempts`, and with [`Exhausted::Elapsed`] if the
    /// retry would start after `max_elapsed`: a retry is never scheduled past the budget, only within it.
    pub fn next_delay(
        &self,
        attempts_made: u32,
        elapsed: Duration,
        retry_after: Option<Duration>,
        rng: &mut impl Rng,
    ) -> RetryDecision {
        if attempts_made >= self.max_attempts {
            return RetryDecision::Exhausted(Exhausted::Attempts);
        }
        let ceiling = self.backoff_ceiling(attempts_made).as_nanos();
        let jittered = nanos_to_duration(rng.gen_range(0..=ceiling));
        let delay = match retry_after {
            Some(hint) => jittered.max(hint.min(self.max_retry_after)),
            None => jittered,
        };
        if elapsed.saturating_add(delay) > self.max_elapsed {
            return RetryDecision::Exhausted(Exhausted::Elapsed);
        }
        RetryDecision::RetryAfter(delay)
    }
}

impl RetryPolicy {
    /// Waiting on something known to be under way (a transfer the provider reports `pending`):
    /// the same backoff and window as [`next_delay`](Self::next_delay), but no attempt cap — a
    /// bank transfer may stay pending for days, and only `max_elapsed` decides when to stop.
    pub fn next_poll(&self, polls_made: u32, elapsed: Duration, rng: &mut impl Rng) -> RetryDecision {
        RetryPolicy { max_attempts: u32::MAX, ..self.clone() }.next_delay(polls_made, elapsed, None, rng)
    }
}

/// Only ever called with at most a `Duration`'s worth of nanoseconds, so the seconds fit in a `u64`.
fn nanos_to_duration(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    let secs = u64::try_from(nanos / NANOS_PER_SEC).unwrap_or(u64::MAX);
    Duration::new(secs, (nanos % NANOS_PER_SEC) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    const DAY_MS: u64 = 24 * 60 * 60 * 1000;

    /// Valid policies with durations from 1 ms to a few days and up to 50 attempts.
    fn policy() -> impl Strategy<Value = RetryPolicy> {
        (1..=DAY_MS, 0..=3 * DAY_MS, 1..=50u32, 1..=3 * DAY_MS, 0..=DAY_MS).prop_map(
            |(base, extra, max_attempts, max_elapsed, max_retry_after)| RetryPolicy {
                base_delay: Duration::from_millis(base),
                max_delay: Duration::from_millis(base.saturating_add(extra)),
                max_attempts,
                max_elapsed: Duration::from_millis(max_elapsed),
                max_retry_after: Duration::from_millis(max_retry_after),
            },
        )
    }

    fn up_to_days() -> impl Strategy<Value = Duration> {
        (0..=3 * DAY_MS).prop_map(Duration::from_millis)
    }

    #[test]
    fn a_pending_poll_ignores_the_attempt_cap_but_not_the_window() {
        let policy = RetryPolicy {
            base_delay: Duration::from_secs(5),
            max_delay: Duration::from_secs(600),
            max_attempts: 20,
            max_elapsed: Duration::from_secs(24 * 60 * 60),
            max_retry_after: Duration::from_secs(600),
        };
        let mut rng = StdRng::seed_from_u64(7);
        // Twenty unanswered lookups after an hour: the cap ends them.
        let hour = Duration::from_secs(3600);
        assert_eq!(policy.next_delay(20, hour, None, &mut rng), RetryDecision::Exhausted(Exhausted::Attempts));
        // A transfer still pending after the same hour is polled on.
        assert!(matches!(policy.next_poll(20, hour, &mut rng), RetryDecision::RetryAfter(d) if d <= policy.max_delay));
        assert!(matches!(policy.next_poll(5_000, hour, &mut rng), RetryDecision::RetryAfter(_)));
        // Until the window closes.
        let almost_a_day = Duration::from_secs(24 * 60 * 60 - 1);
        let late = (0..50).map(|_| policy.next_poll(300, almost_a_day, &mut rng)).collect::<Vec<_>>();
        assert!(late.contains(&RetryDecision::Exhausted(Exhausted::Elapsed)), "{late:?}");
        let day = Duration::from_secs(24 * 60 * 60);
        assert_eq!(policy.next_poll(300, day, &mut rng), RetryDecision::Exhausted(Exhausted::Elapsed));
    }

    proptest! {
        #[test]
        fn every_delay_without_retry_after_lies_within_the_backoff_ceiling(
            policy in policy(), attempts in 1..=60u32, elapsed in up_to_days(), seed: u64,
        ) {
            let decision = policy.next_delay(attempts, elapsed, None, &mut StdRng::seed_from_u64(seed));

            // Independent oracle in u128 nanoseconds: base < 2^48 ns and the shift is < 60, so it cannot overflow.
            let oracle = (policy.base_delay.as_nanos() << (attempts - 1)).min(policy.max_delay.as_nanos());
            prop_assert_eq!(policy.backoff_ceiling(attempts).as_nanos(), oracle);
            if let RetryDecision::RetryAfter(delay) = decision {
                prop_assert!(delay.as_nanos() <= oracle);
            }
        }

        #[test]
        fn a_scheduled_retry_never_lands_past_max_elapsed(
            policy in policy(), attempts in 1..=60u32, elapsed in up_to_days(),
            hint in proptest::option::of(up_to_days()), seed: u64,
        ) {
            let decision = policy.next_delay(attempts, elapsed, hint, &mut StdRng::seed_from_u64(seed));

            if let RetryDecision::RetryAfter(delay) = decision {
                prop_assert!(elapsed + delay <= policy.max_elapsed);
            }
        }

        #[test]
        fn retry_after_is_honoured_but_capped(
            policy in policy(), attempts in 1..=60u32, hint in up_to_days(), seed: u64,
        ) {
            let decision = policy.next_delay(attempts, Duration::ZERO, Some(hint), &mut StdRng::seed_from_u64(seed));

            if let RetryDecision::RetryAfter(delay) = decision {
                prop_assert!(delay >= hint.min(policy.max_retry_after));
                prop_assert!(delay <= policy.backoff_ceiling(attempts).max(policy.max_retry_after));
            }
        }

        #[test]
        fn attempts_are_exhausted_exactly_at_max_attempts(policy in policy(), seed: u64) {
            let roomy = RetryPolicy { max_elapsed: Duration::MAX, ..policy };
            let mut rng = StdRng::seed_from_u64(seed);

            let last_retry = roomy.next_delay(roomy.max_attempts - 1, Duration::ZERO, None, &mut rng);
            let at_limit = roomy.next_delay(roomy.max_attempts, Duration::ZERO, None, &mut rng);

            prop_assert!(roomy.max_attempts == 1 || matches!(last_retry, RetryDecision::RetryAfter(_)));
            prop_assert_eq!(at_limit, RetryDecision::Exhausted(Exhausted::Attempts));
        }

        #[test]
        fn huge_attempt_counts_and_long_durations_never_overflow(
            attempts: u32, secs in 0..=u64::MAX / 2, base_nanos in 0..=u64::MAX, elapsed_secs: u64, seed: u64,
        ) {
            let policy = RetryPolicy {
                base_delay: Duration::from_nanos(base_nanos),
                max_delay: Duration::new(secs, 999_999_999),
                max_attempts: u32::MAX,
                max_elapsed: Duration::MAX,
                max_retry_after: Duration::MAX,
            };
            let elapsed = Duration::from_secs(elapsed_secs);

            let decision = policy.next_delay(attempts, elapsed, Some(Duration::MAX), &mut StdRng::seed_from_u64(seed));

            prop_assert!(policy.backoff_ceiling(attempts) <= policy.max_delay);
            prop_assert!(matches!(decision, RetryDecision::RetryAfter(_) | RetryDecision::Exhausted(_)));
        }
    }

    #[test]
    fn backoff_ceiling_doubles_from_the_base_and_stops_at_the_cap() {
        let policy = RetryPolicy::payout_submit();

        let ceilings: Vec<u64> = [0, 1, 2, 3, 9, 10, u32::MAX].map(|n| policy.backoff_ceiling(n).as_secs()).to_vec();

        assert_eq!(ceilings, [1, 1, 2, 4, 256, 300, 300]);
    }

    #[test]
    fn five_retries_in_ten_seconds_and_five_over_two_days_are_different_policies() {
        let hurried = RetryPolicy {
            base_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(4),
            max_attempts: 6,
            max_elapsed: Duration::from_secs(10),
            max_retry_after: Duration::from_secs(5),
        };
        let patient = RetryPolicy {
            base_delay: Duration::from_secs(60),
            max_delay: Duration::from_secs(12 * 60 * 60),
            max_attempts: 6,
            max_elapsed: Duration::from_secs(2 * 24 * 60 * 60),
            max_retry_after: Duration::from_secs(60 * 60),
        };
        let mut rng = StdRng::seed_from_u64(7);
        let (attempts, elapsed) = (3, Duration::from_secs(30)); // the same history for both

        let hurried_says = hurried.next_delay(attempts, elapsed, None, &mut rng);
        let patient_says = patient.next_delay(attempts, elapsed, None, &mut rng);

        assert_eq!(hurried_says, RetryDecision::Exhausted(Exhausted::Elapsed));
        assert!(matches!(patient_says, RetryDecision::RetryAfter(d) if d <= Duration::from_secs(240)));
        for policy in [&hurried, &patient] {
            let sixth = policy.next_delay(6, Duration::ZERO, None, &mut rng);
            assert_eq!(sixth, RetryDecision::Exhausted(Exhausted::Attempts));
        }
    }

    #[test]
    fn a_retry_after_beyond_the_cap_is_cut_to_max_retry_after() {
        let policy = RetryPolicy::payout_submit();

        let decision =
            policy.next_delay(1, Duration::ZERO, Some(Duration::from_secs(86_400)), &mut StdRng::seed_from_u64(1));

        assert_eq!(decision, RetryDecision::RetryAfter(Duration::from_secs(600)));
    }

    #[test]
    fn policy_round_trips_through_json_with_millisecond_fields() {
        let policy = RetryPolicy::reconciliation();

        let json = serde_json::to_value(&policy).expect("serialize");
        let back: RetryPolicy = serde_json::from_value(json.clone()).expect("deserialize");

        assert_eq!(back, policy);
        assert_eq!(json["base_delay_ms"], 5_000);
        assert_eq!(json["max_elapsed_ms"], 86_400_000);
    }

    #[test]
    fn the_presets_are_valid_and_validate_rejects_each_broken_field() {
        let good = RetryPolicy::payout_submit();
        let broken = [
            (RetryPolicy { base_delay: Duration::ZERO, ..good.clone() }, PolicyError::ZeroBaseDelay),
            (RetryPolicy { max_attempts: 0, ..good.clone() }, PolicyError::ZeroMaxAttempts),
            (RetryPolicy { max_elapsed: Duration::ZERO, ..good.clone() }, PolicyError::ZeroMaxElapsed),
        ];
        let inverted = RetryPolicy { max_delay: Duration::from_millis(500), ..good.clone() };

        assert_eq!(good.validate(), Ok(()));
        assert_eq!(RetryPolicy::reconciliation().validate(), Ok(()));
        for (policy, error) in broken {
            assert_eq!(policy.validate(), Err(error));
        }
        assert!(matches!(inverted.validate(), Err(PolicyError::MaxDelayBelowBase { .. })));
    }
}
