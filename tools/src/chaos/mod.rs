//! `withdrawals-tools chaos` (SPEC §11): a bounded, self-contained run that tries to make the service
//! lose or double money, then proves it did neither.
//!
//! It starts the provider mock as its own process with a fault mix, an API process and several
//! worker processes on one database; creates thousands of withdrawals across many accounts with
//! duplicate and concurrent resends and some cancels; SIGKILLs and restarts workers at random;
//! restarts PostgreSQL once; lets two scripted, hurried operators work the review queue through
//! the ops API ([`operator`]); then stops the faults, waits for the system to converge, makes the
//! provider's settlement reports disagree with its record, returns one payout, imports every day
//! of the run through the ops API ([`settlement`]), and checks the invariants ([`checks`],
//! [`settlement::check`]). Exit status is non-zero on any violation.
//!
//! The workers' reconciliation window is short (`RECONCILE_MAX_ELAPSED_MS`, 3 s), and for the
//! first fifth of the fault phase the provider settles asynchronously *slower* than that window
//! (10 s, 30 % ending `failed`): those withdrawals reach `requires_review` while their transfer is
//! still `pending` — where a hurried `fail` would release money the provider then pays. Some of
//! them settle `paid`, some `failed`, while they wait in review.
//!
//! **Converged** means: no withdrawal `pending` or `processing`, no live job, no review decision
//! waiting for a second operator, no transfer still `pending` at the provider, and every operator
//! has since then finished a settled pass over the review queue (nothing accepted, nothing
//! refused for a reason time can change — see [`operator`]). So a withdrawal that entered review
//! with a pending transfer is, after convergence, `completed` (the operator completed it once it
//! settled paid), `failed` (it settled failed, or there was never a transfer) or still
//! `requires_review` with evidence because every button was refused for good; the last case with
//! a paid transfer is a violation (the account's `paid_out` would not match the provider's).
//!
//! A slice of the traffic also reaches the service through signed provider webhooks
//! ([`webhooks`]): the mock sends an event for every settled transfer to the API, under a secret
//! made for the run, with duplicates, drops, reordering, forged and disagreeing events during the
//! fault phase, while polling goes on as before; the two race for the same withdrawals. Converged
//! also means no delivery that could still be accepted is being retried. The report counts the
//! events by what they came to.
//!
//! With `--providers 2` ([`providers`]) the service pays through two provider mocks named in a
//! `PROVIDERS` file, the first goes down for a window (connections refused, 503s, timeouts after
//! commit) and comes back, and [`two_providers`] checks that no operation key was executed at two
//! providers and counts the withdrawals that moved and those that waited. Webhooks and settlement
//! are per provider there (SPEC §16): each mock sends its events, with the same faults, to
//! `/webhooks/provider/{name}` under its own secret (the file's `webhook_secrets_env`), and the
//! settlement phase makes each provider's reports disagree with its own record, returns one
//! payout at each, and imports each provider's days (`"provider": name`,
//! [`settlement::exercise_each`]). The webhook and settlement checks run once per provider,
//! against that provider's mock; the report has a section per provider under `providers`.

pub mod checks;
mod control;
pub mod load;
mod notifications;
pub mod operator;
pub mod procs;
pub mod providers;
mod proxy;
pub mod receiver;
mod report;
pub mod settlement;
pub mod two_providers;
pub mod webhooks;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use provider_mocks::{FaultEffect, FaultRule, RequestRecord, RouteMatch, TransferRecord, WebhookFaults};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use control::{fault_mix, quiet, save_metrics, set_faults, set_settlement, wait_until};
use operator::{Button, Desk, Operator};
use procs::{free_port, PgCluster, Proc};
use providers::{Outage, FIRST, SECOND};
use report::print_summary;
use withdrawals::config::providers::DEFAULT_PROVIDER;
use withdrawals::domain::{Amount, Currency};
use withdrawals::storage::{Db, PoolSettings};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Sqlite,
    Postgres,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ChaosArgs {
    /// Withdrawals to create.
    #[arg(long, default_value_t = 2_000)]
    pub withdrawals: u64,
    /// Shortest fault phase (`90s`, `2m`); it also lasts until every withdrawal is created.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub duration: Duration,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, value_enum, default_value = "postgres")]
    pub backend: Backend,
    /// Worker processes (SQLite: at most 2 besides the API).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Customer accounts the withdrawals are spread over.
    #[arg(long, default_value_t = 50)]
    pub accounts: usize,
    /// Customer connections creating withdrawals at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// How long the system gets to converge once faults stop.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub converge_timeout: Duration,
    /// PostgreSQL to use instead of a throwaway cluster (then the database is not restarted).
    #[arg(long = "postgres-url", env = "CHAOS_POSTGRES_URL")]
    pub postgres_url: Option<String>,
    /// Where logs, the database and the report go (default: a new temporary directory, kept).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Payout providers: 1, the mock as `PROVIDER_URL`; or 2, two mocks in a `PROVIDERS` file for
    /// one currency, the first taken down for a window (connections refused, then 503s, then
    /// timeouts after commit) and brought back (SPEC §16).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub providers: u8,
    /// Customer notifications (SPEC §17): every account registers an endpoint at an in-process
    /// receiver that faults during the fault phase, half of them refusing connections throughout
    /// it; then every event must be delivered or dead-lettered, announce a committed change, and
    /// the dead half's payouts must be no slower. `--notifications false` leaves them out.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub notifications: bool,
}

pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    let (number, unit) =
        raw.trim().split_at(raw.trim().find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.trim().len()));
    let n: u64 = number.parse().map_err(|_| format!("`{raw}` is not a duration like 90s or 2m"))?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!("`{raw}`: unit must be ms, s, m or h")),
    }
}

const PROVIDER_KEY: &str = "chaos-provider-secret-key";

/// The workers' reconciliation window: short, so slow settlements outlast it.
const RECONCILE_WINDOW_MS: u64 = 3_000;
/// The slow slice's settlement delay: well past the window, so those transfers are still pending
/// when their withdrawals reach review and operators meet them pending for several passes; the
/// slice ends at a fifth of the phase, so they settle within the fault phase of a 20 s run.
const SLOW_SETTLE_MS: u64 = 10_000;
/// Share of the slow slice's transfers that settle `failed` (the rest settle `paid`).
const SLOW_FAIL_RATIO: f64 = 0.3;
/// Decisions at or above this need a second operator; chaos amounts are 1.00 to 49.99 USD, so
/// about a fifth of them do.
const REVIEW_APPROVAL_THRESHOLD: &str = "USD=40";
/// Least time between two requests of one operator (each answer costs a provider lookup).
const OPERATOR_PACE: Duration = Duration::from_millis(25);

/// What happened to the system during the run.
#[derive(Debug, Default, serde::Serialize)]
struct Injected {
    fault_rules: Vec<Value>,
    provider_outcomes: std::collections::BTreeMap<String, u64>,
    worker_kills: u64,
    database_restarts: u64,
    lookup_outage_seconds: u64,
    async_settlement_seconds: u64,
    /// The slice (first fifth of the phase) that settles slower than the reconciliation window.
    slow_settlement_seconds: u64,
    slow_settlement_delay_ms: u64,
    reconcile_window_ms: u64,
    /// The mock's webhook faults during the fault phase, and for how long they were on.
    webhook_faults: Option<WebhookFaults>,
    webhook_fault_seconds: u64,
}

pub async fn run(args: ChaosArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    procs::service_binary()?; // before anything is created: the run starts it again and again
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("withdrawals-chaos-{}-{}", args.seed, std::process::id())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let workers = args.workers.unwrap_or(match args.backend {
        Backend::Sqlite => 2,
        Backend::Postgres => 3,
    });
    eprintln!(
        "chaos: {} withdrawals, {:?}, {workers} workers, {} provider(s), seed {}, in {}",
        args.withdrawals,
        args.backend,
        args.providers,
        args.seed,
        dir.display()
    );

    // The database.
    let mut cluster = None;
    let database_url = match args.backend {
        Backend::Sqlite => format!("sqlite://{}", dir.join("chaos.db").display()),
        Backend::Postgres => match &args.postgres_url {
            Some(url) => fresh_postgres_database(url, args.seed).await?,
            None => {
                let bin = PgCluster::find_bin().context(
                    "PostgreSQL (initdb, pg_ctl) is not installed; install postgresql-15 or pass --postgres-url",
                )?;
                let c = PgCluster::init(bin, &dir)?;
                c.start()?;
                let url = c.url();
                cluster = Some(c);
                url
            }
        },
    };
    let result = run_against(&args, &dir, &database_url, workers, cluster.as_ref(), started).await;
    if let Some(c) = cluster {
        c.stop();
    }
    result
}

