//! The payout provider (SPEC §4): its contract as types, the HTTP client, the one classification
//! of outcomes, and the circuit breaker in front of it.
//!
//! Classification happens once, here at the boundary: the rest of the service sees only
//! [`SubmitOutcome`] and [`LookupOutcome`] and never an HTTP status. The provider sits behind the
//! [`Provider`] trait object so tests point the service at a mock over real HTTP.

pub mod breaker;
mod classify;
mod client;
pub mod cluster;
pub mod truth;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use classify::{classify_error, classify_response};
pub use client::{HttpProvider, ProviderConfig};
pub use truth::{Mismatch, Verdict};

use crate::domain::SideEffect;
use breaker::{CallOutcome, CircuitBreaker};

/// What the service asks the provider to pay. `reference` is the withdrawal id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TransferRequest {
    pub reference: String,
    pub amount: String,
    pub currency: String,
    pub destination: crate::domain::Destination,
}

pub use crate::domain::TransferStatus;

/// A transfer as the provider reports it. `amount` and `currency` are required: an answer
/// without them cannot be checked against the withdrawal, so it decides nothing (SPEC §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    pub id: String,
    #[serde(default)]
    pub reference: Option<String>,
    #[serde(with = "rust_decimal::serde::str")]
    pub amount: rust_decimal::Decimal,
    pub currency: String,
    pub status: TransferStatus,
    #[serde(default)]
    pub failure_code: Option<String>,
    #[serde(default)]
    pub return_code: Option<String>,
    #[serde(default)]
    pub created_at: Option<chrono::DateTime<chrono::Utc>>,
    #[serde(default)]
    pub updated_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// Why a call did not produce a transfer, in terms operators can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderError {
    /// Stable code, e.g. `http_503`, `connect_failed`, `timeout_after_send`, `invalid_account`.
    pub code: String,
    pub http_status: Option<u16>,
    pub message: String,
    /// The provider's `Retry-After`, if it sent one.
    pub retry_after: Option<Duration>,
}

/// The classified result of `POST /v1/transfers` (SPEC §4's table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitOutcome {
    /// 2xx with a transfer: `paid`, `pending` (poll later) or `failed` (definitively not paid).
    Accepted { transfer: Transfer, http_status: u16 },
    /// Nothing reached the provider, or it said "later" (429/503): safe to retry.
    Retryable(ProviderError),
    /// The request may have been executed: only reconciliation may decide.
    Unknown(ProviderError),
    /// Refused for good (400/422 confirmed not paid; 401/403 credentials, not started).
    Permanent { error: ProviderError, side_effect: SideEffect },
    /// The provider holds a different request under our idempotency key (409).
    IdempotencyConflict(ProviderError),
}

impl SubmitOutcome {
    /// What the circuit breaker learns: only retryable and unknown outcomes are failures.
    pub fn breaker_outcome(&self) -> CallOutcome {
        match self {
            SubmitOutcome::Accepted { .. } => CallOutcome::Success,
            SubmitOutcome::Retryable(_) | SubmitOutcome::Unknown(_) => CallOutcome::Failure,
            SubmitOutcome::Permanent { .. } | SubmitOutcome::IdempotencyConflict(_) => CallOutcome::Ignored,
        }
    }
}

/// The classified result of looking a transfer up by idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupOutcome {
    Found(Vec<Transfer>),
    /// A definitive "no such transfer" (200 with an empty list).
    NotFound,
    /// The provider could not answer; ask again later.
    Unavailable(ProviderError),
}

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The provider contract. `idempotency_key` is the withdrawal id on every call.
pub trait Provider: Send + Sync {
    fn submit<'a>(
        &'a self,
        idempotency_key: &'a str,
        correlation_id: &'a str,
        request: &'a TransferRequest,
    ) -> BoxFuture<'a, SubmitOutcome>;

    fn lookup<'a>(&'a self, idempotency_key: &'a str, correlation_id: &'a str) -> BoxFuture<'a, LookupOutcome>;

    /// `GET /v1/transfers/{id}`: one transfer by the provider's id. `NotFound` for a 404.
    fn get<'a>(&'a self, transfer_id: &'a str, correlation_id: &'a str) -> BoxFuture<'a, LookupOutcome>;

    /// `GET /v1/reports/settlements?date=`: the day's settlement report, as the bytes sent (SPEC §14.1).
    fn settlement_report<'a>(
        &'a self,
        date: chrono::NaiveDate,
        correlation_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<u8>, ReportFetch>>;
}

/// Why a settlement report could not be fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportFetch {
    /// The provider has not published that day's report (404).
    #[error("the provider has not published this report")]
    NotPublished,
    /// The provider could not answer.
    #[error("the provider could not be asked: {}: {}", .0.code, .0.message)]
    Unavailable(ProviderError),
    /// The breaker is open.
    #[error("the provider breaker is open")]
    BreakerOpen,
}

impl ReportFetch {
    pub fn code(&self) -> &str {
        match self {
            ReportFetch::NotPublished => "report_not_published",
            ReportFetch::Unavailable(e) => &e.code,
            ReportFetch::BreakerOpen => "breaker_open",
        }
    }
}

/// The provider as the workers use it: every call goes through the breaker.
#[derive(Clone)]
pub struct Gateway {
    /// The provider's name (SPEC §16): `default` for a lone `PROVIDER_URL` (and the sandbox), else
    /// the providers file's; every attempt records it.
    pub name: String,
    pub provider: Arc<dyn Provider>,
    pub breaker: Arc<CircuitBreaker>,
}

