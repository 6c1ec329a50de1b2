//! The shared test harness: a fresh database (a temporary SQLite file, or a new database on the
//! PostgreSQL at `DATABASE_URL`), migrated, and the real app served on 127.0.0.1:0. On PostgreSQL
//! the app runs as production should: migrated as the owner, served as a login role in
//! `withdrawals_app` (no UPDATE, DELETE or TRUNCATE on the append-only tables; README "Scaling").
//!
//! PostgreSQL tests never skip: without `DATABASE_URL` they fail and say how to run them
//! (`scripts/test` starts a throwaway server).

use std::str::FromStr;
use std::sync::Once;

use reqwest::{Client, RequestBuilder, Response};
use rust_decimal::Decimal;
use serde_json::{json, Value};
use sqlx::{Connection, Executor};
use tokio_util::sync::CancellationToken;
use withdrawals::config::AppConfig;
use withdrawals::customer::types::{BalanceList, WithdrawalView};
use withdrawals::domain::{AccountId, Amount, Currency};
use withdrawals::http::error::Problem;
use withdrawals::http::{self, AppState};
use withdrawals::provisioning;
use withdrawals::startup;
use withdrawals::storage::{accounts, Db, PoolSettings};
use withdrawals_tools::store::server;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Generates one `#[tokio::test]` per backend for each scenario `async fn name(app: TestApp)`.
///
/// `both_backends!(a, b)` gives each scenario [`TestApp::spawn`]; `both_backends!(with = app; a, b)`
/// gives it `app(backend).await` instead, for a module whose scenarios need other settings
/// (`app` is any `async fn(Backend) -> TestApp` in scope where the macro is invoked).
/// Runs `$body` with `$conn` a fresh connection to `$url`, on whichever backend it names (for
/// statements a test runs behind the app's back: staging a broken state, reading the catalog).
#[macro_export]
macro_rules! on_connection {
    ($url:expr, |$conn:ident| $body:expr) => {
        if $url.starts_with("sqlite") {
            let options: sqlx::sqlite::SqliteConnectOptions = $url.parse().unwrap();
            let mut $conn = sqlx::SqliteConnection::connect_with(&options.create_if_missing(true)).await.unwrap();
            $body
        } else {
            let mut $conn = sqlx::PgConnection::connect($url).await.unwrap();
            $body
        }
    };
}

#[macro_export]
macro_rules! both_backends {
    (with = $app:expr; $($name:ident),* $(,)?) => {
        /// The app each scenario of this module runs against.
        async fn both_backends_app(backend: $crate::harness::Backend) -> $crate::harness::TestApp {
            ($app)(backend).await
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::both_backends_app($crate::harness::Backend::Sqlite).await).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::both_backends_app($crate::harness::Backend::Postgres).await).await
                }
            )*
        }
    };
    ($($name:ident),* $(,)?) => {
        $crate::both_backends!(with = $crate::harness::TestApp::spawn; $($name),*);
    };
}

fn init_logs() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("TEST_LOG").is_some() {
            withdrawals::telemetry::init(withdrawals::telemetry::LogFormat::Pretty);
        }
    });
}

/// The bearer token the test app's `/metrics` answers to (see [`TestApp::metrics`]).
pub const METRICS_TOKEN: &str = "test-metrics-token-0123456789";