async fn fresh_postgres_database(url: &str, seed: u64) -> anyhow::Result<String> {
    let name = format!("chaos_{seed}_{}", uuid::Uuid::new_v4().simple());
    crate::store::server::create_database(url, &name).await.context("create a database at --postgres-url")
}

async fn run_against(
    args: &ChaosArgs,
    dir: &Path,
    database_url: &str,
    workers: usize,
    cluster: Option<&PgCluster>,
    started: Instant,
) -> anyhow::Result<()> {
    let db = Db::connect(database_url, &PoolSettings::default()).await?;
    db.migrate().await?;
    // The service runs as production should on PostgreSQL: as a role in `withdrawals_app`, the
    // owner's URL given for migrations only. The run's own checks keep the owner's view.
    let service_url = match args.backend {
        Backend::Sqlite => database_url.to_owned(),
        Backend::Postgres => crate::store::server::service_role_url(database_url, "withdrawals_chaos_service").await?,
    };
    let usd = Currency::parse("USD")?;
    let mut customers = Vec::new();
    let mut accounts = Vec::new();
    for i in 0..args.accounts.max(1) {
        let funding = Amount::new(rust_decimal::Decimal::from(1_000_000), usd)?;
        let created =
            withdrawals::provisioning::create_account(&db, &format!("chaos customer {i}"), Some(funding)).await?;
        accounts.push((created.account_id, created.api_key.clone()));
        customers.push(load::Customer { api_key: created.api_key });
    }
    // Two operators: the two-person rule needs a second one, and two people working one queue
    // race each other the way a real desk does.
    let mut operators = Vec::new();
    for (name, order, newest_first) in [
        ("A", [Button::Fail, Button::Retry, Button::Complete], false),
        ("B", [Button::Retry, Button::Fail, Button::Complete], true),
    ] {
        let created = withdrawals::provisioning::create_enrolled_operator(
            &db,
            &format!("chaos operator {name}"),
            withdrawals::domain::Role::Operator,
        )
        .await?;
        operators.push(Operator { name: name.to_owned(), token: created.token, order, newest_first });
    }
    let operator_tokens: Vec<String> = operators.iter().map(|o| o.token.clone()).collect();

    // The provider mock, its own process, sending its events to the API (started below).
    let mock_port = free_port()?;
    let mock_url = format!("http://127.0.0.1:{mock_port}");
    let api_port = free_port()?;
    let base_url = format!("http://127.0.0.1:{api_port}");
    let two = args.providers == 2;
    // Each provider as the service names it in routes, imports and stored rows (the one provider
    // is `default`, which its operator never names), each with its own webhook secret and route.
    let named: Vec<Option<&str>> = if two { vec![Some(FIRST), Some(SECOND)] } else { vec![None] };
    let names: Vec<&str> = named.iter().map(|n| n.unwrap_or(DEFAULT_PROVIDER)).collect();
    let webhook_secrets: Vec<String> = named.iter().map(|_| webhooks::secret()).collect();
    let webhook_urls: Vec<String> = named.iter().map(|n| webhooks::url(&base_url, *n)).collect();
    let key = if two { providers::FIRST_KEY } else { PROVIDER_KEY };
    let mock_name = if two { format!("provider-mock-{FIRST}") } else { "provider-mock".to_owned() };
    let mut mock =
        procs::provider_mock(&mock_name, dir, mock_port, args.seed, key, &webhook_urls[0], &webhook_secrets[0]);
    mock.start()?;
    let mut second = match two {
        true => Some(providers::start_second(dir, args.seed, &webhook_urls[1], &webhook_secrets[1])?),
        false => None,
    };
    // Every mock's own address (the run's admin calls go there, never through the proxy).
    let mock_urls: Vec<String> =
        std::iter::once(mock_url.clone()).chain(second.as_ref().map(|s| s.url.clone())).collect();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    for url in &mock_urls {
        wait_until(&http, &format!("{url}/__admin/faults"), Duration::from_secs(30)).await.context("provider mock")?;
    }
    // The service reaches the first of two providers through a proxy that can refuse connections.
    let proxy = match two {
        true => Some(proxy::Proxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], mock_port))).await?),
        false => None,
    };
    let rules = fault_mix();
    let mut injected = Injected {
        fault_rules: rules.iter().map(|r| json!(r)).collect(),
        slow_settlement_delay_ms: SLOW_SETTLE_MS,
        reconcile_window_ms: RECONCILE_WINDOW_MS,
        ..Injected::default()
    };
    set_faults(&http, &mock_url, &rules, args.seed).await?;
    if let Some(s) = &second {
        set_faults(&http, &s.url, &s.rules, args.seed).await?;
    }
    // The run's first day, by the clock the provider's reports go by.
    let start_day = settlement::mock_now(&http, &mock_url).await?.date_naive();

    // The service: one API process, several workers, all with short clocks.
    let window = RECONCILE_WINDOW_MS.to_string();
    let mut env: Vec<(String, String)> = [
        ("DATABASE_URL", service_url.as_str()),
        ("MIGRATION_DATABASE_URL", database_url),
        ("PROVIDER_URL", mock_url.as_str()),
        ("PROVIDER_API_KEY", PROVIDER_KEY),
        ("PROVIDER_TIMEOUT_MS", "1500"),
        ("PROVIDER_CONNECT_TIMEOUT_MS", "500"),
        ("LOG_FORMAT", "json"),
        ("RUST_LOG", "info"),
        ("WORKER_CONCURRENCY", "16"),
        ("WORKER_LEASE_MS", "4000"),
        ("WORKER_HEARTBEAT_MS", "1000"),
        ("WORKER_POLL_MS", "250"),
        ("WORKER_SWEEP_INTERVAL_MS", "2000"),
        ("PROCESSING_SLA_SECS", "20"),
        ("RECONCILE_GRACE_MS", "2500"),
        ("PENDING_POLL_MS", "500"),
        // Webhooks are an extra channel here, not the main one: polling keeps its pace while
        // events arrive, so the two race for the same withdrawals.
        ("PENDING_POLL_WITH_WEBHOOKS_MS", "500"),
        ("PROVIDER_WEBHOOK_SECRET", webhook_secrets[0].as_str()),
        ("SUBMIT_BASE_DELAY_MS", "200"),
        ("RECONCILE_BASE_DELAY_MS", "300"),
        ("RECONCILE_MAX_DELAY_MS", "3000"),
        ("BREAKER_WAIT_OPEN_MS", "2000"),
        ("DATABASE_MAX_CONNECTIONS", "8"),
        ("RECONCILE_MAX_ELAPSED_MS", window.as_str()),
        ("REVIEW_APPROVAL_THRESHOLD", REVIEW_APPROVAL_THRESHOLD),
        // Settlement is imported by the run itself, at its end; and a completion no imported
        // report shows paid is missing at once.
        ("SETTLEMENT_GRACE_DAYS", "0"),
        ("SETTLEMENT_DAILY_IMPORT", "false"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    // Customer notifications: one key for every process (the endpoints' secrets are sealed by the
    // API and opened by the workers).
    let mut notify = match args.notifications {
        true => Some(notifications::Notifications::start(args.seed, args.duration).await?),
        false => None,
    };
    if let Some(n) = &notify {
        env.extend(n.service_env());
    }
    if let (Some(proxy), Some(second)) = (&proxy, &second) {
        let file = providers::write_file(dir, &proxy.url(), &second.url)?;
        env.retain(|(k, _)| !matches!(k.as_str(), "PROVIDER_URL" | "PROVIDER_API_KEY" | "PROVIDER_WEBHOOK_SECRET"));
        env.extend(providers::service_env(&file, [&webhook_secrets[0], &webhook_secrets[1]]));
    }
    let bind = format!("127.0.0.1:{api_port}");
    // The API's metrics have their own bind, as in production (`/metrics` is not on the API port).
    let api_metrics = format!("127.0.0.1:{}", free_port()?);
    let mut api =
        Proc::new("api", &["serve", "--role", "api", "--bind", &bind, "--metrics-bind", &api_metrics], &env, dir);
    api.start()?;
    let mut worker_procs = Vec::new();
    let mut worker_metrics = Vec::new();
    for i in 0..workers {
        let metrics = format!("127.0.0.1:{}", free_port()?);
        worker_procs.push(Proc::new(&format!("worker-{i}"), &["worker", "--metrics-bind", &metrics], &env, dir));
        worker_metrics.push(format!("http://{metrics}/metrics"));
    }
    for w in &mut worker_procs {
        w.start()?;
    }
    wait_until(&http, &format!("{base_url}/readyz"), Duration::from_secs(60)).await.context("the API")?;
    if let Some(n) = notify.as_mut() {
        n.register(&http, &base_url, &accounts).await.context("register the notification endpoints")?;
    }

    // The fault phase: customers create withdrawals while workers die and the database restarts.
    let load = load::Load {
        base_url: base_url.clone(),
        customers,
        count: args.withdrawals,
        concurrency: args.concurrency,
        seed: args.seed,
        spread: args.duration.mul_f64(0.8),
    };
    let customer_keys: Vec<String> = load.customers.iter().map(|c| c.api_key.clone()).collect();
    let slow = json!({"mode": "async", "delay_ms": SLOW_SETTLE_MS, "fail_ratio": SLOW_FAIL_RATIO});
    set_settlement(&http, &mock_urls, slow).await?;
    let webhook_faults = webhooks::fault_mix();
    for url in &mock_urls {
        webhooks::set_faults(&http, url, &webhook_faults).await?;
    }
    injected.webhook_faults = Some(webhook_faults);
    let mut load_task = tokio::spawn(load.run());
    let phase_start = Instant::now();
    if let Some(n) = notify.as_mut() {
        n.begin(phase_start, args.duration);
    }
    // The operators work from now until the run has converged (or they hit their own bounds:
    // a deadline past any convergence, and a request budget).
    let desk = Desk::watching(
        &base_url,
        &mock_urls,
        operator::Limits {
            pace: OPERATOR_PACE,
            max_requests: 2_000 + 40 * args.withdrawals,
            deadline: phase_start + args.duration * 2 + args.converge_timeout,
        },
    )?;
    let stop_operators = tokio_util::sync::CancellationToken::new();
    let mut operator_tasks = desk.start(operators, &stop_operators);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut next_kill = phase_start + Duration::from_millis(rng.gen_range(1_500..4_000));
    let restart_at = phase_start + args.duration / 2;
    // After the slow slice's withdrawals have met the operators (and mostly settled): while the
    // provider cannot be asked, every review decision is refused, which is worth seeing too, but
    // not instead of the pending transfers.
    let outage_at = phase_start + args.duration * 11 / 20;
    let outage = Duration::from_secs(8);
    let async_from = phase_start + args.duration / 4;
    let async_until = phase_start + args.duration * 3 / 4;
    // The slow slice comes first, so its withdrawals reach review (after the window) while the
    // provider can still be asked, well before the lookup outage.
    let slow_until = phase_start + args.duration / 5;
    let (mut outage_on, mut outage_done, mut async_on, mut async_done) = (false, false, false, false);
    let mut slow_on = true;
    let mut load_result = None;
    // The lookup outage: the only provider's, or with two the second's (the first has its own).
    let (lookup_url, lookup_rules) = match &second {
        Some(s) => (s.url.clone(), s.rules.clone()),
        None => (mock_url.clone(), rules.clone()),
    };
    let mut first_down = proxy.map(|p| Outage::new(p, &mock_url, rules.clone(), args.seed, phase_start, args.duration));
    loop {
        if load_result.is_none() {
            tokio::select! {
                done = &mut load_task => load_result = Some(done?),
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let now = Instant::now();
        if load_result.is_some() && now >= phase_start + args.duration {
            break;
        }
        if now >= next_kill {
            let victim = rng.gen_range(0..worker_procs.len());
            // What this process life counted, kept before it dies (`metrics-worker-N.txt`).
            save_metrics(
                &http,
                &worker_metrics[victim],
                &dir.join(format!("metrics-worker-{victim}.txt")),
                injected.worker_kills,
            )
            .await;
            worker_procs[victim].kill().await;
            injected.worker_kills += 1;
            tokio::time::sleep(Duration::from_millis(rng.gen_range(100..1_000))).await;
            worker_procs[victim].start()?;
            next_kill = Instant::now() + Duration::from_millis(rng.gen_range(1_500..5_000));
        }
        if let (Some(c), 0) = (cluster, injected.database_restarts) {
            if now >= restart_at {
                eprintln!("chaos: restarting PostgreSQL (immediate mode)");
                c.restart()?;
                injected.database_restarts += 1;
            }
        }
        if !outage_on && !outage_done && now >= outage_at {
            let mut with_outage = lookup_rules.clone();
            with_outage.insert(0, FaultRule::new(RouteMatch::Lookup, FaultEffect::LookupUnavailable));
            with_outage.insert(0, FaultRule::new(RouteMatch::Get, FaultEffect::LookupUnavailable));
            set_faults(&http, &lookup_url, &with_outage, args.seed).await?;
            outage_on = true;
        }
        if outage_on && now >= outage_at + outage {
            set_faults(&http, &lookup_url, &lookup_rules, args.seed).await?;
            injected.lookup_outage_seconds = outage.as_secs();
            outage_on = false;
            outage_done = true;
        }
        if slow_on && now >= slow_until {
            set_settlement(&http, &mock_urls, json!({"mode": "immediate", "delay_ms": 0, "fail_ratio": 0.0})).await?;
            injected.slow_settlement_seconds = (now - phase_start).as_secs();
            slow_on = false;
        }
        if !async_on && !async_done && now >= async_from {
            set_settlement(&http, &mock_urls, json!({"mode": "async", "delay_ms": 1500, "fail_ratio": 0.05})).await?;
            async_on = true;
        }
        if async_on && now >= async_until {
            set_settlement(&http, &mock_urls, json!({"mode": "immediate", "delay_ms": 0, "fail_ratio": 0.0})).await?;
            injected.async_settlement_seconds = (async_until - async_from).as_secs();
            async_on = false;
            async_done = true;
        }
        if let Some(o) = first_down.as_mut() {
            o.tick(&http, now).await?;
        }
        if let Some(n) = notify.as_mut() {
            n.tick(now).await?;
        }
        api.check_alive()?;
    }
    let (accepted, stats) = load_result.expect("the load finished");
    let fault_phase = phase_start.elapsed();

    // Faults stop; every worker runs; the operators keep working the review queue.
    if let Some(o) = first_down.as_mut() {
        o.end(&http).await?;
    }
    if let Some(n) = notify.as_mut() {
        n.end_faults().await?;
    }
    for url in &mock_urls {
        set_faults(&http, url, &[], args.seed).await?;
    }
    for url in &mock_urls {
        webhooks::set_faults(&http, url, &WebhookFaults::default()).await?;
    }
    injected.webhook_fault_seconds = phase_start.elapsed().as_secs();
    set_settlement(&http, &mock_urls, json!({"mode": "immediate", "delay_ms": 0, "fail_ratio": 0.0})).await?;
    if async_on {
        injected.async_settlement_seconds = (Instant::now() - async_from).as_secs();
    }
    if slow_on {
        injected.slow_settlement_seconds = (Instant::now() - phase_start).as_secs();
    }
    for w in &mut worker_procs {
        if w.check_alive().is_err() {
            w.start()?;
        }
    }
    eprintln!("chaos: faults off after {:.0?}; converging (deadline {:?})", fault_phase, args.converge_timeout);
    let converge_start = Instant::now();
    // Quiet since this instant, as far as the polls below can tell (see the module doc).
    let mut busy_at = converge_start;
    let converged = loop {
        let quiet = quiet(&db, &http, &mock_urls).await;
        let now = Instant::now();
        if !quiet {
            busy_at = now;
        } else if desk.settled_since(busy_at) {
            break true;
        }
        if converge_start.elapsed() > args.converge_timeout {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let convergence = converge_start.elapsed();
    stop_operators.cancel();
    while operator_tasks.join_next().await.is_some() {}
    let desk = desk.report();

    // Settlement, once nothing else moves (a run that did not converge fails anyway): each
    // provider's reports, from its own mock.
    let settlement_runs = if converged {
        let apis: Vec<settlement::Api> = mock_urls
            .iter()
            .zip(&named)
            .map(|(mock_url, provider)| settlement::Api {
                http: &http,
                base_url: &base_url,
                mock_url,
                operator_token: &operator_tokens[0],
                provider: *provider,
            })
            .collect();
        eprintln!("chaos: converged after {convergence:.0?}; settlement: injecting discrepancies, importing");
        Some(settlement::exercise_each(&db, &apis, args.seed, start_day).await)
    } else {
        None
    };

    // Deliveries still being retried (the bank returns' events among them) land and are decided
    // before anything is counted.
    let drained = webhooks::drain(&db, &http, &mock_urls).await;
    // Then every event (settlement's returns among them) is delivered or given up on.
    let notify_drained = match &notify {
        Some(n) => Some(n.drain(&db).await),
        None => None,
    };
    let api_scrape = match http.get(format!("http://{api_metrics}/metrics")).send().await {
        Ok(response) => response.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };

    let first_transfers = transfers_at(&http, &mock_url).await?;
    let second_transfers = match &second {
        Some(s) => transfers_at(&http, &s.url).await?,
        None => Vec::new(),
    };
    // Every transfer any provider executed: the money checks hold across providers.
    let transfers: Vec<TransferRecord> = first_transfers.iter().chain(&second_transfers).cloned().collect();
    // What each provider executed, by the name the service gives it: the per-provider checks'
    // ground truth.
    let at: Vec<(&str, &[TransferRecord])> =
        names.iter().copied().zip([first_transfers.as_slice(), second_transfers.as_slice()]).collect();
    // Every answer of every provider, by kind; with two, also per provider (named as in the file).
    let mut answers = std::collections::BTreeMap::new();
    let first_requests = requests_at(&http, &mock_url).await?;
    let second_requests = match &second {
        Some(s) => requests_at(&http, &s.url).await?,
        None => Vec::new(),
    };
    for (name, requests) in [(FIRST, &first_requests), (SECOND, &second_requests)] {
        let by_kind: &mut std::collections::BTreeMap<String, u64> = answers.entry(name.to_owned()).or_default();
        for r in requests.iter() {
            *by_kind.entry(answer_kind(&r.outcome).to_owned()).or_default() += 1;
            *injected.provider_outcomes.entry(answer_kind(&r.outcome).to_owned()).or_default() += 1;
        }
    }
    // Each process's own metrics at the end (`metrics-*.txt`): what an operator would have seen.
    let scrapes = std::iter::once(("api".to_owned(), format!("http://{api_metrics}/metrics")))
        .chain(worker_metrics.iter().enumerate().map(|(i, url)| (format!("worker-{i}"), url.clone())));
    for (name, url) in scrapes {
        save_metrics(&http, &url, &dir.join(format!("metrics-{name}.txt")), injected.worker_kills).await;
    }
    api.stop(Duration::from_secs(10)).await;
    for w in &mut worker_procs {
        w.stop(Duration::from_secs(10)).await;
    }
    // Read once nothing can store an event any more, so every stored event is in them.
    let mut deliveries = Vec::new();
    for url in &mock_urls {
        deliveries.push(webhooks::deliveries(&http, url).await?);
    }
    mock.stop(Duration::from_secs(5)).await;
    if let Some(s) = second.as_mut() {
        s.proc.stop(Duration::from_secs(5)).await;
    }

    let mut account_numbers = HashSet::new();
    for i in 0..args.withdrawals {
        account_numbers.insert(load::account_number(args.seed, i).0);
    }
    let mut strings = customer_keys;
    strings.push(PROVIDER_KEY.to_owned());
    if two {
        strings.extend([providers::FIRST_KEY.to_owned(), providers::SECOND_KEY.to_owned()]);
    }
    strings.extend(webhook_secrets.iter().cloned());
    strings.extend(operator_tokens);
    if let Some(n) = &notify {
        strings.extend(n.secrets());
    }
    let secrets = checks::Secrets { account_numbers, strings };
    let logs: Vec<PathBuf> =
        std::iter::once(api.log.clone()).chain(worker_procs.iter().map(|w| w.log.clone())).collect();
    let mut findings = checks::check(&db, &accepted, &transfers, &logs, &secrets).await?;
    if !converged {
        findings.violations.insert(0, format!("did not converge within {:?}", args.converge_timeout));
    }
    for m in &stats.key_mismatches {
        findings.violations.push(format!("idempotency: one key, two withdrawals: {m}"));
    }
    for u in &stats.unexpected {
        findings.violations.push(format!("customer got an unexpected answer: {u}"));
    }
    for a in &desk.anomalies {
        findings.violations.push(format!("operator: {a}"));
    }
    let notify_report = match (notify.take(), notify_drained) {
        (Some(n), Some(drained)) => {
            let checked = n.check(&db, &secrets, drained).await;
            n.stop().await;
            let report = checked?;
            findings.violations.extend(report.violations.iter().map(|v| format!("notifications: {v}")));
            json!(report)
        }
        _ => json!({"skipped": "--notifications false"}),
    };
    // Webhooks, per provider: its stored events against its mock's deliveries and record.
    let mut checked = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let observed = webhooks::Observed {
            provider: name,
            deliveries: &deliveries[i],
            transfers: at[i].1,
            api_metrics: &api_scrape,
            secret: &webhook_secrets[i],
            drained,
        };
        let mut webhook_report = webhooks::check(&db, &observed).await?;
        webhook_report.moved_no_money = match findings.money_violations {
            0 => format!(
                "forged, stale and disagreeing events moved no money: the ledger, executions-per-key, final-state and \
                 paid_out checks found no violation over {} transfers, whichever channel decided",
                findings.provider_executions_checked
            ),
            n => format!("the money checks found {n} violation(s); see the violations"),
        };
        let head = if two { format!("webhooks {name}") } else { "webhooks".to_owned() };
        findings.violations.extend(webhook_report.violations.iter().map(|v| format!("{head}: {v}")));
        checked.push(webhook_report);
    }
    findings.violations.extend(webhooks::unclaimed(&db, &names).await?.into_iter().map(|v| format!("webhooks: {v}")));
    let checked: Vec<&webhooks::WebhookReport> = checked.iter().collect();
    findings.violations.extend(webhooks::exercised(&checked).map(|v| format!("webhooks: {v}")));
    let mut webhook_reports: serde_json::Map<String, Value> =
        checked.iter().map(|r| (r.provider.clone(), json!(r))).collect();
    let webhook_report = match two {
        true => json!({ "providers": webhook_reports }),
        false => webhook_reports.remove(DEFAULT_PROVIDER).unwrap_or_default(),
    };
    let two_report = match &first_down {
        Some(o) => {
            let mut report = two_providers::check(&db, &at, o.window()).await?;
            report.outage = Some(o.report(&first_requests));
            report.answers = answers;
            findings.money_violations += report.keys_at_two_providers + report.moved_away_from_an_execution;
            findings.violations.extend(report.violations.iter().map(|v| format!("two providers: {v}")));
            Some(report)
        }
        None => None,
    };
    let settlement_report = match settlement_runs {
        Some(mut runs) => {
            let mut by_provider = serde_json::Map::new();
            for run in &mut runs {
                settlement::check(&db, run, &at).await?;
                let head = if two { format!("settlement {}", run.provider) } else { "settlement".to_owned() };
                findings.violations.extend(run.violations.iter().map(|v| format!("{head}: {v}")));
                by_provider.insert(run.provider.clone(), json!(run));
            }
            match two {
                true => json!({ "providers": by_provider }),
                false => by_provider.remove(DEFAULT_PROVIDER).unwrap_or_default(),
            }
        }
        None => json!({"skipped": "the run did not converge"}),
    };
    db.close().await;

    let mut report = json!({
        "backend": args.backend,
        "seed": args.seed,
        "workers": workers,
        "accounts": args.accounts,
        "fault_phase_seconds": fault_phase.as_secs_f64(),
        "convergence_seconds": convergence.as_secs_f64(),
        "total_seconds": started.elapsed().as_secs_f64(),
        "customers": stats,
        "injected": injected,
        "operator": desk,
        "settlement": settlement_report,
        "webhooks": webhook_report,
        "notifications": notify_report,
        "findings": findings,
        "ok": findings.violations.is_empty(),
        "dir": dir.display().to_string(),
    });
    if let Some(t) = two_report {
        report["two_providers"] = json!(t);
    }
    std::fs::write(dir.join("report.json"), serde_json::to_vec_pretty(&report)?)?;
    print_summary(&report);
    println!("{report}");
    if !findings.violations.is_empty() {
        bail!("{} invariant violations (see {})", findings.violations.len(), dir.join("report.json").display());
    }
    Ok(())
}

/// Every transfer the mock at `url` executed.
async fn transfers_at(http: &reqwest::Client, url: &str) -> anyhow::Result<Vec<TransferRecord>> {
    let mut body = http.get(format!("{url}/__admin/transfers")).send().await?.json::<Value>().await?;
    serde_json::from_value(body["data"].take()).context("the mock's transfers")
}

/// Every request the mock at `url` received, in arrival order.
async fn requests_at(http: &reqwest::Client, url: &str) -> anyhow::Result<Vec<RequestRecord>> {
    let mut body = http.get(format!("{url}/__admin/requests")).send().await?.json::<Value>().await?;
    serde_json::from_value(body["data"].take()).context("the mock's requests")
}

/// The kind of a mock's answer, as the report counts it: its class (`created`, `found`,
/// `timeout_after_commit`, …), a status with its code (`status:503`).
fn answer_kind(outcome: &str) -> &str {
    let class = outcome.split(':').next().unwrap_or(outcome);
    if class == "status" {
        outcome
    } else {
        class
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("3 weeks").is_err());
    }

    #[test]
    fn the_invalid_slice_and_only_it_carries_the_providers_magic_digits() {
        for i in 0..2_000 {
            let (number, invalid) = load::account_number(9, i);
            assert_eq!(number.contains("0000"), invalid, "{i}: {number}");
            assert!(number.len() >= 8 && number.chars().all(|c| c.is_ascii_digit()), "{number}");
        }
    }
}
