//! The HTTP load of the benchmark: a closed-loop burst of withdrawals over N connections (the
//! end-to-end figure), and an open-loop generator at a fixed rate (the latency figure).
//!
//! Open loop: request `i` is sent at `t0 + i / rate` whether or not earlier ones have answered,
//! and its latency is measured from that scheduled time, so a stall shows up in the percentiles
//! instead of silently slowing the generator (coordinated omission).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::json;

use crate::chaos::procs::Proc;
use crate::store::bench as bench_store;
use withdrawals::storage::Db;

/// (2): withdrawals per second from the first accept to the moment all are `completed`.
#[derive(Debug, Clone, Serialize)]
pub struct EndToEndReport {
    pub withdrawals: u64,
    pub connections: usize,
    pub accounts: usize,
    pub accepted: u64,
    pub client_retries: u64,
    pub errors: u64,
    pub error_samples: Vec<String>,
    /// First accept → last accept, seconds (client clock).
    pub accept_seconds: f64,
    /// Accepted withdrawals per second over `accept_seconds`.
    pub accept_rate: f64,
    /// First accept → all `completed`, seconds (the service's timestamps: the first
    /// withdrawal's `created_at` to the last one's `updated_at`).
    pub end_to_end_seconds: f64,
    /// The headline: `completed / end_to_end_seconds`.
    pub withdrawals_per_second: f64,
    /// Completions per second between 10 % and 90 % of the total (the steady middle).
    pub steady_state_per_second: Option<f64>,
    pub final_states: BTreeMap<String, i64>,
    /// Where the CPU went during the phase (units: withdrawals).
    pub cpu: Option<super::cpu::CpuReport>,
    /// PostgreSQL commits, WAL syncs, records and bytes per withdrawal.
    pub database_work: Option<super::cpu::DatabaseWork>,
    /// Soaking: completions per second in each whole minute of the load, first to last.
    pub per_minute: Vec<f64>,
}

/// What the end-to-end phase creates.
#[derive(Debug, Clone, Copy)]
pub enum Load {
    /// This many withdrawals.
    Count(u64),
    /// As many as the service takes for this long (the soak).
    For(Duration),
}

impl std::fmt::Display for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Load::Count(n) => write!(f, "{n} withdrawals"),
            Load::For(d) => write!(f, "withdrawals for {} s (soak)", d.as_secs()),
        }
    }
}

/// The most accepted-but-unsettled withdrawals a soak lets build up (a few seconds of work).
const SOAK_BACKLOG: u64 = 2_000;

/// The states the end-to-end poll counts (through the status index): all but `completed`.
const NOT_COMPLETED: [withdrawals::domain::WithdrawalStatus; 4] = [
    withdrawals::domain::WithdrawalStatus::Pending,
    withdrawals::domain::WithdrawalStatus::Processing,
    withdrawals::domain::WithdrawalStatus::RequiresReview,
    withdrawals::domain::WithdrawalStatus::Failed,
];

/// Completions per second in each whole minute from `start` to `end`, from the completed-count
/// samples (taken every 100 ms).
fn per_minute(samples: &[(Instant, i64)], start: Instant, end: Instant) -> Vec<f64> {
    let completed_at = |t: Instant| samples.iter().take_while(|(at, _)| *at <= t).last().map_or(0, |(_, c)| *c);
    let mut rates = Vec::new();
    let mut from = start;
    while from + Duration::from_secs(60) <= end {
        let to = from + Duration::from_secs(60);
        rates.push((completed_at(to) - completed_at(from)) as f64 / 60.0);
        from = to;
    }
    rates
}

/// (3): `POST /v1/withdrawals` latency at a fixed offered rate.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyReport {
    pub offered_rate: f64,
    pub seconds: f64,
    pub requests: u64,
    /// 201 answers per second, over the time from the first scheduled send to the last answer.
    pub achieved_rate: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    pub errors: u64,
    pub error_samples: Vec<String>,
    /// How late the generator itself was sending (its own scheduling lag), worst case, ms.
    pub max_send_lag_ms: f64,
    /// p99 of the requests sent in each second of the phase, in order, ms.
    pub p99_by_second_ms: Vec<f64>,
    /// How much waited for a core meanwhile (filled in by the caller).
    pub contention: Option<super::cpu::Contention>,
}

