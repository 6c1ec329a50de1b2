//! The operator core's answers, typed: what `/ops/v1` serialises, what the console renders and
//! what the CLI deserialises — one definition each, so renaming a field is a compile error in
//! every client, not a silent `null`.
//!
//! Field names are the wire contract of SPEC §8 (README "Operator API"); every type is
//! `Serialize + Deserialize` so the CLI reads exactly what the API wrote.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::domain::{Role, WithdrawalStatus};

/// One page of a list, with the cursor for the next page when there is one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Page<T> {
    pub data: Vec<T>,
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// A complete list (no paging).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct List<T> {
    pub data: Vec<T>,
}

// ---------------------------------------------------------------------------------------------
// List queries: what each list route reads from its query string. `None` means "not given"
// (the route's default); serialised, a `None` is left out of the query string.

/// `GET /ops/v1/withdrawals`: withdrawals in a state (`requires_review` by default), oldest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WithdrawalQuery {
    /// A [`WithdrawalStatus`] name; the route judges it (422 `invalid_status`).
    pub status: Option<String>,
    pub account_id: Option<Uuid>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

/// `GET /ops/v1/dead-letters`: the triage filters, the open/closed state, paging.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DeadLetterQuery {
    pub queue: Option<String>,
    pub job_type: Option<String>,
    pub error_code: Option<String>,
    pub category: Option<String>,
    pub failed_after: Option<DateTime<Utc>>,
    pub failed_before: Option<DateTime<Utc>>,
    /// `open` (default), `closed` or `all`.
    pub state: Option<String>,
    /// `newest_first` (default) or `oldest_first` (what waited longest; a cursor continues in
    /// the order it was read in).
    pub order: Option<String>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

/// `GET /ops/v1/dead-letters/export`: every dead letter (open and closed) that failed before
/// `before`, oldest first, with its handling events; paged like the list.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DeadLetterExportQuery {
    pub before: Option<DateTime<Utc>>,
    pub category: Option<String>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

/// `GET /ops/v1/replays`: runs newest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReplayQuery {
    /// `awaiting_approval`, `running`, `paused`, `completed` or `cancelled`.
    pub status: Option<String>,
    pub limit: Option<i64>,
}

/// `GET /ops/v1/audit`: newest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AuditQuery {
    pub operator_id: Option<Uuid>,
    pub action: Option<String>,
    pub target_id: Option<String>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Review queue (SPEC §8.1)

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
}

/// `GET /ops/v1/withdrawals/{id}`: the withdrawal and all its evidence.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WithdrawalDetail {
    pub withdrawal: OpsWithdrawal,
    pub review_decisions: Vec<Decision>,
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
    pub line: i32,
    pub transfer_id: String,
    /// `paid`, `failed` or `returned`.
    pub status: String,
    pub amount: String,
    pub currency: String,
    pub event_at: DateTime<Utc>,
    /// `matched`, `amount_mismatch`, … or none while it waits for the provider's confirmation.
    pub result: Option<String>,
    /// `completed`, `failed` or `return_credited`: what matching applied from it.
    pub applied: Option<String>,
    pub evidence: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TransitionView {
    pub from: Option<String>,
    pub to: String,
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
    pub job_id: Uuid,
    pub worker_id: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub outcome: Option<String>,
    pub side_effect: String,
    pub http_status: Option<i64>,
    pub provider_transfer_id: Option<String>,
    pub failure_code: Option<String>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReconciliationView {
    pub id: Uuid,
    pub result: String,
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
    pub category: String,
    pub error_code: String,
    pub error_message: String,
    pub side_effect_state: String,
    pub owner: String,
    pub runbook: String,
    pub failed_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LedgerEntryView {
    pub kind: String,
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
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

impl Resolved {
    /// Waits for a second operator (the two-person rule).
    pub fn is_pending_approval(&self) -> bool {
        self.decision.is_some()
    }
}

/// A review decision under the two-person rule.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Decision {
    pub id: Uuid,
    pub withdrawal_id: Uuid,
    pub action: String,
    pub provider_reference: Option<String>,
    pub version: i64,
    pub reason: String,
    pub requested_by: Uuid,
    /// The requester's name.
    #[serde(default)]
    pub requested_by_name: String,
    pub requested_at: DateTime<Utc>,
    pub request_evidence: Value,
    pub status: String,
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

/// `POST /ops/v1/withdrawals/{id}/decision/{approve|reject}`: what a second operator does with a
/// pending decision (the path segment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionVerdict {
    Approve,
    Reject,
}

impl DecisionVerdict {
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "approve" => Some(Self::Approve),
            "reject" => Some(Self::Reject),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Reject => "reject",
        }
    }
}

