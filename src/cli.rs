//! The `withdrawals` command line: one enum of subcommands, each a small async function.
//!
//! Errors surface as one line on stderr and a non-zero exit (see `main.rs`).

use std::net::SocketAddr;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use rust_decimal::Decimal;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::config::AppConfig;
use crate::domain::{AccountId, Amount, AmountLimits, Currency};
use crate::http::{self, AppState};
use crate::jobs::worker::{Worker, WorkerConfig};
use crate::ops_cli;
use crate::provisioning;
use crate::service;
use crate::storage::{Db, PoolSettings};
use crate::telemetry::{self, LogFormat};

#[derive(Debug, Parser)]
#[command(name = "withdrawals", version, about = "Customer withdrawals, paid out without losing or doubling money")]
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
    /// The whole service at a glance: withdrawals by state, dead letters, queues, breakers, replays.
    Status {
        #[command(flatten)]
        conn: ops_cli::Connection,
    },
    /// Provider circuit breakers and their state (as the API process sees them).
    Breakers {
        #[command(flatten)]
        conn: ops_cli::Connection,
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
    /// A bounded chaos run: faults, SIGKILLed workers, a database restart; then the invariants.
    Chaos(crate::chaos::ChaosArgs),
    /// Benchmarks (SPEC §12): pgbench ceiling, end-to-end, latency, queue, dead letters, memory.
    Bench(crate::bench::BenchArgs),
    /// The provider mock as a process (used by `chaos`).
    #[command(hide = true)]
    ProviderMock {
        #[arg(long, default_value_t = 0)]
        port: u16,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long)]
        api_key: Option<String>,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    Api,
    Worker,
    All,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// What this process runs.
    #[arg(long, env = "ROLE", value_enum, default_value = "all")]
    pub role: Role,
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
    /// How long idempotency keys are remembered, in hours (at least 24 is recommended).
    #[arg(long, env = "IDEMPOTENCY_RETENTION_HOURS", default_value_t = 24)]
    pub idempotency_retention_hours: i64,
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
    /// Database pool size.
    #[arg(long, env = "DATABASE_MAX_CONNECTIONS", default_value_t = 16)]
    pub max_connections: u32,
    #[command(flatten)]
    pub tuning: WorkerTuning,
    #[command(flatten)]
    pub server: crate::http::limits::ServerLimits,
}

/// The worker's clocks. The defaults suit production; tests and the chaos run shorten them.
#[derive(Debug, Clone, Args)]
pub struct WorkerTuning {
    /// How long a claimed job is leased; a worker that dies loses its jobs after this.
    #[arg(long, env = "WORKER_LEASE_MS", default_value_t = 30_000)]
    pub lease_ms: u64,
    /// How often a running job renews its lease.
    #[arg(long, env = "WORKER_HEARTBEAT_MS", default_value_t = 10_000)]
    pub heartbeat_ms: u64,
    /// Polling fallback when no wake-up arrives.
    #[arg(long, env = "WORKER_POLL_MS", default_value_t = 1_000)]
    pub poll_ms: u64,
    /// How often the stuck-`processing` sweep runs.
    #[arg(long, env = "WORKER_SWEEP_INTERVAL_MS", default_value_t = 60_000)]
    pub sweep_interval_ms: u64,
    /// A withdrawal in `processing` with no live job for this long is reconciled by the sweep.
    #[arg(long, env = "PROCESSING_SLA_SECS", default_value_t = 900)]
    pub processing_sla_secs: u64,
    /// Reconciliation trusts "not found" only after this long since the last call could arrive.
    #[arg(long, env = "RECONCILE_GRACE_MS", default_value_t = 15_000)]
    pub reconcile_grace_ms: u64,
    /// How soon a transfer the provider reports `pending` is looked up again.
    #[arg(long, env = "PENDING_POLL_MS", default_value_t = 5_000)]
    pub pending_poll_ms: u64,
    /// First retry delay of a payout submit (doubles, with jitter).
    #[arg(long, env = "SUBMIT_BASE_DELAY_MS", default_value_t = 1_000)]
    pub submit_base_delay_ms: u64,
    /// First retry delay of a reconciliation.
    #[arg(long, env = "RECONCILE_BASE_DELAY_MS", default_value_t = 5_000)]
    pub reconcile_base_delay_ms: u64,
    /// Largest delay between reconciliation attempts.
    #[arg(long, env = "RECONCILE_MAX_DELAY_MS", default_value_t = 600_000)]
    pub reconcile_max_delay_ms: u64,
    /// The reconciliation window: how long an unknown or `pending` outcome is asked about before
    /// it goes to review (default 24 h).
    #[arg(long, env = "RECONCILE_MAX_ELAPSED_MS", default_value_t = 86_400_000)]
    pub reconcile_max_elapsed_ms: u64,
    /// Unanswered lookups allowed in the window (`pending` answers are not capped).
    #[arg(long, env = "RECONCILE_MAX_ATTEMPTS", default_value_t = 300)]
    pub reconcile_max_attempts: u32,
    /// Provider attempts per withdrawal before `retries_exhausted`, the first included.
    #[arg(long, env = "SUBMIT_MAX_ATTEMPTS", default_value_t = 8)]
    pub submit_max_attempts: u32,
    /// Largest delay between submit retries.
    #[arg(long, env = "SUBMIT_MAX_DELAY_MS", default_value_t = 300_000)]
    pub submit_max_delay_ms: u64,
    /// Time budget of a withdrawal's submit retries, from its first attempt.
    #[arg(long, env = "SUBMIT_MAX_ELAPSED_MS", default_value_t = 3_600_000)]
    pub submit_max_elapsed_ms: u64,
    /// A provider's `Retry-After` is honoured up to this.
    #[arg(long, env = "MAX_RETRY_AFTER_MS", default_value_t = 600_000)]
    pub max_retry_after_ms: u64,
    /// How long the provider breaker stays open before letting trial calls through.
    #[arg(long, env = "BREAKER_WAIT_OPEN_MS", default_value_t = 30_000)]
    pub breaker_wait_open_ms: u64,
}

