//! The benchmark's report: one table (metric, postgres, sqlite, sqlite/postgres, target, met?)
//! and one JSON document with every figure, the targets and whether each is met.

use std::time::Duration;

use serde_json::{json, Value};

use super::{BackendReport, BenchArgs};

/// The targets, evaluated on PostgreSQL (absolute ones on SQLite too, for information).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Target {
    pub name: &'static str,
    pub target: String,
    pub postgres: Option<f64>,
    pub threshold: Option<f64>,
    pub met: Option<bool>,
    /// Absolute targets only: SQLite's figure against the same threshold.
    pub sqlite: Option<f64>,
    pub sqlite_met: Option<bool>,
}

fn pick<'a>(reports: &'a [BackendReport], backend: &str) -> Option<&'a BackendReport> {
    reports.iter().find(|r| r.backend == backend)
}

fn tps32(r: Option<&BackendReport>) -> Option<f64> {
    r?.pgbench.as_ref().map(|p| p.tps_32_clients)
}

pub fn targets(reports: &[BackendReport]) -> Vec<Target> {
    let pg = pick(reports, "postgres");
    let lite = pick(reports, "sqlite");
    let e2e = |r: Option<&BackendReport>| r?.end_to_end.as_ref().map(|e| e.withdrawals_per_second);
    let noop = |r: Option<&BackendReport>| r?.queue.as_ref().map(|q| q.jobs_per_second);
    let p99 = |r: Option<&BackendReport>| r?.latency.as_ref().map(|l| l.p99_ms);
    let summary = |r: Option<&BackendReport>| r?.dead_letters.as_ref().map(|d| d.summary.p95_ms);
    let list = |r: Option<&BackendReport>| r?.dead_letters.as_ref().map(|d| d.list.p95_ms);
    let trends_day = |r: Option<&BackendReport>| r?.trends.as_ref().map(|t| t.day.p95_ms);
    let trends_hour = |r: Option<&BackendReport>| r?.trends.as_ref().map(|t| t.hour.p95_ms);
    let rss = |r: Option<&BackendReport>| r?.memory.as_ref().map(|m| m.peak_rss_mib);
    let work = |r: Option<&BackendReport>| r?.end_to_end.as_ref()?.database_work.clone();
    let pg_cpu = |r: Option<&BackendReport>| r?.end_to_end.as_ref()?.cpu.as_ref()?.postgres_ms_per_unit;
    let notify = |r: Option<&BackendReport>| r?.notifications.as_ref().map(|n| n.ratio);
    let soak = |r: Option<&BackendReport>| {
        let minutes = &r?.end_to_end.as_ref()?.per_minute;
        Some(minutes.last()? / minutes.first()?)
    };
    let at_least = |name, target: String, value: Option<f64>, threshold: Option<f64>| {
        let met = value.zip(threshold).map(|(v, t)| v >= t);
        Target { name, target, postgres: value, threshold, met, sqlite: None, sqlite_met: None }
    };
    let at_most = |name, target: String, value: Option<f64>, sqlite: Option<f64>, threshold: f64| Target {
        name,
        target,
        postgres: value,
        threshold: Some(threshold),
        met: value.map(|v| v <= threshold),
        sqlite,
        sqlite_met: sqlite.map(|v| v <= threshold),
    };
    vec![
        at_least(
            "end_to_end_vs_pgbench",
            "end-to-end withdrawals/s ≥ 0.5 × pgbench -N TPS (32 clients)".into(),
            e2e(pg),
            tps32(pg).map(|t| 0.5 * t),
        ),
        at_least(
            "noop_jobs_vs_pgbench",
            "no-op jobs/s ≥ 4 × pgbench -N TPS (32 clients)".into(),
            noop(pg),
            tps32(pg).map(|t| 4.0 * t),
        ),
        at_most(
            "create_p99_ms",
            "p99 create latency ≤ 10 ms at half the end-to-end throughput".into(),
            p99(pg),
            p99(lite),
            10.0,
        ),
        at_most(
            "dead_letter_summary_p95_ms",
            "dead-letter summary p95 ≤ 50 ms".into(),
            summary(pg),
            summary(lite),
            50.0,
        ),
        at_most("dead_letter_list_p95_ms", "filtered dead-letter list p95 ≤ 50 ms".into(), list(pg), list(lite), 50.0),
        at_most(
            "trends_day_p95_ms",
            "trend charts: the last day's statement p95 ≤ 50 ms over 1 M withdrawals".into(),
            trends_day(pg),
            trends_day(lite),
            50.0,
        ),
        at_most(
            "trends_hour_p95_ms",
            "trend charts: the last hour's statement p95 ≤ 50 ms over 1 M withdrawals".into(),
            trends_hour(pg),
            trends_hour(lite),
            50.0,
        ),
        at_most("peak_rss_mib", "peak RSS of serve ≤ 150 MiB".into(), rss(pg), rss(lite), 150.0),
        // Issue 20's targets for the payout pipeline (PostgreSQL, per withdrawal, from the
        // end-to-end phase's counters).
        at_least(
            "end_to_end_vs_pgbench_interim",
            "end-to-end ≥ 0.25 × pgbench -N TPS (issue 20's step)".into(),
            e2e(pg).zip(tps32(pg)).map(|(e, t)| e / t),
            Some(0.25),
        ),
        at_most("postgres_cpu_ms", "PostgreSQL CPU ≤ 1 ms per withdrawal".into(), pg_cpu(pg), None, 1.0),
        at_most(
            "write_transactions",
            "write transactions ≤ 1.5 per withdrawal".into(),
            work(pg).map(|w| w.write_transactions_per_unit),
            None,
            1.5,
        ),
        at_most(
            "wal_records",
            "WAL records ≤ 30 per withdrawal".into(),
            work(pg).map(|w| w.wal_records_per_unit),
            None,
            30.0,
        ),
        at_least("soak_last_over_first", "soak: last minute ≥ 0.9 × the first".into(), soak(pg), soak(pg).map(|_| 0.9)),
        // The notifications issue's "Done means": judged on both backends.
        Target {
            sqlite: notify(lite),
            sqlite_met: notify(lite).map(|v| v >= 0.8),
            ..at_least(
                "notify_ratio",
                "end-to-end with one endpoint per account ≥ 0.8 × without".into(),
                notify(pg),
                Some(0.8),
            )
        },
    ]
}

