//! The mock's signed webhook events (SPEC §15), over real HTTP: each test runs a small receiver
//! on a free port, points a mock at it, and checks what arrived against the mock's own record
//! and delivery log. Waits poll with a deadline.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use provider_contract::webhook::{Event, SignatureHeader, PROVIDER_SIGNATURE_HEADER};
use provider_mocks::{
    spawn, Delivery, DeliveryOutcome, EventType, FaultConfig, FaultEffect, FaultRule, ForgedEvent, MockConfig,
    RetryPolicy, RouteMatch, RunningMock, SendRefused, Settlement, SettlementMode, TransferStatus, WebhookFault,
    WebhookFaults, WebhookSettings,
};
use reqwest::Client;
use serde_json::{json, Value};

const SECRET: &str = "whsec_current";

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    signature: String,
    content_type: String,
    body: Bytes,
}

impl Received {
    fn event(&self) -> Event<Value> {
        serde_json::from_slice(&self.body).unwrap()
    }

    fn header(&self) -> SignatureHeader {
        SignatureHeader::parse(&self.signature).unwrap()
    }

    fn verifies(&self, secrets: &[&str]) -> bool {
        self.header().verify(secrets, &self.body)
    }
}

#[derive(Clone, Default)]
struct Inbox {
    received: Arc<Mutex<Vec<Received>>>,
    /// Statuses to answer, in order; 200 once they run out.
    answers: Arc<Mutex<VecDeque<u16>>>,
}

struct Receiver {
    url: String,
    inbox: Inbox,
}