pub async fn wait_ready(url: &str, within: Duration, process: &mut Proc) -> anyhow::Result<()> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    let deadline = Instant::now() + within;
    loop {
        if let Ok(r) = http.get(url).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        process.check_alive()?;
        if Instant::now() > deadline {
            bail!("{url} did not answer within {within:?} (see {})", process.log.display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A line like `VmHWM:   123456 kB` of `/proc/PID/status`, in KiB.
pub fn read_status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .with_context(|| format!("no {field} in /proc/{pid}/status"))?;
    let kib = line.split_whitespace().nth(1).context("malformed status line")?;
    Ok(kib.parse()?)
}

/// Samples `VmRSS` every 200 ms in the background.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<u64>,
}

impl RssSampler {
    pub fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut max = 0;
            while !flag.load(Ordering::Relaxed) {
                if let Ok(kib) = read_status_kib(pid, "VmRSS") {
                    max = max.max(kib);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            max
        });
        Self { stop, task }
    }

    /// The largest sample, in KiB.
    pub async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or(0)
    }
}

fn body(i: u64) -> serde_json::Value {
    let cents = 100 + (i * 7_919) % 4_900;
    json!({
        "amount": format!("{}.{:02}", cents / 100, cents % 100),
        "currency": "USD",
        "destination": {
            "type": "bank_account",
            "account_number": format!("{}", 10_000_000 + (i * 104_729) % 89_999_999),
            "bank_code": "021000021",
        },
        "reference": format!("bench {i}"),
    })
}

fn http_client(connections: usize) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(connections.max(1))
        .tcp_nodelay(true)
        .build()?)
}

#[derive(Default)]
struct Worker {
    first: Option<Instant>,
    last: Option<Instant>,
    accepted: u64,
    retries: u64,
    errors: u64,
    samples: Vec<String>,
}