pub fn document(
    args: &BenchArgs,
    reports: &[BackendReport],
    load_at_start: &str,
    load_at_end: &str,
    elapsed: Duration,
) -> Value {
    let mut doc = json!({
        "parameters": {
            "backend": format!("{:?}", args.backend).to_lowercase(),
            "withdrawals": args.withdrawals,
            "connections": args.connections,
            "jobs": args.jobs,
            "dead_letters": args.dead_letters,
            "latency_seconds": args.latency_seconds,
            "pgbench_seconds": args.pgbench_seconds,
            "soak_minutes": if args.soak { Some(args.soak_minutes) } else { None },
            "notify_endpoints": args.notify_endpoints,
            "trends": if args.trends { Some(args.trend_withdrawals) } else { None },
            "postgres": if args.postgres_url.is_some() { "--postgres-url" } else { "throwaway cluster" },
        },
        "machine": {
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "load_average_at_start": load_at_start,
            "load_average_at_end": load_at_end,
        },
        "version": env!("CARGO_PKG_VERSION"),
        "total_seconds": elapsed.as_secs_f64(),
        "targets": targets(reports),
    });
    for r in reports {
        doc[r.backend.as_str()] = serde_json::to_value(r).unwrap_or(Value::Null);
    }
    if let (Some(pg), Some(lite)) = (pick(reports, "postgres"), pick(reports, "sqlite")) {
        let ratios: serde_json::Map<String, Value> = rows()
            .into_iter()
            .filter_map(|row| {
                let (p, s) = (row.of(pg)?, row.of(lite)?);
                (p != 0.0).then(|| (row.key.to_owned(), json!(s / p)))
            })
            .collect();
        doc["sqlite_to_postgres"] = Value::Object(ratios);
    }
    doc
}