impl Receiver {
    async fn start(answers: &[u16]) -> Receiver {
        let inbox = Inbox { answers: Arc::new(Mutex::new(answers.iter().copied().collect())), ..Inbox::default() };
        let app = Router::new().route("/hook", post(receive)).with_state(inbox.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { url, inbox }
    }

    fn received(&self) -> Vec<Received> {
        self.inbox.received.lock().unwrap().clone()
    }

    fn of(&self, transfer_id: &str) -> Vec<Received> {
        self.received().into_iter().filter(|r| r.event().data["id"] == transfer_id).collect()
    }

    /// Waits until the transfer's events number at least `n`, and returns them.
    async fn wait_for(&self, transfer_id: &str, n: usize) -> Vec<Received> {
        eventually(&format!("{n} event(s) of {transfer_id}"), || Some(self.of(transfer_id)).filter(|r| r.len() >= n))
            .await
    }
}

async fn receive(State(inbox): State<Inbox>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let received =
        Received { signature: header(PROVIDER_SIGNATURE_HEADER), content_type: header("content-type"), body };
    inbox.received.lock().unwrap().push(received);
    let answer = inbox.answers.lock().unwrap().pop_front().unwrap_or(200);
    StatusCode::from_u16(answer).unwrap()
}

async fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Fast retries, so tests of several attempts stay short.
fn settings(url: &str, secrets: &[&str]) -> WebhookSettings {
    WebhookSettings {
        url: Some(url.to_string()),
        secrets: secrets.iter().map(|s| s.to_string()).collect(),
        retry: RetryPolicy { initial_backoff_ms: 10, max_backoff_ms: 40, ..RetryPolicy::default() },
        ..WebhookSettings::default()
    }
}

async fn mock_for(receiver: &Receiver, faults: WebhookFaults) -> RunningMock {
    let webhooks = WebhookSettings { faults, ..settings(&receiver.url, &[SECRET]) };
    spawn(MockConfig { webhooks, ..MockConfig::default() }).await.unwrap()
}

async fn create(mock: &RunningMock, key: &str, amount: &str) -> Value {
    let body = json!({
        "reference": format!("wd-{key}"),
        "amount": amount,
        "currency": "USD",
        "destination": {"type": "bank_account", "account_number": "000123", "bank_code": "021000021"}
    });
    let url = format!("{}/v1/transfers", mock.url());
    let response = Client::new().post(url).header("Idempotency-Key", key).json(&body).send().await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    response.json().await.unwrap()
}

fn id_of(transfer: &Value) -> String {
    transfer["id"].as_str().unwrap().to_string()
}

/// The transfer as the provider API shows it now.
async fn get_transfer(mock: &RunningMock, id: &str) -> Value {
    let url = format!("{}/v1/transfers/{id}", mock.url());
    Client::new().get(url).send().await.unwrap().json().await.unwrap()
}

fn deliveries_of(mock: &RunningMock, transfer_id: &str) -> Vec<Delivery> {
    mock.webhook_deliveries().into_iter().filter(|d| d.transfer_id == transfer_id).collect()
}

/// Once a later transfer's event has arrived, an earlier one still to come would have had
/// plenty of time to arrive too: the next-best thing to proving that nothing more comes.
async fn barrier(mock: &RunningMock, receiver: &Receiver, key: &str) {
    let later = id_of(&create(mock, key, "1.00").await);
    receiver.wait_for(&later, 1).await;
}

#[tokio::test]
async fn a_paid_transfer_sends_one_event_signed_under_each_secret() {
    let receiver = Receiver::start(&[]).await;
    let webhooks = settings(&receiver.url, &["whsec_old", "whsec_new"]);
    let mock = spawn(MockConfig { webhooks, ..MockConfig::default() }).await.unwrap();
    let created = create(&mock, "k1", "125.50").await;
    let id = id_of(&created);

    let got = receiver.wait_for(&id, 1).await.remove(0);
    assert_eq!(got.content_type, "application/json");
    let header = got.header();
    assert_eq!(header.signatures.len(), 2, "one v1 per secret: {}", got.signature);
    assert!(got.verifies(&["whsec_old"]) && got.verifies(&["whsec_new"]));
    assert!(!got.verifies(&["whsec_other"]));
    assert!((chrono::Utc::now().timestamp() - header.timestamp).abs() < 60, "t is now");

    let event = got.event();
    assert!(event.id.starts_with("evt_"), "{}", event.id);
    assert_eq!(event.kind, EventType::TransferPaid);
    assert!(chrono::DateTime::parse_from_rfc3339(&event.created_at).is_ok(), "{}", event.created_at);
    assert_eq!(event.data, get_transfer(&mock, &id).await, "data is the transfer as GET shows it");
    assert_eq!(event.data, created);

    barrier(&mock, &receiver, "k2").await;
    assert_eq!(receiver.of(&id).len(), 1, "exactly one event");
    let deliveries = deliveries_of(&mock, &id);
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    let delivery = &deliveries[0];
    assert_eq!((delivery.event_id.as_str(), delivery.event_type), (event.id.as_str(), EventType::TransferPaid));
    assert_eq!((delivery.copy, delivery.attempt, delivery.status), (1, 1, Some(200)));
    assert_eq!(delivery.outcome, DeliveryOutcome::Delivered);
    assert!(delivery.faults.is_empty());
}

#[tokio::test]
async fn a_pending_transfer_sends_its_event_when_it_settles_even_unread() {
    let receiver = Receiver::start(&[]).await;
    let mock = mock_for(&receiver, WebhookFaults::default()).await;
    mock.set_settlement(Settlement { mode: SettlementMode::Async, delay_ms: 400, fail_ratio: 0.0 });
    let paid = id_of(&create(&mock, "k1", "10.00").await);
    mock.set_settlement(Settlement { mode: SettlementMode::Async, delay_ms: 400, fail_ratio: 1.0 });
    let failed = id_of(&create(&mock, "k2", "20.00").await);
    assert!(receiver.received().is_empty(), "nothing is announced while pending");

    let paid_event = receiver.wait_for(&paid, 1).await.remove(0).event();
    let failed_event = receiver.wait_for(&failed, 1).await.remove(0).event();
    assert_eq!(mock.requests().len(), 2, "only the two creates: nobody read the transfers");
    assert_eq!((paid_event.kind, &paid_event.data["status"]), (EventType::TransferPaid, &json!("paid")));
    assert_eq!((failed_event.kind, &failed_event.data["status"]), (EventType::TransferFailed, &json!("failed")));
    assert_eq!(failed_event.data["failure_code"], "rejected_by_bank");
    assert_eq!(paid_event.data, get_transfer(&mock, &paid).await);
    assert_eq!(failed_event.data, get_transfer(&mock, &failed).await);
}

#[tokio::test]
async fn returns_send_returned_events_now_and_when_due() {
    let receiver = Receiver::start(&[]).await;
    let mock = mock_for(&receiver, WebhookFaults::default()).await;
    let now = id_of(&create(&mock, "k1", "10.00").await);
    let later = id_of(&create(&mock, "k2", "20.00").await);

    assert!(mock.return_transfer("k1", "R01"));
    let returned = receiver.wait_for(&now, 2).await[1].event();
    assert_eq!(returned.kind, EventType::TransferReturned);
    assert_eq!((&returned.data["status"], &returned.data["return_code"]), (&json!("returned"), &json!("R01")));

    let requests_before = mock.requests().len();
    assert!(mock.return_transfer_at("k2", "R02", mock.now() + chrono::TimeDelta::milliseconds(200)));
    let scheduled = receiver.wait_for(&later, 2).await[1].event();
    assert_eq!(mock.requests().len(), requests_before, "nobody read the transfer");
    assert_eq!(scheduled.kind, EventType::TransferReturned);
    assert_eq!(scheduled.data, get_transfer(&mock, &later).await);
    assert_eq!(scheduled.data["return_code"], "R02");
}

#[tokio::test]
async fn a_receiver_failing_twice_gets_the_same_bytes_three_times() {
    let receiver = Receiver::start(&[500, 500]).await;
    let mock = mock_for(&receiver, WebhookFaults::default()).await;
    let id = id_of(&create(&mock, "k1", "10.00").await);

    let got = receiver.wait_for(&id, 3).await;
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|r| r.body == got[0].body), "the same bytes on every attempt");
    assert!(got.iter().all(|r| r.verifies(&[SECRET])), "each attempt signed anew");
    let attempts = eventually("three recorded attempts", || {
        Some(deliveries_of(&mock, &id)).filter(|d| d.iter().any(|d| d.outcome == DeliveryOutcome::Delivered))
    })
    .await;
    let summary: Vec<_> = attempts.iter().map(|d| (d.attempt, d.status, d.outcome)).collect();
    assert_eq!(
        summary,
        [
            (1, Some(500), DeliveryOutcome::Retrying),
            (2, Some(500), DeliveryOutcome::Retrying),
            (3, Some(200), DeliveryOutcome::Delivered)
        ]
    );
    assert!(attempts.iter().all(|d| d.event_id == got[0].event().id));
}