/// A running app on its own database.
pub struct TestApp {
    /// The app's own pool: on PostgreSQL, the service role's ([`TestApp::service_url`]).
    pub db: Db,
    /// The owner's URL: the tests' way behind the app's back (staging a broken state).
    pub database_url: String,
    /// The URL the app connects at: on PostgreSQL a login role in `withdrawals_app`, on SQLite
    /// the same file as `database_url`.
    pub service_url: String,
    pub base_url: String,
    pub client: Client,
    /// The provider mock the app's own gateway (operator checks, breakers) talks to.
    pub provider: ProviderHarness,
    pub gateway: withdrawals::provider::Gateway,
    shutdown: CancellationToken,
    _dir: Option<tempfile::TempDir>,
    /// On PostgreSQL: the server's URL and this test's database, dropped with the app.
    postgres_database: Option<(String, String)>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
        // Each test makes its own database: it goes with the test (SQLite's with its temp dir), so
        // a long session cannot fill the server's disk. A failed test's stays, to be looked at.
        if let Some((server_url, name)) = self.postgres_database.take() {
            if std::thread::panicking() {
                eprintln!("the failed test's database is kept: {name}");
                return;
            }
            // Its own thread and runtime: a drop may run on the test's runtime. Tried a few
            // times, since a busy server may have no connection slot for a moment.
            let dropped = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
                runtime.block_on(async {
                    for _ in 0..20 {
                        match server::drop_database(&server_url, &name).await {
                            Ok(()) => return Some(()),
                            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(250)).await,
                        }
                    }
                    None
                })
            })
            .join();
            if !matches!(dropped, Ok(Some(()))) {
                eprintln!("a test database could not be dropped");
            }
        }
    }
}

/// The database a PostgreSQL test URL names, with the server URL it was made at (`DATABASE_URL`).
fn postgres_database(url: &str) -> Option<(String, String)> {
    if !url.starts_with("postgres") {
        return None;
    }
    let path = url.split('?').next()?;
    let name = path.rsplit('/').next()?.to_owned();
    Some((std::env::var("DATABASE_URL").ok()?, name))
}

/// Dropping a PostgreSQL test app drops its database (a long session once filled the disk with
/// thousands of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_test_app_takes_its_database_with_it() {
    let app = TestApp::spawn(Backend::Postgres).await;
    let (server_url, name) = postgres_database(&app.database_url).expect("a PostgreSQL database");
    let exists = |server_url: String, name: String| async move {
        use sqlx::Connection;
        let mut admin = sqlx::PgConnection::connect(&server_url).await.unwrap();
        let found: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
            .bind(&name)
            .fetch_optional(&mut admin)
            .await
            .unwrap();
        found.is_some()
    };
    app.start_default_worker();
    assert!(exists(server_url.clone(), name.clone()).await, "made for the test");
    drop(app);
    assert!(!exists(server_url, name).await, "dropped with the app, its pools and workers still connected");
}

/// A funded account and its API key.
pub struct Customer {
    pub account_id: AccountId,
    pub api_key: String,
}

pub async fn fresh_database(backend: Backend) -> (String, Option<tempfile::TempDir>) {
    match backend {
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("temp dir");
            let url = format!("sqlite://{}", dir.path().join("test.db").display());
            (url, Some(dir))
        }
        Backend::Postgres => {
            let admin_url = std::env::var("DATABASE_URL").unwrap_or_else(|_| {
                panic!(
                    "PostgreSQL tests need DATABASE_URL=postgres://…; run `scripts/test`, which starts a throwaway server"
                )
            });
            let name = format!("wd_test_{}", uuid::Uuid::new_v4().simple());
            let url = server::create_database(&admin_url, &name).await.expect("create a test database at DATABASE_URL");
            (url, None)
        }
    }
}

/// The login role the PostgreSQL tests' apps connect as, a member of `withdrawals_app`.
pub const SERVICE_ROLE: &str = "withdrawals_test_service";

/// The URL a service connects at on the migrated database at `owner_url`: on PostgreSQL as
/// [`SERVICE_ROLE`] (`server::service_role_url`), on SQLite `owner_url` itself.
pub async fn service_url(owner_url: &str) -> String {
    if owner_url.starts_with("sqlite") {
        return owner_url.to_owned();
    }
    server::service_role_url(owner_url, SERVICE_ROLE).await.expect("the service's login role")
}

/// The default settings, but a failed-authentication budget no scenario spends: every request of a
/// test comes from 127.0.0.1, and the role tables make dozens of refused requests on purpose. The
/// limiter's own scenarios set theirs (`tests/api/auth_failures.rs`).
pub fn test_config() -> AppConfig {
    let mut config = AppConfig::default();
    config.auth_failures.burst = 100_000;
    config.notify = test_notify();
    config
}

