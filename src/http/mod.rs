//! The HTTP surface: the customer API of SPEC §3, health checks and the OpenAPI document.
//!
//! Each resource module owns its `router()`; [`router`] merges the customer routes, and
//! [`layered`] adds the layers every route of a listener shares (HTTP metrics, correlation id,
//! tracing, request timeout, body limit, problem+json fallbacks); [`observe`] owns the HTTP
//! metrics' middleware. [`AppState`] is what every handler gets, the
//! operator API's and the console's too. [`limits`] owns the listeners' timeouts, connection cap
//! and `/metrics` access. [`ops`] holds the operator API's thin handlers over the operator core
//! ([`crate::ops`]) and its extractors. This module does not know the console: the composition
//! root ([`crate::startup`]) merges it, the customer API and the operator API.

mod auth;
pub use auth::{bearer, public_prefix, AuthGuard};
mod balances;
pub mod correlation;
pub mod error;
mod health;
pub mod input;
pub mod limits;
mod notifications;
pub mod observe;
mod openapi;
pub mod ops;
pub mod webhooks;
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
    gateways: Option<crate::provider::Gateways>,
    /// Failed authentication, counted and slowed per source (one budget for every surface).
    auth: AuthGuard,
}

impl AppState {
    pub fn new(db: Db, config: AppConfig) -> Self {
        let auth = AuthGuard::new(config.auth_failures);
        Self(Arc::new(Inner { db, config, gateways: None, auth }))
    }

    /// The API of a process that reaches the providers (one [`crate::provider::Gateway`] converts).
    pub fn with_gateway(db: Db, config: AppConfig, gateways: impl Into<crate::provider::Gateways>) -> Self {
        let auth = AuthGuard::new(config.auth_failures);
        Self(Arc::new(Inner { db, config, gateways: Some(gateways.into()), auth }))
    }

    pub fn auth_guard(&self) -> &AuthGuard {
        &self.0.auth
    }

    pub fn gateways(&self) -> Option<&crate::provider::Gateways> {
        self.0.gateways.as_ref()
    }

    pub fn db(&self) -> &Db {
        &self.0.db
    }

    pub fn config(&self) -> &AppConfig {
        &self.0.config
    }

    /// The operator core's context: this process's database, settings and provider.
    /// The customer core, for this process's database and settings.
    pub fn customers(&self) -> crate::customer::Customers<'_> {
        crate::customer::Customers { db: &self.0.db, config: &self.0.config }
    }

    pub fn ops(&self) -> crate::ops::Ops<'_> {
        crate::ops::Ops::new(&self.0.db, &self.0.config, self.0.gateways.as_ref())
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

/// The customer API's routes: withdrawals, balances, health checks and the OpenAPI document.
/// The complete application (with the operator API and console) is assembled in
/// [`crate::startup::app`].
pub fn router() -> Router<AppState> {
    Router::new()
        .merge(withdrawals::router())
        .merge(balances::router())
        .merge(notifications::router())
        .merge(health::router())
        .merge(webhooks::router())
        .merge(openapi::router())
}

/// The series the application's routes start at zero (SPEC §9): the HTTP families for every
/// documented route and the provider webhooks' series. Called when the router is built and, by a
/// serving process, before its database gauges first refresh, so a scrape that sees those sees
/// these too.
pub fn series_from_zero(state: &AppState) {
    webhooks::series_from_zero(state);
    let documented = observe::documented_routes();
    crate::metrics::http_routes_known(documented.iter().map(|(route, method)| (route.as_str(), *method)));
}

/// `routes` with what every route shares: `/metrics` as `metrics` allows, the problem+json 404
/// fallback, the body limit, the request timeout of `limits`, tracing, correlation ids, and the
/// HTTP metrics, outermost, so they see every answer (the timeout's 503 included). Each is added
/// with `Router::layer`, which wraps every route's handler (and the fallback), so the layers run
/// after routing and the metrics read the matched route's template ([`observe`]).
pub fn layered(routes: Router<AppState>, state: AppState, limits: &ServerLimits, metrics: &MetricsAccess) -> Router {
    let max_body = state.config().max_body_bytes;
    crate::metrics::install();
    series_from_zero(&state);
    let router = metrics
        .route(routes)
        .fallback(|| async { error::ApiError::not_found() })
        .layer(DefaultBodyLimit::max(max_body));
    limits::with_request_timeout(router, limits.request_timeout())
        .layer(TraceLayer::new_for_http())
        .layer(axum::middleware::from_fn(correlation::middleware))
        .layer(axum::middleware::from_fn(observe::middleware))
        .with_state(state)
}
