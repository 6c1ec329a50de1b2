//! The chaos run's customer notifications (SPEC §17, `--notifications`, on by default): every
//! account of the run registers one endpoint (`["*"]`) through the API before the load starts,
//! all pointing at one in-process [`Receiver`] that verifies each request's signature with that
//! endpoint's secret and records it.
//!
//! The accounts are split in two halves, alternately:
//! - the **live** half reaches the receiver through a [`Proxy`]; during the fault phase the
//!   receiver draws a fault for each request ([`FaultMix::chaos`]: a third 500 or 503 with
//!   `Retry-After: 1`, some hangs past the service's delivery timeout, some slow answers within
//!   it), and for a window of it the proxy refuses connections (the receiver is down);
//! - the **dead** half's proxy refuses connections for the whole fault phase: its deliveries run
//!   into their retry window (`NOTIFY_MAX_ELAPSED_MS`, shorter than the phase) and are
//!   dead-lettered, or are delivered once it comes back.
//!
//! After the fault phase everything answers 200. Once the run has converged and settled (its
//! returns announce themselves too), [`Notifications::drain`] waits until every event is fanned
//! out and no delivery job is live, and [`Notifications::check`] checks ([`checks`]):
//! (a) every event of the run was delivered at least once (by event id) or dead-lettered as
//! `notification_undeliverable`; (b) every request the receiver got was well signed and announces
//! a committed change — the event is in the outbox of that endpoint's account, and at its version
//! the withdrawal's transition log reached the status it shows; (c) the payout path is
//! unaffected by a dead endpoint: the dead half's median accept → `completed` latency, over the
//! payouts a worker completed (an operator's or reconciliation's decision waits on people and on
//! the provider's faults), is within `1.5 ×` the live half's plus 500 ms. No delivered body carries a full account number. The
//! report's `notifications` section has the counts.
//!
//! Every process of the run gets the same `NOTIFY_SECRET_KEY` (made for the run; it and the
//! endpoints' secrets join the strings the logs are scanned for).

mod checks;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Utc};
use rand::Rng;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::proxy::Proxy;
use super::receiver::{register_endpoint, Answer, FaultMix, Receiver};
use crate::store::notify as store;
use withdrawals::domain::job::Queue;
use withdrawals::domain::{AccountId, WithdrawalStatus};
use withdrawals::storage::Db;

/// The service's delivery timeout in the run: short, so a hang costs a slot for a second only.
const TIMEOUT_MS: u64 = 1_000;
const CONNECT_TIMEOUT_MS: u64 = 500;
const BASE_DELAY_MS: u64 = 200;
/// Short backoff, so deliveries converge within seconds once the faults stop.
const MAX_DELAY_MS: u64 = 1_500;
const BREAKER_WAIT_OPEN_MS: u64 = 1_000;
/// The dead half's median latency may be at most this many times the live half's, plus
/// [`SLOWER_FLOOR_MS`] (a run's medians move by a few hundred milliseconds by themselves).
const SLOWER_FACTOR: f64 = 1.5;
const SLOWER_FLOOR_MS: f64 = 500.0;
/// Completions each half needs for the latency comparison to be judged (a smaller run reports
/// the medians without a verdict).
const MIN_SAMPLES: usize = 20;

/// Which half of the accounts an endpoint belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Half {
    Live,
    Dead,
}

impl Half {
    fn of(account_index: usize) -> Half {
        if account_index % 2 == 0 {
            Half::Live
        } else {
            Half::Dead
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Half::Live => "live",
            Half::Dead => "dead",
        }
    }
}

/// One registered endpoint: slot `i` is account `i`'s.
struct Slot {
    account: Uuid,
    half: Half,
    secret: String,
}

/// The live half's down window during the fault phase.
#[derive(Debug, Default)]
struct Window {
    at: Option<Instant>,
    length: Duration,
    down_since: Option<DateTime<Utc>>,
    /// Wall-clock start and end, once over.
    was: Option<(DateTime<Utc>, DateTime<Utc>)>,
    refusal_verified: bool,
}

pub(super) struct Notifications {
    receiver: Receiver,
    live: Proxy,
    dead: Proxy,
    key_hex: String,
    max_elapsed: Duration,
    seed: u64,
    slots: Vec<Slot>,
    window: Window,
    dead_refusal_verified: bool,
    dead_since: DateTime<Utc>,
    dead_until: Option<DateTime<Utc>>,
}

