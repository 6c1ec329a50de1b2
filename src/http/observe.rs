//! HTTP metrics (issue 33): every request a router built by [`super::layered`] answers is counted
//! in `http_requests_total{route,method,status}` and timed in
//! `http_request_duration_seconds{route,method}` ([`crate::metrics::http_request`]), and the
//! customer API's documented routes exist from zero ([`documented_routes`]).
//!
//! Choices:
//! - `route` is the template axum matched ([`MatchedPath`], e.g. `/v1/withdrawals/{id}`), never
//!   the raw path: an id in a label would make one series per withdrawal. `Router::layer` wraps
//!   each route's handler, so its layers run *after* routing and the template is in the request's
//!   extensions; the 404 fallback matched no route and counts as
//!   [`crate::metrics::HTTP_ROUTE_UNMATCHED`] (tested in `tests/api/http_metrics.rs`).
//! - `method` is a standard method's name, anything else `other` (a client may send any token).
//! - The duration runs from the request entering the route's layers to the response's head (the
//!   request timeout's 503 included; a streamed body's transfer is not).
//! - A request whose client went away before the answer (the server drops the handler's future)
//!   is counted with status `499` ("client closed request", as nginx logs it) and its time until
//!   then, so the slow requests clients gave up on stay in the count and the latency. One whose
//!   handler panicked (no answer is sent: the connection closes) is counted as `500`.
//! - `/metrics` on the API port is counted like any route (`route="/metrics"`); the listener of
//!   `--metrics-bind` is not built by `layered` and counts nothing.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use utoipa::OpenApi;

use crate::metrics;

/// The methods counted by name; any other is `other`.
static METHODS: [Method; 9] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
    Method::HEAD,
    Method::OPTIONS,
    Method::CONNECT,
    Method::TRACE,
];

/// The `status` of a request whose client left before it was answered.
pub const CLIENT_CLOSED: &str = "499";

/// The `status` of a request whose handler panicked.
const PANICKED: &str = "500";

fn method_label(method: &Method) -> &'static str {
    METHODS.iter().find(|known| *known == method).map_or("other", Method::as_str)
}

/// Counts and times the request (added to every route by [`super::layered`]).
pub async fn middleware(request: Request, next: Next) -> Response {
    let mut pending = Pending {
        route: request.extensions().get::<MatchedPath>().cloned(),
        method: method_label(request.method()),
        started: Instant::now(),
        status: None,
    };
    let response = next.run(request).await;
    pending.status = Some(response.status());
    response
}

/// A request on its way: recorded when it is answered, or when its future is dropped unanswered.
struct Pending {
    route: Option<MatchedPath>,
    method: &'static str,
    started: Instant,
    status: Option<StatusCode>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let route = self.route.as_ref().map_or(metrics::HTTP_ROUTE_UNMATCHED, MatchedPath::as_str);
        let unanswered = if std::thread::panicking() { PANICKED } else { CLIENT_CLOSED };
        let status = self.status.as_ref().map_or(unanswered, StatusCode::as_str);
        metrics::http_request(route, self.method, status, self.started.elapsed());
    }
}

/// Every route and method of the customer API's OpenAPI document ([`super::ApiDoc`]): the
/// public contract, a closed set, and what the API alerts read. Their series exist from zero.
pub fn documented_routes() -> Vec<(String, &'static str)> {
    let doc = super::ApiDoc::openapi();
    let mut routes = Vec::new();
    for (path, item) in &doc.paths.paths {
        let operations = [
            ("GET", &item.get),
            ("POST", &item.post),
            ("PUT", &item.put),
            ("DELETE", &item.delete),
            ("PATCH", &item.patch),
            ("HEAD", &item.head),
            ("OPTIONS", &item.options),
            ("TRACE", &item.trace),
        ];
        for (method, operation) in operations {
            if operation.is_some() {
                routes.push((path.clone(), method));
            }
        }
    }
    routes
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::body::Body;
    use axum::routing::get;
    use axum::Router;
    use tower::ServiceExt;

    use super::*;

    /// What `requests` record, through a recorder of this test's own, on a router layered like
    /// the application's.
    fn recorded(requests: Vec<(Method, &'static str)>) -> String {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let router: Router = Router::new()
            .route("/v1/things/{id}", get(|| async { "thing" }))
            .route("/v1/slow", get(std::future::pending::<&'static str>))
            .route("/v1/broken", get(|| async { panic!("a handler bug") as StatusCode }))
            .fallback(|| async { StatusCode::NOT_FOUND })
            .layer(axum::middleware::from_fn(middleware));
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        ::metrics::with_local_recorder(&recorder, || {
            for (method, uri) in requests {
                let request = Request::builder().method(method).uri(uri).body(Body::empty()).unwrap();
                // The slow route never answers: its client gives up. The broken one panics.
                let call =
                    async { tokio::time::timeout(Duration::from_millis(50), router.clone().oneshot(request)).await };
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(call)));
            }
        });
        handle.render()
    }

    #[test]
    fn requests_are_counted_by_route_template_and_the_fallback_as_unmatched() {
        let text = recorded(vec![
            (Method::GET, "/v1/things/th_secret_1"),
            (Method::GET, "/v1/things/th_secret_2"),
            (Method::POST, "/v1/things/th_secret_3"),
            (Method::GET, "/no/such/th_secret_4"),
            (Method::from_bytes(b"BREW").unwrap(), "/v1/things/th_secret_5"),
        ]);
        for line in [
            "http_requests_total{route=\"/v1/things/{id}\",method=\"GET\",status=\"200\"} 2",
            "http_requests_total{route=\"/v1/things/{id}\",method=\"POST\",status=\"405\"} 1",
            "http_requests_total{route=\"unmatched\",method=\"GET\",status=\"404\"} 1",
            "http_requests_total{route=\"/v1/things/{id}\",method=\"other\",status=\"405\"} 1",
            "http_request_duration_seconds_count{route=\"/v1/things/{id}\",method=\"GET\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
        assert!(!text.contains("th_secret"), "a raw path in the labels:\n{text}");
    }

    #[test]
    fn a_request_its_client_gave_up_on_is_counted_as_499_with_its_time() {
        let text = recorded(vec![(Method::GET, "/v1/slow")]);
        assert!(
            text.lines().any(|l| l == "http_requests_total{route=\"/v1/slow\",method=\"GET\",status=\"499\"} 1"),
            "{text}"
        );
        let sum = text
            .lines()
            .find(|l| l.starts_with("http_request_duration_seconds_sum{route=\"/v1/slow\""))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no duration for the abandoned request:\n{text}"));
        assert!(sum >= 0.05, "the time until the client left: {sum}");
    }

    #[test]
    fn a_request_whose_handler_panicked_is_counted_as_500() {
        let text = recorded(vec![(Method::GET, "/v1/broken")]);
        assert!(
            text.lines().any(|l| l == "http_requests_total{route=\"/v1/broken\",method=\"GET\",status=\"500\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn the_documented_routes_are_the_customer_api_s_with_their_methods() {
        let routes = documented_routes();
        for wanted in [("/v1/withdrawals", "POST"), ("/v1/withdrawals", "GET"), ("/v1/withdrawals/{id}", "GET")] {
            assert!(routes.iter().any(|(p, m)| (p.as_str(), *m) == wanted), "{wanted:?} not in {routes:?}");
        }
        assert!(routes.iter().all(|(p, _)| !p.starts_with("/ops")), "{routes:?}");
    }
}
