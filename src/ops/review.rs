//! The review queue (SPEC §8.1): list withdrawals with why each waits and what the provider last
//! said, show one with all its evidence, and resolve `requires_review` deliberately — with a
//! reason, the version the operator looked at, and the provider's record asked at that moment.

use chrono::Utc;
use serde_json::Value;
use uuid::Uuid;

use super::acts::{WithdrawalReconcile, WithdrawalResolve};
use super::decide::{apply, check_with_provider, in_review, parse_action};
use super::types::{
    AttemptView, DeadLetterBrief, LedgerEntryView, OpsWithdrawal, Page, ProviderStatus, ReasonFilter, ReasonKind,
    ReasonRequest, ReconciliationView, Reconciling, ResolveRequest, ResolveStatus, Resolved, ReviewReason,
    SettlementLineView, StatusSource, TransitionView, WithdrawalDetail, WithdrawalQuery,
};
use super::{
    decode_cursor, encode_cursor, page, page_limit, parameters_of, require_reason, Action as _, Audited, Operator, Ops,
    OpsError, OpsResult, Role,
};
use crate::domain::ReviewAction;
use crate::domain::{format_minor, Currency, Withdrawal, WithdrawalId, WithdrawalStatus};
use crate::jobs::enqueue_reconciliation;
use crate::storage::review_decisions;
use crate::storage::withdrawals::{self as store};
use crate::storage::{accounts, attempts, dead_letters, reconciliations, DbTime};

impl From<&Withdrawal> for OpsWithdrawal {
    fn from(w: &Withdrawal) -> Self {
        OpsWithdrawal {
            id: w.id.0,
            account_id: w.account_id.0,
            status: w.status,
            amount: w.amount.value().to_string(),
            currency: w.amount.currency().code().to_owned(),
            destination: serde_json::to_value(w.destination.masked()).unwrap_or(Value::Null),
            reference: w.reference.clone(),
            failure_code: w.failure_code.clone(),
            version: w.version,
            created_at: w.created_at,
            updated_at: w.updated_at,
            age_seconds: (Utc::now() - w.updated_at).num_seconds(),
            sandbox: w.sandbox,
            reason: None,
            provider_status: None,
        }
    }
}

/// Withdrawals in one state (default `requires_review`), oldest change first, with their age,
/// what the provider last said, and — in review — why each waits; `reason` keeps only the
/// withdrawals in review for that reason (422 `invalid_reason` for a value outside the vocabulary
/// or with another state). One statement for the page.
pub async fn list(ops: &Ops<'_>, operator: &Operator, q: WithdrawalQuery) -> OpsResult<Page<OpsWithdrawal>> {
    operator.require(Role::Viewer)?;
    let status = q
        .status
        .as_deref()
        .unwrap_or("requires_review")
        .parse::<WithdrawalStatus>()
        .map_err(|e| OpsError::invalid("invalid_status", "status", e.to_string()))?;
    let reason = q
        .reason
        .as_deref()
        .filter(|r| !r.is_empty())
        .map(str::parse::<ReasonFilter>)
        .transpose()
        .map_err(|e| OpsError::invalid("invalid_reason", "reason", e))?;
    if reason.is_some() && status != WithdrawalStatus::RequiresReview {
        return Err(OpsError::invalid(
            "invalid_reason",
            "reason",
            format!("a reason is why a withdrawal waits in requires_review; this list is of {status}"),
        ));
    }
    let limit = page_limit(q.limit)?;
    let after = q.cursor.as_deref().map(decode_cursor).transpose()?;
    let account = q.account_id.map(crate::domain::AccountId);
    // A kind matches the reason's kind; any other value is one exact reason, as the query writes it.
    let exact = reason.filter(|r| !matches!(r, ReasonFilter::Kind(_))).map(|r| r.to_string());
    let filter = match reason {
        Some(ReasonFilter::Kind(kind)) => Some(store::ReasonFilter::Kind(kind.as_str())),
        _ => exact.as_deref().map(store::ReasonFilter::Exact),
    };
    let rows = store::queue_page(ops.db, status, account, filter, limit + 1, after).await?;
    Ok(page(
        rows,
        limit,
        |item| encode_cursor(DbTime::from(item.withdrawal.updated_at), item.withdrawal.id.0),
        |item: &store::QueueItem| {
            let mut w = OpsWithdrawal::from(&item.withdrawal);
            if item.withdrawal.status == WithdrawalStatus::RequiresReview {
                w.reason = Some(reason_of(item));
            }
            w.provider_status = Some(provider_status(item));
            w
        },
    ))
}