/// Every configured provider's gateway, with what routing needs (SPEC §16): the currencies each
/// pays and its priority. One provider (a lone `PROVIDER_URL`, the sandbox, a test's mock) is the
/// simple case: it pays every currency. Cheap to clone.
#[derive(Clone)]
pub struct Gateways(Arc<Vec<Routed>>);

#[derive(Clone)]
struct Routed {
    gateway: Gateway,
    currencies: crate::config::providers::Currencies,
    priority: u32,
}

impl From<Gateway> for Gateways {
    fn from(gateway: Gateway) -> Self {
        Gateways::new(vec![(gateway, crate::config::providers::Currencies::Any, 1)])
    }
}

impl Gateways {
    /// The gateways with the currencies each pays and its priority (lower first; ties by name).
    pub fn new(list: Vec<(Gateway, crate::config::providers::Currencies, u32)>) -> Self {
        let mut list: Vec<Routed> =
            list.into_iter().map(|(gateway, currencies, priority)| Routed { gateway, currencies, priority }).collect();
        list.sort_by(|a, b| a.priority.cmp(&b.priority).then_with(|| a.gateway.name.cmp(&b.gateway.name)));
        Gateways(Arc::new(list))
    }

    /// The first provider by priority: the one a question that names no provider goes to (the
    /// only one, in the simple case).
    pub fn primary(&self) -> &Gateway {
        &self.0[0].gateway
    }

    /// The provider called `name`, if it is configured.
    pub fn get(&self, name: &str) -> Option<&Gateway> {
        self.0.iter().map(|r| &r.gateway).find(|g| g.name == name)
    }

    /// The providers that pay `currency`, first choice first.
    pub fn route(&self, currency: &str) -> Vec<&Gateway> {
        self.0.iter().filter(|r| r.currencies.pays_code(currency)).map(|r| &r.gateway).collect()
    }

    /// The provider whose breaker is called `breaker`.
    pub fn by_breaker(&self, breaker: &str) -> Option<&Gateway> {
        self.all().find(|g| g.breaker.name() == breaker)
    }

    /// Every provider, by priority.
    pub fn all(&self) -> impl Iterator<Item = &Gateway> {
        self.0.iter().map(|r| &r.gateway)
    }

    /// Whether one provider pays everything (no routing to do).
    pub fn is_single(&self) -> bool {
        self.0.len() == 1
    }

    /// The provider a withdrawal's questions go to: the one its latest attempt went to (`None`
    /// when that provider is no longer configured: nobody else may be asked in its place), or,
    /// before any attempt, the first that pays its currency.
    pub fn for_withdrawal(&self, latest_attempt_at: Option<&str>, currency: &str) -> Option<&Gateway> {
        match latest_attempt_at {
            Some(name) => self.get(name),
            None => self.route(currency).into_iter().next(),
        }
    }
}

/// The breaker refused the call; try again after `retry_in` (plus jitter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerOpen {
    pub retry_in: Duration,
}

impl Gateway {
    pub async fn submit(
        &self,
        idempotency_key: &str,
        correlation_id: &str,
        request: &TransferRequest,
    ) -> Result<SubmitOutcome, BreakerOpen> {
        self.guarded(self.provider.submit(idempotency_key, correlation_id, request), SubmitOutcome::breaker_outcome)
            .await
    }

    pub async fn lookup(&self, idempotency_key: &str, correlation_id: &str) -> Result<LookupOutcome, BreakerOpen> {
        self.read(self.provider.lookup(idempotency_key, correlation_id)).await
    }

    /// A transfer by the provider's id, through the breaker like a lookup.
    pub async fn get(&self, transfer_id: &str, correlation_id: &str) -> Result<LookupOutcome, BreakerOpen> {
        self.read(self.provider.get(transfer_id, correlation_id)).await
    }

    /// A day's settlement report, through the breaker (an unanswered fetch counts as a failure).
    pub async fn settlement_report(
        &self,
        date: chrono::NaiveDate,
        correlation_id: &str,
    ) -> Result<Vec<u8>, ReportFetch> {
        let counted = |outcome: &Result<Vec<u8>, ReportFetch>| match outcome {
            Ok(_) => CallOutcome::Success,
            Err(ReportFetch::NotPublished) => CallOutcome::Ignored,
            Err(_) => CallOutcome::Failure,
        };
        match self.guarded(self.provider.settlement_report(date, correlation_id), counted).await {
            Ok(outcome) => outcome,
            Err(_) => Err(ReportFetch::BreakerOpen),
        }
    }

    async fn read(&self, call: BoxFuture<'_, LookupOutcome>) -> Result<LookupOutcome, BreakerOpen> {
        let counted = |outcome: &LookupOutcome| match outcome {
            LookupOutcome::Found(_) | LookupOutcome::NotFound => CallOutcome::Success,
            LookupOutcome::Unavailable(_) => CallOutcome::Failure,
        };
        self.guarded(call, counted).await
    }

    /// Runs `call` under a breaker permit and tells the breaker how it went (`counted`) and how
    /// long it took; refused while the breaker is open.
    async fn guarded<T>(
        &self,
        call: impl Future<Output = T>,
        counted: impl FnOnce(&T) -> CallOutcome,
    ) -> Result<T, BreakerOpen> {
        let permit = self.breaker.try_acquire().map_err(|r| BreakerOpen { retry_in: r.retry_in })?;
        let started = std::time::Instant::now();
        let outcome = call.await;
        self.breaker.record(permit, counted(&outcome), started.elapsed());
        Ok(outcome)
    }
}
