//! The chaos run's webhook slice (SPEC §15, §16): each provider mock sends a signed event for every
//! `paid`, `failed` and `returned` change to its own route on the API — `POST /webhooks/provider`
//! for the one provider, `POST /webhooks/provider/{name}` for each of several — under a secret
//! made for the run and that provider, while polling goes on as before — so a webhook and a poll
//! race for the same withdrawals. During the fault phase the mocks' webhook faults are on
//! ([`fault_mix`]): duplicates, drops, reordering, bad signatures, stale timestamps, events that
//! disagree with the mock's own record, and a small delay.
//!
//! After the run, [`check`] counts, per provider, what its events came to (the database's
//! `result`, the API's `webhook_events_total` for what was never stored: duplicates and refusals)
//! and what its mock sent (its delivery log, the ground truth), and adds its own invariants, each
//! against that provider's own record and deliveries:
//! - no stored event is left undecided once its job has had [`DRAIN_DEADLINE`] to decide it;
//! - every withdrawal a webhook decided ended as the record of the provider whose answer the
//!   decision rested on says (paid or returned → `completed`, failed → `failed`); a decision
//!   resting on a provider that has no transfer for it is a violation;
//! - no forged delivery (bad signature, stale timestamp) was answered 2xx or stored, and no event
//!   that claims `paid` for a transfer the provider failed was applied; that they moved no money
//!   is what the run's money checks (ledger, executions per key, final states against the
//!   provider's record, `paid_out`) prove for every channel at once ([`super::checks`]);
//! - every event the API acknowledged (2xx) is stored under the provider that sent it, and nothing
//!   is stored under a provider that did not send it;
//! - the signing secret is nowhere in what the service stored;
//! - at least one of the provider's events was decided on its record (`applied`, `no_op` or
//!   `mismatch`): otherwise its route exercised nothing.
//!
//! [`unclaimed`] adds what belongs to no provider of the run: an event stored, or a webhook
//! decision resting, on a provider the run does not have; and [`exercised`] asks that at least one
//! event of the run was `applied`, or the slice moved nothing. (Per provider that would be too
//! much to ask: with two, the second's events come mostly while its lookups are down, and an
//! event its provider cannot be asked about is left to polling, `unverified`.)
//!
//! It only reads the database and the mock's admin routes; it changes nothing but the mock's
//! webhook faults.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use provider_mocks::{Delivery, DeliveryOutcome, TransferRecord, TransferStatus, WebhookFault, WebhookFaults};
use serde::Serialize;
use serde_json::Value;

use crate::store::chaos as store;
use withdrawals::config::providers::DEFAULT_PROVIDER;
use withdrawals::domain::webhook::EventType;
use withdrawals::domain::{Actor, WebhookResult, WithdrawalStatus};
use withdrawals::storage::Db;

/// Where the API receives the one provider's events; provider `name`'s are at `PATH/name`.
pub(super) const PATH: &str = "/webhooks/provider";

/// The address of the route the provider `name` (`None`: the one provider) sends its events to.
pub(super) fn url(base_url: &str, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{base_url}{PATH}/{name}"),
        None => format!("{base_url}{PATH}"),
    }
}
/// How long, after the settlement phase, the run waits for deliveries still being retried and
/// for stored events still being decided, before it reads what they came to.
pub(super) const DRAIN_DEADLINE: Duration = Duration::from_secs(20);

/// A signing secret for this run only.
pub(super) fn secret() -> String {
    format!("whsec_chaos_{}", uuid::Uuid::new_v4().simple())
}

/// The webhook faults of the fault phase, drawn per event from the mock's seeded RNG (the mock
/// runs with the run's seed).
pub(super) fn fault_mix() -> WebhookFaults {
    WebhookFaults {
        duplicate: 0.2,
        drop: 0.1,
        bad_signature: 0.05,
        stale_timestamp: 0.05,
        disagree: 0.05,
        reorder: 0.1,
        delay_ms: 150,
    }
}

pub(super) async fn set_faults(http: &reqwest::Client, mock: &str, faults: &WebhookFaults) -> anyhow::Result<()> {
    let response = http.put(format!("{mock}/__admin/webhook-faults")).json(faults).send().await?;
    if !response.status().is_success() {
        bail!("the mock refused the webhook faults: {}", response.text().await.unwrap_or_default());
    }
    Ok(())
}

