//! The `withdrawals` command line: one enum of subcommands, each a small async function. It
//! parses flags and environment and dispatches: `serve`/`worker` become [`startup::Settings`] for
//! [`startup::run`]; the operator commands are [`ops_cli`]'s; the rest open the database with
//! [`startup::open`] and print what they did. It builds no part of the service itself.
//!
//! Errors surface as one line on stderr and a non-zero exit (see `main.rs`).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use rust_decimal::Decimal;
use serde_json::json;

use crate::config::AppConfig;
use crate::domain::{AccountId, Amount, AmountLimits, Currency};
use crate::jobs::worker::WorkerConfig;
use crate::ops_cli;
use crate::provider::breaker::BreakerConfig;
use crate::provisioning;
use crate::startup::{self, open, ProviderSettings, Settings};
use crate::storage::PoolSettings;
use crate::telemetry::LogFormat;

/// What a `serve` process runs (`--role`).
pub use crate::domain::ProcessRole;

#[derive(Debug, Parser)]
#[command(name = "withdrawals", version = crate::VERSION, about = "Customer withdrawals, paid out without losing or doubling money")]
pub struct Cli {
    /// `sqlite://PATH` (default, embedded) or `postgres://…`.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "sqlite://withdrawals.db",
        global = true,
        hide_env_values = true
    )]
    pub database_url: String,

    /// The owner's `postgres://…` URL, when the service's (DATABASE_URL) is a role that may only
    /// use the tables (`withdrawals_app`): `serve`, `worker` and `migrate` apply migrations here.
    #[arg(long, env = "MIGRATION_DATABASE_URL", global = true, hide_env_values = true)]
    pub migration_database_url: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service: the HTTP API and the payout workers (`--role`), migrations first.
    Serve(ServeArgs),
    /// Run payout workers only (same as `serve --role worker`); several may share one PostgreSQL.
    Worker(ServeArgs),
    /// Apply database migrations and exit.
    Migrate,
    /// Customer accounts.
    #[command(subcommand)]
    Accounts(AccountsCommand),
    /// Operator credentials.
    #[command(subcommand)]
    Operators(OperatorsCommand),
    /// The whole service at a glance: withdrawals by state, dead letters, queues, breakers, replays;
    /// `--watch` redraws it in place, like `top`, until Ctrl-C.
    Status {
        #[command(flatten)]
        conn: ops_cli::Connection,
        #[command(flatten)]
        watch: ops_cli::StatusArgs,
    },
    /// Provider circuit breakers across every process (API and workers), their overrides; and
    /// the kill switch: `force-open`, `force-closed`, `release` (admin, with a reason).
    Breakers {
        #[command(subcommand)]
        command: Option<ops_cli::BreakersCommand>,
        #[command(flatten)]
        conn: ops_cli::Connection,
    },
    /// The ledger: `verify` checks the invariant for every account and currency, and with
    /// `--date` a day's totals against its settlement report (calls /ops/v1/ledger/verify); exits
    /// non-zero on any difference, naming it.
    Ledger {
        #[command(flatten)]
        conn: ops_cli::Connection,
        #[command(subcommand)]
        command: ops_cli::LedgerCommand,
    },
    /// Settlement reconciliation: import a day's report, list the imported versions, list, show
    /// and resolve settlement exceptions (calls /ops/v1/settlement).
    Settlement {
        #[command(flatten)]
        conn: ops_cli::Connection,
        #[command(subcommand)]
        command: ops_cli::SettlementCommand,
    },
    /// The provider's webhook events and what each came to: list and show (calls /ops/v1).
    Webhooks {
        #[command(flatten)]
        conn: ops_cli::Connection,
        #[command(subcommand)]
        command: ops_cli::WebhooksCommand,
    },
    /// Customer notifications (SPEC §17): webhook endpoints with their health, notifications
    /// with what each receiver answered, and redelivery (calls /ops/v1).
    Notifications {
        #[command(flatten)]
        conn: ops_cli::Connection,
        #[command(subcommand)]
        command: ops_cli::NotificationsCommand,
    },
    /// The review queue: list, show and resolve `requires_review` withdrawals (calls /ops/v1).
    Review {
        #[command(flatten)]
        conn: ops_cli::Connection,
        #[command(subcommand)]
        command: ops_cli::ReviewCommand,
    },
    /// Dead letters: list, summary, show, close (calls /ops/v1).
    Dlq {
        #[command(flatten)]
        conn: ops_cli::Connection,
        #[command(subcommand)]
        command: ops_cli::DlqCommand,
    },
    /// Deliberate replays of dead letters: start (with --dry-run), status, pause, resume, cancel, approve.
    Replay {
        #[command(flatten)]
        conn: ops_cli::Connection,
        #[command(subcommand)]
        command: ops_cli::ReplayCommand,
    },
    /// The provider mock as a process (used by `withdrawals-tools chaos`).
    #[command(hide = true)]
    ProviderMock {
        #[arg(long, default_value_t = 0)]
        port: u16,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long)]
        api_key: Option<String>,
        /// Where the mock sends its signed events (SPEC §15); none, it sends nothing.
        #[arg(long, env = "PROVIDER_MOCK_WEBHOOK_URL")]
        webhook_url: Option<String>,
        /// The secrets it signs them with, comma-separated (one `v1=` each).
        #[arg(long, env = "PROVIDER_MOCK_WEBHOOK_SECRET", value_delimiter = ',', hide_env_values = true)]
        webhook_secret: Vec<String>,
    },
    /// The operator audit log (calls /ops/v1).
    Audit {
        #[command(flatten)]
        conn: ops_cli::Connection,
        #[arg(long)]
        action: Option<String>,
        #[arg(long)]
        target: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
    },
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// What this process runs.
    #[arg(long, env = "ROLE", value_enum, default_value = "all")]
    pub role: ProcessRole,
    /// The payout provider's base URL. Unset: sandbox mode, an in-process provider mock — allowed
    /// on the embedded SQLite database, and on PostgreSQL only with `--sandbox`.
    #[arg(long, env = "PROVIDER_URL")]
    pub provider_url: Option<String>,
    /// Run in sandbox mode deliberately (no `PROVIDER_URL`): required on PostgreSQL, so a
    /// production deployment that lost its provider setting refuses to start instead of
    /// pretending to pay.
    #[arg(long, env = "WITHDRAWALS_SANDBOX", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::SetTrue)]
    pub sandbox: bool,
    /// Bearer credential for the provider (never logged).
    #[arg(long, env = "PROVIDER_API_KEY", hide_env_values = true)]
    pub provider_api_key: Option<String>,
    /// The providers file (SPEC §16, JSON or TOML by its extension), instead of PROVIDER_URL: read
    /// and checked at start. This version pays through one provider, so the file may name one.
    #[arg(long, env = "PROVIDERS")]
    pub providers: Option<std::path::PathBuf>,
    /// Provider connect timeout in milliseconds.
    #[arg(long, env = "PROVIDER_CONNECT_TIMEOUT_MS", default_value_t = 2_000)]
    pub provider_connect_timeout_ms: u64,
    /// Provider overall request timeout in milliseconds.
    #[arg(long, env = "PROVIDER_TIMEOUT_MS", default_value_t = 10_000)]
    pub provider_timeout_ms: u64,
    /// Jobs one worker process runs at once.
    #[arg(long, env = "WORKER_CONCURRENCY", default_value_t = 16)]
    pub worker_concurrency: usize,
    /// Jobs one worker process claims per transaction (at most its concurrency).
    #[arg(long, env = "WORKER_CLAIM_BATCH", default_value_t = 16)]
    pub claim_batch: u32,
    /// Address to listen on.
    #[arg(long, env = "BIND_ADDR", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Serve `/metrics` and `/healthz` here: a worker-only process's breaker, job and provider
    /// metrics exist only in it; an API process then serves no `/metrics` on its API port.
    #[arg(long, env = "METRICS_BIND")]
    pub metrics_bind: Option<SocketAddr>,
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "pretty")]
    pub log_format: LogFormat,
    /// Per-currency maximum of one withdrawal, e.g. `USD=50000,JPY=5000000`.
    #[arg(long, env = "WITHDRAWAL_LIMITS", default_value = "")]
    pub limits: String,
    /// Maximum for currencies not named in `--limits`.
    #[arg(long, env = "WITHDRAWAL_DEFAULT_MAX", default_value = "1000000")]
    pub default_max: Decimal,
    #[command(flatten)]
    pub credit_limits: CreditLimitArgs,
    /// How long idempotency keys are remembered, in hours (at least 24 is recommended).
    #[arg(long, env = "IDEMPOTENCY_RETENTION_HOURS", default_value_t = 24)]
    pub idempotency_retention_hours: i64,
    /// Succeeded jobs are pruned this many days after they finished (SPEC §5).
    #[arg(long, env = "JOB_RETENTION_DAYS", default_value_t = 7)]
    pub job_retention_days: i64,
    /// How often this process obeys the stored breaker overrides and reports its breaker's
    /// state (SPEC §8: "within one poll interval").
    #[arg(long, env = "BREAKER_SYNC_MS", default_value_t = 5_000)]
    pub breaker_sync_ms: u64,
    /// Largest accepted request body in bytes.
    #[arg(long, env = "MAX_BODY_BYTES", default_value_t = 16 * 1024)]
    pub max_body_bytes: usize,
    /// Replays of more dead letters than this wait for a second operator's approval.
    #[arg(long, env = "REPLAY_APPROVAL_THRESHOLD", default_value_t = 100)]
    pub replay_approval_threshold: i64,
    /// Review decisions (`complete`, `fail`) at or above this amount need a second operator, per
    /// currency, e.g. `USD=10000,JPY=1000000`.
    #[arg(long, env = "REVIEW_APPROVAL_THRESHOLD", default_value = "")]
    pub review_approval_threshold: String,
    /// The two-person threshold for currencies not named in `--review-approval-threshold`.
    #[arg(long, env = "REVIEW_APPROVAL_DEFAULT", default_value = "10000")]
    pub review_approval_default: Decimal,
    /// How long an operator console sign-in lasts, in hours.
    #[arg(long, env = "CONSOLE_SESSION_HOURS", default_value_t = 8)]
    pub console_session_hours: i64,
    /// Always mark the console's session cookie `Secure` (it already is when a proxy sends
    /// `X-Forwarded-Proto: https`).
    #[arg(long, env = "CONSOLE_SECURE_COOKIE")]
    pub console_secure_cookie: bool,
    /// Days after its completion before a withdrawal no settlement report shows paid is a
    /// `missing_from_report` exception.
    #[arg(long, env = "SETTLEMENT_GRACE_DAYS", default_value_t = 3)]
    pub settlement_grace_days: i64,
    /// Workers import yesterday's settlement report every day (`false` to import by hand only).
    #[arg(long, env = "SETTLEMENT_DAILY_IMPORT", default_value_t = true, action = clap::ArgAction::Set)]
    pub settlement_daily_import: bool,
    /// The hour (UTC) from which yesterday's report is fetched.
    #[arg(long, env = "SETTLEMENT_IMPORT_HOUR", default_value_t = 6, value_parser = clap::value_parser!(u32).range(0..24))]
    pub settlement_import_hour: u32,
    /// The provider webhook's signing secrets, comma-separated (several at once while rotating);
    /// unset, `POST /webhooks/provider` does not exist.
    #[arg(long, env = "PROVIDER_WEBHOOK_SECRET", hide_env_values = true, value_parser = secret_list)]
    pub provider_webhook_secret: Option<SecretList>,
    /// How far a webhook signature's timestamp may be from now, in seconds.
    #[arg(long, env = "WEBHOOK_TOLERANCE_S", default_value_t = crate::config::webhook_defaults::DEFAULT_TOLERANCE_S)]
    pub webhook_tolerance_s: u64,
    /// The largest webhook body read, in bytes.
    #[arg(long, env = "WEBHOOK_MAX_BODY_BYTES", default_value_t = crate::config::webhook_defaults::DEFAULT_MAX_BODY_BYTES)]
    pub webhook_max_body_bytes: usize,
    /// The largest settlement report accepted, in bytes (an upload's CSV, or a provider's report).
    #[arg(long, env = "SETTLEMENT_MAX_REPORT_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub settlement_max_report_bytes: usize,
    /// The most lines a settlement report may have.
    #[arg(long, env = "SETTLEMENT_MAX_REPORT_LINES", default_value_t = 100_000)]
    pub settlement_max_report_lines: usize,
    /// Database pool size.
    #[arg(long, env = "DATABASE_MAX_CONNECTIONS", default_value_t = 16)]
    pub max_connections: u32,
    #[command(flatten)]
    pub tuning: WorkerTuning,
    #[command(flatten)]
    pub notify: NotifyArgs,
    #[command(flatten)]
    pub server: crate::http::limits::ServerLimits,
    #[command(flatten)]
    pub auth_failures: crate::config::AuthFailureSettings,
}

