//! (1) The database's own ceiling for commit-bound work: `pgbench -N` (the TPC-B-like script
//! without the contended branch/teller updates: three statements and a commit per transaction)
//! on the same server the service uses.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct PgbenchReport {
    pub scale: u32,
    pub seconds: u64,
    pub tps_8_clients: f64,
    pub tps_32_clients: f64,
    pub latency_ms_8_clients: Option<f64>,
    pub latency_ms_32_clients: Option<f64>,
    pub init_seconds: f64,
}

pub const SCALE: u32 = 10;

pub async fn run(bin: &Path, url: &str, seconds: u64) -> anyhow::Result<PgbenchReport> {
    let exe = bin.join("pgbench");
    let init = Instant::now();
    pgbench(&exe, &["-i", "-s", &SCALE.to_string(), "-q", url]).await.context("pgbench -i")?;
    let init_seconds = init.elapsed().as_secs_f64();
    let secs = seconds.max(1).to_string();
    let eight = pgbench(&exe, &["-N", "-c", "8", "-j", "2", "-T", &secs, url]).await.context("pgbench -N -c 8")?;
    let thirty_two =
        pgbench(&exe, &["-N", "-c", "32", "-j", "2", "-T", &secs, url]).await.context("pgbench -N -c 32")?;
    Ok(PgbenchReport {
        scale: SCALE,
        seconds: seconds.max(1),
        tps_8_clients: parse_tps(&eight).context("no `tps = ` in pgbench's output (8 clients)")?,
        tps_32_clients: parse_tps(&thirty_two).context("no `tps = ` in pgbench's output (32 clients)")?,
        latency_ms_8_clients: parse_latency(&eight),
        latency_ms_32_clients: parse_latency(&thirty_two),
        init_seconds,
    })
}

async fn pgbench(exe: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = tokio::process::Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("run {}", exe.display()))?;
    if !output.status.success() {
        bail!("{} failed: {}", exe.display(), String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `tps = 1234.567890 (without initial connection time)` → 1234.56789.
pub fn parse_tps(output: &str) -> Option<f64> {
    output.lines().find_map(|l| l.trim().strip_prefix("tps = ")?.split_whitespace().next()?.parse().ok())
}

/// `latency average = 6.480 ms` → 6.48.
pub fn parse_latency(output: &str) -> Option<f64> {
    output.lines().find_map(|l| l.trim().strip_prefix("latency average = ")?.split_whitespace().next()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pgbench_15_output() {
        let out = "pgbench (15.14 (Debian 15.14-0+deb12u1))\ntransaction type: <builtin: simple update>\n\
                   scaling factor: 10\nquery mode: simple\nnumber of clients: 32\nnumber of threads: 2\n\
                   maximum number of tries: 1\nduration: 15 s\nnumber of transactions actually processed: 41234\n\
                   number of failed transactions: 0 (0.000%)\nlatency average = 11.642 ms\n\
                   initial connection time = 41.207 ms\ntps = 2748.612345 (without initial connection time)\n";
        assert_eq!(parse_tps(out), Some(2748.612345));
        assert_eq!(parse_latency(out), Some(11.642));
        assert_eq!(parse_tps("nothing"), None);
    }
}
