//! An integrator's webhook receiver, in process (SPEC §17): `POST /hooks/{slot}`, one slot per
//! registered endpoint, each verified against that endpoint's signing secret
//! (`Withdrawals-Signature`, [`provider_contract::webhook::SignatureHeader`]) and recorded — event
//! id, type, withdrawal, `data.status`, `data.version`, whether the signature held, and what the
//! receiver answered ([`Receipt`]).
//!
//! With a [`FaultMix`] on, each request draws its answer from a seeded RNG: a 500, a 503 with
//! `Retry-After: 1`, a hang past the service's delivery timeout, a slow 200 within it, or a
//! prompt 200; with none, every well-signed request gets a prompt 200 (the bench's receiver).
//! A request whose signature does not hold is answered 400 and never counts as delivered.
//!
//! Refusing connections is not this module's business: the chaos run puts a
//! [`super::proxy::Proxy`] in front of it for that.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use provider_contract::webhook::SignatureHeader;
use withdrawals::jobs::notify::SIGNATURE_HEADER;

/// What the receiver answered one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// 200 at once.
    Ok,
    /// 200 after a delay within the service's timeout.
    Slow,
    /// 500.
    Error,
    /// 503 with `Retry-After: 1`.
    Unavailable,
    /// No answer until well past the service's timeout (then a 200 nobody reads).
    Hang,
    /// 400: the signature did not verify (or the slot has no secret).
    BadSignature,
}

impl Answer {
    pub fn as_str(self) -> &'static str {
        match self {
            Answer::Ok => "ok",
            Answer::Slow => "slow",
            Answer::Error => "error_500",
            Answer::Unavailable => "unavailable_503",
            Answer::Hang => "hang",
            Answer::BadSignature => "bad_signature",
        }
    }

    /// A 2xx the service can read in time: the event was delivered.
    pub fn delivered(self) -> bool {
        matches!(self, Answer::Ok | Answer::Slow)
    }
}

/// The share of requests drawn to each fault; the rest answer 200 at once.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FaultMix {
    pub error: f64,
    pub unavailable: f64,
    pub hang: f64,
    pub slow: f64,
    /// How long a hang lasts (past the service's `NOTIFY_TIMEOUT_MS`).
    pub hang_ms: u64,
    /// A slow answer's delay: uniform up to this (well within the timeout).
    pub slow_ms: u64,
}

impl FaultMix {
    /// The chaos run's mix for a service whose delivery timeout is `timeout`: a third of the
    /// requests fail (500 or 503), a few hang past the timeout, a tenth answer slowly within it.
    pub fn chaos(timeout: Duration) -> FaultMix {
        let timeout_ms = timeout.as_millis() as u64;
        FaultMix {
            error: 0.20,
            unavailable: 0.13,
            hang: 0.06,
            slow: 0.10,
            hang_ms: timeout_ms + 500,
            slow_ms: timeout_ms / 2,
        }
    }

    /// The answer for a uniform draw `u` in `[0, 1)`.
    pub fn draw(&self, u: f64) -> Answer {
        let shares = [
            (self.error, Answer::Error),
            (self.unavailable, Answer::Unavailable),
            (self.hang, Answer::Hang),
            (self.slow, Answer::Slow),
        ];
        let mut edge = 0.0;
        for (share, answer) in shares {
            edge += share;
            if u < edge {
                return answer;
            }
        }
        Answer::Ok
    }
}

/// One request as the receiver saw it. Fields the body did not carry are empty (or -1).
#[derive(Debug, Clone)]
pub struct Receipt {
    pub slot: usize,
    pub event_id: String,
    pub event_type: String,
    pub withdrawal_id: String,
    pub status: String,
    pub version: i64,
    pub signature_valid: bool,
    pub answer: Answer,
    /// The raw body, when the receiver keeps them (the chaos run scans them for secrets).
    pub body: Option<String>,
}

