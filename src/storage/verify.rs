//! Whole-database reads for verifying a run after the fact (the chaos run's checks): every
//! withdrawal's final state, the evidence behind each `requires_review`, the stored text of
//! every dead letter (to prove nothing secret was kept), the open dead letters recomputed
//! from their events (to prove the maintained open set agrees), and what settlement made of the
//! run (report versions, every line's result, every exception, every return and its ledger
//! entries — to prove each discrepancy was found once and each return credited once). Reports,
//! lines and exceptions name their provider (SPEC §16): a report version is one provider's of one
//! day, so the latest version of a day is per provider, and a check compares each provider's
//! reports with that provider's own record.

use uuid::Uuid;

use super::dead_letters::SummaryRow;
use super::{Db, Result};
use crate::domain::settlement::{ExceptionKind, ExceptionStatus, LineResult};
use crate::with_read_conn;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WithdrawalOutcome {
    pub id: Uuid,
    pub account_id: Uuid,
    pub status: String,
    /// Minor units.
    pub amount: i64,
    pub currency: String,
    pub idempotency_key: String,
}

pub async fn withdrawal_outcomes(db: &Db) -> Result<Vec<WithdrawalOutcome>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, WithdrawalOutcome>(
            "SELECT id, account_id, status, amount, currency, idempotency_key FROM withdrawals ORDER BY created_at, id",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// What the record holds about one withdrawal in `requires_review`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReviewEvidence {
    pub withdrawal_id: Uuid,
    pub dead_letters: i64,
    pub reconciliations: i64,
    /// Attempts or reconciliation results that saw the transfer paid.
    pub paid_evidence: i64,
    /// Dead letters or attempts that say the provider may have executed it.
    pub unknown_evidence: i64,
}

pub async fn review_evidence(db: &Db) -> Result<Vec<ReviewEvidence>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ReviewEvidence>(
            "SELECT w.id AS withdrawal_id,
                    (SELECT COUNT(*) FROM dead_letters d WHERE d.account_id = w.account_id AND d.withdrawal_id = w.id) AS dead_letters,
                    (SELECT COUNT(*) FROM reconciliation_results r WHERE r.account_id = w.account_id AND r.withdrawal_id = w.id) AS reconciliations,
                    (SELECT COUNT(*) FROM provider_attempts a WHERE a.account_id = w.account_id AND a.withdrawal_id = w.id AND a.outcome = 'paid')
                      + (SELECT COUNT(*) FROM reconciliation_results r WHERE r.account_id = w.account_id AND r.withdrawal_id = w.id AND r.result = 'paid')
                      AS paid_evidence,
                    (SELECT COUNT(*) FROM dead_letters d WHERE d.account_id = w.account_id AND d.withdrawal_id = w.id AND d.side_effect_state = 'unknown')
                      + (SELECT COUNT(*) FROM provider_attempts a WHERE a.account_id = w.account_id AND a.withdrawal_id = w.id AND a.side_effect = 'unknown')
                      AS unknown_evidence
             FROM withdrawals w WHERE w.status = 'requires_review' ORDER BY w.id",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Every stored field of every dead letter that could carry customer data, as text.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeadLetterText {
    pub id: Uuid,
    pub error_message: String,
    pub stack: Option<String>,
    pub payload: Option<sqlx::types::Json<serde_json::Value>>,
    pub raw_payload: Option<Vec<u8>>,
}

pub async fn dead_letter_texts(db: &Db) -> Result<Vec<DeadLetterText>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, DeadLetterText>(
            "SELECT id, error_message, stack, payload, raw_payload FROM dead_letters ORDER BY failed_at, id",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Scheduled or running jobs: zero once the system has converged.
pub async fn live_jobs(db: &Db) -> Result<i64> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM jobs WHERE status IN ('scheduled', 'running')")
            .fetch_one(&mut *conn)
            .await?
    }))
}

/// The triage summary recomputed from the truth, ignoring the maintained open set: dead letters
/// with no `closed` event, grouped by category and error code, in the summary's order. What
/// `dead_letters::summary` must always equal (it is the anti-join the summary used to run).
pub async fn open_dead_letters_from_events(db: &Db) -> Result<Vec<SummaryRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, SummaryRow>(
            "SELECT d.category, d.error_code, COUNT(*) AS open, MIN(d.failed_at) AS oldest_open
             FROM dead_letters d
             WHERE NOT EXISTS (SELECT 1 FROM dead_letter_events e
                               WHERE e.account_id = d.account_id AND e.dead_letter_id = d.id AND e.action = 'closed')
             GROUP BY d.category, d.error_code
             ORDER BY COUNT(*) DESC, d.category, d.error_code",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// One imported report version: provider `provider`'s report of `report_date`, its `version`th.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReportVersion {
    pub provider: String,
    /// `YYYY-MM-DD`.
    pub report_date: String,
    pub version: i32,
    pub line_count: i32,
    /// No later version of this provider's report of this day is stored.
    pub latest: bool,
}