/// The mock's record of every delivery attempt, in the order they ended.
pub(super) async fn deliveries(http: &reqwest::Client, mock: &str) -> anyhow::Result<Vec<Delivery>> {
    let mut body: Value = http
        .get(format!("{mock}/__admin/webhooks/deliveries"))
        .send()
        .await
        .context("GET /__admin/webhooks/deliveries")?
        .json()
        .await?;
    serde_json::from_value(body["data"].take()).context("the mock's deliveries")
}

/// Signed so that the receiver must refuse it.
fn forged(d: &Delivery) -> bool {
    d.faults.iter().any(|f| matches!(f, WebhookFault::BadSignature | WebhookFault::StaleTimestamp))
}

/// Deliveries that may still store something: the last attempt of a copy said another follows,
/// and it is signed so that it can be accepted.
pub(super) fn in_flight(deliveries: &[Delivery]) -> usize {
    let mut last: HashMap<(&str, u32), &Delivery> = HashMap::new();
    for d in deliveries {
        last.insert((d.event_id.as_str(), d.copy), d);
    }
    last.values().filter(|d| d.outcome == DeliveryOutcome::Retrying && !forged(d)).count()
}

/// Nothing about webhooks is left to happen by itself: no delivery that may still be accepted is
/// being retried (a stored event's job is a live job, which the caller waits for anyway).
pub(super) async fn quiet(http: &reqwest::Client, mock: &str) -> bool {
    deliveries(http, mock).await.is_ok_and(|d| in_flight(&d) == 0)
}

/// Waits, up to [`DRAIN_DEADLINE`], until no mock has a delivery that may still be accepted being
/// retried and every stored event whose job is live has been decided. Returns how long it waited.
pub(super) async fn drain(db: &Db, http: &reqwest::Client, mocks: &[String]) -> Duration {
    let start = Instant::now();
    while start.elapsed() < DRAIN_DEADLINE {
        let mut sending = 0;
        for mock in mocks {
            sending += deliveries(http, mock).await.map_or(1, |d| in_flight(&d));
        }
        let deciding = store::undecided_with_live_job(db).await.unwrap_or(1);
        if sending == 0 && deciding == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    start.elapsed()
}

/// `webhook_events_total` of provider `provider` as one process's scrape counts it: result → type
/// → count (a series without a `provider` label is `default`'s).
pub(super) fn counted(metrics: &str, provider: &str) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut counts: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let series = format!("{}{{", withdrawals::metrics::WEBHOOK_EVENTS);
    for line in metrics.lines().filter(|l| l.starts_with(&series)) {
        let Some((labels, value)) = line[series.len()..].split_once('}') else { continue };
        let Ok(value) = value.trim().parse::<f64>() else { continue };
        let label = |name: &str| {
            labels.split(',').find_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                (k.trim() == name).then(|| v.trim().trim_matches('"').to_owned())
            })
        };
        if label("provider").as_deref().unwrap_or(DEFAULT_PROVIDER) != provider {
            continue;
        }
        let (Some(result), Some(kind)) = (label("result"), label("type")) else { continue };
        *counts.entry(result).or_default().entry(kind).or_default() += value as u64;
    }
    counts
}

/// What the mock sent.
#[derive(Debug, Default, Serialize)]
pub struct Deliveries {
    /// Distinct events the mock sent or dropped (an event held for reordering and never released
    /// has no record).
    pub events: u64,
    pub attempts: u64,
    /// Attempts by how they ended.
    pub by_outcome: BTreeMap<String, u64>,
    /// Events by the faults that shaped them.
    pub events_by_fault: BTreeMap<String, u64>,
    /// Attempts answered 2xx, and by how many distinct events.
    pub acknowledged_attempts: u64,
    pub acknowledged_events: u64,
    /// Attempts signed under a wrong secret or an old timestamp, and how many the API refused.
    pub forged_attempts: u64,
    pub forged_refused: u64,
    /// Copies whose last attempt gave up although they could have been accepted.
    pub gave_up_unforged: u64,
    /// Still being retried when the run read the log (after the drain).
    pub still_in_flight: u64,
}

