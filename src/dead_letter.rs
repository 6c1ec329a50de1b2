//! Dead letters (SPEC §6): what a failure *means* — its category, owner and runbook — and the
//! immutable, redacted envelope that records it.
//!
//! [`bury`] is the one way a job dies: in the caller's transaction it writes the envelope, parks
//! the withdrawal in `requires_review` and marks the job dead. If the envelope cannot be written,
//! the transaction fails and nothing of it happens: the job is not lost and not counted as done.

use serde_json::Value;
use uuid::Uuid;

use crate::domain::{Actor, WithdrawalId};
use crate::jobs::worker::park_for_review;
use crate::redact;
use crate::storage::attempts::{self, SideEffect};
use crate::storage::dead_letters::{self, DeadLetter};
use crate::storage::jobs::ClaimedJob;
use crate::storage::withdrawals as store;
use crate::storage::{DbTime, Tx};

/// Why automation gave up, by who must act next (SPEC §6's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    BadPayload,
    DependencyRejected,
    SideEffectUnknown,
    CodeBug,
    RetriesExhausted,
    Crashed,
    /// The provider's record differs from ours (amount, currency, reference): never completed
    /// automatically.
    ProviderMismatch,
}

impl Category {
    pub const ALL: [Category; 7] = [
        Category::BadPayload,
        Category::DependencyRejected,
        Category::SideEffectUnknown,
        Category::CodeBug,
        Category::RetriesExhausted,
        Category::Crashed,
        Category::ProviderMismatch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Category::BadPayload => "bad_payload",
            Category::DependencyRejected => "dependency_rejected",
            Category::SideEffectUnknown => "side_effect_unknown",
            Category::CodeBug => "code_bug",
            Category::RetriesExhausted => "retries_exhausted",
            Category::Crashed => "crashed",
            Category::ProviderMismatch => "provider_mismatch",
        }
    }

    pub fn owner(self) -> &'static str {
        match self {
            Category::BadPayload => "producing team",
            Category::DependencyRejected | Category::RetriesExhausted => "integration owner",
            Category::SideEffectUnknown => "operator",
            Category::CodeBug | Category::Crashed => "service team",
            Category::ProviderMismatch => "finance operations",
        }
    }

    /// The runbook page with the next action.
    pub fn runbook(self) -> &'static str {
        match self {
            Category::BadPayload => "runbooks/dead-letter-bad-payload.md",
            Category::DependencyRejected => "runbooks/dead-letter-dependency-rejected.md",
            Category::SideEffectUnknown => "runbooks/dead-letter-side-effect-unknown.md",
            Category::CodeBug => "runbooks/dead-letter-code-bug.md",
            Category::RetriesExhausted => "runbooks/dead-letter-retries-exhausted.md",
            Category::Crashed => "runbooks/dead-letter-crashed.md",
            Category::ProviderMismatch => "runbooks/dead-letter-provider-mismatch.md",
        }
    }
}

/// A job's final failure, as the code that saw it describes it.
#[derive(Debug, Clone)]
pub struct Failure {
    pub category: Category,
    /// Stable code, e.g. `invalid_account`, `http_503`, `unknown_payload_version`.
    pub error_code: String,
    /// `permanent`, `retryable`, `unknown`, `poison`, `panic`, `crash`.
    pub error_class: &'static str,
    pub message: String,
    pub stack: Option<String>,
    /// What the classification knows; `None` derives it from the withdrawal's attempts.
    pub side_effect: Option<SideEffect>,
}

