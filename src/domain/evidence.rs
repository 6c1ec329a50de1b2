//! What the service knows about a payout at the provider: an attempt's side effect, what a
//! reconciliation found (stored as TEXT on attempts, dead letters and reconciliation results),
//! and [`Evidence`], the provider's answer a money decision rested on (SPEC §7, §8.1, §14.3).
//!
//! Evidence is one type: every decider writes it (`provider::truth::Verdict::evidence` builds
//! it from a checked answer, the decision adds what it was asked for) and every view reads it
//! back with [`Evidence::read`], so a change of shape is a change the compiler walks through, and
//! stored evidence this version cannot read says so instead of showing "nothing known".

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::decision::ReviewAction;
use super::settlement::LineStatus;
use super::{SettlementReportId, WithdrawalId, WithdrawalStatus};
use crate::text_enum;

/// A transfer's status at the provider (SPEC §4), as the contract shared with the mock names it.
pub use provider_contract::TransferStatus;

text_enum! {
    /// What the provider's record says about a withdrawal once checked against it: the name of
    /// a `provider::truth::Verdict`.
    pub enum VerdictKind("provider verdict", 8) {
        /// Definitively no transfer under the operation key.
        NoTransfer = "no_transfer",
        /// No transfer yet, but an attempt may still reach the provider.
        InFlight = "in_flight",
        Pending = "pending",
        Paid = "paid",
        Returned = "returned",
        Failed = "failed",
        /// The provider's transfer differs from the withdrawal in amount, currency or reference.
        Mismatch = "mismatch",
        /// The provider could not answer.
        Unavailable = "unavailable",
    }
}

text_enum! {
    /// Which question to the provider the evidence records the answer of.
    pub enum EvidenceSource("evidence source", 7) {
        /// A lookup by the operation key (reconciliation, an operator's decision).
        ProviderLookup = "provider_lookup",
        /// The answer to the create request itself.
        ProviderCreate = "provider_create",
        /// The lookup an operator's credit of a returned payout asked first (SPEC §14.3).
        OperatorCreditReturn = "operator_credit_return",
        /// A settlement report line, matched (SPEC §14.2): a [`LineEvidence`].
        SettlementReport = "settlement_report",
        /// The imported reports, which lack a completed withdrawal (SPEC §14.2): a
        /// [`MissingEvidence`].
        SettlementReports = "settlement_reports",
        /// A lookup by the operation key that a provider event led to (SPEC §15); the event is
        /// kept beside the answer ([`Evidence::event`]).
        ProviderWebhook = "provider_webhook",
        /// A move to the next provider for the currency (SPEC §16): what was known at the first
        /// one, in a [`super::failover::MoveRecord`] ([`Evidence::failover`]).
        Failover = "failover",
    }
}

/// The provider's transfer as evidence keeps it (no destination: the provider's answer carries
/// none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferRecord {
    pub id: String,
    pub reference: Option<String>,
    #[serde(with = "rust_decimal::serde::str")]
    pub amount: Decimal,
    pub currency: String,
    pub status: TransferStatus,
    pub failure_code: Option<String>,
    pub return_code: Option<String>,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// The withdrawal's side of a comparison with the provider's transfer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OurRecord {
    pub withdrawal_id: WithdrawalId,
    #[serde(with = "rust_decimal::serde::str")]
    pub amount: Decimal,
    pub currency: String,
    pub reference: String,
}

/// Both records side by side: what a mismatch was found between.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BothRecords {
    pub ours: OurRecord,
    pub provider: TransferRecord,
}

impl std::fmt::Display for BothRecords {
    /// The records as JSON, as a dead letter's message quotes them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&serde_json::to_string(self).map_err(|_| std::fmt::Error)?)
    }
}

/// The provider's answer a decision rested on, and what it was asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub source: EvidenceSource,
    pub asked_at: DateTime<Utc>,
    pub verdict: VerdictKind,
    /// The provider's transfer, when the verdict rests on one (on a mismatch: in `records`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer: Option<TransferRecord>,
    /// The fields in which the provider's transfer differs from the withdrawal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatch: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<BothRecords>,
    /// Why the provider could not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The operator's decision the answer was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ReviewAction>,
    /// The transfer id a completion names, checked against this answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_reference: Option<String>,
    /// The two-person decision this answer approved (SPEC §8.2), and who asked and approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// The settlement exception a credited return closed (SPEC §14.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exception_id: Option<Uuid>,
    /// The provider event that led to this lookup, as received (SPEC §15): a trigger kept beside
    /// the answer, never the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<super::webhook::EventRecord>,
    /// A move to another provider and what it rested on (SPEC §16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<super::failover::MoveRecord>,
    /// The provider that answered (SPEC §16); absent in evidence stored before providers were
    /// named, which the one provider there was, `default`, gave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

