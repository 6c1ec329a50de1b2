//! The `apply_webhook_event` handler (SPEC §15): a provider event is a trigger, never proof. The
//! job asks the provider for the transfer's current record (by the operation key, or by the
//! transfer id when the key names no withdrawal of ours), decides through the one table
//! [`truth::on_event`] and the guarded transitions reconciliation uses, and records what the
//! event came to on its row, in the transaction that acts on it:
//!
//! | the provider's record | then |
//! |---|---|
//! | confirms `paid` / `failed` of an open withdrawal | `completed` / `failed` (`applied`) |
//! | confirms `returned` | completed if still open, then re-credited once through the returns path (`applied`) |
//! | agrees, nothing left to change (already so, late, a repeat) | `no_op` |
//! | contradicts the event (status, amount, currency, no transfer) | nothing moves (`mismatch`) |
//! | confirms it, but contradicts our decision (paid after we failed) | nothing moves (`mismatch`), an exception for operators |
//! | shows a transfer under no withdrawal of ours | an `unknown_transfer` exception |
//! | cannot answer | asked again with backoff; after the window `unverified` (polling decides) |
//!
//! The event's own body is kept as evidence beside the provider's answer.

use chrono::TimeDelta;
use serde_json::Value;

use super::context::JobContext;
use super::retry::RetryDecision;
use super::ApplyWebhookEvent;
use crate::domain::settlement::ExceptionKind;
use crate::domain::webhook::{EventRecord, EventType};
use crate::domain::{
    Actor, Amount, Currency, Evidence, StoredEvidence, WebhookResult, Withdrawal, WithdrawalKey, WithdrawalStatus,
};
use crate::provider::truth::{self, EventAction};
use crate::provider::{LookupOutcome, Transfer, Verdict};
use crate::storage::jobs::{self as job_store, Finish};
use crate::storage::settlement::{self as exceptions, NewException};
use crate::storage::webhooks::{self, Decision, EventRow};
use crate::storage::withdrawals::{self as store, TransitionOutcome, TransitionRequest};
use crate::storage::{returns, DbTime, Tx};

/// What the job decided, before it is written.
struct Outcome {
    result: WebhookResult,
    detail: String,
    record: Option<Value>,
    withdrawal: Option<WithdrawalKey>,
}

impl Outcome {
    fn of(result: WebhookResult, detail: impl Into<String>, withdrawal: Option<WithdrawalKey>) -> Outcome {
        Outcome { result, detail: detail.into(), record: None, withdrawal }
    }

    fn resting_on(mut self, evidence: &Evidence) -> Outcome {
        self.record = Some(evidence.to_json());
        self
    }
}

pub async fn handle(ctx: &JobContext, payload: ApplyWebhookEvent) -> anyhow::Result<()> {
    let Some(event) = webhooks::get(ctx.db(), payload.event).await? else {
        return ctx
            .poison("unknown_webhook_event", &format!("the payload names event {}, which is not stored", payload.event))
            .await;
    };
    if event.result.is_some() {
        // Decided by an earlier run that lost its lease after committing.
        return ctx.finish_in_own_tx(&Finish::Succeeded).await;
    }
    let body = webhooks::body(ctx.db(), event.id).await?.unwrap_or_default();
    let parsed: provider_contract::webhook::Event<Value> = match serde_json::from_slice(&body) {
        Ok(parsed) => parsed,
        Err(err) => return ctx.poison("undecodable_webhook_event", &err.to_string()).await,
    };
    let kind = parsed.kind;
    let seen = EventRecord {
        event_id: event.event_id.clone(),
        kind: kind.as_str().to_owned(),
        received_at: event.received_at.0,
        // Evidence is redacted like everything stored (a real provider's transfer may carry
        // account details); the raw body stays on the event row.
        data: crate::redact::json(&parsed.data),
    };
    let key = event.withdrawal_id.map(|id| WithdrawalKey { account: ctx.job.account_id, id });
    let withdrawal = match key {
        Some(key) => store::get(ctx.db(), key).await?,
        None => None,
    };
    // The provider that sent the event is the one asked (SPEC §16): its record decides.
    let gateway = ctx.gateways().get(&event.provider);
    let asked = match (gateway, &withdrawal) {
        (None, _) => Err(super::routing::NO_PROVIDER_WAIT),
        (Some(g), Some(w)) => g.lookup(&w.id.to_string(), &ctx.job.correlation_id).await.map_err(|o| o.retry_in),
        (Some(g), None) => match &event.transfer_id {
            Some(transfer) => g.get(transfer, &ctx.job.correlation_id).await.map_err(|o| o.retry_in),
            None => Ok(LookupOutcome::NotFound),
        },
    };
    let answer = match asked {
        Ok(answer) => answer,
        Err(retry_in) => {
            let deferral = ctx.config().breaker_deferral(retry_in);
            return ask_later(ctx, &event, kind, Some((deferral, false))).await;
        }
    };
    if let LookupOutcome::Unavailable(error) = &answer {
        let policy = &ctx.config().reconcile_policy;
        let attempts = u32::try_from(ctx.job.attempts + 1).unwrap_or(u32::MAX);
        let first = ctx.job.first_attempt_at.unwrap_or_else(DbTime::now);
        let elapsed = (DbTime::now().0 - first.0).to_std().unwrap_or_default();
        let delay = match policy.next_delay(attempts, elapsed, error.retry_after, &mut rand::thread_rng()) {
            RetryDecision::RetryAfter(delay) => Some((delay, true)),
            RetryDecision::Exhausted(_) => None,
        };
        return ask_later(ctx, &event, kind, delay).await;
    }
    let mut tx = ctx.db().begin().await?;
    // The provider asked (answered above, so there was one).
    let asked = gateway.map_or(event.provider.as_str(), |g| g.name.as_str());
    let outcome = match withdrawal {
        Some(w) => decide(&mut tx, ctx, &w, kind, &answer, seen, asked).await?,
        None => unknown(&mut tx, ctx, &answer, seen, asked).await?,
    };
    record(tx, ctx, &event, kind, outcome).await
}

