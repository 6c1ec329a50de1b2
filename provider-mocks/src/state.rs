//! The mock's mutable state and the operations on it: executing and
//! replaying transfers, lookups, returns, settlement reports, the request
//! log, the mock clock, webhook emission (every change to `paid`, `failed` or
//! `returned` goes to the [`Outbox`]), and reset. Everything sits
//! behind one `std::sync::Mutex`; callers lock, do one operation, unlock, and
//! never hold the guard across an `.await`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::faults::{FaultConfig, FaultContext, FaultEngine, FaultPlan};
use crate::model::{
    CreateTransfer, RequestRecord, ScheduledReturn, Settlement, SettlementMode, Transfer, TransferRecord,
    TransferStatus, TransferView,
};
use crate::outbox::Outbox;
use crate::report::{noon, zero_fee, ReportFault, ReportFaultConfig, ReportLine};
use crate::webhooks::{Delivery, ForgedEvent, SendRefused, WebhookFaults, WebhookSettings};

/// Handle shared by the server, the admin routes and [`crate::RunningMock`].
#[derive(Clone)]
pub(crate) struct Shared {
    pub api_key: Option<String>,
    state: Arc<Mutex<State>>,
}

impl Shared {
    pub fn new(
        api_key: Option<String>,
        seed: u64,
        faults: FaultConfig,
        report_faults: ReportFaultConfig,
        settlement: Settlement,
        outbox: Outbox,
    ) -> Self {
        let state = State {
            seed,
            rng: StdRng::seed_from_u64(seed),
            faults: FaultEngine::new(faults),
            settlement,
            transfers: Vec::new(),
            changes_ahead: BTreeSet::new(),
            by_key: HashMap::new(),
            by_id: HashMap::new(),
            requests: Vec::new(),
            epoch: 0,
            report_faults,
            clock_offset: TimeDelta::zero(),
            event_seq: 0,
            outbox,
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

/// Why a return was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReturnRefused {
    /// No transfer under the key.
    NotFound,
    /// The transfer is not `paid` (pending, failed or already returned).
    NotPaid,
    /// `at` is earlier than the transfer was paid.
    BeforePaid,
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
    /// Transfers with a settlement or a scheduled return still to come: all
    /// that [`State::settle_due`] has to look at.
    changes_ahead: BTreeSet<usize>,
    by_key: HashMap<String, usize>,
    by_id: HashMap<String, usize>,
    requests: Vec<RequestRecord>,
    /// Bumped by reset so outcomes of requests that straddle it are dropped.
    epoch: u64,
    report_faults: ReportFaultConfig,
    /// The mock clock is the real one plus this: transfer times, status
    /// events and scheduled returns follow it.
    clock_offset: TimeDelta,
    /// Numbers status events so equal times keep their recording order.
    event_seq: u64,
    outbox: Outbox,
}

impl State {
    /// The mock clock's now.
    pub fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.clock_offset
    }

    pub fn clock_offset(&self) -> TimeDelta {
        self.clock_offset
    }

    pub fn set_clock_offset(&mut self, offset: TimeDelta) {
        self.clock_offset = offset;
    }

    /// Brings transfer `i` up to date (settlement, scheduled return), and
    /// emits an event for each change.
    fn settle(&mut self, i: usize, now: Instant) {
        let wall = self.now();
        for change in self.transfers[i].settle(now, wall, &mut self.event_seq) {
            self.outbox.emit(change, wall);
        }
        if !self.transfers[i].has_change_ahead() {
            self.changes_ahead.remove(&i);
        }
    }

    /// Applies every settlement and return that is due, so their events go
    /// out on time while webhooks are on. With webhooks off it does nothing:
    /// transfers then settle on reads only, as they always did.
    pub fn settle_due(&mut self) {
        if !self.outbox.is_on() {
            return;
        }
        let now = Instant::now();
        let due: Vec<usize> = self.changes_ahead.iter().copied().collect();
        for i in due {
            self.settle(i, now);
        }
    }

    fn settle_all(&mut self) {
        let now = Instant::now();
        for i in 0..self.transfers.len() {
            self.settle(i, now);
        }
    }

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
            self.settle(i, now);
            return CreateOutcome::Replayed(self.transfers[i].view());
        }
        let wall = self.now();