/// The key every test seals endpoints' signing secrets under.
pub const TEST_NOTIFY_KEY: &str = "6e6f746966792d746573742d6b65792d6e6f746966792d746573742d6b657921";

/// Notification settings for tests (SPEC §17): receivers on 127.0.0.1 over http allowed
/// (`NOTIFY_ALLOW_INSECURE`), a fixed sealing key, events shown at once, and short clocks: retries
/// from 50 ms up to 400 ms within a 20 s window, an endpoint's breaker open for 300 ms.
pub fn test_notify() -> withdrawals::config::NotifySettings {
    use std::time::Duration;
    let mut notify = withdrawals::config::NotifySettings {
        allow_insecure: true,
        secret_key: Some(std::sync::Arc::new(withdrawals::config::NotifySettings::parse_key(TEST_NOTIFY_KEY).unwrap())),
        events_settle: Duration::ZERO,
        dispatch_interval: Duration::from_millis(50),
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_secs(2),
        ..Default::default()
    };
    notify.retry.base_delay = Duration::from_millis(50);
    notify.retry.max_delay = Duration::from_millis(400);
    notify.retry.max_retry_after = Duration::from_secs(2);
    notify.retry.max_elapsed = Duration::from_secs(20);
    notify.breaker.wait_duration_in_open = Duration::from_millis(300);
    notify
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> TestApp {
        Self::spawn_with(backend, test_config()).await
    }

    pub async fn spawn_with(backend: Backend, config: AppConfig) -> TestApp {
        init_logs();
        let (database_url, dir) = fresh_database(backend).await;
        let settings = PoolSettings { max_connections: 8, ..PoolSettings::default() };
        // Migrated as the owner, served as the service's role: `serve` with MIGRATION_DATABASE_URL.
        startup::migrate_as_owner(&database_url).await.expect("migrate");
        let service_url = service_url(&database_url).await;
        let db = startup::open_as_service(&service_url, Some(&database_url), settings).await.expect("connect");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let shutdown = CancellationToken::new();
        let provider = provider_mock(2_000).await;
        let gateway = startup::gateway(provider.provider.clone());
        let state = AppState::with_gateway(db.clone(), config, gateway.clone());
        let (metrics, stop) = (http::MetricsAccess::token(METRICS_TOKEN), shutdown.clone());
        tokio::spawn(async move {
            startup::serve_with(listener, state, &http::ServerLimits::default(), &metrics, stop).await
        });
        let dropped_with_app = postgres_database(&database_url);
        TestApp {
            db,
            database_url,
            service_url,
            base_url,
            client: Client::new(),
            provider,
            gateway,
            shutdown,
            _dir: dir,
            postgres_database: dropped_with_app,
        }
    }

    /// A token cancelled when the test's app stops.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.child_token()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// `GET /metrics` with the metrics token.
    pub fn metrics(&self) -> RequestBuilder {
        self.client.get(self.url("/metrics")).bearer_auth(METRICS_TOKEN)
    }

    /// Creates an account funded with `amount` USD.
    pub async fn customer(&self, usd: &str) -> Customer {
        let usd_currency = Currency::parse("USD").unwrap();
        let amount = Amount::new(Decimal::from_str(usd).unwrap(), usd_currency).unwrap();
        let created = provisioning::create_account(&self.db, "test customer", Some(amount)).await.unwrap();
        Customer { account_id: created.account_id, api_key: created.api_key }
    }

    /// A new operator with `role`; returns its bearer token.
    pub async fn operator(&self, role: &str) -> String {
        provisioning::create_enrolled_operator(&self.db, &format!("{role} op"), role.parse().unwrap())
            .await
            .unwrap()
            .token
    }

    /// Starts a worker against the app's own provider mock, with the test settings.
    pub fn start_default_worker(&self) -> CancellationToken {
        self.start_worker(self.gateway.clone(), worker_config("w-default"))
    }

    pub fn post_withdrawal(&self, customer: &Customer, key: &str, body: &Value) -> RequestBuilder {
        self.client
            .post(self.url("/v1/withdrawals"))
            .bearer_auth(&customer.api_key)
            .header("Idempotency-Key", key)
            .json(body)
    }

    pub fn get(&self, customer: &Customer, path: &str) -> RequestBuilder {
        self.client.get(self.url(path)).bearer_auth(&customer.api_key)
    }

    /// `GET path` as the operator holding `token`, read as the DTO the ops API sends.
    pub async fn ops_get<T: serde::de::DeserializeOwned>(&self, token: &str, path: &str) -> T {
        read(self.client.get(self.url(path)).bearer_auth(token).send().await.unwrap()).await
    }

    /// Runs one statement on the app's database behind the app's back (to stage a broken state).
    pub async fn execute_raw(&self, sql: &str) {
        crate::on_connection!(&self.database_url, |conn| {
            conn.execute(sql).await.unwrap();
        });
    }

    /// The ledger invariant of SPEC §1.2, checked with the storage layer's one query.
    pub async fn assert_ledger_invariant(&self) {
        let violations = accounts::ledger_violations(&self.db).await.expect("ledger query");
        assert!(violations.is_empty(), "ledger invariant violated: {violations:#?}");
    }

    /// (available, held, paid_out) in USD as decimal strings.
    pub async fn usd_balance(&self, customer: &Customer) -> (String, String, String) {
        let balances: BalanceList = read(self.get(customer, "/v1/balances").send().await.unwrap()).await;
        let usd = balances.data.into_iter().find(|b| b.currency == "USD").expect("USD balance");
        (usd.available, usd.held, usd.paid_out)
    }
}