#[tokio::test]
async fn delivery_gives_up_after_max_attempts_and_records_the_errors() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", closed.local_addr().unwrap());
    drop(closed);
    let mut webhooks = settings(&url, &[SECRET]);
    webhooks.retry.max_attempts = 3;
    let mock = spawn(MockConfig { webhooks, ..MockConfig::default() }).await.unwrap();
    let id = id_of(&create(&mock, "k1", "10.00").await);

    let attempts = eventually("the delivery to give up", || {
        Some(deliveries_of(&mock, &id)).filter(|d| d.iter().any(|d| d.outcome == DeliveryOutcome::GaveUp))
    })
    .await;
    let outcomes: Vec<_> = attempts.iter().map(|d| (d.attempt, d.outcome)).collect();
    assert_eq!(
        outcomes,
        [(1, DeliveryOutcome::Retrying), (2, DeliveryOutcome::Retrying), (3, DeliveryOutcome::GaveUp)]
    );
    assert!(attempts.iter().all(|d| d.status.is_none() && d.error.is_some()), "{attempts:?}");
}

#[tokio::test]
async fn duplicate_fault_delivers_the_same_event_twice() {
    let receiver = Receiver::start(&[]).await;
    let mock = mock_for(&receiver, WebhookFaults { duplicate: 1.0, ..WebhookFaults::default() }).await;
    let id = id_of(&create(&mock, "k1", "10.00").await);

    let got = receiver.wait_for(&id, 2).await;
    assert_eq!(got[0].body, got[1].body, "same id, same body");
    assert!(got.iter().all(|r| r.verifies(&[SECRET])));
    let copies: Vec<_> = deliveries_of(&mock, &id).iter().map(|d| (d.copy, d.faults.clone())).collect();
    assert_eq!(copies, [(1, vec![WebhookFault::Duplicate]), (2, vec![WebhookFault::Duplicate])]);
}

