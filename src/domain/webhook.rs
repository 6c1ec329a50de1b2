//! The provider's events (SPEC §15) as the service keeps them: what an event came to
//! ([`WebhookResult`]), and the event as a decision's evidence keeps it ([`EventRecord`]). An
//! event is a trigger, never proof: what it came to is decided on the provider's own record.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::text_enum;

/// The event types the provider sends, as the contract shared with the mock names them.
pub use provider_contract::webhook::EventType;

text_enum! {
    /// What a stored event came to, once its job asked the provider.
    pub enum WebhookResult("webhook result", 5) {
        /// The provider's record confirmed the event and a decision was taken on it.
        Applied = "applied",
        /// The record agrees, but there was nothing left to change: late, already so, a repeat
        /// under a new id, or a type the service does not handle.
        NoOp = "no_op",
        /// The provider's record contradicts the event (another status, amount or currency, or
        /// no such transfer): nothing moved.
        Mismatch = "mismatch",
        /// No withdrawal of ours under the event's key: an exception for operators.
        UnknownTransfer = "unknown_transfer",
        /// The provider could not be asked within the window: polling decides.
        Unverified = "unverified",
    }
}

/// Every value `webhook_events_total{result}` takes: the decided results, and what the route
/// answers without a decision (`duplicate`: an event id seen before; the three refusals).
pub const METRIC_RESULTS: [&str; 9] = [
    "applied",
    "no_op",
    "mismatch",
    "unknown_transfer",
    "unverified",
    "duplicate",
    "bad_signature",
    "stale",
    "malformed",
];

/// A provider event as evidence keeps it beside the provider's answer: which event led to the
/// lookup, and what it said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRecord {
    /// The provider's event id.
    pub event_id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub received_at: DateTime<Utc>,
    /// The event's `data` as received (the transfer as the event described it).
    pub data: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_round_trip_and_are_metric_results() {
        crate::assert_text_enum_round_trips!(WebhookResult);
        for result in WebhookResult::ALL {
            assert!(METRIC_RESULTS.contains(&result.as_str()), "{result}");
        }
    }
}