#[derive(Default)]
struct Shared {
    secrets: Mutex<HashMap<usize, String>>,
    faults: Mutex<Option<(FaultMix, StdRng)>>,
    receipts: Mutex<Vec<Receipt>>,
    keep_bodies: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The receiver, listening on a loopback port of its own until [`Receiver::stop`].
pub struct Receiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Listens on `127.0.0.1:0`; answers 200 to every well-signed request until faults are set.
    pub async fn start(keep_bodies: bool) -> anyhow::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("bind the webhook receiver")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared { keep_bodies, ..Shared::default() });
        let app = axum::Router::new().route("/hooks/{slot}", axum::routing::post(hook)).with_state(shared.clone());
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).with_graceful_shutdown(token.cancelled_owned()).await;
        });
        Ok(Receiver { addr, shared, stop, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The path of slot `slot`, to be appended to whatever address reaches the receiver.
    pub fn path(slot: usize) -> String {
        format!("/hooks/{slot}")
    }

    /// The secret slot `slot`'s requests must be signed with.
    pub fn set_secret(&self, slot: usize, secret: String) {
        lock(&self.shared.secrets).insert(slot, secret);
    }

    /// Faults drawn from an RNG seeded with `seed`, or none (every well-signed request is 200).
    pub fn set_faults(&self, mix: Option<FaultMix>, seed: u64) {
        *lock(&self.shared.faults) = mix.map(|m| (m, StdRng::seed_from_u64(seed)));
    }

    /// Every request so far, in arrival order.
    pub fn receipts(&self) -> Vec<Receipt> {
        lock(&self.shared.receipts).clone()
    }

    /// Requests so far.
    pub fn requests(&self) -> usize {
        lock(&self.shared.receipts).len()
    }

    pub async fn stop(self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}

/// Registers an endpoint at `url` for every event type (`["*"]`) through the API at `base_url`,
/// as the account `api_key` opens; returns its signing secret (shown only in this answer).
pub async fn register_endpoint(
    http: &reqwest::Client,
    base_url: &str,
    api_key: &str,
    url: &str,
) -> anyhow::Result<String> {
    let response = http
        .post(format!("{base_url}/v1/webhook-endpoints"))
        .bearer_auth(api_key)
        .json(&serde_json::json!({"url": url, "events": ["*"]}))
        .send()
        .await
        .context("POST /v1/webhook-endpoints")?;
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    match body["secret"].as_str() {
        Some(secret) if status == StatusCode::CREATED => Ok(secret.to_owned()),
        _ => anyhow::bail!("registering an endpoint answered {status}: {body}"),
    }
}

async fn hook(State(shared): State<Arc<Shared>>, Path(slot): Path<usize>, headers: HeaderMap, body: Bytes) -> Response {
    let secret = lock(&shared.secrets).get(&slot).cloned();
    let header = headers.get(SIGNATURE_HEADER).and_then(|v| v.to_str().ok());
    let signature_valid = match (secret, header) {
        (Some(secret), Some(header)) => SignatureHeader::parse(header).is_ok_and(|h| h.verify(&[secret], &body)),
        _ => false,
    };
    let (answer, delay) = match signature_valid {
        false => (Answer::BadSignature, Duration::ZERO),
        true => match lock(&shared.faults).as_mut() {
            None => (Answer::Ok, Duration::ZERO),
            Some((mix, rng)) => {
                let answer = mix.draw(rng.gen());
                let delay = match answer {
                    Answer::Hang => Duration::from_millis(mix.hang_ms),
                    Answer::Slow => Duration::from_millis(rng.gen_range(0..=mix.slow_ms)),
                    _ => Duration::ZERO,
                };
                (answer, delay)
            }
        },
    };
    let event: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    // Recorded before any delay: a hung request's connection is dropped by the service, and the
    // handler with it.
    lock(&shared.receipts).push(Receipt {
        slot,
        event_id: text(&event["id"]),
        event_type: text(&event["type"]),
        withdrawal_id: text(&event["data"]["id"]),
        status: text(&event["data"]["status"]),
        version: event["data"]["version"].as_i64().unwrap_or(-1),
        signature_valid,
        answer,
        body: shared.keep_bodies.then(|| String::from_utf8_lossy(&body).into_owned()),
    });
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    match answer {
        Answer::Ok | Answer::Slow | Answer::Hang => StatusCode::OK.into_response(),
        Answer::Error => (StatusCode::INTERNAL_SERVER_ERROR, "chaos: failing on purpose").into_response(),
        Answer::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, [("Retry-After", "1")], "chaos: down").into_response(),
        Answer::BadSignature => (StatusCode::BAD_REQUEST, "signature does not verify").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_splits_the_unit_interval_in_order_and_the_rest_is_ok() {
        let mix = FaultMix::chaos(Duration::from_millis(1_000));
        assert_eq!(mix.draw(0.0), Answer::Error);
        assert_eq!(mix.draw(0.199), Answer::Error);
        assert_eq!(mix.draw(0.25), Answer::Unavailable);
        assert_eq!(mix.draw(0.36), Answer::Hang);
        assert_eq!(mix.draw(0.45), Answer::Slow);
        assert_eq!(mix.draw(0.50), Answer::Ok);
        assert_eq!(mix.draw(0.999), Answer::Ok);
        assert!(mix.hang_ms > 1_000 && mix.slow_ms < 1_000, "a hang outlasts the timeout, a slow answer does not");
    }

    #[test]
    fn about_a_third_of_a_seeded_run_fails() {
        let mix = FaultMix::chaos(Duration::from_millis(1_000));
        let mut rng = StdRng::seed_from_u64(11);
        let failed = (0..10_000).filter(|_| matches!(mix.draw(rng.gen()), Answer::Error | Answer::Unavailable)).count();
        assert!((3_100..3_500).contains(&failed), "{failed}");
    }

    #[tokio::test]
    async fn a_well_signed_post_is_recorded_and_a_forged_one_refused() {
        let receiver = Receiver::start(true).await.unwrap();
        receiver.set_secret(3, "whsec_test".to_owned());
        let body = br#"{"id":"evt_1","type":"withdrawal.created","data":{"id":"w1","status":"pending","version":1}}"#;
        let http = reqwest::Client::new();
        let url = format!("http://{}{}", receiver.addr(), Receiver::path(3));
        let signed = provider_contract::webhook::header_value(&["whsec_test"], 1_700_000_000, body);
        let forged = provider_contract::webhook::header_value(&["whsec_other"], 1_700_000_000, body);
        let ok = http.post(&url).header(SIGNATURE_HEADER, signed).body(body.to_vec()).send().await.unwrap();
        let refused = http.post(&url).header(SIGNATURE_HEADER, forged).body(body.to_vec()).send().await.unwrap();
        assert_eq!((ok.status().as_u16(), refused.status().as_u16()), (200, 400));
        let receipts = receiver.receipts();
        assert_eq!(receipts.len(), 2);
        let r = &receipts[0];
        assert_eq!((r.slot, r.event_id.as_str(), r.status.as_str(), r.version), (3, "evt_1", "pending", 1));
        assert!(r.signature_valid && r.answer.delivered());
        assert!(!receipts[1].signature_valid && !receipts[1].answer.delivered());
        receiver.stop().await;
    }
}