/// `id` as a literal of the app's database, for statements written by hand (SQLite stores ids
/// as blobs, PostgreSQL as uuids).
pub fn sql_id(app: &TestApp, id: uuid::Uuid) -> String {
    match app.database_url.starts_with("sqlite:") {
        true => format!("X'{}'", id.simple()),
        false => format!("'{id}'"),
    }
}

pub fn withdrawal_body(amount: &str) -> Value {
    json!({
        "amount": amount,
        "currency": "USD",
        "destination": {"type": "bank_account", "account_number": "12345678", "bank_code": "021000021"},
        "reference": "payout to savings"
    })
}

/// The operator id an operator token names (`wdo_<id>_<secret>`).
pub fn operator_id(token: &str) -> uuid::Uuid {
    use withdrawals::credentials::{parse, OPERATOR_TOKEN_PREFIX};
    parse(OPERATOR_TOKEN_PREFIX, token).expect("an operator token").0
}

/// Reads a problem+json response, checking the media type and the problem's shape (a missing or
/// unknown member fails the test), and returns its status, `code` and the problem.
pub async fn problem_code(response: Response) -> (u16, String, Problem) {
    let status = response.status().as_u16();
    let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(content_type.as_deref(), Some("application/problem+json"), "status {status}");
    let body: Value = read(response).await;
    let members: Vec<&str> = body.as_object().expect("a JSON object").keys().map(String::as_str).collect();
    let known = ["type", "title", "status", "detail", "code", "field"];
    assert!(members.iter().all(|m| known.contains(m)), "a problem has only {known:?}: {body}");
    let problem: Problem = typed(body);
    assert_eq!(problem.status, status, "{problem:?}");
    (status, problem.code.clone(), problem)
}

/// A JSON answer already read as a `Value` (one that may also be a problem), as the DTO the
/// service sends; another shape fails the test with the body and serde's reason.
pub fn typed<T: serde::de::DeserializeOwned>(answer: Value) -> T {
    serde_json::from_value(answer.clone())
        .unwrap_or_else(|e| panic!("not a {}: {e}: {answer}", std::any::type_name::<T>()))
}

