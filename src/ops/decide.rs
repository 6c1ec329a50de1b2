//! A decision on a withdrawal in review (SPEC §8.1): what an operator asked for (a
//! `domain::ReviewAction`, read by [`parse_action`]), the check of it against the provider's record at that moment ([`check_with_provider`]) and
//! its guarded application ([`apply`]). Shared by a resolution applied at once (`review`) and one
//! approved by a second operator (`decisions`); it imports neither.

use chrono::Utc;

use super::{Operator, Ops, OpsError, OpsResult};
use crate::domain::{Actor, Evidence, ReviewAction, StoredEvidence, Withdrawal, WithdrawalId, WithdrawalStatus};
use crate::jobs::{JobKind, SubmitPayout};
use crate::provider::{LookupOutcome, Verdict};
use crate::storage::jobs as job_store;
use crate::storage::withdrawals::{self as store, TransitionOutcome, TransitionRequest};
use crate::storage::DbTime;

/// Reads the action an operator asked for, refusing an unknown one with the actions there are.
pub fn parse_action(raw: &str) -> OpsResult<ReviewAction> {
    raw.parse().map_err(|_| {
        OpsError::invalid(
            "invalid_action",
            "action",
            format!("unknown action `{raw}`: use complete, fail, retry or reconcile"),
        )
    })
}

