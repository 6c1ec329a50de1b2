//! The review queue (SPEC §8.1): withdrawals with why each waits and what the provider last said,
//! their evidence, resolutions and the two-person decisions.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::ExceptionView;
use crate::domain::settlement::{LineResult, LineStatus};
use crate::domain::{
    AttemptResult, Category, DecisionStatus, ReconciliationResult, ReviewAction, SideEffect, WithdrawalStatus,
};

/// A withdrawal as operators see it (account number masked).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpsWithdrawal {
    pub id: Uuid,
    pub account_id: Uuid,
    pub status: WithdrawalStatus,
    pub amount: String,
    pub currency: String,
    pub destination: Value,
    pub reference: Option<String>,
    pub failure_code: Option<String>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Seconds since the last state change (how long it has waited in its state).
    pub age_seconds: i64,
    /// Made in sandbox mode: no real money moves for it.
    #[serde(default)]
    pub sandbox: bool,
    /// Why it waits in `requires_review` (the review queue's list only; absent elsewhere and for
    /// other states).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ReviewReason>,
    /// What the provider last said about it (the review queue's list only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_status: Option<ProviderStatus>,
}

crate::text_enum! {
    /// What put a withdrawal in review (README "Why each review item waits").
    pub enum ReasonKind("review reason kind", 3) {
        /// Its newest dead letter, written by a job other than reconciliation.
        DeadLetter = "dead_letter",
        /// Its newest dead letter was written by a reconciliation job: reconciliation's newest
        /// result says why.
        Reconciliation = "reconciliation",
        /// No dead letter is stored for it.
        Unknown = "unknown",
    }
}

/// Why a withdrawal waits in review: [`ReviewReason::value`] is what the queue's `reason` filter
/// takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewReason {
    /// `dead_letter:<category>`, `reconciliation:<result>` or `unknown`.
    pub value: String,
    pub kind: ReasonKind,
    /// The newest dead letter's category and error code (also when reconciliation wrote it).
    pub category: Option<Category>,
    pub code: Option<String>,
    pub dead_letter_id: Option<Uuid>,
    /// When the letter was written: since when it waits for this reason.
    pub since: Option<DateTime<Utc>>,
    /// Reconciliation's newest result, when the kind is `reconciliation`.
    pub reconciliation_result: Option<ReconciliationResult>,
}

/// A `reason` filter of the review queue: a kind, or one exact reason. Bounded: a kind, or a
/// kind with one of its [`Category`] or [`ReconciliationResult`] values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasonFilter {
    Kind(ReasonKind),
    DeadLetter(Category),
    Reconciliation(ReconciliationResult),
}

impl ReasonFilter {
    /// Every value the filter takes, kinds first: what the console's select offers.
    pub fn all() -> Vec<ReasonFilter> {
        let mut all = vec![ReasonFilter::Kind(ReasonKind::DeadLetter)];
        all.extend(Category::ALL.into_iter().map(ReasonFilter::DeadLetter));
        all.push(ReasonFilter::Kind(ReasonKind::Reconciliation));
        all.extend(ReconciliationResult::ALL.into_iter().map(ReasonFilter::Reconciliation));
        all.push(ReasonFilter::Kind(ReasonKind::Unknown));
        all
    }
}

impl std::fmt::Display for ReasonFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReasonFilter::Kind(kind) => f.write_str(kind.as_str()),
            ReasonFilter::DeadLetter(category) => write!(f, "dead_letter:{category}"),
            ReasonFilter::Reconciliation(result) => write!(f, "reconciliation:{result}"),
        }
    }
}

impl std::str::FromStr for ReasonFilter {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let refused = || {
            format!(
                "unknown reason {s:?}: dead_letter[:<category>], reconciliation[:<result>] or unknown \
                 (categories: {}; results: {})",
                Category::ALL.map(Category::as_str).join(", "),
                ReconciliationResult::ALL.map(ReconciliationResult::as_str).join(", ")
            )
        };
        match s.split_once(':') {
            None => s.parse().map(ReasonFilter::Kind).map_err(|_| refused()),
            Some(("dead_letter", category)) => category.parse().map(ReasonFilter::DeadLetter).map_err(|_| refused()),
            Some(("reconciliation", result)) => result.parse().map(ReasonFilter::Reconciliation).map_err(|_| refused()),
            Some(_) => Err(refused()),
        }
    }
}