/// Why a withdrawal waits, from the page's row ([`store::REASON`] decided the value).
fn reason_of(item: &store::QueueItem) -> ReviewReason {
    let letter = item.letter.as_ref();
    let kind = item.reason.split(':').next().and_then(|k| k.parse().ok()).unwrap_or(ReasonKind::Unknown);
    ReviewReason {
        value: item.reason.clone(),
        kind,
        category: letter.map(|l| l.category),
        code: letter.map(|l| l.error_code.clone()),
        dead_letter_id: letter.map(|l| l.id),
        since: letter.map(|l| l.failed_at.0),
        reconciliation_result: item.reconciliation.filter(|_| kind == ReasonKind::Reconciliation),
    }
}

/// The most recent stored word of the provider: reconciliation's newest answer or the newest
/// attempt's outcome, whichever is later (reconciliation on a tie: it asked about the transfer
/// itself); `unknown` when neither is stored.
fn provider_status(item: &store::QueueItem) -> ProviderStatus {
    let answer =
        item.provider_answer.as_ref().map(|s| (s.at, StatusSource::Reconciliation, &s.provider, s.value.as_str()));
    let attempt = item.attempt.as_ref().map(|s| (s.at, StatusSource::Attempt, &s.provider, s.value.as_str()));
    let latest = match (answer, attempt) {
        (Some(r), Some(a)) => Some(if a.0 > r.0 { a } else { r }),
        (r, a) => r.or(a),
    };
    match latest {
        Some((at, source, provider, status)) => ProviderStatus {
            status: status.to_owned(),
            source: Some(source),
            provider: Some(provider.clone()),
            at: Some(at.0),
        },
        None => ProviderStatus::unknown(),
    }
}

/// The withdrawal and all its evidence: decisions, transitions (with the provider's answers),
/// provider attempts, reconciliation results, dead letters and ledger entries.
pub async fn show(ops: &Ops<'_>, operator: &Operator, id: WithdrawalId) -> OpsResult<WithdrawalDetail> {
    operator.require(Role::Viewer)?;
    let db = ops.db;
    let w = store::find(db, id).await?.ok_or_else(OpsError::not_found)?;
    let key = w.key();
    let currency = w.amount.currency();
    let transitions = store::transitions(db, key)
        .await?
        .into_iter()
        .map(|t| TransitionView {
            from: t.from_status,
            to: t.to_status,
            actor: t.actor,
            reason: t.reason,
            correlation_id: t.correlation_id,
            at: t.at.0,
            evidence: t.evidence.map(|e| e.0),
        })
        .collect();
    let provider_attempts = attempts::for_withdrawal(db, key)
        .await?
        .into_iter()
        .map(|a| AttemptView {
            attempt_no: a.attempt_no,
            provider: a.provider,
            job_id: a.job_id.0,
            worker_id: a.worker_id,
            started_at: a.started_at.0,
            finished_at: a.finished_at.map(|t| t.0),
            outcome: a.outcome,
            side_effect: a.side_effect,
            http_status: a.http_status,
            provider_transfer_id: a.provider_transfer_id,
            failure_code: a.failure_code,
            error_code: a.error_code,
            error_message: a.error_message,
        })
        .collect();
    let reconciliation_results = reconciliations::for_withdrawal(db, key)
        .await?
        .into_iter()
        .map(|r| ReconciliationView {
            id: r.id.0,
            provider: r.provider,
            result: r.result,
            provider_transfer_id: r.provider_transfer_id,
            failure_code: r.failure_code,
            detail: r.detail,
            follow_up_job_id: r.follow_up_job_id.map(|j| j.0),
            at: r.at.0,
        })
        .collect();
    let letters = dead_letters::for_withdrawal(db, key)
        .await?
        .into_iter()
        .map(|d| DeadLetterBrief {
            id: d.id.0,
            job_id: d.job_id.0,
            category: d.category,
            error_code: d.error_code,
            error_message: d.error_message,
            side_effect_state: d.side_effect_state,
            owner: d.owner,
            runbook: d.runbook,
            failed_at: d.failed_at.0,
        })
        .collect();
    let ledger_entries = accounts::entries_for_withdrawal(db, key)
        .await?
        .into_iter()
        .map(|e| LedgerEntryView {
            kind: e.kind,
            available: format_minor(e.available_delta, currency),
            held: format_minor(e.held_delta, currency),
            paid_out: format_minor(e.paid_out_delta, currency),
            at: e.created_at.0,
        })
        .collect();
    let review_decisions = super::decisions::views(ops, &review_decisions::for_withdrawal(db, key).await?).await?;
    let settlement_lines = crate::storage::settlement::lines_for_withdrawal(db, key)
        .await?
        .into_iter()
        .map(|l| SettlementLineView {
            report_id: l.report_id.0,
            provider: l.provider,
            line: l.line_no,
            transfer_id: l.transfer_id,
            status: l.status,
            amount: Currency::parse(&l.currency)
                .map(|c| format_minor(l.amount_minor, c))
                .unwrap_or_else(|_| l.amount_minor.to_string()),
            currency: l.currency,
            event_at: l.event_at.0,
            result: l.result,
            applied: l.applied,
            evidence: l.evidence.map(|e| e.0),
        })
        .collect();
    let settlement_exceptions = super::settlement::exceptions_for_withdrawal(db, key).await?;
    Ok(WithdrawalDetail {
        settlement_lines,
        settlement_exceptions,
        withdrawal: OpsWithdrawal::from(&w),
        review_decisions,
        transitions,
        provider_attempts,
        reconciliation_results,
        dead_letters: letters,
        ledger_entries,
    })
}

