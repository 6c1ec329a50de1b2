//! SPEC §4's classification table, row by row, against a real HTTP server (wiremock), plus the
//! connection-level rows that need a real socket (refused) or the provider mock (reset).

use std::time::Duration;

use secrecy::SecretString;
use serde_json::json;
use wiremock::matchers::{body_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};
use withdrawals::domain::Destination;
use withdrawals::provider::{
    HttpProvider, LookupOutcome, Provider, ProviderConfig, SubmitOutcome, TransferRequest, TransferStatus,
};
use withdrawals::storage::attempts::SideEffect;

fn client(base_url: String) -> HttpProvider {
    HttpProvider::new(ProviderConfig {
        base_url,
        api_key: SecretString::from("provider-secret"),
        connect_timeout: Duration::from_millis(300),
        request_timeout: Duration::from_millis(400),
    })
    .unwrap()
}

fn request() -> TransferRequest {
    TransferRequest {
        reference: "wd-1".into(),
        amount: "125.50".into(),
        currency: "USD".into(),
        destination: Destination::parse("bank_account", "12345678", "021000021").unwrap(),
    }
}

async fn submit_against(response: ResponseTemplate) -> SubmitOutcome {
    let server = MockServer::start().await;
    Mock::given(method("POST")).and(path("/v1/transfers")).respond_with(response).mount(&server).await;
    client(server.uri()).submit("wd-1", "corr-1", &request()).await
}

fn transfer(status: &str) -> serde_json::Value {
    json!({"id": "tr_1", "reference": "wd-1", "amount": "125.50", "currency": "USD", "status": status})
}

#[tokio::test]
async fn the_request_carries_the_idempotency_key_credentials_correlation_id_and_body() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/transfers"))
        .and(header("idempotency-key", "wd-1"))
        .and(header("authorization", "Bearer provider-secret"))
        .and(header("x-correlation-id", "corr-1"))
        .and(body_json(json!({
            "reference": "wd-1", "amount": "125.50", "currency": "USD",
            "destination": {"type": "bank_account", "account_number": "12345678", "bank_code": "021000021"}
        })))
        .respond_with(ResponseTemplate::new(201).set_body_json(transfer("paid")))
        .expect(1)
        .mount(&server)
        .await;

    let outcome = client(server.uri()).submit("wd-1", "corr-1", &request()).await;

    assert!(
        matches!(outcome, SubmitOutcome::Accepted { ref transfer, http_status: 201 } if transfer.status == TransferStatus::Paid)
    );
}

#[tokio::test]
async fn a_2xx_transfer_is_accepted_with_its_status() {
    for (status, body, expected) in [
        (201, transfer("paid"), TransferStatus::Paid),
        (201, transfer("pending"), TransferStatus::Pending),
        (
            200,
            json!({"id": "tr_1", "amount": "125.50", "currency": "USD", "status": "failed", "failure_code": "account_closed"}),
            TransferStatus::Failed,
        ),
        (200, transfer("returned"), TransferStatus::Returned),
    ] {
        match submit_against(ResponseTemplate::new(status).set_body_json(body)).await {
            SubmitOutcome::Accepted { transfer, http_status } => {
                assert_eq!((transfer.status, http_status), (expected, status));
                if expected == TransferStatus::Failed {
                    assert_eq!(transfer.failure_code.as_deref(), Some("account_closed"));
                }
            }
            other => panic!("{status}: {other:?}"),
        }
    }
}

/// SPEC §4: a transfer's amount and currency are part of the contract. A 2xx whose transfer
/// lacks them cannot be checked against the withdrawal, so it decides nothing: unknown, and
/// reconciliation asks again.
#[tokio::test]
async fn a_2xx_transfer_without_amount_or_currency_is_unknown() {
    for body in [
        json!({"id": "tr_1", "reference": "wd-1", "currency": "USD", "status": "paid"}),
        json!({"id": "tr_1", "reference": "wd-1", "amount": "125.50", "status": "paid"}),
    ] {
        let outcome = submit_against(ResponseTemplate::new(201).set_body_json(body.clone())).await;
        assert!(
            matches!(outcome, SubmitOutcome::Unknown(ref e) if e.code == "unparseable_success"),
            "{body}: {outcome:?}"
        );
    }
}

#[tokio::test]
async fn rate_limits_and_unavailability_are_retryable_and_keep_retry_after() {
    let limited = submit_against(ResponseTemplate::new(429).insert_header("Retry-After", "7")).await;
    let SubmitOutcome::Retryable(error) = limited else { panic!("429 must be retryable: {limited:?}") };
    assert_eq!((error.code.as_str(), error.retry_after), ("http_429", Some(Duration::from_secs(7))));

    let unavailable = submit_against(ResponseTemplate::new(503)).await;
    assert!(matches!(unavailable, SubmitOutcome::Retryable(ref e) if e.code == "http_503" && e.retry_after.is_none()));
}