/// Creates `count` withdrawals over `connections` connections (each sends its next request as
/// soon as the previous one is accepted; resends the same key after transport errors, 409 and
/// 5xx), while polling the database until every accepted withdrawal is `completed` (or another
/// final state).
pub async fn end_to_end(
    db: &Db,
    base_url: &str,
    keys: &[String],
    load: Load,
    connections: usize,
    serve: &mut Proc,
) -> anyhow::Result<EndToEndReport> {
    let started = Instant::now();
    let (count, deadline) = match load {
        Load::Count(n) => (n, None),
        Load::For(d) => (u64::MAX, Some(started + d)),
    };
    let http = http_client(connections)?;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let next = Arc::new(AtomicU64::new(0));
    let accepted_total = Arc::new(AtomicU64::new(0));
    let settled_total = Arc::new(AtomicU64::new(0));
    let keys = Arc::new(keys.to_vec());
    let url = format!("{base_url}/v1/withdrawals");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let (http, next, accepted_total, settled_total, keys, url, run) = (
            http.clone(),
            next.clone(),
            accepted_total.clone(),
            settled_total.clone(),
            keys.clone(),
            url.clone(),
            run.clone(),
        );
        tasks.spawn(async move {
            let mut w = Worker::default();
            loop {
                // Soaking measures what the service sustains: the clients hold back while the
                // backlog (accepted, not yet settled) is over SOAK_BACKLOG, instead of piling up
                // an ever longer queue that would slow every claim and hide the tables' growth.
                while deadline.is_some_and(|d| Instant::now() < d)
                    && accepted_total.load(Ordering::Relaxed) > settled_total.load(Ordering::Relaxed) + SOAK_BACKLOG
                {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count || deadline.is_some_and(|d| Instant::now() >= d) {
                    return w;
                }
                let key = &keys[(i % keys.len() as u64) as usize];
                let idempotency_key = format!("bench-{run}-{i}");
                let payload = body(i);
                let mut tries = 0;
                loop {
                    tries += 1;
                    let sent = http
                        .post(&url)
                        .bearer_auth(key)
                        .header("Idempotency-Key", &idempotency_key)
                        .json(&payload)
                        .send()
                        .await;
                    let outcome = match sent {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            let text = r.text().await.unwrap_or_default();
                            Ok((status, text))
                        }
                        Err(err) => Err(err.to_string()),
                    };
                    match outcome {
                        Ok((201, _)) => {
                            let now = Instant::now();
                            w.first.get_or_insert(now);
                            w.last = Some(now);
                            w.accepted += 1;
                            accepted_total.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        Ok((409 | 500..=599, _)) | Err(_) if tries < 50 => {
                            w.retries += 1;
                            tokio::time::sleep(Duration::from_millis(20 * tries.min(10))).await;
                        }
                        other => {
                            w.errors += 1;
                            if w.samples.len() < 5 {
                                w.samples.push(format!("{idempotency_key}: {other:?}"));
                            }
                            break;
                        }
                    }
                }
            }
        });
    }

    // Poll the database while the load runs and until it has drained.
    let mut samples: Vec<(Instant, i64)> = Vec::new();
    let mut load_done = false;
    let mut workers = Vec::new();
    let mut last_progress = (Instant::now(), -1_i64);
    let final_states = loop {
        while let Some(joined) = tasks.try_join_next() {
            workers.push(joined.context("a load task panicked")?);
        }
        if !load_done && tasks.is_empty() {
            load_done = true;
        }
        // Completed = accepted − the rest, so the poll reads only the rows not completed (through
        // the status index) and costs the same on the last minute of a soak as on the first.
        // Rows committed whose 201 is still on its way count as not completed, so `completed` is
        // low by at most the requests in flight, and exact once the load is done.
        let not_completed: BTreeMap<String, i64> =
            withdrawals::storage::metrics::withdrawals_in_states(db, &NOT_COMPLETED)
                .await?
                .into_iter()
                .map(|r| (r.status.to_string(), r.count))
                .collect();
        let count_of = |status: &str| not_completed.get(status).copied().unwrap_or(0);
        let accepted_now = accepted_total.load(Ordering::Relaxed) as i64;
        let in_flight = count_of("pending") + count_of("processing");
        let completed = (accepted_now - not_completed.values().sum::<i64>()).max(0);
        let settled = completed + count_of("failed") + count_of("requires_review");
        settled_total.store(settled.max(0) as u64, Ordering::Relaxed);
        let now = Instant::now();
        samples.push((now, completed));
        if settled != last_progress.1 {
            last_progress = (now, settled);
        } else if now - last_progress.0 > Duration::from_secs(120) {
            bail!("no withdrawal settled for 2 minutes ({not_completed:?}); see {}", serve.log.display());
        }
        if load_done && in_flight == 0 {
            // The exact count, once: the final states of the phase.
            break bench_store::withdrawal_status_counts(db).await?.into_iter().collect::<BTreeMap<String, i64>>();
        }
        serve.check_alive()?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    let accepted: u64 = workers.iter().map(|w| w.accepted).sum();
    let first = workers.iter().filter_map(|w| w.first).min();
    let last = workers.iter().filter_map(|w| w.last).max();
    let accept_seconds = match (first, last) {
        (Some(f), Some(l)) => (l - f).as_secs_f64(),
        _ => 0.0,
    };
    let (first_created, last_completed, completed) = bench_store::withdrawal_time_span(db, "completed").await?;
    let end_to_end_seconds = match (first_created, last_completed) {
        (Some(f), Some(l)) => (l.0 - f.0).num_microseconds().unwrap_or(0) as f64 / 1e6,
        _ => 0.0,
    };
    let crossing = |share: f64| samples.iter().find(|(_, c)| *c as f64 >= share * accepted as f64).map(|(t, _)| *t);
    let steady_state_per_second = match (crossing(0.1), crossing(0.9)) {
        (Some(a), Some(b)) if b > a => Some(0.8 * accepted as f64 / (b - a).as_secs_f64()),
        _ => None,
    };
    let per_minute = match deadline {
        Some(end) => per_minute(&samples, started, end),
        None => Vec::new(),
    };
    Ok(EndToEndReport {
        withdrawals: if deadline.is_some() { accepted } else { count },
        connections,
        accounts: keys.len(),
        accepted,
        client_retries: workers.iter().map(|w| w.retries).sum(),
        errors: workers.iter().map(|w| w.errors).sum(),
        error_samples: workers.iter().flat_map(|w| w.samples.iter().cloned()).take(10).collect(),
        accept_seconds,
        accept_rate: if accept_seconds > 0.0 { accepted as f64 / accept_seconds } else { 0.0 },
        end_to_end_seconds,
        withdrawals_per_second: if end_to_end_seconds > 0.0 { completed as f64 / end_to_end_seconds } else { 0.0 },
        steady_state_per_second,
        final_states,
        cpu: None,
        database_work: None,
        per_minute,
    })
}

/// Sends `rate` creates per second for `duration`, each at its scheduled time, and measures each
/// one's latency from that time to the end of its response.
///
/// The generator runs on threads of its own, apart from this process's runtime (which also
/// serves the provider mock), as a separate load tool would: a ticker thread that sleeps to each
/// send time on the kernel's high-resolution timer (tokio's timer rounds up to the next
/// millisecond), and a one-thread runtime that sends the requests and reads the answers. Its own
/// lateness is reported as `max_send_lag_ms`; it still counts in each latency.
pub async fn open_loop(
    base_url: &str,
    keys: &[String],
    rate: f64,
    duration: Duration,
) -> anyhow::Result<LatencyReport> {
    if !(rate.is_finite() && rate > 0.0) {
        bail!("no offered rate (the end-to-end phase measured {rate})");
    }
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-open-loop")
        .enable_all()
        .build()
        .context("start the load generator's runtime")?;
    let http = http_client(256)?;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let url = format!("{base_url}/v1/withdrawals");
    let count = (rate * duration.as_secs_f64()).round().max(1.0) as u64;
    let keys = Arc::new(keys.to_vec());
    let spawner = client.handle().clone();
    let ticker = std::thread::Builder::new().name("bench-ticker".into()).spawn(move || {
        let t0 = Instant::now() + Duration::from_millis(200);
        let mut tasks = Vec::with_capacity(count as usize);
        let mut max_lag = Duration::ZERO;
        for i in 0..count {
            let scheduled = t0 + Duration::from_secs_f64(i as f64 / rate);
            let now = Instant::now();
            if scheduled > now {
                std::thread::sleep(scheduled - now);
            }
            max_lag = max_lag.max(Instant::now().saturating_duration_since(scheduled));
            let (http, url, keys, run) = (http.clone(), url.clone(), keys.clone(), run.clone());
            tasks.push(spawner.spawn(async move {
                let key = &keys[(i % keys.len() as u64) as usize];
                let sent = http
                    .post(&url)
                    .bearer_auth(key)
                    .header("Idempotency-Key", format!("latency-{run}-{i}"))
                    .json(&body(i))
                    .send()
                    .await;
                let outcome = match sent {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let _ = r.bytes().await;
                        Ok(status)
                    }
                    Err(err) => Err(err.to_string()),
                };
                let done = Instant::now();
                ((done - scheduled).as_secs_f64() * 1e3, outcome, done)
            }));
        }
        (t0, tasks, max_lag)
    })?;
    let ticked = tokio::task::spawn_blocking(move || ticker.join()).await?;
    let (t0, tasks, max_lag) = ticked.map_err(|_| anyhow::anyhow!("the load generator's ticker panicked"))?;
    let mut results: Vec<(f64, Result<u16, String>, Instant)> = Vec::with_capacity(tasks.len());
    for task in tasks {
        results.push(task.await?);
    }
    client.shutdown_background();
    // Per second of scheduled send time, so a burst (say, an autovacuum round) shows where it
    // was instead of only raising the percentiles.
    let mut by_second: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for (ms, _, done) in &results {
        let sent_ms = ((*done - t0).as_secs_f64() * 1e3 - ms).max(0.0);
        by_second.entry((sent_ms / 1e3) as u64).or_default().push(*ms);
    }
    let p99_by_second_ms = by_second
        .into_values()
        .map(|mut v| {
            v.sort_by(|a, b| a.total_cmp(b));
            percentile(&v, 0.99)
        })
        .collect();
    let mut latencies: Vec<f64> = results.iter().map(|(ms, _, _)| *ms).collect();
    latencies.sort_by(|a, b| a.total_cmp(b));
    let ok = results.iter().filter(|(_, o, _)| matches!(o, Ok(201))).count() as u64;
    let errors: Vec<String> =
        results.iter().filter(|(_, o, _)| !matches!(o, Ok(201))).map(|(_, o, _)| format!("{o:?}")).collect();
    let last_done = results.iter().map(|(_, _, d)| *d).max().unwrap_or_else(Instant::now);
    let span = (last_done - t0).as_secs_f64();
    Ok(LatencyReport {
        offered_rate: rate,
        seconds: duration.as_secs_f64(),
        requests: count,
        achieved_rate: if span > 0.0 { ok as f64 / span } else { 0.0 },
        p50_ms: percentile(&latencies, 0.50),
        p95_ms: percentile(&latencies, 0.95),
        p99_ms: percentile(&latencies, 0.99),
        max_ms: latencies.last().copied().unwrap_or(0.0),
        mean_ms: latencies.iter().sum::<f64>() / latencies.len().max(1) as f64,
        errors: errors.len() as u64,
        error_samples: errors.into_iter().take(10).collect(),
        max_send_lag_ms: max_lag.as_secs_f64() * 1e3,
        p99_by_second_ms,
        contention: None,
    })
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.95), 95.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 1.0), 100.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn bodies_are_valid_requests() {
        for i in 0..1_000 {
            let b = body(i);
            let amount: f64 = b["amount"].as_str().unwrap().parse().unwrap();
            assert!((1.0..=50.0).contains(&amount), "{amount}");
            let n = b["destination"]["account_number"].as_str().unwrap();
            assert!(n.len() == 8 && n.chars().all(|c| c.is_ascii_digit()), "{n}");
        }
    }
}
