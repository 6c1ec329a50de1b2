//! Metrics (SPEC §9): every metric name is a constant here, and one function records each
//! event, so call sites stay one line and names cannot drift. Prometheus text is served at
//! `/metrics` from the process-wide recorder installed by [`install`].
//!
//! Below storage: this module records and names, it reads nothing. The gauges that come from the
//! database are refreshed by [`crate::gauges`].

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::domain::job::JobKind;
use crate::domain::{BreakerState, Category, WithdrawalStatus};

pub const WITHDRAWALS_CREATED: &str = "withdrawals_created_total";
pub const WITHDRAWAL_TRANSITIONS: &str = "withdrawal_transitions_total";
pub const WITHDRAWALS_BY_STATE: &str = "withdrawals_by_state";
pub const OLDEST_IN_STATE_SECONDS: &str = "withdrawals_oldest_in_state_seconds";
pub const JOB_ATTEMPTS: &str = "job_attempts_total";
pub const JOB_RETRIES: &str = "job_retries_total";
pub const JOB_RETRIES_EXHAUSTED: &str = "job_retries_exhausted_total";
pub const DEAD_LETTERS: &str = "dead_letters_total";
pub const DEAD_LETTERS_OPEN: &str = "dead_letters_open";
pub const LEDGER_INVARIANT_VIOLATIONS: &str = "ledger_invariant_violations";
pub const DEAD_LETTERS_OLDEST_OPEN_SECONDS: &str = "dead_letters_oldest_open_seconds";
pub const BREAKER_STATE: &str = "circuit_breaker_state";
pub const BREAKER_TRANSITIONS: &str = "circuit_breaker_transitions_total";
pub const PROVIDER_REQUEST_SECONDS: &str = "provider_request_duration_seconds";
pub const RECONCILIATIONS: &str = "reconciliation_results_total";
pub const REPLAY_ITEMS: &str = "replay_items_total";
pub const REPLAY_RUNS: &str = "replay_runs";
pub const REPLAY_ITEMS_PENDING: &str = "replay_items_pending";
pub const JOBS_LIVE: &str = "jobs_live";
pub const JOBS_DUE: &str = "jobs_due";
pub const JOBS_OLDEST_DUE_SECONDS: &str = "jobs_oldest_due_seconds";
pub const SETTLEMENT_EXCEPTIONS_OPEN: &str = "settlement_exceptions_open";
pub const SETTLEMENT_EXCEPTION_OLDEST_OPEN_AGE_SECONDS: &str = "settlement_exception_oldest_open_age_seconds";
pub const LEDGER_CHECK_FAILING: &str = "ledger_check_failing";
pub const AUTH_FAILURES: &str = "auth_failures_total";
pub const WEBHOOK_EVENTS: &str = "webhook_events_total";
pub const WEBHOOK_LAST_RECEIVED: &str = "webhook_last_received_timestamp_seconds";
pub const RECONCILIATION_DECISIONS: &str = "reconciliation_decisions_total";
pub const PAYOUT_FAILOVERS: &str = "payout_failovers_total";
pub const NOTIFICATION_DELIVERIES: &str = "notification_deliveries_total";
pub const NOTIFICATION_DELIVERY_SECONDS: &str = "notification_delivery_duration_seconds";
pub const NOTIFICATION_ENDPOINTS: &str = "notification_endpoints";
pub const HTTP_REQUESTS: &str = "http_requests_total";
pub const HTTP_REQUEST_SECONDS: &str = "http_request_duration_seconds";

