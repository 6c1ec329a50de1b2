//! Webhook settings and their ground truth (SPEC §15): where the mock sends its signed
//! `transfer.paid|failed|returned` events, under which secrets, with which retry policy and
//! timeout; the delivery faults it injects; the forged events tests ask for; and the record of
//! every delivery attempt. Data and pure policy only: events are emitted in `outbox` (under the
//! state lock) and sent in `sender` (background tasks); the signing scheme and the event envelope
//! are `provider_contract::webhook`'s, never re-implemented here.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use provider_contract::webhook::{EventType, MAX_SIGNATURES};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize, Serializer};

use crate::model::TransferStatus;

pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;
pub const DEFAULT_INITIAL_BACKOFF_MS: u64 = 200;
pub const DEFAULT_MAX_BACKOFF_MS: u64 = 5_000;
pub const DEFAULT_TIMEOUT_MS: u64 = 2_000;
/// How far back a `stale_timestamp` fault dates the signature (well past a 5-minute tolerance).
pub const STALE_BY_SECS: i64 = 3_600;

/// Where and how events are sent. Also the `webhooks` section of a scenario file; every field is
/// optional there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookSettings {
    /// Where events are POSTed. None sends nothing, and the mock then settles lazily on reads,
    /// exactly as it does without webhooks.
    pub url: Option<String>,
    /// Each event is signed under every one (one `v1=` each), so a receiver's secret rotation can
    /// be tested. At least one when `url` is set, at most [`MAX_SIGNATURES`].
    pub secrets: Vec<String>,
    pub retry: RetryPolicy,
    /// Per attempt: a receiver that has not answered by then failed the attempt.
    pub timeout_ms: u64,
    pub faults: WebhookFaults,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings {
            url: None,
            secrets: Vec::new(),
            retry: RetryPolicy::default(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            faults: WebhookFaults::default(),
        }
    }
}

/// Every attempt that does not get a 2xx (another status, a connection error, a timeout) is
/// retried after a backoff that doubles from `initial_backoff_ms` up to `max_backoff_ms`, until
/// `max_attempts` attempts were made; then the delivery gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial_backoff_ms: u64,
    pub max_backoff_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            initial_backoff_ms: DEFAULT_INITIAL_BACKOFF_MS,
            max_backoff_ms: DEFAULT_MAX_BACKOFF_MS,
        }
    }
}

impl RetryPolicy {
    /// The wait after failed attempt `attempt` (1-based) before the next one.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 2u64.saturating_pow(attempt.saturating_sub(1));
        Duration::from_millis(self.initial_backoff_ms.saturating_mul(factor).min(self.max_backoff_ms))
    }
}

/// Delivery faults, drawn per event from the mock's seeded RNG (its own stream, so turning them
/// on does not shift the transport faults' draws), in this order: `drop`, `duplicate`,
/// `bad_signature`, `stale_timestamp`, `disagree`, then `reorder` (`paid` events only). A chance
/// of 0 or 1 draws nothing. A dropped event gets no other fault; the others compose.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookFaults {
    /// Chance (0..=1) that the event is delivered a second time, same id and body, once the
    /// first delivery has ended.
    pub duplicate: f64,
    /// Chance that the event is never sent (recorded as `dropped`).
    pub drop: f64,
    /// Chance that every attempt is signed under a wrong secret.
    pub bad_signature: f64,
    /// Chance that every attempt is signed, validly, at `t` = now − [`STALE_BY_SECS`].
    pub stale_timestamp: f64,
    /// Chance that the event says what the mock's record does not: a `failed` transfer is
    /// announced as `transfer.paid` with `data.status` `paid` (and no failure code); a `paid` or
    /// `returned` one carries `data.amount` one unit (1) higher than the record's.
    pub disagree: f64,
    /// Chance that a `paid` event is held until the transfer's `returned` event has been
    /// delivered (or dropped), so it arrives after it. A held event of a transfer that is never
    /// returned is never sent.
    pub reorder: f64,
    /// Every event waits this long before its first send.
    pub delay_ms: u64,
}

impl WebhookSettings {
    pub fn validate(&self) -> Result<(), InvalidWebhookSettings> {
        let invalid = |reason| Err(InvalidWebhookSettings(reason));
        if let Some(url) = &self.url {
            match reqwest::Url::parse(url) {
                Ok(url) if matches!(url.scheme(), "http" | "https") => {}
                _ => return invalid("url must be an absolute http(s) URL"),
            }
            if self.secrets.is_empty() {
                return invalid("a url needs at least one secret");
            }
        }
        if self.secrets.len() > MAX_SIGNATURES {
            return invalid("too many secrets (at most 8)");
        }
        if self.secrets.iter().any(String::is_empty) {
            return invalid("a secret must not be empty");
        }
        if self.retry.max_attempts == 0 {
            return invalid("retry.max_attempts must be at least 1");
        }
        self.faults.validate()
    }
}

impl WebhookFaults {
    pub fn validate(&self) -> Result<(), InvalidWebhookSettings> {
        let chances =
            [self.duplicate, self.drop, self.bad_signature, self.stale_timestamp, self.disagree, self.reorder];
        if chances.iter().all(|p| (0.0..=1.0).contains(p)) {
            Ok(())
        } else {
            Err(InvalidWebhookSettings("fault chances must be within 0..=1"))
        }
    }
}

