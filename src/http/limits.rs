//! What every listener of a `withdrawals` process enforces (issue 17): the header-read, request
//! and idle timeouts, the connection cap, and who may read `/metrics`. It owns the settings
//! ([`ServerLimits`], flattened into `serve` and `worker`), the accept loop every router is served
//! with ([`serve_router`], over hyper-util with the `http_guard` listener), the request-timeout
//! layer and the `/metrics` route with its access rule ([`MetricsAccess`]).
//!
//! Choices:
//! - A request that takes longer than `HTTP_REQUEST_TIMEOUT_MS` (reading its body included) is
//!   abandoned and answered **503** `request_timeout` (problem+json). Not 408: 408 says the
//!   *client* was too slow to send its request; here the server did not finish in time, and its
//!   outcome is unknown. A withdrawal's creation is told to retry with the same `Idempotency-Key`
//!   (a replay is answered from the stored response; an abandoned request rolled back or
//!   committed, never half); any other route, which takes no key, is told to read the state it
//!   meant to change before repeating ([`timeout_advice`]). Abandoning a handler is like a crash at that point, which every path already survives.
//!   30 s is above the provider client's 10 s timeout, so routes that call the provider answer
//!   with their own error first.
//! - Over the connection cap, new connections wait in the listen backlog (not refused): a burst
//!   is served a moment later, and the process never runs out of file descriptors.
//! - `/metrics` on the customer API port: absent (404, like any unknown path) unless
//!   `METRICS_TOKEN` is set and `METRICS_BIND` is not; with the token it answers only
//!   `Authorization: Bearer <token>` (401 otherwise, compared in constant time). With
//!   `METRICS_BIND`, metrics are served only there — with the token too when one is set, openly
//!   otherwise (bind it to an interface only Prometheus reaches).

use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::error::ApiError;

/// The shortest `METRICS_TOKEN` accepted.
pub const MIN_METRICS_TOKEN_LEN: usize = 16;

/// Timeouts, the connection cap and the metrics token of this process's listeners.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerLimits {
    /// A request's line and headers must arrive within this many milliseconds of the connection
    /// being accepted (or of the first byte of a later request on it); otherwise it is closed.
    #[arg(long = "http-header-timeout-ms", env = "HTTP_HEADER_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_ms: u64,
    /// A request not answered within this many milliseconds (its body read included) is abandoned
    /// and answered 503 `request_timeout`.
    #[arg(long = "http-request-timeout-ms", env = "HTTP_REQUEST_TIMEOUT_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub request_timeout_ms: u64,
    /// A keep-alive connection waiting this many milliseconds for its next request is closed.
    #[arg(long = "http-idle-timeout-ms", env = "HTTP_IDLE_TIMEOUT_MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_ms: u64,
    /// Open connections per listener at most; more wait to be accepted until one closes.
    #[arg(id = "http_max_connections", long = "http-max-connections", env = "HTTP_MAX_CONNECTIONS", default_value_t = 1024,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_connections: usize,
    /// Bearer token Prometheus must send for `/metrics` (at least 16 characters). Without it, the
    /// API port does not serve `/metrics`; see also `--metrics-bind`.
    #[arg(long = "metrics-token", env = "METRICS_TOKEN", hide_env_values = true, value_parser = parse_token)]
    pub metrics_token: Option<SecretString>,
}

fn parse_token(value: &str) -> Result<SecretString, String> {
    if value.trim().len() < MIN_METRICS_TOKEN_LEN {
        return Err(format!("must be at least {MIN_METRICS_TOKEN_LEN} characters"));
    }
    Ok(SecretString::from(value.trim()))
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            header_timeout_ms: 10_000,
            request_timeout_ms: 30_000,
            idle_timeout_ms: 60_000,
            max_connections: 1024,
            metrics_token: None,
        }
    }
}

impl ServerLimits {
    /// What the listener itself enforces.
    pub fn listener(&self) -> http_guard::Limits {
        http_guard::Limits {
            header_timeout: Duration::from_millis(self.header_timeout_ms.max(1)),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms.max(1)),
            max_connections: self.max_connections.max(1),
        }
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms.max(1))
    }

    /// `/metrics` on the API port: nowhere when metrics have their own bind, else only with the
    /// token, else nowhere.
    pub fn api_metrics(&self, separate_bind: bool) -> MetricsAccess {
        match (&self.metrics_token, separate_bind) {
            (Some(token), false) => MetricsAccess::Token(token.clone()),
            _ => MetricsAccess::Hidden,
        }
    }

    /// `/metrics` on `METRICS_BIND`: with the token when one is set, else to anyone who reaches it.
    pub fn bind_metrics(&self) -> MetricsAccess {
        match &self.metrics_token {
            Some(token) => MetricsAccess::Token(token.clone()),
            None => MetricsAccess::Open,
        }
    }
}