/// One line of the table.
struct Row {
    key: &'static str,
    label: &'static str,
    unit: &'static str,
    value: fn(&BackendReport) -> Option<f64>,
    target: Option<&'static str>,
}

impl Row {
    fn of(&self, r: &BackendReport) -> Option<f64> {
        (self.value)(r)
    }
}

fn rows() -> Vec<Row> {
    let row = |key, label, unit, value, target| Row { key, label, unit, value, target };
    vec![
        row(
            "pgbench_tps_8",
            "pgbench -N TPS, 8 clients",
            "tx/s",
            |r| r.pgbench.as_ref().map(|p| p.tps_8_clients),
            None,
        ),
        row(
            "pgbench_tps_32",
            "pgbench -N TPS, 32 clients",
            "tx/s",
            |r| r.pgbench.as_ref().map(|p| p.tps_32_clients),
            None,
        ),
        row(
            "end_to_end_per_second",
            "end-to-end withdrawals/s (accept → completed)",
            "/s",
            |r| r.end_to_end.as_ref().map(|e| e.withdrawals_per_second),
            Some("end_to_end_vs_pgbench"),
        ),
        row(
            "end_to_end_over_pgbench",
            "  ÷ pgbench TPS (32 clients)",
            "×",
            |r| Some(r.end_to_end.as_ref()?.withdrawals_per_second / r.pgbench.as_ref()?.tps_32_clients),
            Some("end_to_end_vs_pgbench_interim"),
        ),
        row(
            "steady_state_per_second",
            "  steady state (10–90 %)",
            "/s",
            |r| r.end_to_end.as_ref()?.steady_state_per_second,
            None,
        ),
        row("accept_rate", "  accepts/s (API)", "/s", |r| r.end_to_end.as_ref().map(|e| e.accept_rate), None),
        row(
            "e2e_serve_cpu_ms",
            "  serve CPU per withdrawal",
            "ms",
            |r| r.end_to_end.as_ref()?.cpu.as_ref()?.serve_ms_per_unit,
            None,
        ),
        row(
            "e2e_postgres_cpu_ms",
            "  PostgreSQL CPU per withdrawal",
            "ms",
            |r| r.end_to_end.as_ref()?.cpu.as_ref()?.postgres_ms_per_unit,
            Some("postgres_cpu_ms"),
        ),
        row(
            "e2e_write_transactions",
            "  PostgreSQL write transactions per withdrawal",
            "",
            |r| r.end_to_end.as_ref()?.database_work.as_ref().map(|w| w.write_transactions_per_unit),
            Some("write_transactions"),
        ),
        row(
            "e2e_commits",
            "  PostgreSQL commits (read-only included) per withdrawal",
            "",
            |r| r.end_to_end.as_ref()?.database_work.as_ref().map(|w| w.commits_per_unit),
            None,
        ),
        row(
            "e2e_wal_records",
            "  WAL records per withdrawal",
            "",
            |r| r.end_to_end.as_ref()?.database_work.as_ref().map(|w| w.wal_records_per_unit),
            Some("wal_records"),
        ),
        row(
            "e2e_row_versions",
            "  row versions per withdrawal (inserts + updates)",
            "",
            |r| r.end_to_end.as_ref()?.database_work.as_ref().map(|w| w.row_versions_per_unit),
            None,
        ),
        row(
            "e2e_hot_updates",
            "    of them HOT updates (no index entry)",
            "",
            |r| r.end_to_end.as_ref()?.database_work.as_ref().map(|w| w.hot_updates_per_unit),
            None,
        ),
        row(
            "e2e_index_entries",
            "  index entries per withdrawal (≤ non-HOT versions × indexes)",
            "",
            |r| r.end_to_end.as_ref()?.database_work.as_ref().map(|w| w.index_entries_per_unit),
            None,
        ),
        row("e2e_index_entries_jobs", "    jobs", "", |r| index_entries(r, "jobs"), None),
        row("e2e_index_entries_withdrawals", "    withdrawals", "", |r| index_entries(r, "withdrawals"), None),
        row(
            "e2e_index_entries_transitions",
            "    withdrawal_transitions",
            "",
            |r| index_entries(r, "withdrawal_transitions"),
            None,
        ),
        row("e2e_index_entries_ledger", "    ledger_entries", "", |r| index_entries(r, "ledger_entries"), None),
        row("e2e_index_entries_attempts", "    provider_attempts", "", |r| index_entries(r, "provider_attempts"), None),
        row(
            "e2e_index_entries_idempotency",
            "    idempotency_records",
            "",
            |r| index_entries(r, "idempotency_records"),
            None,
        ),
        row("e2e_index_entries_balances", "    balances", "", |r| index_entries(r, "balances"), None),
        row(
            "e2e_cores_busy",
            "  machine cores busy",
            "",
            |r| r.end_to_end.as_ref()?.cpu.as_ref()?.machine_cores_busy,
            None,
        ),
        row(
            "latency_offered_rate",
            "create latency at offered rate",
            "/s",
            |r| r.latency.as_ref().map(|l| l.offered_rate),
            None,
        ),
        row("latency_achieved_rate", "  achieved rate", "/s", |r| r.latency.as_ref().map(|l| l.achieved_rate), None),
        row("latency_p50_ms", "  p50", "ms", |r| r.latency.as_ref().map(|l| l.p50_ms), None),
        row("latency_p95_ms", "  p95", "ms", |r| r.latency.as_ref().map(|l| l.p95_ms), None),
        row("latency_p99_ms", "  p99", "ms", |r| r.latency.as_ref().map(|l| l.p99_ms), Some("create_p99_ms")),
        row("latency_max_ms", "  max", "ms", |r| r.latency.as_ref().map(|l| l.max_ms), None),
        row(
            "latency_p99_median_second_ms",
            "  p99 of each second: median",
            "ms",
            |r| r.latency.as_ref().map(|l| median(&l.p99_by_second_ms)),
            None,
        ),
        row(
            "latency_p99_worst_second_ms",
            "  p99 of each second: worst",
            "ms",
            |r| r.latency.as_ref().map(|l| l.p99_by_second_ms.iter().copied().fold(0.0, f64::max)),
            None,
        ),
        row(
            "latency_cpu_pressure_percent",
            "  time some task waited for a core (PSI)",
            "%",
            |r| r.latency.as_ref()?.contention.as_ref()?.cpu_pressure_share.map(|s| s * 100.0),
            None,
        ),
        row(
            "latency_serve_runqueue_wait_ms",
            "  serve: waiting for a core, per request",
            "ms",
            |r| r.latency.as_ref()?.contention.as_ref()?.serve_runqueue_wait_ms_per_unit,
            None,
        ),
        row(
            "latency_serve_running_ms",
            "  serve: running, per request",
            "ms",
            |r| r.latency.as_ref()?.contention.as_ref()?.serve_running_ms_per_unit,
            None,
        ),
        row(
            "latency_send_lag_ms",
            "  generator's worst send lag",
            "ms",
            |r| r.latency.as_ref().map(|l| l.max_send_lag_ms),
            None,
        ),
        row("latency_errors", "  errors", "", |r| r.latency.as_ref().map(|l| l.errors as f64), None),
        row(
            "latency_split_p50_ms",
            "create latency, API and workers apart: p50",
            "ms",
            |r| r.latency_split.as_ref().map(|l| l.p50_ms),
            None,
        ),
        row("latency_split_p99_ms", "  p99", "ms", |r| r.latency_split.as_ref().map(|l| l.p99_ms), None),
        row("latency_split_max_ms", "  max", "ms", |r| r.latency_split.as_ref().map(|l| l.max_ms), None),
        row("latency_split_errors", "  errors", "", |r| r.latency_split.as_ref().map(|l| l.errors as f64), None),
        row(
            "soak_first_minute",
            "soak: completions/s, first minute",
            "/s",
            |r| r.end_to_end.as_ref()?.per_minute.first().copied(),
            None,
        ),
        row("soak_last_minute", "  last minute", "/s", |r| r.end_to_end.as_ref()?.per_minute.last().copied(), None),
        row(
            "soak_last_over_first",
            "  last ÷ first",
            "×",
            |r| {
                let minutes = &r.end_to_end.as_ref()?.per_minute;
                Some(minutes.last()? / minutes.first()?)
            },
            Some("soak_last_over_first"),
        ),
        row(
            "notify_without_per_second",
            "end-to-end withdrawals/s, no endpoints",
            "/s",
            |r| r.notifications.as_ref().map(|n| n.without.withdrawals_per_second),
            None,
        ),
        row(
            "notify_with_per_second",
            "  with one endpoint per account",
            "/s",
            |r| r.notifications.as_ref().map(|n| n.with.withdrawals_per_second),
            None,
        ),
        row(
            "notify_ratio",
            "  with ÷ without",
            "×",
            |r| r.notifications.as_ref().map(|n| n.ratio),
            Some("notify_ratio"),
        ),
        row(
            "notify_steady_ratio",
            "  steady state (10–90 %), with ÷ without",
            "×",
            |r| r.notifications.as_ref()?.steady_state_ratio,
            None,
        ),
        row(
            "notify_serve_cpu_without_ms",
            "  serve CPU per withdrawal, no endpoints",
            "ms",
            |r| r.notifications.as_ref()?.without.cpu.as_ref()?.serve_ms_per_unit,
            None,
        ),
        row(
            "notify_serve_cpu_with_ms",
            "  serve CPU per withdrawal, with endpoints",
            "ms",
            |r| r.notifications.as_ref()?.with.cpu.as_ref()?.serve_ms_per_unit,
            None,
        ),
        row(
            "notify_postgres_cpu_without_ms",
            "  PostgreSQL CPU per withdrawal, no endpoints",
            "ms",
            |r| r.notifications.as_ref()?.without.cpu.as_ref()?.postgres_ms_per_unit,
            None,
        ),
        row(
            "notify_postgres_cpu_with_ms",
            "  PostgreSQL CPU per withdrawal, with endpoints",
            "ms",
            |r| r.notifications.as_ref()?.with.cpu.as_ref()?.postgres_ms_per_unit,
            None,
        ),
        row(
            "notify_write_transactions_without",
            "  write transactions per withdrawal, no endpoints",
            "",
            |r| r.notifications.as_ref()?.without.database_work.as_ref().map(|w| w.write_transactions_per_unit),
            None,
        ),
        row(
            "notify_write_transactions_with",
            "  write transactions per withdrawal, with endpoints",
            "",
            |r| r.notifications.as_ref()?.with.database_work.as_ref().map(|w| w.write_transactions_per_unit),
            None,
        ),
        row(
            "notify_events",
            "  events written",
            "",
            |r| r.notifications.as_ref().map(|n| n.deliveries.events as f64),
            None,
        ),
        row(
            "notify_received_events",
            "  events delivered (distinct, at the receiver)",
            "",
            |r| r.notifications.as_ref().map(|n| n.deliveries.received_events as f64),
            None,
        ),
        row(
            "notify_delivered_in_window",
            "  of the deliveries, landed within the measured window",
            "×",
            |r| r.notifications.as_ref().map(|n| n.deliveries.delivered_in_window),
            None,
        ),
        row(
            "notify_drain_seconds",
            "  last delivery, after the last completion",
            "s",
            |r| r.notifications.as_ref().map(|n| n.deliveries.drain_seconds),
            None,
        ),
        row(
            "notify_lag_p50_ms",
            "  delivery lag (event → delivered) p50",
            "ms",
            |r| r.notifications.as_ref().map(|n| n.deliveries.lag_p50_ms),
            None,
        ),
        row(
            "notify_lag_p99_ms",
            "  delivery lag p99",
            "ms",
            |r| r.notifications.as_ref().map(|n| n.deliveries.lag_p99_ms),
            None,
        ),
        row(
            "noop_jobs_per_second",
            "no-op jobs/s (claim/lease/finish)",
            "/s",
            |r| r.queue.as_ref().map(|q| q.jobs_per_second),
            Some("noop_jobs_vs_pgbench"),
        ),
        row(
            "noop_over_pgbench",
            "  ÷ pgbench TPS (32 clients)",
            "×",
            |r| Some(r.queue.as_ref()?.jobs_per_second / r.pgbench.as_ref()?.tps_32_clients),
            None,
        ),
        row(
            "noop_postgres_cpu_ms",
            "  PostgreSQL CPU per job",
            "ms",
            |r| r.queue.as_ref()?.cpu.as_ref()?.postgres_ms_per_unit,
            None,
        ),
        row(
            "noop_worker_cpu_ms",
            "  worker CPU per job",
            "ms",
            |r| r.queue.as_ref()?.cpu.as_ref()?.bench_process_ms_per_unit,
            None,
        ),
        row(
            "noop_write_transactions",
            "  PostgreSQL write transactions per job",
            "",
            |r| r.queue.as_ref()?.database_work.as_ref().map(|w| w.write_transactions_per_unit),
            None,
        ),
        row(
            "noop_cores_busy",
            "  machine cores busy",
            "",
            |r| r.queue.as_ref()?.cpu.as_ref()?.machine_cores_busy,
            None,
        ),
        row(
            "dead_letters",
            "dead letters stored",
            "",
            |r| r.dead_letters.as_ref().map(|d| d.dead_letters as f64),
            None,
        ),
        row("dead_letters_open", "  of them open", "", |r| r.dead_letters.as_ref().map(|d| d.open as f64), None),
        row(
            "dlq_summary_p50_ms",
            "dead-letter summary p50",
            "ms",
            |r| r.dead_letters.as_ref().map(|d| d.summary.p50_ms),
            None,
        ),
        row(
            "dlq_summary_p95_ms",
            "dead-letter summary p95",
            "ms",
            |r| r.dead_letters.as_ref().map(|d| d.summary.p95_ms),
            Some("dead_letter_summary_p95_ms"),
        ),
        row(
            "dlq_list_p50_ms",
            "dead-letter filtered list p50",
            "ms",
            |r| r.dead_letters.as_ref().map(|d| d.list.p50_ms),
            None,
        ),
        row(
            "dlq_list_p95_ms",
            "dead-letter filtered list p95",
            "ms",
            |r| r.dead_letters.as_ref().map(|d| d.list.p95_ms),
            Some("dead_letter_list_p95_ms"),
        ),
        row(
            "trend_withdrawals",
            "trend charts: withdrawals stored",
            "",
            |r| r.trends.as_ref().map(|t| t.withdrawals as f64),
            None,
        ),
        row(
            "trend_hour_p50_ms",
            "  last hour's statement p50",
            "ms",
            |r| r.trends.as_ref().map(|t| t.hour.p50_ms),
            None,
        ),
        row(
            "trend_hour_p95_ms",
            "  last hour's statement p95",
            "ms",
            |r| r.trends.as_ref().map(|t| t.hour.p95_ms),
            Some("trends_hour_p95_ms"),
        ),
        row(
            "trend_hour_first_ms",
            "  last hour's first read (seals its closed buckets)",
            "ms",
            |r| r.trends.as_ref().map(|t| t.hour_first_ms),
            None,
        ),
        row("trend_day_p50_ms", "  last day's statement p50", "ms", |r| r.trends.as_ref().map(|t| t.day.p50_ms), None),
        row(
            "trend_day_p95_ms",
            "  last day's statement p95",
            "ms",
            |r| r.trends.as_ref().map(|t| t.day.p95_ms),
            Some("trends_day_p95_ms"),
        ),
        row(
            "trend_day_first_ms",
            "  last day's first read (seals its closed buckets)",
            "ms",
            |r| r.trends.as_ref().map(|t| t.day_first_ms),
            None,
        ),
        row(
            "peak_rss_mib",
            "peak RSS of serve (VmHWM)",
            "MiB",
            |r| r.memory.as_ref().map(|m| m.peak_rss_mib),
            Some("peak_rss_mib"),
        ),
    ]
}

