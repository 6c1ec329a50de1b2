//! The chaos run with two providers (`--providers 2`, SPEC §16): two provider mocks, each its
//! own process with its own fault mix, named in a `PROVIDERS` file for the same currency
//! ([`FIRST`] at priority 1 with a breaker that opens within the run, [`SECOND`] at priority 2),
//! and an outage of the first ([`Outage`]) in three phases — connections refused, then every
//! request answered 503, then every request held past the service's timeout after the transfer
//! is executed — after which it comes back.
//!
//! Each provider has its own webhook route and secret (`/webhooks/provider/{name}`, the file's
//! `webhook_secrets_env`) and its own settlement reports, imported by the run (the file turns the
//! daily import off for each).
//!
//! The service sees the first provider through a [`Proxy`], which is how its port refuses
//! connections while the mock keeps its record. What the run checks afterwards (no key executed at
//! two providers, …) is [`super::two_providers`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use provider_mocks::{FaultEffect, FaultRule, RequestRecord, RouteMatch};
use serde::Serialize;
use serde_json::json;

use super::control::{invalid_accounts, set_faults, sometimes};
use super::procs::{free_port, provider_mock, Proc};
use super::proxy::Proxy;

/// The first provider for USD: the one that goes down.
pub const FIRST: &str = "acme";
/// The second: where a withdrawal may move while the first is down.
pub const SECOND: &str = "bolt";
pub(super) const FIRST_KEY: &str = "chaos-acme-secret-key";
pub(super) const SECOND_KEY: &str = "chaos-bolt-secret-key";
const FIRST_KEY_ENV: &str = "CHAOS_ACME_API_KEY";
const SECOND_KEY_ENV: &str = "CHAOS_BOLT_API_KEY";
const FIRST_WEBHOOK_ENV: &str = "CHAOS_ACME_WEBHOOK_SECRETS";
const SECOND_WEBHOOK_ENV: &str = "CHAOS_BOLT_WEBHOOK_SECRETS";

/// How long the first provider holds a request in its last phase: past the service's
/// `PROVIDER_TIMEOUT_MS` (1.5 s in the chaos run), so the service never hears the answer.
const HANG_MS: u64 = 2_500;

/// Writes the providers file into `dir`; the service reaches the first provider at `first_url`
/// (its proxy) and the second at `second_url`.
///
/// The first provider's breaker judges over 10 s from 5 calls at 50 % failures and stays open 2 s,
/// so it opens within the first phase of a 20 s run and probes the first provider again during
/// the outage. The second keeps the single-provider breaker settings. Each names the variable its
/// webhook secret is in, and neither has a daily settlement import: the run imports every day
/// itself, at its end.
pub(super) fn write_file(dir: &Path, first_url: &str, second_url: &str) -> anyhow::Result<PathBuf> {
    let settlement = json!({"daily_import": false});
    let file = json!({"providers": [
        {"name": FIRST, "url": first_url, "currencies": ["USD"], "priority": 1, "api_key_env": FIRST_KEY_ENV,
         "breaker": {"failure_rate": 0.5, "window_s": 10, "min_calls": 5, "open_s": 2},
         "webhook_secrets_env": FIRST_WEBHOOK_ENV, "settlement": settlement},
        {"name": SECOND, "url": second_url, "currencies": ["USD"], "priority": 2, "api_key_env": SECOND_KEY_ENV,
         "webhook_secrets_env": SECOND_WEBHOOK_ENV, "settlement": settlement},
    ]});
    let path = dir.join("providers.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&file)?)?;
    Ok(path)
}

/// The service's environment for the two providers, in place of `PROVIDER_URL`,
/// `PROVIDER_API_KEY` and `PROVIDER_WEBHOOK_SECRET`; `webhook_secrets`: the first's and the
/// second's.
pub(super) fn service_env(file: &Path, webhook_secrets: [&str; 2]) -> Vec<(String, String)> {
    vec![
        ("PROVIDERS".to_owned(), file.display().to_string()),
        (FIRST_KEY_ENV.to_owned(), FIRST_KEY.to_owned()),
        (SECOND_KEY_ENV.to_owned(), SECOND_KEY.to_owned()),
        (FIRST_WEBHOOK_ENV.to_owned(), webhook_secrets[0].to_owned()),
        (SECOND_WEBHOOK_ENV.to_owned(), webhook_secrets[1].to_owned()),
    ]
}

/// The second provider's mock: its own process, seed and key, sending its events to
/// `webhook_url` under `webhook_secret`.
pub(super) struct Second {
    pub proc: Proc,
    /// Its own address, given to the service as is.
    pub url: String,
    pub rules: Vec<FaultRule>,
}

pub(super) fn start_second(dir: &Path, seed: u64, webhook_url: &str, webhook_secret: &str) -> anyhow::Result<Second> {
    let port = free_port()?;
    let name = format!("provider-mock-{SECOND}");
    let mut proc = provider_mock(&name, dir, port, seed.wrapping_add(1), SECOND_KEY, webhook_url, webhook_secret);
    proc.start()?;
    Ok(Second { proc, url: format!("http://127.0.0.1:{port}"), rules: second_fault_mix() })
}

/// The second provider's fault mix: milder than the first's ([`super::control::fault_mix`]), and
/// with the same invalid-account slice, so a destination is invalid whichever provider is asked.
pub(super) fn second_fault_mix() -> Vec<FaultRule> {
    let p = sometimes;
    vec![
        invalid_accounts(),
        p(0.05, RouteMatch::Any, FaultEffect::Latency { ms: 200 }),
        p(0.03, RouteMatch::Create, FaultEffect::Status { code: 503, retry_after_secs: None }),
        p(0.02, RouteMatch::Create, FaultEffect::TimeoutBeforeCommit { ms: 2_500 }),
        p(0.02, RouteMatch::Create, FaultEffect::TimeoutAfterCommit { ms: 2_500 }),
        p(0.02, RouteMatch::Lookup, FaultEffect::Status { code: 503, retry_after_secs: None }),
    ]
}

/// One phase of the first provider's outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Its port refuses connections; open connections are cut.
    ConnectionRefused,
    /// Every request (submit, lookup, get) is answered 503.
    Unavailable,
    /// Every submit is executed and then held past the timeout; lookups and gets are held too.
    TimeoutAfterCommit,
}

