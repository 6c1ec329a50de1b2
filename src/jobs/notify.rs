//! Customer notifications' delivery (SPEC §17): the dispatcher that fans each new event out into
//! one notification and delivery job per subscribed endpoint, and the delivery job itself — the
//! event's JSON signed `Withdrawals-Signature: t=…,v1=…` (Stripe's scheme, one `v1` per valid
//! secret during a rotation), POSTed through [`crate::outbound`] behind a breaker per endpoint;
//! a 2xx is delivered, a 410 disables the endpoint, anything else is retried with backoff and
//! full jitter (`Retry-After` honoured) until the window from the event runs out, then
//! dead-lettered as `notification_undeliverable`. An endpoint failing for longer than
//! `NOTIFY_DISABLE_AFTER_MS` is disabled.
//!
//! Delivery is at least once: a crash after the receiver answered and before the answer was
//! recorded sends the event again, with the same `id`; receivers deduplicate by it, and order by
//! the withdrawal's `version` in `data`.

use std::time::{Duration, Instant};

use secrecy::ExposeSecret;
use tokio_util::sync::CancellationToken;

use super::context::JobContext;
use super::retry::RetryDecision;
use crate::dead_letter::{Category, Failure};
use crate::domain::job::DeliverNotification;
use crate::domain::{DeliveryResult, EndpointStatus, NotificationStatus, SideEffect};
use crate::outbound::{self, SendError};
use crate::provider::breaker::CallOutcome;
use crate::storage::jobs::Finish;
use crate::storage::notifications::{self as store, Attempted};
use crate::storage::{Db, DbTime};

/// The header a notification is signed in.
pub const SIGNATURE_HEADER: &str = "Withdrawals-Signature";