/// The withdrawal, if it is in review at the version the operator looked at.
pub(super) async fn in_review(ops: &Ops<'_>, id: WithdrawalId, version: i64) -> OpsResult<Withdrawal> {
    let current = store::find(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
    if current.version != version {
        return Err(stale(current.version));
    }
    if current.status != WithdrawalStatus::RequiresReview {
        return Err(OpsError::conflict(
            "not_in_review",
            format!("only a requires_review withdrawal can be resolved; this one is {}", current.status),
        ));
    }
    Ok(current)
}

/// Applies a checked decision in `tx`: the guarded move from `requires_review` at `version`,
/// with the provider's answer stored on the transition (and, for `retry`, the new submit job).
#[allow(clippy::too_many_arguments)]
pub(super) async fn apply(
    tx: &mut crate::storage::Tx,
    operator: &Operator,
    current: &Withdrawal,
    action: ReviewAction,
    version: i64,
    reason: &str,
    evidence: Evidence,
    correlation: &str,
) -> OpsResult<Withdrawal> {
    let id = current.id;
    if job_store::has_live_job(tx, current.key(), JobKind::ReconcilePayout).await? {
        return Err(OpsError::conflict(
            "reconciliation_in_progress",
            "a reconciliation of this withdrawal is running; wait for its result",
        ));
    }
    let actor = Actor::Operator(operator.id.to_string());
    let (to, failure_code) = match action {
        ReviewAction::Complete => (WithdrawalStatus::Completed, None),
        ReviewAction::Fail => (WithdrawalStatus::Failed, Some("rejected_by_operator")),
        ReviewAction::Retry => (WithdrawalStatus::Processing, None),
        ReviewAction::Reconcile => return Err(OpsError::Internal(anyhow::anyhow!("reconcile is not a transition"))),
    };
    let stored = StoredEvidence::from(evidence);
    let transition = TransitionRequest {
        key: current.key(),
        from: WithdrawalStatus::RequiresReview,
        to,
        expected_version: Some(version),
        actor: &actor,
        reason,
        correlation_id: correlation,
        failure_code,
        evidence: Some(&stored),
    };
    let outcome = store::transition(tx, &transition).await?;
    if action == ReviewAction::Retry
        && matches!(outcome, TransitionOutcome::Applied(_))
        && !job_store::has_live_job(tx, current.key(), JobKind::SubmitPayout).await?
    {
        job_store::enqueue(tx, &SubmitPayout::new(id, None).job(current.account_id, correlation, DbTime::now()))
            .await?;
    }
    match outcome {
        TransitionOutcome::Applied(w) => Ok(*w),
        TransitionOutcome::Stale => Err(stale_now(tx, current.key()).await?),
        TransitionOutcome::Forbidden(err) => Err(OpsError::Internal(err.into())),
    }
}

async fn stale_now(tx: &mut crate::storage::Tx, key: crate::domain::WithdrawalKey) -> OpsResult<OpsError> {
    let now = store::get_in_tx(tx, key).await?.ok_or_else(OpsError::not_found)?;
    Ok(stale(now.version))
}

fn stale(current: i64) -> OpsError {
    OpsError::conflict(
        "stale_version",
        format!("the withdrawal changed since you looked: its version is now {current}; reload and decide again"),
    )
    .with_field("version")
}

/// What the provider says about a transfer id an operator named that is not the one under the
/// withdrawal's key (read by id and checked against the withdrawal), for the refusal's detail.
async fn reference_elsewhere(gateway: &crate::provider::Gateway, w: &Withdrawal, reference: &str) -> String {
    match gateway.get(reference, &format!("ops-check-{}", w.id)).await {
        Ok(LookupOutcome::Found(ts)) => match ts.first().map(|t| Verdict::of_transfer(w, t)) {
            Some(Verdict::Mismatch(_, m)) => {
                format!("; transfer {reference} is not this withdrawal's (it differs in {})", m.fields.join(", "))
            }
            Some(v) => format!("; transfer {reference} is {}", v.kind()),
            None => String::new(),
        },
        Ok(LookupOutcome::NotFound) => format!("; the provider has no transfer {reference}"),
        Ok(LookupOutcome::Unavailable(_)) | Err(_) => String::new(),
    }
}

fn unavailable(detail: &str) -> OpsError {
    OpsError::unavailable("provider_unavailable", detail.to_owned())
}

/// SPEC §8.1: asks the provider now, by the operation key, and says whether `action` may move
/// money on its answer. On yes, returns the evidence to store with the decision.
///
/// | the provider shows | complete | fail, retry |
/// |---|---|---|
/// | a matching `paid` (or `returned`) transfer | yes, with its id as the reference | 409 `transfer_paid_at_provider` |
/// | a `pending` transfer | 422 `provider_reference_mismatch` | 409 `transfer_pending_at_provider` |
/// | a `failed` transfer, or definitively none | 422 `provider_reference_mismatch` | yes |
/// | none yet, but an attempt may still arrive | 422 `provider_reference_mismatch` | 409 `attempt_in_flight` |
/// | a transfer whose amount, currency or reference differ | 422 `provider_reference_mismatch` | 409 `provider_mismatch` |
/// | no answer (or the breaker is open) | 503 `provider_unavailable` | 503 `provider_unavailable` |
pub(super) async fn check_with_provider(
    ops: &Ops<'_>,
    w: &Withdrawal,
    action: ReviewAction,
    reference: Option<&str>,
) -> OpsResult<Evidence> {
    // The provider the latest attempt went to (SPEC §16): the one whose record decides.
    let gateway = ops.provider_for(w).await?;
    let answer = gateway
        .lookup(&w.id.to_string(), &format!("ops-check-{}", w.id))
        .await
        .map_err(|_| unavailable("the provider breaker is open; try later"))?;
    let in_flight = match answer {
        LookupOutcome::NotFound => {
            crate::jobs::reconcile::in_flight_until(ops.db, w.key(), ops.config.review.in_flight_grace).await?.is_some()
        }
        // A transfer answers for itself; no answer decides nothing.
        LookupOutcome::Found(_) | LookupOutcome::Unavailable(_) => false,
    };
    let verdict = Verdict::of_lookup(w, &answer, in_flight);
    let evidence = verdict.evidence(w, Utc::now()).from_provider(&gateway.name).for_action(action);
    let refused_complete =
        |detail: String| OpsError::invalid("provider_reference_mismatch", "provider_reference", detail);
    let conflict = |code: &str, detail: String| OpsError::conflict(code, detail);
    let reference = reference.unwrap_or_default();
    match (action, &verdict) {
        (_, Verdict::Unavailable(_)) => Err(unavailable("the provider did not answer; try later")),
        (ReviewAction::Complete, Verdict::Paid(t) | Verdict::Returned(t)) if t.id == reference => {
            Ok(evidence.naming(reference))
        }
        (ReviewAction::Complete, Verdict::Mismatch(t, m)) => Err(refused_complete(format!(
            "the provider's transfer {} differs from the withdrawal in {}: never completed",
            t.id,
            m.fields.join(", ")
        ))),
        (ReviewAction::Complete, other) => {
            let under_key = match other.transfer() {
                Some(t) if matches!(other, Verdict::Paid(_) | Verdict::Returned(_)) => {
                    format!("the provider paid this withdrawal as transfer {}, not {reference}", t.id)
                }
                Some(t) => format!(
                    "the provider reports this withdrawal's transfer {} as {}, not paid",
                    t.id,
                    t.status.as_str()
                ),
                None => "the provider has no transfer for this withdrawal".to_owned(),
            };
            let named = other.transfer().filter(|t| t.id == reference).is_some();
            let about_reference = if named { String::new() } else { reference_elsewhere(gateway, w, reference).await };
            Err(refused_complete(format!("{under_key}{about_reference}")))
        }
        (_, Verdict::NoTransfer | Verdict::Failed(_)) => Ok(evidence),
        (_, Verdict::Pending(t)) => Err(conflict(
            "transfer_pending_at_provider",
            format!("the provider's transfer {} is still pending: it may yet pay; wait, or reconcile later", t.id),
        )),
        (_, Verdict::Paid(t) | Verdict::Returned(t)) => Err(conflict(
            "transfer_paid_at_provider",
            format!("the provider paid this withdrawal (transfer {}): use complete with that reference", t.id),
        )),
        (_, Verdict::InFlight) => Err(conflict(
            "attempt_in_flight",
            "no transfer yet, but the last attempt may still reach the provider: try again shortly".to_owned(),
        )),
        (_, Verdict::Mismatch(t, m)) => Err(conflict(
            "provider_mismatch",
            format!(
                "the provider's transfer {} differs from the withdrawal in {}: compare with the settlement report",
                t.id,
                m.fields.join(", ")
            ),
        )),
    }
}
