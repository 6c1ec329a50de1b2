//! End-to-end tests of the mock over real HTTP, each against its own server
//! on a free port.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use provider_mocks::{
    spawn, FaultConfig, FaultEffect, FaultRule, MockConfig, RouteMatch, RunningMock, Settlement, SettlementMode,
    TransferStatus,
};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

fn body(reference: &str, amount: &str, account: &str) -> Value {
    json!({
        "reference": reference,
        "amount": amount,
        "currency": "USD",
        "destination": {"type": "bank_account", "account_number": account, "bank_code": "021000021"}
    })
}

async fn start(faults: Vec<FaultRule>) -> RunningMock {
    spawn(MockConfig { faults: FaultConfig { rules: faults }, ..MockConfig::default() }).await.unwrap()
}

async fn create(client: &Client, mock: &RunningMock, key: &str, body: &Value) -> reqwest::Response {
    client.post(format!("{}/v1/transfers", mock.url())).header("Idempotency-Key", key).json(body).send().await.unwrap()
}

async fn json_of(response: reqwest::Response) -> Value {
    response.json().await.unwrap()
}

fn rule(route: RouteMatch, effect: FaultEffect) -> FaultRule {
    FaultRule::new(route, effect)
}

#[tokio::test]
async fn create_replay_and_conflict() {
    let mock = start(vec![]).await;
    let client = Client::new();

    let first = create(&client, &mock, "k1", &body("wd-1", "125.50", "000123")).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    let first = json_of(first).await;
    assert!(first["id"].as_str().unwrap().starts_with("tr_"));
    assert_eq!(first["status"], "paid");
    assert_eq!(first["amount"], "125.50");
    assert_eq!(first["reference"], "wd-1");
    assert!(first.get("failure_code").is_none());

    // Same amount written differently is the same body.
    let replay = create(&client, &mock, "k1", &body("wd-1", "125.5", "000123")).await;
    assert_eq!(replay.status(), StatusCode::OK);
    assert_eq!(json_of(replay).await["id"], first["id"]);

    let conflict = create(&client, &mock, "k1", &body("wd-1", "99.00", "000123")).await;
    assert_eq!(conflict.status(), StatusCode::CONFLICT);
    assert_eq!(json_of(conflict).await, json!({"code": "idempotency_conflict"}));

    let transfers = mock.transfers();
    assert_eq!(transfers.len(), 1);
    assert_eq!(transfers[0].executions, 1);
    assert_eq!(transfers[0].idempotency_key, "k1");
    let outcomes: Vec<_> = mock.requests().into_iter().map(|r| r.outcome).collect();
    assert_eq!(outcomes, ["created", "replayed", "conflict"]);
    mock.shutdown().await;
}

#[tokio::test]
async fn lookup_by_key_and_get_by_id() {
    let mock = start(vec![]).await;
    let client = Client::new();
    let created = json_of(create(&client, &mock, "k1", &body("wd-1", "10.00", "1")).await).await;

    let found =
        client.get(format!("{}/v1/transfers", mock.url())).query(&[("idempotency_key", "k1")]).send().await.unwrap();
    assert_eq!(found.status(), StatusCode::OK);
    assert_eq!(json_of(found).await["data"], json!([created.clone()]));

    let empty = client.get(format!("{}/v1/transfers?idempotency_key=nope", mock.url())).send().await.unwrap();
    assert_eq!(empty.status(), StatusCode::OK);
    assert_eq!(json_of(empty).await, json!({"data": []}));

    let id = created["id"].as_str().unwrap();
    let got = client.get(format!("{}/v1/transfers/{id}", mock.url())).send().await.unwrap();
    assert_eq!(got.status(), StatusCode::OK);
    assert_eq!(json_of(got).await, created);

    let missing = client.get(format!("{}/v1/transfers/tr_missing", mock.url())).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(json_of(missing).await, json!({"code": "not_found"}));
}