crate::text_enum! {
    /// Which stored record a [`ProviderStatus`] comes from.
    pub enum StatusSource("provider status source", 2) {
        /// A reconciliation result: the provider's answer to a lookup.
        Reconciliation = "reconciliation",
        /// A provider attempt's recorded outcome.
        Attempt = "attempt",
    }
}

/// The provider's last known status of a withdrawal: the most recent of reconciliation's newest
/// answer (`paid`, `failed`, `pending`, `not_found`, `unavailable`, `mismatch`, `returned`) and
/// the newest attempt's recorded outcome (`paid`, `pending`, `failed`, `retryable`, `permanent`,
/// `conflict`, `mismatch`, `unknown`); `unknown` with no source when neither is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderStatus {
    pub status: String,
    pub source: Option<StatusSource>,
    /// The provider that said it (SPEC §16).
    pub provider: Option<String>,
    pub at: Option<DateTime<Utc>>,
}

impl ProviderStatus {
    /// Nothing stored: `unknown`.
    pub fn unknown() -> Self {
        ProviderStatus { status: "unknown".into(), source: None, provider: None, at: None }
    }
}

/// `GET /ops/v1/withdrawals/{id}`: the withdrawal and all its evidence.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WithdrawalDetail {
    pub withdrawal: OpsWithdrawal,
    pub review_decisions: Vec<ReviewDecisionView>,
    pub transitions: Vec<TransitionView>,
    pub provider_attempts: Vec<AttemptView>,
    pub reconciliation_results: Vec<ReconciliationView>,
    pub dead_letters: Vec<DeadLetterBrief>,
    pub ledger_entries: Vec<LedgerEntryView>,
    /// Every settlement report line matched to it, with its result and evidence (SPEC §14.2).
    #[serde(default)]
    pub settlement_lines: Vec<SettlementLineView>,
    /// Its settlement exceptions, open or resolved.
    #[serde(default)]
    pub settlement_exceptions: Vec<ExceptionView>,
}

/// One settlement report line about a withdrawal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SettlementLineView {
    pub report_id: Uuid,
    /// The provider whose report it is (SPEC §16).
    #[serde(default)]
    pub provider: String,
    pub line: i32,
    pub transfer_id: String,
    pub status: LineStatus,
    pub amount: String,
    pub currency: String,
    pub event_at: DateTime<Utc>,
    /// `matched`, `amount_mismatch`, … or none while it waits for the provider's confirmation.
    pub result: Option<LineResult>,
    /// `completed`, `failed` or `return_credited`: what matching applied from it.
    pub applied: Option<crate::domain::settlement::LineApplied>,
    pub evidence: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TransitionView {
    pub from: Option<WithdrawalStatus>,
    pub to: WithdrawalStatus,
    pub actor: String,
    pub reason: String,
    pub correlation_id: String,
    pub at: DateTime<Utc>,
    /// The provider's answer the move rested on (SPEC §8.1), when it rested on one.
    pub evidence: Option<Value>,
}

/// The parts of a provider answer (a transition's `evidence`, a decision's `request_evidence`)
/// operators are shown. The stored evidence carries more (its source, both records on a
/// mismatch, who approved); those stay in the JSON.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProviderEvidence {
    /// `paid`, `failed`, `pending`, `no_transfer`, `mismatch`, …
    pub verdict: Option<String>,
    pub asked_at: Option<DateTime<Utc>>,
    /// The provider's transfer, when the verdict rests on one (not on a mismatch).
    pub transfer: Option<EvidenceTransfer>,
    /// The fields in which the provider's transfer differs from the withdrawal.
    pub mismatch: Option<Vec<String>>,
}

