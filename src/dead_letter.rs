//! Dead letters (SPEC §6): what a failure *means* — its category, owner and runbook — and the
//! immutable, redacted envelope that records it.
//!
//! [`bury`] is the one way a job dies: in the caller's transaction it writes the envelope, parks
//! the withdrawal in `requires_review` and marks the job dead. If the envelope cannot be written,
//! the transaction fails and nothing of it happens: the job is not lost and not counted as done.
//! The categories themselves are domain values ([`Category`], re-exported here). This module
//! sits below `jobs` and imports nothing from it.

use serde_json::Value;

pub use crate::domain::Category;
use crate::domain::{Actor, DeadLetterId, SideEffect, WithdrawalKey};
use crate::redact;
use crate::storage::attempts;
use crate::storage::dead_letters::{self, DeadLetter};
use crate::storage::jobs::ClaimedJob;
use crate::storage::withdrawals as store;
use crate::storage::{DbTime, Tx};

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

impl Failure {
    /// A failure of `category`, its side effect derived from the withdrawal's attempts.
    pub fn new(
        category: Category,
        error_code: impl Into<String>,
        error_class: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Failure {
            category,
            error_code: error_code.into(),
            error_class,
            message: message.into(),
            stack: None,
            side_effect: None,
        }
    }

    /// The provider refused before executing: nothing was paid.
    pub fn permanent(error_code: impl Into<String>, message: impl Into<String>) -> Self {
        Failure::new(Category::DependencyRejected, error_code, "permanent", message)
            .with_side_effect(SideEffect::NotStarted)
    }

    /// The retry budget ran out; the last attempt was known not executed.
    pub fn retries_exhausted(error_code: impl Into<String>, message: impl Into<String>) -> Self {
        Failure::new(Category::RetriesExhausted, error_code, "retryable", message)
            .with_side_effect(SideEffect::NotStarted)
    }

    /// Whether the provider paid cannot be known from here: a human must look.
    pub fn side_effect_unknown(error_code: impl Into<String>, message: impl Into<String>) -> Self {
        Failure::new(Category::SideEffectUnknown, error_code, "unknown", message).with_side_effect(SideEffect::Unknown)
    }

    /// A payload no handler can run.
    pub fn poison(error_code: impl Into<String>, message: impl Into<String>) -> Self {
        Failure::new(Category::BadPayload, error_code, "poison", message)
    }

    /// What the classification knows about the side effect.
    pub fn with_side_effect(mut self, side_effect: SideEffect) -> Self {
        self.side_effect = Some(side_effect);
        self
    }

    pub fn with_stack(mut self, stack: Option<String>) -> Self {
        self.stack = stack;
        self
    }
}

/// The envelope's `attempts`: the runs of the job's work, the final one included — the attempts
/// its retry policy counted, the runs that failed in the handler or crashed (lost their lease),
/// and this one. A first-call rejection is 1, not 0. (A breaker deferral is not a run: the work
/// was not tried.)
fn runs(job: &ClaimedJob) -> i64 {
    job.attempts + job.handler_errors + job.lease_expiries + 1
}

