//! The `withdrawals` binary: see `withdrawals --help`.

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    // `withdrawals dlq list | head` should end quietly like any Unix tool, not panic on EPIPE.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread writes to a pipe.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = withdrawals::cli::Cli::parse();
    match withdrawals::cli::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line, the whole cause chain, non-zero exit.
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
