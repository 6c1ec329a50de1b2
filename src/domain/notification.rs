//! Customer notifications (SPEC §17) as values and rules, no I/O: the event types and which
//! change writes which, the wire ids (`evt_…`, `we_…`), the subscription set, the endpoint and
//! notification states, and how a receiver's answer is read.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{EventId, UnknownValue, WebhookEndpointId, WithdrawalStatus};
use crate::text_enum;

/// What a customer hears about: a withdrawal was created, reached a final state, waits for
/// review, or was returned by the bank after it was paid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EventType {
    #[serde(rename = "withdrawal.created")]
    Created,
    #[serde(rename = "withdrawal.completed")]
    Completed,
    #[serde(rename = "withdrawal.failed")]
    Failed,
    #[serde(rename = "withdrawal.requires_review")]
    RequiresReview,
    #[serde(rename = "withdrawal.returned")]
    Returned,
}

impl EventType {
    pub const ALL: [EventType; 5] =
        [EventType::Created, EventType::Completed, EventType::Failed, EventType::RequiresReview, EventType::Returned];

    pub const fn as_str(self) -> &'static str {
        match self {
            EventType::Created => "withdrawal.created",
            EventType::Completed => "withdrawal.completed",
            EventType::Failed => "withdrawal.failed",
            EventType::RequiresReview => "withdrawal.requires_review",
            EventType::Returned => "withdrawal.returned",
        }
    }

    /// The event a recorded move writes, if it writes one: creation (`from` none), and every
    /// arrival in `completed`, `failed` or `requires_review` from another state. A move that
    /// stays in its state (a provider failover, SPEC §16) writes none; `pending` and `processing`
    /// are not announced.
    pub fn for_move(from: Option<WithdrawalStatus>, to: WithdrawalStatus) -> Option<EventType> {
        match (from, to) {
            (None, _) => Some(EventType::Created),
            (Some(from), to) if from == to => None,
            (_, WithdrawalStatus::Completed) => Some(EventType::Completed),
            (_, WithdrawalStatus::Failed) => Some(EventType::Failed),
            (_, WithdrawalStatus::RequiresReview) => Some(EventType::RequiresReview),
            (_, WithdrawalStatus::Pending | WithdrawalStatus::Processing) => None,
        }
    }

    /// Its bit in an [`EventTypes`] set.
    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for EventType {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| UnknownValue { kind: "event type", value: s.to_owned() })
    }
}

/// The event types an endpoint subscribes to: never empty. Stored as their names,
/// comma-separated in [`EventType::ALL`]'s order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventTypes(u8);

impl EventTypes {
    /// Every type (what `"*"` asks for).
    pub const ALL: EventTypes = EventTypes(0b1_1111);

    /// The set of `names`; `"*"` is every type. `Err` names the first unknown one, or says the
    /// list is empty.
    pub fn parse<S: AsRef<str>>(names: &[S]) -> Result<EventTypes, String> {
        let mut bits = 0u8;
        for name in names {
            let name = name.as_ref().trim();
            if name == "*" {
                bits |= Self::ALL.0;
                continue;
            }
            let kind: EventType = name.parse().map_err(|_| {
                let known: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
                format!("unknown event type `{name}`; known: {}, or \"*\" for all", known.join(", "))
            })?;
            bits |= kind.bit();
        }
        match bits {
            0 => Err("events must name at least one event type".to_owned()),
            bits => Ok(EventTypes(bits)),
        }
    }

    /// The stored text (or one that was never written: `Err`).
    pub fn from_stored(stored: &str) -> Result<EventTypes, String> {
        let names: Vec<&str> = stored.split(',').collect();
        EventTypes::parse(&names)
    }

    pub fn contains(self, kind: EventType) -> bool {
        self.0 & kind.bit() != 0
    }

    pub fn iter(self) -> impl Iterator<Item = EventType> {
        EventType::ALL.into_iter().filter(move |t| self.contains(*t))
    }

    pub fn names(self) -> Vec<String> {
        self.iter().map(|t| t.as_str().to_owned()).collect()
    }

    pub fn to_stored(self) -> String {
        self.names().join(",")
    }
}

/// The wire prefix of an event id: `evt_` and the UUID's 32 hex digits.
pub const EVENT_PREFIX: &str = "evt_";
/// The wire prefix of an endpoint id.
pub const ENDPOINT_PREFIX: &str = "we_";

fn wire(prefix: &str, id: uuid::Uuid) -> String {
    format!("{prefix}{}", id.simple())
}

fn from_wire(prefix: &str, text: &str) -> Option<uuid::Uuid> {
    let hex = text.strip_prefix(prefix)?;
    (hex.len() == 32).then(|| uuid::Uuid::try_parse(hex).ok()).flatten()
}

impl EventId {
    /// `evt_<32 hex digits>`: how customers see it.
    pub fn wire(self) -> String {
        wire(EVENT_PREFIX, self.0)
    }

    pub fn from_wire(text: &str) -> Option<EventId> {
        from_wire(EVENT_PREFIX, text).map(EventId)
    }
}

impl WebhookEndpointId {
    /// `we_<32 hex digits>`: how customers see it.
    pub fn wire(self) -> String {
        wire(ENDPOINT_PREFIX, self.0)
    }

    pub fn from_wire(text: &str) -> Option<WebhookEndpointId> {
        from_wire(ENDPOINT_PREFIX, text).map(WebhookEndpointId)
    }
}

