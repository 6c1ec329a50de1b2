//! Emitting webhook events. The state calls [`Outbox::emit`] at every change of a transfer to
//! `paid`, `failed` or `returned`, under its lock; the outbox draws the event's faults, builds
//! and serialises the event once (its bytes never change after), and queues it for the `sender`
//! — or holds it (`reorder`), or records it dropped. It also keeps the delivery log. It never
//! does I/O and never waits: queueing is a send on an unbounded channel.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use chrono::{DateTime, SecondsFormat, Utc};
use provider_contract::webhook::{Event, EventType};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rust_decimal::Decimal;
use tokio::sync::mpsc;

use crate::model::{TransferStatus, TransferView};
use crate::webhooks::{
    Delivery, DeliveryOutcome, RetryPolicy, SendRefused, WebhookFault, WebhookFaults, WebhookSettings,
};

/// Mixed into the mock's seed so webhook faults draw from their own stream.
const STREAM: u64 = 0x5745_4248_4f4f_4b53; // "WEBHOOKS"

/// One event on its way: the bytes to send and everything needed to send them, fixed when the
/// event was emitted (later settings changes do not touch it).
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub event_id: String,
    /// The type sent.
    pub kind: EventType,
    pub transfer_id: String,
    pub body: Bytes,
    pub url: String,
    pub secrets: Arc<[String]>,
    pub retry: RetryPolicy,
    pub timeout: Duration,
    pub delay: Duration,
    pub faults: Vec<WebhookFault>,
    /// A held `paid` event that goes out once this (`returned`) one has been delivered.
    pub then: Option<Box<Outgoing>>,
    /// The outbox epoch it belongs to; a reset ends it.
    pub epoch: u64,
}

impl Outgoing {
    pub fn copies(&self) -> u32 {
        if self.faults.contains(&WebhookFault::Duplicate) {
            2
        } else {
            1
        }
    }

    pub fn delivery(
        &self,
        copy: u32,
        attempt: u32,
        outcome: DeliveryOutcome,
        status: Option<u16>,
        error: Option<String>,
    ) -> Delivery {
        Delivery {
            event_id: self.event_id.clone(),
            event_type: self.kind,
            transfer_id: self.transfer_id.clone(),
            copy,
            attempt,
            faults: self.faults.clone(),
            outcome,
            status,
            error,
            at: Utc::now(),
        }
    }
}

pub(crate) struct Outbox {
    settings: WebhookSettings,
    rng: StdRng,
    queue: mpsc::UnboundedSender<Outgoing>,
    /// `paid` events held by `reorder`, by transfer id, until the transfer's `returned` event.
    held: HashMap<String, Outgoing>,
    deliveries: Vec<Delivery>,
    /// Bumped by reset: deliveries of an older epoch stop and are not recorded.
    epoch: u64,
}

impl Outbox {
    /// `settings` must be valid ([`WebhookSettings::validate`]).
    pub fn new(settings: WebhookSettings, seed: u64, queue: mpsc::UnboundedSender<Outgoing>) -> Self {
        Outbox {
            settings,
            rng: StdRng::seed_from_u64(seed ^ STREAM),
            queue,
            held: HashMap::new(),
            deliveries: Vec::new(),
            epoch: 0,
        }
    }

    pub fn is_on(&self) -> bool {
        self.settings.url.is_some()
    }

    pub fn settings(&self) -> &WebhookSettings {
        &self.settings
    }

    /// Applies to events emitted from now on.
    pub fn set_settings(&mut self, settings: WebhookSettings) {
        self.settings = settings;
    }

    pub fn set_faults(&mut self, faults: WebhookFaults) {
        self.settings.faults = faults;
    }

    pub fn reseed(&mut self, seed: u64) {
        self.rng = StdRng::seed_from_u64(seed ^ STREAM);
    }

    /// Forgets held events, deliveries (in flight ones stop) and faults; keeps the receiver.
    pub fn reset(&mut self, seed: u64) {
        self.reseed(seed);
        self.settings.faults = WebhookFaults::default();
        self.held.clear();
        self.deliveries.clear();
        self.epoch += 1;
    }

    pub fn is_current(&self, epoch: u64) -> bool {
        epoch == self.epoch
    }

    pub fn record(&mut self, epoch: u64, delivery: Delivery) {
        if self.is_current(epoch) {
            self.deliveries.push(delivery);
        }
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.deliveries.clone()
    }