/// Every metric this service exports, with its type and what it means: the README's list and
/// the alert rules are checked against it.
pub const CATALOGUE: &[(&str, &str, &str)] = &[
    (WITHDRAWALS_CREATED, "counter", "withdrawals accepted, by currency"),
    (WITHDRAWAL_TRANSITIONS, "counter", "state changes, by from and to"),
    (WITHDRAWALS_BY_STATE, "gauge", "withdrawals in each state (database)"),
    (OLDEST_IN_STATE_SECONDS, "gauge", "age of the longest-waiting withdrawal in each state (database)"),
    (JOB_ATTEMPTS, "counter", "job runs, by queue and kind"),
    (JOB_RETRIES, "counter", "job runs rescheduled for a retry, by queue and kind"),
    (JOB_RETRIES_EXHAUSTED, "counter", "jobs whose retry budget ran out, by queue and kind"),
    (DEAD_LETTERS, "counter", "dead-letter arrivals, by queue, job type, category and error code"),
    (DEAD_LETTERS_OPEN, "gauge", "open (not closed) dead letters (database)"),
    (
        LEDGER_INVARIANT_VIOLATIONS,
        "gauge",
        "accounts and currencies whose balances disagree with their ledger or funding (database, SPEC §14.4)",
    ),
    (DEAD_LETTERS_OLDEST_OPEN_SECONDS, "gauge", "age of the oldest open dead letter (database)"),
    (BREAKER_STATE, "gauge", "circuit breaker state per breaker: 0 closed, 1 half-open, 2 open"),
    (BREAKER_TRANSITIONS, "counter", "circuit breaker transitions, by breaker, from and to"),
    (PROVIDER_REQUEST_SECONDS, "histogram", "provider request latency, by provider and outcome class"),
    (RECONCILIATIONS, "counter", "reconciliation results, by provider asked and result"),
    (REPLAY_ITEMS, "counter", "replay items handled, by outcome"),
    (REPLAY_RUNS, "gauge", "replay runs in each status (database)"),
    (REPLAY_ITEMS_PENDING, "gauge", "replay items not yet released, in runs of each status (database)"),
    (JOBS_LIVE, "gauge", "scheduled and running jobs, by queue and status (database)"),
    (JOBS_DUE, "gauge", "scheduled jobs whose time has come, by queue (database)"),
    (JOBS_OLDEST_DUE_SECONDS, "gauge", "how long the oldest due job of each queue has waited (database)"),
    (SETTLEMENT_EXCEPTIONS_OPEN, "gauge", "open settlement exceptions, by kind (database, SPEC §14.2)"),
    (
        SETTLEMENT_EXCEPTION_OLDEST_OPEN_AGE_SECONDS,
        "gauge",
        "age of the oldest open settlement exception of each kind, 0 when none of that kind is open (database)",
    ),
    (
        LEDGER_CHECK_FAILING,
        "gauge",
        "1 while the last periodic ledger check failed to run (ledger_invariant_violations is then stale), else 0",
    ),
    (AUTH_FAILURES, "counter", "failed authentications, by surface (customer_api, ops_api, console)"),
    (
        WEBHOOK_EVENTS,
        "counter",
        "provider webhook requests, by provider (the route's), event type and result (applied, no_op, mismatch, \
         unknown_transfer, unverified, duplicate, bad_signature, stale, malformed)",
    ),
    (
        WEBHOOK_LAST_RECEIVED,
        "gauge",
        "unix time the newest event of a handled type was received, by provider, 0 when none ever was (database, \
         SPEC §15)",
    ),
    (
        RECONCILIATION_DECISIONS,
        "counter",
        "withdrawals decided completed or failed after their outcome was open, by source (webhook, poll, settlement, \
         operator)",
    ),
    (
        PAYOUT_FAILOVERS,
        "counter",
        "withdrawals moved to the next provider for their currency while the first's breaker was open, by from and to \
         (SPEC §16)",
    ),
    (
        NOTIFICATION_DELIVERIES,
        "counter",
        "customer notification delivery attempts, by result (delivered, gone, http_error, timeout, unreachable, \
         refused; SPEC §17)",
    ),
    (
        NOTIFICATION_DELIVERY_SECONDS,
        "histogram",
        "how long a notification delivery attempt took, request sent to answer read (SPEC §17)",
    ),
    (NOTIFICATION_ENDPOINTS, "gauge", "customers' webhook endpoints in each state (database, SPEC §17)"),
    (
        HTTP_REQUESTS,
        "counter",
        "HTTP requests answered, by route template (`unmatched` for the 404 fallback), method and status (499: the \
         client left first)",
    ),
    (
        HTTP_REQUEST_SECONDS,
        "histogram",
        "HTTP request latency, request reaching the router to the response's head, by route template and method",
    ),
];