/// Who requested and who approved a two-person decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    pub decision_id: Uuid,
    pub requested_by: Uuid,
    pub approved_by: Uuid,
}

/// Evidence as stored (before redaction, which storage applies): plain data, so it always
/// serialises.
fn stored_json(evidence: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(evidence).expect("evidence is plain data")
}

/// Stored evidence this version cannot read: shown as such, with the stored JSON, never as
/// "nothing known".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("evidence in a shape this version cannot read: {0}")]
pub struct UnreadableEvidence(pub String);

impl Evidence {
    /// The answer from `source`, named by its verdict, and nothing else yet.
    pub fn of(source: EvidenceSource, verdict: VerdictKind, asked_at: DateTime<Utc>) -> Evidence {
        Evidence {
            source,
            asked_at,
            verdict,
            transfer: None,
            mismatch: None,
            records: None,
            detail: None,
            action: None,
            provider_reference: None,
            approval: None,
            exception_id: None,
            event: None,
            failover: None,
            provider: None,
        }
    }

    /// Reads evidence as stored.
    pub fn read(stored: &serde_json::Value) -> Result<Evidence, UnreadableEvidence> {
        Evidence::deserialize(stored).map_err(|e| UnreadableEvidence(e.to_string()))
    }

    /// The evidence as stored (before redaction, which storage applies).
    pub fn to_json(&self) -> serde_json::Value {
        stored_json(self)
    }

    /// The answer asked for an operator's `action`.
    pub fn for_action(mut self, action: ReviewAction) -> Evidence {
        self.action = Some(action);
        self
    }

    /// The transfer id a completion names, which this answer confirmed.
    pub fn naming(mut self, reference: &str) -> Evidence {
        self.provider_reference = Some(reference.to_owned());
        self
    }

    /// The answer a second operator's approval of a requested decision rested on.
    pub fn approving(mut self, approval: Approval) -> Evidence {
        self.approval = Some(approval);
        self
    }

    /// The answer an operator's credit of a returned payout rested on.
    pub fn crediting_return(mut self, exception_id: Uuid) -> Evidence {
        self.source = EvidenceSource::OperatorCreditReturn;
        self.exception_id = Some(exception_id);
        self
    }

    /// The answer of provider `name`.
    pub fn from_provider(mut self, name: &str) -> Evidence {
        self.provider = Some(name.to_owned());
        self
    }

    /// The answer a provider event led to, with the event beside it.
    pub fn after_event(mut self, event: super::webhook::EventRecord) -> Evidence {
        self.source = EvidenceSource::ProviderWebhook;
        self.event = Some(event);
        self
    }

    /// The provider's transfer this evidence names: the one the verdict rests on, or the
    /// provider's side of a mismatch.
    pub fn transfer(&self) -> Option<&TransferRecord> {
        self.transfer.as_ref().or(self.records.as_ref().map(|r| &r.provider))
    }
}

text_enum! {
    /// An attempt's side effect at the provider, as far as we know.
    pub enum SideEffect("side effect", 3) {
        /// The provider refused before executing, or was never called.
        NotStarted = "not_started",
        /// The provider executed it.
        Confirmed = "confirmed",
        /// It may or may not have happened: only reconciliation may follow, never a blind resend.
        Unknown = "unknown",
    }
}

text_enum! {
    /// How one provider attempt ended, as its row records it: the transfer's status when the
    /// provider accepted it, or the class of the error when it did not.
    #[derive(Default)]
    pub enum AttemptResult("attempt outcome", 9) {
        Pending = "pending",
        Paid = "paid",
        Failed = "failed",
        Returned = "returned",
        /// The provider accepted a transfer that differs from the withdrawal.
        Mismatch = "mismatch",
        /// Refused before executing; time may repair it.
        Retryable = "retryable",
        /// Refused for good.
        Permanent = "permanent",
        /// The provider holds another request under the key.
        Conflict = "conflict",
        /// No answer we can trust (a timeout after the request left): only reconciliation knows.
        #[default]
        Unknown = "unknown",
    }
}

impl AttemptResult {
    /// The outcome of an attempt the provider accepted with a transfer in `status`.
    pub fn of_transfer(status: TransferStatus) -> AttemptResult {
        match status {
            TransferStatus::Pending => AttemptResult::Pending,
            TransferStatus::Paid => AttemptResult::Paid,
            TransferStatus::Failed => AttemptResult::Failed,
            TransferStatus::Returned => AttemptResult::Returned,
        }
    }
}