#[tokio::test]
async fn drop_fault_sends_nothing() {
    let receiver = Receiver::start(&[]).await;
    let mock = mock_for(&receiver, WebhookFaults { drop: 1.0, ..WebhookFaults::default() }).await;
    let id = id_of(&create(&mock, "k1", "10.00").await);
    let dropped = deliveries_of(&mock, &id);
    assert_eq!(dropped.len(), 1);
    assert_eq!((dropped[0].attempt, dropped[0].outcome), (0, DeliveryOutcome::Dropped));

    mock.set_webhook_faults(WebhookFaults::default()).unwrap();
    barrier(&mock, &receiver, "k2").await;
    assert!(receiver.of(&id).is_empty(), "the dropped event never arrives");
}

#[tokio::test]
async fn bad_signature_fault_fails_verification() {
    let receiver = Receiver::start(&[]).await;
    let mock = mock_for(&receiver, WebhookFaults { bad_signature: 1.0, ..WebhookFaults::default() }).await;
    let id = id_of(&create(&mock, "k1", "10.00").await);

    let got = receiver.wait_for(&id, 1).await.remove(0);
    assert!(!got.verifies(&[SECRET]), "{}", got.signature);
    assert_eq!(got.event().data, get_transfer(&mock, &id).await, "only the signature is wrong");
}

#[tokio::test]
async fn stale_timestamp_fault_signs_validly_an_hour_ago() {
    let receiver = Receiver::start(&[]).await;
    let mock = mock_for(&receiver, WebhookFaults { stale_timestamp: 1.0, ..WebhookFaults::default() }).await;
    let id = id_of(&create(&mock, "k1", "10.00").await);

    let got = receiver.wait_for(&id, 1).await.remove(0);
    assert!(got.verifies(&[SECRET]));
    let age = chrono::Utc::now().timestamp() - got.header().timestamp;
    assert!((3_590..3_660).contains(&age), "t is {age} s old");
}

#[tokio::test]
async fn disagree_fault_says_what_the_record_does_not() {
    let receiver = Receiver::start(&[]).await;
    let mock = mock_for(&receiver, WebhookFaults { disagree: 1.0, ..WebhookFaults::default() }).await;
    let paid = id_of(&create(&mock, "k1", "10.00").await);
    mock.set_faults(FaultConfig {
        rules: vec![FaultRule::new(
            RouteMatch::Create,
            FaultEffect::SettleFailed { failure_code: "account_closed".into() },
        )],
    });
    let failed = id_of(&create(&mock, "k2", "20.00").await);

    let paid_event = receiver.wait_for(&paid, 1).await.remove(0).event();
    assert_eq!(paid_event.kind, EventType::TransferPaid);
    assert_eq!(get_transfer(&mock, &paid).await["amount"], "10.00");
    assert_eq!(paid_event.data["amount"], "11.00", "another amount than the record's");

    let failed_event = receiver.wait_for(&failed, 1).await.remove(0).event();
    assert_eq!(get_transfer(&mock, &failed).await["status"], "failed");
    assert_eq!((failed_event.kind, &failed_event.data["status"]), (EventType::TransferPaid, &json!("paid")));
}

