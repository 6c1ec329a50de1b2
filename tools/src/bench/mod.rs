//! `withdrawals-tools bench` (SPEC §12): one self-contained run that measures, on the same database,
//! the database's own commit ceiling (`pgbench -N`), end-to-end withdrawals per second (API accept
//! → `completed` against the provider mock), API latency at a fixed offered rate (open loop), raw
//! job-queue throughput (no-op jobs through the real claim/lease/finish path), dead-letter triage
//! query latency over a large store, and the peak memory of `withdrawals serve` — on PostgreSQL
//! (a throwaway cluster, or `--postgres-url`) and on SQLite — and reports them as a table and as
//! JSON, with ratios and the targets.
//!
//! Progress goes to stderr; the table, then the JSON, to stdout (and the JSON to `--json FILE`).

pub mod cpu;
pub mod dead_letters;
pub mod load;
pub mod notify;
pub mod pgbench;
pub mod queue;
pub mod report;
pub mod trends;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rust_decimal::Decimal;
use serde::Serialize;

use crate::chaos::procs::{free_port, PgCluster, Proc};
use crate::store::{bench as bench_store, server};
use withdrawals::domain::{Amount, Currency};
use withdrawals::storage::{Db, PoolSettings};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchBackend {
    Postgres,
    Sqlite,
    Both,
}

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Which database(s) to measure.
    #[arg(long, value_enum, default_value = "both")]
    pub backend: BenchBackend,
    /// Withdrawals created and paid out for the end-to-end figure.
    #[arg(long, default_value_t = 20_000)]
    pub withdrawals: u64,
    /// Client connections creating withdrawals at once (end-to-end phase).
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// No-op jobs through the job queue.
    #[arg(long, default_value_t = 200_000)]
    pub jobs: u64,
    /// Jobs the no-op phase's worker runs at once (`serve --worker-concurrency`).
    #[arg(long, default_value_t = 2048)]
    pub queue_concurrency: usize,
    /// Jobs the no-op phase's worker claims per transaction (`serve --claim-batch`).
    #[arg(long, default_value_t = 1024)]
    pub queue_batch: u32,
    /// Dead letters seeded before timing the triage queries.
    #[arg(long, default_value_t = 1_000_000)]
    pub dead_letters: u64,
    /// How long the fixed-rate (open-loop) latency phase lasts, in seconds.
    #[arg(long, default_value_t = 20)]
    pub latency_seconds: u64,
    /// Also write the JSON report here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// PostgreSQL server to use instead of a throwaway cluster (databases are created on it and
    /// dropped at the end).
    #[arg(long = "postgres-url", env = "BENCH_POSTGRES_URL", hide_env_values = true)]
    pub postgres_url: Option<String>,
    /// Duration of each `pgbench -N` run, in seconds.
    #[arg(long, default_value_t = 15)]
    pub pgbench_seconds: u64,
    /// Keep the work directory (logs, the SQLite file, the stopped cluster's data) and, with
    /// `--postgres-url`, the databases, for inspection.
    #[arg(long)]
    pub keep: bool,
    /// Soak: run only the end-to-end phase, creating for `--soak-minutes` instead of a count, and
    /// report completions per minute (a long run must not decay: the first minute against the last).
    #[arg(long)]
    pub soak: bool,
    /// How long the soak creates withdrawals, in minutes.
    #[arg(long, default_value_t = 10)]
    pub soak_minutes: u64,
    /// Customer notifications (SPEC §17): run only the end-to-end phase, twice on fresh
    /// databases of each backend — with no endpoint, then with one endpoint per account (`["*"]`)
    /// at an in-process receiver answering 200 — and report both rates, their ratio (target
    /// ≥ 0.8), and how long the deliveries took to land after the measured window.
    #[arg(long, conflicts_with = "soak")]
    pub notify_endpoints: bool,
    /// Trend charts (issue 33): run only phase (7), which seeds `--trend-withdrawals` withdrawals
    /// with their transitions over 30 days (and a tenth as many dead letters) and times the
    /// console's trend statements for the last hour and the last day (target p95 ≤ 50 ms).
    #[arg(long, conflicts_with_all = ["soak", "notify_endpoints"])]
    pub trends: bool,
    /// Withdrawals seeded for `--trends`.
    #[arg(long, default_value_t = 1_000_000)]
    pub trend_withdrawals: u64,
}