/// What approving or rejecting a pending decision did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Decided {
    pub decision_id: Uuid,
    /// `approved` or `rejected`.
    pub status: String,
    /// The withdrawal after an approved decision moved it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withdrawal: Option<OpsWithdrawal>,
}

// ---------------------------------------------------------------------------------------------
// Dead letters (SPEC §8.2)

/// One dead-letter envelope, with its handling state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterView {
    pub id: Uuid,
    pub job_id: Uuid,
    pub queue: String,
    pub job_type: String,
    pub payload_version: i64,
    pub payload: Option<Value>,
    /// The bytes of a payload that did not parse, as text.
    pub raw_payload: Option<String>,
    pub attempts: i64,
    pub first_attempt_at: Option<DateTime<Utc>>,
    pub failed_at: DateTime<Utc>,
    pub error_code: String,
    pub error_class: String,
    pub error_message: String,
    pub stack: Option<String>,
    pub worker_host: String,
    pub worker_version: String,
    pub correlation_id: String,
    pub idempotency_key: Option<String>,
    pub withdrawal_id: Option<Uuid>,
    pub side_effect_state: String,
    pub category: String,
    pub owner: String,
    pub runbook: String,
    /// `open` or `closed`.
    pub state: String,
    pub closed_at: Option<DateTime<Utc>>,
    pub age_seconds: i64,
    /// What happened to it since (shown on one envelope, not in lists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<DeadLetterEventView>>,
}

impl DeadLetterView {
    pub fn is_open(&self) -> bool {
        self.state == "open"
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterEventView {
    pub action: String,
    pub actor: String,
    pub reason: String,
    pub details: Option<Value>,
    pub at: DateTime<Utc>,
    /// A replay's outcome: the status of the job it released (`null` when that job is gone);
    /// absent on events that released no job.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub replay_job_status: Option<Option<String>>,
}

/// A field that is present, even as `null`, is `Some`: serde's default would read `null` as
/// absent, and the answer would lose the difference when it is written again.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// Triage step one: open dead letters by category and error code.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterGroup {
    pub category: String,
    pub error_code: String,
    pub open: i64,
    pub oldest_open_at: Option<DateTime<Utc>>,
    pub oldest_open_age_seconds: Option<i64>,
}

/// A closed dead letter.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Closed {
    pub id: Uuid,
    pub state: String,
    pub closed_at: DateTime<Utc>,
}

/// The triage filters of `GET /ops/v1/dead-letters` (and of a replay selection).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectionFilter {
    pub queue: Option<String>,
    pub job_type: Option<String>,
    pub error_code: Option<String>,
    pub category: Option<String>,
    pub failed_after: Option<DateTime<Utc>>,
    pub failed_before: Option<DateTime<Utc>>,
}

// ---------------------------------------------------------------------------------------------
// Replays (SPEC §8.3)

/// `POST /ops/v1/replays`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartReplay {
    pub reason: String,
    #[serde(default)]
    pub dead_letter_ids: Option<Vec<Uuid>>,
    #[serde(default)]
    pub filter: Option<SelectionFilter>,
    pub expected_payload_version: i64,
    pub destination_queue: String,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default)]
    pub rate_per_second: Option<i64>,
    #[serde(default)]
    pub max_concurrency: Option<i64>,
    #[serde(default)]
    pub auto_pause_threshold: Option<i64>,
    /// The `selection_digest` of the dry run the operator confirmed: if the selection is no
    /// longer exactly those dead letters, the start is refused (409 `selection_changed`).
    #[serde(default)]
    pub expected_selection_digest: Option<String>,
}

