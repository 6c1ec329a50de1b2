//! The composition root: the one place that knows how the parts make a running process. It opens
//! the database ([`open`]), builds the provider (or the sandbox mock) behind its circuit breaker
//! ([`provider_from`], [`gateway`]), assembles the complete router — the customer API of
//! [`crate::http`], the operator API of [`crate::ops`], the console of [`crate::console`] — with
//! the layers `http` owns ([`app`], [`serve_with`]), and runs `serve`/`worker`
//! ([`Application::build`], [`Application::run_until_stopped`], [`serve`]): workers, listeners,
//! the metrics listener, background purges, and shutdown on SIGTERM or Ctrl-C.
//!
//! What was `service` (provider, breaker, worker identity) lives here too: it is exactly the
//! assembly this module does, and the tests build their apps and workers through the same
//! functions, so they run what production runs. The CLI parses flags into [`Settings`] and
//! dispatches; it builds nothing. Nothing below the composition root imports it, except the
//! tools that are whole processes of their own (`withdrawals-tools bench`, `ops_cli`), which open the database
//! and build workers through it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use secrecy::SecretString;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::providers::Currencies;
use crate::config::AppConfig;
use crate::domain::ProcessRole;
use crate::http::{self, AppState, MetricsAccess, ServerLimits};
use crate::jobs::worker::{Worker, WorkerConfig};
use crate::provider::breaker::{BreakerConfig, BreakerState, CircuitBreaker, SystemClock};
use crate::provider::cluster;
use crate::provider::{Gateway, HttpProvider, Provider, ProviderConfig};
use crate::storage::{Db, PoolSettings};
use crate::telemetry::{self, LogFormat};

/// Connects and brings the schema up to date ([`Db::ensure_schema`]): every command works on a
/// fresh database, and on a migrated one as a role that may not migrate.
pub async fn open(url: &str, settings: PoolSettings) -> anyhow::Result<Db> {
    let db = Db::connect(url, &settings).await.context("cannot open the database")?;
    db.ensure_schema().await.context(
        "cannot apply migrations (a role in withdrawals_app may not: migrate as the owner first, \
         with `withdrawals migrate` or MIGRATION_DATABASE_URL)",
    )?;
    Ok(db)
}

/// [`open`], after applying the migrations as the owner at `migration_url` when one is given
/// (`MIGRATION_DATABASE_URL`): the service then connects at `url` as a role that may only use
/// the tables (`withdrawals_app`, README "Scaling").
pub async fn open_as_service(url: &str, migration_url: Option<&str>, settings: PoolSettings) -> anyhow::Result<Db> {
    if let Some(owner_url) = migration_url {
        migrate_as_owner(owner_url).await?;
    }
    open(url, settings).await
}

/// Applies the migrations at `owner_url` over one connection, then closes it.
pub async fn migrate_as_owner(owner_url: &str) -> anyhow::Result<()> {
    let one = PoolSettings { max_connections: 1, ..PoolSettings::default() };
    let owner = Db::connect(owner_url, &one).await.context("cannot open the database at MIGRATION_DATABASE_URL")?;
    let applied = owner.migrate().await.context("cannot apply migrations at MIGRATION_DATABASE_URL");
    owner.close().await;
    applied
}

// ---- the router -------------------------------------------------------------------------------

/// The complete application router, without `/metrics` and with the default request timeout.
pub fn app(state: AppState) -> Router {
    app_with(state, &ServerLimits::default(), &MetricsAccess::Hidden)
}

/// The complete application router — the customer API, `/ops/v1` and the console under `/ops` —
/// with the layers every route shares: `limits` gives the request timeout, `metrics` who may
/// read `/metrics` on this port.
pub fn app_with(state: AppState, limits: &ServerLimits, metrics: &MetricsAccess) -> Router {
    let routes = http::router().merge(http::ops::router()).merge(crate::console::router());
    http::layered(routes, state, limits, metrics)
}

/// Serves the app with the default [`ServerLimits`] and no `/metrics` (see [`serve_with`]).
pub async fn serve(listener: TcpListener, state: AppState, shutdown: CancellationToken) -> std::io::Result<()> {
    serve_with(listener, state, &ServerLimits::default(), &MetricsAccess::Hidden, shutdown).await
}