/// The worker's clocks. The defaults suit production; tests and the chaos run shorten them. Each
/// flag's default is read from the setting it overrides ([`WorkerConfig::new`], the retry
/// policies, the breaker's config), so a default lives in one place.
#[derive(Debug, Clone, Args)]
pub struct WorkerTuning {
    /// How long a claimed job is leased; a worker that dies loses its jobs after this.
    #[arg(long, env = "WORKER_LEASE_MS", default_value_t = ms(worker_default().lease))]
    pub lease_ms: u64,
    /// How often a running job renews its lease.
    #[arg(long, env = "WORKER_HEARTBEAT_MS", default_value_t = ms(worker_default().heartbeat))]
    pub heartbeat_ms: u64,
    /// Polling fallback when no wake-up arrives.
    #[arg(long, env = "WORKER_POLL_MS", default_value_t = ms(worker_default().poll_interval))]
    pub poll_ms: u64,
    /// How often the stuck-`processing` sweep runs.
    #[arg(long, env = "WORKER_SWEEP_INTERVAL_MS", default_value_t = ms(worker_default().sweep_interval))]
    pub sweep_interval_ms: u64,
    /// A withdrawal in `processing` with no live job for this long is reconciled by the sweep.
    #[arg(long, env = "PROCESSING_SLA_SECS", default_value_t = worker_default().processing_sla.as_secs())]
    pub processing_sla_secs: u64,
    /// Reconciliation trusts "not found" only after this long since the last call could arrive.
    #[arg(long, env = "RECONCILE_GRACE_MS", default_value_t = ms(worker_default().in_flight_grace))]
    pub reconcile_grace_ms: u64,
    /// How soon a transfer the provider reports `pending` is looked up again.
    #[arg(long, env = "PENDING_POLL_MS", default_value_t = ms(worker_default().pending_poll))]
    pub pending_poll_ms: u64,
    /// Webhooks count as healthy while the newest provider event is younger than this.
    #[arg(long, env = "WEBHOOK_HEALTHY_S", default_value_t = worker_default().webhook_healthy_within.as_secs())]
    pub webhook_healthy_s: u64,
    /// While webhooks are healthy, a pending transfer is looked up no more often than this.
    #[arg(long, env = "PENDING_POLL_WITH_WEBHOOKS_MS", default_value_t = ms(worker_default().pending_poll_with_webhooks))]
    pub pending_poll_with_webhooks_ms: u64,
    /// First retry delay of a payout submit (doubles, with jitter).
    #[arg(long, env = "SUBMIT_BASE_DELAY_MS", default_value_t = ms(worker_default().submit_policy.base_delay))]
    pub submit_base_delay_ms: u64,
    /// First retry delay of a reconciliation.
    #[arg(long, env = "RECONCILE_BASE_DELAY_MS", default_value_t = ms(worker_default().reconcile_policy.base_delay))]
    pub reconcile_base_delay_ms: u64,
    /// Largest delay between reconciliation attempts.
    #[arg(long, env = "RECONCILE_MAX_DELAY_MS", default_value_t = ms(worker_default().reconcile_policy.max_delay))]
    pub reconcile_max_delay_ms: u64,
    /// The reconciliation window: how long an unknown or `pending` outcome is asked about before
    /// it goes to review (default 24 h).
    #[arg(long, env = "RECONCILE_MAX_ELAPSED_MS", default_value_t = ms(worker_default().reconcile_policy.max_elapsed))]
    pub reconcile_max_elapsed_ms: u64,
    /// Unanswered lookups allowed in the window (`pending` answers are not capped).
    #[arg(long, env = "RECONCILE_MAX_ATTEMPTS", default_value_t = worker_default().reconcile_policy.max_attempts)]
    pub reconcile_max_attempts: u32,
    /// Provider attempts per withdrawal before `retries_exhausted`, the first included.
    #[arg(long, env = "SUBMIT_MAX_ATTEMPTS", default_value_t = worker_default().submit_policy.max_attempts)]
    pub submit_max_attempts: u32,
    /// Largest delay between submit retries.
    #[arg(long, env = "SUBMIT_MAX_DELAY_MS", default_value_t = ms(worker_default().submit_policy.max_delay))]
    pub submit_max_delay_ms: u64,
    /// Time budget of a withdrawal's submit retries, from its first attempt.
    #[arg(long, env = "SUBMIT_MAX_ELAPSED_MS", default_value_t = ms(worker_default().submit_policy.max_elapsed))]
    pub submit_max_elapsed_ms: u64,
    /// A provider's `Retry-After` is honoured up to this.
    #[arg(long, env = "MAX_RETRY_AFTER_MS", default_value_t = ms(worker_default().submit_policy.max_retry_after))]
    pub max_retry_after_ms: u64,
    /// How long the provider breaker stays open before letting trial calls through.
    #[arg(long, env = "BREAKER_WAIT_OPEN_MS", default_value_t = ms(crate::provider::breaker::BreakerConfig::default().wait_duration_in_open))]
    pub breaker_wait_open_ms: u64,
    /// A job run that fails instead of deciding (our database down, a bug) runs again after a
    /// random delay up to this, doubling per failed run (full jitter).
    #[arg(long, env = "HANDLER_ERROR_BASE_DELAY_MS", default_value_t = ms(worker_default().handler_error_policy.base_delay))]
    pub handler_error_base_delay_ms: u64,
    /// The cap on that delay.
    #[arg(long, env = "HANDLER_ERROR_MAX_DELAY_MS", default_value_t = ms(worker_default().handler_error_policy.max_delay))]
    pub handler_error_max_delay_ms: u64,
    /// Failed runs in a row, the first included, before the job is dead-lettered
    /// (`infrastructure` for our database's errors, `code_bug` otherwise).
    #[arg(long, env = "HANDLER_ERROR_MAX_ATTEMPTS", default_value_t = worker_default().handler_error_policy.max_attempts)]
    pub handler_error_max_attempts: u32,
    /// Or once the job is this old.
    #[arg(long, env = "HANDLER_ERROR_MAX_ELAPSED_MS", default_value_t = ms(worker_default().handler_error_policy.max_elapsed))]
    pub handler_error_max_elapsed_ms: u64,
}