#[tokio::test]
async fn api_key_is_required_on_provider_routes_only() {
    let mock = spawn(MockConfig { api_key: Some("sekret".into()), ..MockConfig::default() }).await.unwrap();
    let client = Client::new();
    let url = format!("{}/v1/transfers", mock.url());

    let anonymous = create(&client, &mock, "k1", &body("wd-1", "1.00", "1")).await;
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(json_of(anonymous).await, json!({"code": "unauthorized"}));
    let wrong = client.get(format!("{url}?idempotency_key=k1")).bearer_auth("nope").send().await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(mock.transfers().is_empty());

    let ok = client
        .post(&url)
        .bearer_auth("sekret")
        .header("Idempotency-Key", "k1")
        .json(&body("wd-1", "1.00", "1"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::CREATED);

    let admin = client.get(format!("{}/__admin/transfers", mock.url())).send().await.unwrap();
    assert_eq!(admin.status(), StatusCode::OK);
    assert_eq!(json_of(admin).await["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn bad_requests_are_rejected_without_executing() {
    let mock = start(vec![]).await;
    let client = Client::new();
    let url = format!("{}/v1/transfers", mock.url());

    let no_key = client.post(&url).json(&body("wd-1", "1.00", "1")).send().await.unwrap();
    assert_eq!(no_key.status(), StatusCode::BAD_REQUEST);
    assert_eq!(json_of(no_key).await, json!({"code": "idempotency_key_missing"}));

    for bad in [
        json!({"reference": "wd-1"}),
        body("wd-1", "not-a-number", "1"),
        body("wd-1", "-5.00", "1"),
        json!({"reference": "wd-1", "amount": "1.00", "currency": "USD",
               "destination": {"type": "card", "number": "4111"}}),
    ] {
        let response = create(&client, &mock, "k1", &bad).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(json_of(response).await, json!({"code": "invalid_request"}));
    }
    assert!(mock.transfers().is_empty());
}

#[tokio::test]
async fn status_fault_with_times_then_success() {
    let mock = start(vec![FaultRule {
        times: Some(3),
        ..rule(RouteMatch::Create, FaultEffect::Status { code: 503, retry_after_secs: Some(2) })
    }])
    .await;
    let client = Client::new();
    let request = body("wd-1", "10.00", "1");

    for _ in 0..3 {
        let response = create(&client, &mock, "k1", &request).await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()["retry-after"], "2");
        assert_eq!(json_of(response).await, json!({"code": "fault_injected"}));
        assert!(mock.transfers().is_empty());
    }
    let response = create(&client, &mock, "k1", &request).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(mock.transfers()[0].executions, 1);
    let outcomes: Vec<_> = mock.requests().into_iter().map(|r| r.outcome).collect();
    assert_eq!(outcomes, ["status:503", "status:503", "status:503", "created"]);
}

#[tokio::test]
async fn invalid_account_matches_on_account_number() {
    let mock = start(vec![FaultRule {
        account_number_contains: Some("999".into()),
        ..rule(RouteMatch::Create, FaultEffect::InvalidAccount)
    }])
    .await;
    let client = Client::new();

    let rejected = create(&client, &mock, "k1", &body("wd-1", "10.00", "0999")).await;
    assert_eq!(rejected.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(json_of(rejected).await, json!({"code": "invalid_account"}));
    assert!(mock.transfers().is_empty());

    let accepted = create(&client, &mock, "k2", &body("wd-2", "10.00", "0123")).await;
    assert_eq!(accepted.status(), StatusCode::CREATED);
    assert_eq!(mock.transfers().len(), 1);
}

#[tokio::test]
async fn timeout_before_commit_executes_nothing() {
    let mock = start(vec![rule(RouteMatch::Create, FaultEffect::TimeoutBeforeCommit { ms: 2_000 })]).await;
    let err = Client::new()
        .post(format!("{}/v1/transfers", mock.url()))
        .header("Idempotency-Key", "k1")
        .json(&body("wd-1", "10.00", "1"))
        .timeout(Duration::from_millis(300))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert!(mock.transfers().is_empty());
    assert_eq!(mock.requests()[0].outcome, "timeout_before_commit");
}

#[tokio::test]
async fn timeout_before_commit_closes_without_response_after_hold() {
    let mock = start(vec![rule(RouteMatch::Lookup, FaultEffect::TimeoutBeforeCommit { ms: 100 })]).await;
    let err = Client::new()
        .get(format!("{}/v1/transfers?idempotency_key=k1", mock.url()))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap_err();
    assert!(!err.is_timeout(), "{err:?}");
    assert!(err.status().is_none());
}

#[tokio::test]
async fn timeout_after_commit_executes_once() {
    let mock = start(vec![FaultRule {
        times: Some(1),
        ..rule(RouteMatch::Create, FaultEffect::TimeoutAfterCommit { ms: 2_000 })
    }])
    .await;
    let client = Client::new();
    let request = body("wd-1", "10.00", "1");
    let err = client
        .post(format!("{}/v1/transfers", mock.url()))
        .header("Idempotency-Key", "k1")
        .json(&request)
        .timeout(Duration::from_millis(300))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    let transfers = mock.transfers();
    assert_eq!(transfers.len(), 1);
    assert_eq!(transfers[0].executions, 1);

    // The retry with the same key finds the committed transfer.
    let retry = create(&client, &mock, "k1", &request).await;
    assert_eq!(retry.status(), StatusCode::OK);
    assert_eq!(json_of(retry).await["id"], transfers[0].id.as_str());
    assert_eq!(mock.transfers()[0].executions, 1);
    let outcomes: Vec<_> = mock.requests().into_iter().map(|r| r.outcome).collect();
    assert_eq!(outcomes, ["timeout_after_commit", "replayed"]);
}

#[tokio::test]
async fn reset_after_commit_is_a_connection_error_without_status() {
    let mock =
        start(vec![FaultRule { times: Some(1), ..rule(RouteMatch::Create, FaultEffect::ResetAfterCommit) }]).await;
    let client = Client::new();
    let request = body("wd-1", "10.00", "1");
    let started = Instant::now();
    let err = client
        .post(format!("{}/v1/transfers", mock.url()))
        .header("Idempotency-Key", "k1")
        .json(&request)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap_err();
    assert!(err.status().is_none(), "{err:?}");
    assert!(!err.is_timeout(), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(mock.transfers().len(), 1);
    assert_eq!(mock.requests()[0].outcome, "reset_after_commit");

    let retry = create(&client, &mock, "k1", &request).await;
    assert_eq!(retry.status(), StatusCode::OK);
    assert_eq!(mock.transfers()[0].executions, 1);
}

#[tokio::test]
async fn lookup_unavailable_only_hits_reads() {
    let mock = start(vec![rule(RouteMatch::Any, FaultEffect::LookupUnavailable)]).await;
    let client = Client::new();
    let created = create(&client, &mock, "k1", &body("wd-1", "10.00", "1")).await;
    assert_eq!(created.status(), StatusCode::CREATED);

    let lookup = client.get(format!("{}/v1/transfers?idempotency_key=k1", mock.url())).send().await.unwrap();
    assert_eq!(lookup.status(), StatusCode::SERVICE_UNAVAILABLE);
    let id = mock.transfers()[0].id.clone();
    let get = client.get(format!("{}/v1/transfers/{id}", mock.url())).send().await.unwrap();
    assert_eq!(get.status(), StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn latency_composes_with_normal_handling() {
    let mock = start(vec![rule(RouteMatch::Create, FaultEffect::Latency { ms: 200 })]).await;
    let started = Instant::now();
    let response = create(&Client::new(), &mock, "k1", &body("wd-1", "10.00", "1")).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert!(started.elapsed() >= Duration::from_millis(200));
}

async fn poll_status(client: &Client, url: &str, want: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let transfer = json_of(client.get(url).send().await.unwrap()).await;
        if transfer["status"] == want {
            return transfer;
        }
        assert!(Instant::now() < deadline, "still {transfer} at deadline");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn async_settlement_goes_pending_to_paid() {
    let mock = spawn(MockConfig {
        settlement: Settlement { mode: SettlementMode::Async, delay_ms: 300, fail_ratio: 0.0 },
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let client = Client::new();
    let request = body("wd-1", "10.00", "1");
    let created = json_of(create(&client, &mock, "k1", &request).await).await;
    assert_eq!(created["status"], "pending");
    let id = created["id"].as_str().unwrap();

    poll_status(&client, &format!("{}/v1/transfers/{id}", mock.url()), "paid").await;
    let lookup = client.get(format!("{}/v1/transfers?idempotency_key=k1", mock.url())).send().await.unwrap();
    assert_eq!(json_of(lookup).await["data"][0]["status"], "paid");
    let replay = json_of(create(&client, &mock, "k1", &request).await).await;
    assert_eq!(replay["status"], "paid");
    assert_eq!(mock.transfers()[0].status, TransferStatus::Paid);
}

#[tokio::test]
async fn async_settlement_can_fail_by_ratio() {
    let mock = start(vec![]).await;
    let client = Client::new();
    let settlement = client
        .post(format!("{}/__admin/settlement", mock.url()))
        .json(&json!({"mode": "async", "delay_ms": 50, "fail_ratio": 1.0}))
        .send()
        .await
        .unwrap();
    assert_eq!(settlement.status(), StatusCode::NO_CONTENT);
    let created = json_of(create(&client, &mock, "k1", &body("wd-1", "1.00", "1")).await).await;
    assert_eq!(created["status"], "pending");
    let id = created["id"].as_str().unwrap();
    let url = format!("{}/v1/transfers/{id}", mock.url());
    let failed = poll_status(&client, &url, "failed").await;
    assert_eq!(failed["failure_code"], "rejected_by_bank");
}

#[tokio::test]
async fn settle_failed_creates_a_failed_transfer() {
    let mock = start(vec![FaultRule {
        reference_contains: Some("doomed".into()),
        ..rule(RouteMatch::Create, FaultEffect::SettleFailed { failure_code: "account_closed".into() })
    }])
    .await;
    let client = Client::new();
    let response = create(&client, &mock, "k1", &body("wd-doomed", "10.00", "1")).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let transfer = json_of(response).await;
    assert_eq!(transfer["status"], "failed");
    assert_eq!(transfer["failure_code"], "account_closed");
    assert_eq!(mock.transfers()[0].executions, 1);
}

async fn run_probabilistic_sequence(mock: &RunningMock) -> Vec<u16> {
    let client = Client::new();
    let mut statuses = Vec::new();
    for i in 0..30 {
        let key = format!("k{i}");
        let response = create(&client, mock, &key, &body(&key, "1.00", "1")).await;
        statuses.push(response.status().as_u16());
    }
    statuses
}

fn coin_flip_503() -> FaultRule {
    FaultRule {
        probability: 0.5,
        ..rule(RouteMatch::Create, FaultEffect::Status { code: 503, retry_after_secs: None })
    }
}

#[tokio::test]
async fn probability_rules_repeat_for_the_same_seed() {
    let config = MockConfig { seed: 42, faults: FaultConfig { rules: vec![coin_flip_503()] }, ..MockConfig::default() };
    let a = spawn(config.clone()).await.unwrap();
    let b = spawn(config).await.unwrap();
    let first = run_probabilistic_sequence(&a).await;
    let second = run_probabilistic_sequence(&b).await;
    assert_eq!(first, second);
    assert!(first.contains(&201) && first.contains(&503), "{first:?}");
}

#[tokio::test]
async fn admin_requests_log_correlation_ids_in_order() {
    let mock = start(vec![]).await;
    let client = Client::new();
    for (i, correlation) in ["c-1", "c-2", "c-3"].iter().enumerate() {
        client
            .post(format!("{}/v1/transfers", mock.url()))
            .header("Idempotency-Key", format!("k{i}"))
            .header("X-Correlation-Id", *correlation)
            .json(&body("wd-1", "1.00", "1"))
            .send()
            .await
            .unwrap();
    }
    client.get(format!("{}/v1/transfers/tr_x", mock.url())).send().await.unwrap();

    let log = json_of(client.get(format!("{}/__admin/requests", mock.url())).send().await.unwrap()).await;
    let data = log["data"].as_array().unwrap();
    assert_eq!(data.len(), 4);
    let ids: Vec<_> = data.iter().map(|r| r["correlation_id"].clone()).collect();
    assert_eq!(ids, [json!("c-1"), json!("c-2"), json!("c-3"), Value::Null]);
    assert_eq!(data[0]["method"], "POST");
    assert_eq!(data[0]["route"], "create");
    assert_eq!(data[0]["path"], "/v1/transfers");
    assert_eq!(data[0]["idempotency_key"], "k0");
    assert_eq!(data[0]["outcome"], "created");
    assert_eq!(data[3]["route"], "get");
    assert_eq!(data[3]["outcome"], "not_found");

    let times: Vec<chrono::DateTime<chrono::Utc>> = data
        .iter()
        .map(|r| {
            let at = r["at"].as_str().unwrap();
            // RFC 3339, UTC, milliseconds: 2024-01-01T00:00:00.123Z
            assert!(at.ends_with('Z') && at.len() == 24, "{at}");
            at.parse().unwrap()
        })
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
}

#[tokio::test]
async fn admin_faults_round_trip_and_reset_clears_everything() {
    let mock = spawn(MockConfig { seed: 7, ..MockConfig::default() }).await.unwrap();
    let client = Client::new();
    let admin = |path: &str| format!("{}/__admin/{path}", mock.url());
    let rules = json!({"rules": [{"route": "create", "probability": 0.5,
        "effect": {"type": "status", "code": 503}}]});

    let set = client.post(admin("faults")).json(&rules).send().await.unwrap();
    assert_eq!(set.status(), StatusCode::NO_CONTENT);
    let got: FaultConfig = client.get(admin("faults")).send().await.unwrap().json().await.unwrap();
    assert_eq!(got.rules, vec![coin_flip_503()]);
    let typo = client
        .post(admin("faults"))
        .json(&json!({"rules": [{"route": "create", "probabilty": 0.5,
            "effect": {"type": "status", "code": 503}}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(typo.status(), StatusCode::BAD_REQUEST);

    let before = run_probabilistic_sequence(&mock).await;
    assert!(!mock.transfers().is_empty());

    let reset = client.post(admin("reset")).send().await.unwrap();
    assert_eq!(reset.status(), StatusCode::NO_CONTENT);
    assert!(mock.transfers().is_empty());
    assert!(mock.requests().is_empty());
    assert!(mock.faults().rules.is_empty());
    let transfers = json_of(client.get(admin("transfers")).send().await.unwrap()).await;
    assert_eq!(transfers, json!({"data": []}));

    // The RNG restarted from the seed, so the same rules repeat the same run.
    mock.set_faults(FaultConfig { rules: vec![coin_flip_503()] });
    assert_eq!(run_probabilistic_sequence(&mock).await, before);

    // Reseeding through the admin route is what a later reset returns to.
    let reseed = json!({"rules": [], "seed": 99});
    client.post(admin("faults")).json(&reseed).send().await.unwrap();
    mock.reset();
    assert!(mock.requests().is_empty());
}

#[test]
fn binary_serves_scenario_and_stops_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("provider-mock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = dir.join("scenario.json");
    std::fs::write(
        &scenario,
        r#"{"api_key": "k", "seed": 3, "settlement": {"mode": "immediate"},
            "faults": {"rules": [{"route": "lookup", "effect": {"type": "lookup_unavailable"}}]}}"#,
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_provider-mock"))
        .args(["--port", "0", "--scenario"])
        .arg(&scenario)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line
        .trim()
        .strip_prefix("provider-mock listening on ")
        .unwrap_or_else(|| panic!("unexpected line {line:?}"))
        .to_string();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = Client::new();
        let lookup = client.get(format!("{url}/v1/transfers?idempotency_key=x")).bearer_auth("k").send().await.unwrap();
        assert_eq!(lookup.status(), StatusCode::SERVICE_UNAVAILABLE);
        let anonymous = client.get(format!("{url}/v1/transfers?idempotency_key=x")).send().await.unwrap();
        assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    });

    let killed = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status:?}");
            break;
        }
        assert!(Instant::now() < deadline, "provider-mock ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shipped_scenarios_parse() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let config = MockConfig::from_file(&path).unwrap();
            assert!(!config.faults.rules.is_empty(), "{}", path.display());
            seen += 1;
        }
    }
    assert!(seen > 0);
}

#[tokio::test]
async fn transfers_carry_amount_currency_times_and_a_return() {
    let mock = start(vec![]).await;
    let client = Client::new();
    let created = json_of(create(&client, &mock, "k1", &body("wd-1", "10.50", "1")).await).await;
    assert_eq!((created["amount"].as_str(), created["currency"].as_str()), (Some("10.50"), Some("USD")));
    assert!(created["created_at"].is_string() && created["updated_at"].is_string(), "{created}");

    assert!(mock.return_transfer("k1", "R01"));
    assert!(!mock.return_transfer("k2", "R01"), "no transfer under k2");
    let lookup =
        json_of(client.get(format!("{}/v1/transfers?idempotency_key=k1", mock.url())).send().await.unwrap()).await;
    assert_eq!(
        (lookup["data"][0]["status"].as_str(), lookup["data"][0]["return_code"].as_str()),
        (Some("returned"), Some("R01"))
    );
    assert_eq!(mock.transfers()[0].status, TransferStatus::Returned);
}

#[tokio::test]
async fn wrong_amount_pays_a_different_sum_on_create_and_shows_one_on_reads() {
    let add = "1.00".parse().unwrap();
    let mock =
        start(vec![FaultRule { times: Some(1), ..rule(RouteMatch::Create, FaultEffect::WrongAmount { add }) }]).await;
    let client = Client::new();
    let created = json_of(create(&client, &mock, "k1", &body("wd-1", "10.00", "1")).await).await;
    assert_eq!(created["amount"], "11.00", "executed for the wrong sum");
    assert_eq!(mock.transfers()[0].amount.to_string(), "11.00", "the ground truth says so too");

    let honest = json_of(create(&client, &mock, "k2", &body("wd-2", "10.00", "1")).await).await;
    assert_eq!(honest["amount"], "10.00");
    mock.set_faults(FaultConfig { rules: vec![rule(RouteMatch::Lookup, FaultEffect::WrongAmount { add })] });
    let lookup =
        json_of(client.get(format!("{}/v1/transfers?idempotency_key=k2", mock.url())).send().await.unwrap()).await;
    assert_eq!(lookup["data"][0]["amount"], "11.00", "a read that misreports");
    assert_eq!(mock.transfers()[1].amount.to_string(), "10.00", "what was really paid");
}

async fn report(client: &Client, mock: &RunningMock, date: &str) -> (StatusCode, Option<String>, String) {
    let url = format!("{}/v1/reports/settlements?date={date}", mock.url());
    let response = client.get(url).send().await.unwrap();
    let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
    (response.status(), content_type, response.text().await.unwrap())
}

/// The report's lines after the header, split into fields.
fn report_lines(csv: &str) -> Vec<Vec<String>> {
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some(REPORT_HEADER), "{csv}");
    lines.map(|l| l.split(',').map(str::to_string).collect()).collect()
}

const REPORT_HEADER: &str = "transfer_id,idempotency_key,reference,amount,currency,fee,status,event_at";

async fn lookup_json(client: &Client, mock: &RunningMock, key: &str) -> Value {
    json_of(client.get(format!("{}/v1/transfers?idempotency_key={key}", mock.url())).send().await.unwrap()).await
}

async fn admin_post(client: &Client, mock: &RunningMock, path: &str, body: &Value) -> reqwest::Response {
    client.post(format!("{}/__admin/{path}", mock.url())).json(body).send().await.unwrap()
}

fn day(at: chrono::DateTime<chrono::Utc>) -> String {
    at.date_naive().to_string()
}

#[tokio::test]
async fn settlement_report_lists_the_days_paid_and_failed_transfers() {
    let failed = FaultRule {
        idempotency_key: Some("k2".into()),
        ..rule(RouteMatch::Create, FaultEffect::SettleFailed { failure_code: "account_closed".into() })
    };
    let mock = spawn(MockConfig {
        api_key: Some("sekret".into()),
        faults: FaultConfig { rules: vec![failed] },
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let client = Client::new();
    let post = |key: &'static str, body: Value| {
        client
            .post(format!("{}/v1/transfers", mock.url()))
            .bearer_auth("sekret")
            .header("Idempotency-Key", key)
            .json(&body)
            .send()
    };
    let paid = json_of(post("k1", body("wd-1", "10.50", "1")).await.unwrap()).await;
    let failed = json_of(post("k2", body("wd-2", "20.00", "1")).await.unwrap()).await;
    assert_eq!((paid["status"].as_str(), failed["status"].as_str()), (Some("paid"), Some("failed")));
    let today = day(mock.now());

    let url = format!("{}/v1/reports/settlements?date={today}", mock.url());
    let anonymous = client.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let response = client.get(&url).bearer_auth("sekret").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "text/csv");
    let csv = response.text().await.unwrap();
    let lines = report_lines(&csv);
    assert_eq!(lines.len(), 2, "{csv}");
    fn expect(t: &Value, key: &str, amount: &str, status: &str) -> Vec<String> {
        let fields = [t["id"].as_str().unwrap(), key, t["reference"].as_str().unwrap(), amount, "USD", "0.00", status];
        fields.map(str::to_string).to_vec()
    }
    assert_eq!(lines[0][..7], expect(&paid, "k1", "10.50", "paid")[..], "{csv}");
    assert_eq!(lines[1][..7], expect(&failed, "k2", "20.00", "failed")[..], "{csv}");
    for line in &lines {
        let at = chrono::DateTime::parse_from_rfc3339(&line[7]).unwrap();
        assert_eq!(at.offset().local_minus_utc(), 0);
        assert_eq!(at.date_naive().to_string(), today);
    }
    assert!(lines[0][7] <= lines[1][7], "event order: {csv}");

    let yesterday = day(mock.now() - chrono::TimeDelta::days(1));
    let other =
        client.get(format!("{}/v1/reports/settlements?date={yesterday}", mock.url())).bearer_auth("sekret").send();
    assert_eq!(other.await.unwrap().text().await.unwrap(), format!("{REPORT_HEADER}\n"));
    assert_eq!(mock.settlement_report(mock.now().date_naive()), csv, "in-process report is the same");
    let routes: Vec<_> = mock.requests().into_iter().filter(|r| r.route == provider_mocks::Route::Report).collect();
    assert_eq!(routes.len(), 3);
}

#[tokio::test]
async fn a_later_return_is_on_the_return_days_report_and_the_transfer_reads_returned() {
    let mock = start(vec![]).await;
    let client = Client::new();
    let created = json_of(create(&client, &mock, "k1", &body("wd-1", "10.00", "1")).await).await;
    let paid_day = day(mock.now());

    // Tomorrow, the bank sends the money back.
    let clock = json_of(admin_post(&client, &mock, "clock", &json!({"offset_secs": 86_400})).await).await;
    assert_eq!(clock["offset_secs"], 86_400);
    let returned = admin_post(&client, &mock, "returns", &json!({"idempotency_key": "k1", "return_code": "R01"})).await;
    assert_eq!(returned.status(), StatusCode::NO_CONTENT);
    let return_day = day(mock.now());
    assert_ne!(paid_day, return_day);

    let lookup = lookup_json(&client, &mock, "k1").await;
    assert_eq!(
        (lookup["data"][0]["status"].as_str(), lookup["data"][0]["return_code"].as_str()),
        (Some("returned"), Some("R01"))
    );
    let (status, _, csv) = report(&client, &mock, &paid_day).await;
    assert_eq!(status, StatusCode::OK);
    let lines = report_lines(&csv);
    assert_eq!(lines.len(), 1, "{csv}");
    assert_eq!((lines[0][0].as_str(), lines[0][6].as_str()), (created["id"].as_str().unwrap(), "paid"));
    let (_, _, csv) = report(&client, &mock, &return_day).await;
    let lines = report_lines(&csv);
    assert_eq!(lines.len(), 1, "{csv}");
    assert_eq!(lines[0][..7], [created["id"].as_str().unwrap(), "k1", "wd-1", "10.00", "USD", "0.00", "returned"]);
    assert_eq!(lines[0][7][..10], return_day);

    // Refusals: unknown key, not paid (any more), a time before it was paid.
    let missing = json!({"idempotency_key": "nope", "return_code": "R01"});
    let missing = admin_post(&client, &mock, "returns", &missing).await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(json_of(missing).await, json!({"code": "not_found"}));
    let again = admin_post(&client, &mock, "returns", &json!({"idempotency_key": "k1", "return_code": "R02"})).await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert_eq!(json_of(again).await, json!({"code": "not_paid"}));
    create(&client, &mock, "k2", &body("wd-2", "5.00", "1")).await;
    let before = json!({"idempotency_key": "k2", "return_code": "R01", "at": "2000-01-01T00:00:00Z"});
    let before = admin_post(&client, &mock, "returns", &before).await;
    assert_eq!(before.status(), StatusCode::BAD_REQUEST);
    assert_eq!(json_of(before).await["code"], "invalid_request");

    // A return at a given time: nothing shows until the clock passes it.
    let at = mock.now() + chrono::TimeDelta::hours(3);
    let scheduled = json!({"idempotency_key": "k2", "return_code": "R03", "at": at.to_rfc3339()});
    assert_eq!(admin_post(&client, &mock, "returns", &scheduled).await.status(), StatusCode::NO_CONTENT);
    assert_eq!(lookup_json(&client, &mock, "k2").await["data"][0]["status"], "paid");
    let (_, _, csv) = report(&client, &mock, &day(at)).await;
    assert!(report_lines(&csv).iter().all(|l| !(l[1] == "k2" && l[6] == "returned")), "not yet: {csv}");
    mock.set_clock_offset(chrono::TimeDelta::hours(28));
    let lookup = lookup_json(&client, &mock, "k2").await;
    assert_eq!(
        (lookup["data"][0]["status"].as_str(), lookup["data"][0]["return_code"].as_str()),
        (Some("returned"), Some("R03"))
    );
    let (_, _, csv) = report(&client, &mock, &day(at)).await;
    let k2_returned: Vec<_> = report_lines(&csv).into_iter().filter(|l| l[1] == "k2" && l[6] == "returned").collect();
    assert_eq!(k2_returned.len(), 1, "{csv}");
    let event_at = chrono::DateTime::parse_from_rfc3339(&k2_returned[0][7]).unwrap();
    assert_eq!(event_at.timestamp_millis(), at.timestamp_millis(), "dated when it took effect");

    // In-process: a return now (the old call) and one at a given time.
    create(&client, &mock, "k3", &body("wd-3", "1.00", "1")).await;
    create(&client, &mock, "k4", &body("wd-4", "1.00", "1")).await;
    assert!(mock.return_transfer("k3", "R01"));
    assert!(mock.return_transfer_at("k4", "R04", mock.now() + chrono::TimeDelta::minutes(5)));
    assert!(!mock.return_transfer_at("k4", "R04", mock.now() - chrono::TimeDelta::days(30)), "before it was paid");
    let statuses: Vec<_> = mock.transfers().into_iter().map(|t| t.status).collect();
    use TransferStatus::{Paid, Returned};
    assert_eq!(statuses, [Returned, Returned, Returned, Paid]);
}

#[tokio::test]
async fn report_faults_show_in_the_csv_only() {
    let mock = start(vec![]).await;
    let client = Client::new();
    for (key, reference) in [("k1", "wd-1"), ("k2", "wd-2"), ("k3", "wd-3"), ("k4", "wd-4")] {
        create(&client, &mock, key, &body(reference, "10.00", "1")).await;
    }
    let today = day(mock.now());
    let mut before = Vec::new();
    for key in ["k1", "k2", "k3", "k4"] {
        before.push(lookup_json(&client, &mock, key).await);
    }
    let (_, _, honest) = report(&client, &mock, &today).await;
    assert_eq!(report_lines(&honest).len(), 4);

    let faults = json!({"rules": [
        {"type": "omit_paid", "idempotency_key": "k1"},
        {"type": "wrong_amount", "idempotency_key": "k2", "amount": "99.99"},
        {"type": "unknown_transfer", "transfer_id": "tr_ghost", "idempotency_key": "ghost", "amount": "7.00",
         "currency": "EUR", "date": today},
        {"type": "spurious_return", "idempotency_key": "k3"},
        {"type": "duplicate_line", "idempotency_key": "k4"},
        {"type": "malformed_line", "date": today}
    ]});
    assert_eq!(admin_post(&client, &mock, "report-faults", &faults).await.status(), StatusCode::NO_CONTENT);
    let round_trip = json_of(client.get(format!("{}/__admin/report-faults", mock.url())).send().await.unwrap()).await;
    assert_eq!(round_trip["rules"].as_array().unwrap().len(), 6);
    assert_eq!(round_trip["rules"][5]["amount"], "not-a-number");
    let typo = admin_post(&client, &mock, "report-faults", &json!({"rules": [{"type": "omit_pied"}]})).await;
    assert_eq!(typo.status(), StatusCode::BAD_REQUEST);

    let (status, content_type, csv) = report(&client, &mock, &today).await;
    assert_eq!((status, content_type.as_deref()), (StatusCode::OK, Some("text/csv")));
    let lines = report_lines(&csv);
    let of = |key: &str| -> Vec<(String, String)> {
        lines.iter().filter(|l| l[1] == key).map(|l| (l[3].clone(), l[6].clone())).collect()
    };
    let s = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(of("k1"), Vec::<(String, String)>::new(), "paid line omitted: {csv}");
    assert_eq!(of("k2"), [s("99.99", "paid")], "{csv}");
    assert_eq!(of("k3"), [s("10.00", "paid"), s("10.00", "returned")], "{csv}");
    assert_eq!(of("k4"), [s("10.00", "paid"), s("10.00", "paid")], "{csv}");
    let ghost: Vec<_> = lines.iter().filter(|l| l[1] == "ghost").collect();
    assert_eq!(ghost.len(), 1, "{csv}");
    assert_eq!(ghost[0][..7], ["tr_ghost", "ghost", "tr_ghost", "7.00", "EUR", "0.00", "paid"]);
    assert_eq!(ghost[0][7], format!("{today}T12:00:00.000Z"));
    let malformed: Vec<_> = lines.iter().filter(|l| l[3] == "not-a-number").collect();
    assert_eq!(malformed.len(), 1, "{csv}");
    assert_eq!(lines.len(), 7, "{csv}");
    let mut sorted = lines.iter().map(|l| l[7].clone()).collect::<Vec<_>>();
    sorted.sort();
    assert_eq!(sorted, lines.iter().map(|l| l[7].clone()).collect::<Vec<_>>(), "event order");

    // The transfers API still tells the truth.
    for (key, was) in ["k1", "k2", "k3", "k4"].into_iter().zip(&before) {
        assert_eq!(&lookup_json(&client, &mock, key).await, was, "{key}");
    }
    assert!(mock.transfers().iter().all(|t| t.status == TransferStatus::Paid));
    // Faults on another day stay there; reset clears them.
    let tomorrow = day(mock.now() + chrono::TimeDelta::days(1));
    assert_eq!(report(&client, &mock, &tomorrow).await.2, format!("{REPORT_HEADER}\n"));
    mock.set_report_faults(provider_mocks::ReportFaultConfig::default());
    assert_eq!(report(&client, &mock, &today).await.2, honest);
}

#[tokio::test]
async fn settlement_report_with_a_bad_date_is_400() {
    let mock = start(vec![]).await;
    let client = Client::new();
    for date in ["2024-13-01", "2024-02-30", "yesterday", "2024-3-1", ""] {
        let (status, _, text) = report(&client, &mock, date).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{date}");
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), json!({"code": "invalid_request"}));
    }
    let missing = client.get(format!("{}/v1/reports/settlements", mock.url())).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    assert_eq!(json_of(missing).await, json!({"code": "invalid_request"}));
}
