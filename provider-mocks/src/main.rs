//! `provider-mock`: runs the mock provider as a process for demos, chaos
//! runs and benchmarks. Prints one readiness line to stdout, logs to stderr,
//! and stops on SIGTERM or Ctrl-C.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::Parser;
use provider_mocks::MockConfig;

#[derive(Debug, Parser)]
#[command(name = "provider-mock", about = "Mock payout provider")]
struct Args {
    /// Port to listen on (0 picks a free one).
    #[arg(long, env = "PROVIDER_MOCK_PORT", default_value_t = 0)]
    port: u16,
    #[arg(long, env = "PROVIDER_MOCK_HOST", default_value = "127.0.0.1")]
    host: IpAddr,
    /// Scenario file: a JSON `MockConfig` (api_key, seed, faults, settlement).
    #[arg(long, env = "PROVIDER_MOCK_SCENARIO")]
    scenario: Option<PathBuf>,
    /// Overrides the scenario's seed.
    #[arg(long, env = "PROVIDER_MOCK_SEED")]
    seed: Option<u64>,
    /// Overrides the scenario's API key.
    #[arg(long, env = "PROVIDER_MOCK_API_KEY")]
    api_key: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // stdout is reserved for the readiness line that scripts wait for.
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(false).init();
    let args = Args::parse();

    let mut config = match &args.scenario {
        Some(path) => MockConfig::from_file(path)?,
        None => MockConfig::default(),
    };
    config.addr = Some(SocketAddr::new(args.host, args.port));
    if let Some(seed) = args.seed {
        config.seed = seed;
    }
    if args.api_key.is_some() {
        config.api_key = args.api_key;
    }

    let mock = provider_mocks::spawn(config).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "provider-mock listening on {}", mock.url())?;
        out.flush()?;
    }

    wait_for_stop().await?;
    tracing::info!("stopping");
    mock.shutdown().await;
    Ok(())
}

async fn wait_for_stop() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        result = tokio::signal::ctrl_c() => result?,
    }
    Ok(())
}