/// Builds the envelope: everything an operator needs, nothing that must not be stored.
pub fn envelope(job: &ClaimedJob, failure: &Failure, side_effect: SideEffect, worker_host: &str) -> DeadLetter {
    let (payload, raw_payload) = match serde_json::from_slice::<Value>(&job.payload) {
        Ok(value) if failure.category != Category::BadPayload => (Some(redact::json(&value)), None),
        Ok(value) => (Some(redact::json(&value)), Some(redact_raw(&job.payload))),
        Err(_) => (None, Some(redact_raw(&job.payload))),
    };
    DeadLetter {
        id: Uuid::now_v7(),
        job_id: job.id,
        queue: job.queue.clone(),
        job_type: job.kind.clone(),
        payload_version: job.payload_version,
        payload: payload.map(sqlx::types::Json),
        raw_payload,
        attempts: job.attempts,
        first_attempt_at: job.first_attempt_at,
        failed_at: DbTime::now(),
        error_code: redact::text(&failure.error_code),
        error_class: failure.error_class.to_owned(),
        error_message: redact::text(&failure.message),
        stack: failure.stack.as_deref().map(redact::text),
        worker_host: worker_host.to_owned(),
        worker_version: env!("CARGO_PKG_VERSION").to_owned(),
        correlation_id: job.correlation_id.clone(),
        // The provider operation key is the withdrawal id.
        idempotency_key: job.withdrawal_id.map(|w| w.to_string()),
        withdrawal_id: job.withdrawal_id,
        side_effect_state: side_effect.as_str().to_owned(),
        category: failure.category.as_str().to_owned(),
        owner: failure.category.owner().to_owned(),
        runbook: failure.category.runbook().to_owned(),
    }
}

/// Raw bytes of a poison payload, redacted where they are text (binary is kept as received).
fn redact_raw(bytes: &[u8]) -> Vec<u8> {
    match std::str::from_utf8(bytes) {
        Ok(text) => redact::text(text).into_bytes(),
        Err(_) => bytes.to_vec(),
    }
}

/// What the service knows about the provider side effect from the withdrawal's attempts.
async fn derived_side_effect(tx: &mut Tx, withdrawal: Option<Uuid>) -> anyhow::Result<SideEffect> {
    let Some(id) = withdrawal else { return Ok(SideEffect::NotStarted) };
    Ok(match attempts::latest(tx, WithdrawalId(id)).await? {
        None => SideEffect::NotStarted,
        Some(a) if a.outcome.is_none() => SideEffect::Unknown,
        Some(a) => match a.side_effect.as_str() {
            "confirmed" => SideEffect::Confirmed,
            "not_started" => SideEffect::NotStarted,
            _ => SideEffect::Unknown,
        },
    })
}

/// Writes the envelope and parks the withdrawal, in `tx`. The caller marks the job dead in the
/// same transaction (fenced by its lease, or as an expired lease) and commits.
pub async fn bury(tx: &mut Tx, job: &ClaimedJob, failure: &Failure, worker_id: &str) -> anyhow::Result<()> {
    let side_effect = match failure.side_effect {
        Some(known) => known,
        None => derived_side_effect(tx, job.withdrawal_id).await?,
    };
    let letter = envelope(job, failure, side_effect, &worker_host());
    // The withdrawal first, the envelope last: inserting it locks its group's open-count row, and
    // a settling transition takes the withdrawal row before that same counter row
    // (`storage::dead_letters`), so both lock in one order.
    if let Some(id) = job.withdrawal_id {
        if let Some(w) = store::get_in_tx(tx, WithdrawalId(id)).await? {
            let reason = format!("dead-lettered: {} ({})", failure.category.as_str(), letter.error_code);
            let actor = Actor::Worker(worker_id.to_owned());
            park_for_review(tx, &w, &actor, &reason, &job.correlation_id, failure.category.as_str()).await?;
        }
    }
    dead_letters::insert(tx, &letter).await?;
    crate::metrics::dead_lettered(&letter.queue, &letter.job_type, &letter.category, &letter.error_code);
    tracing::error!(
        event = "dead_lettered",
        dead_letter_id = %letter.id,
        category = letter.category,
        error_code = letter.error_code,
        side_effect = letter.side_effect_state,
        "job dead-lettered"
    );
    Ok(())
}

pub fn worker_host() -> String {
    std::env::var("HOSTNAME").unwrap_or_else(|_| "unknown-host".to_owned())
}
