//! The mock's mutable state and the operations on it: executing and
//! replaying transfers, lookups, the request log, and reset. Everything sits
//! behind one `std::sync::Mutex`; callers lock, do one operation, unlock, and
//! never hold the guard across an `.await`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::Utc;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::faults::{FaultConfig, FaultContext, FaultEngine, FaultPlan};
use crate::model::{
    CreateTransfer, RequestRecord, Settlement, SettlementMode, Transfer, TransferRecord, TransferStatus, TransferView,
};

/// Handle shared by the server, the admin routes and [`crate::RunningMock`].
#[derive(Clone)]
pub(crate) struct Shared {
    pub api_key: Option<String>,
    state: Arc<Mutex<State>>,
}

impl Shared {
    pub fn new(api_key: Option<String>, seed: u64, faults: FaultConfig, settlement: Settlement) -> Self {
        let state = State {
            seed,
            rng: StdRng::seed_from_u64(seed),
            faults: FaultEngine::new(faults),
            settlement,
            transfers: Vec::new(),
            by_key: HashMap::new(),
            by_id: HashMap::new(),
            requests: Vec::new(),
            epoch: 0,
        };
        Shared { api_key, state: Arc::new(Mutex::new(state)) }
    }

    /// A panic in one handler must not wedge every later request, so a
    /// poisoned lock is simply taken over.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Where a request sits in the log, so its outcome can be filled in later.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestSlot {
    index: usize,
    epoch: u64,
}

pub(crate) enum CreateOutcome {
    Created(TransferView),
    Replayed(TransferView),
    Conflict,
}

pub(crate) struct State {
    seed: u64,
    rng: StdRng,
    faults: FaultEngine,
    settlement: Settlement,
    transfers: Vec<Transfer>,
    by_key: HashMap<String, usize>,
    by_id: HashMap<String, usize>,
    requests: Vec<RequestRecord>,
    /// Bumped by reset so outcomes of requests that straddle it are dropped.
    epoch: u64,
}

impl State {
    pub fn record_request(&mut self, record: RequestRecord) -> RequestSlot {
        self.requests.push(record);
        RequestSlot { index: self.requests.len() - 1, epoch: self.epoch }
    }

    pub fn set_outcome(&mut self, slot: RequestSlot, outcome: impl Into<String>) {
        if slot.epoch == self.epoch {
            if let Some(r) = self.requests.get_mut(slot.index) {
                r.outcome = outcome.into();
            }
        }
    }

    pub fn plan_faults(&mut self, ctx: FaultContext<'_>) -> FaultPlan {
        self.faults.plan(&mut self.rng, ctx)
    }

    /// Executes a new key, replays a known key with the same body, or
    /// reports a conflict. `forced_failure` comes from a `settle_failed` fault;
    /// `executed_amount`, from a `wrong_amount` fault, is what the transfer
    /// really pays instead of the requested amount.
    pub fn create(
        &mut self,
        key: &str,
        request: &CreateTransfer,
        forced_failure: Option<String>,
        executed_amount: Option<rust_decimal::Decimal>,
    ) -> CreateOutcome {
        let now = Instant::now();
        if let Some(&i) = self.by_key.get(key) {
            let transfer = &mut self.transfers[i];
            // Decimal equality is by value, so "10.5" replays "10.50".
            if &transfer.request != request {
                return CreateOutcome::Conflict;
            }
            transfer.settle(now);
            return CreateOutcome::Replayed(transfer.view());
        }

        let (status, failure_code, settles_at, final_status, final_failure_code) =
            match (forced_failure, self.settlement.mode) {
                (Some(code), _) => {
                    let code = Some(code);
                    (TransferStatus::Failed, code.clone(), None, TransferStatus::Failed, code)
                }
                (None, SettlementMode::Immediate) => (TransferStatus::Paid, None, None, TransferStatus::Paid, None),
                (None, SettlementMode::Async) => {
                    let ratio = self.settlement.fail_ratio;
                    let fails = ratio > 0.0 && (ratio >= 1.0 || self.rng.gen::<f64>() < ratio);
                    let (final_status, code) = if fails {
                        (TransferStatus::Failed, Some("rejected_by_bank".to_string()))
                    } else {
                        (TransferStatus::Paid, None)
                    };
                    let at = now + Duration::from_millis(self.settlement.delay_ms);
                    (TransferStatus::Pending, None, Some(at), final_status, code)
                }
            };

        let record = TransferRecord {
            id: format!("tr_{}", uuid::Uuid::new_v4()),
            idempotency_key: key.to_string(),
            reference: request.reference.clone(),
            amount: executed_amount.unwrap_or(request.amount),
            currency: request.currency.clone(),
            destination: request.destination.clone(),
            status,
            failure_code,
            return_code: None,
            executions: 1,
            created_at: Utc::now(),
            updated_at: Utc::now(),
        };
        let transfer = Transfer { record, request: request.clone(), settles_at, final_status, final_failure_code };
        let view = transfer.view();
        let index = self.transfers.len();
        self.by_key.insert(key.to_string(), index);
        self.by_id.insert(transfer.record.id.clone(), index);
        self.transfers.push(transfer);
        CreateOutcome::Created(view)
    }

    pub fn lookup_by_key(&mut self, key: &str) -> Vec<TransferView> {
        let now = Instant::now();
        match self.by_key.get(key) {
            Some(&i) => {
                self.transfers[i].settle(now);
                vec![self.transfers[i].view()]
            }
            None => Vec::new(),
        }
    }

    pub fn get_by_id(&mut self, id: &str) -> Option<TransferView> {
        let now = Instant::now();
        let &i = self.by_id.get(id)?;
        self.transfers[i].settle(now);
        Some(self.transfers[i].view())
    }

    pub fn transfers(&mut self) -> Vec<TransferRecord> {
        let now = Instant::now();
        self.transfers
            .iter_mut()
            .map(|t| {
                t.settle(now);
                t.record.clone()
            })
            .collect()
    }

    /// A bank return: the paid transfer under `key` becomes `returned` with
    /// `return_code`. False if there is no such paid transfer.
    pub fn return_transfer(&mut self, key: &str, return_code: &str) -> bool {
        let Some(&i) = self.by_key.get(key) else { return false };
        let transfer = &mut self.transfers[i];
        transfer.settle(Instant::now());
        if transfer.record.status != TransferStatus::Paid {
            return false;
        }
        transfer.record.status = TransferStatus::Returned;
        transfer.record.return_code = Some(return_code.to_string());
        transfer.record.updated_at = Utc::now();
        true
    }

    pub fn requests(&self) -> Vec<RequestRecord> {
        self.requests.clone()
    }

    pub fn fault_config(&self) -> FaultConfig {
        self.faults.config().clone()
    }

    /// Replaces the rules, with fresh `times` budgets; a seed also restarts
    /// the RNG and becomes the one `reset` returns to.
    pub fn set_faults(&mut self, faults: FaultConfig, seed: Option<u64>) {
        self.faults = FaultEngine::new(faults);
        if let Some(seed) = seed {
            self.seed = seed;
            self.rng = StdRng::seed_from_u64(seed);
        }
    }

    pub fn set_settlement(&mut self, settlement: Settlement) {
        self.settlement = settlement;
    }

    pub fn reset(&mut self) {
        self.transfers.clear();
        self.by_key.clear();
        self.by_id.clear();
        self.requests.clear();
        self.faults = FaultEngine::default();
        self.rng = StdRng::seed_from_u64(self.seed);
        self.epoch += 1;
    }
}
