//! The replay releaser (SPEC §8.3): releases a running replay run's items in bounded batches,
//! under the run's rate limit (governor) and a maximum of in-flight jobs lower than normal
//! traffic, and pauses the run by itself when its released jobs start dead-lettering.
//!
//! Each item is checked before release: the payload version the operator expected, upgraded by
//! the registered payload migrations (or skipped with the reason); the withdrawal still in
//! `requires_review` (a guarded `requires_review → processing`); the side effect known (unknown →
//! a reconciliation instead of a resubmission). A release is a new job linked to the dead letter
//! and the run; the envelope itself is untouched, its handling state gets a `replayed` event.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{payload, JobKind, JobType, Queue};
use crate::domain::{
    Actor, DeadLetterEventId, DeadLetterId, JobId, JobKey, ReplayAction, ReplayItemStatus, ReplayRunId, ReplayStatus,
    SideEffect, WithdrawalId, WithdrawalKey, WithdrawalStatus,
};
use crate::storage::dead_letters::{self, DeadLetter, Event};
use crate::storage::jobs::{self as job_store, NewJob};
use crate::storage::replays::{self, ReplayItem, ReplayRun};
use crate::storage::withdrawals::{self as store, TransitionOutcome, TransitionRequest};
use crate::storage::{Db, DbTime};