/// The `route` label of [`HTTP_REQUESTS`] and [`HTTP_REQUEST_SECONDS`] for a request no route
/// matched (the 404 fallback): one series however many paths clients try.
pub const HTTP_ROUTE_UNMATCHED: &str = "unmatched";

/// The `type` label of [`WEBHOOK_EVENTS`] for a request whose body is not trusted (refused) and
/// for a valid event of a type the service does not handle.
pub const WEBHOOK_TYPE_UNKNOWN: &str = "unknown";
pub const WEBHOOK_TYPE_OTHER: &str = "other";

/// The `result` labels of [`WEBHOOK_EVENTS`] for a request refused before its event was read
/// (type [`WEBHOOK_TYPE_UNKNOWN`]).
pub const WEBHOOK_REFUSALS: [&str; 3] = ["bad_signature", "stale", "malformed"];

/// The `source` label of [`RECONCILIATION_DECISIONS`] for a decision's actor, if it is one.
pub fn decision_source(actor: &crate::domain::Actor) -> Option<&'static str> {
    use crate::domain::Actor;
    match actor {
        Actor::Webhook => Some("webhook"),
        Actor::Reconciliation => Some("poll"),
        Actor::Settlement => Some("settlement"),
        Actor::Operator(_) => Some("operator"),
        Actor::Customer | Actor::Worker(_) | Actor::System => None,
    }
}

/// Every value of [`RECONCILIATION_DECISIONS`]'s `source`.
pub const DECISION_SOURCES: [&str; 4] = ["webhook", "poll", "settlement", "operator"];

crate::text_enum! {
    /// Where a credential was presented: the label of [`AUTH_FAILURES`].
    pub enum AuthSurface("auth surface", 3) {
        /// A `wdk_…` API key on the customer API.
        CustomerApi = "customer_api",
        /// A `wdo_…` operator token on `/ops/v1`.
        OpsApi = "ops_api",
        /// An operator token at the console's sign-in.
        Console = "console",
    }
}

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The buckets (seconds) of every latency histogram: provider calls, notification deliveries and
/// HTTP requests. 0.25 is a bound, so the create-latency alert's 250 ms budget is read exactly.
const LATENCY_BUCKETS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// Installs the process-wide recorder once; later calls return the same handle.
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let buckets = LATENCY_BUCKETS;
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(PROVIDER_REQUEST_SECONDS.to_owned()), &buckets)
            .expect("valid buckets")
            .set_buckets_for_metric(Matcher::Full(NOTIFICATION_DELIVERY_SECONDS.to_owned()), &buckets)
            .expect("valid buckets")
            .set_buckets_for_metric(Matcher::Full(HTTP_REQUEST_SECONDS.to_owned()), &buckets)
            .expect("valid buckets")
            .build_recorder();
        let handle = recorder.handle();
        // Another recorder (a test harness) may already be installed; ours still renders.
        let _ = metrics::set_global_recorder(recorder);
        register_known_series();
        handle
    })
}

/// The queues and job kinds the service runs: the label sets of the job families.
fn queues_and_kinds() -> impl Iterator<Item = (&'static str, &'static str)> {
    JobKind::ALL.into_iter().map(|kind| (kind.queue().as_str(), kind.as_str()))
}

/// Outcome classes of a provider call (`provider_request_duration_seconds{outcome}`).
pub const PROVIDER_OUTCOMES: [&str; 6] = ["success", "final_failed", "retryable", "unknown", "permanent", "conflict"];