/// Reads a JSON answer as the DTO the service sends; a body of another shape fails the test with
/// the body and serde's reason.
pub async fn read<T: serde::de::DeserializeOwned>(response: Response) -> T {
    let status = response.status();
    let bytes = response.bytes().await.expect("the body");
    serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!("status {status}: not a {}: {e}: {}", std::any::type_name::<T>(), String::from_utf8_lossy(&bytes))
    })
}

/// A gateway to the provider at `mock_url` (the mock, or a wiremock server) whose breaker never
/// opens.
pub fn gateway_to(mock_url: String, timeout: std::time::Duration) -> withdrawals::provider::Gateway {
    let provider = withdrawals::provider::HttpProvider::new(withdrawals::provider::ProviderConfig {
        base_url: mock_url,
        api_key: secrecy::SecretString::from("test-provider-key"),
        connect_timeout: std::time::Duration::from_millis(300),
        request_timeout: timeout,
    })
    .unwrap();
    let never_open = withdrawals::provider::breaker::BreakerConfig {
        window: withdrawals::provider::breaker::SlidingWindow::Count { size: u32::MAX },
        minimum_number_of_calls: u32::MAX,
        ..Default::default()
    };
    withdrawals::startup::gateway_with(std::sync::Arc::new(provider), never_open)
}

/// Fast worker settings for tests: the same code, shorter clocks.
pub fn worker_config(id: &str) -> withdrawals::jobs::worker::WorkerConfig {
    use std::time::Duration;
    let mut config = withdrawals::jobs::worker::WorkerConfig::new(id);
    config.poll_interval = Duration::from_millis(50);
    config.lease = Duration::from_secs(5);
    config.heartbeat = Duration::from_secs(1);
    config.breaker_jitter = Duration::from_millis(50);
    config.breaker_min_defer = Duration::from_millis(100);
    config.shutdown_grace = Duration::from_secs(2);
    config.submit_policy = withdrawals::jobs::retry::RetryPolicy {
        base_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(200),
        max_attempts: 8,
        max_elapsed: Duration::from_secs(60),
        max_retry_after: Duration::from_secs(10),
    };
    config.reconcile_policy = withdrawals::jobs::retry::RetryPolicy {
        base_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(300),
        max_attempts: 1_000,
        max_elapsed: Duration::from_secs(30),
        max_retry_after: Duration::from_secs(1),
    };
    config.import_policy = withdrawals::jobs::retry::RetryPolicy {
        base_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(300),
        max_attempts: 20,
        max_elapsed: Duration::from_secs(30),
        max_retry_after: Duration::from_secs(1),
    };
    config.handler_error_policy = withdrawals::jobs::retry::RetryPolicy {
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(200),
        max_attempts: 10,
        max_elapsed: Duration::from_secs(60),
        max_retry_after: Duration::ZERO,
    };
    config.in_flight_grace = Duration::from_millis(2_500);
    config.sweep_interval = Duration::from_millis(200);
    config.notify = test_notify();
    config
}

/// A provider mock over real HTTP and a client for it.
pub struct ProviderHarness {
    pub mock: provider_mocks::RunningMock,
    pub provider: std::sync::Arc<dyn withdrawals::provider::Provider>,
}

pub async fn provider_mock(request_timeout_ms: u64) -> ProviderHarness {
    let mock = provider_mocks::spawn(provider_mocks::MockConfig {
        api_key: Some("test-provider-key".into()),
        ..provider_mocks::MockConfig::default()
    })
    .await
    .unwrap();
    let provider = withdrawals::provider::HttpProvider::new(withdrawals::provider::ProviderConfig {
        base_url: mock.url(),
        api_key: secrecy::SecretString::from("test-provider-key"),
        connect_timeout: std::time::Duration::from_millis(500),
        request_timeout: std::time::Duration::from_millis(request_timeout_ms),
    })
    .unwrap();
    ProviderHarness { mock, provider: std::sync::Arc::new(provider) }
}

