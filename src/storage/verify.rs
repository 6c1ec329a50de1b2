//! Whole-database reads for verifying a run after the fact (the chaos run's checks): every
//! withdrawal's final state, the evidence behind each `requires_review`, the stored text of
//! every dead letter (to prove nothing secret was kept), and the open dead letters recomputed
//! from their events (to prove the maintained open set agrees).

use uuid::Uuid;

use super::dead_letters::SummaryRow;
use super::{Db, Result};
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
                    (SELECT COUNT(*) FROM dead_letters d WHERE d.withdrawal_id = w.id) AS dead_letters,
                    (SELECT COUNT(*) FROM reconciliation_results r WHERE r.withdrawal_id = w.id) AS reconciliations,
                    (SELECT COUNT(*) FROM provider_attempts a WHERE a.withdrawal_id = w.id AND a.outcome = 'paid')
                      + (SELECT COUNT(*) FROM reconciliation_results r WHERE r.withdrawal_id = w.id AND r.result = 'paid')
                      AS paid_evidence,
                    (SELECT COUNT(*) FROM dead_letters d WHERE d.withdrawal_id = w.id AND d.side_effect_state = 'unknown')
                      + (SELECT COUNT(*) FROM provider_attempts a WHERE a.withdrawal_id = w.id AND a.side_effect = 'unknown')
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
             WHERE NOT EXISTS (SELECT 1 FROM dead_letter_events e WHERE e.dead_letter_id = d.id AND e.action = 'closed')
             GROUP BY d.category, d.error_code
             ORDER BY COUNT(*) DESC, d.category, d.error_code",
        )
        .fetch_all(&mut *conn)
        .await?
    }))
}
