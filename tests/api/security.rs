//! Listener hardening (issue 17): the header-read, idle and request timeouts and the connection
//! cap on the API and on the provider mock, over raw sockets; and who may read `/metrics`.
//!
//! The listener tests run once (no storage is involved: the app is on SQLite); the ones that go
//! through the app's routes run on both backends. Timeouts are shortened; a client that sleeps or
//! stays silent here *is* the slow client, every wait for the server is a deadline.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use withdrawals::config::AppConfig;
use withdrawals::http::{AppState, MetricsAccess, ServerLimits};
use withdrawals::startup;

use crate::both_backends;
use crate::harness::{problem_code, Backend, TestApp, METRICS_TOKEN};

both_backends!(
    metrics_on_the_api_port_answer_only_the_metrics_token,
    without_a_metrics_token_the_api_port_has_no_metrics,
    with_a_metrics_bind_metrics_are_served_only_there,
    a_request_slower_than_the_request_timeout_is_answered_503_request_timeout,
);

const HEADER: Duration = Duration::from_millis(300);
const IDLE: Duration = Duration::from_millis(1_200);
/// An idle timeout well past `HEADER + SLACK`, to tell the two timeouts apart.
const LONG_IDLE: Duration = Duration::from_secs(15);
/// Slack for scheduling on a busy machine: a close must come within the timeout plus this.
const SLACK: Duration = Duration::from_secs(3);

fn limits(max_connections: usize, idle: Duration) -> ServerLimits {
    ServerLimits {
        header_timeout_ms: HEADER.as_millis() as u64,
        idle_timeout_ms: idle.as_millis() as u64,
        max_connections,
        ..ServerLimits::default()
    }
}

/// Serves `app`'s state on a new port with `limits` and `metrics`; stops with the app.
async fn serve(app: &TestApp, limits: ServerLimits, metrics: MetricsAccess) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = AppState::with_gateway(app.db.clone(), AppConfig::default(), app.gateway.clone());
    let stop = app.shutdown_token();
    tokio::spawn(async move { startup::serve_with(listener, state, &limits, &metrics, stop).await });
    addr
}

/// The API on SQLite with the shortened listener limits.
async fn api(max_connections: usize, idle: Duration) -> (TestApp, SocketAddr) {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let addr = serve(&app, limits(max_connections, idle), MetricsAccess::Hidden).await;
    (app, addr)
}

/// The provider mock with the same shortened listener limits.
async fn mock(max_connections: usize, idle: Duration) -> provider_mocks::RunningMock {
    provider_mocks::spawn(provider_mocks::MockConfig {
        listener: provider_mocks::ListenerSettings {
            header_timeout_ms: HEADER.as_millis() as u64,
            idle_timeout_ms: idle.as_millis() as u64,
            max_connections,
        },
        ..provider_mocks::MockConfig::default()
    })
    .await
    .unwrap()
}

/// A GET both servers answer quickly (the mock's admin routes need no credential).
fn request(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n")
}

const API_PATH: &str = "/healthz";
const MOCK_PATH: &str = "/__admin/faults";

/// Reads one HTTP/1.1 response (headers and a `Content-Length` body); its status and body.
async fn read_response(stream: &mut TcpStream) -> (u16, String) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
            let length: usize = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
                .unwrap_or(0);
            while buf.len() < end + 4 + length {
                let n = stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "connection closed mid-body");
                buf.extend_from_slice(&chunk[..n]);
            }
            return (status, String::from_utf8_lossy(&buf[end + 4..end + 4 + length]).to_string());
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed before a response: {}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A request on a new or kept-alive connection, answered within the deadline.
async fn exchange(stream: &mut TcpStream, path: &str) -> u16 {
    stream.write_all(request(path).as_bytes()).await.unwrap();
    tokio::time::timeout(SLACK, read_response(stream)).await.expect("an answer in time").0
}

/// Waits until the server closes `stream` (EOF or reset) and says how long that took from
/// `since`; fails if it is still open after `within` or if the server sends anything.
async fn closed_by_server(stream: &mut TcpStream, since: Instant, within: Duration) -> Duration {
    let mut chunk = [0u8; 1024];
    match tokio::time::timeout_at(since + within, stream.read(&mut chunk)).await {
        Err(_) => panic!("the server did not close the connection within {within:?}"),
        Ok(Ok(0)) | Ok(Err(_)) => since.elapsed(),
        Ok(Ok(n)) => panic!("the server answered instead of closing: {}", String::from_utf8_lossy(&chunk[..n])),
    }
}

