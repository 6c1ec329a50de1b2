//! CPU accounting from `/proc`: how much of a phase went to the service, to PostgreSQL, to the
//! benchmark's own client, and how busy the whole machine was (others included).

use serde::Serialize;

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// (ppid, utime + stime in seconds) of a process, from `/proc/PID/stat`.
fn stat(pid: u32) -> Option<(u32, f64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((ppid, (utime + stime) / ticks_per_second()))
}

/// CPU seconds one process has used so far.
pub fn process_seconds(pid: u32) -> Option<f64> {
    stat(pid).map(|(_, s)| s)
}

/// CPU seconds used by `root` and its direct children (the postmaster and its backends).
pub fn tree_seconds(root: u32) -> Option<f64> {
    let own = process_seconds(root)?;
    let children: f64 = std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
        .filter(|(ppid, _)| *ppid == root)
        .map(|(_, s)| s)
        .sum();
    Some(own + children)
}

/// The parent of a process (a backend's parent is the postmaster).
pub fn parent(pid: u32) -> Option<u32> {
    stat(pid).map(|(ppid, _)| ppid)
}

/// (busy, total) CPU seconds of the whole machine, all cores.
pub fn machine_seconds() -> Option<(f64, f64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<f64> = line.split_whitespace().filter_map(|f| f.parse().ok()).collect();
    let total: f64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4).unwrap_or(&0.0);
    let tps = ticks_per_second();
    Some(((total - idle) / tps, total / tps))
}

/// CPU seconds of each party at one instant.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot {
    at: std::time::Instant,
    serve: Option<f64>,
    postgres: Option<f64>,
    client: Option<f64>,
    machine: Option<(f64, f64)>,
}

impl Snapshot {
    pub fn take(serve_pid: Option<u32>, postmaster_pid: Option<u32>) -> Self {
        Self {
            at: std::time::Instant::now(),
            serve: serve_pid.and_then(process_seconds),
            postgres: postmaster_pid.and_then(tree_seconds),
            client: process_seconds(std::process::id()),
            machine: machine_seconds(),
        }
    }
}

/// Where the CPU went between two snapshots.
#[derive(Debug, Clone, Serialize)]
pub struct CpuReport {
    pub wall_seconds: f64,
    pub serve_seconds: Option<f64>,
    /// The postmaster and its backends (PostgreSQL only, when the server is local).
    pub postgres_seconds: Option<f64>,
    /// This benchmark process: the HTTP clients, the provider mock and the progress polling.
    pub bench_process_seconds: Option<f64>,
    /// Every core of the machine, whoever used it.
    pub machine_busy_seconds: Option<f64>,
    pub machine_cores_busy: Option<f64>,
    /// Per unit of work (a withdrawal, or a job in the queue phase), in CPU milliseconds.
    pub serve_ms_per_unit: Option<f64>,
    pub postgres_ms_per_unit: Option<f64>,
    pub bench_process_ms_per_unit: Option<f64>,
}

pub fn between(a: &Snapshot, b: &Snapshot, units: u64) -> CpuReport {
    let d = |x: Option<f64>, y: Option<f64>| Some(y? - x?);
    let wall = (b.at - a.at).as_secs_f64();
    let per = |s: Option<f64>| s.map(|s| s * 1e3 / units.max(1) as f64);
    let busy = d(a.machine.map(|m| m.0), b.machine.map(|m| m.0));
    let total = d(a.machine.map(|m| m.1), b.machine.map(|m| m.1));
    let cores = std::thread::available_parallelism().map(|n| n.get() as f64).unwrap_or(1.0);
    CpuReport {
        wall_seconds: wall,
        serve_seconds: d(a.serve, b.serve),
        postgres_seconds: d(a.postgres, b.postgres),
        bench_process_seconds: d(a.client, b.client),
        machine_busy_seconds: busy,
        machine_cores_busy: busy.zip(total).map(|(b, t)| if t > 0.0 { b / t * cores } else { 0.0 }),
        serve_ms_per_unit: per(d(a.serve, b.serve)),
        postgres_ms_per_unit: per(d(a.postgres, b.postgres)),
        bench_process_ms_per_unit: per(d(a.client, b.client)),
    }
}

/// PostgreSQL's work per unit between two readings of its counters.
#[derive(Debug, Clone, Serialize)]
pub struct DatabaseWork {
    /// Transactions that wrote (transaction ids assigned), per unit.
    pub write_transactions_per_unit: f64,
    /// Commits of any transaction, read-only ones included (the benchmark's own polling too).
    pub commits_per_unit: f64,
    pub wal_syncs_per_unit: f64,
    pub wal_records_per_unit: f64,
    pub wal_bytes_per_unit: f64,
    /// Row versions written (inserts and updates), per unit, all tables.
    pub row_versions_per_unit: f64,
    /// Of them, updates PostgreSQL made HOT (no index entry written).
    pub hot_updates_per_unit: f64,
    /// Index entries written, at most: every row version that is not HOT, once per index of its
    /// table (a partial index takes only the versions its predicate matches).
    pub index_entries_per_unit: f64,
    /// The same per table, most index entries first (tables the phase did not write left out).
    pub tables: Vec<TableWork>,
}

/// One table's share of [`DatabaseWork`], per unit.
#[derive(Debug, Clone, Serialize)]
pub struct TableWork {
    pub table: String,
    pub inserts: f64,
    pub updates: f64,
    pub hot_updates: f64,
    pub deletes: f64,
    pub indexes: i64,
    pub index_entries: f64,
}