        let (status, failure_code, settles_at, final_status, final_failure_code, settles_at_wall) =
            match (forced_failure, self.settlement.mode) {
                (Some(code), _) => {
                    let code = Some(code);
                    (TransferStatus::Failed, code.clone(), None, TransferStatus::Failed, code, None)
                }
                (None, SettlementMode::Immediate) => {
                    (TransferStatus::Paid, None, None, TransferStatus::Paid, None, None)
                }
                (None, SettlementMode::Async) => {
                    let ratio = self.settlement.fail_ratio;
                    let fails = ratio > 0.0 && (ratio >= 1.0 || self.rng.gen::<f64>() < ratio);
                    let (final_status, code) = if fails {
                        (TransferStatus::Failed, Some("rejected_by_bank".to_string()))
                    } else {
                        (TransferStatus::Paid, None)
                    };
                    let delay = Duration::from_millis(self.settlement.delay_ms);
                    let at = now + delay;
                    let at_wall = wall + TimeDelta::from_std(delay).unwrap_or(TimeDelta::MAX);
                    (TransferStatus::Pending, None, Some(at), final_status, code, Some(at_wall))
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
            created_at: wall,
            updated_at: wall,
        };
        let mut transfer = Transfer {
            record,
            request: request.clone(),
            settles_at,
            settles_at_wall,
            final_status,
            final_failure_code,
            events: Vec::new(),
            scheduled_return: None,
        };
        transfer.push_event(status, wall, &mut self.event_seq);
        let view = transfer.view();
        let index = self.transfers.len();
        self.by_key.insert(key.to_string(), index);
        self.by_id.insert(transfer.record.id.clone(), index);
        if transfer.has_change_ahead() {
            self.changes_ahead.insert(index);
        }
        self.transfers.push(transfer);
        self.outbox.emit(view.clone(), wall);
        CreateOutcome::Created(view)
    }

    pub fn lookup_by_key(&mut self, key: &str) -> Vec<TransferView> {
        let now = Instant::now();
        match self.by_key.get(key) {
            Some(&i) => {
                self.settle(i, now);
                vec![self.transfers[i].view()]
            }
            None => Vec::new(),
        }
    }

    pub fn get_by_id(&mut self, id: &str) -> Option<TransferView> {
        let now = Instant::now();
        let &i = self.by_id.get(id)?;
        self.settle(i, now);
        Some(self.transfers[i].view())
    }

    pub fn transfers(&mut self) -> Vec<TransferRecord> {
        self.settle_all();
        self.transfers.iter().map(|t| t.record.clone()).collect()
    }

    /// A bank return: the paid transfer under `key` becomes `returned` with
    /// `return_code`, now (`at` absent) or once the mock clock reaches `at`
    /// (an `at` already past takes effect at once, dated `at`). Until then
    /// the transfer stays `paid`; a later call replaces a scheduled return.
    pub fn return_transfer(
        &mut self,
        key: &str,
        return_code: &str,
        at: Option<DateTime<Utc>>,
    ) -> Result<(), ReturnRefused> {
        let &i = self.by_key.get(key).ok_or(ReturnRefused::NotFound)?;
        self.settle(i, Instant::now());
        let at = at.unwrap_or_else(|| self.now());
        let transfer = &mut self.transfers[i];
        if transfer.record.status != TransferStatus::Paid {
            return Err(ReturnRefused::NotPaid);
        }
        if transfer.paid_at().is_some_and(|paid| at < paid) {
            return Err(ReturnRefused::BeforePaid);
        }
        transfer.scheduled_return = Some(ScheduledReturn { at, return_code: return_code.to_string() });
        self.changes_ahead.insert(i);
        self.settle(i, Instant::now());
        Ok(())
    }

    pub fn report_faults(&self) -> ReportFaultConfig {
        self.report_faults.clone()
    }

    pub fn set_report_faults(&mut self, faults: ReportFaultConfig) {
        self.report_faults = faults;
    }