/// Sends half a request head and stops: the server closes after the header timeout, unanswered
/// (`addr` has an idle timeout of [`LONG_IDLE`], which must not be the one that applies).
async fn half_a_head_is_cut_after_the_header_timeout(addr: SocketAddr) {
    // The server's clock starts when it accepts, which is before `connect` returns here.
    let since = Instant::now();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ").await.unwrap();
    let took = closed_by_server(&mut stream, since, HEADER + SLACK).await;
    assert!(took >= HEADER, "closed after {took:?}, before the header timeout {HEADER:?}");
}

/// After one answered request, a silent keep-alive connection lives past the header timeout and
/// is closed after the idle timeout.
async fn an_idle_connection_is_closed_after_the_idle_timeout(addr: SocketAddr, path: &str) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    assert_eq!(exchange(&mut stream, path).await, 200);
    let since = Instant::now();
    let took = closed_by_server(&mut stream, since, IDLE + SLACK).await;
    // The idle clock starts when the answer has been written, a moment before it was read here.
    assert!(took + Duration::from_millis(150) >= IDLE, "closed after {took:?}, before the idle timeout {IDLE:?}");
}

/// Between requests, the next request's head is held to the header timeout from its first byte,
/// not to the idle timeout (`addr` has an idle timeout of [`LONG_IDLE`]).
async fn a_stalled_second_head_is_cut_after_the_header_timeout(addr: SocketAddr, path: &str) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    assert_eq!(exchange(&mut stream, path).await, 200);
    // Stay idle for longer than the header timeout: allowed between requests.
    tokio::time::sleep(HEADER * 2).await;
    let since = Instant::now();
    stream.write_all(b"GET / HTTP/1.1\r\nHost: loc").await.unwrap();
    // Under the idle timeout the close would come seconds later (LONG_IDLE - 2 × HEADER).
    let took = closed_by_server(&mut stream, since, HEADER + SLACK).await;
    assert!(took >= HEADER, "closed after {took:?}, before the header timeout");
}