/// Releases items of every running run until `shutdown`.
pub async fn run_releaser(db: Db, worker_id: String, shutdown: CancellationToken) {
    let mut limiters: HashMap<ReplayRunId, (i64, Arc<DefaultDirectRateLimiter>)> = HashMap::new();
    loop {
        match release_round(&db, &worker_id, &mut limiters, &shutdown).await {
            // More may be pending: go straight on, the rate limiter does the pacing.
            Ok(true) => continue,
            Ok(false) => {}
            Err(err) => tracing::warn!(error = format!("{err:#}"), "replay releaser round failed"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

async fn release_round(
    db: &Db,
    worker_id: &str,
    limiters: &mut HashMap<ReplayRunId, (i64, Arc<DefaultDirectRateLimiter>)>,
    shutdown: &CancellationToken,
) -> anyhow::Result<bool> {
    let runs = replays::lease_running(db, worker_id, DbTime::now().plus(TimeDelta::seconds(10))).await?;
    let mut released_any = false;
    for run in runs {
        let limiter = limiters
            .entry(run.id)
            .or_insert_with(|| (run.rate_per_second, Arc::new(limiter(run.rate_per_second))))
            .1
            .clone();
        released_any |= release_some(db, &run, &limiter, shutdown, worker_id).await? > 0;
    }
    Ok(released_any)
}

fn limiter(rate: i64) -> DefaultDirectRateLimiter {
    let rate = NonZeroU32::new(u32::try_from(rate.max(1)).unwrap_or(u32::MAX)).expect("positive");
    // A burst of one spreads releases evenly instead of front-loading each second.
    RateLimiter::direct(Quota::per_second(rate).allow_burst(NonZeroU32::MIN))
}

/// Releases up to a second's worth of the run's pending items, then returns so pause, cancel and
/// other runs are noticed promptly.
async fn release_some(
    db: &Db,
    run: &ReplayRun,
    limiter: &DefaultDirectRateLimiter,
    shutdown: &CancellationToken,
    releaser: &str,
) -> anyhow::Result<i64> {
    let batch = run.rate_per_second.clamp(1, 500);
    let pending = replays::pending_items(db, run.id, batch).await?;
    if pending.is_empty() {
        let progress = replays::progress(db, run.id).await?;
        if progress.in_flight == 0 {
            let mut tx = db.begin().await?;
            replays::set_status(&mut tx, run.id, ReplayAction::Complete, None, None).await?;
            tx.commit().await?;
        }
        return Ok(0);
    }
    // Progress is counted once per batch (it scans the run); within the batch this releaser's
    // own releases are added as it goes.
    let progress = replays::progress(db, run.id).await?;
    let fresh = progress.new_dead_letters - run.dead_letter_baseline;
    if fresh >= run.auto_pause_threshold {
        let reason = format!("auto-paused: {fresh} new dead letters from this run");
        tracing::warn!(run_id = %run.id, reason, "replay auto-paused");
        let mut tx = db.begin().await?;
        replays::set_status(&mut tx, run.id, ReplayAction::Pause, Some(&reason), None).await?;
        tx.commit().await?;
        return Ok(0);
    }
    let mut done = 0;
    for (released, item) in (0_i64..).zip(pending) {
        if progress.in_flight + released >= run.max_concurrency {
            return Ok(done); // full: let released jobs finish first
        }
        let current = replays::get_run(db, run.id).await?;
        if current.as_ref().map(|r| r.status) != Some(ReplayStatus::Running) {
            return Ok(done); // paused or cancelled meanwhile
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(done),
            _ = limiter.until_ready() => {}
        }
        match release_item(db, run, &item, releaser).await {
            Ok(true) => done += 1,
            Ok(false) => return Ok(done), // no longer ours to release (paused, cancelled, re-leased)
            Err(err) => {
                // One bad item must not stall the run, nor every other run.
                tracing::warn!(error = format!("{err:#}"), item_id = %item.id, "replay item failed; skipping it");
                let mut tx = db.begin().await?;
                let detail = crate::redact::text(&format!("release failed: {err:#}"));
                replays::finish_item(&mut tx, &item, ReplayItemStatus::Skipped, Some(&detail), None).await?;
                tx.commit().await?;
            }
        }
    }
    Ok(done)
}

/// Checks and releases one item, in one transaction that first takes the item (false: it was
/// not ours to release any more).
pub async fn release_item(db: &Db, run: &ReplayRun, item: &ReplayItem, releaser: &str) -> anyhow::Result<bool> {
    let mut tx = db.begin().await?;
    if !replays::take_item(&mut tx, item, run.id, releaser).await? {
        return Ok(false);
    }
    let Some(letter) = dead_letters::get_of(db, item.account_id, item.dead_letter_id).await? else {
        return skip(tx, item, "dead letter not found").await;
    };
    // Replay what the producer wrote (the job row), not the envelope's redacted copy.
    let original =
        job_store::job_row(db, JobKey { account: letter.account_id, id: letter.job_id }).await?.map(|job| job.payload);
    let Replayable { kind, payload, version, withdrawal } = match replayable(run, &letter, original) {
        Ok(ok) => ok,
        Err(reason) => return skip(tx, item, &crate::redact::text(&reason)).await,
    };
    // A customer notification (SPEC §17) moves no money and has no withdrawal to move: its
    // delivery runs again, on the notifications queue only.
    if kind == JobKind::DeliverNotification || run.destination_queue == Queue::Notifications {
        return release_delivery(tx, run, item, &letter, kind, payload, version).await;
    }
    let Some(withdrawal) = withdrawal else {
        return skip(tx, item, "no withdrawal to replay").await;
    };
    // A withdrawal's letter lives with the withdrawal's account.
    let key = WithdrawalKey { account: letter.account_id, id: withdrawal };
    let Some(key) = store::get(db, key).await?.map(|w| w.key()) else {
        return skip(tx, item, "withdrawal not found").await;
    };
    let correlation = format!("replay-{}", run.id);
    let unknown = letter.side_effect_state == SideEffect::Unknown || super::side_effect_unreconciled(db, key).await?;
    if unknown {
        return reconcile_first(tx, run, item, &letter.id, key, &correlation).await;
    }
    let actor = Actor::Operator(run.started_by.to_string());
    let moved = store::transition(
        &mut tx,
        &TransitionRequest {
            key,
            from: WithdrawalStatus::RequiresReview,
            to: WithdrawalStatus::Processing,
            expected_version: None,
            actor: &actor,
            reason: &format!("replay run {}: {}", run.id, run.reason),
            correlation_id: &correlation,
            failure_code: None,
            evidence: None,
        },
    )
    .await?;
    if !matches!(moved, TransitionOutcome::Applied(_)) {
        let now = store::get_in_tx(&mut tx, key).await?.map(|w| w.status.to_string()).unwrap_or_default();
        return skip(tx, item, &format!("withdrawal is {now}, not requires_review")).await;
    }
    // The run's destination was checked when it started (payouts or reconciliation).
    let queue = run.destination_queue;
    let job = job_store::enqueue(
        &mut tx,
        &NewJob {
            kind: JobType::Builtin { kind, queue },
            payload,
            payload_version: version,
            run_at: DbTime::now(),
            correlation_id: correlation,
            account_id: key.account,
            withdrawal_id: Some(withdrawal),
        },
    )
    .await?;
    replays::link_job(&mut tx, job, item.id).await?;
    let job = job.id;
    replays::finish_item(&mut tx, item, ReplayItemStatus::Released, None, Some(job)).await?;
    tx.after_commit(|| crate::metrics::replay_item(ReplayItemStatus::Released.as_str()));
    record_event(&mut tx, &letter.id, run, item, Some(job), "released").await?;
    tx.commit().await?;
    Ok(true)
}

/// Releases a dead-lettered notification delivery as a new delivery job (its notification, still
/// `undeliverable`, is tried again with a fresh retry window); anything else sent to the
/// notifications queue, or a delivery sent elsewhere, is skipped.
async fn release_delivery(
    mut tx: crate::storage::Tx,
    run: &ReplayRun,
    item: &ReplayItem,
    letter: &DeadLetter,
    kind: JobKind,
    payload: Vec<u8>,
    version: i64,
) -> anyhow::Result<bool> {
    if kind != JobKind::DeliverNotification || run.destination_queue != Queue::Notifications {
        let why = "notification deliveries replay to the notifications queue, and only they do";
        return skip(tx, item, why).await;
    }
    let job = job_store::enqueue(
        &mut tx,
        &NewJob {
            kind: JobType::Builtin { kind, queue: Queue::Notifications },
            payload,
            payload_version: version,
            run_at: DbTime::now(),
            correlation_id: format!("replay-{}", run.id),
            account_id: letter.account_id,
            withdrawal_id: None,
        },
    )
    .await?;
    replays::link_job(&mut tx, job, item.id).await?;
    let job = job.id;
    replays::finish_item(&mut tx, item, ReplayItemStatus::Released, None, Some(job)).await?;
    tx.after_commit(|| crate::metrics::replay_item(ReplayItemStatus::Released.as_str()));
    record_event(&mut tx, &letter.id, run, item, Some(job), "released").await?;
    tx.commit().await?;
    Ok(true)
}

/// A dead letter's job as it would run again: its kind, its payload upgraded to the current
/// version, and the withdrawal it concerns.
struct Replayable {
    kind: JobKind,
    payload: Vec<u8>,
    version: i64,
    withdrawal: Option<WithdrawalId>,
}

/// Whether the letter can run again as the run expects, and as what; the reason to skip it when
/// it cannot. `original` is the payload the producer wrote, when its job row still exists.
fn replayable(run: &ReplayRun, letter: &DeadLetter, original: Option<Vec<u8>>) -> Result<Replayable, String> {
    if letter.payload_version != run.expected_payload_version {
        return Err(format!(
            "payload version {} is not the expected {}",
            letter.payload_version, run.expected_payload_version
        ));
    }
    let bytes = match (original, &letter.payload, &letter.raw_payload) {
        (Some(original), _, _) => original,
        (None, Some(json), _) => serde_json::to_vec(&json.0).map_err(|e| e.to_string())?,
        (None, None, Some(raw)) => raw.clone(),
        (None, None, None) => return Err("no payload stored".to_owned()),
    };
    let kind: JobKind = letter
        .job_type
        .parse()
        .map_err(|_| format!("no handler knows {} payload version {}", letter.job_type, letter.payload_version))?;
    let (payload, version) = payload::upgrade(kind, letter.payload_version, &bytes).map_err(|e| e.to_string())?;
    let from_payload = serde_json::from_slice::<serde_json::Value>(&payload)
        .ok()
        .and_then(|v| v["withdrawal_id"].as_str().and_then(|s| s.parse().ok()));
    Ok(Replayable { kind, payload, version, withdrawal: letter.withdrawal_id.or(from_payload) })
}

/// Finishes the item as skipped, saying why, and commits.
async fn skip(mut tx: crate::storage::Tx, item: &ReplayItem, reason: &str) -> anyhow::Result<bool> {
    replays::finish_item(&mut tx, item, ReplayItemStatus::Skipped, Some(reason), None).await?;
    tx.commit().await?;
    Ok(true)
}

/// The provider may have paid: ask it first (a reconciliation job); reconciliation retries only
/// on proof that nothing was paid.
async fn reconcile_first(
    mut tx: crate::storage::Tx,
    run: &ReplayRun,
    item: &ReplayItem,
    letter: &DeadLetterId,
    withdrawal: WithdrawalKey,
    correlation: &str,
) -> anyhow::Result<bool> {
    let job =
        super::enqueue_reconciliation(&mut tx, withdrawal, "replay_side_effect_unknown", correlation, DbTime::now())
            .await?;
    if let Some(job) = job {
        replays::link_job(&mut tx, JobKey { account: withdrawal.account, id: job }, item.id).await?;
    }
    let detail = "side effect unknown: reconciliation instead of resubmission";
    replays::finish_item(&mut tx, item, ReplayItemStatus::Reconciling, Some(detail), job).await?;
    tx.after_commit(|| crate::metrics::replay_item(ReplayItemStatus::Reconciling.as_str()));
    record_event(&mut tx, letter, run, item, job, "reconciliation enqueued").await?;
    tx.commit().await?;
    Ok(true)
}

async fn record_event(
    tx: &mut crate::storage::Tx,
    dead_letter: &DeadLetterId,
    run: &ReplayRun,
    item: &ReplayItem,
    job: Option<JobId>,
    outcome: &str,
) -> anyhow::Result<()> {
    dead_letters::add_event(
        tx,
        &Event {
            id: DeadLetterEventId::new(),
            account_id: item.account_id,
            dead_letter_id: *dead_letter,
            action: crate::domain::LetterEvent::Replayed,
            actor: format!("operator:{}", run.started_by),
            reason: crate::redact::text(&run.reason),
            details: Some(sqlx::types::Json(
                json!({"run_id": run.id, "item_id": item.id, "job_id": job, "outcome": outcome}),
            )),
            at: DbTime::now(),
        },
    )
    .await?;
    Ok(())
}