/// Every imported report version, by provider, day and version.
pub async fn settlement_reports(db: &Db) -> Result<Vec<ReportVersion>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ReportVersion>(
            "SELECT r.provider, r.report_date, r.version, r.line_count,
                    CASE WHEN r.version = (SELECT MAX(r2.version) FROM settlement_reports r2
                                           WHERE r2.provider = r.provider AND r2.report_date = r.report_date)
                         THEN TRUE ELSE FALSE END AS latest
             FROM settlement_reports r ORDER BY r.provider, r.report_date, r.version",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// What matching made of one stored report line.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LineOutcome {
    /// The provider whose report it is.
    pub provider: String,
    pub report_date: String,
    pub version: i32,
    pub line_no: i32,
    pub idempotency_key: String,
    /// `paid`, `failed` or `returned`.
    pub status: String,
    pub withdrawal_id: Option<Uuid>,
    /// NULL while the line waits for matching (or for the provider's confirmation).
    pub result: Option<LineResult>,
    /// What matching applied from the line: `completed`, `failed` or `return_credited`.
    pub applied: Option<String>,
}

/// Every stored line of every report version, by provider, in report order.
pub async fn settlement_lines(db: &Db) -> Result<Vec<LineOutcome>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, LineOutcome>(
            "SELECT r.provider, r.report_date, r.version, l.line_no, l.idempotency_key, l.status, l.withdrawal_id,
                    l.result, l.applied
             FROM settlement_lines l JOIN settlement_reports r ON r.id = l.report_id
             ORDER BY r.provider, r.report_date, r.version, l.line_no",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// One settlement exception, as far as a check needs it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ExceptionFact {
    /// The provider whose report (or record) it is about.
    pub provider: String,
    pub kind: ExceptionKind,
    pub status: ExceptionStatus,
    pub withdrawal_id: Option<Uuid>,
    pub transfer_id: Option<String>,
    pub dedupe_key: String,
}

/// Every settlement exception, open or resolved, oldest first.
pub async fn settlement_exceptions(db: &Db) -> Result<Vec<ExceptionFact>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ExceptionFact>(
            "SELECT provider, kind, status, withdrawal_id, transfer_id, dedupe_key FROM settlement_exceptions
             ORDER BY opened_at, id",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// A withdrawal with a payout return or a `return` ledger entry: how many of each, and what
/// they moved (minor units).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReturnCredit {
    pub withdrawal_id: Uuid,
    pub account_id: Uuid,
    pub payout_returns: i64,
    pub returned_minor: i64,
    pub return_entries: i64,
    /// The `return` entries' total effect on available.
    pub entries_available_minor: i64,
}

/// Every withdrawal that has a `payout_returns` row or a `return` ledger entry (a return
/// credited without its row, or twice, shows here as counts other than one).
pub async fn return_credits(db: &Db) -> Result<Vec<ReturnCredit>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ReturnCredit>(
            "SELECT w.id AS withdrawal_id, w.account_id,
                    (SELECT COUNT(*) FROM payout_returns p WHERE p.account_id = w.account_id AND p.withdrawal_id = w.id) AS payout_returns,
                    (SELECT CAST(COALESCE(SUM(p.amount_minor), 0) AS BIGINT) FROM payout_returns p
                     WHERE p.account_id = w.account_id AND p.withdrawal_id = w.id) AS returned_minor,
                    (SELECT COUNT(*) FROM ledger_entries e WHERE e.account_id = w.account_id AND e.withdrawal_id = w.id AND e.kind = 'return')
                      AS return_entries,
                    (SELECT CAST(COALESCE(SUM(e.available_delta), 0) AS BIGINT) FROM ledger_entries e
                     WHERE e.account_id = w.account_id AND e.withdrawal_id = w.id AND e.kind = 'return') AS entries_available_minor
             FROM withdrawals w
             WHERE EXISTS (SELECT 1 FROM payout_returns p WHERE p.account_id = w.account_id AND p.withdrawal_id = w.id)
                OR EXISTS (SELECT 1 FROM ledger_entries e WHERE e.account_id = w.account_id AND e.withdrawal_id = w.id AND e.kind = 'return')
             ORDER BY w.id",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Returns recorded per account and currency (minor units): what came back of what was paid out.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReturnedTotal {
    pub account_id: Uuid,
    pub currency: String,
    pub returned_minor: i64,
}

pub async fn returned_by_account(db: &Db) -> Result<Vec<ReturnedTotal>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ReturnedTotal>(
            "SELECT account_id, currency, CAST(SUM(amount_minor) AS BIGINT) AS returned_minor FROM payout_returns
             GROUP BY account_id, currency ORDER BY account_id, currency",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}