/// Serves the app until `shutdown` is cancelled, then lets in-flight requests finish. Every
/// connection gets the header-read and idle timeouts and counts against the connection cap of
/// `limits`, every request its request timeout; accepted connections get `TCP_NODELAY` (an answer
/// is sent at once, not held back by Nagle's algorithm waiting for the client's acknowledgement).
pub async fn serve_with(
    listener: TcpListener,
    state: AppState,
    limits: &ServerLimits,
    metrics: &MetricsAccess,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    http::limits::serve_router(listener, app_with(state, limits, metrics), limits, shutdown).await
}

// ---- the provider -----------------------------------------------------------------------------

/// The provider named by `url`, or — with no URL — an in-process provider mock (sandbox mode),
/// returned too so the caller keeps it running.
pub async fn provider_from(
    url: Option<String>,
    api_key: Option<String>,
    connect_timeout: Duration,
    request_timeout: Duration,
) -> anyhow::Result<(Arc<dyn Provider>, Option<provider_mocks::RunningMock>)> {
    let (base_url, api_key, sandbox) = match url {
        Some(url) => {
            let key = api_key.ok_or_else(|| anyhow::anyhow!("PROVIDER_API_KEY is required with PROVIDER_URL"))?;
            (url, key, None)
        }
        None => {
            let key = "sandbox-provider-key".to_owned();
            let mock = provider_mocks::spawn(provider_mocks::MockConfig {
                api_key: Some(key.clone()),
                ..provider_mocks::MockConfig::default()
            })
            .await?;
            tracing::warn!(
                provider_url = %mock.url(),
                "SANDBOX MODE: PROVIDER_URL is not set, payouts go to an in-process provider mock; no money moves"
            );
            (mock.url(), key, Some(mock))
        }
    };
    let provider = HttpProvider::new(ProviderConfig {
        base_url,
        api_key: SecretString::from(api_key),
        connect_timeout,
        request_timeout,
    })?;
    Ok((Arc::new(provider), sandbox))
}

/// The provider behind its circuit breaker, with every state change logged.
pub fn gateway(provider: Arc<dyn Provider>) -> Gateway {
    gateway_with(provider, BreakerConfig::default())
}

pub fn gateway_with(provider: Arc<dyn Provider>, config: BreakerConfig) -> Gateway {
    gateway_named(crate::config::providers::DEFAULT_PROVIDER, provider, config)
}

/// [`gateway_with`] for the provider called `name`.
/// Its breaker is named after it (`payout_provider` for the `default` one, as it always was).
pub fn gateway_named(name: &str, provider: Arc<dyn Provider>, config: BreakerConfig) -> Gateway {
    crate::metrics::provider_created(name);
    let breaker_name = breaker_name(name);
    crate::metrics::breaker_created(&breaker_name, name);
    let named = name.to_owned();
    let breaker = CircuitBreaker::new(breaker_name, config, Arc::new(SystemClock)).with_listener(
        move |breaker: &str, from: BreakerState, to: BreakerState| {
            tracing::warn!(event = "breaker_transition", breaker, provider = named, from = %from, to = %to, "circuit breaker changed state");
            crate::metrics::breaker_transition(breaker, &named, from, to);
        },
    );
    Gateway { name: name.to_owned(), provider, breaker: Arc::new(breaker) }
}

/// The name of provider `provider`'s breaker in the cluster view, its overrides and its metrics.
pub fn breaker_name(provider: &str) -> String {
    match provider {
        crate::config::providers::DEFAULT_PROVIDER => "payout_provider".to_owned(),
        other => other.to_owned(),
    }
}

/// One gateway per provider of a providers file (SPEC §16), each over real HTTP with its own
/// credential and breaker (`breaker` where the file names none), routed by currency and priority.
/// The series of every move routing can make start at zero.
pub fn gateways_from(
    providers: &crate::config::providers::Providers,
    breaker: &BreakerConfig,
    connect_timeout: Duration,
    request_timeout: Duration,
) -> anyhow::Result<crate::provider::Gateways> {
    let mut list = Vec::new();
    for p in providers.all() {
        let api_key = p.api_key.clone().unwrap_or_else(|| SecretString::from(String::new()));
        let base_url = p.url.as_str().trim_end_matches('/').to_owned();
        let http = HttpProvider::new(ProviderConfig { base_url, api_key, connect_timeout, request_timeout })?;
        let gateway = gateway_named(&p.name, Arc::new(http), p.breaker.clone().unwrap_or_else(|| breaker.clone()));
        list.push((gateway, p.currencies.clone(), p.priority));
    }
    let all = providers.all();
    let pairs = all.iter().flat_map(|from| {
        all.iter()
            .filter(move |to| {
                to.name != from.name
                    && match (&from.currencies, &to.currencies) {
                        (Currencies::Only(a), Currencies::Only(b)) => !a.is_disjoint(b),
                        _ => true,
                    }
            })
            .map(move |to| (from.name.as_str(), to.name.as_str()))
    });
    crate::metrics::failovers_possible(pairs);
    Ok(crate::provider::Gateways::new(list))
}