const PHASES: [Phase; 3] = [Phase::ConnectionRefused, Phase::Unavailable, Phase::TimeoutAfterCommit];

/// A phase as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseRecord {
    pub phase: Phase,
    /// Seconds into the fault phase it began, and how long it lasted.
    pub from_seconds: f64,
    pub seconds: f64,
    /// The requests that reached the provider's mock meanwhile, by its answer: none while it
    /// refused connections, only 503s, only held requests.
    pub requests_reaching_it: BTreeMap<String, u64>,
    #[serde(skip)]
    began: DateTime<Utc>,
    #[serde(skip)]
    ended: DateTime<Utc>,
}

/// What the outage was, for the report.
#[derive(Debug, Clone, Serialize)]
pub struct OutageReport {
    pub provider: &'static str,
    pub phases: Vec<PhaseRecord>,
    /// A connect to the first provider's port was seen refused during the first phase.
    pub refusal_verified: bool,
    /// Connections open when the port closed, cut.
    pub connections_cut: u64,
    /// Connections the proxy carried to the first provider over the whole run.
    pub connections_proxied: u64,
}

/// The first provider's outage: from 30 % of the fault phase, three phases of 15 % each, then back.
/// Driven by [`Outage::tick`] from the run's loop.
pub(super) struct Outage {
    proxy: Proxy,
    mock_url: String,
    /// The first provider's own fault mix, in force before and after the outage.
    rules: Vec<FaultRule>,
    seed: u64,
    phase_start: Instant,
    from: Instant,
    each: Duration,
    /// The phase in force and when it began; `None` while the provider is up.
    current: Option<(Phase, Instant, DateTime<Utc>)>,
    over: bool,
    phases: Vec<PhaseRecord>,
    refusal_verified: bool,
    /// Wall-clock bounds of the outage (the attempts' `started_at` are compared with them).
    began_at: Option<DateTime<Utc>>,
    ended_at: Option<DateTime<Utc>>,
}

