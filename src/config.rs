//! Runtime settings shared by the HTTP layer and the CLI, with the defaults a sandbox needs.

use rust_decimal::Decimal;

use crate::domain::AmountLimits;
use crate::storage::idempotency::IdempotencySettings;

#[derive(Debug, Clone)]
pub struct AppConfig {
    /// Per-currency maximum of one withdrawal.
    pub limits: AmountLimits,
    pub idempotency: IdempotencySettings,
    /// Largest accepted request body; bigger bodies get a 413 before any parsing.
    pub max_body_bytes: usize,
    /// Replay limits and the approval threshold.
    pub replay: crate::ops::ReplaySettings,
    /// Operator console sessions.
    pub console: ConsoleSettings,
}

/// How long a console sign-in lasts, and whether its cookie is `Secure` regardless of what the
/// proxy says (behind a TLS-terminating proxy, `X-Forwarded-Proto: https` also makes it so).
#[derive(Debug, Clone, Copy)]
pub struct ConsoleSettings {
    pub session_ttl: chrono::TimeDelta,
    pub secure_cookie: bool,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        Self { session_ttl: chrono::TimeDelta::hours(8), secure_cookie: false }
    }
}

impl Default for AppConfig {
    fn default() -> Self {
        Self {
            limits: AmountLimits { default_max: Decimal::from(1_000_000), ..AmountLimits::default() },
            idempotency: IdempotencySettings::default(),
            max_body_bytes: 16 * 1024,
            replay: crate::ops::ReplaySettings::default(),
            console: ConsoleSettings::default(),
        }
    }
}