/// The webhook section of the report, for one provider.
#[derive(Debug, Default, Serialize)]
pub struct WebhookReport {
    /// The provider, as the service names it (`default` for the one provider).
    pub provider: String,
    /// Stored events (one per event id of this provider), by result (`undecided` while NULL).
    pub events_stored: u64,
    pub events_by_result: BTreeMap<String, u64>,
    /// The same, by event type.
    pub events_by_type: BTreeMap<String, BTreeMap<String, u64>>,
    /// The API's `webhook_events_total` (result → count, zeros left out), the only record of what
    /// it answered without storing: `duplicate` and the refusals `bad_signature`, `stale`,
    /// `malformed`. (Decisions are counted by the workers, which the run kills; the database
    /// counts them instead.)
    pub api_counted: BTreeMap<String, u64>,
    pub deliveries: Deliveries,
    /// Withdrawals whose final decision a webhook took on this provider's answer, by that decision.
    pub withdrawals_decided: BTreeMap<String, u64>,
    /// Events the `disagree` fault shaped, by what they came to.
    pub disagreeing_events: BTreeMap<String, u64>,
    /// Of those, events claiming `paid` for a transfer the provider failed (never to be applied).
    pub false_paid_claims: u64,
    /// Seconds spent waiting for deliveries and decisions before counting.
    pub drain_seconds: f64,
    /// What proves the forged and disagreeing events moved no money (filled in by the run).
    pub moved_no_money: String,
    pub violations: Vec<String>,
}

impl WebhookReport {
    fn violation(&mut self, what: String) {
        if self.violations.len() < 100 {
            self.violations.push(what);
        }
    }
}

/// What the run hands the check of one provider.
pub(super) struct Observed<'a> {
    /// The provider, as the service names it.
    pub provider: &'a str,
    /// Its mock's deliveries and transfers.
    pub deliveries: &'a [Delivery],
    pub transfers: &'a [TransferRecord],
    /// The API process's last scrape.
    pub api_metrics: &'a str,
    /// Its signing secret.
    pub secret: &'a str,
    pub drained: Duration,
}