/// `PROVIDER_WEBHOOK_SECRET`: the comma-separated list, read straight into secret values (never a
/// plain `String` a `Debug` print could show).
#[derive(Debug, Clone)]
pub struct SecretList(pub Vec<secrecy::SecretString>);

fn secret_list(value: &str) -> Result<SecretList, String> {
    Ok(SecretList(crate::config::WebhookSettings::secrets_from(value)))
}

/// The settings every flag of [`WorkerTuning`] defaults to.
fn worker_default() -> WorkerConfig {
    WorkerConfig::new("defaults")
}

/// A duration as the whole milliseconds a flag takes.
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl WorkerTuning {
    pub fn apply(&self, config: &mut WorkerConfig) {
        config.lease = Duration::from_millis(self.lease_ms);
        config.heartbeat = Duration::from_millis(self.heartbeat_ms);
        config.poll_interval = Duration::from_millis(self.poll_ms);
        config.sweep_interval = Duration::from_millis(self.sweep_interval_ms);
        config.processing_sla = Duration::from_secs(self.processing_sla_secs);
        config.in_flight_grace = Duration::from_millis(self.reconcile_grace_ms);
        config.pending_poll = Duration::from_millis(self.pending_poll_ms);
        config.webhook_healthy_within = Duration::from_secs(self.webhook_healthy_s);
        config.pending_poll_with_webhooks = Duration::from_millis(self.pending_poll_with_webhooks_ms);
        config.submit_policy.base_delay = Duration::from_millis(self.submit_base_delay_ms);
        config.reconcile_policy.base_delay = Duration::from_millis(self.reconcile_base_delay_ms);
        config.reconcile_policy.max_delay = Duration::from_millis(self.reconcile_max_delay_ms);
        config.reconcile_policy.max_elapsed = Duration::from_millis(self.reconcile_max_elapsed_ms);
        config.reconcile_policy.max_attempts = self.reconcile_max_attempts;
        config.reconcile_policy.max_retry_after = Duration::from_millis(self.max_retry_after_ms);
        config.submit_policy.max_attempts = self.submit_max_attempts;
        config.submit_policy.max_delay = Duration::from_millis(self.submit_max_delay_ms);
        config.submit_policy.max_elapsed = Duration::from_millis(self.submit_max_elapsed_ms);
        config.submit_policy.max_retry_after = Duration::from_millis(self.max_retry_after_ms);
        config.handler_error_policy.base_delay = Duration::from_millis(self.handler_error_base_delay_ms);
        config.handler_error_policy.max_delay = Duration::from_millis(self.handler_error_max_delay_ms);
        config.handler_error_policy.max_attempts = self.handler_error_max_attempts;
        config.handler_error_policy.max_elapsed = Duration::from_millis(self.handler_error_max_elapsed_ms);
    }

    pub fn breaker(&self) -> BreakerConfig {
        BreakerConfig { wait_duration_in_open: Duration::from_millis(self.breaker_wait_open_ms), ..Default::default() }
    }
}