/// Settings the mock refuses, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidWebhookSettings(&'static str);

impl fmt::Display for InvalidWebhookSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for InvalidWebhookSettings {}

/// A fault that shaped one delivery, as the delivery record names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFault {
    Duplicate,
    Drop,
    BadSignature,
    StaleTimestamp,
    Disagree,
    Reorder,
    /// Not drawn: a test asked for this event ([`ForgedEvent`]); no other fault applies to it.
    Forged,
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryOutcome {
    /// The receiver answered 2xx.
    Delivered,
    /// It did not; another attempt follows.
    Retrying,
    /// It did not, and this was the last attempt.
    GaveUp,
    /// A `drop` fault: never sent (attempt 0).
    Dropped,
}

/// One delivery attempt: the ground truth of what the receiver was sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    pub event_id: String,
    /// The type sent (a `disagree` fault may announce another than the record's).
    pub event_type: EventType,
    pub transfer_id: String,
    /// 1, or 2 for the second delivery of a `duplicate` event.
    pub copy: u32,
    /// 1-based within the copy; 0 for a dropped event.
    pub attempt: u32,
    pub faults: Vec<WebhookFault>,
    pub outcome: DeliveryOutcome,
    /// The receiver's HTTP status, when it answered.
    pub status: Option<u16>,
    /// Why there was no answer (connection error, timeout), with its causes.
    pub error: Option<String>,
    /// Real clock (as the signature's `t=`), when the attempt ended.
    #[serde(serialize_with = "rfc3339_millis")]
    pub at: DateTime<Utc>,
}

/// An event a test wants sent as it says, well signed, whatever the record shows (e.g. a
/// `transfer.paid` for a transfer that is `pending`). `data` is the transfer as
/// `GET /v1/transfers/{id}` shows it now, with the overrides given here. No fault applies to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgedEvent {
    #[serde(rename = "type")]
    pub kind: EventType,
    pub transfer_id: String,
    /// `data.status`; by default the status `type` announces.
    #[serde(default)]
    pub status: Option<TransferStatus>,
    #[serde(default)]
    pub amount: Option<Decimal>,
    #[serde(default)]
    pub currency: Option<String>,
    /// Shown only when `data.status` is `failed`: this, or else the record's.
    #[serde(default)]
    pub failure_code: Option<String>,
    /// Shown only when `data.status` is `returned`: this, or else the record's.
    #[serde(default)]
    pub return_code: Option<String>,
}

impl ForgedEvent {
    /// An event of `kind` for `transfer_id` with no overrides; refine with struct update.
    pub fn new(kind: EventType, transfer_id: impl Into<String>) -> Self {
        ForgedEvent {
            kind,
            transfer_id: transfer_id.into(),
            status: None,
            amount: None,
            currency: None,
            failure_code: None,
            return_code: None,
        }
    }
}

/// Why a forged event was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendRefused {
    /// No webhook URL is set.
    WebhooksOff,
    /// No transfer has that id.
    UnknownTransfer,
}

impl fmt::Display for SendRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SendRefused::WebhooksOff => "no webhook url is set",
            SendRefused::UnknownTransfer => "no transfer has that id",
        })
    }
}

impl std::error::Error for SendRefused {}

fn rfc3339_millis<S: Serializer>(at: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&at.to_rfc3339_opts(SecondsFormat::Millis, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_initial_wait_up_to_the_cap() {
        let policy = RetryPolicy::default();
        let waits: Vec<u64> = (1..=7).map(|n| policy.backoff(n).as_millis() as u64).collect();
        assert_eq!(waits, [200, 400, 800, 1_600, 3_200, 5_000, 5_000]);
        assert_eq!(policy.backoff(200), Duration::from_millis(DEFAULT_MAX_BACKOFF_MS), "no overflow");
    }

    #[test]
    fn settings_read_with_defaults_and_refuse_what_cannot_be_sent() {
        let settings: WebhookSettings =
            serde_json::from_str(r#"{"url":"http://127.0.0.1:9/hook","secrets":["a","b"]}"#).unwrap();
        assert_eq!(settings.retry, RetryPolicy::default());
        assert_eq!(settings.timeout_ms, DEFAULT_TIMEOUT_MS);
        assert_eq!(settings.validate(), Ok(()));
        assert!(serde_json::from_str::<WebhookSettings>(r#"{"ur":"x"}"#).is_err(), "unknown field");

        let refused = |settings: WebhookSettings| settings.validate().is_err();
        assert!(refused(WebhookSettings { secrets: vec![], ..settings.clone() }));
        assert!(refused(WebhookSettings { url: Some("not a url".into()), ..settings.clone() }));
        assert!(refused(WebhookSettings { secrets: vec![String::new()], ..settings.clone() }));
        assert!(refused(WebhookSettings {
            retry: RetryPolicy { max_attempts: 0, ..settings.retry },
            ..settings.clone()
        }));
        assert!(refused(WebhookSettings {
            faults: WebhookFaults { drop: 1.5, ..WebhookFaults::default() },
            ..settings
        }));
        assert_eq!(WebhookSettings::default().validate(), Ok(()), "off is valid");
    }
}
