//! The two-person rule for review decisions (SPEC §8.1): a `complete` or `fail` at or above
//! `REVIEW_APPROVAL_THRESHOLD` is stored as a pending decision by the first operator (202), and
//! applied only when a second operator — not the first — approves it, after asking the provider
//! again at that moment. Either operator's refusal is audited like every action.
//!
//! | route | role |
//! |---|---|
//! | `GET /ops/v1/review-decisions` (pending, oldest first) | viewer |
//! | `POST /ops/v1/withdrawals/{id}/decision/approve` `{reason}` | operator, another person ([`super::approvals`]) |
//! | `POST /ops/v1/withdrawals/{id}/decision/reject` `{reason}` | operator (the requester may withdraw it) |

use serde_json::json;
use uuid::Uuid;

use super::acts::DecisionReject;
use super::approvals::{self, Approvable};
use super::decide::{apply, check_with_provider, in_review};
use super::types::{DecisionResult, List, OpsWithdrawal, ReasonRequest, ReviewDecisionView};
use super::{require_reason, Action, Audited, Operator, Ops, OpsError, OpsResult, RefusalKind, Role};
use crate::domain::{
    Approval, ApprovalKind, DecisionStatus, Evidence, OperatorId, ReviewAction, Withdrawal, WithdrawalId,
};
use crate::storage::review_decisions::{self, Requested, ReviewDecision};
use crate::storage::{DbTime, Tx};

/// Stored decisions as operators see them, with the operators' names.
pub async fn views(ops: &Ops<'_>, rows: &[ReviewDecision]) -> OpsResult<Vec<ReviewDecisionView>> {
    let names = super::names(
        ops.db,
        rows.iter().flat_map(|d| [Some(d.requested_by.0), d.decided_by.map(|o| o.0)]).flatten().collect(),
    )
    .await?;
    Ok(rows.iter().map(|d| view(d, &names)).collect())
}

/// A stored decision as operators see it.
pub fn view(d: &ReviewDecision, names: &super::Names) -> ReviewDecisionView {
    ReviewDecisionView {
        id: d.id.0,
        withdrawal_id: d.withdrawal_id.0,
        action: d.action,
        provider_reference: d.provider_reference.clone(),
        version: d.version,
        reason: d.reason.clone(),
        requested_by: d.requested_by.0,
        requested_by_name: super::name_of(names, d.requested_by.0),
        requested_at: d.requested_at.0,
        request_evidence: d.request_evidence.0.clone(),
        status: d.status,
        decided_by: d.decided_by.map(|o| o.0),
        decided_by_name: d.decided_by.map(|o| super::name_of(names, o.0)),
        decided_at: d.decided_at.map(|t| t.0),
        decision_reason: d.decision_reason.clone(),
    }
}

/// Stores `action` on `w` as a decision waiting for a second operator, with the provider's answer
/// it was requested on; audited as `withdrawal.resolve` with result `pending_approval`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn request(
    ops: &Ops<'_>,
    operator: &Operator,
    w: &Withdrawal,
    action: ReviewAction,
    reference: Option<&str>,
    reason: &str,
    evidence: &Evidence,
    audited: &Audited<'_>,
) -> OpsResult<ReviewDecisionView> {
    let decision = ReviewDecision {
        id: crate::domain::DecisionId::new(),
        account_id: w.account_id,
        withdrawal_id: w.id,
        action,
        provider_reference: reference.map(str::to_owned),
        version: w.version,
        reason: reason.to_owned(),
        requested_by: operator.id,
        requested_at: DbTime::now(),
        request_evidence: sqlx::types::Json(evidence.to_json()),
        status: DecisionStatus::Pending,
        decided_by: None,
        decided_at: None,
        decision_reason: None,
    };
    let mut tx = ops.db.begin().await?;
    match review_decisions::insert_pending(&mut tx, &decision).await? {
        Requested::Stored => {}
        Requested::AlreadyPending => {
            return Err(OpsError::conflict(
                "decision_pending",
                "another decision on this withdrawal waits for a second operator: approve or reject it first",
            ))
        }
        Requested::Stale => {
            return Err(OpsError::conflict(
                "stale_version",
                "the withdrawal changed while the provider was asked: reload and decide again",
            )
            .with_field("version"))
        }
    }
    let mut row = audited.clone_shallow();
    row.parameters["decision_id"] = json!(decision.id);
    row.record(&mut tx, operator, "pending_approval").await?;
    tx.commit().await?;
    Ok(views(ops, std::slice::from_ref(&decision)).await?.remove(0))
}