pub fn database_work(
    a: Option<crate::store::bench::PgActivity>,
    b: Option<crate::store::bench::PgActivity>,
    units: u64,
) -> Option<DatabaseWork> {
    let (a, b) = (a?, b?);
    let n = units.max(1) as f64;
    let mut tables: Vec<TableWork> = b
        .tables
        .iter()
        .filter_map(|after| {
            let before = a.tables.iter().find(|t| t.table == after.table);
            let d =
                |f: fn(&crate::store::bench::TableActivity) -> i64| (f(after) - before.map_or(0, f)).max(0) as f64 / n;
            let (inserts, updates, hot_updates, deletes) =
                (d(|t| t.inserts), d(|t| t.updates), d(|t| t.hot_updates), d(|t| t.deletes));
            (inserts + updates + deletes > 0.0).then(|| TableWork {
                table: after.table.clone(),
                inserts,
                updates,
                hot_updates,
                deletes,
                indexes: after.indexes,
                index_entries: (inserts + updates - hot_updates) * after.indexes as f64,
            })
        })
        .collect();
    tables.sort_by(|x, y| y.index_entries.total_cmp(&x.index_entries));
    Some(DatabaseWork {
        row_versions_per_unit: tables.iter().map(|t| t.inserts + t.updates).sum(),
        hot_updates_per_unit: tables.iter().map(|t| t.hot_updates).sum(),
        index_entries_per_unit: tables.iter().map(|t| t.index_entries).sum(),
        tables,
        write_transactions_per_unit: (b.next_xid - a.next_xid) as f64 / n,
        commits_per_unit: (b.xact_commit - a.xact_commit) as f64 / n,
        wal_syncs_per_unit: (b.wal_sync - a.wal_sync) as f64 / n,
        wal_records_per_unit: (b.wal_records - a.wal_records) as f64 / n,
        wal_bytes_per_unit: (b.wal_lsn - a.wal_lsn) as f64 / n,
    })
}

/// Counters and CPU at the start of a phase.
pub struct Meter {
    pg: Option<crate::store::bench::PgActivity>,
    postmaster: Option<u32>,
    serve: Option<u32>,
    cpu: Snapshot,
}

impl Meter {
    pub async fn start(db: &withdrawals::storage::Db, serve: Option<u32>) -> Self {
        let pg = crate::store::bench::postgres_activity(db).await.ok().flatten();
        let postmaster = pg.as_ref().and_then(|a| parent(a.backend_pid as u32));
        Self { pg, postmaster, serve, cpu: Snapshot::take(serve, postmaster) }
    }

    /// CPU now; database counters after a pause (an idle backend publishes its statistics up to
    /// 10 s late).
    pub async fn finish(self, db: &withdrawals::storage::Db, units: u64) -> (CpuReport, Option<DatabaseWork>) {
        let cpu = between(&self.cpu, &Snapshot::take(self.serve, self.postmaster), units);
        let work = if self.pg.is_some() {
            tokio::time::sleep(std::time::Duration::from_millis(11_000)).await;
            database_work(self.pg, crate::store::bench::postgres_activity(db).await.ok().flatten(), units)
        } else {
            None
        };
        (cpu, work)
    }
}

/// How much runnable work waited for a core during a phase: what tail latency is made of on a
/// saturated machine.
#[derive(Debug, Clone, Serialize)]
pub struct Contention {
    /// Share of the phase during which at least one task of the machine was runnable but had no
    /// core (Linux pressure stall information, `/proc/pressure/cpu`, `some`).
    pub cpu_pressure_share: Option<f64>,
    /// `serve`'s threads: time spent waiting on a run queue, and running, per unit (a request of
    /// the phase, with its payout), in ms (`/proc/PID/task/*/schedstat`).
    pub serve_runqueue_wait_ms_per_unit: Option<f64>,
    pub serve_running_ms_per_unit: Option<f64>,
}

/// The `some` stall total of `/proc/pressure/cpu`, in microseconds.
fn cpu_pressure_total_us() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/pressure/cpu").ok()?;
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace().find_map(|f| f.strip_prefix("total="))?.parse().ok()
}

/// (running, waiting on a run queue) nanoseconds summed over a process's live threads.
fn thread_schedstat(pid: u32) -> Option<(u64, u64)> {
    let mut sum = (0, 0);
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else { continue };
        let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().unwrap_or(0));
        sum.0 += fields.next().unwrap_or(0);
        sum.1 += fields.next().unwrap_or(0);
    }
    Some(sum)
}

/// [`Contention`] from the start of a phase.
pub struct ContentionMeter {
    at: std::time::Instant,
    pressure: Option<u64>,
    serve: Option<(u32, (u64, u64))>,
}

impl ContentionMeter {
    pub fn start(serve: Option<u32>) -> Self {
        Self {
            at: std::time::Instant::now(),
            pressure: cpu_pressure_total_us(),
            serve: serve.and_then(|pid| Some((pid, thread_schedstat(pid)?))),
        }
    }

    pub fn finish(self, units: u64) -> Contention {
        let wall_us = self.at.elapsed().as_secs_f64() * 1e6;
        let per = |ns: u64| ns as f64 / 1e6 / units.max(1) as f64;
        let serve = self.serve.and_then(|(pid, a)| Some((a, thread_schedstat(pid)?)));
        Contention {
            cpu_pressure_share: self
                .pressure
                .zip(cpu_pressure_total_us())
                .map(|(a, b)| b.saturating_sub(a) as f64 / wall_us.max(1.0)),
            serve_runqueue_wait_ms_per_unit: serve.map(|(a, b)| per(b.1.saturating_sub(a.1))),
            serve_running_ms_per_unit: serve.map(|(a, b)| per(b.0.saturating_sub(a.0))),
        }
    }
}
