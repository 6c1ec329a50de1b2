//! Settlement reconciliation (SPEC §14): imports, reports, exceptions and their resolutions.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::domain::settlement::ImportState;

pub use crate::domain::settlement::{ExceptionKind, ExceptionStatus, Resolution};
pub use crate::jobs::settlement::{Differences, ImportSummary, MatchCounts};

fn default_provider() -> String {
    crate::config::providers::DEFAULT_PROVIDER.to_owned()
}

/// `POST /ops/v1/settlement/imports`: fetch the day's report from the provider (`date`), or
/// import a report's CSV text (`csv`, with `date` optional: its lines name their day). `provider`
/// names whose report it is (SPEC §16): the one fetched from and whose withdrawals its lines
/// match; the primary provider when absent (`default` with one provider). An unknown name is 422
/// `unknown_provider`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    #[serde(default)]
    pub date: Option<chrono::NaiveDate>,
    #[serde(default)]
    pub csv: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

/// `GET /ops/v1/settlement/reports`: imported report versions, newest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReportQuery {
    /// `YYYY-MM-DD`: one day's versions.
    pub date: Option<String>,
    /// One provider's reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
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
    /// Whose report it is (SPEC §16).
    #[serde(default = "default_provider")]
    pub provider: String,
    pub state: ImportState,
    pub date: String,
    pub source: crate::domain::settlement::ReportSource,
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
        self.state.is_final()
    }
}

/// `GET /ops/v1/settlement/imports`: the latest imports, newest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ImportListQuery {
    pub limit: Option<i64>,
}

/// One imported version of a provider's report of a day.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReportView {
    pub id: Uuid,
    /// The provider whose report it is (SPEC §16).
    #[serde(default = "default_provider")]
    pub provider: String,
    pub date: String,
    pub version: i32,
    pub digest: String,
    pub source: crate::domain::settlement::ReportSource,
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
    /// One provider's exceptions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    pub status: Option<String>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

/// A settlement exception, with the evidence it was opened on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExceptionView {
    pub id: Uuid,
    /// The provider whose report (or withdrawal) it is about (SPEC §16).
    #[serde(default = "default_provider")]
    pub provider: String,
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