/// How long the drain waited, and what was left.
#[derive(Debug, Clone, Copy)]
pub(super) struct Drained {
    pub waited: Duration,
    pub converged: bool,
    pub left: store::Undelivered,
    pub live_jobs: i64,
}

impl Notifications {
    /// Starts the receiver and both proxies, the dead one already refusing.
    pub(super) async fn start(seed: u64, phase: Duration) -> anyhow::Result<Notifications> {
        let receiver = Receiver::start(true).await?;
        let live = Proxy::start(receiver.addr()).await?;
        let mut dead = Proxy::start(receiver.addr()).await?;
        let dead_refusal_verified = dead.refuse().await;
        let key: [u8; 32] = rand::thread_rng().gen();
        Ok(Notifications {
            receiver,
            live,
            dead,
            key_hex: key.iter().map(|b| format!("{b:02x}")).collect(),
            max_elapsed: (phase * 2 / 5).clamp(Duration::from_secs(5), Duration::from_secs(30)),
            seed,
            slots: Vec::new(),
            window: Window::default(),
            dead_refusal_verified,
            dead_since: Utc::now(),
            dead_until: None,
        })
    }

    /// What every process of the run is started with.
    pub(super) fn service_env(&self) -> Vec<(String, String)> {
        [
            ("NOTIFY_ALLOW_INSECURE", "true".to_owned()),
            ("NOTIFY_SECRET_KEY", self.key_hex.clone()),
            ("NOTIFY_TIMEOUT_MS", TIMEOUT_MS.to_string()),
            ("NOTIFY_CONNECT_TIMEOUT_MS", CONNECT_TIMEOUT_MS.to_string()),
            ("NOTIFY_BASE_DELAY_MS", BASE_DELAY_MS.to_string()),
            ("NOTIFY_MAX_DELAY_MS", MAX_DELAY_MS.to_string()),
            ("NOTIFY_MAX_ELAPSED_MS", self.max_elapsed.as_millis().to_string()),
            ("NOTIFY_BREAKER_WAIT_OPEN_MS", BREAKER_WAIT_OPEN_MS.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// Registers one endpoint (`["*"]`) per account through the API, with that account's key.
    pub(super) async fn register(
        &mut self,
        http: &reqwest::Client,
        base_url: &str,
        accounts: &[(AccountId, String)],
    ) -> anyhow::Result<()> {
        for (i, (account, api_key)) in accounts.iter().enumerate() {
            let half = Half::of(i);
            let proxy = match half {
                Half::Live => &self.live,
                Half::Dead => &self.dead,
            };
            let url = format!("{}{}", proxy.url(), Receiver::path(i));
            let secret = register_endpoint(http, base_url, api_key, &url)
                .await
                .with_context(|| format!("account {account}'s endpoint"))?;
            self.receiver.set_secret(i, secret.clone());
            self.slots.push(Slot { account: account.0, half, secret });
        }
        Ok(())
    }

    /// The fault phase starts: the receiver draws faults; the live half's down window is set.
    pub(super) fn begin(&mut self, phase_start: Instant, phase: Duration) {
        self.receiver.set_faults(Some(FaultMix::chaos(Duration::from_millis(TIMEOUT_MS))), self.seed);
        self.window.at = Some(phase_start + phase * 3 / 10);
        self.window.length = (phase / 5).clamp(Duration::from_secs(2), Duration::from_secs(8));
        self.dead_since = Utc::now();
    }

    /// Takes the live half's receiver down, or brings it back, when its window says so.
    pub(super) async fn tick(&mut self, now: Instant) -> anyhow::Result<()> {
        let Some(at) = self.window.at else { return Ok(()) };
        if self.window.down_since.is_none() && self.window.was.is_none() && now >= at {
            self.window.refusal_verified = self.live.refuse().await;
            self.window.down_since = Some(Utc::now());
        }
        if let Some(since) = self.window.down_since {
            if now >= at + self.window.length {
                self.live.accept().await?;
                self.window.was = Some((since, Utc::now()));
                self.window.down_since = None;
            }
        }
        Ok(())
    }

    /// The fault phase is over: every request is answered 200 and both halves are reachable.
    pub(super) async fn end_faults(&mut self) -> anyhow::Result<()> {
        self.receiver.set_faults(None, self.seed);
        if let Some(since) = self.window.down_since.take() {
            self.live.accept().await?;
            self.window.was = Some((since, Utc::now()));
        }
        self.dead.accept().await?;
        self.dead_until = Some(Utc::now());
        Ok(())
    }

    /// Waits (polling, up to a deadline) until every event is fanned out and no delivery job is
    /// live: each notification is then delivered, undeliverable, or stuck (which the check says).
    pub(super) async fn drain(&self, db: &Db) -> Drained {
        let start = Instant::now();
        let deadline = (self.max_elapsed * 3).max(Duration::from_secs(60));
        loop {
            let left = store::undelivered(db).await.ok();
            let live_jobs = live_delivery_jobs(db).await;
            let done = left.is_some_and(|l| l.events_not_fanned_out == 0) && live_jobs == Some(0);
            if done || start.elapsed() > deadline {
                return Drained {
                    waited: start.elapsed(),
                    converged: done,
                    left: left.unwrap_or_default(),
                    live_jobs: live_jobs.unwrap_or(-1),
                };
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The strings no log may contain: the sealing key and every endpoint's signing secret.
    pub(super) fn secrets(&self) -> Vec<String> {
        std::iter::once(self.key_hex.clone()).chain(self.slots.iter().map(|s| s.secret.clone())).collect()
    }

    /// Counts and checks; see the module doc.
    pub(super) async fn check(
        &self,
        db: &Db,
        secrets: &super::checks::Secrets,
        drained: Drained,
    ) -> anyhow::Result<NotificationReport> {
        let events = store::events(db).await?;
        let notifications = store::notifications(db).await?;
        let letters: HashSet<String> = store::undeliverable_dead_letters(db).await?.into_iter().collect();
        let receipts = self.receiver.receipts();
        let transitions = store::transitions(db).await?;
        let returned: HashSet<Uuid> = store::returned_withdrawals(db).await?.into_iter().collect();

        let mut r = NotificationReport {
            max_elapsed_ms: self.max_elapsed.as_millis() as u64,
            drain_seconds: drained.waited.as_secs_f64(),
            ..NotificationReport::default()
        };
        for s in &self.slots {
            *r.endpoints.entry(s.half.as_str().to_owned()).or_default() += 1;
        }
        r.live_down_window_seconds = self.window.was.map_or(0.0, |(a, b)| seconds(a, b));
        r.dead_window_seconds = seconds(self.dead_since, self.dead_until.unwrap_or_else(Utc::now));
        r.refusals_verified = self.window.refusal_verified && self.dead_refusal_verified;
        for e in &events {
            *r.events_by_type.entry(e.event_type.clone()).or_default() += 1;
        }
        for n in &notifications {
            *r.notifications_by_status.entry(n.status.to_string()).or_default() += 1;
        }
        r.attempts_by_result = store::attempts_by_result(db).await?.into_iter().collect();
        r.receiver_requests = receipts.len() as u64;
        for rc in &receipts {
            let half = self.slots.get(rc.slot).map_or("unknown", |s| s.half.as_str());
            *r.receiver_answers
                .entry(half.to_owned())
                .or_default()
                .entry(rc.answer.as_str().to_owned())
                .or_default() += 1;
        }

        // (a) delivered or dead-lettered.
        let with_endpoint: HashSet<Uuid> = self.slots.iter().map(|s| s.account).collect();
        let delivered: HashSet<String> = receipts
            .iter()
            .filter(|rc| rc.signature_valid && rc.answer.delivered())
            .map(|rc| rc.event_id.clone())
            .collect();
        r.coverage = checks::coverage(&events, &with_endpoint, &notifications, &delivered, &letters);
        r.redelivery = checks::redelivery(&receipts);

        // (b) nothing announced that did not commit.
        let by_id: HashMap<String, &store::StoredEvent> = events.iter().map(|e| (checks::wire(e.id), e)).collect();
        let mut moves: HashMap<Uuid, Vec<(Option<WithdrawalStatus>, WithdrawalStatus)>> = HashMap::new();
        for t in &transitions {
            moves.entry(t.withdrawal_id).or_default().push((t.from_status, t.to_status));
        }
        let logs: HashMap<Uuid, Vec<WithdrawalStatus>> =
            moves.iter().map(|(w, m)| (*w, checks::statuses_by_version(m))).collect();
        let slot_accounts: Vec<Uuid> = self.slots.iter().map(|s| s.account).collect();
        r.committed = checks::committed(&receipts, &by_id, &slot_accounts, &logs, &returned);

        // (c) the payout path does not wait for an endpoint.
        let half_of: HashMap<Uuid, Half> = self.slots.iter().map(|s| (s.account, s.half)).collect();
        let (mut dead_ms, mut live_ms) = (Vec::new(), Vec::new());
        for (created, completed, account) in payout_spans(&transitions) {
            let ms = (completed - created).num_milliseconds() as f64;
            match half_of.get(&account) {
                Some(Half::Dead) => dead_ms.push(ms),
                Some(Half::Live) => live_ms.push(ms),
                None => {}
            }
        }
        r.payout_latency = checks::compare(&dead_ms, &live_ms, SLOWER_FACTOR, SLOWER_FLOOR_MS, MIN_SAMPLES);
        if let Some((from, to)) = self.window.was {
            let length = to - from;
            let completions = |a: DateTime<Utc>, b: DateTime<Utc>| {
                let n = transitions
                    .iter()
                    .filter(|t| t.to_status == WithdrawalStatus::Completed && t.at.0 >= a && t.at.0 < b);
                n.count() as f64 / seconds(a, b).max(0.001)
            };
            r.completions_per_second = Some(WindowRates {
                before_live_down_window: completions(from - length, from),
                during_live_down_window: completions(from, to),
            });
        }

        // Violations.
        let mut violations = Vec::new();
        violations.extend(r.coverage.violations.iter().cloned());
        violations.extend(r.committed.violations.iter().cloned());
        // Too few completions on one side (a tiny run) say nothing: reported, not judged.
        if r.payout_latency.within == Some(false) {
            violations.push(format!(
                "the dead-endpoint half's median accept → completed latency {:.0} ms is over {:.0} ms ({SLOWER_FACTOR} × the \
                 live half's {:.0} ms + {SLOWER_FLOOR_MS} ms): a dead endpoint slows the payout path",
                r.payout_latency.dead_endpoint_median_ms, r.payout_latency.allowed_ms, r.payout_latency.live_endpoint_median_ms
            ));
        }
        if !drained.converged {
            violations.push(format!(
                "deliveries did not settle within {:.0} s: {} events not fanned out, {} delivery jobs live",
                drained.waited.as_secs_f64(),
                drained.left.events_not_fanned_out,
                drained.live_jobs
            ));
        }
        let faulted =
            receipts.iter().filter(|rc| matches!(rc.answer, Answer::Error | Answer::Unavailable | Answer::Hang));
        if faulted.count() == 0 || r.coverage.delivered == 0 {
            violations
                .push("the receiver faulted nothing or was delivered nothing: the slice exercised nothing".to_owned());
        }
        for rc in &receipts {
            if let Some(leak) = rc.body.as_deref().and_then(|b| super::checks::leak(b, secrets)) {
                violations.push(format!("event {} was delivered carrying {leak}", rc.event_id));
                break;
            }
        }
        r.violations = violations;
        Ok(r)
    }

    /// Stops the receiver and both proxies.
    pub(super) async fn stop(mut self) {
        self.live.refuse().await;
        self.dead.refuse().await;
        self.receiver.stop().await;
    }
}

fn seconds(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (b - a).num_milliseconds() as f64 / 1e3
}

/// Live jobs on the notifications queue (None when the database cannot say).
async fn live_delivery_jobs(db: &Db) -> Option<i64> {
    let depths = withdrawals::storage::metrics::live_jobs_by_queue(db).await.ok()?;
    Some(depths.iter().filter(|d| d.queue == Queue::Notifications.as_str()).map(|d| d.count).sum())
}

/// Each withdrawal the payout path completed (`processing` → `completed`): its creation and that
/// completion, with its account.
fn payout_spans(transitions: &[store::Transition]) -> Vec<(DateTime<Utc>, DateTime<Utc>, Uuid)> {
    let mut created: HashMap<Uuid, DateTime<Utc>> = HashMap::new();
    let mut completed: HashMap<Uuid, (DateTime<Utc>, Uuid)> = HashMap::new();
    for t in transitions {
        match (t.from_status, t.to_status) {
            (None, _) => {
                created.insert(t.withdrawal_id, t.at.0);
            }
            // The payout path itself: a worker's completion (an operator's or reconciliation's
            // decision waits on people and on the provider's faults, not on the payout path).
            (Some(WithdrawalStatus::Processing), WithdrawalStatus::Completed) if t.actor.starts_with("worker") => {
                completed.entry(t.withdrawal_id).or_insert((t.at.0, t.account_id));
            }
            _ => {}
        }
    }
    completed.into_iter().filter_map(|(w, (done, account))| Some((*created.get(&w)?, done, account))).collect()
}

/// Completions per second around the live half's down window (for information: the fault phase's
/// other faults land in either).
#[derive(Debug, Clone, Serialize)]
pub struct WindowRates {
    pub before_live_down_window: f64,
    pub during_live_down_window: f64,
}

/// The `notifications` section of the report.
#[derive(Debug, Default, Serialize)]
pub struct NotificationReport {
    /// Endpoints registered, by half.
    pub endpoints: BTreeMap<String, u64>,
    pub max_elapsed_ms: u64,
    pub live_down_window_seconds: f64,
    pub dead_window_seconds: f64,
    /// Both proxies were seen refusing a connection when taken down.
    pub refusals_verified: bool,
    /// The outbox, by type (every event of the run; every account has an endpoint).
    pub events_by_type: BTreeMap<String, u64>,
    pub notifications_by_status: BTreeMap<String, u64>,
    /// The service's delivery attempts by result.
    pub attempts_by_result: BTreeMap<String, i64>,
    pub receiver_requests: u64,
    /// The receiver's answers, by half.
    pub receiver_answers: BTreeMap<String, BTreeMap<String, u64>>,
    pub coverage: checks::Coverage,
    pub redelivery: checks::Redelivery,
    pub committed: checks::Committed,
    pub payout_latency: checks::Comparison,
    pub completions_per_second: Option<WindowRates>,
    pub drain_seconds: f64,
    pub violations: Vec<String>,
}

/// The summary's lines about notifications.
pub(super) fn describe(n: &Value) -> Vec<String> {
    if let Some(why) = n["skipped"].as_str() {
        return vec![format!("notifications: skipped ({why})")];
    }
    let u = |v: &Value| v.as_u64().unwrap_or(0);
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    let (c, d, k, l) = (&n["coverage"], &n["redelivery"], &n["committed"], &n["payout_latency"]);
    let mut lines = vec![
        format!(
            "notifications: endpoints {}; {} events {}; {} delivered, {} dead-lettered, {} missing; {} redelivered ({} \
             duplicate deliveries); notifications {}",
            n["endpoints"],
            u(&c["events"]),
            n["events_by_type"],
            u(&c["delivered"]),
            u(&c["dead_lettered"]),
            u(&c["missing"]),
            u(&d["redelivered_events"]),
            u(&d["duplicate_deliveries"]),
            n["notifications_by_status"]
        ),
        format!(
            "notifications receiver: {} requests, answers {}; live half down {:.1} s, dead half down {:.1} s (refusals \
             verified: {}); attempts {}",
            u(&n["receiver_requests"]),
            n["receiver_answers"],
            f(&n["live_down_window_seconds"]),
            f(&n["dead_window_seconds"]),
            n["refusals_verified"],
            n["attempts_by_result"]
        ),
        format!(
            "notifications committed: {} well-signed requests checked against the outbox and transition logs, {} not \
             committed, {} refused signatures; drained in {:.1} s",
            u(&k["checked"]),
            u(&k["not_committed"]),
            u(&k["refused_signatures"]),
            f(&n["drain_seconds"])
        ),
        format!(
            "notifications payout latency: dead-endpoint half median {:.0} ms over {}, live half {:.0} ms over {} \
             ({:.2}×; allowed {:.0} ms{})",
            f(&l["dead_endpoint_median_ms"]),
            u(&l["dead_endpoint_withdrawals"]),
            f(&l["live_endpoint_median_ms"]),
            u(&l["live_endpoint_withdrawals"]),
            f(&l["ratio"]),
            f(&l["allowed_ms"]),
            if l["within"].is_null() {
                format!("; not judged: fewer than {MIN_SAMPLES} on a side")
            } else {
                String::new()
            }
        ),
    ];
    if let Some(w) = n["completions_per_second"].as_object() {
        lines.push(format!(
            "notifications throughput: {:.1} completions/s while the live half's receiver was down, {:.1}/s the window \
             before",
            w.get("during_live_down_window").and_then(Value::as_f64).unwrap_or(0.0),
            w.get("before_live_down_window").and_then(Value::as_f64).unwrap_or(0.0)
        ));
    }
    lines
}