    /// The event announcing that the transfer became `view.status` (none for `pending`, none
    /// while no URL is set), at mock clock time `now`.
    pub fn emit(&mut self, view: TransferView, now: DateTime<Utc>) {
        let Some(kind) = EventType::announcing(view.status) else { return };
        if !self.is_on() {
            return;
        }
        let faults = self.draw(kind);
        let (sent, data) = if faults.contains(&WebhookFault::Disagree) { disagree(kind, view) } else { (kind, view) };
        let Some(mut out) = self.outgoing(sent, data, now, faults) else { return };
        let released = match kind {
            EventType::TransferReturned => self.held.remove(&out.transfer_id),
            EventType::TransferPaid | EventType::TransferFailed => None,
        };
        if out.faults.contains(&WebhookFault::Drop) {
            let dropped = out.delivery(1, 0, DeliveryOutcome::Dropped, None, None);
            self.deliveries.push(dropped);
            if let Some(paid) = released {
                self.enqueue(paid);
            }
        } else if out.faults.contains(&WebhookFault::Reorder) {
            self.held.insert(out.transfer_id.clone(), out);
        } else {
            out.then = released.map(Box::new);
            self.enqueue(out);
        }
    }

    /// Sends `data` as an event of `kind`, well signed and without faults; its id.
    pub fn forge(&mut self, kind: EventType, data: TransferView, now: DateTime<Utc>) -> Result<String, SendRefused> {
        let mut out = self.outgoing(kind, data, now, vec![WebhookFault::Forged]).ok_or(SendRefused::WebhooksOff)?;
        out.delay = Duration::ZERO;
        let id = out.event_id.clone();
        self.enqueue(out);
        Ok(id)
    }

    fn enqueue(&self, out: Outgoing) {
        // Only fails once the mock has stopped, when nothing is sent any more.
        let _ = self.queue.send(out);
    }

    fn outgoing(
        &self,
        kind: EventType,
        data: TransferView,
        now: DateTime<Utc>,
        faults: Vec<WebhookFault>,
    ) -> Option<Outgoing> {
        let settings = &self.settings;
        let url = settings.url.clone()?;
        let event = Event {
            id: format!("evt_{}", uuid::Uuid::new_v4()),
            kind,
            created_at: now.to_rfc3339_opts(SecondsFormat::Millis, true),
            data,
        };
        let body = serde_json::to_vec(&event).expect("an event of a transfer view serialises");
        Some(Outgoing {
            event_id: event.id,
            kind,
            transfer_id: event.data.id,
            body: Bytes::from(body),
            url,
            secrets: settings.secrets.clone().into(),
            retry: settings.retry,
            timeout: Duration::from_millis(settings.timeout_ms.max(1)),
            delay: Duration::from_millis(settings.faults.delay_ms),
            faults,
            then: None,
            epoch: self.epoch,
        })
    }

    /// The faults of one event, in the documented draw order.
    fn draw(&mut self, kind: EventType) -> Vec<WebhookFault> {
        let f = &self.settings.faults;
        let mut chances = vec![
            (WebhookFault::Drop, f.drop),
            (WebhookFault::Duplicate, f.duplicate),
            (WebhookFault::BadSignature, f.bad_signature),
            (WebhookFault::StaleTimestamp, f.stale_timestamp),
            (WebhookFault::Disagree, f.disagree),
        ];
        if kind == EventType::TransferPaid {
            chances.push((WebhookFault::Reorder, f.reorder));
        }
        let rng = &mut self.rng;
        let hits: Vec<WebhookFault> = chances.into_iter().filter(|&(_, p)| happens(rng, p)).map(|(f, _)| f).collect();
        if hits.contains(&WebhookFault::Drop) {
            vec![WebhookFault::Drop]
        } else {
            hits
        }
    }
}

/// Certain and impossible chances draw nothing, so adding one does not shift the others' draws.
fn happens(rng: &mut StdRng, chance: f64) -> bool {
    if chance >= 1.0 {
        true
    } else if chance <= 0.0 {
        false
    } else {
        rng.gen::<f64>() < chance
    }
}

/// What a `disagree` fault makes the event say instead of the record.
fn disagree(kind: EventType, mut data: TransferView) -> (EventType, TransferView) {
    match kind {
        EventType::TransferFailed => {
            data.status = TransferStatus::Paid;
            data.failure_code = None;
            (EventType::TransferPaid, data)
        }
        EventType::TransferPaid | EventType::TransferReturned => {
            data.amount += Decimal::ONE;
            (kind, data)
        }
    }
}