impl Outage {
    /// `mock_url`: the first provider's mock itself (its admin routes), not the proxy.
    pub(super) fn new(
        proxy: Proxy,
        mock_url: &str,
        rules: Vec<FaultRule>,
        seed: u64,
        phase_start: Instant,
        duration: Duration,
    ) -> Self {
        Outage {
            proxy,
            mock_url: mock_url.to_owned(),
            rules,
            seed,
            phase_start,
            from: phase_start + duration * 3 / 10,
            each: duration * 3 / 20,
            current: None,
            over: false,
            phases: Vec::new(),
            refusal_verified: false,
            began_at: None,
            ended_at: None,
        }
    }

    /// Moves to the phase due at `now`.
    pub(super) async fn tick(&mut self, http: &reqwest::Client, now: Instant) -> anyhow::Result<()> {
        if self.over || now < self.from {
            return Ok(());
        }
        let index = ((now - self.from).as_secs_f64() / self.each.as_secs_f64().max(0.001)) as usize;
        match PHASES.get(index) {
            Some(&due) if self.current.map(|(p, ..)| p) != Some(due) => self.enter(http, due, now).await,
            Some(_) => Ok(()),
            None => self.end(http).await,
        }
    }

    async fn enter(&mut self, http: &reqwest::Client, phase: Phase, now: Instant) -> anyhow::Result<()> {
        self.close_phase(now);
        eprintln!("chaos: {FIRST} down: {phase:?}");
        self.began_at.get_or_insert_with(Utc::now);
        match phase {
            Phase::ConnectionRefused => self.refusal_verified |= self.proxy.refuse().await,
            Phase::Unavailable => {
                // The rules first: no request may find the provider healthy in between.
                let all = FaultRule::new(RouteMatch::Any, FaultEffect::Status { code: 503, retry_after_secs: None });
                set_faults(http, &self.mock_url, &[all], self.seed).await?;
                self.proxy.accept().await?;
            }
            Phase::TimeoutAfterCommit => {
                let hold = |route, effect| FaultRule::new(route, effect);
                let rules = [
                    hold(RouteMatch::Create, FaultEffect::TimeoutAfterCommit { ms: HANG_MS }),
                    hold(RouteMatch::Lookup, FaultEffect::TimeoutBeforeCommit { ms: HANG_MS }),
                    hold(RouteMatch::Get, FaultEffect::TimeoutBeforeCommit { ms: HANG_MS }),
                ];
                set_faults(http, &self.mock_url, &rules, self.seed).await?;
                self.proxy.accept().await?;
            }
        }
        self.current = Some((phase, now, Utc::now()));
        Ok(())
    }

    /// The first provider is back, with its own fault mix, whatever phase was in force.
    pub(super) async fn end(&mut self, http: &reqwest::Client) -> anyhow::Result<()> {
        if self.over {
            return Ok(());
        }
        self.over = true;
        if self.current.is_some() {
            self.close_phase(Instant::now());
            set_faults(http, &self.mock_url, &self.rules, self.seed).await?;
            self.proxy.accept().await?;
            self.ended_at = Some(Utc::now());
            eprintln!("chaos: {FIRST} back");
        }
        Ok(())
    }

    fn close_phase(&mut self, now: Instant) {
        if let Some((phase, since, began)) = self.current.take() {
            self.phases.push(PhaseRecord {
                phase,
                from_seconds: (since - self.phase_start).as_secs_f64(),
                seconds: (now - since).as_secs_f64(),
                requests_reaching_it: BTreeMap::new(),
                began,
                ended: Utc::now(),
            });
        }
    }

    /// When the outage began and ended, by the wall clock (`None` if it never began).
    pub(super) fn window(&self) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        Some((self.began_at?, self.ended_at.unwrap_or_else(Utc::now)))
    }

    /// The outage as it happened; `requests`: what reached the first provider's mock (its log),
    /// each counted in the phase it arrived in, by the answer it got.
    pub(super) fn report(&self, requests: &[RequestRecord]) -> OutageReport {
        let mut phases = self.phases.clone();
        for p in &mut phases {
            for r in requests.iter().filter(|r| r.at >= p.began && r.at < p.ended) {
                *p.requests_reaching_it.entry(super::answer_kind(&r.outcome).to_owned()).or_default() += 1;
            }
        }
        OutageReport {
            provider: FIRST,
            phases,
            refusal_verified: self.refusal_verified,
            connections_cut: self.proxy.connections_cut(),
            connections_proxied: self.proxy.connections_accepted(),
        }
    }
}
