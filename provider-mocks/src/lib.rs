//! A stateful mock of the external payout provider, for the withdrawals
//! service's tests, demos, chaos runs and benchmarks.
//!
//! It implements the provider contract (`POST /v1/transfers` with
//! idempotency keys, lookup by key, get by id, daily settlement reports),
//! settles transfers immediately or after a delay, returns paid transfers now
//! or at a given time, sends signed webhook events of every settlement and
//! return (SPEC §15) with injectable delivery faults, injects faults from
//! seeded, repeatable rules (and discrepancies into the reports), and keeps
//! the ground truth (every executed transfer, every received request, every
//! webhook delivery attempt) for tests to check, over HTTP under `/__admin` or
//! in-process via [`RunningMock`].
//!
//! Module map:
//! - [`model`]: wire types, settlement settings, transfer and request records.
//! - [`faults`]: fault rules (scenario format) and the engine that applies them.
//! - [`report`]: settlement report lines, CSV writing, report discrepancy faults.
//! - [`webhooks`]: webhook settings (receiver URL, secrets, retry policy, timeout), delivery
//!   faults (`duplicate`, `drop`, `bad_signature`, `stale_timestamp`, `disagree`, `reorder`,
//!   `delay_ms`), forged events, and delivery records.
//! - `outbox`: emits an event, under the state lock, at each change to `paid`, `failed` or
//!   `returned`: draws its faults, serialises it once, queues, holds or drops it; the delivery log.
//! - `sender`: the background task per mock that settles due transfers while webhooks are on and
//!   delivers queued events (sign per attempt, POST, retry with backoff, record).
//! - `state`: the shared state behind one mutex, and its operations.
//! - `server`: accept loop (timeouts and connection cap from `http_guard`) and provider routes
//!   (transfers and the settlement report).
//! - `admin`: `/__admin` routes.
//! - this file: [`MockConfig`] (also the scenario file format), [`spawn`], [`RunningMock`].

mod admin;
pub mod faults;
pub mod model;
mod outbox;
pub mod report;
mod sender;
mod server;
mod state;
pub mod webhooks;

use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context;
use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use faults::{FaultConfig, FaultEffect, FaultRule, RouteMatch};
pub use model::{
    CreateTransfer, Destination, RequestRecord, Route, Settlement, SettlementMode, TransferRecord, TransferStatus,
    TransferView,
};
pub use provider_contract::webhook::EventType;
pub use report::{ReportFault, ReportFaultConfig};
pub use webhooks::{
    Delivery, DeliveryOutcome, ForgedEvent, InvalidWebhookSettings, RetryPolicy, SendRefused, WebhookFault,
    WebhookFaults, WebhookSettings,
};

/// How to start a mock. Also the scenario file format (JSON), where every
/// field is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MockConfig {
    /// Where to listen; `127.0.0.1:0` (any free port) when absent.
    pub addr: Option<SocketAddr>,
    /// When set, provider routes require `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Seeds every random decision (fault probabilities, async failures).
    pub seed: u64,
    pub faults: FaultConfig,
    /// Discrepancies the settlement reports show (never the transfers API).
    pub report_faults: ReportFaultConfig,
    pub settlement: Settlement,
    /// Header-read and idle timeouts and the connection cap of the listener.
    pub listener: ListenerSettings,
    /// Signed webhook events: off (no URL) by default.
    pub webhooks: WebhookSettings,
}

/// What the mock's listener enforces (see the `http_guard` crate): a request
/// head must arrive within `header_timeout_ms` (of the connection being
/// accepted, or of the first byte of a later request), a keep-alive
/// connection may wait `idle_timeout_ms` for its next request, and at most
/// `max_connections` are open (more wait to be accepted). There is no request
/// timeout: timeout faults hold requests on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListenerSettings {
    pub header_timeout_ms: u64,
    pub idle_timeout_ms: u64,
    pub max_connections: usize,
}

impl Default for ListenerSettings {
    fn default() -> Self {
        let limits = http_guard::Limits::default();
        ListenerSettings {
            header_timeout_ms: limits.header_timeout.as_millis() as u64,
            idle_timeout_ms: limits.idle_timeout.as_millis() as u64,
            max_connections: limits.max_connections,
        }
    }
}

impl ListenerSettings {
    fn limits(&self) -> http_guard::Limits {
        http_guard::Limits {
            header_timeout: std::time::Duration::from_millis(self.header_timeout_ms.max(1)),
            idle_timeout: std::time::Duration::from_millis(self.idle_timeout_ms.max(1)),
            max_connections: self.max_connections.max(1),
        }
    }
}

impl MockConfig {
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading scenario {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing scenario {}", path.display()))
    }
}

/// A mock serving in the background of the current tokio runtime, with its
/// webhook sender. Dropping it stops both too; [`RunningMock::shutdown`] also
/// waits for that.
pub struct RunningMock {
    addr: SocketAddr,
    shared: state::Shared,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
    /// The webhook sender (and settlement driver).
    sender: Option<JoinHandle<()>>,
}

