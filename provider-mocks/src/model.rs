//! Data shapes of the provider contract: the transfer request and response
//! bodies, the settlement settings, and the records the mock keeps as ground
//! truth for tests (executed transfers and received requests).

use std::time::Instant;

use chrono::{DateTime, SecondsFormat, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize, Serializer};

/// Where the money goes. Only bank accounts exist in the contract; the tag
/// keeps the wire format open for other kinds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Destination {
    BankAccount { account_number: String, bank_code: String },
}

impl Destination {
    pub fn account_number(&self) -> &str {
        match self {
            Destination::BankAccount { account_number, .. } => account_number,
        }
    }
}

/// Body of `POST /v1/transfers`. Unknown fields are tolerated, as a real
/// provider would, so clients may send extra metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateTransfer {
    pub reference: String,
    /// Compared by value (`"125.5"` equals `"125.50"`) when a key is replayed.
    pub amount: Decimal,
    pub currency: String,
    pub destination: Destination,
}

impl CreateTransfer {
    /// The contract's idea of "malformed" beyond what serde already rejects.
    pub(crate) fn is_valid(&self) -> bool {
        !self.reference.is_empty()
            && self.amount > Decimal::ZERO
            && !self.currency.is_empty()
            && !self.destination.account_number().is_empty()
    }
}

/// The status values are the contract's own, shared with the service.
pub use provider_contract::TransferStatus;

/// A transfer as the provider API shows it to clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferView {
    pub id: String,
    pub reference: String,
    pub amount: Decimal,
    pub currency: String,
    pub status: TransferStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_code: Option<String>,
    #[serde(serialize_with = "rfc3339_millis")]
    pub created_at: DateTime<Utc>,
    /// When the status last changed (a lazily settled transfer: when it settled).
    #[serde(serialize_with = "rfc3339_millis")]
    pub updated_at: DateTime<Utc>,
}

/// A transfer as the mock knows it: everything a test may need to decide
/// whether money moved, and how many times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferRecord {
    pub id: String,
    pub idempotency_key: String,
    pub reference: String,
    pub amount: Decimal,
    pub currency: String,
    pub destination: Destination,
    pub status: TransferStatus,
    pub failure_code: Option<String>,
    #[serde(default)]
    pub return_code: Option<String>,
    /// How many POSTs for this key really created a transfer. Anything but 1
    /// means the provider paid more than once for one key.
    pub executions: u32,
    #[serde(serialize_with = "rfc3339_millis")]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "rfc3339_millis")]
    pub updated_at: DateTime<Utc>,
}

/// Which provider route a request hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    Create,
    Lookup,
    Get,
    /// `GET /v1/reports/settlements` (SPEC §14.1).
    Report,
}

/// One request received on a provider route, recorded on arrival.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub method: String,
    pub route: Route,
    pub path: String,
    pub idempotency_key: Option<String>,
    pub correlation_id: Option<String>,
    #[serde(serialize_with = "rfc3339_millis")]
    pub at: DateTime<Utc>,
    /// What the mock did: `created`, `replayed`, `conflict`, `status:503`,
    /// `timeout_after_commit`, `found`, ... (`in_progress` until it decides).
    pub outcome: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SettlementMode {
    /// Transfers are `paid` as soon as they are created.
    #[default]
    Immediate,
    /// Transfers are `pending` until `delay_ms` have passed.
    Async,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settlement {
    pub mode: SettlementMode,
    pub delay_ms: u64,
    /// Share of async transfers that end `failed` / `rejected_by_bank`.
    pub fail_ratio: f64,
}

/// One status change of a transfer, as the settlement report lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StatusEvent {
    pub status: TransferStatus,
    /// Mock clock time of the change.
    pub at: DateTime<Utc>,
    /// Global order of recording, which breaks ties between equal `at`s.
    pub seq: u64,
}

/// A bank return scheduled for a paid transfer; it takes effect once the
/// mock clock reaches `at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScheduledReturn {
    pub at: DateTime<Utc>,
    pub return_code: String,
}

/// Internal form of a transfer: the outcome is decided at creation, and
/// `settles_at` says when reads may start to show it.
#[derive(Debug, Clone)]
pub(crate) struct Transfer {
    pub record: TransferRecord,
    pub request: CreateTransfer,
    pub settles_at: Option<Instant>,
    /// Mock clock time at which a pending transfer settles (its event time).
    pub settles_at_wall: Option<DateTime<Utc>>,
    pub final_status: TransferStatus,
    pub final_failure_code: Option<String>,
    /// Every status change so far, in order (the first is the creation).
    pub events: Vec<StatusEvent>,
    pub scheduled_return: Option<ScheduledReturn>,
}

impl Transfer {
    /// Settlement is lazy: every read path calls this first, so every view
    /// agrees on the status (while webhooks are on, a background task calls it
    /// too, so changes happen when due). `wall` is the mock clock's now; `seq`
    /// numbers the events recorded here. Returns the transfer as it stood
    /// after each change made, in order (what the change's webhook event says).
    pub fn settle(&mut self, now: Instant, wall: DateTime<Utc>, seq: &mut u64) -> Vec<TransferView> {
        let mut changes = Vec::new();
        if self.settles_at.is_some_and(|at| at <= now) {
            self.settles_at = None;
            let at = self.settles_at_wall.take().unwrap_or(wall);
            self.record.status = self.final_status;
            self.record.failure_code = self.final_failure_code.clone();
            self.record.updated_at = at;
            self.push_event(self.final_status, at, seq);
            changes.push(self.view());
        }
        if self.record.status == TransferStatus::Paid && self.scheduled_return.as_ref().is_some_and(|r| r.at <= wall) {
            let ret = self.scheduled_return.take().expect("checked above");
            self.record.status = TransferStatus::Returned;
            self.record.return_code = Some(ret.return_code);
            self.record.updated_at = ret.at;
            self.push_event(TransferStatus::Returned, ret.at, seq);
            changes.push(self.view());
        }
        changes
    }

    /// Whether a change is still to come (a settlement or a scheduled return).
    pub fn has_change_ahead(&self) -> bool {
        self.settles_at.is_some() || self.scheduled_return.is_some()
    }

    pub fn push_event(&mut self, status: TransferStatus, at: DateTime<Utc>, seq: &mut u64) {
        *seq += 1;
        self.events.push(StatusEvent { status, at, seq: *seq });
    }

    /// When the transfer became `paid`, if it did.
    pub fn paid_at(&self) -> Option<DateTime<Utc>> {
        self.events.iter().find(|e| e.status == TransferStatus::Paid).map(|e| e.at)
    }

    pub fn view(&self) -> TransferView {
        TransferView {
            id: self.record.id.clone(),
            reference: self.record.reference.clone(),
            amount: self.record.amount,
            currency: self.record.currency.clone(),
            status: self.record.status,
            failure_code: self.record.failure_code.clone(),
            return_code: self.record.return_code.clone(),
            created_at: self.record.created_at,
            updated_at: self.record.updated_at,
        }
    }
}

/// Tests compare delays between attempts, so timestamps carry milliseconds.
fn rfc3339_millis<S: Serializer>(at: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&at.to_rfc3339_opts(SecondsFormat::Millis, true))
}
