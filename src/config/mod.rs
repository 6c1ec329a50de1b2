//! Every settings type of the service and its defaults, in one place: the API's ([`AppConfig`]
//! and its parts), the worker's ([`WorkerConfig`]), the retry policies ([`RetryPolicy`], one per
//! job kind), the provider breaker's ([`BreakerConfig`]), how to reach the provider
//! ([`ProviderConfig`]) and the database pool ([`PoolSettings`]); and how durations travel in
//! settings ([`millis`]). The CLI's flags take their defaults from here, and a test checks the
//! README's configuration table against them. Low in the module graph: it imports only
//! `domain`, so every layer (storage included) may read its settings types; the behaviour that
//! uses a setting (the breaker, the backoff) lives with that behaviour.

mod breaker;
mod notify;
mod pool;
mod provider;
pub mod providers;
mod retry;
mod webhooks;

/// The webhook settings' defaults, for the CLI's flags.
pub mod webhook_defaults {
    pub use super::webhooks::{DEFAULT_MAX_BODY_BYTES, DEFAULT_TOLERANCE_S};
}
mod worker;

pub use breaker::{BreakerConfig, BreakerConfigError, SlidingWindow};
pub use notify::NotifySettings;
pub use pool::PoolSettings;
pub use provider::ProviderConfig;
pub use retry::{PolicyError, RetryPolicy};
pub use webhooks::WebhookSettings;
pub use worker::WorkerConfig;

use chrono::TimeDelta;
use rust_decimal::Decimal;

use crate::domain::AmountLimits;

/// How long idempotency records live and how long a claim may run before another request may
/// take it over (`storage::idempotency`).
#[derive(Debug, Clone, Copy)]
pub struct IdempotencySettings {
    pub retention: TimeDelta,
    pub lock_timeout: TimeDelta,
}

impl Default for IdempotencySettings {
    fn default() -> Self {
        Self { retention: TimeDelta::hours(24), lock_timeout: TimeDelta::seconds(30) }
    }
}

/// Serde for a `Duration` as whole milliseconds (`*_ms` fields of retry policies and breaker
/// settings): `#[serde(with = "crate::config::millis")]`.
pub mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Sub-millisecond parts are dropped; absurdly long durations saturate at `u64::MAX` ms.
    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(u64::try_from(value.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}

/// The default maximum of one credit, in major units of any currency (`CREDIT_DEFAULT_MAX`).
pub const CREDIT_DEFAULT_MAX: i64 = 100_000_000;

#[derive(Debug, Clone)]
pub struct AppConfig {
    /// Per-currency maximum of one withdrawal.
    pub limits: AmountLimits,
    /// Per-currency maximum of one credit (`CREDIT_LIMITS`, `CREDIT_DEFAULT_MAX`; default
    /// 100 000 000 in any currency): money entering through `ops::credits`.
    pub credit_limits: AmountLimits,
    pub idempotency: IdempotencySettings,
    /// Largest accepted request body; bigger bodies get a 413 before any parsing.
    pub max_body_bytes: usize,
    /// Replay limits and the approval threshold.
    pub replay: ReplaySettings,
    /// Operator console sessions.
    pub console: ConsoleSettings,
    /// Operator review decisions (SPEC §8.1).
    pub review: ReviewSettings,
    /// Sandbox mode (no `PROVIDER_URL`): new withdrawals are marked `sandbox` and only a sandbox
    /// provider pays them.
    pub sandbox: bool,
    /// Settlement reconciliation (SPEC §14).
    pub settlement: SettlementSettings,
    /// Succeeded jobs are pruned this long after they finished (`JOB_RETENTION_DAYS`, SPEC §5).
    pub job_retention: TimeDelta,
    /// How often every process obeys the stored breaker overrides and reports its breaker
    /// (`BREAKER_SYNC_MS`, default 5 s); a report older than three of these is a stopped process.
    pub breaker_sync: std::time::Duration,
    /// How failed authentications are slowed per source (issue 27).
    pub auth_failures: AuthFailureSettings,
    /// The provider's webhook (SPEC §15).
    pub webhooks: WebhookSettings,
    /// The providers file, validated (SPEC §16); `None` with a lone `PROVIDER_URL` or none.
    pub providers: Option<providers::Providers>,
    /// Customer notifications (SPEC §17).
    pub notify: NotifySettings,
}

/// Failed authentications one source may make at once before it is slowed.
pub const DEFAULT_AUTH_FAILURE_BURST: u32 = 10;
/// After the burst, how many more failures a minute a source may make.
pub const DEFAULT_AUTH_FAILURES_PER_MINUTE: u32 = 6;

/// The per-source limit on failed authentication (an API key, an operator token, a console
/// sign-in): a source that fails `burst` times is answered 429 `too_many_auth_failures` with
/// `Retry-After`, before its credential is checked, until it earns another try (`per_minute`).
/// Successful authentications cost nothing. The source is the peer address (an IPv6 address by
/// its /64), or the last `X-Forwarded-For` entry when `trust_forwarded_for` says a proxy that
/// appends it is in front.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct AuthFailureSettings {
    /// Failed authentications one client address may make at once before it is answered 429.
    #[arg(long = "auth-failure-burst", env = "AUTH_FAILURE_BURST", default_value_t = DEFAULT_AUTH_FAILURE_BURST,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub burst: u32,
    /// After the burst, failed authentications a minute one client address may make.
    #[arg(long = "auth-failures-per-minute", env = "AUTH_FAILURES_PER_MINUTE",
          default_value_t = DEFAULT_AUTH_FAILURES_PER_MINUTE, value_parser = clap::value_parser!(u32).range(1..))]
    pub per_minute: u32,
    /// Take the client address from the last `X-Forwarded-For` entry: only behind a proxy that
    /// appends the address it saw (otherwise a client chooses its own address).
    #[arg(long = "auth-trust-forwarded-for", env = "AUTH_TRUST_FORWARDED_FOR", default_value_t = false,
          action = clap::ArgAction::Set)]
    pub trust_forwarded_for: bool,
}

