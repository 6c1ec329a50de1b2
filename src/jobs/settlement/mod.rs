//! Settlement reconciliation (SPEC §14): importing a provider's daily report, matching every line
//! to its withdrawal, and finding completed withdrawals no report shows paid.
//!
//! Everything is **per provider** (SPEC §16): a report comes from one provider
//! ([`ReportProvider`]), is stored, versioned and deduplicated as that provider's, and its lines
//! are matched only to that provider's withdrawals — those whose latest attempt went to it
//! (`provider_attempts.provider`). A line naming a withdrawal sent to another provider matches
//! nothing: it is an `unknown_transfer` exception, never a completion or a credit. The missing
//! sweep looks only at the provider's own withdrawals, against its own reports' days.
//!
//! - **Import** ([`import`]): the report is parsed and checked whole first, so a malformed one
//!   stores and applies nothing. A report already stored (same provider, day and digest)
//!   changes nothing; a corrected report of the same day becomes the next version with its
//!   differences (lines added, removed, changed by line key). A line identical to one of an earlier version is
//!   `seen_before` and not matched again.
//! - **Matching** ([`plan`], pure): each line is read as the provider's transfer and judged by the
//!   same [`Verdict`] reconciliation uses. Safe outcomes apply themselves through the same guarded
//!   transitions, but only once the provider's live record agrees (a lookup by the operation key,
//!   amount and currency checked): a `paid` line completes a withdrawal still `processing` or in
//!   `requires_review`, a `failed` line fails it, a `returned` line re-credits a `completed` one
//!   (§14.3). Every other result is a settlement exception. A line the provider could not confirm
//!   stays unmatched and is tried again by the next import or daily run.
//! - **Missing** ([`sweep_missing`]): a withdrawal completed here that no report shows `paid`
//!   within `SETTLEMENT_GRACE_DAYS` is a `missing_from_report` exception.
//! - **Daily job** ([`handle`], [`schedule_daily`]): the worker's sweep enqueues one
//!   `import_settlement` job per provider with daily import on and per day (yesterday's report,
//!   after the provider's import hour — `SETTLEMENT_IMPORT_HOUR` UTC unless its file entry says —
//!   and any of the week before never fetched); the
//!   job fetches, imports and matches, then matches again the lines of earlier days still waiting
//!   for the provider's confirmation; it retries an unavailable provider with backoff and
//!   dead-letters a refused report (`dependency_rejected`, `settlement_report_refused`).
//!
//! One file per part: [`import`], [`matching`], [`missing`], and the job in [`daily`]; the module
//! root holds what they share (an import's origin, errors and summaries).

mod daily;
mod import;
mod matching;
mod missing;

pub use daily::{daily_schedule, enqueue_import, enqueue_stored_import, handle, schedule_daily, BACKFILL_DAYS};
pub use import::{check, fetch, import};
pub use matching::{match_day, plan, Apply, Plan};
pub use missing::sweep_missing;

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use crate::config::providers::DEFAULT_PROVIDER;
use crate::domain::settlement::ReportError;
use crate::provider::Gateway;

pub use crate::domain::settlement::ReportSource;

/// The provider a report is from (SPEC §16), and its gateway when this process can reach it: the
/// gateway confirms safe outcomes; without one they wait for a run that has it.
#[derive(Clone, Copy)]
pub struct ReportProvider<'a> {
    pub name: &'a str,
    pub gateway: Option<&'a Gateway>,
}

impl<'a> ReportProvider<'a> {
    /// The report of the provider behind `gateway`.
    pub fn reached(gateway: &'a Gateway) -> Self {
        ReportProvider { name: &gateway.name, gateway: Some(gateway) }
    }

    /// The report of the provider `name`, which this process cannot ask.
    pub fn unreached(name: &'a str) -> Self {
        ReportProvider { name, gateway: None }
    }
}

fn default_provider() -> String {
    DEFAULT_PROVIDER.to_owned()
}

/// Why an import stored nothing.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The report is malformed (or its lines are not of the day it claims): refused whole.
    #[error("report refused: {0}")]
    Refused(ReportError),
    /// A file with no lines names no day; say which with `--date`.
    #[error("the report has no lines: name its day")]
    NoDay,
    #[error(transparent)]
    Storage(#[from] crate::storage::StorageError),
}

/// How many of a version's lines differ from the version before.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Differences {
    pub added: usize,
    pub removed: usize,
    pub changed: usize,
}

/// What matching did with the lines it decided.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatchCounts {
    pub matched: usize,
    /// Withdrawals completed from a confirmed `paid` line.
    pub completed: usize,
    /// Withdrawals failed from a confirmed `failed` line.
    pub failed: usize,
    /// Returns re-credited (once each).
    pub returns_credited: usize,
    /// Returns already applied before.
    pub returns_already_applied: usize,
    pub exceptions_opened: usize,
    /// Lines the provider could not confirm yet: tried again by the next run.
    pub awaiting_confirmation: usize,
}

/// The answer of an import.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportSummary {
    pub report_id: uuid::Uuid,
    /// The provider whose report it is (summaries stored before providers were named are
    /// `default`'s).
    #[serde(default = "default_provider")]
    pub provider: String,
    pub date: NaiveDate,
    pub version: i32,
    pub digest: String,
    pub source: ReportSource,
    /// This exact report was stored before: nothing new was stored.
    pub already_imported: bool,
    pub lines: usize,
    /// Lines identical to an earlier version's (not matched again).
    pub seen_before: usize,
    pub differences: Differences,
    pub matching: MatchCounts,
    /// `missing_from_report` exceptions the sweep opened.
    pub missing_opened: usize,
}