fn fmt(v: Option<f64>, unit: &str) -> String {
    match v {
        None => "—".into(),
        Some(v) if unit == "×" => format!("{v:.2}×"),
        Some(v) if v.abs() >= 100.0 || v.fract() == 0.0 => format!("{v:.0} {unit}").trim_end().to_owned(),
        Some(v) => format!("{v:.2} {unit}").trim_end().to_owned(),
    }
}

pub fn table(reports: &[BackendReport]) -> String {
    let pg = pick(reports, "postgres");
    let lite = pick(reports, "sqlite");
    let targets = targets(reports);
    let header = ["metric", "postgres", "sqlite", "sqlite/postgres", "target", "met?"];
    let mut lines: Vec<[String; 6]> = Vec::new();
    for row in rows() {
        let p = pg.and_then(|r| row.of(r));
        let s = lite.and_then(|r| row.of(r));
        if p.is_none() && s.is_none() {
            continue; // a phase this run did not measure (pgbench while soaking, say)
        }
        let ratio = match (p, s) {
            (Some(p), Some(s)) if p != 0.0 && row.unit != "×" => format!("{:.2}", s / p),
            _ => String::new(),
        };
        let (target, met) = match row.target.and_then(|k| targets.iter().find(|t| t.name == k)) {
            Some(t) => {
                let threshold = match (t.name, t.threshold) {
                    ("end_to_end_vs_pgbench", Some(v)) => format!("≥ {v:.0}/s (0.5× pgbench)"),
                    ("noop_jobs_vs_pgbench", Some(v)) => format!("≥ {v:.0}/s (4× pgbench)"),
                    ("end_to_end_vs_pgbench_interim" | "soak_last_over_first" | "notify_ratio", Some(v)) => {
                        format!("≥ {v}×")
                    }
                    (_, Some(v)) if t.sqlite_met.is_some() || t.met.is_some() => {
                        format!("≤ {v} {}", row.unit).trim_end().to_owned()
                    }
                    _ => t.target.clone(),
                };
                let yes = |m: Option<bool>| match m {
                    Some(true) => "yes",
                    Some(false) => "NO",
                    None => "—",
                };
                let met = match t.sqlite_met {
                    Some(sm) => format!("{} (sqlite: {})", yes(t.met), yes(Some(sm))),
                    None => yes(t.met).to_owned(),
                };
                (threshold, met)
            }
            None => (String::new(), String::new()),
        };
        lines.push([row.label.to_owned(), fmt(p, row.unit), fmt(s, row.unit), ratio, target, met]);
    }
    let mut widths = header.map(|h| h.chars().count());
    for line in &lines {
        for (w, cell) in widths.iter_mut().zip(line.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let render = |cells: &[String]| {
        cells
            .iter()
            .zip(widths.iter())
            .enumerate()
            .map(|(i, (c, w))| {
                let pad = w - c.chars().count();
                if i == 0 || i >= 4 {
                    format!("{c}{}", " ".repeat(pad))
                } else {
                    format!("{}{c}", " ".repeat(pad))
                }
            })
            .collect::<Vec<_>>()
            .join(" | ")
            .trim_end()
            .to_owned()
    };
    let mut out = String::new();
    out.push_str(&render(&header.map(str::to_owned)));
    out.push('\n');
    out.push_str(&widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("-|-"));
    out.push('\n');
    for line in &lines {
        out.push_str(&render(line));
        out.push('\n');
    }
    for r in reports {
        for e in &r.errors {
            out.push_str(&format!("error ({}): {e}\n", r.backend));
        }
    }
    out
}

/// The median of unsorted values (0 when empty).
/// One table's index entries per withdrawal in the end-to-end phase.
fn index_entries(r: &BackendReport, table: &str) -> Option<f64> {
    let work = r.end_to_end.as_ref()?.database_work.as_ref()?;
    Some(work.tables.iter().find(|t| t.table == table).map_or(0.0, |t| t.index_entries))
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    super::load::percentile(&sorted, 0.5)
}