impl Default for AuthFailureSettings {
    fn default() -> Self {
        Self {
            burst: DEFAULT_AUTH_FAILURE_BURST,
            per_minute: DEFAULT_AUTH_FAILURES_PER_MINUTE,
            trust_forwarded_for: false,
        }
    }
}

/// Settlement reconciliation: the grace days before a completed withdrawal no report shows paid
/// is `missing_from_report`, and the daily import of yesterday's report.
#[derive(Debug, Clone, Copy)]
pub struct SettlementSettings {
    /// `SETTLEMENT_GRACE_DAYS` (default 3).
    pub grace_days: i64,
    /// Workers enqueue the daily import (`SETTLEMENT_DAILY_IMPORT`: on for `serve`/`worker`; off
    /// in this default, which tests and embedded workers use).
    pub daily_import: bool,
    /// Yesterday's report is fetched from this hour (UTC) on (`SETTLEMENT_IMPORT_HOUR`, default 6).
    pub import_hour: u32,
    /// The largest report accepted, in bytes (`SETTLEMENT_MAX_REPORT_BYTES`, default 16 MiB): an
    /// upload over it is refused with 413 before its body is read.
    pub max_report_bytes: usize,
    /// The most lines a report may have (`SETTLEMENT_MAX_REPORT_LINES`, default 100 000).
    pub max_report_lines: usize,
}

impl Default for SettlementSettings {
    fn default() -> Self {
        Self {
            grace_days: 3,
            daily_import: false,
            import_hour: 6,
            max_report_bytes: 16 * 1024 * 1024,
            max_report_lines: 100_000,
        }
    }
}

/// The two-person rule's thresholds and how review decisions judge the provider's answer.
#[derive(Debug, Clone)]
pub struct ReviewSettings {
    /// `complete` and `fail` of an amount at or above the currency's threshold need a second
    /// operator (`REVIEW_APPROVAL_THRESHOLD`, per currency; `REVIEW_APPROVAL_DEFAULT` otherwise).
    pub approval_thresholds: AmountLimits,
    /// An empty lookup is not "no transfer" while an attempt may still reach the provider
    /// (`RECONCILE_GRACE_MS`, as for reconciliation).
    pub in_flight_grace: std::time::Duration,
}

impl ReviewSettings {
    pub fn needs_approval(&self, amount: &crate::domain::Amount) -> bool {
        amount.value() >= self.approval_thresholds.max_for(amount.currency())
    }
}

impl Default for ReviewSettings {
    fn default() -> Self {
        Self {
            approval_thresholds: AmountLimits { default_max: Decimal::from(10_000), ..AmountLimits::default() },
            in_flight_grace: std::time::Duration::from_secs(15),
        }
    }
}

/// How long a console sign-in lasts, and whether its cookie is `Secure` regardless of what the
/// proxy says (behind a TLS-terminating proxy, `X-Forwarded-Proto: https` also makes it so).
#[derive(Debug, Clone, Copy)]
pub struct ConsoleSettings {
    pub session_ttl: chrono::TimeDelta,
    pub secure_cookie: bool,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        Self { session_ttl: chrono::TimeDelta::hours(8), secure_cookie: false }
    }
}

impl Default for AppConfig {
    fn default() -> Self {
        Self {
            limits: AmountLimits { default_max: Decimal::from(1_000_000), ..AmountLimits::default() },
            credit_limits: AmountLimits { default_max: Decimal::from(CREDIT_DEFAULT_MAX), ..AmountLimits::default() },
            idempotency: IdempotencySettings::default(),
            max_body_bytes: 16 * 1024,
            replay: ReplaySettings::default(),
            console: ConsoleSettings::default(),
            review: ReviewSettings::default(),
            sandbox: false,
            settlement: SettlementSettings::default(),
            job_retention: TimeDelta::days(7),
            breaker_sync: std::time::Duration::from_secs(5),
            auth_failures: AuthFailureSettings::default(),
            webhooks: WebhookSettings::default(),
            notify: NotifySettings::default(),
            providers: None,
        }
    }
}

/// Replay limits: gentler than normal traffic by default.
#[derive(Debug, Clone, Copy)]
pub struct ReplaySettings {
    pub approval_threshold: i64,
    pub default_rate_per_second: i64,
    pub default_max_concurrency: i64,
    pub default_auto_pause_threshold: i64,
    pub max_selection: i64,
    /// The most an operator (not an admin) may ask for.
    pub operator_max_rate: i64,
    pub operator_max_concurrency: i64,
}

impl Default for ReplaySettings {
    fn default() -> Self {
        Self {
            approval_threshold: 100,
            default_rate_per_second: 5,
            default_max_concurrency: 4,
            default_auto_pause_threshold: 10,
            max_selection: 10_000,
            operator_max_rate: 20,
            operator_max_concurrency: 8,
        }
    }
}