/// Decides on the withdrawal the event's key names, by the provider's record.
async fn decide(
    tx: &mut Tx,
    ctx: &JobContext,
    w: &Withdrawal,
    kind: EventType,
    answer: &LookupOutcome,
    seen: EventRecord,
    provider: &str,
) -> anyhow::Result<Outcome> {
    let key = Some(w.key());
    let verdict = Verdict::of_lookup(w, answer, false);
    // Only the provider the withdrawal's latest attempt went to holds its payout (SPEC §16): an
    // event from another moves nothing, and what that provider shows is for operators.
    if let Some(latest) = crate::storage::attempts::latest(tx, w.key()).await? {
        if latest.provider != provider {
            let why = "the event comes from a provider the withdrawal's latest attempt did not go to: nothing moves";
            let evidence = verdict.evidence(w, chrono::Utc::now()).from_provider(provider).after_event(seen);
            contradiction(tx, w, ExceptionKind::UnknownTransfer, why, &evidence).await?;
            return Ok(Outcome::of(WebhookResult::Mismatch, why, key).resting_on(&evidence));
        }
    }
    let claimed: Transfer = match serde_json::from_value(seen.data.clone()) {
        Ok(claimed) => claimed,
        Err(err) => {
            return Ok(Outcome::of(WebhookResult::Mismatch, format!("the event's transfer cannot be read: {err}"), key))
        }
    };
    let evidence = verdict.evidence(w, chrono::Utc::now()).from_provider(provider).after_event(seen);
    let outcome = match truth::on_event(kind.status(), &claimed, &verdict, w.status) {
        // Answered above: an unavailable provider never reaches a decision.
        EventAction::Ask => Outcome::of(WebhookResult::Unverified, "the provider could not answer", key),
        EventAction::NoOp(why) => Outcome::of(WebhookResult::NoOp, why, key),
        EventAction::Mismatch(why) => Outcome::of(WebhookResult::Mismatch, why, key),
        EventAction::Contradiction(why) => {
            contradiction(tx, w, ExceptionKind::StatusMismatch, why, &evidence).await?;
            Outcome::of(WebhookResult::Mismatch, why, key)
        }
        EventAction::Complete => move_to(tx, ctx, w, WithdrawalStatus::Completed, None, &evidence).await?,
        EventAction::Fail => {
            let code =
                verdict.transfer().and_then(|t| t.failure_code.clone()).unwrap_or_else(|| "provider_failed".into());
            move_to(tx, ctx, w, WithdrawalStatus::Failed, Some(&code), &evidence).await?
        }
        EventAction::Return { complete_first } => {
            if complete_first {
                // Completed here, or by a poll that got there first (reconciliation completes a
                // returned transfer but never credits): either way the return is credited now.
                let moved = move_to(tx, ctx, w, WithdrawalStatus::Completed, None, &evidence).await?;
                let now = store::get_in_tx(tx, w.key()).await?.map(|c| c.status);
                if moved.result != WebhookResult::Applied && now != Some(WithdrawalStatus::Completed) {
                    // Moved meanwhile, but not to completed: decide again on a fresh read.
                    anyhow::bail!("the withdrawal moved while its return was being decided; deciding again");
                }
            }
            credit_return(tx, w, &verdict, &evidence).await?
        }
    };
    Ok(outcome.resting_on(&evidence))
}