/// Decisions waiting for a second operator, oldest first.
pub async fn list(ops: &Ops<'_>, operator: &Operator) -> OpsResult<List<ReviewDecisionView>> {
    operator.require(Role::Viewer)?;
    let rows = review_decisions::list_pending(ops.db, 500).await?;
    Ok(List { data: views(ops, &rows).await? })
}

/// A second operator applies the pending decision on `id`, checked against the provider again now
/// (the approval flow of [`super::approvals`]).
pub async fn approve(
    ops: &Ops<'_>,
    operator: &Operator,
    id: WithdrawalId,
    req: ReasonRequest,
) -> OpsResult<DecisionResult> {
    let act = approvals::approve_act(ApprovalKind::ReviewDecision);
    ops.perform(operator, &act, id.to_string(), &req.reason, json!({}), async |audited| {
        let reason = require_reason(&req.reason)?;
        let pending = pending_on(ops, id, audited).await?;
        let moved = approvals::approve(ops, operator, &pending, reason, audited).await?;
        Ok(DecisionResult {
            decision_id: pending.id.0,
            status: DecisionStatus::Approved,
            withdrawal: Some(OpsWithdrawal::from(&moved)),
        })
    })
    .await
}

/// The pending decision on `id` is dropped; nothing moves (the requester may withdraw it).
pub async fn reject(
    ops: &Ops<'_>,
    operator: &Operator,
    id: WithdrawalId,
    req: ReasonRequest,
) -> OpsResult<DecisionResult> {
    ops.perform(operator, &DecisionReject::ACT, id.to_string(), &req.reason, json!({}), async |audited| {
        let reason = require_reason(&req.reason)?;
        let pending = pending_on(ops, id, audited).await?;
        let mut tx = ops.db.begin().await?;
        if !review_decisions::decide(&mut tx, &pending, DecisionStatus::Rejected, operator.id, reason).await? {
            return Err(already_decided());
        }
        audited.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        Ok(DecisionResult { decision_id: pending.id.0, status: DecisionStatus::Rejected, withdrawal: None })
    })
    .await
}

/// The decision waiting on `id`, named in the action's audit row from now on.
async fn pending_on(ops: &Ops<'_>, id: WithdrawalId, audited: &mut Audited<'_>) -> OpsResult<ReviewDecision> {
    let none =
        || OpsError::refused(RefusalKind::NotFound, "no_pending_decision", "no decision waits on this withdrawal");
    // The operator names the withdrawal by id; its row gives the account its decisions live with.
    let key = crate::storage::withdrawals::find(ops.db, id).await?.ok_or_else(none)?.key();
    let pending = review_decisions::pending_for(ops.db, key).await?.ok_or_else(none)?;
    audited.parameters = json!({"decision_id": pending.id, "decision_action": pending.action});
    Ok(pending)
}

fn already_decided() -> OpsError {
    OpsError::conflict("decision_already_decided", "another operator decided first")
}

impl Approvable for ReviewDecision {
    const KIND: ApprovalKind = ApprovalKind::ReviewDecision;
    /// The withdrawal as it stands, and the provider's answer now (with the approval).
    type Checked = (Withdrawal, Evidence);
    type Applied = Withdrawal;

    fn requested_by(&self) -> OperatorId {
        self.requested_by
    }

    /// Still in review at the version decided on, and asked again now: the provider's record may
    /// have changed since the request.
    async fn check(&self, ops: &Ops<'_>, approver: &Operator) -> OpsResult<Self::Checked> {
        let current = in_review(ops, self.withdrawal_id, self.version).await?;
        let evidence =
            check_with_provider(ops, &current, self.action, self.provider_reference.as_deref()).await?.approving(
                Approval { decision_id: self.id.0, requested_by: self.requested_by.0, approved_by: approver.id.0 },
            );
        Ok((current, evidence))
    }

    async fn apply(
        &self,
        _ops: &Ops<'_>,
        tx: &mut Tx,
        approver: &Operator,
        reason: &str,
        (current, evidence): Self::Checked,
    ) -> OpsResult<Withdrawal> {
        if !review_decisions::decide(tx, self, DecisionStatus::Approved, approver.id, reason).await? {
            return Err(already_decided());
        }
        let correlation = format!("ops-{}", Uuid::new_v4());
        apply(tx, approver, &current, self.action, self.version, &self.reason, evidence, &correlation).await
    }
}