#[tokio::test]
async fn server_errors_after_receipt_and_unreadable_success_are_unknown() {
    for status in [500, 502, 504] {
        let outcome = submit_against(ResponseTemplate::new(status)).await;
        assert!(
            matches!(outcome, SubmitOutcome::Unknown(ref e) if e.http_status == Some(status)),
            "{status}: {outcome:?}"
        );
    }
    let garbled = submit_against(ResponseTemplate::new(201).set_body_string("<html>ok</html>")).await;
    assert!(matches!(garbled, SubmitOutcome::Unknown(ref e) if e.code == "unparseable_success"), "{garbled:?}");
}

#[tokio::test]
async fn a_timeout_after_the_request_was_sent_is_unknown() {
    let outcome =
        submit_against(ResponseTemplate::new(201).set_body_json(transfer("paid")).set_delay(Duration::from_secs(2)))
            .await;

    assert!(matches!(outcome, SubmitOutcome::Unknown(ref e) if e.code == "timeout_after_send"), "{outcome:?}");
}

#[tokio::test]
async fn rejections_are_permanent_with_the_right_side_effect() {
    let invalid = submit_against(ResponseTemplate::new(422).set_body_json(json!({"code": "invalid_account"}))).await;
    assert_eq!(
        invalid,
        SubmitOutcome::Permanent {
            error: withdrawals::provider::ProviderError {
                code: "invalid_account".into(),
                http_status: Some(422),
                message: "provider rejected the request (422 Unprocessable Entity)".into(),
                retry_after: None,
            },
            side_effect: SideEffect::Confirmed,
        }
    );
    let bad = submit_against(ResponseTemplate::new(400)).await;
    assert!(matches!(bad, SubmitOutcome::Permanent { side_effect: SideEffect::Confirmed, .. }), "{bad:?}");
    for status in [401, 403] {
        let outcome = submit_against(ResponseTemplate::new(status)).await;
        assert!(
            matches!(outcome, SubmitOutcome::Permanent { ref error, side_effect: SideEffect::NotStarted } if error.code == "provider_credentials_rejected"),
            "{status}: {outcome:?}"
        );
    }
}

#[tokio::test]
async fn an_idempotency_conflict_at_the_provider_is_its_own_outcome() {
    let outcome = submit_against(ResponseTemplate::new(409)).await;

    assert!(matches!(outcome, SubmitOutcome::IdempotencyConflict(_)), "{outcome:?}");
}

#[tokio::test]
async fn a_refused_connection_is_retryable() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };

    let outcome = client(format!("http://127.0.0.1:{port}")).submit("wd-1", "corr-1", &request()).await;

    assert!(matches!(outcome, SubmitOutcome::Retryable(ref e) if e.code == "connect_failed"), "{outcome:?}");
}

#[tokio::test]
async fn a_connection_reset_after_the_provider_committed_is_unknown() {
    let mock = provider_mocks::spawn(provider_mocks::MockConfig::default()).await.unwrap();
    mock.set_faults(provider_mocks::FaultConfig {
        rules: vec![provider_mocks::FaultRule::new(
            provider_mocks::RouteMatch::Create,
            provider_mocks::FaultEffect::ResetAfterCommit,
        )],
    });

    let outcome = client(mock.url()).submit("wd-1", "corr-1", &request()).await;

    assert!(matches!(outcome, SubmitOutcome::Unknown(ref e) if e.code == "connection_lost_after_send"), "{outcome:?}");
    assert_eq!(mock.transfers().len(), 1, "the provider did execute it");
}

#[tokio::test]
async fn lookups_distinguish_found_not_found_and_unavailable() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/transfers"))
        .and(query_param("idempotency_key", "known"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"data": [transfer("paid")]})))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/transfers"))
        .and(query_param("idempotency_key", "unknown"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"data": []})))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/transfers"))
        .and(query_param("idempotency_key", "down"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    let provider = client(server.uri());

    assert!(matches!(provider.lookup("known", "c").await, LookupOutcome::Found(ref t) if t.len() == 1));
    assert_eq!(provider.lookup("unknown", "c").await, LookupOutcome::NotFound);
    assert!(matches!(provider.lookup("down", "c").await, LookupOutcome::Unavailable(_)));
}

/// `GET /v1/transfers/{id}`: the transfer, a definitive 404, or "could not be asked".
#[tokio::test]
async fn a_get_by_id_reads_one_transfer_and_a_404_is_not_found() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/transfers/tr_1"))
        .and(header("authorization", "Bearer provider-secret"))
        .respond_with(ResponseTemplate::new(200).set_body_json(transfer("paid")))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/transfers/tr_gone"))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({"code": "not_found"})))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/transfers/tr_busy"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    let provider = client(server.uri());

    let found = provider.get("tr_1", "corr-1").await;
    assert!(
        matches!(&found, LookupOutcome::Found(ts) if ts.len() == 1 && ts[0].amount.to_string() == "125.50"),
        "{found:?}"
    );
    assert_eq!(provider.get("tr_gone", "corr-1").await, LookupOutcome::NotFound);
    assert!(
        matches!(provider.get("tr_busy", "corr-1").await, LookupOutcome::Unavailable(ref e) if e.code == "http_503")
    );
}
