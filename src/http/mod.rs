//! The HTTP surface: the customer API of SPEC §3, health checks and the OpenAPI document.
//!
//! Each resource module owns its `router()`; [`app`] merges them with the operator API
//! ([`crate::ops`]) and the operator console ([`crate::console`]) and adds the layers every route
//! shares (correlation id, tracing, body limit, problem+json fallbacks).

mod auth;
pub use auth::bearer;
mod balances;
pub mod correlation;
pub mod error;
mod health;
mod openapi;
pub mod withdrawals;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::serve::ListenerExt;
use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_http::trace::TraceLayer;

use crate::config::AppConfig;
use crate::storage::Db;

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
}

/// What a worker-only process serves (`--metrics-bind`): `/metrics` and `/healthz`, so its
/// breaker, job and provider metrics can be scraped.
pub async fn serve_metrics(listener: TcpListener, shutdown: CancellationToken) -> std::io::Result<()> {
    crate::metrics::install();
    let router = Router::new()
        .route("/metrics", axum::routing::get(|| async { crate::metrics::install().render() }))
        .route("/healthz", axum::routing::get(health::healthz));
    axum::serve(listener, router).with_graceful_shutdown(shutdown.cancelled_owned()).await
}

/// The complete application router.
pub fn app(state: AppState) -> Router {
    let max_body = state.config().max_body_bytes;
    crate::metrics::install();
    Router::new()
        .merge(withdrawals::router())
        .merge(balances::router())
        .merge(health::router())
        .merge(openapi::router())
        .merge(crate::ops::router())
        .merge(crate::console::router())
        .route("/metrics", axum::routing::get(|| async { crate::metrics::install().render() }))
        .fallback(|| async { error::ApiError::not_found() })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(TraceLayer::new_for_http())
        .layer(axum::middleware::from_fn(correlation::middleware))
        .with_state(state)
}

/// Serves the app until `shutdown` is cancelled, then lets in-flight requests finish. Accepted
/// connections get `TCP_NODELAY`: an answer is sent at once, not held back by Nagle's algorithm
/// waiting for the client's (possibly delayed) acknowledgement.
pub async fn serve(listener: TcpListener, state: AppState, shutdown: CancellationToken) -> std::io::Result<()> {
    let listener = listener.tap_io(|tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(error = %err, "could not set TCP_NODELAY on an accepted connection");
        }
    });
    axum::serve(listener, app(state)).with_graceful_shutdown(shutdown.cancelled_owned()).await
}
