//! Settlement reconciliation (SPEC §14): importing a provider's daily report, matching every line
//! to its withdrawal, and finding completed withdrawals no report shows paid.
//!
//! - **Import** ([`import`]): the report is parsed and checked whole first, so a malformed one
//!   stores and applies nothing. A report already stored (same digest) changes nothing; a
//!   corrected report of the same day becomes the next version with its differences (lines
//!   added, removed, changed by line key). A line identical to one of an earlier version is
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
//!   `import_settlement` job per day (yesterday's report, after `SETTLEMENT_IMPORT_HOUR` UTC, and
//!   any of the week before never fetched); the
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

pub use daily::{enqueue_import, enqueue_stored_import, handle, schedule_daily, BACKFILL_DAYS};
pub use import::{check, fetch, import};
pub use matching::{match_day, plan, Apply, Plan};
pub use missing::sweep_missing;

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use crate::domain::settlement::ReportError;

pub use crate::domain::settlement::ReportSource;

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
