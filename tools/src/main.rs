//! The `withdrawals-tools` binary: see `withdrawals-tools --help`.

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = withdrawals_tools::cli::Cli::parse();
    match withdrawals_tools::cli::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line, the whole cause chain, non-zero exit.
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