impl ProviderEvidence {
    /// Reads evidence as stored; evidence of another shape shows as nothing known.
    pub fn read(evidence: &Value) -> Self {
        Self::deserialize(evidence).unwrap_or_default()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvidenceTransfer {
    pub id: String,
    pub amount: String,
    pub currency: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptView {
    pub attempt_no: i64,
    /// The provider it went to (SPEC §16).
    #[serde(default)]
    pub provider: String,
    pub job_id: Uuid,
    pub worker_id: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub outcome: Option<AttemptResult>,
    pub side_effect: SideEffect,
    pub http_status: Option<i64>,
    pub provider_transfer_id: Option<String>,
    pub failure_code: Option<String>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReconciliationView {
    pub id: Uuid,
    /// The provider asked (SPEC §16).
    #[serde(default)]
    pub provider: String,
    pub result: ReconciliationResult,
    pub provider_transfer_id: Option<String>,
    pub failure_code: Option<String>,
    pub detail: String,
    pub follow_up_job_id: Option<Uuid>,
    pub at: DateTime<Utc>,
}

/// A dead letter as listed under its withdrawal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterBrief {
    pub id: Uuid,
    pub job_id: Uuid,
    pub category: Category,
    pub error_code: String,
    pub error_message: String,
    pub side_effect_state: SideEffect,
    pub owner: String,
    pub runbook: String,
    pub failed_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LedgerEntryView {
    pub kind: crate::domain::EntryKind,
    pub available: String,
    pub held: String,
    pub paid_out: String,
    pub at: DateTime<Utc>,
}

/// `POST /ops/v1/withdrawals/{id}/resolve`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolveRequest {
    /// `complete`, `fail`, `retry` or `reconcile`.
    pub action: String,
    pub reason: String,
    /// The version the operator looked at; a stale one is a 409.
    pub version: i64,
    #[serde(default)]
    pub provider_reference: Option<String>,
}

/// What `POST /ops/v1/withdrawals/{id}/reconcile` did: a reconciliation job, due now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reconciling {
    pub withdrawal: OpsWithdrawal,
    pub job_id: Uuid,
}

/// What a resolve did: applied (200) or stored for a second operator (202, `status:
/// pending_approval` with the `decision`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Resolved {
    pub withdrawal: OpsWithdrawal,
    pub action: ReviewAction,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ResolveStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<ReviewDecisionView>,
}

crate::text_enum! {
    /// A resolve that did not apply at once: it waits for a second operator.
    pub enum ResolveStatus("resolve status", 1) {
        PendingApproval = "pending_approval",
    }
}

impl Resolved {
    /// Waits for a second operator (the two-person rule).
    pub fn is_pending_approval(&self) -> bool {
        self.decision.is_some()
    }
}

/// A review decision under the two-person rule.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReviewDecisionView {
    pub id: Uuid,
    pub withdrawal_id: Uuid,
    pub action: ReviewAction,
    pub provider_reference: Option<String>,
    pub version: i64,
    pub reason: String,
    pub requested_by: Uuid,
    /// The requester's name.
    #[serde(default)]
    pub requested_by_name: String,
    pub requested_at: DateTime<Utc>,
    pub request_evidence: Value,
    pub status: DecisionStatus,
    pub decided_by: Option<Uuid>,
    #[serde(default)]
    pub decided_by_name: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    pub decision_reason: Option<String>,
}

/// `{reason}`: the body of every action that needs only a reason.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReasonRequest {
    pub reason: String,
}

crate::text_enum! {
    /// `POST /ops/v1/withdrawals/{id}/decision/{approve|reject}`: what a second operator does
    /// with a pending decision (the path segment).
    pub enum ApproveOrReject("decision verdict", 2) {
        Approve = "approve",
        Reject = "reject",
    }
}

/// What approving or rejecting a pending decision did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DecisionResult {
    pub decision_id: Uuid,
    /// `approved` or `rejected`.
    pub status: DecisionStatus,
    /// The withdrawal after an approved decision moved it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withdrawal: Option<OpsWithdrawal>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_filter_reads_back_as_written_and_nothing_else_reads() {
        crate::assert_text_enum_round_trips!(ReasonKind);
        crate::assert_text_enum_round_trips!(StatusSource);
        let all = ReasonFilter::all();
        assert_eq!(all.len(), ReasonKind::ALL.len() + Category::ALL.len() + ReconciliationResult::ALL.len());
        for filter in all {
            assert_eq!(filter.to_string().parse::<ReasonFilter>(), Ok(filter));
        }
        assert_eq!("dead_letter:crashed".parse(), Ok(ReasonFilter::DeadLetter(Category::Crashed)));
        assert_eq!("reconciliation:mismatch".parse(), Ok(ReasonFilter::Reconciliation(ReconciliationResult::Mismatch)));
        for bad in
            ["", "bogus", "dead_letter:", "dead_letter:nope", "reconciliation:paid:x", "unknown:x", "Dead_letter"]
        {
            let refused = bad.parse::<ReasonFilter>().unwrap_err();
            assert!(refused.contains("dead_letter[:<category>]"), "{bad}: {refused}");
        }
    }
}
