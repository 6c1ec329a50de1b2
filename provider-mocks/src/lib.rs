//! A stateful mock of the external payout provider, for the withdrawals
//! service's tests, demos, chaos runs and benchmarks.
//!
//! It implements the provider contract (`POST /v1/transfers` with
//! idempotency keys, lookup by key, get by id), settles transfers immediately
//! or after a delay, injects faults from seeded, repeatable rules, and keeps
//! the ground truth (every executed transfer and every received request) for
//! tests to check, over HTTP under `/__admin` or in-process via [`RunningMock`].
//!
//! Module map:
//! - [`model`]: wire types, settlement settings, transfer and request records.
//! - [`faults`]: fault rules (scenario format) and the engine that applies them.
//! - `state`: the shared state behind one mutex, and its operations.
//! - `server`: accept loop and provider routes.
//! - `admin`: `/__admin` routes.
//! - this file: [`MockConfig`] (also the scenario file format), [`spawn`], [`RunningMock`].

mod admin;
pub mod faults;
pub mod model;
mod server;
mod state;

use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use faults::{FaultConfig, FaultEffect, FaultRule, RouteMatch};
pub use model::{
    CreateTransfer, Destination, RequestRecord, Route, Settlement, SettlementMode, TransferRecord, TransferStatus,
    TransferView,
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
    pub settlement: Settlement,
}

impl MockConfig {
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading scenario {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing scenario {}", path.display()))
    }
}

/// A mock serving in the background of the current tokio runtime. Dropping
/// it stops the server too; [`RunningMock::shutdown`] also waits for that.
pub struct RunningMock {
    addr: SocketAddr,
    shared: state::Shared,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

/// Binds and starts serving; returns once the socket accepts connections.
pub async fn spawn(config: MockConfig) -> anyhow::Result<RunningMock> {
    if !(0.0..=1.0).contains(&config.settlement.fail_ratio) {
        anyhow::bail!("settlement.fail_ratio must be within 0..=1");
    }
    let addr = config.addr.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    let listener = TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
    let addr = listener.local_addr()?;
    let shared = state::Shared::new(config.api_key, config.seed, config.faults, config.settlement);
    let router = server::routes().merge(admin::routes()).with_state(shared.clone());
    let stop = CancellationToken::new();
    let task = tokio::spawn(server::serve(listener, router, stop.clone()));
    Ok(RunningMock { addr, shared, stop, task: Some(task) })
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

    /// A bank return of the paid transfer under `idempotency_key` (SPEC §14.3);
    /// false if there is none.
    pub fn return_transfer(&self, idempotency_key: &str, return_code: &str) -> bool {
        self.shared.lock().return_transfer(idempotency_key, return_code)
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

    /// Clears transfers, requests and fault rules; restarts the RNG from the seed.
    pub fn reset(&self) {
        self.shared.lock().reset();
    }

    /// Stops accepting, drops open connections, and waits for the accept loop.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for RunningMock {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
