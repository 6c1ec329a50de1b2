//! Which provider a payout goes to (SPEC §16): the one its latest attempt went to, or before any
//! attempt the first by priority that pays its currency — and, while that one's breaker is open,
//! the next one, when [`crate::domain::failover::failover`] says no attempt at the first can have
//! moved money. The rule is pure and lives in `domain`; this module gathers its facts (the
//! attempts, the breaker) and turns a move into a recorded decision with its evidence.
//!
//! With one provider a first attempt reads nothing and decides nothing here beyond its breaker:
//! the bench's path is the one it always was. Later attempts read where the earlier ones went.

use std::time::Duration;

use super::context::JobContext;
use crate::domain::failover::{self, AtProvider, AttemptSeen, Failover, MoveRecord};
use crate::domain::{Evidence, EvidenceSource, StoredEvidence, VerdictKind, Withdrawal};
use crate::provider::breaker::Permit;
use crate::provider::{Gateway, Gateways};
use crate::storage::{attempts, Db, Tx};

/// Where this run's call goes.
pub(super) enum Route<'a> {
    /// Call `gateway` under `permit`; `moved`: the move to it, to be recorded with the attempt.
    Call { gateway: &'a Gateway, permit: Permit, moved: Option<Move> },
    /// No call now: ask again after `retry_in` (plus jitter). `why` goes to the job's error.
    Wait { retry_in: Duration, why: &'static str },
}

/// A move from one provider to the next, as its transition-log entry records it.
pub(super) struct Move {
    pub reason: String,
    pub evidence: StoredEvidence,
    pub from: String,
}

/// How long a withdrawal no configured provider can take waits before it is looked at again.
pub(super) const NO_PROVIDER_WAIT: Duration = Duration::from_secs(60);

/// Chooses the provider for `withdrawal`'s next attempt (`has_attempts`: it has had one), reading
/// its attempts in `tx` for any later attempt (a first one with one provider reads nothing).
pub(super) async fn choose<'a>(
    ctx: &'a JobContext,
    tx: &mut Tx,
    withdrawal: &Withdrawal,
    has_attempts: bool,
) -> anyhow::Result<Route<'a>> {
    let gateways = ctx.gateways();
    if gateways.is_single() && !has_attempts {
        // A first attempt with one provider: nothing to read (the bench's path). A later one
        // reads where the attempts went, like several providers: a provider taken out of the
        // configuration is never replaced by the one that is left.
        let gateway = gateways.primary();
        return Ok(match gateway.breaker.try_acquire() {
            Ok(permit) => Route::Call { gateway, permit, moved: None },
            Err(rejected) => Route::Wait { retry_in: rejected.retry_in, why: "circuit breaker open" },
        });
    }
    let currency = withdrawal.amount.currency().code();
    let recorded = match has_attempts {
        true => attempts::for_withdrawal_in(tx, withdrawal.key()).await?,
        false => Vec::new(),
    };
    let latest = recorded.last().map(|a| a.provider.as_str());
    let Some(current) = gateways.for_withdrawal(latest, currency) else {
        // Nobody else may be asked in place of the provider an attempt went to; and a currency no
        // provider pays waits for configuration, not for luck.
        tracing::warn!(provider = ?latest, currency, "no configured provider for this withdrawal: submit waits");
        return Ok(Route::Wait { retry_in: NO_PROVIDER_WAIT, why: "no configured provider" });
    };
    let rejected = match current.breaker.try_acquire() {
        Ok(permit) => return Ok(Route::Call { gateway: current, permit, moved: None }),
        Err(rejected) => rejected,
    };
    let here: Vec<_> = recorded.iter().filter(|a| a.provider == current.name).collect();
    let (facts, not_found) = failover::facts_at(&here.iter().map(|a| (a.outcome, a.side_effect)).collect::<Vec<_>>());
    let breaker = current.breaker.state();
    let others: Vec<&Gateway> = gateways.route(currency).into_iter().filter(|g| g.name != current.name).collect();
    let at = AtProvider { breaker, attempts: &facts, not_found_after_last_attempt: not_found };
    let decision = failover::failover(&at, !others.is_empty());
    if let Failover::Move(_) = decision {
        for next in others {
            if let Ok(permit) = next.breaker.try_acquire() {
                let record = MoveRecord {
                    from: current.name.clone(),
                    to: next.name.clone(),
                    rule: decision.as_str().to_owned(),
                    breaker,
                    attempts: here
                        .iter()
                        .map(|a| AttemptSeen {
                            attempt_no: a.attempt_no,
                            side_effect: a.side_effect,
                            outcome: a.outcome,
                            error_code: a.error_code.clone(),
                        })
                        .collect(),
                    not_found_after_last_attempt: not_found,
                };
                let reason = format!("failover from {} to {}: {}", current.name, next.name, decision.as_str());
                let mut evidence = Evidence::of(EvidenceSource::Failover, VerdictKind::NoTransfer, chrono::Utc::now())
                    .from_provider(&current.name);
                evidence.failover = Some(record);
                let moved = Move { reason, evidence: evidence.into(), from: current.name.clone() };
                return Ok(Route::Call { gateway: next, permit, moved: Some(moved) });
            }
        }
        return Ok(Route::Wait { retry_in: rejected.retry_in, why: "every provider for the currency is unavailable" });
    }
    tracing::info!(provider = %current.name, decision = decision.as_str(), "breaker open: the withdrawal waits for its provider");
    Ok(Route::Wait { retry_in: rejected.retry_in, why: "circuit breaker open" })
}

/// The name recorded for a question no configured provider could be asked.
pub(super) const UNCONFIGURED: &str = "unconfigured";

/// The provider questions about `withdrawal` go to: its latest attempt's (`None` when that one is
/// no longer configured), or the first for its currency before any attempt.
pub(super) async fn asked<'a>(ctx: &'a JobContext, withdrawal: &Withdrawal) -> anyhow::Result<Option<&'a Gateway>> {
    Ok(asked_of(ctx.gateways(), ctx.db(), withdrawal).await?)
}

/// [`asked`] for any holder of the gateways (the operator core asks the same provider).
pub async fn asked_of<'a>(
    gateways: &'a Gateways,
    db: &Db,
    withdrawal: &Withdrawal,
) -> crate::storage::Result<Option<&'a Gateway>> {
    // With one provider too: the attempts may have gone to a provider no longer configured, and
    // then nobody else may answer in its place.
    let latest = attempts::for_withdrawal(db, withdrawal.key()).await?.pop();
    Ok(gateways.for_withdrawal(latest.as_ref().map(|a| a.provider.as_str()), withdrawal.amount.currency().code()))
}
