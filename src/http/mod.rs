//! The HTTP surface: the customer API of SPEC §3, health checks and the OpenAPI document.
//!
//! Each resource module owns its `router()`; [`app`] merges them with the operator API
//! ([`crate::ops`]) and the operator console ([`crate::console`]) and adds the layers every route
//! shares (correlation id, tracing, request timeout, body limit, problem+json fallbacks).
//! [`limits`] owns the listeners' timeouts, connection cap and `/metrics` access.

mod auth;
pub use auth::bearer;
mod balances;
pub mod correlation;
pub mod error;
mod health;
pub mod limits;
mod openapi;
pub mod ops;
pub mod withdrawals;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_http::trace::TraceLayer;

use crate::config::AppConfig;
use crate::storage::Db;

pub use limits::{MetricsAccess, ServerLimits};
pub use openapi::ApiDoc;
pub use withdrawals::request_fingerprint;

/// Everything a handler needs, cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

struct Inner {
    db: Db,
    config: AppConfig,
    /// The provider and breaker, when this process has them (operators check provider
    /// references against it and read breaker state).
    gateway: Option<crate::provider::Gateway>,
}

impl AppState {
    pub fn new(db: Db, config: AppConfig) -> Self {
        Self(Arc::new(Inner { db, config, gateway: None }))
    }

    pub fn with_gateway(db: Db, config: AppConfig, gateway: crate::provider::Gateway) -> Self {
        Self(Arc::new(Inner { db, config, gateway: Some(gateway) }))
    }

    pub fn gateway(&self) -> Option<&crate::provider::Gateway> {
        self.0.gateway.as_ref()
    }

    pub fn db(&self) -> &Db {
        &self.0.db
    }

    pub fn config(&self) -> &AppConfig {
        &self.0.config
    }

    /// The operator core's context: this process's database, settings and provider.
    pub fn ops(&self) -> crate::ops::Ops<'_> {
        crate::ops::Ops::new(&self.0.db, &self.0.config, self.0.gateway.as_ref())
    }
}

/// What a `--metrics-bind` listener serves: `/metrics` (with the token when `METRICS_TOKEN` is
/// set) and `/healthz`, so a worker-only process's breaker, job and provider metrics can be
/// scraped, and an API process's metrics kept off the customer port.
pub async fn serve_metrics(
    listener: TcpListener,
    limits: &ServerLimits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    crate::metrics::install();
    let router = limits.bind_metrics().route(Router::new().route("/healthz", axum::routing::get(health::healthz)));
    let router = limits::with_request_timeout(router, limits.request_timeout());
    limits::serve_router(listener, router, limits, shutdown).await
}

/// The complete application router, without `/metrics` and with the default request timeout.
pub fn app(state: AppState) -> Router {
    app_with(state, &ServerLimits::default(), &MetricsAccess::Hidden)
}

/// The complete application router: `limits` gives the request timeout, `metrics` who may read
/// `/metrics` on this port.
pub fn app_with(state: AppState, limits: &ServerLimits, metrics: &MetricsAccess) -> Router {
    let max_body = state.config().max_body_bytes;
    crate::metrics::install();
    let router = Router::new()
        .merge(withdrawals::router())
        .merge(balances::router())
        .merge(health::router())
        .merge(openapi::router())
        .merge(ops::router())
        .merge(crate::console::router());
    let router = metrics
        .route(router)
        .fallback(|| async { error::ApiError::not_found() })
        .layer(DefaultBodyLimit::max(max_body));
    limits::with_request_timeout(router, limits.request_timeout())
        .layer(TraceLayer::new_for_http())
        .layer(axum::middleware::from_fn(correlation::middleware))
        .with_state(state)
}

/// Serves the app with the default [`ServerLimits`] and no `/metrics` (see [`serve_with`]).
pub async fn serve(listener: TcpListener, state: AppState, shutdown: CancellationToken) -> std::io::Result<()> {
    serve_with(listener, state, &ServerLimits::default(), &MetricsAccess::Hidden, shutdown).await
}

/// Serves the app until `shutdown` is cancelled, then lets in-flight requests finish. Every
/// connection gets the header-read and idle timeouts and counts against the connection cap of
/// `limits`, every request its request timeout; accepted connections get `TCP_NODELAY` (an answer
/// is sent at once, not held back by Nagle's algorithm waiting for the client's acknowledgement).
pub async fn serve_with(
    listener: TcpListener,
    state: AppState,
    limits: &ServerLimits,
    metrics: &MetricsAccess,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    limits::serve_router(listener, app_with(state, limits, metrics), limits, shutdown).await
}
