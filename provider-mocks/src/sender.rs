//! The active side of webhooks, one background task per running mock: it drives settlement
//! (a pending transfer settles, and a scheduled return takes effect, when due, even if nobody
//! reads it, so its event goes out on time) and spawns one delivery task per queued event.
//! A delivery POSTs the event's fixed bytes, signs each attempt anew with the current unix time,
//! retries with backoff, and records every attempt. Nothing here holds the state lock across an
//! `.await`; stopping the mock stops every delivery.

use std::time::Duration;

use axum::http::header::CONTENT_TYPE;
use chrono::Utc;
use provider_contract::webhook::{header_value, PROVIDER_SIGNATURE_HEADER};
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::outbox::Outgoing;
use crate::state::Shared;
use crate::webhooks::{DeliveryOutcome, WebhookFault, STALE_BY_SECS};

/// How often due settlements and returns are applied while webhooks are on: the most an event
/// waits behind its transfer's change.
const DRIVE_EVERY: Duration = Duration::from_millis(50);

/// What a `bad_signature` fault signs with instead of the configured secrets.
const WRONG_SECRET: &str = "provider-mock-wrong-secret";

/// Runs until `stop`; then waits for the delivery tasks, which `stop` ends too.
pub(crate) async fn run(shared: Shared, mut queue: mpsc::UnboundedReceiver<Outgoing>, stop: CancellationToken) {
    // Receivers are test and demo services next to the mock, never behind a proxy.
    let client = match reqwest::Client::builder().no_proxy().build() {
        Ok(client) => client,
        Err(err) => {
            tracing::error!(error = %chain(&err), "cannot build the webhook client; no events will be sent");
            return;
        }
    };
    let deliveries = TaskTracker::new();
    let mut tick = tokio::time::interval(DRIVE_EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => shared.lock().settle_due(),
            Some(out) = queue.recv() => {
                let (shared, client, stop) = (shared.clone(), client.clone(), stop.clone());
                deliveries.spawn(async move {
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = deliver(&shared, &client, out) => {}
                    }
                });
            }
        }
    }
    deliveries.close();
    deliveries.wait().await;
}

/// Sends every copy of the event, then the event it released (a held `paid`), if any.
async fn deliver(shared: &Shared, client: &reqwest::Client, out: Outgoing) {
    let mut next = Some(out);
    while let Some(out) = next {
        tokio::time::sleep(out.delay).await;
        for copy in 1..=out.copies() {
            send(shared, client, &out, copy).await;
        }
        next = out.then.map(|held| *held);
    }
}

/// One copy: attempts until a 2xx or `max_attempts`, each recorded.
async fn send(shared: &Shared, client: &reqwest::Client, out: &Outgoing, copy: u32) {
    let max_attempts = out.retry.max_attempts.max(1);
    for attempt in 1..=max_attempts {
        if !shared.lock().outbox().is_current(out.epoch) {
            return;
        }
        let mut t = Utc::now().timestamp();
        if out.faults.contains(&WebhookFault::StaleTimestamp) {
            t -= STALE_BY_SECS;
        }
        let signature = if out.faults.contains(&WebhookFault::BadSignature) {
            header_value(&[WRONG_SECRET], t, &out.body)
        } else {
            header_value(&out.secrets[..], t, &out.body)
        };
        let answer = client
            .post(&out.url)
            .header(CONTENT_TYPE, "application/json")
            .header(PROVIDER_SIGNATURE_HEADER, signature)
            .timeout(out.timeout)
            .body(out.body.clone())
            .send()
            .await;
        let (status, error) = match answer {
            Ok(response) => (Some(response.status().as_u16()), None),
            Err(err) => (None, Some(chain(&err))),
        };
        let outcome = match status {
            Some(200..=299) => DeliveryOutcome::Delivered,
            _ if attempt == max_attempts => DeliveryOutcome::GaveUp,
            _ => DeliveryOutcome::Retrying,
        };
        shared.lock().outbox().record(out.epoch, out.delivery(copy, attempt, outcome, status, error));
        if outcome != DeliveryOutcome::Retrying {
            return;
        }
        tokio::time::sleep(out.retry.backoff(attempt)).await;
    }
}

/// An error with its causes, `: `-separated (reqwest's own text omits them).
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