/// What a replay start answered: a dry run's report (200) or the new run (201).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Started {
    DryRun(DryRun),
    Run(Box<ReplayRunView>),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DryRun {
    pub dry_run: bool,
    pub count: i64,
    pub sample: Vec<SampleLetter>,
    pub needs_approval: bool,
    pub payload_version_mismatches: i64,
    pub selection_digest: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SampleLetter {
    pub dead_letter_id: Uuid,
    pub withdrawal_id: Option<Uuid>,
    pub category: String,
    pub error_code: String,
    pub payload_version: i64,
    pub side_effect_state: String,
}

/// `POST /ops/v1/replays/{id}/{pause|resume|cancel|approve}` (the path segment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayControl {
    Pause,
    Resume,
    Cancel,
    /// A second operator (admin) lets a run over the threshold start.
    Approve,
}

impl ReplayControl {
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "pause" => Some(Self::Pause),
            "resume" => Some(Self::Resume),
            "cancel" => Some(Self::Cancel),
            "approve" => Some(Self::Approve),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Cancel => "cancel",
            Self::Approve => "approve",
        }
    }
}

/// A replay run, with its progress where it was asked for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayRunView {
    pub id: Uuid,
    pub status: String,
    pub reason: String,
    pub selection: Value,
    pub expected_payload_version: i64,
    pub destination_queue: String,
    pub total: i64,
    pub rate_per_second: i64,
    pub max_concurrency: i64,
    pub auto_pause_threshold: i64,
    pub started_by: Uuid,
    /// The starter's name.
    #[serde(default)]
    pub started_by_name: String,
    pub approved_by: Option<Uuid>,
    #[serde(default)]
    pub approved_by_name: Option<String>,
    pub paused_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ReplayProgress>,
    /// Each dead letter's fate (on one run, not in lists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Vec<ReplayItemView>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayProgress {
    pub total: i64,
    pub pending: i64,
    pub released: i64,
    pub reconciling: i64,
    pub skipped: i64,
    pub cancelled: i64,
    pub in_flight: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub new_dead_letters: i64,
    pub released_per_second: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayItemView {
    pub dead_letter_id: Uuid,
    pub status: String,
    pub detail: Option<String>,
    pub job_id: Option<Uuid>,
}

// ---------------------------------------------------------------------------------------------
// Audit, overview, breakers

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditEntry {
    pub id: Uuid,
    pub operator_id: Uuid,
    pub operator_name: String,
    pub role: String,
    pub action: String,
    pub target_type: String,
    pub target_id: String,
    pub reason: String,
    pub parameters: Value,
    pub result: String,
    pub at: DateTime<Utc>,
}

/// One breaker across the cluster (SPEC §8): its effective state, the override in force, and
/// what each live process's breaker says.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BreakerView {
    pub name: String,
    /// `forced_open` / `forced_closed` while an override stands; otherwise the most severe state
    /// a live process reports (`open` over `half_open` over `closed`), or this process's own
    /// when none has reported yet.
    pub state: String,
    #[serde(rename = "override", default, skip_serializing_if = "Option::is_none")]
    pub forced: Option<BreakerOverrideView>,
    #[serde(default)]
    pub processes: Vec<BreakerProcessView>,
}

/// An operator's override of a breaker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BreakerOverrideView {
    /// `force_open` or `force_closed`.
    pub mode: String,
    pub reason: String,
    pub set_by: Uuid,
    /// The operator's name.
    pub set_by_name: String,
    pub set_at: DateTime<Utc>,
}

/// What one process's breaker reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BreakerProcessView {
    pub process_id: String,
    /// `all`, `api` or `worker`.
    pub role: String,
    pub host: String,
    pub version: String,
    pub state: String,
    pub since: DateTime<Utc>,
    pub reported_at: DateTime<Utc>,
}

