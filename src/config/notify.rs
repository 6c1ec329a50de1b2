//! Customer notifications' settings (SPEC §17): where endpoint URLs may point
//! (`NOTIFY_ALLOW_INSECURE`), the key that seals signing secrets (`NOTIFY_SECRET_KEY`), the
//! rotation overlap (`NOTIFY_ROTATION_OVERLAP_S`), the delivery's timeouts, retry window and
//! backoff (`NOTIFY_*_MS`), the per-endpoint breaker, when a failing endpoint is disabled, the
//! notifications queue's own concurrency, and how young an event the events API still hides.

use std::time::Duration;

use secrecy::SecretBox;

use super::{BreakerConfig, RetryPolicy, SlidingWindow};

/// What the customer API and the notifications worker share.
#[derive(Debug, Clone)]
pub struct NotifySettings {
    /// `NOTIFY_ALLOW_INSECURE=1`: `http` and loopback/private addresses are allowed (development
    /// and tests only; logged loudly at start).
    pub allow_insecure: bool,
    /// The AES-256-GCM key sealing endpoints' signing secrets; `None`: endpoints cannot be
    /// registered and nothing is delivered (said at start).
    pub secret_key: Option<std::sync::Arc<SecretBox<[u8; 32]>>>,
    /// How long a rotated-out secret still signs (`NOTIFY_ROTATION_OVERLAP_S`, 24 h).
    pub rotation_overlap: Duration,
    /// Backoff with full jitter (`NOTIFY_BASE_DELAY_MS`, `NOTIFY_MAX_DELAY_MS`) within the window
    /// (`NOTIFY_MAX_ELAPSED_MS`, 3 days, counted from the event); `Retry-After` honoured up to the
    /// max delay; no attempt cap but the window.
    pub retry: RetryPolicy,
    /// `NOTIFY_CONNECT_TIMEOUT_MS` (2 s) and `NOTIFY_TIMEOUT_MS` (10 s, the whole request).
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// The most of a receiver's answer read (bytes); the rest is never read.
    pub max_response_bytes: usize,
    /// Each endpoint's breaker: opened by failures, so a dead endpoint's deliveries wait for its
    /// probe instead of each taking a worker for a timeout.
    pub breaker: BreakerConfig,
    /// An endpoint failing for longer than this is disabled (`NOTIFY_DISABLE_AFTER_MS`; the
    /// retry window by default).
    pub disable_after: Duration,
    /// Deliveries running at once in one process (`NOTIFY_CONCURRENCY`, 8), apart from the
    /// payout slots.
    pub concurrency: usize,
    /// How often the dispatcher looks for new events (`NOTIFY_DISPATCH_MS`, 200 ms).
    pub dispatch_interval: Duration,
    /// The events API shows an event once it is this old (`EVENTS_SETTLE_MS`, 1 s): a page read
    /// while an older event's transaction is still committing would otherwise pass it by.
    pub events_settle: Duration,
}

pub const DAY: Duration = Duration::from_secs(24 * 60 * 60);

impl Default for NotifySettings {
    fn default() -> Self {
        let max_delay = Duration::from_secs(60 * 60);
        Self {
            allow_insecure: false,
            secret_key: None,
            rotation_overlap: DAY,
            retry: RetryPolicy {
                base_delay: Duration::from_secs(5),
                max_delay,
                max_attempts: u32::MAX,
                max_elapsed: 3 * DAY,
                max_retry_after: max_delay,
            },
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            max_response_bytes: 4 * 1024,
            breaker: BreakerConfig {
                window: SlidingWindow::Count { size: 10 },
                failure_rate_threshold: 50.0,
                slow_call_rate_threshold: 100.0,
                slow_call_duration: Duration::from_secs(10),
                minimum_number_of_calls: 5,
                wait_duration_in_open: Duration::from_secs(30),
                permitted_calls_in_half_open: 1,
            },
            disable_after: 3 * DAY,
            concurrency: 8,
            dispatch_interval: Duration::from_millis(200),
            events_settle: Duration::from_secs(1),
        }
    }
}

impl NotifySettings {
    /// Reads `NOTIFY_SECRET_KEY`: 64 hex digits (32 bytes).
    pub fn parse_key(hex_key: &str) -> Result<SecretBox<[u8; 32]>, String> {
        let mut key = [0u8; 32];
        hex::decode_to_slice(hex_key.trim(), &mut key).map_err(|_| {
            "NOTIFY_SECRET_KEY must be 64 hex digits (32 bytes), e.g. from `openssl rand -hex 32`".to_owned()
        })?;
        Ok(SecretBox::new(Box::new(key)))
    }
}