/// SPEC §9: every family and its known label sets exist from the start, at zero, so an alert
/// reads "0", not "no data", on a process that has seen no traffic yet. The families whose
/// labels come from elsewhere register there: a breaker when it is built ([`breaker_created`]), a
/// provider's latency when its gateway is ([`provider_created`]),
/// a currency when the API starts ([`currencies_known`]), a provider's webhook series when the
/// routes are built from the settings, or its gateway is ([`webhook_providers_known`]), the
/// database gauges where they are refreshed ([`crate::gauges::refresh_loop`]).
fn register_known_series() {
    use crate::domain::{check_transition, Category, ReplayItemStatus};
    for (queue, kind) in queues_and_kinds() {
        let labels = [("queue", queue), ("kind", kind)];
        counter!(JOB_ATTEMPTS, &labels).absolute(0);
        counter!(JOB_RETRIES, &labels).absolute(0);
        counter!(JOB_RETRIES_EXHAUSTED, &labels).absolute(0);
        for category in Category::ALL {
            // The error codes are open-ended: the family's series per category start at an
            // empty code, which `sum by (category)` and every rule read as 0.
            counter!(DEAD_LETTERS, "queue" => queue, "job_type" => kind, "category" => category.as_str(), "error_code" => "")
                .absolute(0);
        }
    }
    for from in WithdrawalStatus::ALL {
        for to in WithdrawalStatus::ALL.into_iter().filter(|to| check_transition(from, *to).is_ok()) {
            counter!(WITHDRAWAL_TRANSITIONS, "from" => from.as_str(), "to" => to.as_str()).absolute(0);
        }
    }
    for outcome in ReplayItemStatus::ALL.into_iter().filter(|s| *s != ReplayItemStatus::Pending) {
        counter!(REPLAY_ITEMS, "outcome" => outcome.as_str()).absolute(0);
    }
    for surface in AuthSurface::ALL {
        counter!(AUTH_FAILURES, "surface" => surface.as_str()).absolute(0);
    }
    for source in DECISION_SOURCES {
        counter!(RECONCILIATION_DECISIONS, "source" => source).absolute(0);
    }
    for result in crate::domain::DeliveryResult::ALL {
        counter!(NOTIFICATION_DELIVERIES, "result" => result.as_str()).absolute(0);
    }
    let _registered = histogram!(NOTIFICATION_DELIVERY_SECONDS);
}

/// The states a breaker can move between, for its transitions' label sets.
const BREAKER_MOVES: [(BreakerState, BreakerState); 4] = [
    (BreakerState::Closed, BreakerState::Open),
    (BreakerState::Open, BreakerState::HalfOpen),
    (BreakerState::HalfOpen, BreakerState::Closed),
    (BreakerState::HalfOpen, BreakerState::Open),
];

/// A breaker was built: its state gauge reads closed (0) and its transitions 0 until they happen.
pub fn breaker_created(name: &str, provider: &str) {
    install();
    gauge!(BREAKER_STATE, "breaker" => name.to_owned(), "provider" => provider.to_owned()).set(0.0);
    for (from, to) in BREAKER_MOVES {
        let (breaker, provider) = (name.to_owned(), provider.to_owned());
        counter!(BREAKER_TRANSITIONS, "breaker" => breaker, "provider" => provider, "from" => from.as_str(), "to" => to.as_str())
            .absolute(0);
    }
}

/// The currencies the API is configured for (its limits name them): their creation counters
/// start at 0.
pub fn currencies_known<'a>(codes: impl IntoIterator<Item = &'a str>) {
    install();
    for code in codes {
        counter!(WITHDRAWALS_CREATED, "currency" => code.to_owned()).absolute(0);
    }
}

pub fn withdrawal_created(currency: &str) {
    counter!(WITHDRAWALS_CREATED, "currency" => currency.to_owned()).increment(1);
}

/// A withdrawal moved. Storage calls this once the transaction that moved it has committed
/// (`storage::withdrawals`, for every transition that applied), so no caller counts by hand.
pub fn transition(from: WithdrawalStatus, to: WithdrawalStatus) {
    counter!(WITHDRAWAL_TRANSITIONS, "from" => from.as_str(), "to" => to.as_str()).increment(1);
}

pub fn job_attempt(queue: &str, kind: &str) {
    counter!(JOB_ATTEMPTS, "queue" => queue.to_owned(), "kind" => kind.to_owned()).increment(1);
}