/// A guarded move of an open withdrawal, as reconciliation makes it: a move another decider made
/// first leaves this event a no-op.
async fn move_to(
    tx: &mut Tx,
    ctx: &JobContext,
    w: &Withdrawal,
    to: WithdrawalStatus,
    failure_code: Option<&str>,
    evidence: &Evidence,
) -> anyhow::Result<Outcome> {
    let stored = StoredEvidence::from(evidence.clone());
    let reason = format!(
        "the provider's record confirmed its {} event",
        evidence.event.as_ref().map_or("", |e| e.kind.as_str())
    );
    let request = TransitionRequest {
        key: w.key(),
        from: w.status,
        to,
        expected_version: Some(w.version),
        actor: &Actor::Webhook,
        reason: &reason,
        correlation_id: &ctx.job.correlation_id,
        failure_code,
        evidence: Some(&stored),
    };
    Ok(match store::transition(tx, &request).await? {
        TransitionOutcome::Applied(_) => Outcome::of(WebhookResult::Applied, format!("withdrawal {to}"), Some(w.key())),
        TransitionOutcome::Stale => {
            Outcome::of(WebhookResult::NoOp, "another decision moved the withdrawal first", Some(w.key()))
        }
        TransitionOutcome::Forbidden(err) => return Err(err.into()),
    })
}

/// Re-credits a return once, for the amount and currency the provider's record returns (SPEC
/// §14.3): the same path settlement uses.
async fn credit_return(tx: &mut Tx, w: &Withdrawal, verdict: &Verdict, evidence: &Evidence) -> anyhow::Result<Outcome> {
    let key = Some(w.key());
    let Some(t) = verdict.transfer() else {
        return Ok(Outcome::of(WebhookResult::Mismatch, "no returned transfer to credit", key));
    };
    let stored = StoredEvidence::from(evidence.clone());
    let reported = Currency::parse(&t.currency).and_then(|c| Amount::new(t.amount, c));
    let Ok(reported) = reported else {
        let why = "the provider's return names an amount we cannot read: not credited";
        contradiction(tx, w, ExceptionKind::Returned, why, evidence).await?;
        return Ok(Outcome::of(WebhookResult::Mismatch, why, key));
    };
    let code = t.return_code.clone().unwrap_or_else(|| "unspecified".into());
    let returned_at = t.updated_at.map(DbTime).unwrap_or_else(DbTime::now);
    let current = store::get_in_tx(tx, w.key()).await?.unwrap_or_else(|| w.clone());
    Ok(match returns::apply(tx, &current, reported, &code, returned_at, &stored).await? {
        returns::Applied::Credited => Outcome::of(WebhookResult::Applied, "return credited", key),
        returns::Applied::AlreadyApplied => Outcome::of(WebhookResult::NoOp, "the return was credited before", key),
        returns::Applied::NotCompleted => {
            let why = "a return of a withdrawal that is not completed: not credited";
            contradiction(tx, w, ExceptionKind::Returned, why, evidence).await?;
            Outcome::of(WebhookResult::Mismatch, why, key)
        }
        returns::Applied::AmountMismatch => {
            let why = "the provider returns another amount or currency than was paid out: not credited";
            contradiction(tx, w, ExceptionKind::AmountMismatch, why, evidence).await?;
            Outcome::of(WebhookResult::Mismatch, why, key)
        }
    })
}

/// An exception for operators about a withdrawal the provider's record contradicts us on.
async fn contradiction(
    tx: &mut Tx,
    w: &Withdrawal,
    kind: ExceptionKind,
    why: &str,
    e: &Evidence,
) -> anyhow::Result<()> {
    let transfer = e.transfer().map(|t| t.id.clone());
    let exception = NewException {
        account_id: w.account_id,
        kind,
        dedupe_key: format!("webhook:{kind}:{}", w.id),
        withdrawal_id: Some(w.id),
        line_id: None,
        report_date: None,
        transfer_id: transfer.as_deref(),
        detail: why,
        evidence: &e.to_json(),
    };
    exceptions::open_exception(tx, &exception).await?;
    Ok(())
}