/// Counts and checks one provider's webhook slice; see the module doc for the invariants.
pub(super) async fn check(db: &Db, seen: &Observed<'_>) -> anyhow::Result<WebhookReport> {
    let mut r = WebhookReport {
        provider: seen.provider.to_owned(),
        drain_seconds: seen.drained.as_secs_f64(),
        ..WebhookReport::default()
    };
    for (kind, result, n) in store::webhook_results(db, seen.provider).await? {
        let name = result.map_or("undecided", WebhookResult::as_str).to_owned();
        let n = u64::try_from(n).unwrap_or(0);
        r.events_stored += n;
        *r.events_by_result.entry(name.clone()).or_default() += n;
        *r.events_by_type.entry(kind).or_default().entry(name).or_default() += n;
    }
    for (result, by_type) in counted(seen.api_metrics, seen.provider) {
        let n: u64 = by_type.values().sum();
        if n > 0 {
            r.api_counted.insert(result, n);
        }
    }
    r.deliveries = tally(seen.deliveries);

    let mut events = store::webhook_events(db).await?;
    events.retain(|e| e.provider == seen.provider);
    let stored: HashMap<&str, &store::StoredEvent> = events.iter().map(|e| (e.event_id.as_str(), e)).collect();

    // Nothing left undecided.
    for e in events.iter().filter(|e| e.result.is_none()) {
        let job = match e.job_status {
            Some(status) if e.job_live() => format!("its job still {status} after the {DRAIN_DEADLINE:?} drain"),
            Some(status) => format!("its job {status}"),
            None => "no job".to_owned(),
        };
        r.violation(format!("event {} ({}) was left undecided: {job}", e.event_id, e.event_type));
    }

    // What a webhook decided on this provider's answer is what this provider's record says.
    let by_reference: HashMap<&str, &TransferRecord> =
        seen.transfers.iter().map(|t| (t.reference.as_str(), t)).collect();
    for d in webhook_decisions(db).await?.iter().filter(|d| d.provider().unwrap_or(DEFAULT_PROVIDER) == seen.provider) {
        *r.withdrawals_decided.entry(d.to_status.as_str().to_owned()).or_default() += 1;
        let truth = by_reference.get(d.withdrawal_id.to_string().as_str()).map(|t| t.status);
        let agrees = truth.and_then(decided_as) == Some(d.to_status);
        if !agrees {
            let truth = truth.map_or_else(|| "no transfer".to_owned(), |s| format!("{s:?}").to_lowercase());
            r.violation(format!(
                "a webhook decided withdrawal {} {} on {}'s answer but {}'s record says {truth}",
                d.withdrawal_id, d.to_status, seen.provider, seen.provider
            ));
        }
    }

    // Forged deliveries were refused and stored nothing; false claims moved nothing.
    let mut clean_events = HashSet::new();
    for d in seen.deliveries {
        if !forged(d) && d.outcome != DeliveryOutcome::Dropped {
            clean_events.insert(d.event_id.as_str());
        }
        if forged(d) && d.status.is_some_and(|s| (200..300).contains(&s)) {
            r.violation(format!(
                "a forged delivery of event {} ({:?}) was answered {}",
                d.event_id,
                d.faults,
                d.status.unwrap_or_default()
            ));
        }
    }
    let transfers: HashMap<&str, &TransferRecord> = seen.transfers.iter().map(|t| (t.id.as_str(), t)).collect();
    let mut disagreeing = HashSet::new();
    for d in seen.deliveries.iter().filter(|d| d.faults.contains(&WebhookFault::Disagree)) {
        if !disagreeing.insert(d.event_id.as_str()) {
            continue;
        }
        let came_to =
            stored.get(d.event_id.as_str()).map_or("not stored", |e| e.result.map_or("undecided", |r| r.as_str()));
        *r.disagreeing_events.entry(came_to.to_owned()).or_default() += 1;
        let failed = transfers.get(d.transfer_id.as_str()).is_some_and(|t| t.status == TransferStatus::Failed);
        if d.event_type == EventType::TransferPaid && failed {
            r.false_paid_claims += 1;
            if came_to == WebhookResult::Applied.as_str() {
                r.violation(format!(
                    "event {} claimed transfer {} paid, which the provider failed, and was applied",
                    d.event_id, d.transfer_id
                ));
            }
        }
    }

    // Acknowledged means stored; stored means sent.
    let sent: HashSet<&str> = seen.deliveries.iter().map(|d| d.event_id.as_str()).collect();
    let mut acknowledged = HashSet::new();
    for d in seen.deliveries.iter().filter(|d| d.outcome == DeliveryOutcome::Delivered) {
        if acknowledged.insert(d.event_id.as_str()) && !stored.contains_key(d.event_id.as_str()) {
            r.violation(format!("event {} was acknowledged ({:?}) but is not stored", d.event_id, d.status));
        }
    }
    for e in &events {
        if !sent.contains(e.event_id.as_str()) {
            r.violation(format!("event {} is stored but the provider never sent it", e.event_id));
        } else if !clean_events.contains(e.event_id.as_str()) {
            r.violation(format!("event {} is stored but every delivery of it was forged", e.event_id));
        }
    }

    // The secret stays out of the database (every provider's events are scanned for it).
    for t in store::webhook_event_texts(db).await? {
        let text = format!(
            "{} {} {} {}",
            t.headers.0,
            String::from_utf8_lossy(&t.body),
            t.detail.unwrap_or_default(),
            t.provider_record.map(|p| p.0.to_string()).unwrap_or_default()
        );
        if text.contains(seen.secret) {
            r.violation(format!(
                "event {} (stored under {}) is stored with {}'s webhook signing secret",
                t.event_id, t.provider, seen.provider
            ));
        }
    }

    let decided = [WebhookResult::Applied, WebhookResult::NoOp, WebhookResult::Mismatch]
        .iter()
        .map(|result| r.events_by_result.get(result.as_str()).copied().unwrap_or(0))
        .sum::<u64>();
    if decided == 0 {
        r.violation(format!("no event of {} was decided on its record: its route exercised nothing", seen.provider));
    }
    Ok(r)
}

/// The run's webhook slice moved something: some event of some provider was `applied`.
pub(super) fn exercised(reports: &[&WebhookReport]) -> Option<String> {
    let applied = |r: &&WebhookReport| r.events_by_result.get(WebhookResult::Applied.as_str()).copied().unwrap_or(0);
    (reports.iter().map(applied).sum::<u64>() == 0)
        .then(|| "no event was applied: the webhook slice exercised nothing".to_owned())
}

/// The final decisions a webhook took.
async fn webhook_decisions(db: &Db) -> anyhow::Result<Vec<store::Decision>> {
    let webhook = Actor::Webhook.to_string();
    let mut decisions = store::final_decisions(db).await?;
    decisions.retain(|d| d.channel() == webhook);
    Ok(decisions)
}