impl BenchArgs {
    /// What the end-to-end phase creates: a count, or — soaking — for a time.
    fn load(&self) -> load::Load {
        match self.soak {
            true => load::Load::For(Duration::from_secs(self.soak_minutes.max(1) * 60)),
            false => load::Load::Count(self.withdrawals),
        }
    }
}

/// Everything measured on one backend. A phase that failed leaves its field empty and says why
/// in `errors`.
#[derive(Debug, Default, Serialize)]
pub struct BackendReport {
    pub backend: String,
    pub server: Option<String>,
    pub pgbench: Option<pgbench::PgbenchReport>,
    pub end_to_end: Option<load::EndToEndReport>,
    pub latency: Option<load::LatencyReport>,
    /// The same open loop with the API alone in its process (`serve --role api`) and the payout
    /// workers in another (`withdrawals worker`); PostgreSQL only.
    pub latency_split: Option<load::LatencyReport>,
    pub queue: Option<queue::QueueReport>,
    pub dead_letters: Option<dead_letters::DeadLetterReport>,
    pub memory: Option<MemoryReport>,
    /// `--notify-endpoints`: the end-to-end phase without and with one endpoint per account.
    pub notifications: Option<notify::NotifyComparison>,
    /// `--trends`: the trend-chart statements over a large history.
    pub trends: Option<trends::TrendsReport>,
    pub errors: Vec<String>,
}

/// Memory of the `withdrawals serve` process during the end-to-end phase.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryReport {
    /// `VmHWM` (peak resident set) at the end of the end-to-end phase, in MiB.
    pub peak_rss_mib: f64,
    /// The largest `VmRSS` sampled every 200 ms during the phase, in MiB.
    pub max_sampled_rss_mib: f64,
    pub pid: u32,
}