/// Customer notifications (SPEC §17).
#[derive(Debug, Clone, Args)]
pub struct NotifyArgs {
    /// Allow `http` endpoint URLs and loopback or private addresses (development and tests only;
    /// logged loudly at start).
    #[arg(long, env = "NOTIFY_ALLOW_INSECURE", default_value_t = false, action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub notify_allow_insecure: bool,
    /// The key sealing endpoints' signing secrets: 64 hex digits. Unset with a SQLite file, a key
    /// file beside the database (`<file>.notify-key`, made on first start, mode 0600).
    #[arg(long, env = "NOTIFY_SECRET_KEY", hide_env_values = true)]
    pub notify_secret_key: Option<String>,
    /// How long a rotated-out signing secret still signs, in seconds (24 h).
    #[arg(long, env = "NOTIFY_ROTATION_OVERLAP_S", default_value_t = notify_default().rotation_overlap.as_secs())]
    pub notify_rotation_overlap_s: u64,
    /// First retry delay of a delivery (doubles, with full jitter).
    #[arg(long, env = "NOTIFY_BASE_DELAY_MS", default_value_t = ms(notify_default().retry.base_delay))]
    pub notify_base_delay_ms: u64,
    /// Largest delay between deliveries' retries (and the most of a `Retry-After` honoured).
    #[arg(long, env = "NOTIFY_MAX_DELAY_MS", default_value_t = ms(notify_default().retry.max_delay))]
    pub notify_max_delay_ms: u64,
    /// How long an event is retried, from when it was written (3 days), before it is dead-lettered.
    #[arg(long, env = "NOTIFY_MAX_ELAPSED_MS", default_value_t = ms(notify_default().retry.max_elapsed))]
    pub notify_max_elapsed_ms: u64,
    /// A delivery's connect timeout.
    #[arg(long, env = "NOTIFY_CONNECT_TIMEOUT_MS", default_value_t = ms(notify_default().connect_timeout))]
    pub notify_connect_timeout_ms: u64,
    /// A delivery's total timeout.
    #[arg(long, env = "NOTIFY_TIMEOUT_MS", default_value_t = ms(notify_default().request_timeout))]
    pub notify_timeout_ms: u64,
    /// An endpoint whose every delivery failed for longer than this is disabled.
    #[arg(long, env = "NOTIFY_DISABLE_AFTER_MS", default_value_t = ms(notify_default().disable_after))]
    pub notify_disable_after_ms: u64,
    /// Deliveries at once per worker process, on slots of their own.
    #[arg(long, env = "NOTIFY_CONCURRENCY", default_value_t = notify_default().concurrency)]
    pub notify_concurrency: usize,
    /// How long each endpoint's breaker stays open before a trial delivery.
    #[arg(long, env = "NOTIFY_BREAKER_WAIT_OPEN_MS", default_value_t = ms(notify_default().breaker.wait_duration_in_open))]
    pub notify_breaker_wait_open_ms: u64,
    /// The events API shows an event once it is this old (a page never passes by one still
    /// committing).
    #[arg(long, env = "EVENTS_SETTLE_MS", default_value_t = ms(notify_default().events_settle))]
    pub events_settle_ms: u64,
}