/// What belongs to none of the run's `providers`: a stored event under another name, or a webhook
/// decision resting on another provider's answer (which no per-provider [`check`] would see).
pub(super) async fn unclaimed(db: &Db, providers: &[&str]) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    for e in store::webhook_events(db).await?.iter().filter(|e| !providers.contains(&e.provider.as_str())) {
        let (id, provider) = (&e.event_id, &e.provider);
        found.push(format!("event {id} is stored under provider {provider}, which the run does not have"));
    }
    for d in webhook_decisions(db).await? {
        let provider = d.provider().unwrap_or(DEFAULT_PROVIDER);
        if !providers.contains(&provider) {
            found.push(format!(
                "a webhook decided withdrawal {} {} on the answer of {provider}, which the run does not have",
                d.withdrawal_id, d.to_status
            ));
        }
    }
    found.truncate(100);
    Ok(found)
}

/// The final state the provider's record of a transfer calls for: paid money (even if it came
/// back later) completes a withdrawal, a failed transfer fails it, a pending one decides nothing.
fn decided_as(record: TransferStatus) -> Option<WithdrawalStatus> {
    match record {
        TransferStatus::Paid | TransferStatus::Returned => Some(WithdrawalStatus::Completed),
        TransferStatus::Failed => Some(WithdrawalStatus::Failed),
        TransferStatus::Pending => None,
    }
}

fn tally(deliveries: &[Delivery]) -> Deliveries {
    let mut t = Deliveries { attempts: deliveries.len() as u64, ..Deliveries::default() };
    let mut events: HashMap<&str, Vec<WebhookFault>> = HashMap::new();
    let mut acknowledged = HashSet::new();
    let mut last: HashMap<(&str, u32), &Delivery> = HashMap::new();
    for d in deliveries {
        let outcome = match d.outcome {
            DeliveryOutcome::Delivered => "delivered",
            DeliveryOutcome::Retrying => "retrying",
            DeliveryOutcome::GaveUp => "gave_up",
            DeliveryOutcome::Dropped => "dropped",
        };
        *t.by_outcome.entry(outcome.to_owned()).or_default() += 1;
        let faults = events.entry(d.event_id.as_str()).or_default();
        for f in &d.faults {
            if !faults.contains(f) {
                faults.push(*f);
            }
        }
        if d.outcome == DeliveryOutcome::Delivered {
            t.acknowledged_attempts += 1;
            acknowledged.insert(d.event_id.as_str());
        }
        if forged(d) {
            t.forged_attempts += 1;
            if d.status.is_some_and(|s| !(200..300).contains(&s)) {
                t.forged_refused += 1;
            }
        }
        last.insert((d.event_id.as_str(), d.copy), d);
    }
    t.events = events.len() as u64;
    t.acknowledged_events = acknowledged.len() as u64;
    for faults in events.values() {
        for f in faults {
            let name = serde_json::to_value(f).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
            *t.events_by_fault.entry(name).or_default() += 1;
        }
    }
    for d in last.values() {
        match d.outcome {
            DeliveryOutcome::GaveUp if !forged(d) => t.gave_up_unforged += 1,
            DeliveryOutcome::Retrying if !forged(d) => t.still_in_flight += 1,
            _ => {}
        }
    }
    t
}

/// The summary's lines about webhooks: one provider's report, or `{"providers": {name: report}}`.
pub(super) fn describe(w: &Value) -> Vec<String> {
    if let Some(why) = w["skipped"].as_str() {
        return vec![format!("webhooks: skipped ({why})")];
    }
    match w["providers"].as_object() {
        Some(each) => each.iter().flat_map(|(name, w)| describe_one(w, &format!("webhooks {name}"))).collect(),
        None => describe_one(w, "webhooks"),
    }
}