pub fn job_retry(queue: &str, kind: &str) {
    counter!(JOB_RETRIES, "queue" => queue.to_owned(), "kind" => kind.to_owned()).increment(1);
}

pub fn job_retries_exhausted(queue: &str, kind: &str) {
    counter!(JOB_RETRIES_EXHAUSTED, "queue" => queue.to_owned(), "kind" => kind.to_owned()).increment(1);
}

pub fn dead_lettered(queue: &str, job_type: &str, category: Category, error_code: &str) {
    counter!(DEAD_LETTERS, "queue" => queue.to_owned(), "job_type" => job_type.to_owned(),
             "category" => category.as_str(), "error_code" => error_code.to_owned())
    .increment(1);
}

/// Breaker state as a number: 0 closed, 1 half-open, 2 open (forced states count as their kind).
pub fn breaker_transition(name: &str, provider: &str, from: BreakerState, to: BreakerState) {
    let (breaker, provider) = (name.to_owned(), provider.to_owned());
    counter!(BREAKER_TRANSITIONS, "breaker" => breaker.clone(), "provider" => provider.clone(), "from" => from.as_str(), "to" => to.as_str())
        .increment(1);
    let level = match to {
        BreakerState::Open | BreakerState::ForcedOpen => 2.0,
        BreakerState::HalfOpen => 1.0,
        BreakerState::Closed | BreakerState::ForcedClosed => 0.0,
    };
    gauge!(BREAKER_STATE, "breaker" => breaker, "provider" => provider).set(level);
}

/// A provider's gateway was built (SPEC §16): its latency series exist, one per outcome class, from
/// zero.
pub fn provider_created(provider: &str) {
    install();
    webhook_providers_known([provider]);
    for result in crate::domain::ReconciliationResult::ALL {
        counter!(RECONCILIATIONS, "provider" => provider.to_owned(), "result" => result.as_str()).absolute(0);
    }
    for outcome in PROVIDER_OUTCOMES {
        let _registered = histogram!(PROVIDER_REQUEST_SECONDS, "provider" => provider.to_owned(), "outcome" => outcome);
    }
}

/// The moves from one provider to another that routing can make (SPEC §16): their series exist
/// from zero, once the gateways are assembled.
pub fn failovers_possible<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) {
    install();
    for (from, to) in pairs {
        counter!(PAYOUT_FAILOVERS, "from" => from.to_owned(), "to" => to.to_owned()).absolute(0);
    }
}

/// A withdrawal moved from provider `from` to `to` (committed).
pub fn failover(from: &str, to: &str) {
    counter!(PAYOUT_FAILOVERS, "from" => from.to_owned(), "to" => to.to_owned()).increment(1);
}

pub fn provider_request(provider: &str, outcome_class: &str, elapsed: Duration) {
    histogram!(PROVIDER_REQUEST_SECONDS, "provider" => provider.to_owned(), "outcome" => outcome_class.to_owned())
        .record(elapsed.as_secs_f64());
}

/// One notification delivery attempt and how long it took. No endpoint label: the endpoints are
/// customers' and unbounded; the console and the ops API show each one's health.
pub fn notification_delivery(result: crate::domain::DeliveryResult, elapsed: Duration) {
    counter!(NOTIFICATION_DELIVERIES, "result" => result.as_str()).increment(1);
    histogram!(NOTIFICATION_DELIVERY_SECONDS).record(elapsed.as_secs_f64());
}

/// A reconciliation result of asking `provider` (committed).
pub fn reconciliation(provider: &str, result: &str) {
    counter!(RECONCILIATIONS, "provider" => provider.to_owned(), "result" => result.to_owned()).increment(1);
}

pub fn replay_item(outcome: &str) {
    counter!(REPLAY_ITEMS, "outcome" => outcome.to_owned()).increment(1);
}