/// What forcing or releasing a breaker did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BreakerChanged {
    pub name: String,
    /// `force_open`, `force_closed` or `release`.
    pub action: String,
    /// The breaker as the cluster will see it within one poll interval.
    pub breaker: BreakerView,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Overview {
    /// Sandbox mode: this process pays through an in-process provider mock; nothing is real.
    pub sandbox: bool,
    pub withdrawals: Vec<StateCount>,
    pub dead_letters: DeadLetterOverview,
    pub queues: Vec<QueueDepth>,
    pub breakers: Vec<BreakerView>,
    pub replays: Vec<ReplayCount>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StateCount {
    pub state: String,
    pub count: i64,
    pub oldest_age_seconds: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterOverview {
    pub open: i64,
    pub oldest_open_age_seconds: Option<i64>,
    pub by_category: Vec<CategoryCount>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CategoryCount {
    pub category: String,
    pub open: i64,
    pub oldest_age_seconds: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueueDepth {
    pub queue: String,
    pub scheduled: i64,
    pub running: i64,
    pub due: i64,
    pub oldest_due_age_seconds: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayCount {
    pub status: String,
    pub runs: i64,
    pub pending_items: i64,
}

// ---------------------------------------------------------------------------------------------
// Credentials (admin)

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiKeyView {
    pub id: Uuid,
    pub account_id: Uuid,
    pub label: Option<String>,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    /// `active` or `revoked`.
    pub status: String,
    pub revoked_at: Option<DateTime<Utc>>,
    pub revoked_reason: Option<String>,
    /// The new key, in the answer that created it and nowhere else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OperatorView {
    pub id: Uuid,
    pub name: String,
    pub role: Role,
    pub created_at: DateTime<Utc>,
    /// `enabled` or `disabled`.
    pub status: String,
    pub disabled_at: Option<DateTime<Utc>>,
    pub disabled_reason: Option<String>,
    pub token_rotated_at: Option<DateTime<Utc>>,
    /// Who issued the current token (created, rotated, re-enabled): an operator's id, or the nil
    /// id for a local actor (`DATABASE_URL` only); `None` if issued before this was recorded.
    #[serde(default)]
    pub credential_issued_by: Option<Uuid>,
    /// The issuer's name then (`local:<os user>` for a local actor).
    #[serde(default)]
    pub credential_issuer_name: Option<String>,
    /// Console sessions a disable or rotation ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions_ended: Option<u64>,
    /// The new token, in the rotation's answer and nowhere else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The rotation replaced the caller's own token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_token: Option<bool>,
}

/// `POST /ops/v1/accounts/{id}/keys`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// `{reason?}`: a rotation's body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptionalReason {
    #[serde(default)]
    pub reason: Option<String>,
}

/// `POST /ops/v1/accounts/{id}/credits` (with an `Idempotency-Key`): money entering an account.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreditRequest {
    /// A decimal string in the customer API's grammar (`"1000.00"`), within the credit limit.
    pub amount: String,
    pub currency: String,
    pub reason: String,
}

/// A credit done: the answer of the request that made it, and of every replay of its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreditView {
    pub id: Uuid,
    pub account_id: Uuid,
    pub amount: String,
    pub currency: String,
    pub reason: String,
    /// `operator:<id>` or `local:<os user>`: on the ledger entry too.
    pub actor: String,
    pub ledger_entry_id: Uuid,
    pub idempotency_key: String,
    pub created_at: DateTime<Utc>,
}

/// `GET /ops/v1/ledger/verify[?date=D]` when the ledger holds (a difference is a 409
/// `ledger_violation`, or `settlement_totals_differ` for a day's totals).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LedgerCheck {
    pub clean: bool,
    /// With `date`: the day checked, and its totals per currency (ours against the report's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<chrono::NaiveDate>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub totals: Vec<DayTotalView>,
}

/// `GET /ops/v1/ledger/verify?date=`: the day to check against its settlement report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LedgerQuery {
    /// `YYYY-MM-DD` (UTC).
    pub date: Option<String>,
}