/// An event whose key names no withdrawal of ours: a transfer the provider shows is an
/// `unknown_transfer` exception; one the provider does not show moves nothing (`mismatch`).
async fn unknown(
    tx: &mut Tx,
    ctx: &JobContext,
    answer: &LookupOutcome,
    seen: EventRecord,
    provider: &str,
) -> anyhow::Result<Outcome> {
    let mut evidence = Evidence::of(
        crate::domain::EvidenceSource::ProviderWebhook,
        crate::domain::VerdictKind::NoTransfer,
        chrono::Utc::now(),
    )
    .from_provider(provider)
    .after_event(seen);
    let transfers = match answer {
        LookupOutcome::Found(transfers) if !transfers.is_empty() => transfers,
        _ => {
            let why = "the provider shows no such transfer";
            return Ok(Outcome::of(WebhookResult::Mismatch, why, None).resting_on(&evidence));
        }
    };
    let t = &transfers[0];
    evidence.verdict = crate::domain::VerdictKind::Mismatch;
    evidence.transfer = Some(t.record());
    // The record may name one of ours where the event did not: the event is wrong, not the transfer.
    let ours = match t.reference.as_deref().map(str::parse::<crate::domain::WithdrawalId>) {
        Some(Ok(id)) => store::find(ctx.db(), id).await?,
        _ => None,
    };
    if let Some(w) = ours {
        let why = format!("the event's transfer names no withdrawal of ours; the provider's record names {}", w.id);
        return Ok(Outcome::of(WebhookResult::Mismatch, why, Some(w.key())).resting_on(&evidence));
    }
    let why = format!(
        "the provider shows transfer {} ({} {} {}), under no withdrawal of ours",
        t.id, t.status, t.amount, t.currency
    );
    let exception = NewException {
        account_id: crate::domain::AccountId::SYSTEM,
        kind: ExceptionKind::UnknownTransfer,
        dedupe_key: format!("webhook:unknown_transfer:{}", t.id),
        withdrawal_id: None,
        line_id: None,
        report_date: None,
        transfer_id: Some(&t.id),
        detail: &why,
        evidence: &evidence.to_json(),
    };
    // Names no withdrawal: the provider that shows the transfer is the exception's (SPEC §16).
    exceptions::open_exception_at(tx, provider, &exception).await?;
    Ok(Outcome::of(WebhookResult::UnknownTransfer, why, None).resting_on(&evidence))
}

/// The provider could not answer: ask again after `delay` (counting an attempt or not: a breaker
/// deferral does not), or, with none (the window closed), record the event `unverified` and leave
/// the decision to polling.
async fn ask_later(
    ctx: &JobContext,
    event: &EventRow,
    kind: EventType,
    delay: Option<(std::time::Duration, bool)>,
) -> anyhow::Result<()> {
    let mut tx = ctx.db().begin().await?;
    let window = TimeDelta::from_std(ctx.config().reconcile_policy.max_elapsed).unwrap_or(TimeDelta::hours(24));
    let first = job_store::mark_first_attempt(&mut tx, ctx.job.key(), ctx.job.lease_token).await?;
    match delay {
        Some((delay, consumed_attempt)) if first.plus(window) > DbTime::now() => {
            let how =
                Finish::Reschedule { run_at: DbTime::after(delay), consumed_attempt, error: "provider unavailable" };
            ctx.finish_or_rollback(tx, &how).await
        }
        _ => {
            let why = "the provider could not be asked within the window: polling decides";
            let key = event.withdrawal_id.map(|id| WithdrawalKey { account: ctx.job.account_id, id });
            record(tx, ctx, event, kind, Outcome::of(WebhookResult::Unverified, why, key)).await
        }
    }
}

/// Writes what the event came to beside whatever the decision wrote, and finishes the job; a run
/// that finds it decided already rolls everything back.
async fn record(
    mut tx: Tx,
    ctx: &JobContext,
    event: &EventRow,
    kind: EventType,
    outcome: Outcome,
) -> anyhow::Result<()> {
    let decision = Decision {
        result: outcome.result,
        detail: &outcome.detail,
        provider_record: outcome.record.as_ref(),
        account_id: outcome.withdrawal.map(|k| k.account),
        withdrawal_id: outcome.withdrawal.map(|k| k.id),
    };
    if !webhooks::decide(&mut tx, event.id, &decision).await? {
        drop(tx);
        return ctx.finish_in_own_tx(&Finish::Succeeded).await;
    }
    tracing::info!(event_id = %event.event_id, result = outcome.result.as_str(), detail = %outcome.detail, "webhook event decided");
    let (result, provider) = (outcome.result, event.provider.clone());
    tx.after_commit(move || crate::metrics::webhook_event(&provider, kind.as_str(), result.as_str()));
    ctx.finish_or_rollback(tx, &Finish::Succeeded).await
}