/// Builds the envelope: everything an operator needs, nothing that must not be stored.
pub fn envelope(job: &ClaimedJob, failure: &Failure, side_effect: SideEffect, worker_host: &str) -> DeadLetter {
    let (payload, raw_payload) = match serde_json::from_slice::<Value>(&job.payload) {
        Ok(value) if failure.category != Category::BadPayload => (Some(redact::json(&value)), None),
        Ok(value) => (Some(redact::json(&value)), Some(redact_raw(&job.payload))),
        Err(_) => (None, Some(redact_raw(&job.payload))),
    };
    DeadLetter {
        id: DeadLetterId::new(),
        account_id: job.account_id,
        job_id: job.id,
        queue: job.queue.clone(),
        job_type: job.kind.clone(),
        payload_version: job.payload_version,
        payload: payload.map(sqlx::types::Json),
        raw_payload,
        attempts: runs(job),
        first_attempt_at: job.first_attempt_at,
        failed_at: DbTime::now(),
        error_code: redact::text(&failure.error_code),
        error_class: failure.error_class.to_owned(),
        error_message: redact::text(&failure.message),
        stack: failure.stack.as_deref().map(redact::text),
        worker_host: worker_host.to_owned(),
        worker_version: crate::VERSION.to_owned(),
        correlation_id: job.correlation_id.clone(),
        // The provider operation key is the withdrawal id.
        idempotency_key: job.withdrawal_id.map(|w| w.to_string()),
        withdrawal_id: job.withdrawal_id,
        side_effect_state: side_effect,
        category: failure.category,
        owner: failure.category.owner().to_owned(),
        provider: None,
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
fn derived_side_effect(latest: Option<&attempts::AttemptRow>) -> SideEffect {
    match latest {
        None => SideEffect::NotStarted,
        Some(a) if a.outcome.is_none() => SideEffect::Unknown,
        Some(a) => a.side_effect,
    }
}

/// Writes the envelope and parks the withdrawal, in `tx`. The caller marks the job dead in the
/// same transaction (fenced by its lease, or as an expired lease) and commits.
pub async fn bury(tx: &mut Tx, job: &ClaimedJob, failure: &Failure, worker_id: &str) -> anyhow::Result<()> {
    // The job's withdrawal lives with the job's account.
    let withdrawal = match job.withdrawal_id {
        Some(id) => store::get_in_tx(tx, WithdrawalKey { account: job.account_id, id }).await?,
        None => None,
    };
    let latest = match &withdrawal {
        Some(w) => attempts::latest(tx, w.key()).await?,
        None => None,
    };
    let side_effect = failure.side_effect.unwrap_or_else(|| derived_side_effect(latest.as_ref()));
    let mut letter = envelope(job, failure, side_effect, &worker_host());
    // The provider the latest attempt went to: where its money may be (SPEC §16).
    letter.provider = latest.map(|a| a.provider);
    // The claimed copy of the job predates this run's mark of its first attempt, so the job row
    // is asked; a job failing on its first run before any provider call has none: this run's time.
    let first_run = job.first_attempt_at.unwrap_or_else(DbTime::now);
    letter.first_attempt_at = Some(crate::storage::jobs::first_run_at(tx, job.key(), first_run).await?);
    // The withdrawal first, the envelope last: inserting it locks its group's open-count row, and
    // a settling transition takes the withdrawal row before that same counter row
    // (`storage::dead_letters`), so both lock in one order.
    if let Some(w) = &withdrawal {
        let reason = format!("dead-lettered: {} ({})", failure.category.as_str(), letter.error_code);
        let actor = Actor::Worker(worker_id.to_owned());
        store::park_for_review(tx, w, &actor, &reason, &job.correlation_id, failure.category.as_str()).await?;
    }
    dead_letters::insert(tx, &letter).await?;
    let (queue, job_type, category, error_code) =
        (letter.queue.clone(), letter.job_type.clone(), letter.category, letter.error_code.clone());
    tx.after_commit(move || crate::metrics::dead_lettered(&queue, &job_type, category, &error_code));
    tracing::error!(
        event = "dead_lettered",
        dead_letter_id = %letter.id,
        category = letter.category.as_str(),
        error_code = letter.error_code,
        side_effect = letter.side_effect_state.as_str(),
        "job dead-lettered"
    );
    Ok(())
}

/// The host this process runs on, for envelopes and breaker reports: [`host_name`] of the
/// system's name and `$HOSTNAME`.
pub fn worker_host() -> String {
    host_name(system_host_name(), std::env::var("HOSTNAME").ok())
}

/// The name to record: the system's host name, else `$HOSTNAME` (a shell variable that is
/// usually not exported, hence not first), else `unknown-host`.
pub fn host_name(system: Option<String>, env: Option<String>) -> String {
    [system, env]
        .into_iter()
        .flatten()
        .map(|name| name.trim().to_owned())
        .find(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

/// `gethostname(2)`; `None` if it fails or is not UTF-8.
pub fn system_host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for `buf.len()` bytes; gethostname writes at most that many.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let len = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..len].to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernel calls this machine (what `hostname` prints).
    fn kernel_host_name() -> String {
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_owned()
    }

    #[test]
    fn the_worker_host_is_the_machines_host_name_when_hostname_is_unset() {
        assert_eq!(host_name(system_host_name(), None), kernel_host_name());
        assert_eq!(worker_host(), kernel_host_name(), "whatever $HOSTNAME says, the system's name wins");
    }

    #[test]
    fn without_a_system_host_name_the_worker_host_falls_back_to_hostname_then_unknown_host() {
        assert_eq!(host_name(None, Some("from-env".into())), "from-env");
        assert_eq!(host_name(Some(String::new()), Some("from-env".into())), "from-env");
        assert_eq!(host_name(None, None), "unknown-host");
    }
}