/// `host-pid-random`: unique per process, readable in leases and attempt rows.
pub fn worker_id() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".to_owned());
    format!("{host}-{}-{:04x}", std::process::id(), rand::random::<u16>())
}

// ---- the process ------------------------------------------------------------------------------

/// Where the payout provider is, or that there is none (sandbox mode). Not `Debug`: it holds
/// the provider's key.
#[derive(Clone)]
pub struct ProviderSettings {
    /// Its name (SPEC §16): `default`, or the providers file's.
    pub name: String,
    /// Unset: sandbox mode, an in-process provider mock.
    pub url: Option<String>,
    /// Bearer credential for the provider (never logged).
    pub api_key: Option<String>,
    /// Sandbox mode asked for deliberately (`--sandbox`): required on PostgreSQL.
    pub sandbox: bool,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
}

/// Everything a `serve`/`worker` process needs, parsed and checked (the CLI builds it from its
/// flags and environment). Not `Debug`: it holds the provider's key.
pub struct Settings {
    pub database_url: String,
    /// The owner's URL (`MIGRATION_DATABASE_URL`): migrations are applied there first, and the
    /// service connects at `database_url` as a role that may only use the tables.
    pub migration_database_url: Option<String>,
    pub role: ProcessRole,
    pub pool: PoolSettings,
    /// The API's settings; `sandbox` is decided by [`Application::build`].
    pub app: AppConfig,
    pub provider: ProviderSettings,
    /// Several providers (SPEC §16): when set, `provider` is the first of them (its URL decides
    /// sandbox mode) and every one gets its own gateway.
    pub several: Option<crate::config::providers::Providers>,
    pub breaker: BreakerConfig,
    /// The worker's settings; `sandbox` is decided by [`Application::build`].
    pub worker: WorkerConfig,
    pub bind: SocketAddr,
    /// A separate listener for `/metrics` and `/healthz`.
    pub metrics_bind: Option<SocketAddr>,
    pub server: ServerLimits,
    pub log_format: LogFormat,
    /// What the configuration check found worth saying (logged once logging is set up).
    pub warnings: Vec<String>,
}

/// Whether this process runs in sandbox mode (no `PROVIDER_URL`), or why it must not start: on
/// PostgreSQL — a production database — sandbox mode must be asked for with `--sandbox`, so a
/// lost provider setting cannot debit customers and mark withdrawals completed while paying
/// nothing.
pub fn sandbox_mode(database_url: &str, provider: &ProviderSettings) -> anyhow::Result<bool> {
    match (&provider.url, provider.sandbox) {
        (Some(_), true) => anyhow::bail!("--sandbox (WITHDRAWALS_SANDBOX) and PROVIDER_URL exclude each other: choose one"),
        (Some(_), false) => Ok(false),
        (None, true) => Ok(true),
        (None, false) if database_url.starts_with("sqlite:") => Ok(true),
        (None, false) => anyhow::bail!(
            "refusing to start: PROVIDER_URL is not set and the database is PostgreSQL; set PROVIDER_URL (and PROVIDER_API_KEY) to pay out for real, or pass --sandbox (WITHDRAWALS_SANDBOX=1) to run a sandbox that pays nothing"
        ),
    }
}

/// Runs `serve` (or `worker`) until SIGTERM or Ctrl-C: logging set up, the process built, then
/// run until stopped.
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    // A refusal is the one line said, before any configuration warning.
    sandbox_mode(&settings.database_url, &settings.provider)?;
    telemetry::init(settings.log_format);
    for warning in &settings.warnings {
        tracing::warn!(warning = %warning, "configuration");
    }
    let app = Application::build(settings).await?;
    tokio::spawn(shutdown_on_signal(app.shutdown_token()));
    app.run_until_stopped().await
}

