//! Failed authentication is counted and slowed (issue 27, finding 6): `auth_failures_total{surface}`
//! for the customer API, the ops API and the console sign-in; and a per-source limit that answers
//! 429 `too_many_auth_failures` with `Retry-After` once a source has spent its budget, before its
//! credential is checked. (The warn line with the key's prefix is checked in the observability
//! binary, which captures the logs.)

use withdrawals::config::{AppConfig, AuthFailureSettings};
use withdrawals::http::error::Problem;

use crate::both_backends;
use crate::console::http_sign_in;
use crate::harness::{read, Backend, TestApp};

both_backends!(
    a_bad_credential_on_each_surface_counts_in_auth_failures_total_for_that_surface,
    missing_credentials_are_refused_but_neither_counted_nor_slowed,
);

mod limited {
    use super::*;

    /// Three failures per source, then one a minute: small enough to spend in a test.
    async fn limited_app(backend: Backend) -> TestApp {
        let config = AppConfig {
            auth_failures: AuthFailureSettings { burst: 3, per_minute: 1, trust_forwarded_for: true },
            ..AppConfig::default()
        };
        TestApp::spawn_with(backend, config).await
    }

    both_backends!(with = limited_app;
        after_a_burst_of_failures_a_source_gets_429_with_retry_after_even_with_a_valid_key,
        a_slowed_source_is_slowed_at_the_console_sign_in_too_and_other_sources_are_not,
    );
}

/// Every sample of a scrape whose line starts with `prefix`.
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok())
}

async fn failures(app: &TestApp) -> [f64; 3] {
    let text = app.metrics().send().await.unwrap().text().await.unwrap();
    ["customer_api", "ops_api", "console"].map(|surface| {
        sample(&text, &format!("auth_failures_total{{surface=\"{surface}\"}}"))
            .unwrap_or_else(|| panic!("no auth_failures_total for {surface} in\n{text}"))
    })
}

/// A well-formed key of an account that exists, with the wrong secret.
fn wrong_secret(key: &str) -> String {
    let (public, _secret) = key.rsplit_once('_').unwrap();
    format!("{public}_{}", "0".repeat(64))
}

/// The counter is process-wide and other scenarios of this binary fail to authenticate at the same
/// time, so each surface is asserted to have grown by at least this scenario's failures: a counter
/// only grows, so that holds whatever runs beside it, and it fails when nothing is counted.
async fn a_bad_credential_on_each_surface_counts_in_auth_failures_total_for_that_surface(app: TestApp) {
    withdrawals::metrics::install();
    let alice = app.customer("10.00").await;
    let viewer = app.operator("viewer").await;
    let before = failures(&app).await;

    for key in [wrong_secret(&alice.api_key), "wdk_not_a_key".to_owned()] {
        let response = app.client.get(app.url("/v1/balances")).bearer_auth(&key).send().await.unwrap();
        assert_eq!(response.status(), 401);
    }
    let ops = app.client.get(app.url("/ops/v1/overview")).bearer_auth(wrong_secret(&viewer)).send().await.unwrap();
    assert_eq!(ops.status(), 401);
    let console = http_sign_in(&app.base_url, &wrong_secret(&viewer), "/ops/overview", false).await;
    assert_eq!(console.status(), 401);

    let after = failures(&app).await;
    for (i, (surface, ours)) in [("customer_api", 2.0), ("ops_api", 1.0), ("console", 1.0)].into_iter().enumerate() {
        assert!(after[i] >= before[i] + ours, "{surface}: {} → {}, {ours} failures made", before[i], after[i]);
    }
}

/// No credential guesses nothing: 401, but no count and no cell of the budget spent.
async fn missing_credentials_are_refused_but_neither_counted_nor_slowed(app: TestApp) {
    let config = AppConfig {
        auth_failures: AuthFailureSettings { burst: 1, per_minute: 1, trust_forwarded_for: false },
        ..AppConfig::default()
    };
    let base = crate::harness::serve_extra(&app, config).await;
    for _ in 0..5 {
        let response = app.client.get(format!("{base}/v1/balances")).send().await.unwrap();
        assert_eq!(response.status(), 401);
    }
    let alice = app.customer("10.00").await;
    let ok = app.client.get(format!("{base}/v1/balances")).bearer_auth(&alice.api_key).send().await.unwrap();
    assert_eq!(ok.status(), 200, "five requests without a key spent no budget");
}

async fn problem(response: reqwest::Response) -> (u16, Option<String>, Problem) {
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    (status, retry_after, read(response).await)
}

async fn after_a_burst_of_failures_a_source_gets_429_with_retry_after_even_with_a_valid_key(app: TestApp) {
    let alice = app.customer("10.00").await;
    let admin = app.operator("admin").await;
    // Successful authentications cost nothing.
    for _ in 0..10 {
        let ok = app.client.get(app.url("/v1/balances")).bearer_auth(&alice.api_key).send().await.unwrap();
        assert_eq!(ok.status(), 200);
    }
    let bad = wrong_secret(&alice.api_key);
    for attempt in 1..=3 {
        let response = app.client.get(app.url("/v1/balances")).bearer_auth(&bad).send().await.unwrap();
        assert_eq!(response.status(), 401, "failure {attempt} of the burst is checked and refused");
    }

    // The budget is spent: the source is not heard, whatever it presents, on every surface.
    let (status, retry_after, body) =
        problem(app.client.get(app.url("/v1/balances")).bearer_auth(&alice.api_key).send().await.unwrap()).await;
    assert_eq!((status, body.code.as_str()), (429, "too_many_auth_failures"), "{body:?}");
    let secs: u64 = retry_after.expect("a Retry-After header").parse().unwrap();
    assert!((1..=60).contains(&secs), "Retry-After {secs} s, one failure a minute");
    let ops = app.client.get(app.url("/ops/v1/overview")).bearer_auth(&admin).send().await.unwrap();
    let (status, retry_after, body) = problem(ops).await;
    assert_eq!((status, body.code.as_str()), (429, "too_many_auth_failures"), "the ops API shares the budget");
    assert!(retry_after.is_some());
}

async fn a_slowed_source_is_slowed_at_the_console_sign_in_too_and_other_sources_are_not(app: TestApp) {
    let viewer = app.operator("viewer").await;
    let bad = wrong_secret(&viewer);
    for attempt in 1..=3 {
        let response = http_sign_in(&app.base_url, &bad, "/ops/overview", false).await;
        assert_eq!(response.status(), 401, "failed sign-in {attempt}");
    }
    let slowed = http_sign_in(&app.base_url, &viewer, "/ops/overview", false).await;
    assert_eq!(slowed.status(), 429, "the right token from a slowed source is not even checked");
    assert!(slowed.headers().get("retry-after").is_some());

    // Another client behind the trusted proxy is another source, with its own budget.
    let other = app
        .client
        .get(app.url("/ops/v1/overview"))
        .bearer_auth(&viewer)
        .header("x-forwarded-for", "203.0.113.9, 198.51.100.7")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
}