/// Resolves a withdrawal in review: `complete` (with the provider's reference), `fail`, `retry`
/// or `reconcile`, checked against the provider now. Applied at once (200), or — at or above the
/// approval threshold — stored for a second operator (202, [`Resolved::is_pending_approval`]).
pub async fn resolve(ops: &Ops<'_>, operator: &Operator, id: WithdrawalId, req: ResolveRequest) -> OpsResult<Resolved> {
    let act = &WithdrawalResolve::ACT;
    ops.perform(operator, act, id.to_string(), &req.reason, parameters_of(&req), async |audited| {
        resolve_checked(ops, operator, id, &req, audited).await
    })
    .await
}

/// A withdrawal still in `processing` — a worker that died mid-call, an outcome nobody learned —
/// is reconciled now instead of at the stuck sweep's SLA: a reconciliation job, due at once, asks
/// the provider by the operation key and decides through the same checked verdict as every
/// reconciliation (SPEC §7; never a blind resubmit). Audited. A withdrawal in review is
/// reconciled with `resolve … reconcile`; one whose reconciliation is already queued is a 409.
pub async fn reconcile_now(
    ops: &Ops<'_>,
    operator: &Operator,
    id: WithdrawalId,
    req: ReasonRequest,
) -> OpsResult<Reconciling> {
    ops.perform(operator, &WithdrawalReconcile::ACT, id.to_string(), &req.reason, serde_json::json!({}), async |audited| {
        require_reason(&req.reason)?;
        let current = store::find(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
        if current.status != WithdrawalStatus::Processing {
            return Err(OpsError::conflict(
                "not_processing",
                format!(
                    "only a processing withdrawal is reconciled this way; this one is {} (in review: resolve … reconcile)",
                    current.status
                ),
            ));
        }
        let mut tx = ops.db.begin().await?;
        let correlation = format!("ops-{}", Uuid::new_v4());
        let Some(job) = enqueue_reconciliation(&mut tx, current.key(), "operator_request", &correlation, DbTime::now()).await?
        else {
            return Err(OpsError::conflict(
                "reconciliation_queued",
                "a reconciliation of this withdrawal is already queued; its result will show on the withdrawal",
            ));
        };
        audited.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        Ok(Reconciling { withdrawal: OpsWithdrawal::from(&current), job_id: job.0 })
    })
    .await
}

impl Resolved {
    fn applied(w: &Withdrawal, action: ReviewAction) -> Self {
        Resolved { withdrawal: OpsWithdrawal::from(w), action, status: None, decision: None }
    }
}

async fn resolve_checked(
    ops: &Ops<'_>,
    operator: &Operator,
    id: WithdrawalId,
    req: &ResolveRequest,
    audited: &Audited<'_>,
) -> OpsResult<Resolved> {
    let action = parse_action(&req.action)?;
    let reason = require_reason(&req.reason)?;
    let db = ops.db;
    let current = in_review(ops, id, req.version).await?;
    let correlation = format!("ops-{}", Uuid::new_v4());
    if action == ReviewAction::Reconcile {
        let mut tx = db.begin().await?;
        enqueue_reconciliation(&mut tx, current.key(), "operator_request", &correlation, DbTime::now()).await?;
        audited.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        return Ok(Resolved::applied(&current, action));
    }
    if let Some(pending) = review_decisions::pending_for(db, current.key()).await? {
        return Err(OpsError::conflict(
            "decision_pending",
            format!(
                "decision {} ({}) waits for a second operator: approve or reject it first",
                pending.id, pending.action
            ),
        ));
    }
    let reference = match action {
        ReviewAction::Complete => {
            Some(req.provider_reference.as_deref().map(str::trim).filter(|r| !r.is_empty()).ok_or_else(|| {
                OpsError::invalid(
                    "provider_reference_required",
                    "provider_reference",
                    "complete needs the provider's transfer id",
                )
            })?)
        }
        ReviewAction::Fail | ReviewAction::Retry | ReviewAction::Reconcile => None,
    };
    // Asked before any transaction opens: a slow provider must not hold a writer.
    let evidence = check_with_provider(ops, &current, action, reference).await?;
    if matches!(action, ReviewAction::Complete | ReviewAction::Fail)
        && ops.config.review.needs_approval(&current.amount)
    {
        let decision =
            super::decisions::request(ops, operator, &current, action, reference, reason, &evidence, audited).await?;
        return Ok(Resolved {
            withdrawal: OpsWithdrawal::from(&current),
            action,
            status: Some(ResolveStatus::PendingApproval),
            decision: Some(decision),
        });
    }
    let mut tx = db.begin().await?;
    let withdrawal = apply(&mut tx, operator, &current, action, req.version, reason, evidence, &correlation).await?;
    audited.record_ok(&mut tx, operator).await?;
    tx.commit().await?;
    Ok(Resolved::applied(&withdrawal, action))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{AccountId, Amount, AttemptResult, Category, Destination, ReconciliationResult};
    use crate::storage::withdrawals::{NewestLetter, QueueItem, Said};

    fn item(reason: &str) -> QueueItem {
        let usd = Currency::parse("USD").unwrap();
        QueueItem {
            withdrawal: Withdrawal {
                id: WithdrawalId::new(),
                account_id: AccountId(Uuid::now_v7()),
                status: WithdrawalStatus::RequiresReview,
                amount: Amount::new("25.00".parse().unwrap(), usd).unwrap(),
                destination: Destination::parse("bank_account", "12345678", "021000021").unwrap(),
                reference: None,
                failure_code: None,
                version: 3,
                idempotency_key: "k".into(),
                correlation_id: "c".into(),
                created_at: Utc::now(),
                updated_at: Utc::now(),
                sandbox: false,
            },
            reason: reason.into(),
            letter: None,
            reconciliation: None,
            provider_answer: None,
            attempt: None,
        }
    }

    fn said<T>(value: T, seconds_ago: i64) -> Option<Said<T>> {
        Some(Said {
            provider: "primary".into(),
            value,
            at: DbTime(Utc::now() - chrono::TimeDelta::seconds(seconds_ago)),
        })
    }

    #[test]
    fn the_provider_status_is_the_most_recent_stored_word_and_unknown_without_one() {
        let mut it = item("unknown");
        assert_eq!(provider_status(&it), ProviderStatus::unknown());
        it.attempt = said(AttemptResult::Unknown, 60);
        assert_eq!(
            (provider_status(&it).status.as_str(), provider_status(&it).source),
            ("unknown", Some(StatusSource::Attempt))
        );
        it.provider_answer = said(ReconciliationResult::Pending, 30);
        let newer = provider_status(&it);
        assert_eq!((newer.status.as_str(), newer.source), ("pending", Some(StatusSource::Reconciliation)));
        assert_eq!(newer.provider.as_deref(), Some("primary"));
        it.attempt = said(AttemptResult::Paid, 5);
        assert_eq!(provider_status(&it).status, "paid", "a later attempt wins");
    }

    #[test]
    fn a_reason_names_its_letter_and_only_a_reconciliation_reason_its_result() {
        let letter = NewestLetter {
            id: Uuid::now_v7(),
            category: Category::SideEffectUnknown,
            error_code: "reconciliation_unavailable".into(),
            failed_at: DbTime::now(),
        };
        let mut it = item("reconciliation:window_expired");
        it.letter = Some(letter.clone());
        it.reconciliation = Some(ReconciliationResult::WindowExpired);
        let reason = reason_of(&it);
        assert_eq!(reason.kind, ReasonKind::Reconciliation);
        assert_eq!(reason.reconciliation_result, Some(ReconciliationResult::WindowExpired));
        assert_eq!(
            (reason.category, reason.code.as_deref()),
            (Some(Category::SideEffectUnknown), Some("reconciliation_unavailable"))
        );
        assert_eq!(reason.dead_letter_id, Some(letter.id));
        it.reason = "dead_letter:side_effect_unknown".into();
        let reason = reason_of(&it);
        assert_eq!((reason.kind, reason.reconciliation_result), (ReasonKind::DeadLetter, None));
    }
}