/// A process built and bound, not yet running: the database open and migrated, the provider
/// ready, the listeners bound (so a port in use fails before any work starts).
pub struct Application {
    db: Db,
    worker: Option<Worker>,
    /// This process's breaker, its identity in the cluster view, and how often it syncs.
    breaker_sync: Option<(crate::provider::Gateways, cluster::Process, Duration)>,
    metrics_listener: Option<TcpListener>,
    api: Option<Api>,
    server: ServerLimits,
    shutdown: CancellationToken,
    /// Kept alive for the whole run: dropping it stops the sandbox provider.
    _sandbox: Option<provider_mocks::RunningMock>,
}

/// The API listener and what it serves.
struct Api {
    listener: TcpListener,
    state: AppState,
    metrics: MetricsAccess,
}

impl Application {
    pub async fn build(mut settings: Settings) -> anyhow::Result<Self> {
        let sandbox = sandbox_mode(&settings.database_url, &settings.provider)?;
        settings.app.sandbox = sandbox;
        settings.worker.sandbox = sandbox;
        let db =
            open_as_service(&settings.database_url, settings.migration_database_url.as_deref(), settings.pool).await?;

        // An API-only process gets the provider too when one is configured (operators check
        // references against it).
        let mut sandbox_mock = None;
        let mut gateway: Option<crate::provider::Gateways> = None;
        if let Some(several) = &settings.several {
            let (connect, request) = (settings.provider.connect_timeout, settings.provider.request_timeout);
            gateway = Some(gateways_from(several, &settings.breaker, connect, request)?);
        } else if settings.role != ProcessRole::Api || settings.provider.url.is_some() {
            let (name, provider) = (settings.provider.name.clone(), settings.provider);
            let (provider, mock) =
                provider_from(provider.url, provider.api_key, provider.connect_timeout, provider.request_timeout)
                    .await?;
            sandbox_mock = mock;
            gateway = Some(gateway_named(&name, provider, settings.breaker).into());
        }
        let breaker_sync =
            gateway.clone().map(|g| (g, cluster::Process::this(settings.role), settings.app.breaker_sync));
        let worker = match (settings.role != ProcessRole::Api, gateway.clone()) {
            (true, Some(gateway)) => Some(Worker::new(db.clone(), gateway, settings.worker)),
            _ => None,
        };
        let metrics_listener = match settings.metrics_bind {
            Some(addr) => {
                let listener = TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
                tracing::info!(addr = %listener.local_addr()?, "metrics listening");
                Some(listener)
            }
            None => {
                // A worker's metrics (its breaker, job attempts and retries, dead letters,
                // provider latency) live only in its own process: without a listener nobody sees
                // them, and no page about its work can fire.
                if settings.role == ProcessRole::Worker {
                    tracing::warn!(
                        "METRICS_BIND is not set: this worker process serves no /metrics, so its breaker, jobs, dead letters and provider latency cannot be scraped; set METRICS_BIND (e.g. 0.0.0.0:9091)"
                    );
                }
                None
            }
        };
        let mut api = None;
        if settings.role != ProcessRole::Worker {
            crate::metrics::install();
            // The configured currencies' creation counters start at 0 (USD when no limit names one).
            let mut currencies: Vec<&str> = settings.app.limits.per_currency.keys().copied().collect();
            if currencies.is_empty() {
                currencies.push("USD");
            }
            crate::metrics::currencies_known(currencies);
            let listener = TcpListener::bind(settings.bind)
                .await
                .with_context(|| format!("cannot listen on {}", settings.bind))?;
            tracing::info!(addr = %listener.local_addr()?, backend = ?db.backend(), "withdrawals API listening");
            let state = match gateway {
                Some(gateway) => AppState::with_gateway(db.clone(), settings.app, gateway),
                None => AppState::new(db.clone(), settings.app),
            };
            let metrics = settings.server.api_metrics(settings.metrics_bind.is_some());
            if matches!(metrics, MetricsAccess::Hidden) && settings.metrics_bind.is_none() {
                tracing::warn!("neither METRICS_BIND nor METRICS_TOKEN is set: /metrics is not served");
            }
            api = Some(Api { listener, state, metrics });
        }
        Ok(Self {
            db,
            worker,
            breaker_sync,
            metrics_listener,
            api,
            server: settings.server,
            shutdown: CancellationToken::new(),
            _sandbox: sandbox_mock,
        })
    }