fn notify_default() -> crate::config::NotifySettings {
    crate::config::NotifySettings::default()
}

impl NotifyArgs {
    /// The settings, the key read or made; `warnings` gets what start should say.
    pub fn settings(
        &self,
        database_url: &str,
        warnings: &mut Vec<String>,
    ) -> anyhow::Result<crate::config::NotifySettings> {
        let mut s = crate::config::NotifySettings {
            allow_insecure: self.notify_allow_insecure,
            rotation_overlap: Duration::from_secs(self.notify_rotation_overlap_s),
            connect_timeout: Duration::from_millis(self.notify_connect_timeout_ms.max(1)),
            request_timeout: Duration::from_millis(self.notify_timeout_ms.max(1)),
            disable_after: Duration::from_millis(self.notify_disable_after_ms),
            concurrency: self.notify_concurrency.max(1),
            events_settle: Duration::from_millis(self.events_settle_ms),
            ..crate::config::NotifySettings::default()
        };
        s.retry.base_delay = Duration::from_millis(self.notify_base_delay_ms.max(1));
        s.retry.max_delay = Duration::from_millis(self.notify_max_delay_ms).max(s.retry.base_delay);
        s.retry.max_retry_after = s.retry.max_delay;
        s.retry.max_elapsed = Duration::from_millis(self.notify_max_elapsed_ms.max(1));
        s.breaker.wait_duration_in_open = Duration::from_millis(self.notify_breaker_wait_open_ms);
        let key = match (&self.notify_secret_key, sqlite_file(database_url)) {
            (Some(hex), _) => Some(crate::config::NotifySettings::parse_key(hex).map_err(anyhow::Error::msg)?),
            (None, Some(file)) => Some(key_file(&format!("{file}.notify-key"))?),
            (None, None) => {
                warnings.push(
                    "NOTIFY_SECRET_KEY is not set: customers cannot register webhook endpoints and no notification \
                     is delivered (set 64 hex digits, e.g. from `openssl rand -hex 32`)"
                        .to_owned(),
                );
                None
            }
        };
        s.secret_key = key.map(std::sync::Arc::new);
        if s.allow_insecure {
            warnings.push(
                "NOTIFY_ALLOW_INSECURE is on: notification endpoints may be http and point at loopback or private \
                 addresses — development and tests only, never production"
                    .to_owned(),
            );
        }
        Ok(s)
    }
}