pub(crate) const PROVIDER_KEY: &str = "bench-provider-key";

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    crate::chaos::procs::service_binary()?; // before anything is created: it serves the load
    let started = Instant::now();
    if args.withdrawals == 0 || args.connections == 0 || args.jobs == 0 || args.dead_letters == 0 {
        bail!("--withdrawals, --connections, --jobs and --dead-letters must be positive");
    }
    let dir = std::env::temp_dir().join(format!("withdrawals-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let load_at_start = load_average();
    progress(started, &format!("bench in {} (load average {load_at_start})", dir.display()));

    let mut reports = Vec::new();
    if matches!(args.backend, BenchBackend::Postgres | BenchBackend::Both) {
        reports.push(run_postgres(&args, &dir, started).await);
    }
    if matches!(args.backend, BenchBackend::Sqlite | BenchBackend::Both) {
        reports.push(run_sqlite(&args, &dir, started).await);
    }

    let document = report::document(&args, &reports, &load_at_start, &load_average(), started.elapsed());
    println!("{}", report::table(&reports));
    let json = serde_json::to_string_pretty(&document)?;
    println!("{json}");
    if let Some(path) = &args.json {
        std::fs::write(path, format!("{json}\n")).with_context(|| format!("write {}", path.display()))?;
    }
    let failed = reports.iter().any(|r| !r.errors.is_empty());
    if failed {
        eprintln!("bench: some phases failed; logs kept in {}", dir.display());
        bail!(
            "benchmark phases failed: {}",
            reports.iter().flat_map(|r| r.errors.iter()).cloned().collect::<Vec<_>>().join("; ")
        );
    }
    if args.keep {
        eprintln!("bench: kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

async fn run_postgres(args: &BenchArgs, dir: &Path, started: Instant) -> BackendReport {
    let mut report = BackendReport { backend: "postgres".into(), ..BackendReport::default() };
    let Some(bin) = PgCluster::find_bin() else {
        report.errors.push("PostgreSQL binaries (pgbench, initdb, pg_ctl) are not installed".into());
        return report;
    };
    let mut cluster = None;
    let server_url = match &args.postgres_url {
        Some(url) => url.clone(),
        None => {
            progress(started, "postgres: starting a throwaway cluster");
            let pg_dir = dir.join("postgres");
            let made = PgCluster::init(bin.clone(), &pg_dir).and_then(|c| {
                c.start()?;
                Ok(c)
            });
            match made {
                Ok(c) => {
                    let url = c.url();
                    cluster = Some(c);
                    url
                }
                Err(err) => {
                    report.errors.push(format!("postgres cluster: {err:#}"));
                    return report;
                }
            }
        }
    };
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let (pgbench_db, service_db) = (format!("bench_pgbench_{tag}"), format!("bench_service_{tag}"));
    let created = async {
        let pgbench_url = server::create_database(&server_url, &pgbench_db).await?;
        Ok::<_, withdrawals::storage::StorageError>((
            pgbench_url,
            server::create_database(&server_url, &service_db).await?,
        ))
    }
    .await;
    match created {
        Err(err) => report.errors.push(format!("create databases: {err:#}")),
        Ok((pgbench_url, service_url)) => {
            if !args.soak && !args.notify_endpoints && !args.trends {
                progress(started, "postgres: (1) pgbench -N, 8 and 32 clients");
                match pgbench::run(&bin, &pgbench_url, args.pgbench_seconds).await {
                    Ok(p) => report.pgbench = Some(p),
                    Err(err) => report.errors.push(format!("pgbench: {err:#}")),
                }
            }
            // Measured: drop pgbench's tables now, or autovacuum working off their dead rows
            // would land in the service's phases (unless kept for inspection).
            if !args.keep {
                if let Err(err) = server::drop_database(&server_url, &pgbench_db).await {
                    eprintln!("bench: could not drop database {pgbench_db}: {err:#}");
                }
            }
            if args.notify_endpoints {
                let with_db = format!("bench_notify_{tag}");
                match server::create_database(&server_url, &with_db).await {
                    Ok(with_url) => {
                        match notify::compare(args, dir, [&service_url, &with_url], "postgres", started).await {
                            Ok(n) => report.notifications = Some(n),
                            Err(err) => report.errors.push(format!("notifications: {err:#}")),
                        }
                        if args.postgres_url.is_some() && !args.keep {
                            if let Err(err) = server::drop_database(&server_url, &with_db).await {
                                eprintln!("bench: could not drop database {with_db}: {err:#}");
                            }
                        }
                    }
                    Err(err) => report.errors.push(format!("create database {with_db}: {err:#}")),
                }
            } else {
                run_service_phases(args, dir, &service_url, &mut report, started).await;
            }
        }
    }
    if args.postgres_url.is_some() && !args.keep {
        if let Err(err) = server::drop_database(&server_url, &service_db).await {
            eprintln!("bench: could not drop database {service_db}: {err:#}");
        }
    }
    if let Some(c) = cluster {
        progress(started, "postgres: stopping the throwaway cluster");
        c.stop();
        if !args.keep {
            let _ = std::fs::remove_dir_all(dir.join("postgres"));
        }
    }
    report
}

async fn run_sqlite(args: &BenchArgs, dir: &Path, started: Instant) -> BackendReport {
    let mut report = BackendReport { backend: "sqlite".into(), ..BackendReport::default() };
    let file = dir.join("bench.db");
    let with_file = dir.join("bench-notify.db");
    for f in [&file, &with_file] {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", f.display()));
        }
    }
    if args.notify_endpoints {
        let urls = [format!("sqlite://{}", file.display()), format!("sqlite://{}", with_file.display())];
        match notify::compare(args, dir, [&urls[0], &urls[1]], "sqlite", started).await {
            Ok(n) => report.notifications = Some(n),
            Err(err) => report.errors.push(format!("notifications: {err:#}")),
        }
    } else {
        run_service_phases(args, dir, &format!("sqlite://{}", file.display()), &mut report, started).await;
    }
    if !args.keep {
        for f in [&file, &with_file] {
            for suffix in ["", "-wal", "-shm", ".notify-key"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", f.display()));
            }
        }
    }
    report
}

/// (2)+(6) end-to-end with memory, (3) latency, then (4) queue and (5) dead letters, on one database.
async fn run_service_phases(args: &BenchArgs, dir: &Path, url: &str, report: &mut BackendReport, started: Instant) {
    let name = report.backend.clone();
    let db = match withdrawals::startup::open(url, PoolSettings::default()).await {
        Ok(db) => db,
        Err(err) => {
            report.errors.push(format!("open the database: {err:#}"));
            return;
        }
    };
    report.server = bench_store::server_version(&db).await.ok();
    if args.trends {
        progress(started, &format!("{name}: (7) trend charts over {} withdrawals", args.trend_withdrawals));
        match trends::run(&db, args.trend_withdrawals, |msg| progress(started, &format!("{name}: {msg}"))).await {
            Ok(t) => report.trends = Some(t),
            Err(err) => report.errors.push(format!("trends: {err:#}")),
        }
        db.close().await;
        return;
    }
    let mock = match provider_mocks::spawn(provider_mocks::MockConfig {
        api_key: Some(PROVIDER_KEY.to_owned()),
        ..provider_mocks::MockConfig::default()
    })
    .await
    {
        Ok(mock) => mock,
        Err(err) => {
            report.errors.push(format!("provider mock: {err:#}"));
            return;
        }
    };

    if let Err(err) = serve_phases(args, dir, url, &db, &mock.url(), report, started).await {
        report.errors.push(format!("{name} service phases: {err:#}"));
    }
    if args.soak {
        mock.shutdown().await;
        db.close().await;
        return;
    }

    progress(started, &format!("{name}: (4) {} no-op jobs through the job queue", args.jobs));
    match queue::run(&db, &mock.url(), args.jobs, args.queue_concurrency, args.queue_batch).await {
        Ok(q) => report.queue = Some(q),
        Err(err) => report.errors.push(format!("queue: {err:#}")),
    }
    mock.shutdown().await;

    progress(started, &format!("{name}: (5) seeding {} dead letters", args.dead_letters));
    match dead_letters::run(&db, args.dead_letters, |msg| progress(started, &format!("{name}: {msg}"))).await {
        Ok(d) => report.dead_letters = Some(d),
        Err(err) => report.errors.push(format!("dead letters: {err:#}")),
    }
    db.close().await;
}

/// Starts `withdrawals serve --role all`, runs (2)+(6) and (3) against it, stops it.
async fn serve_phases(
    args: &BenchArgs,
    dir: &Path,
    url: &str,
    db: &Db,
    mock_url: &str,
    report: &mut BackendReport,
    started: Instant,
) -> anyhow::Result<()> {
    let name = report.backend.clone();
    let latency_estimate = 2_000.0 * args.latency_seconds as f64;
    let withdrawals = match args.load() {
        load::Load::Count(n) => n as f64,
        load::Load::For(soak) => 2_000.0 * soak.as_secs_f64(),
    };
    let accounts = (args.connections * 4).max(64);
    progress(started, &format!("{name}: funding {accounts} accounts"));
    let usd = Currency::parse("USD")?;
    // Withdrawals are 1.00–50.00: every account covers its share of both phases many times over.
    let per_account = ((withdrawals + latency_estimate) / accounts as f64 * 50.0 * 2.0).ceil() as i64 + 1_000;
    let mut keys = Vec::with_capacity(accounts);
    for i in 0..accounts {
        let funding = Amount::new(Decimal::from(per_account), usd)?;
        let created =
            withdrawals::provisioning::create_account(db, &format!("bench customer {i}"), Some(funding)).await?;
        keys.push(created.api_key);
    }

    let port = free_port()?;
    let base_url = format!("http://127.0.0.1:{port}");
    let env: Vec<(String, String)> = [
        ("DATABASE_URL", url),
        ("PROVIDER_URL", mock_url),
        ("PROVIDER_API_KEY", PROVIDER_KEY),
        ("LOG_FORMAT", "json"),
        ("RUST_LOG", "warn"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    let bind = format!("127.0.0.1:{port}");
    let mut serve = Proc::new(&format!("serve-{name}"), &["serve", "--role", "all", "--bind", &bind], &env, dir);
    serve.start()?;
    let result = async {
        load::wait_ready(&format!("{base_url}/readyz"), Duration::from_secs(60), &mut serve).await?;
        let pid = serve.pid().context("the serve process has no pid")?;

        progress(
            started,
            &format!("{name}: (2) {} over {} connections, accept → completed", args.load(), args.connections),
        );
        let sampler = load::RssSampler::start(pid);
        let meter = cpu::Meter::start(db, Some(pid)).await;
        let e2e = load::end_to_end(db, &base_url, &keys, args.load(), args.connections, &mut serve).await;
        let max_sampled = sampler.stop().await;
        let accepted = e2e.as_ref().map_or(args.withdrawals, |e| e.accepted.max(1));
        let (cpu_used, database_work) = meter.finish(db, accepted).await;
        let peak = load::read_status_kib(pid, "VmHWM").context("read VmHWM of the serve process")?;
        report.memory = Some(MemoryReport {
            peak_rss_mib: peak as f64 / 1024.0,
            max_sampled_rss_mib: max_sampled as f64 / 1024.0,
            pid,
        });
        let mut e2e = e2e?;
        e2e.cpu = Some(cpu_used);
        e2e.database_work = database_work;
        let rate = e2e.withdrawals_per_second / 2.0;
        progress(
            started,
            &format!(
                "{name}: end-to-end {:.1} withdrawals/s (accepts {:.1}/s); peak RSS {:.1} MiB",
                e2e.withdrawals_per_second,
                e2e.accept_rate,
                peak as f64 / 1024.0
            ),
        );
        if args.soak {
            let minutes: Vec<String> = e2e.per_minute.iter().map(|r| format!("{r:.0}")).collect();
            progress(started, &format!("{name}: soak completions/s per minute: {}", minutes.join(", ")));
            report.end_to_end = Some(e2e);
            serve.check_alive()?;
            return anyhow::Ok(0.0);
        }
        report.end_to_end = Some(e2e);

        // On PostgreSQL, as pgbench vacuums before each run (and as the no-op phase does): the
        // end-to-end phase left dead row versions in every table it wrote, and autovacuum
        // working them off would otherwise land in the middle of the latency phase.
        if matches!(db, Db::Postgres(_)) {
            bench_store::refresh_statistics(db).await?;
        }
        progress(started, &format!("{name}: (3) open-loop POSTs at {rate:.1}/s for {} s", args.latency_seconds));
        let contention = cpu::ContentionMeter::start(Some(pid));
        let mut latency = load::open_loop(&base_url, &keys, rate, Duration::from_secs(args.latency_seconds)).await?;
        latency.contention = Some(contention.finish(latency.requests));
        progress(
            started,
            &format!(
                "{name}: create latency p50 {:.2} ms, p99 {:.2} ms, {} errors",
                latency.p50_ms, latency.p99_ms, latency.errors
            ),
        );
        report.latency = Some(latency);
        serve.check_alive()?;
        anyhow::Ok(rate)
    }
    .await;
    serve.stop(Duration::from_secs(15)).await;
    let rate = result?;
    if matches!(db, Db::Postgres(_)) && !args.soak {
        report.latency_split = Some(split_latency(args, dir, db, &env, &keys, rate, started, &name).await?);
    }
    Ok(())
}

/// (3b) The open loop again at the same `rate`, with the API in one process (`serve --role
/// api`) and the payout workers in another (`withdrawals worker`), as a deployment that keeps
/// payouts off the API's cores would run.
#[allow(clippy::too_many_arguments)]
async fn split_latency(
    args: &BenchArgs,
    dir: &Path,
    db: &Db,
    env: &[(String, String)],
    keys: &[String],
    rate: f64,
    started: Instant,
    name: &str,
) -> anyhow::Result<load::LatencyReport> {
    let port = free_port()?;
    let (base_url, bind) = (format!("http://127.0.0.1:{port}"), format!("127.0.0.1:{port}"));
    let mut api = Proc::new(&format!("api-{name}"), &["serve", "--role", "api", "--bind", &bind], env, dir);
    let mut worker = Proc::new(&format!("worker-{name}"), &["worker"], env, dir);
    api.start()?;
    worker.start()?;
    let result = async {
        load::wait_ready(&format!("{base_url}/readyz"), Duration::from_secs(60), &mut api).await?;
        bench_store::refresh_statistics(db).await?;
        progress(
            started,
            &format!(
                "{name}: (3b) open-loop POSTs at {rate:.1}/s for {} s, API and workers apart",
                args.latency_seconds
            ),
        );
        let pid = api.pid().context("the api process has no pid")?;
        let contention = cpu::ContentionMeter::start(Some(pid));
        let mut latency = load::open_loop(&base_url, keys, rate, Duration::from_secs(args.latency_seconds)).await?;
        latency.contention = Some(contention.finish(latency.requests));
        progress(
            started,
            &format!("{name}: apart: create latency p50 {:.2} ms, p99 {:.2} ms", latency.p50_ms, latency.p99_ms),
        );
        api.check_alive()?;
        worker.check_alive()?;
        anyhow::Ok(latency)
    }
    .await;
    api.stop(Duration::from_secs(15)).await;
    worker.stop(Duration::from_secs(15)).await;
    result
}

fn progress(started: Instant, message: &str) {
    eprintln!("[{:>7.1}s] {message}", started.elapsed().as_secs_f64());
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}