    /// The settlement report of the UTC day `date`: every status change to
    /// `paid`, `failed` or `returned` that happened that day (by the mock
    /// clock, as of now), in event order, with the report faults applied.
    pub fn settlement_report(&mut self, date: NaiveDate) -> Vec<ReportLine> {
        self.settle_all();
        let faults = &self.report_faults.rules;
        let has = |pred: &dyn Fn(&ReportFault) -> bool| faults.iter().any(pred);
        let mut lines = Vec::new();
        for transfer in &self.transfers {
            let record = &transfer.record;
            let key = record.idempotency_key.as_str();
            let amount = faults
                .iter()
                .rev()
                .find_map(|f| match f {
                    ReportFault::WrongAmount { idempotency_key, amount } if idempotency_key == key => Some(*amount),
                    _ => None,
                })
                .unwrap_or(record.amount);
            let duplicate =
                has(&|f| matches!(f, ReportFault::DuplicateLine { idempotency_key } if idempotency_key == key));
            let omit_paid = has(&|f| matches!(f, ReportFault::OmitPaid { idempotency_key } if idempotency_key == key));
            let spurious_return = record.status == TransferStatus::Paid
                && has(&|f| matches!(f, ReportFault::SpuriousReturn { idempotency_key } if idempotency_key == key));
            let line = |status: TransferStatus, at: DateTime<Utc>, seq: u64| ReportLine {
                transfer_id: record.id.clone(),
                idempotency_key: key.to_string(),
                reference: record.reference.clone(),
                amount: amount.to_string(),
                currency: record.currency.clone(),
                fee: zero_fee(&record.currency),
                status,
                at,
                seq,
            };
            for event in transfer.events.iter().filter(|e| e.at.date_naive() == date) {
                // A report states what settled: a pending transfer is not on it yet.
                let status = match event.status {
                    TransferStatus::Pending => continue,
                    TransferStatus::Paid if omit_paid => continue,
                    settled @ (TransferStatus::Paid | TransferStatus::Failed | TransferStatus::Returned) => settled,
                };
                let copies = if duplicate { 2 } else { 1 };
                lines.extend(std::iter::repeat_n(line(status, event.at, event.seq), copies));
                if status == TransferStatus::Paid && spurious_return {
                    lines.extend(std::iter::repeat_n(line(TransferStatus::Returned, event.at, event.seq), copies));
                }
            }
        }
        for fault in faults {
            match fault {
                ReportFault::UnknownTransfer {
                    transfer_id,
                    idempotency_key,
                    reference,
                    amount,
                    currency,
                    date: on,
                } if *on == date => {
                    lines.push(ReportLine {
                        transfer_id: transfer_id.clone(),
                        idempotency_key: idempotency_key.clone(),
                        reference: reference.clone().unwrap_or_else(|| transfer_id.clone()),
                        amount: amount.to_string(),
                        currency: currency.clone(),
                        fee: zero_fee(currency),
                        status: TransferStatus::Paid,
                        at: noon(date),
                        seq: u64::MAX,
                    });
                }
                ReportFault::MalformedLine { date: on, amount } if *on == date => lines.push(ReportLine {
                    transfer_id: "tr_malformed".to_string(),
                    idempotency_key: "malformed".to_string(),
                    reference: "malformed".to_string(),
                    amount: amount.clone(),
                    currency: "USD".to_string(),
                    fee: zero_fee("USD"),
                    status: TransferStatus::Paid,
                    at: noon(date),
                    seq: u64::MAX,
                }),
                _ => {}
            }
        }
        // Stable: lines of one event (duplicates, a spurious return) stay together.
        lines.sort_by_key(|l| (l.at, l.seq));
        lines
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
            self.outbox.reseed(seed);
        }
    }

    pub fn set_settlement(&mut self, settlement: Settlement) {
        self.settlement = settlement;
    }

    pub fn outbox(&mut self) -> &mut Outbox {
        &mut self.outbox
    }

    pub fn webhooks(&self) -> WebhookSettings {
        self.outbox.settings().clone()
    }

    /// `settings` must be valid ([`WebhookSettings::validate`]).
    pub fn set_webhooks(&mut self, settings: WebhookSettings) {
        self.outbox.set_settings(settings);
    }

    /// `faults` must be valid ([`WebhookFaults::validate`]).
    pub fn set_webhook_faults(&mut self, faults: WebhookFaults) {
        self.outbox.set_faults(faults);
    }

    pub fn webhook_deliveries(&self) -> Vec<Delivery> {
        self.outbox.deliveries()
    }

    /// Sends `forged` about the transfer as it stands now (with the
    /// overrides); the event's id.
    pub fn forge(&mut self, forged: &ForgedEvent) -> Result<String, SendRefused> {
        if !self.outbox.is_on() {
            return Err(SendRefused::WebhooksOff);
        }
        let &i = self.by_id.get(&forged.transfer_id).ok_or(SendRefused::UnknownTransfer)?;
        self.settle(i, Instant::now());
        let mut data = self.transfers[i].view();
        data.status = forged.status.unwrap_or(forged.kind.status());
        data.amount = forged.amount.unwrap_or(data.amount);
        data.currency = forged.currency.clone().unwrap_or(data.currency);
        data.failure_code =
            forged.failure_code.clone().or(data.failure_code).filter(|_| data.status == TransferStatus::Failed);
        data.return_code =
            forged.return_code.clone().or(data.return_code).filter(|_| data.status == TransferStatus::Returned);
        let now = self.now();
        self.outbox.forge(forged.kind, data, now)
    }

    pub fn reset(&mut self) {
        self.transfers.clear();
        self.changes_ahead.clear();
        self.by_key.clear();
        self.by_id.clear();
        self.requests.clear();
        self.faults = FaultEngine::default();
        self.report_faults = ReportFaultConfig::default();
        self.clock_offset = TimeDelta::zero();
        self.rng = StdRng::seed_from_u64(self.seed);
        self.outbox.reset(self.seed);
        self.epoch += 1;
    }
}
