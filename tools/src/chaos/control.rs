//! Driving the provider mock during a chaos run: the fault mix, switching faults and settlement
//! modes, waiting for a process, saving a metrics scrape, and telling when the system is quiet.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use provider_mocks::{FaultEffect, FaultRule, RouteMatch};
use serde_json::{json, Value};
use withdrawals::storage::{verify, Db};

/// The fault mix of the fault phase; probabilities per matching request, from the seeded RNG.
pub(super) fn fault_mix() -> Vec<FaultRule> {
    let p = sometimes;
    vec![
        invalid_accounts(),
        p(0.10, RouteMatch::Any, FaultEffect::Latency { ms: 300 }),
        p(0.02, RouteMatch::Any, FaultEffect::Latency { ms: 1_200 }),
        p(0.08, RouteMatch::Create, FaultEffect::Status { code: 503, retry_after_secs: None }),
        p(0.04, RouteMatch::Create, FaultEffect::Status { code: 429, retry_after_secs: Some(1) }),
        p(0.03, RouteMatch::Create, FaultEffect::TimeoutBeforeCommit { ms: 2_500 }),
        p(0.03, RouteMatch::Create, FaultEffect::TimeoutAfterCommit { ms: 2_500 }),
        p(0.03, RouteMatch::Create, FaultEffect::ResetAfterCommit),
        p(0.03, RouteMatch::Lookup, FaultEffect::Status { code: 503, retry_after_secs: None }),
    ]
}

/// The invalid-account slice every provider's mix starts with: a destination whose number carries
/// the magic digits (`0000`, see [`super::load::account_number`]) is refused as invalid, whichever
/// provider is asked.
pub(super) fn invalid_accounts() -> FaultRule {
    FaultRule {
        account_number_contains: Some("0000".into()),
        ..FaultRule::new(RouteMatch::Create, FaultEffect::InvalidAccount)
    }
}

/// A fault on a share of the matching requests (`probability`, drawn from the mock's seeded RNG).
pub(super) fn sometimes(probability: f64, route: RouteMatch, effect: FaultEffect) -> FaultRule {
    FaultRule { probability, ..FaultRule::new(route, effect) }
}

/// Nothing left for the system to do by itself: no withdrawal `pending` or `processing`, no live
/// job (deliveries of customer notifications aside), no review decision waiting, no transfer
/// `pending` at any provider, no webhook delivery that could still be accepted being retried.
/// (What is left for the operators, the desk knows.)
pub(super) async fn quiet(db: &Db, http: &reqwest::Client, mock_urls: &[String]) -> bool {
    let Ok(outcomes) = verify::withdrawal_outcomes(db).await else { return false };
    if outcomes.iter().any(|w| matches!(w.status.as_str(), "pending" | "processing")) {
        return false;
    }
    let Ok(live) = withdrawals::storage::metrics::live_jobs_by_queue(db).await else { return false };
    // Deliveries to customers' endpoints are waited for on their own, after settlement
    // ([`super::notifications`]): a dead endpoint's retries must not read as a system that
    // never converges.
    let notifications = withdrawals::domain::job::Queue::Notifications.as_str();
    if live.iter().filter(|d| d.queue != notifications).map(|d| d.count).sum::<i64>() > 0 {
        return false;
    }
    match withdrawals::storage::review_decisions::list_pending(db, 1).await {
        Ok(waiting) if waiting.is_empty() => {}
        _ => return false,
    }
    for mock_url in mock_urls {
        let Ok(response) = http.get(format!("{mock_url}/__admin/transfers")).send().await else { return false };
        let Ok(transfers) = response.json::<Value>().await else { return false };
        if transfers["data"].as_array().into_iter().flatten().any(|t| t["status"] == "pending") {
            return false;
        }
        if !super::webhooks::quiet(http, mock_url).await {
            return false;
        }
    }
    true
}

pub(super) async fn set_faults(
    http: &reqwest::Client,
    mock: &str,
    rules: &[FaultRule],
    seed: u64,
) -> anyhow::Result<()> {
    let response =
        http.post(format!("{mock}/__admin/faults")).json(&json!({"rules": rules, "seed": seed})).send().await?;
    if !response.status().is_success() {
        bail!("the mock refused the fault rules: {}", response.text().await.unwrap_or_default());
    }
    Ok(())
}

/// Sets the settlement mode of every mock in `mocks`.
pub(super) async fn set_settlement(http: &reqwest::Client, mocks: &[String], settlement: Value) -> anyhow::Result<()> {
    for mock in mocks {
        let response = http.post(format!("{mock}/__admin/settlement")).json(&settlement).send().await?;
        if !response.status().is_success() {
            bail!("the mock refused the settlement: {}", response.text().await.unwrap_or_default());
        }
    }
    Ok(())
}

/// Appends one scrape of `url` to `file`, headed by when it was taken (best effort: a process
/// that is down has nothing to say).
pub(super) async fn save_metrics(http: &reqwest::Client, url: &str, file: &Path, kills_so_far: u64) {
    let Ok(Ok(response)) = tokio::time::timeout(Duration::from_millis(800), http.get(url).send()).await else { return };
    let text = response.text().await.unwrap_or_default();
    let header = format!("# scrape of {url} at {} (after {kills_so_far} kills)\n", chrono::Utc::now().to_rfc3339());
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(file) {
        let _ = f.write_all(header.as_bytes()).and_then(|()| f.write_all(text.as_bytes()));
    }
}

pub(super) async fn wait_until(http: &reqwest::Client, url: &str, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(r) = http.get(url).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("{url} did not answer within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