/// Binds and starts serving; returns once the socket accepts connections.
pub async fn spawn(config: MockConfig) -> anyhow::Result<RunningMock> {
    if !(0.0..=1.0).contains(&config.settlement.fail_ratio) {
        anyhow::bail!("settlement.fail_ratio must be within 0..=1");
    }
    config.webhooks.validate().context("webhooks")?;
    let addr = config.addr.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    let listener = TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
    let addr = listener.local_addr()?;
    let listener = http_guard::GuardedListener::new(listener, config.listener.limits());
    let (queue, queued) = tokio::sync::mpsc::unbounded_channel();
    let outbox = outbox::Outbox::new(config.webhooks, config.seed, queue);
    let shared =
        state::Shared::new(config.api_key, config.seed, config.faults, config.report_faults, config.settlement, outbox);
    let router = server::routes().merge(admin::routes()).with_state(shared.clone());
    let stop = CancellationToken::new();
    let task = tokio::spawn(server::serve(listener, router, stop.clone()));
    let sender = tokio::spawn(sender::run(shared.clone(), queued, stop.clone()));
    Ok(RunningMock { addr, shared, stop, task: Some(task), sender: Some(sender) })
}

impl RunningMock {
    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every executed transfer, settled as of now, in creation order.
    pub fn transfers(&self) -> Vec<TransferRecord> {
        self.shared.lock().transfers()
    }

    /// A bank return, now, of the paid transfer under `idempotency_key`
    /// (SPEC §14.3); false if there is none.
    pub fn return_transfer(&self, idempotency_key: &str, return_code: &str) -> bool {
        self.shared.lock().return_transfer(idempotency_key, return_code, None).is_ok()
    }

    /// Like [`RunningMock::return_transfer`], but the return takes effect (in
    /// lookups and reports) once the mock clock reaches `at`; false if there
    /// is no paid transfer under the key or `at` is before it was paid.
    pub fn return_transfer_at(&self, idempotency_key: &str, return_code: &str, at: DateTime<Utc>) -> bool {
        self.shared.lock().return_transfer(idempotency_key, return_code, Some(at)).is_ok()
    }

    /// The settlement report CSV of the UTC day `date`, as
    /// `GET /v1/reports/settlements?date=` serves it.
    pub fn settlement_report(&self, date: NaiveDate) -> String {
        let lines = self.shared.lock().settlement_report(date);
        report::to_csv(&lines).expect("writing CSV to memory")
    }

    pub fn report_faults(&self) -> ReportFaultConfig {
        self.shared.lock().report_faults()
    }

    /// Replaces the report discrepancy faults.
    pub fn set_report_faults(&self, faults: ReportFaultConfig) {
        self.shared.lock().set_report_faults(faults);
    }

    /// The mock clock's now (the real clock plus the offset).
    pub fn now(&self) -> DateTime<Utc> {
        self.shared.lock().now()
    }

    /// Moves the mock clock to the real clock plus `offset` (e.g. a day, to
    /// return a transfer "tomorrow"); transfer times, status events and
    /// scheduled returns follow it. Settlement delays stay real time.
    pub fn set_clock_offset(&self, offset: TimeDelta) {
        self.shared.lock().set_clock_offset(offset);
    }

    /// Every request received on the provider routes, in arrival order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.lock().requests()
    }

    pub fn faults(&self) -> FaultConfig {
        self.shared.lock().fault_config()
    }

    /// Replaces the fault rules (with fresh `times` budgets); the RNG goes on.
    pub fn set_faults(&self, faults: FaultConfig) {
        self.shared.lock().set_faults(faults, None);
    }

    /// Applies to transfers created from now on.
    pub fn set_settlement(&self, settlement: Settlement) {
        self.shared.lock().set_settlement(settlement);
    }

    /// The webhook settings in force (with the secrets).
    pub fn webhooks(&self) -> WebhookSettings {
        self.shared.lock().webhooks()
    }

    /// Replaces the webhook settings, faults included, for events emitted
    /// from now on (events already on their way keep theirs).
    pub fn set_webhooks(&self, settings: WebhookSettings) -> Result<(), InvalidWebhookSettings> {
        settings.validate()?;
        self.shared.lock().set_webhooks(settings);
        Ok(())
    }

    /// Replaces only the webhook delivery faults; the RNG goes on.
    pub fn set_webhook_faults(&self, faults: WebhookFaults) -> Result<(), InvalidWebhookSettings> {
        faults.validate()?;
        self.shared.lock().set_webhook_faults(faults);
        Ok(())
    }

    /// Sends a forged but well-signed event (see [`ForgedEvent`]); its id.
    pub fn send_event(&self, event: &ForgedEvent) -> Result<String, SendRefused> {
        self.shared.lock().forge(event)
    }

    /// Every webhook delivery attempt (and dropped event), in the order they ended.
    pub fn webhook_deliveries(&self) -> Vec<Delivery> {
        self.shared.lock().webhook_deliveries()
    }

    /// Clears transfers, requests, fault rules, report faults, webhook faults,
    /// held events and webhook deliveries (stopping those in flight) and the
    /// clock offset; restarts the RNG from the seed. The webhook receiver,
    /// secrets and retry policy stay.
    pub fn reset(&self) {
        self.shared.lock().reset();
    }

    /// Stops accepting, drops open connections and webhook deliveries, and
    /// waits for the accept loop and the sender.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        for task in [self.task.take(), self.sender.take()].into_iter().flatten() {
            let _ = task.await;
        }
    }
}

impl Drop for RunningMock {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