/// Who may read `/metrics` on one listener.
#[derive(Clone, Debug)]
pub enum MetricsAccess {
    /// Not served: 404 like any unknown path.
    Hidden,
    /// Served to anyone (a metrics bind without a token).
    Open,
    /// Served to `Authorization: Bearer <token>`; 401 otherwise.
    Token(SecretString),
}

impl MetricsAccess {
    pub fn token(token: &str) -> Self {
        MetricsAccess::Token(SecretString::from(token))
    }

    /// Adds `/metrics` to `router` unless it is hidden.
    pub(crate) fn route<S: Clone + Send + Sync + 'static>(&self, router: Router<S>) -> Router<S> {
        let expected = match self {
            MetricsAccess::Hidden => return router,
            MetricsAccess::Open => None,
            MetricsAccess::Token(token) => Some(Sha256::digest(token.expose_secret().as_bytes())),
        };
        router.route(
            "/metrics",
            axum::routing::get(move |headers: HeaderMap| async move {
                if let Some(expected) = expected {
                    let presented = presented_bearer(&headers).unwrap_or_default();
                    let matches: bool = Sha256::digest(presented.as_bytes()).ct_eq(&expected).into();
                    if !matches {
                        return ApiError::unauthorized().into_response();
                    }
                }
                crate::metrics::install().render().into_response()
            }),
        )
    }
}

fn presented_bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Abandons a request after `timeout` and answers 503 `request_timeout` (see the module notes).
pub(crate) fn with_request_timeout<S: Clone + Send + Sync + 'static>(
    router: Router<S>,
    timeout: Duration,
) -> Router<S> {
    router.layer(
        tower::ServiceBuilder::new()
            .layer(HandleErrorLayer::new(move |method: Method, uri: Uri, err: tower::BoxError| async move {
                timed_out(err, timeout, &method, uri.path())
            }))
            .layer(tower::timeout::TimeoutLayer::new(timeout)),
    )
}

/// What a caller whose request timed out can do: only a withdrawal's creation takes an
/// `Idempotency-Key`; any other route's caller reads the state it meant to change first.
pub(crate) fn timeout_advice(method: &Method, path: &str) -> &'static str {
    if method == Method::POST && path == "/v1/withdrawals" {
        "the request did not complete in time and its outcome is unknown; retry it with the same Idempotency-Key"
    } else if path.starts_with("/ops/") {
        "the request did not complete in time and its outcome is unknown; read the state it meant to change (or the audit log) before repeating it"
    } else {
        "the request did not complete in time and its outcome is unknown; read the state it meant to change before repeating it"
    }
}

fn timed_out(err: tower::BoxError, timeout: Duration, method: &Method, path: &str) -> Response {
    if err.is::<tower::timeout::error::Elapsed>() {
        tracing::warn!(
            timeout_ms = timeout.as_millis() as u64,
            path,
            "request abandoned: it took longer than the request timeout"
        );
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "request_timeout", timeout_advice(method, path))
            .into_response();
    }
    ApiError::Internal(anyhow::anyhow!("request failed: {err}")).into_response()
}

/// Serves `router` on `listener` until `shutdown` is cancelled, with the header and idle timeouts
/// and the connection cap of `limits` (the request timeout is a layer of the router). On cancel it
/// stops accepting, lets in-flight requests finish (idle connections close at once), then returns.
pub async fn serve_router(
    listener: TcpListener,
    router: Router,
    limits: &ServerLimits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let listener = http_guard::GuardedListener::new(listener, limits.listener());
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        // The peer's address reaches the handlers as `ConnectInfo` (the failed-authentication
        // limit is per source).
        let peer = axum::extract::ConnectInfo(accepted.remote_addr());
        let service = tower::ServiceBuilder::new()
            .map_request(move |mut request: axum::extract::Request<_>| {
                request.extensions_mut().insert(peer);
                request
            })
            .service(router.clone());
        let (conn, slot) = accepted.serve(TowerToHyperService::new(service));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(err) = conn.await {
                tracing::debug!(error = %err, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_text_names_the_idempotency_key_only_where_the_route_takes_one() {
        assert!(timeout_advice(&Method::POST, "/v1/withdrawals").contains("Idempotency-Key"));
        for (method, path) in [
            (Method::POST, "/ops/v1/settlement/imports"),
            (Method::POST, "/ops/v1/withdrawals/w_1/complete"),
            (Method::GET, "/v1/withdrawals"),
            (Method::GET, "/ops/v1/settlement/reports"),
        ] {
            let text = timeout_advice(&method, path);
            assert!(!text.contains("Idempotency-Key"), "{method} {path}: {text}");
            assert!(text.contains("outcome is unknown"), "{text}");
        }
    }
}
