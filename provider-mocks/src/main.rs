//! `provider-mock`: runs the mock provider as a process for demos, chaos
//! runs and benchmarks. Prints one readiness line to stdout, logs to stderr,
//! and stops on SIGTERM or Ctrl-C. Its `--help` documents every webhook
//! setting and fault (the defaults come from `provider_mocks::webhooks`).

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::Parser;
use provider_mocks::webhooks::{
    DEFAULT_INITIAL_BACKOFF_MS, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_BACKOFF_MS, DEFAULT_TIMEOUT_MS, STALE_BY_SECS,
};
use provider_mocks::MockConfig;

#[derive(Debug, Parser)]
#[command(name = "provider-mock", about = "Mock payout provider", after_help = webhook_help())]
struct Args {
    /// Port to listen on (0 picks a free one).
    #[arg(long, env = "PROVIDER_MOCK_PORT", default_value_t = 0)]
    port: u16,
    #[arg(long, env = "PROVIDER_MOCK_HOST", default_value = "127.0.0.1")]
    host: IpAddr,
    /// Scenario file: a JSON `MockConfig` (api_key, seed, faults, report_faults, settlement,
    /// listener, webhooks; see below).
    #[arg(long, env = "PROVIDER_MOCK_SCENARIO")]
    scenario: Option<PathBuf>,
    /// Overrides the scenario's seed.
    #[arg(long, env = "PROVIDER_MOCK_SEED")]
    seed: Option<u64>,
    /// Overrides the scenario's API key.
    #[arg(long, env = "PROVIDER_MOCK_API_KEY")]
    api_key: Option<String>,
    /// Where to POST signed webhook events (overrides the scenario's `webhooks.url`); unset
    /// sends none. Needs at least one secret.
    #[arg(long, env = "PROVIDER_MOCK_WEBHOOK_URL")]
    webhook_url: Option<String>,
    /// Secrets to sign webhook events under, comma-separated; one `v1=` each, for testing a
    /// receiver's rotation (overrides the scenario's `webhooks.secrets`).
    #[arg(long, env = "PROVIDER_MOCK_WEBHOOK_SECRET", value_delimiter = ',', hide_env_values = true)]
    webhook_secret: Vec<String>,
}

/// The webhook part of `--help`: what is sent, and every setting and fault of the scenario
/// file's `webhooks` section.
fn webhook_help() -> String {
    format!(
        "\
Webhooks (SPEC §15): with a URL and a secret, every change of a transfer to paid, failed or
returned is POSTed there as {{id, type, created_at, data: <the transfer as GET shows it>}},
Content-Type: application/json, signed in Provider-Signature: t=<unix seconds>,v1=<hex>
(one v1 per secret). Retries resend the same bytes, signed anew. While webhooks are on,
pending transfers settle and scheduled returns take effect when due, read or not.

Scenario file `webhooks` section (every field optional):
  url, secrets              as --webhook-url, --webhook-secret (the flags win)
  retry.max_attempts        attempts per event, then it gives up [default: {DEFAULT_MAX_ATTEMPTS}]
  retry.initial_backoff_ms  wait after a failed attempt (non-2xx, connection error, timeout),
                            doubling each time [default: {DEFAULT_INITIAL_BACKOFF_MS}]
  retry.max_backoff_ms      cap of that wait [default: {DEFAULT_MAX_BACKOFF_MS}]
  timeout_ms                per attempt [default: {DEFAULT_TIMEOUT_MS}]
  faults.duplicate          chance 0..1 that the event is delivered twice (same id, same body)
  faults.drop               chance that the event is never sent
  faults.bad_signature      chance that it is signed under a wrong secret
  faults.stale_timestamp    chance that it is signed, validly, at t = now - {STALE_BY_SECS} s
  faults.disagree           chance that it contradicts the record: a failed transfer announced
                            as transfer.paid, or a paid/returned one with the amount + 1
  faults.reorder            chance that a paid event is held until the transfer's returned
                            event has gone out
  faults.delay_ms           every event waits this long before its first send [default: 0]
Fault chances are drawn from the seed, so a run repeats.

Admin (no auth): PUT|GET /__admin/webhooks (GET shows secret_count, not the secrets),
PUT|GET /__admin/webhook-faults, POST /__admin/webhooks/send {{\"type\":\"transfer.paid\",
\"transfer_id\":…, optional status, amount, currency, failure_code, return_code}} (a forged,
well-signed event), GET /__admin/webhooks/deliveries (every attempt); POST /__admin/reset
clears webhook faults, held events and deliveries."
    )
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
    if args.webhook_url.is_some() {
        config.webhooks.url = args.webhook_url;
    }
    if !args.webhook_secret.is_empty() {
        config.webhooks.secrets = args.webhook_secret;
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