/// The path of a SQLite database file (`sqlite://path`, `sqlite:path`), if the URL names one.
fn sqlite_file(database_url: &str) -> Option<String> {
    let rest = database_url.strip_prefix("sqlite://").or_else(|| database_url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or("");
    (!path.is_empty() && !path.contains(":memory:") && !path.starts_with("file::memory")).then(|| path.to_owned())
}

/// The key in `path` (64 hex digits), made with 32 random bytes if the file does not exist.
fn key_file(path: &str) -> anyhow::Result<secrecy::SecretBox<[u8; 32]>> {
    use std::io::Write;
    match std::fs::read_to_string(path) {
        Ok(hex) => crate::config::NotifySettings::parse_key(&hex).map_err(|e| anyhow::anyhow!("{path}: {e}")),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            use rand::RngCore;
            let mut key = [0u8; 32];
            rand::rngs::OsRng.fill_bytes(&mut key);
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut file = options.open(path).map_err(|e| anyhow::anyhow!("cannot create the key file {path}: {e}"))?;
            file.write_all(hex::encode(key).as_bytes())?;
            tracing::warn!(path, "made a notification signing-secret key file beside the SQLite database");
            Ok(secrecy::SecretBox::new(Box::new(key)))
        }
        Err(err) => Err(anyhow::anyhow!("cannot read the key file {path}: {err}")),
    }
}

/// The largest single credit (money entering an account), per currency.
#[derive(Debug, Clone, Args)]
pub struct CreditLimitArgs {
    /// Per-currency maximum of one credit, e.g. `USD=5000000,JPY=500000000`.
    #[arg(long, env = "CREDIT_LIMITS", default_value = "")]
    pub credit_limits: String,
    /// Maximum of one credit for currencies not named in `--credit-limits`.
    #[arg(long, env = "CREDIT_DEFAULT_MAX", default_value_t = Decimal::from(crate::config::CREDIT_DEFAULT_MAX))]
    pub credit_default_max: Decimal,
}

impl CreditLimitArgs {
    pub fn limits(&self) -> anyhow::Result<AmountLimits> {
        AmountLimits::parse(&self.credit_limits, self.credit_default_max)
            .map_err(|e| anyhow::anyhow!("CREDIT_LIMITS: {e}"))
    }
}