/// One currency's totals of a day, in the currency's units: ours against the report's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayTotalView {
    pub currency: String,
    pub ours_paid: String,
    pub report_paid: String,
    pub ours_returned: String,
    pub report_returned: String,
}

// ---------------------------------------------------------------------------------------------
// Settlement reconciliation (SPEC §14).

pub use crate::domain::settlement::{ExceptionKind, ExceptionStatus, Resolution};
pub use crate::jobs::settlement::{Differences, ImportSummary, MatchCounts};

/// `POST /ops/v1/settlement/imports`: fetch the day's report from the provider (`date`), or
/// import a report's CSV text (`csv`, with `date` optional: its lines name their day).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    #[serde(default)]
    pub date: Option<chrono::NaiveDate>,
    #[serde(default)]
    pub csv: Option<String>,
}

/// `GET /ops/v1/settlement/reports`: imported report versions, newest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReportQuery {
    /// `YYYY-MM-DD`: one day's versions.
    pub date: Option<String>,
    pub limit: Option<i64>,
}

/// `POST /ops/v1/settlement/imports` (202) and `GET /ops/v1/settlement/imports/{id}`: an import
/// run by the settlement job. `state` is `queued`, `running`, `done` or `failed`; the progress is
/// the report's lines decided so far (`lines_done` of `lines`: `matched` plus `exceptions`;
/// lines waiting for the provider's confirmation are not done). `summary` is the job's answer
/// once done; `error` why a report was refused once it ran.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImportView {
    pub id: Uuid,
    pub state: String,
    pub date: String,
    pub source: String,
    pub digest: String,
    pub lines: i64,
    pub lines_done: i64,
    pub matched: i64,
    pub exceptions: i64,
    pub requested_by: Uuid,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub summary: Option<ImportSummary>,
    pub error: Option<String>,
}

impl ImportView {
    /// The job has finished with it (`done` or `failed`).
    pub fn finished(&self) -> bool {
        matches!(self.state.as_str(), "done" | "failed")
    }
}

/// `GET /ops/v1/settlement/imports`: the latest imports, newest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ImportListQuery {
    pub limit: Option<i64>,
}

/// One imported version of a day's report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReportView {
    pub id: Uuid,
    pub date: String,
    pub version: i32,
    pub digest: String,
    pub source: String,
    pub lines: i32,
    /// Against the previous version: counts and (up to 100 each) the line keys added, removed,
    /// changed.
    pub differences: Value,
    pub imported_by: String,
    pub imported_at: DateTime<Utc>,
}

/// `GET /ops/v1/settlement/exceptions`: by kind and status (`open` by default; `all`), oldest
/// first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExceptionQuery {
    pub kind: Option<String>,
    pub status: Option<String>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

/// A settlement exception, with the evidence it was opened on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExceptionView {
    pub id: Uuid,
    pub kind: ExceptionKind,
    pub status: ExceptionStatus,
    pub withdrawal_id: Option<Uuid>,
    pub report_date: Option<String>,
    pub transfer_id: Option<String>,
    pub detail: String,
    pub evidence: Value,
    pub opened_at: DateTime<Utc>,
    pub age_seconds: i64,
    #[serde(default)]
    pub resolved_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub resolved_by: Option<Uuid>,
    #[serde(default)]
    pub resolution: Option<Resolution>,
    #[serde(default)]
    pub resolution_note: Option<String>,
}

/// `POST /ops/v1/settlement/exceptions/{id}/resolve`: why (a [`Resolution`]) and a note saying
/// what was found or done. Resolving records the finding; it moves no money.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolveExceptionRequest {
    pub reason: Resolution,
    pub note: String,
}

/// `POST /ops/v1/settlement/exceptions/{id}/credit-return`: credit the return a `returned`
/// exception refused, now that the provider's record shows it (checked live), with a note.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreditReturnRequest {
    pub note: String,
}
