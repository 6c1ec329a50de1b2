//! Maker-checker (SPEC §8, §8.1, §8.3): the one way anything a second person must approve is
//! approved. Each such thing is an [`Approvable`] of an [`ApprovalKind`] (a review decision, a
//! replay run); [`approve`] runs the same steps for every kind:
//!
//! 1. the approver is a second person ([`second_person`], the pure rule
//!    [`crate::domain::may_approve`]): not the requester, on a credential the requester did not
//!    issue, nor one issued with database access only, nor one from before issuers were recorded;
//! 2. the kind's own checks before any transaction opens ([`Approvable::check`]; a review decision
//!    asks the provider again now);
//! 3. in one transaction: the thing is marked approved by the approver — exactly once, a second
//!    approver gets a 409 — and applied ([`Approvable::apply`]), with the audit row.
//!
//! The approve route's role and its audit name are the kind's ([`approve_act`]); the caller runs
//! [`approve`] inside [`Ops::perform`], so a refusal at any step is audited. Where an approval is
//! requested and stored stays with its kind (a review decision is its own row beside its
//! withdrawal, a run waits in `awaiting_approval`): the state lives with what it approves.

use super::acts::{DecisionApprove, ReplayApprove};
use super::{Act, Action, Audited, Operator, Ops, OpsError, OpsResult};
use crate::domain::{may_approve, ApprovalKind, NotSecondPerson, OperatorId};
use crate::storage::credentials::{self as stored, LOCAL_ACTOR};
use crate::storage::Tx;

/// Something that waits for a second person. (Implemented and called inside this crate only,
/// always on concrete types, so the futures' `Send` is known where axum needs it.)
#[allow(async_fn_in_trait)]
pub trait Approvable {
    const KIND: ApprovalKind;
    /// What the kind checks before the decision's transaction (e.g. the provider's answer now).
    type Checked;
    /// What approving it came to.
    type Applied;

    /// Who asked for it (the maker).
    fn requested_by(&self) -> OperatorId;

    /// The kind's checks, before any transaction opens: a slow provider must hold no writer.
    async fn check(&self, ops: &Ops<'_>, approver: &Operator) -> OpsResult<Self::Checked>;

    /// Marks it approved by `approver` and applies it, in `tx`; a 409 when someone decided first.
    async fn apply(
        &self,
        ops: &Ops<'_>,
        tx: &mut Tx,
        approver: &Operator,
        reason: &str,
        checked: Self::Checked,
    ) -> OpsResult<Self::Applied>;
}

/// The action approving a `kind` is authorised and audited as.
pub fn approve_act(kind: ApprovalKind) -> Act {
    match kind {
        ApprovalKind::ReviewDecision => DecisionApprove::ACT,
        ApprovalKind::ReplayRun => ReplayApprove::ACT,
    }
}

/// `approver` approves `item` with `reason` (already checked): a second person, the kind's checks,
/// then the approval, the change and the `audited` row in one transaction.
pub async fn approve<A: Approvable>(
    ops: &Ops<'_>,
    approver: &Operator,
    item: &A,
    reason: &str,
    audited: &Audited<'_>,
) -> OpsResult<A::Applied> {
    debug_assert_eq!(audited.action, approve_act(A::KIND).name, "audited as the kind's approve action");
    second_person(ops, approver, item.requested_by()).await?;
    let checked = item.check(ops, approver).await?;
    let mut tx = ops.db.begin().await?;
    let applied = item.apply(ops, &mut tx, approver, reason, checked).await?;
    audited.record_ok(&mut tx, approver).await?;
    tx.commit().await?;
    Ok(applied)
}

/// The two-person rule's check: `approver` may approve what `requester` asked only as another
/// person (see [`may_approve`]). Refused (403) `second_operator_required` for the requester
/// themselves, `approval_needs_another_person` for a credential the requester may hold too
/// (rotating one's own token clears it).
pub async fn second_person(ops: &Ops<'_>, approver: &Operator, requester: OperatorId) -> OpsResult<()> {
    let issued_by = if approver.id == requester {
        None
    } else {
        let row = stored::get_operator(ops.db, approver.id).await?.ok_or_else(OpsError::unauthenticated)?;
        row.credential_issued_by.map(OperatorId)
    };
    let refusal = match may_approve(requester, approver.id, issued_by, LOCAL_ACTOR) {
        Ok(()) => return Ok(()),
        Err(refusal) => refusal,
    };
    let why = match refusal {
        NotSecondPerson::SamePerson => {
            return Err(OpsError::forbidden(
                refusal.code(),
                "this must be approved by an operator other than the one who requested it",
            ))
        }
        NotSecondPerson::IssuedByRequester => "your current token was issued by the operator who requested this",
        NotSecondPerson::IssuedLocally => {
            "your current token was issued with database access only (operators create), which anyone with \
             DATABASE_URL could do"
        }
        NotSecondPerson::IssuerUnknown => "your current token was issued before issuers were recorded",
    };
    Err(OpsError::forbidden(
        refusal.code(),
        format!(
            "{why}, so it cannot stand for a second person. Rotate your own token \
             (withdrawals operators rotate-token {}) or have an admin other than the requester issue it, then approve",
            approver.id
        ),
    ))
}