/// With a cap of two, a third connection is not served until one of the first two closes.
async fn a_third_connection_waits_for_a_free_slot(addr: SocketAddr, path: &str) {
    let mut first = TcpStream::connect(addr).await.unwrap();
    let mut second = TcpStream::connect(addr).await.unwrap();
    assert_eq!(exchange(&mut first, path).await, 200);
    assert_eq!(exchange(&mut second, path).await, 200);

    // The kernel completes the handshake (listen backlog); the server does not accept it.
    let mut third = TcpStream::connect(addr).await.unwrap();
    third.write_all(request(path).as_bytes()).await.unwrap();
    let mut chunk = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(500), third.read(&mut chunk)).await;
    assert!(early.is_err(), "the third connection was served while two were open: {early:?}");

    drop(first);
    let (status, _) = tokio::time::timeout(SLACK, read_response(&mut third)).await.expect("served once a slot is free");
    assert_eq!(status, 200);
    // The second is still served on its kept-alive connection.
    assert_eq!(exchange(&mut second, path).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_closes_a_connection_whose_headers_stall_after_the_header_timeout() {
    let (_app, addr) = api(16, LONG_IDLE).await;
    half_a_head_is_cut_after_the_header_timeout(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_mock_closes_a_connection_whose_headers_stall_after_the_header_timeout() {
    let mock = mock(16, LONG_IDLE).await;
    half_a_head_is_cut_after_the_header_timeout(mock.addr()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_holds_a_later_request_head_to_the_header_timeout_from_its_first_byte() {
    let (_app, addr) = api(16, LONG_IDLE).await;
    a_stalled_second_head_is_cut_after_the_header_timeout(addr, API_PATH).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_closes_an_idle_keep_alive_connection_after_the_idle_timeout() {
    let (_app, addr) = api(16, IDLE).await;
    an_idle_connection_is_closed_after_the_idle_timeout(addr, API_PATH).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_mock_closes_an_idle_keep_alive_connection_after_the_idle_timeout() {
    let mock = mock(16, IDLE).await;
    an_idle_connection_is_closed_after_the_idle_timeout(mock.addr(), MOCK_PATH).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_serves_a_connection_over_its_cap_only_when_another_closes() {
    let (_app, addr) = api(2, LONG_IDLE).await;
    a_third_connection_waits_for_a_free_slot(addr, API_PATH).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_mock_serves_a_connection_over_its_cap_only_when_another_closes() {
    let mock = mock(2, LONG_IDLE).await;
    a_third_connection_waits_for_a_free_slot(mock.addr(), MOCK_PATH).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_mock_has_no_request_timeout_so_a_held_request_is_not_cut() {
    use provider_mocks::{FaultConfig, FaultEffect, FaultRule, RouteMatch};
    // A lookup held for longer than the header and idle timeouts together is still held, then
    // dropped by the fault itself (no answer), not by a listener timeout.
    let mock = mock(16, IDLE).await;
    let hold = HEADER + IDLE + Duration::from_millis(300);
    mock.set_faults(FaultConfig {
        rules: vec![FaultRule::new(
            RouteMatch::Lookup,
            FaultEffect::TimeoutBeforeCommit { ms: hold.as_millis() as u64 },
        )],
    });
    let mut stream = TcpStream::connect(mock.addr()).await.unwrap();
    let since = Instant::now();
    stream.write_all(request("/v1/transfers?idempotency_key=k").as_bytes()).await.unwrap();
    let took = closed_by_server(&mut stream, since, hold + SLACK).await;
    assert!(took >= hold, "the held request was cut after {took:?}, before its {hold:?} hold");
}

async fn metrics_on_the_api_port_answer_only_the_metrics_token(app: TestApp) {
    let (status, code, _) = problem_code(app.client.get(app.url("/metrics")).send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (401, "unauthorized"), "no token");
    let wrong = app.client.get(app.url("/metrics")).bearer_auth("test-metrics-token-0123456788").send().await.unwrap();
    assert_eq!(wrong.headers().get("www-authenticate").map(|v| v.to_str().unwrap()), Some("Bearer"));
    let (status, code, _) = problem_code(wrong).await;
    assert_eq!((status, code.as_str()), (401, "unauthorized"), "a wrong token");
    let prefix = app.client.get(app.url("/metrics")).bearer_auth(&METRICS_TOKEN[..10]).send().await.unwrap();
    assert_eq!(prefix.status(), 401, "a prefix of the token");

    withdrawals::gauges::refresh_database_gauges(&app.db).await.unwrap();
    let response = app.metrics().send().await.unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.contains("# TYPE dead_letters_open gauge"), "{text}");
}

async fn without_a_metrics_token_the_api_port_has_no_metrics(app: TestApp) {
    let addr = serve(&app, ServerLimits::default(), ServerLimits::default().api_metrics(false)).await;
    for token in [None, Some(METRICS_TOKEN)] {
        let mut request = app.client.get(format!("http://{addr}/metrics"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let (status, code, _) = problem_code(request.send().await.unwrap()).await;
        assert_eq!((status, code.as_str()), (404, "not_found"), "token {token:?}");
    }
    let health = app.client.get(format!("http://{addr}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

/// The real `serve` command with `--metrics-bind` and a token: the API port has no `/metrics`,
/// the metrics bind has them, for the token only.
async fn with_a_metrics_bind_metrics_are_served_only_there(app: TestApp) {
    let free_port = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (api_port, metrics_port) = (free_port(), free_port());
    let token = "a-metrics-token-for-the-bind";
    let serve = std::process::Command::new(env!("CARGO_BIN_EXE_withdrawals"))
        .args(["serve", "--role", "api", "--bind", &format!("127.0.0.1:{api_port}")])
        .args(["--metrics-bind", &format!("127.0.0.1:{metrics_port}")])
        .env("DATABASE_URL", &app.database_url)
        // An API-only process pays nothing; on PostgreSQL it names its provider (SPEC sandbox guard).
        .env("PROVIDER_URL", app.provider.mock.url())
        .env("PROVIDER_API_KEY", "test-provider-key")
        .env("METRICS_TOKEN", token)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _serve = KillOnDrop(serve);
    let client = app.client.clone();
    for port in [api_port, metrics_port] {
        app.eventually("the process listening", Duration::from_secs(30), || {
            let request = client.get(format!("http://127.0.0.1:{port}/healthz"));
            async move { request.send().await.ok().filter(|r| r.status() == 200) }
        })
        .await;
    }
    let metrics_url = format!("http://127.0.0.1:{metrics_port}/metrics");
    // The database gauges appear once the process's first refresh has run.
    app.eventually("the database gauges on the metrics bind", Duration::from_secs(30), || {
        let request = client.get(&metrics_url).bearer_auth(token);
        async move {
            let response = request.send().await.ok().filter(|r| r.status() == 200)?;
            response.text().await.ok().filter(|text| text.contains("# TYPE withdrawals_by_state gauge"))
        }
    })
    .await;
    assert_eq!(client.get(&metrics_url).send().await.unwrap().status(), 401, "the metrics bind without the token");
    let wrong = client.get(&metrics_url).bearer_auth("a-metrics-token-for-the-binD").send().await.unwrap();
    assert_eq!(wrong.status(), 401, "the metrics bind with a wrong token");
    let api_metrics = client.get(format!("http://127.0.0.1:{api_port}/metrics")).bearer_auth(token).send().await;
    let (status, code, _) = problem_code(api_metrics.unwrap()).await;
    assert_eq!((status, code.as_str()), (404, "not_found"), "the API port, even with the token");
}

/// A child process this test started, killed when the test ends (passing or not).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A request whose body never finishes arriving holds its handler: after the request timeout it
/// is abandoned and answered 503 `request_timeout`, problem+json.
async fn a_request_slower_than_the_request_timeout_is_answered_503_request_timeout(app: TestApp) {
    let timeout = Duration::from_millis(500);
    let limits = ServerLimits { request_timeout_ms: timeout.as_millis() as u64, ..ServerLimits::default() };
    let addr = serve(&app, limits, MetricsAccess::Hidden).await;
    let alice = app.customer("100.00").await;

    let mut stream = TcpStream::connect(addr).await.unwrap();
    let since = Instant::now();
    let head = format!(
        "POST /v1/withdrawals HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\nIdempotency-Key: slow\r\n\
         Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{{\"amount\":",
        alice.api_key
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let (status, body) = tokio::time::timeout(timeout + SLACK, read_response(&mut stream)).await.expect("an answer");
    let took = since.elapsed();
    assert_eq!(status, 503, "{body}");
    let problem: withdrawals::http::error::Problem = serde_json::from_str(&body).unwrap();
    assert_eq!(problem.code, "request_timeout", "{body}");
    assert!(took >= timeout, "answered after {took:?}, before the request timeout");

    // Nothing was created, and the same key works afterwards.
    let created = app.post_withdrawal(&alice, "slow", &crate::harness::withdrawal_body("10.00")).send().await.unwrap();
    assert_eq!(created.status(), 201);
    app.assert_ledger_invariant().await;
}

#[test]
fn the_listener_settings_parse_with_their_defaults_and_refuse_nonsense() {
    use clap::{CommandFactory, Parser};
    use withdrawals::cli::{Cli, Command};
    Cli::command().debug_assert();
    let serve = |args: &[&str]| Cli::try_parse_from(["withdrawals", "serve"].iter().chain(args));
    let Command::Serve(args) = serve(&[]).unwrap().command else { panic!("serve") };
    let defaults = ServerLimits::default();
    assert_eq!(
        (args.server.header_timeout_ms, args.server.request_timeout_ms, args.server.idle_timeout_ms),
        (defaults.header_timeout_ms, defaults.request_timeout_ms, defaults.idle_timeout_ms)
    );
    assert_eq!((args.server.max_connections, args.server.metrics_token.is_none()), (1024, true));
    assert_eq!(
        (defaults.header_timeout_ms, defaults.request_timeout_ms, defaults.idle_timeout_ms),
        (10_000, 30_000, 60_000)
    );

    let Command::Serve(args) =
        serve(&["--http-max-connections", "2", "--metrics-token", "0123456789abcdef"]).unwrap().command
    else {
        panic!("serve")
    };
    assert_eq!(args.server.max_connections, 2);
    assert!(!format!("{args:?}").contains("0123456789abcdef"), "the token is never in Debug output");
    for bad in [
        &["--http-header-timeout-ms", "0"][..],
        &["--http-max-connections", "0"][..],
        &["--metrics-token", "short"][..],
    ] {
        assert!(serve(bad).is_err(), "{bad:?} is refused");
    }
}