/// One provider's lines, each headed `{head}`.
fn describe_one(w: &Value, head: &str) -> Vec<String> {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let d = &w["deliveries"];
    let mut lines = vec![
        format!(
            "{head}: {} events stored, by result {}; the API also counted {} (duplicates and refusals are not stored)",
            n(&w["events_stored"]),
            w["events_by_result"],
            w["api_counted"]
        ),
        format!(
            "{head} deliveries: {} events in {} attempts ({}), faults by event {}; {} forged attempts, {} refused; \
             {} copies gave up unforged; drained in {:.1} s",
            n(&d["events"]),
            n(&d["attempts"]),
            d["by_outcome"],
            d["events_by_fault"],
            n(&d["forged_attempts"]),
            n(&d["forged_refused"]),
            n(&d["gave_up_unforged"]),
            w["drain_seconds"].as_f64().unwrap_or(0.0)
        ),
        format!(
            "{head} decisions: withdrawals decided by a webhook {}; disagreeing events came to {} ({} false `paid` \
             claims, none may apply)",
            w["withdrawals_decided"],
            w["disagreeing_events"],
            n(&w["false_paid_claims"])
        ),
    ];
    if let Some(money) = w["moved_no_money"].as_str() {
        lines.push(format!("{head} money: {money}"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn delivery(event: &str, copy: u32, outcome: DeliveryOutcome, faults: Vec<WebhookFault>) -> Delivery {
        Delivery {
            event_id: event.to_owned(),
            event_type: EventType::TransferPaid,
            transfer_id: "tr_1".to_owned(),
            copy,
            attempt: 1,
            faults,
            outcome,
            status: match outcome {
                DeliveryOutcome::Delivered => Some(200),
                DeliveryOutcome::Retrying | DeliveryOutcome::GaveUp => Some(400),
                DeliveryOutcome::Dropped => None,
            },
            error: None,
            at: Utc::now(),
        }
    }

    #[test]
    fn a_copy_is_in_flight_only_while_its_last_attempt_retries_and_it_could_be_accepted() {
        use DeliveryOutcome::*;
        let log = [
            delivery("evt_a", 1, Retrying, vec![]),
            delivery("evt_a", 1, Delivered, vec![]),
            delivery("evt_b", 1, Retrying, vec![]),
            delivery("evt_c", 1, Retrying, vec![WebhookFault::BadSignature]),
            delivery("evt_a", 2, Retrying, vec![WebhookFault::Duplicate]),
        ];
        assert_eq!(in_flight(&log), 2, "evt_b and evt_a's second copy; evt_c can never be accepted");
        assert_eq!(in_flight(&log[..2]), 0);
    }

    #[test]
    fn the_tally_counts_attempts_by_outcome_and_events_by_fault_once_each() {
        use DeliveryOutcome::*;
        let log = [
            delivery("evt_a", 1, Retrying, vec![WebhookFault::StaleTimestamp]),
            delivery("evt_a", 1, GaveUp, vec![WebhookFault::StaleTimestamp]),
            delivery("evt_b", 1, Delivered, vec![WebhookFault::Duplicate]),
            delivery("evt_b", 2, Delivered, vec![WebhookFault::Duplicate]),
            delivery("evt_c", 1, Dropped, vec![WebhookFault::Drop]),
            delivery("evt_d", 1, GaveUp, vec![]),
        ];
        let t = tally(&log);
        assert_eq!((t.events, t.attempts, t.acknowledged_attempts, t.acknowledged_events), (4, 6, 2, 1));
        assert_eq!((t.forged_attempts, t.forged_refused, t.gave_up_unforged), (2, 2, 1));
        let faults: Vec<(&str, u64)> = t.events_by_fault.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(faults, [("drop", 1), ("duplicate", 1), ("stale_timestamp", 1)]);
        assert_eq!(t.by_outcome["gave_up"], 2);
    }

    #[test]
    fn the_api_scrape_is_read_by_result_and_type_whatever_the_label_order() {
        let scrape = "# HELP webhook_events_total provider webhook requests\n\
                      # TYPE webhook_events_total counter\n\
                      webhook_events_total{result=\"duplicate\",type=\"transfer.paid\"} 3\n\
                      webhook_events_total{type=\"unknown\",result=\"bad_signature\"} 5\n\
                      webhook_events_total{result=\"duplicate\",type=\"transfer.failed\"} 1\n\
                      webhook_last_received_timestamp_seconds 1.7e9\n";
        let counts = counted(scrape, "default");
        assert_eq!(counts["duplicate"].values().sum::<u64>(), 4);
        assert_eq!(counts["bad_signature"]["unknown"], 5);
        assert_eq!(counts.len(), 2);
        assert_eq!(counted(scrape, "acme"), BTreeMap::new(), "unlabelled series are default's");
    }

    #[test]
    fn the_api_scrape_is_read_for_one_provider_only() {
        let scrape = "webhook_events_total{provider=\"acme\",result=\"duplicate\",type=\"transfer.paid\"} 3\n\
                      webhook_events_total{provider=\"bolt\",result=\"duplicate\",type=\"transfer.paid\"} 2\n\
                      webhook_events_total{result=\"bad_signature\",type=\"unknown\",provider=\"bolt\"} 1\n";
        assert_eq!(counted(scrape, "acme")["duplicate"]["transfer.paid"], 3);
        let bolt = counted(scrape, "bolt");
        assert_eq!((bolt["duplicate"]["transfer.paid"], bolt["bad_signature"]["unknown"]), (2, 1));
        assert_eq!(counted(scrape, "default"), BTreeMap::new());
    }
}
