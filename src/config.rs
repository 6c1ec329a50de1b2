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
}

impl Default for AppConfig {
    fn default() -> Self {
        Self {
            limits: AmountLimits { default_max: Decimal::from(1_000_000), ..AmountLimits::default() },
            idempotency: IdempotencySettings::default(),
            max_body_bytes: 16 * 1024,
            replay: crate::ops::ReplaySettings::default(),
        }
    }
}