impl TestApp {
    /// Starts a worker on this app's database; it stops when the returned token is cancelled
    /// (and when the test ends).
    pub fn start_worker(
        &self,
        gateway: impl Into<withdrawals::provider::Gateways>,
        config: withdrawals::jobs::worker::WorkerConfig,
    ) -> CancellationToken {
        let stop = self.shutdown.child_token();
        let worker = withdrawals::jobs::worker::Worker::new(self.db.clone(), gateway, config);
        tokio::spawn(worker.run(stop.clone()));
        stop
    }

    /// A worker on the settlement queue only, with no grace days (a completed withdrawal missing
    /// from an imported day is an exception at once): what runs an import's `import_settlement`
    /// job (SPEC §14) while nothing else moves. Stops when the guard drops.
    pub fn settlement_worker(&self) -> tokio_util::sync::DropGuard {
        let mut config = worker_config("w-settlement-import");
        config.queues = vec![withdrawals::jobs::Queue::Settlement.as_str()];
        config.settlement.grace_days = 0;
        self.start_worker(self.gateway.clone(), config).drop_guard()
    }

    pub async fn create_withdrawal(
        &self,
        customer: &Customer,
        key: &str,
        amount: &str,
    ) -> withdrawals::domain::WithdrawalId {
        let response = self.post_withdrawal(customer, key, &withdrawal_body(amount)).send().await.unwrap();
        assert_eq!(response.status(), 201);
        withdrawals::domain::WithdrawalId(read::<WithdrawalView>(response).await.id)
    }

    /// `n` withdrawals of `amount` USD from one account funded with `fund`, each rejected by the
    /// provider (`requires_review`, one `dependency_rejected` dead letter); the provider accepts
    /// again afterwards and the app's default worker keeps running (it releases replays).
    pub async fn rejected_withdrawals(
        &self,
        n: usize,
        fund: &str,
        amount: &str,
    ) -> (Vec<withdrawals::domain::WithdrawalId>, Customer) {
        use provider_mocks::{FaultConfig, FaultEffect, FaultRule, RouteMatch};
        self.provider
            .mock
            .set_faults(FaultConfig { rules: vec![FaultRule::new(RouteMatch::Create, FaultEffect::InvalidAccount)] });
        self.start_default_worker();
        let alice = self.customer(fund).await;
        let ids: Vec<_> = futures::future::join_all((0..n).map(|i| {
            let alice = &alice;
            async move { self.create_withdrawal(alice, &format!("k{i}"), amount).await }
        }))
        .await;
        for id in &ids {
            self.wait_for_status(
                *id,
                withdrawals::domain::WithdrawalStatus::RequiresReview,
                std::time::Duration::from_secs(30),
            )
            .await;
        }
        self.provider.mock.set_faults(FaultConfig::default());
        (ids, alice)
    }

    /// Where withdrawal `id` lives: its account, from its row ([`withdrawals::domain::WithdrawalKey`]).
    pub async fn key(&self, id: withdrawals::domain::WithdrawalId) -> withdrawals::domain::WithdrawalKey {
        withdrawals::storage::withdrawals::find(&self.db, id).await.unwrap().expect("the withdrawal exists").key()
    }

    /// Completes a `processing` withdrawal the way reconciliation does when the provider
    /// confirms it paid, behind any worker's back (the guarded move, committed); panics if the
    /// move did not apply.
    pub async fn reconcile_completed(&self, id: withdrawals::domain::WithdrawalId) {
        use withdrawals::domain::{Actor, WithdrawalStatus};
        use withdrawals::storage::withdrawals::{self as store, TransitionOutcome, TransitionRequest};
        let mut tx = self.db.begin().await.unwrap();
        let reconciled = TransitionRequest {
            key: self.key(id).await,
            from: WithdrawalStatus::Processing,
            to: WithdrawalStatus::Completed,
            expected_version: None,
            actor: &Actor::Reconciliation,
            reason: "reconciliation: provider confirmed paid",
            correlation_id: "reconcile-test",
            failure_code: None,
            evidence: None,
        };
        assert!(matches!(store::transition(&mut tx, &reconciled).await.unwrap(), TransitionOutcome::Applied(_)));
        tx.commit().await.unwrap();
    }

