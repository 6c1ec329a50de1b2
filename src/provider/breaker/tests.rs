//! The breaker's state machine under a manual clock: every transition, the permit protocol, the
//! windows and the listeners.

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
    assert_eq!(extra.expect_err("third probe"), Rejected { state: BreakerState::HalfOpen, retry_in: Duration::ZERO });
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
    let breaker = CircuitBreaker::new("provider-x", config(), clock.clone()).with_listener(move |name, from, to| {
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
