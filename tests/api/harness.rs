//! The shared test harness: a fresh database (a temporary SQLite file, or a new database on the
//! PostgreSQL at `DATABASE_URL`), migrated, and the real app served on 127.0.0.1:0.
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
use withdrawals::domain::{AccountId, Amount, Currency};
use withdrawals::http::{self, AppState};
use withdrawals::provisioning;
use withdrawals::storage::{accounts, Db, PoolSettings};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Generates one `#[tokio::test]` per backend for each scenario `async fn name(app: TestApp)`.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::harness::TestApp::spawn($crate::harness::Backend::Sqlite).await).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::harness::TestApp::spawn($crate::harness::Backend::Postgres).await).await
                }
            )*
        }
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

/// A running app on its own database.
pub struct TestApp {
    pub db: Db,
    pub database_url: String,
    pub base_url: String,
    pub client: Client,
    shutdown: CancellationToken,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
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
            let mut admin = sqlx::PgConnection::connect(&admin_url).await.expect("connect to DATABASE_URL");
            admin.execute(format!("CREATE DATABASE {name}").as_str()).await.expect("create test database");
            (replace_database(&admin_url, &name), None)
        }
    }
}

/// `postgres://u@h:p/db?x` → `postgres://u@h:p/NAME?x`.
fn replace_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let authority_start = base.find("://").map(|i| i + 3).unwrap_or(0);
    let root = match base[authority_start..].find('/') {
        Some(i) => &base[..authority_start + i],
        None => base,
    };
    match query {
        Some(q) => format!("{root}/{name}?{q}"),
        None => format!("{root}/{name}"),
    }
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> TestApp {
        Self::spawn_with(backend, AppConfig::default()).await
    }

    pub async fn spawn_with(backend: Backend, config: AppConfig) -> TestApp {
        init_logs();
        let (database_url, dir) = fresh_database(backend).await;
        let settings = PoolSettings { max_connections: 8, ..PoolSettings::default() };
        let db = Db::connect(&database_url, &settings).await.expect("connect");
        db.migrate().await.expect("migrate");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let shutdown = CancellationToken::new();
        tokio::spawn(http::serve(listener, AppState::new(db.clone(), config), shutdown.clone()));
        TestApp { db, database_url, base_url, client: Client::new(), shutdown, _dir: dir }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// Creates an account funded with `amount` USD.
    pub async fn customer(&self, usd: &str) -> Customer {
        let usd_currency = Currency::parse("USD").unwrap();
        let amount = Amount::new(Decimal::from_str(usd).unwrap(), usd_currency).unwrap();
        let created = provisioning::create_account(&self.db, "test customer", Some(amount)).await.unwrap();
        Customer { account_id: created.account_id, api_key: created.api_key }
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

    /// The ledger invariant of SPEC §1.2, checked with the storage layer's one query.
    pub async fn assert_ledger_invariant(&self) {
        let violations = accounts::ledger_violations(&self.db).await.expect("ledger query");
        assert!(violations.is_empty(), "ledger invariant violated: {violations:#?}");
    }

    /// (available, held, paid_out) in USD as decimal strings.
    pub async fn usd_balance(&self, customer: &Customer) -> (String, String, String) {
        let body: Value = self.get(customer, "/v1/balances").send().await.unwrap().json().await.unwrap();
        let usd = body["data"].as_array().unwrap().iter().find(|b| b["currency"] == "USD").expect("USD balance");
        (
            usd["available"].as_str().unwrap().to_owned(),
            usd["held"].as_str().unwrap().to_owned(),
            usd["paid_out"].as_str().unwrap().to_owned(),
        )
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

/// Reads a problem+json response and returns its `code`, checking the media type.
pub async fn problem_code(response: Response) -> (u16, String, Value) {
    let status = response.status().as_u16();
    let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(content_type.as_deref(), Some("application/problem+json"), "status {status}");
    let body: Value = response.json().await.unwrap();
    (status, body["code"].as_str().unwrap_or_default().to_owned(), body)
}