#[tokio::test]
async fn reorder_fault_sends_paid_after_returned() {
    let receiver = Receiver::start(&[]).await;
    let mock = mock_for(&receiver, WebhookFaults { reorder: 1.0, ..WebhookFaults::default() }).await;
    let id = id_of(&create(&mock, "k1", "10.00").await);
    assert!(deliveries_of(&mock, &id).is_empty(), "the paid event is held");

    assert!(mock.return_transfer("k1", "R01"));
    let kinds: Vec<_> = receiver.wait_for(&id, 2).await.iter().map(|r| r.event().kind).collect();
    assert_eq!(kinds, [EventType::TransferReturned, EventType::TransferPaid]);
    let faults: Vec<_> = deliveries_of(&mock, &id).into_iter().map(|d| (d.event_type, d.faults)).collect();
    assert_eq!(faults, [(EventType::TransferReturned, vec![]), (EventType::TransferPaid, vec![WebhookFault::Reorder])]);
}

#[tokio::test]
async fn delay_fault_holds_each_event_before_its_first_send() {
    let receiver = Receiver::start(&[]).await;
    let mock = mock_for(&receiver, WebhookFaults { delay_ms: 300, ..WebhookFaults::default() }).await;
    let started = Instant::now();
    let id = id_of(&create(&mock, "k1", "10.00").await);
    receiver.wait_for(&id, 1).await;
    assert!(started.elapsed() >= Duration::from_millis(300), "{:?}", started.elapsed());
}

#[tokio::test]
async fn webhook_faults_repeat_for_the_same_seed() {
    async fn run() -> Vec<Vec<WebhookFault>> {
        let receiver = Receiver::start(&[]).await;
        let faults = WebhookFaults { drop: 0.3, duplicate: 0.5, bad_signature: 0.5, ..WebhookFaults::default() };
        let webhooks = WebhookSettings { faults, ..settings(&receiver.url, &[SECRET]) };
        let mock = spawn(MockConfig { seed: 11, webhooks, ..MockConfig::default() }).await.unwrap();
        let mut ids = Vec::new();
        for n in 0..12 {
            ids.push(id_of(&create(&mock, &format!("k{n}"), "10.00").await));
        }
        let mut sequence = Vec::new();
        for id in ids {
            let first = eventually("the event's first delivery or drop", || deliveries_of(&mock, &id).first().cloned());
            sequence.push(first.await.faults);
        }
        sequence
    }
    let first = run().await;
    assert_eq!(run().await, first);
    assert!(first.contains(&vec![WebhookFault::Drop]) && first.iter().any(|f| !f.contains(&WebhookFault::Drop)));
}