text_enum! {
    /// Whether an endpoint receives deliveries.
    pub enum EndpointStatus("endpoint status", 3) {
        Enabled = "enabled",
        /// Answered 410, or failed for longer than the window: no more deliveries until the
        /// customer registers it again.
        Disabled = "disabled",
        /// Deleted by its customer: kept for its delivery history, shown to nobody but operators.
        Deleted = "deleted",
    }
}

text_enum! {
    /// Where one event's delivery to one endpoint stands.
    pub enum NotificationStatus("notification status", 5) {
        /// Not yet delivered; its job will try (again).
        Pending = "pending",
        /// A 2xx came back.
        Delivered = "delivered",
        /// Retried for the whole window: dead-lettered (`notification_undeliverable`).
        Undeliverable = "undeliverable",
        /// The endpoint answered 410: it is disabled, nothing more is sent.
        Gone = "gone",
        /// The endpoint was disabled or deleted before it could be delivered.
        Skipped = "skipped",
    }
}

text_enum! {
    /// How one delivery attempt ended: the `result` label of `notification_deliveries_total`.
    pub enum DeliveryResult("delivery result", 6) {
        /// A 2xx.
        Delivered = "delivered",
        /// A 410: the endpoint is disabled.
        Gone = "gone",
        /// Any other status.
        HttpError = "http_error",
        /// No answer within the timeout.
        Timeout = "timeout",
        /// No connection (refused, reset, TLS).
        Unreachable = "unreachable",
        /// The endpoint's address is not a public one (request forgery refused at connect time).
        Refused = "refused",
    }
}

impl DeliveryResult {
    /// The result of an answer with `status`.
    pub fn of_status(status: u16) -> DeliveryResult {
        match status {
            200..=299 => DeliveryResult::Delivered,
            410 => DeliveryResult::Gone,
            _ => DeliveryResult::HttpError,
        }
    }

    /// Whether time may repair it: everything but a delivery and a 410.
    pub fn is_retryable(self) -> bool {
        !matches!(self, DeliveryResult::Delivered | DeliveryResult::Gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_arrival_writes_its_event_and_nothing_else_does() {
        use WithdrawalStatus::*;
        assert_eq!(EventType::for_move(None, Pending), Some(EventType::Created));
        assert_eq!(EventType::for_move(Some(Processing), Completed), Some(EventType::Completed));
        assert_eq!(EventType::for_move(Some(RequiresReview), Completed), Some(EventType::Completed));
        assert_eq!(EventType::for_move(Some(Processing), Failed), Some(EventType::Failed));
        assert_eq!(EventType::for_move(Some(Processing), RequiresReview), Some(EventType::RequiresReview));
        assert_eq!(EventType::for_move(Some(Pending), Processing), None);
        assert_eq!(EventType::for_move(Some(RequiresReview), Processing), None);
        assert_eq!(EventType::for_move(Some(Processing), Processing), None, "a failover announces nothing");
    }

    #[test]
    fn event_types_read_and_write_their_wire_names() {
        for kind in EventType::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), serde_json::json!(kind.as_str()));
            assert_eq!(kind.as_str().parse::<EventType>().unwrap(), kind);
        }
        assert!("withdrawal.paid".parse::<EventType>().is_err());
    }

    #[test]
    fn a_subscription_set_round_trips_and_star_is_all() {
        let set = EventTypes::parse(&["withdrawal.failed", "withdrawal.completed", "withdrawal.failed"]).unwrap();
        assert_eq!(set.to_stored(), "withdrawal.completed,withdrawal.failed");
        assert_eq!(EventTypes::from_stored(&set.to_stored()).unwrap(), set);
        assert!(set.contains(EventType::Failed) && !set.contains(EventType::Created));
        assert_eq!(EventTypes::parse(&["*"]).unwrap(), EventTypes::ALL);
        assert_eq!(EventTypes::ALL.iter().count(), 5);
        assert!(EventTypes::parse::<&str>(&[]).unwrap_err().contains("at least one"));
        assert!(EventTypes::parse(&["payout.paid"]).unwrap_err().contains("payout.paid"));
    }

    #[test]
    fn wire_ids_round_trip_and_refuse_anything_else() {
        let id = EventId::new();
        let text = id.wire();
        assert!(text.starts_with("evt_") && text.len() == 36, "{text}");
        assert_eq!(EventId::from_wire(&text), Some(id));
        assert_eq!(EventId::from_wire(&id.0.to_string()), None, "a bare UUID is not an event id");
        assert_eq!(EventId::from_wire("evt_zz"), None);
        let endpoint = WebhookEndpointId::new();
        assert_eq!(WebhookEndpointId::from_wire(&endpoint.wire()), Some(endpoint));
        assert_eq!(WebhookEndpointId::from_wire(&text), None);
    }

    #[test]
    fn a_receiver_answer_is_delivered_gone_or_retried() {
        assert_eq!(DeliveryResult::of_status(200), DeliveryResult::Delivered);
        assert_eq!(DeliveryResult::of_status(204), DeliveryResult::Delivered);
        assert_eq!(DeliveryResult::of_status(410), DeliveryResult::Gone);
        for status in [301, 400, 404, 429, 500, 503] {
            assert_eq!(DeliveryResult::of_status(status), DeliveryResult::HttpError, "{status}");
        }
        assert!(!DeliveryResult::Gone.is_retryable() && !DeliveryResult::Delivered.is_retryable());
        assert!(DeliveryResult::Timeout.is_retryable() && DeliveryResult::Refused.is_retryable());
        crate::assert_text_enum_round_trips!(DeliveryResult);
        crate::assert_text_enum_round_trips!(NotificationStatus);
        crate::assert_text_enum_round_trips!(EndpointStatus);
    }
}