/// The providers whose webhooks this process serves or decides on (SPEC §16): every series of
/// [`WEBHOOK_EVENTS`] for each — each handled type or `other` × each result and `duplicate`, and
/// the refusals — from zero. Called with configured names only (the routes' settings, the
/// gateways), never a name a request brought: the label stays a closed set. Called again, it
/// changes no value. ([`WEBHOOK_LAST_RECEIVED`] is a database gauge: [`webhook_gauges_known`].)
pub fn webhook_providers_known<'a>(providers: impl IntoIterator<Item = &'a str>) {
    use crate::domain::webhook::{EventType, WebhookResult};
    install();
    for provider in providers {
        let provider = || provider.to_owned();
        for kind in EventType::ALL.map(EventType::as_str).into_iter().chain([WEBHOOK_TYPE_OTHER]) {
            for result in WebhookResult::ALL.map(WebhookResult::as_str).into_iter().chain(["duplicate"]) {
                counter!(WEBHOOK_EVENTS, "provider" => provider(), "type" => kind, "result" => result).absolute(0);
            }
        }
        for refusal in WEBHOOK_REFUSALS {
            counter!(WEBHOOK_EVENTS, "provider" => provider(), "type" => WEBHOOK_TYPE_UNKNOWN, "result" => refusal)
                .absolute(0);
        }
    }
}

/// The providers whose webhook routes this API process serves: their
/// [`WEBHOOK_LAST_RECEIVED`] reads 0 until a database refresh ([`crate::gauges`], which does not
/// know the configured providers) reads their first event. Added to, not set, so a value a
/// refresh already wrote stays. Only where the refresh runs (the API), so no other process exports
/// a database gauge it never reads.
pub fn webhook_gauges_known<'a>(providers: impl IntoIterator<Item = &'a str>) {
    install();
    for provider in providers {
        gauge!(WEBHOOK_LAST_RECEIVED, "provider" => provider.to_owned()).increment(0.0);
    }
}

/// A provider webhook request at `provider`'s route ended, or its event was decided: `kind` is the
/// event's type (or [`WEBHOOK_TYPE_UNKNOWN`], [`WEBHOOK_TYPE_OTHER`]), `result` one of
/// `domain::webhook::METRIC_RESULTS`. `provider` is always a configured name (the route's, or
/// the stored event's, which was one).
pub fn webhook_event(provider: &str, kind: &str, result: &str) {
    counter!(WEBHOOK_EVENTS, "provider" => provider.to_owned(), "type" => kind.to_owned(), "result" => result.to_owned())
        .increment(1);
}

/// A withdrawal whose outcome was open was decided completed or failed by `source`.
pub fn reconciliation_decision(source: &'static str) {
    counter!(RECONCILIATION_DECISIONS, "source" => source).increment(1);
}

/// The routes and methods a listener serves whose series exist from zero (the customer API's
/// documented ones, `http::observe::documented_routes`): the latency histogram, and the counter
/// with an empty `status` — statuses are open-ended, so, as the dead letters' error code, the
/// counter starts at `""`, which every `sum` reads as 0. Called again, it changes no value.
pub fn http_routes_known<'a>(routes: impl IntoIterator<Item = (&'a str, &'a str)>) {
    install();
    for (route, method) in routes {
        counter!(HTTP_REQUESTS, "route" => route.to_owned(), "method" => method.to_owned(), "status" => "").absolute(0);
        let _registered = histogram!(HTTP_REQUEST_SECONDS, "route" => route.to_owned(), "method" => method.to_owned());
    }
}

/// One HTTP request answered with `status` (or left by its client: 499) after `elapsed`. `route`
/// is the route template, or [`HTTP_ROUTE_UNMATCHED`], never a raw path (`http::observe`).
pub fn http_request(route: &str, method: &'static str, status: &str, elapsed: Duration) {
    counter!(HTTP_REQUESTS, "route" => route.to_owned(), "method" => method, "status" => status.to_owned())
        .increment(1);
    histogram!(HTTP_REQUEST_SECONDS, "route" => route.to_owned(), "method" => method).record(elapsed.as_secs_f64());
}

pub fn auth_failure(surface: AuthSurface) {
    counter!(AUTH_FAILURES, "surface" => surface.as_str()).increment(1);
}