#[tokio::test]
async fn a_forged_event_announces_paid_while_the_record_is_pending() {
    let receiver = Receiver::start(&[]).await;
    let mock = spawn(MockConfig {
        settlement: Settlement { mode: SettlementMode::Async, delay_ms: 60_000, fail_ratio: 0.0 },
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let id = id_of(&create(&mock, "k1", "10.00").await);
    assert_eq!(mock.send_event(&ForgedEvent::new(EventType::TransferPaid, &id)), Err(SendRefused::WebhooksOff));
    mock.set_webhooks(settings(&receiver.url, &[SECRET])).unwrap();

    let forged =
        ForgedEvent { amount: Some("12.34".parse().unwrap()), ..ForgedEvent::new(EventType::TransferPaid, &id) };
    let event_id = mock.send_event(&forged).unwrap();
    let got = receiver.wait_for(&id, 1).await.remove(0);
    assert!(got.verifies(&[SECRET]));
    let event = got.event();
    assert_eq!((event.id.as_str(), event.kind), (event_id.as_str(), EventType::TransferPaid));
    assert_eq!((&event.data["status"], &event.data["amount"]), (&json!("paid"), &json!("12.34")));
    assert_eq!(get_transfer(&mock, &id).await["status"], "pending");
    assert_eq!(mock.transfers()[0].status, TransferStatus::Pending);
}

#[tokio::test]
async fn admin_routes_set_webhooks_forge_events_and_show_deliveries() {
    let receiver = Receiver::start(&[]).await;
    let mock = spawn(MockConfig::default()).await.unwrap();
    let client = Client::new();
    let admin = |path: &str| format!("{}/__admin/{path}", mock.url());

    let body = json!({"url": receiver.url, "secrets": ["s1", "s2"], "retry": {"max_attempts": 2}});
    assert_eq!(client.put(admin("webhooks")).json(&body).send().await.unwrap().status(), 204);
    let shown: Value = client.get(admin("webhooks")).send().await.unwrap().json().await.unwrap();
    assert_eq!(shown["secret_count"], 2);
    assert_eq!(shown["retry"]["max_attempts"], 2);
    assert!(shown.get("secrets").is_none() && !shown.to_string().contains("s1"), "{shown}");
    let typo = client.put(admin("webhooks")).json(&json!({"urll": "x"})).send().await.unwrap();
    assert_eq!(typo.status(), 400);
    let no_secret = client.put(admin("webhooks")).json(&json!({"url": receiver.url})).send().await.unwrap();
    assert_eq!(no_secret.status(), 400);

    let faults = json!({"duplicate": 1.0, "delay_ms": 5});
    assert_eq!(client.put(admin("webhook-faults")).json(&faults).send().await.unwrap().status(), 204);
    let read: WebhookFaults = client.get(admin("webhook-faults")).send().await.unwrap().json().await.unwrap();
    assert_eq!(read, WebhookFaults { duplicate: 1.0, delay_ms: 5, ..WebhookFaults::default() });
    let too_likely = client.put(admin("webhook-faults")).json(&json!({"drop": 2.0})).send().await.unwrap();
    assert_eq!(too_likely.status(), 400);
    client.put(admin("webhook-faults")).json(&json!({})).send().await.unwrap();

    let id = id_of(&create(&mock, "k1", "10.00").await);
    let send = json!({"type": "transfer.returned", "transfer_id": id, "return_code": "R09"});
    let sent = client.post(admin("webhooks/send")).json(&send).send().await.unwrap();
    assert_eq!(sent.status(), 202);
    let event_id = sent.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();
    let unknown = json!({"type": "transfer.paid", "transfer_id": "tr_nope"});
    assert_eq!(client.post(admin("webhooks/send")).json(&unknown).send().await.unwrap().status(), 404);

    let forged =
        eventually("the forged event", || receiver.of(&id).into_iter().map(|r| r.event()).find(|e| e.id == event_id))
            .await;
    assert_eq!((&forged.data["status"], &forged.data["return_code"]), (&json!("returned"), &json!("R09")));
    // The paid event and the forged one.
    eventually("two deliveries recorded", || Some(()).filter(|_| mock.webhook_deliveries().len() == 2)).await;
    let over_http: Value = client.get(admin("webhooks/deliveries")).send().await.unwrap().json().await.unwrap();
    let deliveries = over_http["data"].as_array().unwrap();
    assert_eq!(deliveries.len(), 2, "{over_http}");
    let forged_delivery = deliveries.iter().find(|d| d["event_id"] == event_id).unwrap();
    assert_eq!(forged_delivery["faults"], json!(["forged"]), "no fault applies to a forged event");
    assert_eq!(forged_delivery["event_type"], "transfer.returned");
    assert_eq!((&forged_delivery["outcome"], &forged_delivery["status"]), (&json!("delivered"), &json!(200)));

    assert_eq!(client.post(admin("reset")).send().await.unwrap().status(), 204);
    let after: Value = client.get(admin("webhooks/deliveries")).send().await.unwrap().json().await.unwrap();
    assert_eq!(after, json!({"data": []}));
    assert_eq!(mock.webhooks().secrets, ["s1", "s2"], "reset keeps the receiver");
}

#[tokio::test]
async fn reset_clears_webhook_faults_held_events_and_deliveries() {
    let receiver = Receiver::start(&[]).await;
    let mock = mock_for(&receiver, WebhookFaults { reorder: 1.0, drop: 0.0, ..WebhookFaults::default() }).await;
    create(&mock, "k1", "10.00").await;
    mock.set_webhook_faults(WebhookFaults { reorder: 1.0, drop: 1.0, ..WebhookFaults::default() }).unwrap();
    create(&mock, "k2", "10.00").await;
    assert_eq!(mock.webhook_deliveries().len(), 1, "the drop");

    mock.reset();
    assert!(mock.webhook_deliveries().is_empty());
    assert_eq!(mock.webhooks().faults, WebhookFaults::default());
    let id = id_of(&create(&mock, "k1", "10.00").await);
    let paid = receiver.wait_for(&id, 1).await.remove(0).event();
    assert_eq!(paid.kind, EventType::TransferPaid, "no longer held: reorder was reset");
    assert!(deliveries_of(&mock, &id).iter().all(|d| d.faults.is_empty()));
}

#[tokio::test]
async fn changes_before_a_url_is_set_send_nothing() {
    let receiver = Receiver::start(&[]).await;
    let mock = spawn(MockConfig::default()).await.unwrap();
    let before = id_of(&create(&mock, "k1", "10.00").await);
    assert!(mock.return_transfer("k1", "R01"));
    assert!(mock.webhook_deliveries().is_empty());

    mock.set_webhooks(settings(&receiver.url, &[SECRET])).unwrap();
    barrier(&mock, &receiver, "k2").await;
    assert!(receiver.of(&before).is_empty());
    assert_eq!(mock.webhook_deliveries().len(), 1, "only k2's event");
}

#[test]
fn help_documents_every_webhook_setting_and_fault() {
    let output = Command::new(env!("CARGO_BIN_EXE_provider-mock")).arg("--help").output().unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    for needle in [
        "PROVIDER_MOCK_WEBHOOK_URL",
        "PROVIDER_MOCK_WEBHOOK_SECRET",
        "retry.max_attempts",
        "retry.initial_backoff_ms",
        "retry.max_backoff_ms",
        "timeout_ms",
        "faults.duplicate",
        "faults.drop",
        "faults.bad_signature",
        "faults.stale_timestamp",
        "faults.disagree",
        "faults.reorder",
        "faults.delay_ms",
        "/__admin/webhooks/send",
        "/__admin/webhooks/deliveries",
    ] {
        assert!(help.contains(needle), "--help lacks {needle}:\n{help}");
    }
}

#[tokio::test]
async fn the_binary_sends_to_the_env_url_under_the_env_secrets() {
    let receiver = Receiver::start(&[]).await;
    let mut child = Command::new(env!("CARGO_BIN_EXE_provider-mock"))
        .args(["--port", "0"])
        .env("PROVIDER_MOCK_WEBHOOK_URL", &receiver.url)
        .env("PROVIDER_MOCK_WEBHOOK_SECRET", "whsec_a,whsec_b")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let url = line.trim().strip_prefix("provider-mock listening on ").unwrap().to_string();

    let body = json!({"reference": "wd-1", "amount": "10.00", "currency": "USD",
        "destination": {"type": "bank_account", "account_number": "1", "bank_code": "2"}});
    let response = Client::new()
        .post(format!("{url}/v1/transfers"))
        .header("Idempotency-Key", "k1")
        .json(&body)
        .send()
        .await
        .unwrap();
    let id = id_of(&response.json().await.unwrap());
    let got = receiver.wait_for(&id, 1).await.remove(0);
    assert_eq!(got.header().signatures.len(), 2);
    assert!(got.verifies(&["whsec_a"]) && got.verifies(&["whsec_b"]));
    child.kill().unwrap();
    child.wait().unwrap();
}