impl WorkerTuning {
    pub fn apply(&self, config: &mut WorkerConfig) {
        use std::time::Duration;
        config.lease = Duration::from_millis(self.lease_ms);
        config.heartbeat = Duration::from_millis(self.heartbeat_ms);
        config.poll_interval = Duration::from_millis(self.poll_ms);
        config.sweep_interval = Duration::from_millis(self.sweep_interval_ms);
        config.processing_sla = Duration::from_secs(self.processing_sla_secs);
        config.in_flight_grace = Duration::from_millis(self.reconcile_grace_ms);
        config.pending_poll = Duration::from_millis(self.pending_poll_ms);
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
    }

    pub fn breaker(&self) -> crate::provider::breaker::BreakerConfig {
        crate::provider::breaker::BreakerConfig {
            wait_duration_in_open: std::time::Duration::from_millis(self.breaker_wait_open_ms),
            ..Default::default()
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum AccountsCommand {
    /// Create an account, optionally funded, and print its id and a new API key.
    Create {
        #[arg(long)]
        name: String,
        #[arg(long, default_value = "USD")]
        currency: String,
        /// Initial funding in `--currency`.
        #[arg(long)]
        fund: Option<Decimal>,
        /// Print `{"account_id": "...", "api_key": "..."}`.
        #[arg(long)]
        json: bool,
    },
    /// Add money to an account.
    Fund {
        id: String,
        #[arg(long)]
        amount: Decimal,
        #[arg(long)]
        currency: String,
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
    /// Create an operator and print its id and a new bearer token.
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
        Command::Serve(args) => serve(&cli.database_url, args).await,
        Command::Status { conn } => ops_cli::status(&conn).await,
        Command::Chaos(args) => crate::chaos::run(args).await,
        Command::Bench(args) => crate::bench::run(args).await,
        Command::ProviderMock { port, seed, api_key } => provider_mock(port, seed, api_key).await,
        Command::Breakers { conn } => ops_cli::breakers(&conn).await,
        Command::Review { conn, command } => ops_cli::review(&conn, command).await,
        Command::Dlq { conn, command } => ops_cli::dlq(&conn, command).await,
        Command::Replay { conn, command } => ops_cli::replay(&conn, command).await,
        Command::Audit { conn, action, target, limit } => ops_cli::audit(&conn, action, target, limit).await,
        Command::Worker(mut args) => {
            args.role = Role::Worker;
            serve(&cli.database_url, args).await
        }
        Command::Migrate => {
            let db = open(&cli.database_url, PoolSettings::default()).await?;
            println!("migrations applied ({:?})", db.backend());
            Ok(())
        }
        Command::Accounts(AccountsCommand::Create { name, currency, fund, json }) => {
            let db = open(&cli.database_url, PoolSettings::default()).await?;
            let currency = Currency::parse(&currency).with_context(|| format!("currency `{currency}`"))?;
            let funding = fund.map(|f| Amount::new(f, currency).with_context(|| format!("--fund {f}"))).transpose()?;
            let created = provisioning::create_account(&db, &name, funding).await?;
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
        Command::Accounts(AccountsCommand::Fund { id, amount, currency }) => {
            let db = open(&cli.database_url, PoolSettings::default()).await?;
            let account: AccountId = id.parse().with_context(|| format!("account id `{id}` is not a UUID"))?;
            let currency = Currency::parse(&currency).with_context(|| format!("currency `{currency}`"))?;
            let amount = Amount::new(amount, currency).with_context(|| format!("--amount {amount}"))?;
            provisioning::fund_account(&db, account, amount).await?;
            println!("funded {account} with {amount}");
            Ok(())
        }
        Command::Operators(OperatorsCommand::Create { name, role, json }) => {
            let db = open(&cli.database_url, PoolSettings::default()).await?;
            let created = provisioning::create_operator(&db, &name, role).await?;
            if json {
                println!("{}", json!({"operator_id": created.operator_id.to_string(), "token": created.token}));
            } else {
                println!(
                    "operator_id: {}\nrole:        {role}\ntoken:       {}\n(the token is shown once; store it now)",
                    created.operator_id, created.token
                );
            }
            Ok(())
        }
    }
}

/// Whether this process runs in sandbox mode (no `PROVIDER_URL`), or why it must not start: on
/// PostgreSQL — a production database — sandbox mode must be asked for with `--sandbox`, so a
/// lost provider setting cannot debit customers and mark withdrawals completed while paying
/// nothing.
pub fn sandbox_mode(database_url: &str, args: &ServeArgs) -> anyhow::Result<bool> {
    match (&args.provider_url, args.sandbox) {
        (Some(_), true) => anyhow::bail!("--sandbox (WITHDRAWALS_SANDBOX) and PROVIDER_URL exclude each other: choose one"),
        (Some(_), false) => Ok(false),
        (None, true) => Ok(true),
        (None, false) if database_url.starts_with("sqlite:") => Ok(true),
        (None, false) => anyhow::bail!(
            "refusing to start: PROVIDER_URL is not set and the database is PostgreSQL; set PROVIDER_URL (and PROVIDER_API_KEY) to pay out for real, or pass --sandbox (WITHDRAWALS_SANDBOX=1) to run a sandbox that pays nothing"
        ),
    }
}

/// Connects and applies migrations: every command works on a fresh database.
pub async fn open(url: &str, settings: PoolSettings) -> anyhow::Result<Db> {
    let db = Db::connect(url, &settings).await.context("cannot open the database")?;
    db.migrate().await.context("cannot apply migrations")?;
    Ok(db)
}

async fn serve(url: &str, args: ServeArgs) -> anyhow::Result<()> {
    telemetry::init(args.log_format);
    let limits = AmountLimits::parse(&args.limits, args.default_max).map_err(anyhow::Error::msg)?;
    let mut config = AppConfig { limits, max_body_bytes: args.max_body_bytes, ..AppConfig::default() };
    config.idempotency.retention = chrono::TimeDelta::hours(args.idempotency_retention_hours.max(1));
    config.replay.approval_threshold = args.replay_approval_threshold.max(1);
    config.console.session_ttl = chrono::TimeDelta::hours(args.console_session_hours.clamp(1, 24 * 7));
    config.console.secure_cookie = args.console_secure_cookie;
    config.review.approval_thresholds =
        AmountLimits::parse(&args.review_approval_threshold, args.review_approval_default)
            .map_err(|e| anyhow::anyhow!("REVIEW_APPROVAL_THRESHOLD: {e}"))?;
    config.review.in_flight_grace = std::time::Duration::from_millis(args.tuning.reconcile_grace_ms);
    config.sandbox = sandbox_mode(url, &args)?;
    let settings = PoolSettings { max_connections: args.max_connections, ..PoolSettings::default() };
    let db = open(url, settings).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_on_signal(shutdown.clone()));
    let tasks = tokio_util::task::TaskTracker::new();
    let worker_failed: std::sync::Arc<std::sync::Mutex<Option<anyhow::Error>>> = Default::default();

    // Kept alive for the whole run: dropping it stops the sandbox provider. An API-only process
    // gets the provider too when one is configured (operators check references against it).
    let mut _sandbox = None;
    let mut gateway = None;
    if args.role != Role::Api || args.provider_url.is_some() {
        let (provider, sandbox) = service::provider_from(
            args.provider_url.clone(),
            args.provider_api_key.clone(),
            std::time::Duration::from_millis(args.provider_connect_timeout_ms),
            std::time::Duration::from_millis(args.provider_timeout_ms),
        )
        .await?;
        _sandbox = sandbox;
        gateway = Some(service::gateway_with(provider, args.tuning.breaker()));
    }
    if let (true, Some(gateway)) = (args.role != Role::Api, gateway.clone()) {
        let mut worker_config = WorkerConfig::new(service::worker_id());
        worker_config.sandbox = config.sandbox;
        worker_config.concurrency = args.worker_concurrency.max(1);
        worker_config.batch_size = args.claim_batch.max(1);
        args.tuning.apply(&mut worker_config);
        let worker = Worker::new(db.clone(), gateway, worker_config);
        let stop = shutdown.clone();
        let failed = worker_failed.clone();
        tasks.spawn(async move {
            if let Err(err) = worker.run(stop.clone()).await {
                // A service that accepts withdrawals nobody pays out is worse than one that is down.
                tracing::error!(error = format!("{err:#}"), "worker stopped with an error; shutting down");
                *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(err);
                stop.cancel();
            }
        });
    }
    if let Some(addr) = args.metrics_bind {
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
        tracing::info!(addr = %listener.local_addr()?, "metrics listening");
        let (limits, stop) = (args.server.clone(), shutdown.clone());
        tasks.spawn(async move { http::serve_metrics(listener, &limits, stop).await });
    }
    if args.role != Role::Worker {
        tasks.spawn(purge_idempotency_records(db.clone(), shutdown.clone()));
        crate::metrics::install();
        tasks.spawn(crate::metrics::refresh_loop(db.clone(), std::time::Duration::from_secs(15), shutdown.clone()));
        let listener = tokio::net::TcpListener::bind(args.bind)
            .await
            .with_context(|| format!("cannot listen on {}", args.bind))?;
        tracing::info!(addr = %listener.local_addr()?, backend = ?db.backend(), "withdrawals API listening");
        let state = match gateway {
            Some(gateway) => AppState::with_gateway(db.clone(), config, gateway),
            None => AppState::new(db.clone(), config),
        };
        let metrics = args.server.api_metrics(args.metrics_bind.is_some());
        if matches!(metrics, http::MetricsAccess::Hidden) && args.metrics_bind.is_none() {
            tracing::warn!("neither METRICS_BIND nor METRICS_TOKEN is set: /metrics is not served");
        }
        http::serve_with(listener, state, &args.server, &metrics, shutdown.clone()).await?;
    } else {
        shutdown.cancelled().await;
    }
    tasks.close();
    tasks.wait().await;
    db.close().await;
    tracing::info!("stopped");
    let failure = worker_failed.lock().unwrap_or_else(|p| p.into_inner()).take();
    match failure {
        Some(err) => Err(err.context("the payout worker failed")),
        None => Ok(()),
    }
}

/// Runs the provider mock until SIGTERM or Ctrl-C; says where it listens on stdout.
async fn provider_mock(port: u16, seed: u64, api_key: Option<String>) -> anyhow::Result<()> {
    let config = provider_mocks::MockConfig {
        addr: Some(SocketAddr::from(([127, 0, 0, 1], port))),
        api_key,
        seed,
        ..provider_mocks::MockConfig::default()
    };
    let mock = provider_mocks::spawn(config).await?;
    println!("provider-mock listening on {}", mock.url());
    let stop = CancellationToken::new();
    shutdown_on_signal(stop.clone()).await;
    mock.shutdown().await;
    Ok(())
}

/// Console sessions are kept this long after they expire, then deleted.
const CONSOLE_SESSION_KEEP_DAYS: i64 = 30;

/// Every ten minutes: forgets idempotency records past their retention, and console sessions
/// that expired more than [`CONSOLE_SESSION_KEEP_DAYS`] ago.
async fn purge_idempotency_records(db: Db, shutdown: CancellationToken) {
    let mut every = tokio::time::interval(std::time::Duration::from_secs(600));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {
                match crate::storage::idempotency::purge_expired(&db).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(purged = n, "expired idempotency records removed"),
                    Err(err) => tracing::warn!(error = format!("{:#}", anyhow::Error::from(err)), "idempotency purge failed"),
                }
                let before = crate::storage::DbTime::now().plus(chrono::TimeDelta::days(-CONSOLE_SESSION_KEEP_DAYS));
                match crate::storage::sessions::purge_expired(&db, before).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(purged = n, "old console sessions removed"),
                    Err(err) => tracing::warn!(error = format!("{:#}", anyhow::Error::from(err)), "console session purge failed"),
                }
            }
        }
    }
}

async fn shutdown_on_signal(token: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = ctrl_c.await;
                token.cancel();
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutdown requested; finishing in-flight requests");
    token.cancel();
}
