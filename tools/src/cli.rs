//! The `withdrawals-tools` command line: `chaos` and `bench`. Both start the `withdrawals`
//! binary (`serve`, `worker`, `provider-mock`) as child processes; see
//! [`chaos::procs::service_binary`](crate::chaos::procs::service_binary) for how it is found.

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "withdrawals-tools", version = withdrawals::VERSION, about = "Chaos run and benchmarks for the withdrawals service")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// A bounded chaos run: faults, SIGKILLed workers, a database restart; then the invariants.
    /// `--providers 2`: two providers, the first down for a window; no key paid at both.
    Chaos(crate::chaos::ChaosArgs),
    /// Benchmarks (SPEC §12): pgbench ceiling, end-to-end, latency, queue, dead letters, memory.
    Bench(crate::bench::BenchArgs),
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Chaos(args) => crate::chaos::run(args).await,
        Command::Bench(args) => crate::bench::run(args).await,
    }
}
