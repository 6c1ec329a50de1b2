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
