//! How to reach the payout provider: its URL, its key (a `secrecy` secret, never printed) and
//! the connect and overall timeouts.

use std::time::Duration;

use secrecy::SecretString;

#[derive(Clone)]
pub struct ProviderConfig {
    /// e.g. `https://payouts.example.com` (no trailing slash needed).
    pub base_url: String,
    pub api_key: SecretString,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &"[redacted]")
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}
