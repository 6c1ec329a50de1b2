//! Assembling the running service: the provider (real, or the sandbox mock), its breaker, and
//! worker identity. Shared by `serve`/`worker` and the tests so both build the same thing.

use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;

use crate::provider::breaker::{BreakerConfig, BreakerState, CircuitBreaker, SystemClock};
use crate::provider::{Gateway, HttpProvider, Provider, ProviderConfig};

/// The provider named by `url`, or — with no URL — an in-process provider mock (sandbox mode),
/// returned too so the caller keeps it running.
pub async fn provider_from(
    url: Option<String>,
    api_key: Option<String>,
    connect_timeout: Duration,
    request_timeout: Duration,
) -> anyhow::Result<(Arc<dyn Provider>, Option<provider_mocks::RunningMock>)> {
    let (base_url, api_key, sandbox) = match url {
        Some(url) => {
            let key = api_key.ok_or_else(|| anyhow::anyhow!("PROVIDER_API_KEY is required with PROVIDER_URL"))?;
            (url, key, None)
        }
        None => {
            let key = "sandbox-provider-key".to_owned();
            let mock = provider_mocks::spawn(provider_mocks::MockConfig {
                api_key: Some(key.clone()),
                ..provider_mocks::MockConfig::default()
            })
            .await?;
            tracing::warn!(
                provider_url = %mock.url(),
                "SANDBOX MODE: PROVIDER_URL is not set, payouts go to an in-process provider mock; no money moves"
            );
            (mock.url(), key, Some(mock))
        }
    };
    let provider = HttpProvider::new(ProviderConfig {
        base_url,
        api_key: SecretString::from(api_key),
        connect_timeout,
        request_timeout,
    })?;
    Ok((Arc::new(provider), sandbox))
}

/// The provider behind its circuit breaker, with every state change logged.
pub fn gateway(provider: Arc<dyn Provider>) -> Gateway {
    gateway_with(provider, BreakerConfig::default())
}

pub fn gateway_with(provider: Arc<dyn Provider>, config: BreakerConfig) -> Gateway {
    let breaker = CircuitBreaker::new("payout_provider", config, Arc::new(SystemClock)).with_listener(
        |name: &str, from: BreakerState, to: BreakerState| {
            tracing::warn!(event = "breaker_transition", breaker = name, from = %from, to = %to, "circuit breaker changed state");
            crate::metrics::breaker_transition(name, from.as_str(), to.as_str());
        },
    );
    Gateway { provider, breaker: Arc::new(breaker) }
}

/// `host-pid-random`: unique per process, readable in leases and attempt rows.
pub fn worker_id() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".to_owned());
    format!("{host}-{}-{:04x}", std::process::id(), rand::random::<u16>())
}