#[derive(Debug, Subcommand)]
pub enum AccountsCommand {
    /// Create an account, optionally funded, and print its id and a new API key. Needs only
    /// DATABASE_URL; the funding is a credit by the local actor (`local:<os user>`), audited and
    /// on the ledger like any other.
    Create {
        #[arg(long)]
        name: String,
        #[arg(long, default_value = "USD")]
        currency: String,
        /// Initial funding in `--currency`: a decimal such as `1000.00` (the API's grammar),
        /// within the credit limit.
        #[arg(long)]
        fund: Option<String>,
        /// Print `{"account_id": "...", "api_key": "..."}`.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        credit_limits: CreditLimitArgs,
    },
    /// Add money to an account: treasury or admin; calls POST /ops/v1/accounts/{id}/credits
    /// (audited, idempotent), or runs the same route in process on DATABASE_URL with --direct.
    Fund {
        id: String,
        /// A decimal such as `1000.00` (the API's grammar), within the credit limit.
        #[arg(long)]
        amount: String,
        #[arg(long)]
        currency: String,
        /// Why (written to the audit log).
        #[arg(long)]
        reason: String,
        /// Retry a run whose answer was lost with the key it printed: it credits once. A new
        /// key is made when absent.
        #[arg(long)]
        idempotency_key: Option<String>,
        #[command(flatten)]
        remote: ops_cli::Remote,
    },
    /// An account's API keys: create (rotation), list, revoke. Admin; calls /ops/v1 (audited),
    /// or runs the same routes in process on DATABASE_URL with --direct.
    Keys {
        #[command(flatten)]
        remote: ops_cli::Remote,
        #[command(subcommand)]
        command: ops_cli::KeysCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum OperatorsCommand {
    /// Create an operator and print its id and a new bearer token. Needs only DATABASE_URL: runs
    /// as the local actor `local:<$USER>` (audited as `operator.create`). The token cannot approve
    /// a two-person decision until its holder rotates it (`operators rotate-token <own id>`).
    Create {
        #[arg(long)]
        name: String,
        #[arg(long, value_enum)]
        role: crate::domain::Role,
        #[arg(long)]
        json: bool,
    },
    /// list | disable | enable | rotate-token: admin; calls /ops/v1 (audited), or runs the same
    /// routes in process on DATABASE_URL with --direct.
    #[command(flatten)]
    Lifecycle(ops_cli::OperatorCommand),
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => startup::run(args.settings(&cli.database_url, cli.migration_database_url)?).await,
        Command::Status { conn, watch } => ops_cli::status(&conn, &watch).await,
        Command::ProviderMock { port, seed, api_key, webhook_url, webhook_secret } => {
            let webhooks =
                provider_mocks::WebhookSettings { url: webhook_url, secrets: webhook_secret, ..Default::default() };
            startup::run_provider_mock(port, seed, api_key, webhooks).await
        }
        Command::Breakers { command, conn } => ops_cli::breakers(&conn, command).await,
        Command::Ledger { conn, command } => ops_cli::ledger(&conn, command).await,
        Command::Settlement { conn, command } => ops_cli::settlement(&conn, command).await,
        Command::Webhooks { conn, command } => ops_cli::webhooks(&conn, command).await,
        Command::Notifications { conn, command } => ops_cli::notifications(&conn, command).await,
        Command::Review { conn, command } => ops_cli::review(&conn, command).await,
        Command::Dlq { conn, command } => ops_cli::dlq(&conn, command).await,
        Command::Replay { conn, command } => ops_cli::replay(&conn, command).await,
        Command::Audit { conn, action, target, limit } => ops_cli::audit(&conn, action, target, limit).await,
        Command::Worker(mut args) => {
            args.role = ProcessRole::Worker;
            startup::run(args.settings(&cli.database_url, cli.migration_database_url)?).await
        }
        Command::Migrate => {
            let db = startup::open_as_service(
                &cli.database_url,
                cli.migration_database_url.as_deref(),
                PoolSettings::default(),
            )
            .await?;
            match cli.migration_database_url {
                Some(_) => {
                    println!("migrations applied ({:?}); the service's role sees a current schema", db.backend())
                }
                None => println!("migrations applied ({:?})", db.backend()),
            }
            Ok(())
        }
        Command::Accounts(AccountsCommand::Create { name, currency, fund, json, credit_limits }) => {
            let config = AppConfig { credit_limits: credit_limits.limits()?, ..AppConfig::default() };
            let currency = Currency::parse(&currency).with_context(|| format!("currency `{currency}`"))?;
            // Refused before anything is created, with the API's code.
            let funding = fund
                .map(|f| {
                    Amount::parse(&f, currency, &config.credit_limits)
                        .map_err(|e| anyhow::anyhow!("--fund {f}: {e} ({})", e.code()))
                })
                .transpose()?;
            let db = open(&cli.database_url, PoolSettings::default()).await?;
            let created = provisioning::create_account_with(&db, &config, &name, funding).await?;
            if json {
                println!("{}", json!({"account_id": created.account_id.to_string(), "api_key": created.api_key}));
            } else {
                println!(
                    "account_id: {}\napi_key:    {}\n(the API key is shown once; store it now)",
                    created.account_id, created.api_key
                );
            }
            Ok(())
        }
        Command::Accounts(AccountsCommand::Keys { remote, command }) => {
            ops_cli::api_keys(&cli.database_url, &remote, command).await
        }
        Command::Operators(OperatorsCommand::Lifecycle(command)) => {
            ops_cli::operators(&cli.database_url, command).await
        }
        Command::Accounts(AccountsCommand::Fund { id, amount, currency, reason, idempotency_key, remote }) => {
            let account: AccountId = id.parse().with_context(|| format!("account id `{id}` is not a UUID"))?;
            let request = crate::ops::types::CreditRequest { amount, currency, reason };
            ops_cli::fund(&cli.database_url, &remote, &account.to_string(), request, idempotency_key).await
        }
        Command::Operators(OperatorsCommand::Create { name, role, json }) => {
            let db = open(&cli.database_url, PoolSettings::default()).await?;
            let created = provisioning::create_operator(&db, &name, role).await?;
            if json {
                println!("{}", json!({"operator_id": created.operator_id.to_string(), "token": created.token}));
            } else {
                println!(
                    "operator_id: {}\nrole:        {role}\ntoken:       {}\n(the token is shown once; store it now. \
                     Its holder rotates it before approving: operators rotate-token {})",
                    created.operator_id, created.token, created.operator_id
                );
            }
            Ok(())
        }
    }
}

impl ServeArgs {
    /// The process these flags describe, for [`startup::run`]; refuses limits that do not parse.
    pub fn settings(self, database_url: &str, migration_database_url: Option<String>) -> anyhow::Result<Settings> {
        let limits = AmountLimits::parse(&self.limits, self.default_max).map_err(anyhow::Error::msg)?;
        let credit_limits = self.credit_limits.limits()?;
        let env = |name: &str| std::env::var(name).ok();
        let sources = crate::config::providers::Sources {
            file: self.providers.as_deref(),
            url: self.provider_url.as_deref(),
            api_key: self.provider_api_key.as_deref(),
            env: &env,
        };
        let loaded = crate::config::providers::Providers::load(&sources, &limits).map_err(anyhow::Error::msg)?;
        let mut breaker = self.tuning.breaker();
        let mut provider_name = crate::config::providers::DEFAULT_PROVIDER.to_owned();
        let mut several = None;
        let (provider_url, provider_api_key) = match loaded.providers.as_ref().map(|p| p.all()) {
            None => (None, None),
            Some([one]) => {
                if let Some(own) = &one.breaker {
                    breaker = own.clone();
                }
                let key = one.api_key.as_ref().map(|k| secrecy::ExposeSecret::expose_secret(k).to_owned());
                provider_name.clone_from(&one.name);
                (Some(one.url.as_str().trim_end_matches('/').to_owned()), key)
            }
            // Several: each gets its own gateway at start; the first by priority stands for
            // them where one URL is asked (sandbox mode is off).
            Some([first, ..]) => {
                let key = first.api_key.as_ref().map(|k| secrecy::ExposeSecret::expose_secret(k).to_owned());
                provider_name.clone_from(&first.name);
                several = loaded.providers.clone();
                (Some(first.url.as_str().trim_end_matches('/').to_owned()), key)
            }
            Some([]) => (None, None),
        };
        let mut config =
            AppConfig { limits, credit_limits, max_body_bytes: self.max_body_bytes, ..AppConfig::default() };
        config.idempotency.retention = chrono::TimeDelta::hours(self.idempotency_retention_hours.max(1));
        config.job_retention = chrono::TimeDelta::days(self.job_retention_days.max(1));
        config.breaker_sync = Duration::from_millis(self.breaker_sync_ms.max(10));
        config.replay.approval_threshold = self.replay_approval_threshold.max(1);
        config.console.session_ttl = chrono::TimeDelta::hours(self.console_session_hours.clamp(1, 24 * 7));
        config.console.secure_cookie = self.console_secure_cookie;
        config.auth_failures = self.auth_failures;
        config.review.approval_thresholds =
            AmountLimits::parse(&self.review_approval_threshold, self.review_approval_default)
                .map_err(|e| anyhow::anyhow!("REVIEW_APPROVAL_THRESHOLD: {e}"))?;
        config.review.in_flight_grace = Duration::from_millis(self.tuning.reconcile_grace_ms);
        config.settlement = crate::config::SettlementSettings {
            grace_days: self.settlement_grace_days.max(0),
            daily_import: self.settlement_daily_import,
            import_hour: self.settlement_import_hour,
            max_report_bytes: self.settlement_max_report_bytes.max(1),
            max_report_lines: self.settlement_max_report_lines.max(1),
        };
        // Every file read is the app's and the workers' to know (one provider included: its
        // webhook secrets and settlement schedule); a lone PROVIDER_URL has no file.
        let file = if self.providers.is_some() { loaded.providers.clone() } else { None };
        let mut warnings = loaded.warnings;
        if file.is_some() && self.provider_webhook_secret.is_some() {
            warnings.push(
                "PROVIDER_WEBHOOK_SECRET is ignored with PROVIDERS: each provider's webhook secrets come from its \
                 webhook_secrets_env"
                    .to_owned(),
            );
        }
        config.webhooks = crate::config::WebhookSettings {
            secrets: self.provider_webhook_secret.map(|list| list.0).unwrap_or_default(),
            tolerance: Duration::from_secs(self.webhook_tolerance_s),
            max_body_bytes: self.webhook_max_body_bytes.max(1),
        };
        config.providers.clone_from(&file);
        config.notify = self.notify.settings(database_url, &mut warnings)?;
        let mut worker = WorkerConfig::new(startup::worker_id());
        worker.notify = config.notify.clone();
        worker.settlement = config.settlement;
        worker.providers.clone_from(&file);
        worker.concurrency = self.worker_concurrency.max(1);
        worker.batch_size = self.claim_batch.max(1);
        self.tuning.apply(&mut worker);
        if let Some(providers) = &loaded.providers {
            worker.learn_provider_policies(providers).map_err(|e| anyhow::anyhow!("PROVIDERS: {e}"))?;
        }
        Ok(Settings {
            database_url: database_url.to_owned(),
            migration_database_url,
            role: self.role,
            pool: PoolSettings { max_connections: self.max_connections, ..PoolSettings::default() },
            app: config,
            provider: ProviderSettings {
                name: provider_name,
                url: provider_url,
                api_key: provider_api_key,
                sandbox: self.sandbox,
                connect_timeout: Duration::from_millis(self.provider_connect_timeout_ms),
                request_timeout: Duration::from_millis(self.provider_timeout_ms),
            },
            several,
            breaker,
            warnings,
            worker,
            bind: self.bind,
            metrics_bind: self.metrics_bind,
            server: self.server,
            log_format: self.log_format,
        })
    }
}