/// Fans new events out every `dispatch_interval` until `shutdown`.
pub async fn run_dispatcher(db: Db, every: Duration, shutdown: CancellationToken) {
    loop {
        match store::fan_out(&db, 500).await {
            Ok((events, _)) if events > 0 => continue,
            Ok(_) => {}
            Err(err) => tracing::warn!(error = format!("{err:#}"), "notification fan-out failed; retrying"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// What one POST came to.
struct Sent {
    result: DeliveryResult,
    status_code: Option<u16>,
    retry_after: Option<Duration>,
    error: Option<String>,
    elapsed: Duration,
}

/// Runs one [`DeliverNotification`] job.
pub async fn handle(ctx: &JobContext, p: DeliverNotification) -> anyhow::Result<()> {
    let db = ctx.db();
    let settings = &ctx.config().notify;
    // The notification with its endpoint and event (kept together by the foreign keys).
    let Some(store::Delivery { notification: n, endpoint, event }) = store::delivery(db, p.notification).await? else {
        return ctx.poison("unknown_notification", &format!("no notification {}", p.notification)).await;
    };
    // A replayed dead letter finds its notification `undeliverable` and tries again; one that
    // was delivered, gone or skipped meanwhile is not sent again.
    if !matches!(n.status, NotificationStatus::Pending | NotificationStatus::Undeliverable) {
        return ctx.finish_in_own_tx(&Finish::Succeeded).await;
    }
    if endpoint.status != EndpointStatus::Enabled {
        let mut tx = db.begin().await?;
        store::set_status(&mut tx, n.id, NotificationStatus::Skipped).await?;
        tracing::info!(endpoint_id = %endpoint.id.wire(), status = %endpoint.status, "notification skipped");
        return ctx.finish_or_rollback(tx, &Finish::Succeeded).await;
    }
    let Some(key) = settings.secret_key.as_deref().map(ExposeSecret::expose_secret) else {
        let how = Finish::Reschedule {
            run_at: DbTime::after(Duration::from_secs(60)),
            consumed_attempt: false,
            error: "no NOTIFY_SECRET_KEY",
        };
        tracing::error!("a notification cannot be signed: this worker has no NOTIFY_SECRET_KEY");
        return ctx.finish_in_own_tx(&how).await;
    };
    let now = DbTime::now();
    let mut secrets = Vec::new();
    for sealed in endpoint.signing_secrets(now) {
        match crate::credentials::open(key, endpoint.id.0, sealed) {
            Some(secret) => secrets.push(secret),
            None => {
                // Sealed under another key: no retry can sign it.
                // Our own configuration, not the integrator's endpoint: the service team's.
                let failure = Failure::new(
                    Category::CodeBug,
                    "signing_secret_unreadable",
                    "permanent",
                    "the endpoint's signing secret does not open under this NOTIFY_SECRET_KEY (was the key changed?)",
                )
                .with_side_effect(SideEffect::NotStarted);
                let mut tx = db.begin().await?;
                store::mark_undeliverable(&mut tx, n.id, ctx.job.id).await?;
                return ctx.dead_letter(tx, &failure).await;
            }
        }
    }

    let breaker = ctx.worker.notify.breaker(endpoint.id, settings);
    let permit = match breaker.try_acquire() {
        Ok(permit) => permit,
        Err(rejected) => {
            // The endpoint is failing: wait for its probe, without an attempt — but within the
            // window, which this run starts if none did: a notification the breaker holds for
            // the whole window is dead-lettered like one whose attempts all failed.
            let first_run = ctx.job.first_attempt_at.unwrap_or(now);
            let used = (now.0 - first_run.0).to_std().unwrap_or_default();
            let mut tx = db.begin().await?;
            if used >= settings.retry.max_elapsed {
                let message = format!(
                    "the endpoint's breaker stayed open for the rest of the {} s window: event {} not delivered to \
                     endpoint {} after {} attempts",
                    settings.retry.max_elapsed.as_secs(),
                    event.id.wire(),
                    endpoint.id.wire(),
                    n.attempts
                );
                let failure =
                    Failure::new(Category::NotificationUndeliverable, "endpoint_breaker_open", "retryable", message)
                        .with_side_effect(SideEffect::Unknown);
                store::mark_undeliverable(&mut tx, n.id, ctx.job.id).await?;
                return ctx.dead_letter(tx, &failure).await;
            }
            if ctx.job.first_attempt_at.is_none() {
                crate::storage::jobs::first_run_at(&mut tx, ctx.job.key(), first_run).await?;
            }
            let wait = rejected.retry_in.max(Duration::from_secs(1)) + jitter(settings.breaker.wait_duration_in_open);
            let how = Finish::Reschedule {
                run_at: DbTime::after(wait.min(settings.retry.max_elapsed - used)),
                consumed_attempt: false,
                error: "endpoint breaker open",
            };
            return ctx.finish_or_rollback(tx, &how).await;
        }
    };

    let attempt = n.attempts + 1;
    let body = serde_json::to_vec(&event.to_json())?;
    let exposed: Vec<&str> = secrets.iter().map(|s| s.expose_secret()).collect();
    let signed_at = chrono::Utc::now().timestamp();
    let headers = [
        (SIGNATURE_HEADER, provider_contract::webhook::header_value(&exposed, signed_at, &body)),
        ("User-Agent", format!("withdrawals-notifications/{}", crate::VERSION)),
        ("Withdrawals-Event-Id", event.id.wire()),
        ("Withdrawals-Delivery-Attempt", attempt.to_string()),
    ];
    let started = Instant::now();
    let answer = outbound::post(
        ctx.worker.notify.client(),
        &endpoint.url,
        &headers,
        body,
        settings.max_response_bytes,
        settings.allow_insecure,
    )
    .await;
    let sent = sent(answer, started.elapsed());
    let outcome = match sent.result {
        DeliveryResult::Delivered | DeliveryResult::Gone => CallOutcome::Success,
        // Our own refusal says nothing about the endpoint's health.
        DeliveryResult::Refused => CallOutcome::Ignored,
        _ => CallOutcome::Failure,
    };
    breaker.record(permit, outcome, sent.elapsed);
    crate::metrics::notification_delivery(sent.result, sent.elapsed);
    tracing::info!(
        endpoint_id = %endpoint.id.wire(),
        event_id = %event.id.wire(),
        attempt,
        result = sent.result.as_str(),
        status_code = sent.status_code,
        elapsed_ms = sent.elapsed.as_millis() as u64,
        "notification delivery attempt"
    );

    // What comes next: delivered, gone, another try, or the window is over. The window starts at
    // this job's first run: for the dispatcher's job, moments after the event; for a replay or an
    // operator's redelivery, a fresh one.
    let first_run = ctx.job.first_attempt_at.unwrap_or(now);
    let elapsed_since_event = (DbTime::now().0 - first_run.0).to_std().unwrap_or_default();
    let next = match sent.result {
        DeliveryResult::Delivered => None,
        DeliveryResult::Gone => None,
        _ => Some(settings.retry.next_delay(
            attempt as u32,
            elapsed_since_event,
            sent.retry_after,
            &mut rand::thread_rng(),
        )),
    };
    let status = match (sent.result, next) {
        (DeliveryResult::Delivered, _) => NotificationStatus::Delivered,
        (DeliveryResult::Gone, _) => NotificationStatus::Gone,
        (_, Some(RetryDecision::Exhausted(_))) => NotificationStatus::Undeliverable,
        _ => NotificationStatus::Pending,
    };
    let at = DbTime::now();
    let attempted = Attempted {
        account: n.account_id,
        notification: n.id,
        endpoint: endpoint.id,
        endpoint_was_failing: endpoint.failing_since.is_some(),
        attempt,
        result: sent.result,
        status_code: sent.status_code,
        error: sent.error.as_deref(),
        duration_ms: sent.elapsed.as_millis() as i64,
        at,
        status,
    };
    if sent.result == DeliveryResult::Delivered && !attempted.endpoint_was_failing && n.dead_job_id.is_none() {
        // The common case — delivered to a healthy endpoint, no dead letter to settle: the attempt
        // and the notification's move are all this run writes, so they go with its finish in the
        // worker's group commit, many deliveries per transaction.
        return ctx.succeed_with(store::attempt_writes(&attempted).into()).await;
    }
    let mut tx = db.begin().await?;
    if matches!(next, Some(RetryDecision::RetryAfter(_))) {
        // The window's start, kept for the next run (a dead letter records its own).
        crate::storage::jobs::first_run_at(&mut tx, ctx.job.key(), first_run).await?;
    }
    let recorded = store::record_attempt(&mut tx, &attempted).await?;
    let failing_since = match recorded {
        store::Recorded::Open { failing_since } => failing_since,
        // Another job (an operator's redelivery beside this one) settled it first: this job's
        // answer moves it no more.
        store::Recorded::Settled => return ctx.finish_or_rollback(tx, &Finish::Succeeded).await,
    };
    if sent.result == DeliveryResult::Gone {
        if store::disable_endpoint(&mut tx, endpoint.id, "the endpoint answered 410 Gone").await? {
            tracing::warn!(endpoint_id = %endpoint.id.wire(), "notification endpoint disabled: it answered 410 Gone");
        }
    } else if let Some(since) = failing_since {
        let failing_for = (at.0 - since.0).to_std().unwrap_or_default();
        if failing_for > settings.disable_after {
            let reason = format!("every delivery failed for longer than {} s", settings.disable_after.as_secs());
            if store::disable_endpoint(&mut tx, endpoint.id, &reason).await? {
                tracing::warn!(endpoint_id = %endpoint.id.wire(), reason, "notification endpoint disabled");
            }
        }
    }
    if let (DeliveryResult::Delivered, Some(dead)) = (sent.result, n.dead_job_id) {
        // Delivered after all (a replay, a redelivery): its dead letter is settled.
        let actor = format!("worker:{}", ctx.worker_id());
        let reason = format!("notification delivered on attempt {attempt}");
        crate::storage::dead_letters::close_for_job(&mut tx, n.account_id, dead, &actor, &reason).await?;
    }
    match next {
        None => ctx.finish_or_rollback(tx, &Finish::Succeeded).await,
        Some(RetryDecision::RetryAfter(delay)) => {
            let error = sent.result.as_str();
            let how = Finish::Reschedule { run_at: DbTime::after(delay), consumed_attempt: true, error };
            ctx.finish_or_rollback(tx, &how).await
        }
        Some(RetryDecision::Exhausted(_)) => {
            let code = match sent.status_code {
                Some(code) => format!("http_{code}"),
                None => sent.result.as_str().to_owned(),
            };
            let message = format!(
                "{attempt} attempts in {} s did not deliver event {} to endpoint {}; last: {}",
                elapsed_since_event.as_secs(),
                event.id.wire(),
                endpoint.id.wire(),
                sent.error.as_deref().unwrap_or(sent.result.as_str())
            );
            let failure = Failure::new(Category::NotificationUndeliverable, code, "retryable", message)
                .with_side_effect(SideEffect::Unknown);
            store::mark_undeliverable(&mut tx, n.id, ctx.job.id).await?;
            ctx.dead_letter(tx, &failure).await
        }
    }
}

fn sent(answer: Result<outbound::Answer, SendError>, elapsed: Duration) -> Sent {
    match answer {
        Ok(a) => {
            let result = DeliveryResult::of_status(a.status);
            let error =
                result.is_retryable().then(|| format!("HTTP {}: {}", a.status, a.body.lines().next().unwrap_or("")));
            Sent { result, status_code: Some(a.status), retry_after: a.retry_after, error, elapsed }
        }
        Err(err) => {
            let result = match &err {
                SendError::Timeout => DeliveryResult::Timeout,
                SendError::Unreachable(_) => DeliveryResult::Unreachable,
                SendError::Refused(_) => DeliveryResult::Refused,
            };
            Sent { result, status_code: None, retry_after: None, error: Some(err.to_string()), elapsed }
        }
    }
}

fn jitter(up_to: Duration) -> Duration {
    use rand::Rng;
    Duration::from_millis(rand::thread_rng().gen_range(0..=up_to.as_millis().min(60_000) as u64))
}
