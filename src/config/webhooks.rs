//! The provider webhooks' settings (SPEC §15, §16): the lone provider's signing secrets
//! (`PROVIDER_WEBHOOK_SECRET`, a comma-separated list so a rotation can accept the old and the new
//! secret at once), and the timestamp tolerance (`WEBHOOK_TOLERANCE_S`) and body limit
//! (`WEBHOOK_MAX_BODY_BYTES`) every provider's route shares. With a providers file each provider
//! has its own secrets instead ([`super::providers::ProviderSettings::webhook_secrets`]); which
//! route is whose, with which secrets, is [`crate::webhooks::endpoint`]'s. The worker's side —
//! when webhooks count as healthy and how slowly a pending transfer is polled then — is in
//! [`super::WorkerConfig`].

use std::time::Duration;

use secrecy::SecretString;

/// What the webhook routes accept. A provider with no secret has no route (404).
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// The lone provider's (`default`, without a providers file): every secret a signature may be
    /// made with; one valid `v1` under any of them is enough. Secret types: never printed, never
    /// stored.
    pub secrets: Vec<SecretString>,
    /// How far a signature's timestamp may be from now, either way.
    pub tolerance: Duration,
    /// The largest body read; a longer one is refused before it is read.
    pub max_body_bytes: usize,
}

/// `WEBHOOK_TOLERANCE_S`: Stripe's default, five minutes.
pub const DEFAULT_TOLERANCE_S: u64 = 300;
/// `WEBHOOK_MAX_BODY_BYTES`: 64 KiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            secrets: Vec::new(),
            tolerance: Duration::from_secs(DEFAULT_TOLERANCE_S),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}

impl WebhookSettings {
    /// Reads `PROVIDER_WEBHOOK_SECRET`'s comma-separated list; blank entries are skipped.
    pub fn secrets_from(list: &str) -> Vec<SecretString> {
        list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(SecretString::from).collect()
    }

    /// Whether the lone provider's route is served at all.
    pub fn enabled(&self) -> bool {
        !self.secrets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;

    #[test]
    fn the_secret_list_is_comma_separated_and_blank_entries_are_skipped() {
        let secrets = WebhookSettings::secrets_from(" whsec_old, ,whsec_new ,");
        let exposed: Vec<&str> = secrets.iter().map(|s| s.expose_secret()).collect();
        assert_eq!(exposed, ["whsec_old", "whsec_new"]);
        assert!(WebhookSettings::secrets_from("").is_empty());
        assert!(!WebhookSettings::default().enabled());
        let printed = format!("{:?}", WebhookSettings { secrets, ..WebhookSettings::default() });
        assert!(!printed.contains("whsec_"), "{printed}");
    }
}
