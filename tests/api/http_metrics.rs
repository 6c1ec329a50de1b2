//! HTTP metrics (issue 33 item 1): `http_requests_total{route,method,status}` and
//! `http_request_duration_seconds{route,method}` for every route of the application, by route
//! template (never a raw path or id), present from zero.
//!
//! The recorder is process-wide and the other tests of this binary make requests at the same
//! time, so counters are read here only as "grew by at least this test's requests"; what a
//! process exports before any request is read from a `withdrawals serve` process of its own.

use std::time::Duration;

use crate::both_backends;
use crate::harness::TestApp;

both_backends!(
    a_fresh_serve_process_exports_the_http_families_at_zero_and_counts_its_first_request,
    real_requests_are_counted_by_route_template_with_no_raw_id_in_the_metrics,
);

/// The value of the sample whose series (name and labels) is exactly `series`, if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn requests(route: &str, method: &str, status: &str) -> String {
    format!("http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}}")
}

fn latency_count(route: &str, method: &str) -> String {
    format!("http_request_duration_seconds_count{{route=\"{route}\",method=\"{method}\"}}")
}

async fn a_fresh_serve_process_exports_the_http_families_at_zero_and_counts_its_first_request(app: TestApp) {
    let serve =
        app.serve_process(&[("PROVIDER_URL", &app.provider.mock.url()), ("PROVIDER_API_KEY", "test-provider-key")]);
    let (port, metrics_port) = (serve.port, serve.metrics_port);
    let client = app.client.clone();
    let scrape = || {
        let (client, url) = (client.clone(), format!("http://127.0.0.1:{metrics_port}/metrics"));
        async move { client.get(url).send().await.ok()?.text().await.ok() }
    };
    // The metrics listener is not the API's router: scraping it is no request to count.
    let create = latency_count("/v1/withdrawals", "POST");
    let fresh = app
        .eventually("the HTTP families on a fresh process's /metrics", Duration::from_secs(30), || async {
            scrape().await.filter(|text| text.contains(&create))
        })
        .await;

    // Every route and method of the customer API's OpenAPI document, at zero: the latency
    // histogram and the counter with an empty status (statuses are open-ended, as error codes).
    let documented = withdrawals::http::observe::documented_routes();
    assert!(documented.len() >= 10, "{documented:?}");
    for (route, method) in &documented {
        assert_eq!(value(&fresh, &requests(route, method, "")), Some(0.0), "{method} {route} at zero:\n{fresh}");
        assert_eq!(value(&fresh, &latency_count(route, method)), Some(0.0), "{method} {route}'s latency:\n{fresh}");
    }
    let counted: Vec<&str> =
        fresh.lines().filter(|l| l.starts_with("http_requests_total{") && !l.contains("status=\"\"")).collect();
    assert!(counted.is_empty(), "a request counted before any was made: {counted:?}");

    // The process's first request is counted by its template.
    let health = client.get(format!("http://127.0.0.1:{port}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let healthz = requests("/healthz", "GET", "200");
    let after = app
        .eventually("the first request counted", Duration::from_secs(10), || async {
            scrape().await.filter(|text| value(text, &healthz) == Some(1.0))
        })
        .await;
    assert_eq!(value(&after, &latency_count("/healthz", "GET")), Some(1.0), "{after}");
    drop(serve);
}

async fn real_requests_are_counted_by_route_template_with_no_raw_id_in_the_metrics(app: TestApp) {
    let alice = app.customer("100.00").await;
    let operator = app.operator("viewer").await;
    let unknown = uuid::Uuid::new_v4();
    let nowhere = format!("/no-such-page-{}", uuid::Uuid::new_v4().simple());
    let read = |text: &str, series: &str| value(text, series).unwrap_or(0.0);
    let before = app.metrics().send().await.unwrap().text().await.unwrap();

    let created = app.create_withdrawal(&alice, "http-metrics-1", "10.00").await;
    let shown = app.get(&alice, &format!("/v1/withdrawals/{}", created.0)).send().await.unwrap();
    assert_eq!(shown.status(), 200);
    let missing = app.get(&alice, &format!("/v1/withdrawals/{unknown}")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    let unmatched = app.client.get(app.url(&nowhere)).send().await.unwrap();
    assert_eq!(unmatched.status(), 404);
    let ops = app.client.get(app.url(&format!("/ops/v1/withdrawals/{}", created.0))).bearer_auth(&operator);
    assert_eq!(ops.send().await.unwrap().status(), 200);
    let console = app.client.get(app.url("/ops/sign-in")).send().await.unwrap();
    assert_eq!(console.status(), 200);

    let after = app.metrics().send().await.unwrap().text().await.unwrap();
    for (series, what) in [
        (requests("/v1/withdrawals", "POST", "201"), "the create"),
        (requests("/v1/withdrawals/{id}", "GET", "200"), "the read by id"),
        (requests("/v1/withdrawals/{id}", "GET", "404"), "the unknown id"),
        (requests("unmatched", "GET", "404"), "the path no route matched"),
        (requests("/ops/v1/withdrawals/{id}", "GET", "200"), "the ops API read"),
        (requests("/ops/sign-in", "GET", "200"), "the console page"),
        (latency_count("/v1/withdrawals", "POST"), "the create's latency"),
        (latency_count("/v1/withdrawals/{id}", "GET"), "the reads' latency"),
    ] {
        let grew = read(&after, &series) - read(&before, &series);
        let wanted = if series.contains("_count{route=\"/v1/withdrawals/{id}\"") { 2.0 } else { 1.0 };
        assert!(grew >= wanted, "{what}: {series} grew by {grew}, not {wanted}\n{after}");
    }
    let bucket = "http_request_duration_seconds_bucket{route=\"/v1/withdrawals\",method=\"POST\",le=\"+Inf\"}";
    assert!(read(&after, bucket) >= 1.0, "the create's histogram has buckets:\n{after}");
    for raw in [created.0.to_string(), unknown.to_string(), nowhere.clone(), "http-metrics-1".to_owned()] {
        assert!(!after.contains(&raw), "`{raw}` in the metrics text:\n{after}");
    }
    // Every route label is a template or `unmatched`: no label holds a path segment that is an id.
    for line in after.lines().filter(|l| l.starts_with("http_request")) {
        let route = line.split("route=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or_default();
        assert!(
            route == "unmatched" || route.split('/').all(|s| uuid::Uuid::parse_str(s).is_err()),
            "a raw path as route: {line}"
        );
    }
}