    /// Makes the pending withdrawal `id` stuck in `processing`: a worker claimed its job and moved
    /// it, then the job vanished (a worker killed by hand) — nothing touches it before the stuck
    /// sweep's SLA.
    pub async fn stuck_in_processing(&self, id: withdrawals::domain::WithdrawalId) {
        use withdrawals::domain::{Actor, WithdrawalStatus};
        use withdrawals::storage::jobs as job_store;
        use withdrawals::storage::withdrawals::{self as store, TransitionRequest};
        let queue = withdrawals::jobs::Queue::Payouts.as_str();
        let job = job_store::claim(&self.db, queue, "w0", 1, chrono::TimeDelta::seconds(30)).await.unwrap().remove(0);
        let mut tx = self.db.begin().await.unwrap();
        let actor = Actor::Worker("w0".into());
        let claimed = TransitionRequest {
            key: self.key(id).await,
            from: WithdrawalStatus::Pending,
            to: WithdrawalStatus::Processing,
            expected_version: None,
            actor: &actor,
            reason: "claimed",
            correlation_id: "c",
            failure_code: None,
            evidence: None,
        };
        store::transition(&mut tx, &claimed).await.unwrap();
        job_store::finish(&mut tx, job.key(), job.lease_token, &job_store::Finish::Succeeded).await.unwrap();
        tx.commit().await.unwrap();
    }

    /// Polls until the withdrawal reaches `status` or the deadline passes.
    pub async fn wait_for_status(
        &self,
        id: withdrawals::domain::WithdrawalId,
        status: withdrawals::domain::WithdrawalStatus,
        within: std::time::Duration,
    ) -> withdrawals::domain::Withdrawal {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let current = withdrawals::storage::withdrawals::find(&self.db, id).await.unwrap().unwrap();
            if current.status == status {
                return current;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "withdrawal {id} is {} after {within:?}, wanted {status}",
                current.status
            );
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }

    /// Polls `check` until it returns Some or the deadline passes.
    pub async fn eventually<T, F, Fut>(&self, what: &str, within: std::time::Duration, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(value) = check().await {
                return value;
            }
            assert!(tokio::time::Instant::now() < deadline, "timed out after {within:?} waiting for {what}");
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
    }
}

/// Serves a second app (other settings) on the same database; returns its base URL.
pub async fn serve_extra(app: &TestApp, config: AppConfig) -> String {
    serve_extra_with(app, config, app.gateway.clone()).await
}

/// [`serve_extra`] reaching `gateways` (several providers, SPEC §16).
pub async fn serve_extra_with(
    app: &TestApp,
    config: AppConfig,
    gateways: impl Into<withdrawals::provider::Gateways>,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let state = AppState::with_gateway(app.db.clone(), config, gateways);
    tokio::spawn(startup::serve(listener, state, app.shutdown_token()));
    base_url
}

/// A `withdrawals serve` process on a test app's database: its API on `port`, its `/metrics` on
/// `metrics_port` (both free ports); killed when dropped.
pub struct ServeProcess {
    child: std::process::Child,
    pub port: u16,
    pub metrics_port: u16,
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl TestApp {
    /// Starts `withdrawals serve` on this app's database with `env` (no `PROVIDER_URL` unless
    /// `env` names one), its output discarded.
    pub fn serve_process(&self, env: &[(&str, &str)]) -> ServeProcess {
        let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (port, metrics_port) = (free(), free());
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_withdrawals"));
        command
            .args([
                "serve",
                "--bind",
                &format!("127.0.0.1:{port}"),
                "--metrics-bind",
                &format!("127.0.0.1:{metrics_port}"),
            ])
            .env("DATABASE_URL", &self.database_url)
            .env_remove("PROVIDER_URL")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        for (key, value) in env {
            command.env(key, value);
        }
        ServeProcess { child: command.spawn().unwrap(), port, metrics_port }
    }
}