    /// Cancelling it stops the process: listeners finish in-flight requests, workers hand back
    /// their jobs.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Where the API listens (none in a worker-only process).
    pub fn api_addr(&self) -> Option<SocketAddr> {
        self.api.as_ref().and_then(|api| api.listener.local_addr().ok())
    }

    /// Runs the workers, the listeners and the purges until the shutdown token is cancelled (or
    /// the worker fails: a service that accepts withdrawals nobody pays out is worse than one
    /// that is down), then waits for all of them.
    pub async fn run_until_stopped(self) -> anyhow::Result<()> {
        let Self { db, worker, breaker_sync, metrics_listener, api, server, shutdown, _sandbox } = self;
        let tasks = TaskTracker::new();
        if let Some((gateways, process, every)) = breaker_sync {
            // One loop per provider's breaker: each is its own row in the cluster view.
            for gateway in gateways.all() {
                let (gateway, process) = (gateway.clone(), process.clone());
                tasks.spawn(cluster::sync_loop(db.clone(), gateway, process, every, shutdown.clone()));
            }
        }
        let worker_failed: Arc<Mutex<Option<anyhow::Error>>> = Default::default();
        if let Some(worker) = worker {
            let stop = shutdown.clone();
            let failed = worker_failed.clone();
            tasks.spawn(async move {
                if let Err(err) = worker.run(stop.clone()).await {
                    tracing::error!(error = format!("{err:#}"), "worker stopped with an error; shutting down");
                    *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(err);
                    stop.cancel();
                }
            });
        }
        if let Some(listener) = metrics_listener {
            let (limits, stop) = (server.clone(), shutdown.clone());
            tasks.spawn(async move { http::serve_metrics(listener, &limits, stop).await });
        }
        if let Some(Api { listener, state, metrics }) = api {
            tasks.spawn(purge_expired_records(db.clone(), state.config().job_retention, shutdown.clone()));
            http::series_from_zero(&state);
            tasks.spawn(crate::gauges::refresh_loop(db.clone(), Duration::from_secs(15), shutdown.clone()));
            serve_with(listener, state, &server, &metrics, shutdown.clone()).await?;
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
}

/// Runs the provider mock as a process (`withdrawals provider-mock`, used by `chaos`) until
/// SIGTERM or Ctrl-C; says where it listens on stdout.
pub async fn run_provider_mock(
    port: u16,
    seed: u64,
    api_key: Option<String>,
    webhooks: provider_mocks::WebhookSettings,
) -> anyhow::Result<()> {
    let config = provider_mocks::MockConfig {
        addr: Some(SocketAddr::from(([127, 0, 0, 1], port))),
        api_key,
        seed,
        webhooks,
        ..provider_mocks::MockConfig::default()
    };
    let mock = provider_mocks::spawn(config).await?;
    println!("provider-mock listening on {}", mock.url());
    let stop = CancellationToken::new();
    shutdown_on_signal(stop.clone()).await;
    mock.shutdown().await;
    Ok(())
}

/// Idempotency records (and succeeded jobs) deleted per purge transaction.
const PURGE_BATCH: i64 = 1_000;

/// Console sessions are kept this long after they expire, then deleted.
const CONSOLE_SESSION_KEEP_DAYS: i64 = 30;

/// Every ten minutes: forgets idempotency records past their retention, jobs that succeeded more
/// than `job_retention` ago, and console sessions that expired more than
/// [`CONSOLE_SESSION_KEEP_DAYS`] ago — each in small batches.
async fn purge_expired_records(db: Db, job_retention: chrono::TimeDelta, shutdown: CancellationToken) {
    let mut every = tokio::time::interval(Duration::from_secs(600));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = every.tick() => {
                match crate::storage::idempotency::purge_expired(&db, PURGE_BATCH).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(purged = n, "expired idempotency records removed"),
                    Err(err) => tracing::warn!(error = format!("{:#}", anyhow::Error::from(err)), "idempotency purge failed"),
                }
                let before = crate::storage::DbTime::now().plus(-job_retention);
                match crate::storage::jobs::prune_succeeded(&db, before, PURGE_BATCH).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(pruned = n, "succeeded jobs past their retention removed"),
                    Err(err) => tracing::warn!(error = format!("{:#}", anyhow::Error::from(err)), "job pruning failed"),
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

/// Cancels `token` on SIGTERM or Ctrl-C.
pub async fn shutdown_on_signal(token: CancellationToken) {
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