text_enum! {
    /// One answer of reconciliation (SPEC §7).
    pub enum ReconciliationResult("reconciliation result", 9) {
        Paid = "paid",
        Failed = "failed",
        Pending = "pending",
        /// No transfer under the operation key.
        NotFound = "not_found",
        /// The provider could not be asked.
        Unavailable = "unavailable",
        /// The reconciliation window ran out before a definite answer.
        WindowExpired = "window_expired",
        Skipped = "skipped",
        /// The provider's transfer differs from the withdrawal.
        Mismatch = "mismatch",
        /// Paid, then returned by the receiving bank.
        Returned = "returned",
    }
}

/// A settlement report line as its match's evidence keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportLineRecord {
    pub transfer_id: String,
    pub idempotency_key: String,
    pub reference: String,
    pub amount_minor: i64,
    pub currency: String,
    pub fee_minor: i64,
    pub status: LineStatus,
    pub event_at: DateTime<Utc>,
}

/// What we held when a report line was matched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldRecord {
    pub withdrawal_id: WithdrawalId,
    pub status: WithdrawalStatus,
    #[serde(with = "rust_decimal::serde::str")]
    pub amount: Decimal,
    pub currency: String,
    pub version: i64,
}

/// What a settlement report line was matched on (SPEC §14.2): the line, what we held, the
/// line's own verdict, and the provider's live answer when one was asked (nothing moves money
/// on a report line without it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineEvidence {
    /// Always [`EvidenceSource::SettlementReport`].
    pub source: EvidenceSource,
    pub report_id: SettlementReportId,
    pub line: i32,
    pub line_key: String,
    pub report_line: ReportLineRecord,
    /// The line judged against the withdrawal under its key.
    pub verdict: VerdictKind,
    pub ours: Option<HeldRecord>,
    pub provider_record: Option<Evidence>,
    pub matched_at: DateTime<Utc>,
}

/// Why a completed withdrawal is missing from the reports (SPEC §14.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissingEvidence {
    /// Always [`EvidenceSource::SettlementReports`].
    pub source: EvidenceSource,
    pub completed_at: DateTime<Utc>,
    pub amount_minor: i64,
    pub currency: String,
    pub grace_days: i64,
    pub checked_at: DateTime<Utc>,
}

impl MissingEvidence {
    pub fn to_json(&self) -> serde_json::Value {
        stored_json(self)
    }
}

impl LineEvidence {
    pub fn to_json(&self) -> serde_json::Value {
        stored_json(self)
    }
}

/// The evidence a withdrawal's transition rests on: the provider's answer, or a settlement report
/// line matched on the provider's live record. Stored as JSON; read back by its `source`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum StoredEvidence {
    Provider(Box<Evidence>),
    SettlementLine(Box<LineEvidence>),
}

impl From<Evidence> for StoredEvidence {
    fn from(e: Evidence) -> Self {
        StoredEvidence::Provider(Box::new(e))
    }
}

impl From<LineEvidence> for StoredEvidence {
    fn from(e: LineEvidence) -> Self {
        StoredEvidence::SettlementLine(Box::new(e))
    }
}

impl StoredEvidence {
    /// Reads a transition's evidence as stored, by its `source`.
    pub fn read(stored: &serde_json::Value) -> Result<StoredEvidence, UnreadableEvidence> {
        #[derive(Deserialize)]
        struct Source {
            source: EvidenceSource,
        }
        let unreadable = |e: serde_json::Error| UnreadableEvidence(e.to_string());
        match Source::deserialize(stored).map_err(unreadable)?.source {
            EvidenceSource::SettlementReport => {
                Ok(StoredEvidence::SettlementLine(Box::new(LineEvidence::deserialize(stored).map_err(unreadable)?)))
            }
            EvidenceSource::SettlementReports => {
                Err(UnreadableEvidence("a missing-from-report check is no transition's evidence".into()))
            }
            EvidenceSource::ProviderLookup
            | EvidenceSource::ProviderCreate
            | EvidenceSource::OperatorCreditReturn
            | EvidenceSource::ProviderWebhook
            | EvidenceSource::Failover => Evidence::read(stored).map(StoredEvidence::from),
        }
    }

    /// The evidence as stored (before redaction, which storage applies).
    pub fn to_json(&self) -> serde_json::Value {
        stored_json(self)
    }

    /// The provider's answer this evidence rests on: its own, or the live one a report line was
    /// confirmed by.
    pub fn provider(&self) -> Option<&Evidence> {
        match self {
            StoredEvidence::Provider(e) => Some(e),
            StoredEvidence::SettlementLine(line) => line.provider_record.as_ref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_values_round_trip_through_their_names() {
        crate::assert_text_enum_round_trips!(SideEffect);
        crate::assert_text_enum_round_trips!(ReconciliationResult);
        crate::assert_text_enum_round_trips!(AttemptResult);
        crate::assert_text_enum_round_trips!(VerdictKind);
        crate::assert_text_enum_round_trips!(EvidenceSource);
    }
}
