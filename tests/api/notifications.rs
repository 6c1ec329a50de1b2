//! Customer notifications (SPEC §17), end to end against a real receiving HTTP server: events
//! written with the change that causes them (and never by one rolled back), delivered signed
//! (Stripe's scheme) and verified with the endpoint's secret, retried with backoff until a 2xx,
//! a 410 disabling the endpoint, the rotation overlap, accounts kept apart, request forgery
//! refused, and the events API paging without gaps.

use std::time::Duration;

use provider_contract::webhook::SignatureHeader;
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};
use withdrawals::domain::{DeliveryResult, NotificationStatus, WebhookEndpointId, WithdrawalStatus};
use withdrawals::storage::notifications as store;

use crate::both_backends;
use crate::harness::{problem_code, read, serve_extra, test_config, worker_config, Customer, TestApp};

both_backends!(
    a_completed_withdrawal_s_events_arrive_signed_and_verify_with_the_secret,
    a_receiver_failing_twice_then_succeeding_gets_it_three_times_with_growing_delays,
    a_410_disables_the_endpoint_and_nothing_more_is_sent,
    a_rolled_back_change_writes_no_event,
    another_account_s_endpoints_and_events_are_invisible,
    during_a_rotation_both_secrets_sign_and_after_the_overlap_only_the_new_one,
    endpoint_urls_to_private_or_link_local_addresses_are_refused,
    a_name_that_resolves_to_loopback_at_delivery_is_refused_at_connect_time,
    the_events_api_pages_through_a_thousand_events_without_gaps,
    an_undeliverable_notification_is_dead_lettered_and_a_replay_delivers_it,
    a_freed_delivery_slot_claims_the_next_delivery_at_once,
    a_fan_out_larger_than_one_statement_s_parameters_is_split,
    a_later_failed_attempt_does_not_move_a_delivered_notification_back,
    a_notification_the_breaker_holds_through_its_window_is_dead_lettered,
);

const WAIT: Duration = Duration::from_secs(25);

/// Registers `url` for `events` as `customer`; returns the endpoint's JSON (with its secret).
async fn register(app: &TestApp, customer: &Customer, url: &str, events: Value) -> Value {
    let response = app
        .client
        .post(app.url("/v1/webhook-endpoints"))
        .bearer_auth(&customer.api_key)
        .json(&json!({"url": url, "events": events}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "{:?}", response.text().await);
    read(response).await
}

fn endpoint_id(endpoint: &Value) -> WebhookEndpointId {
    WebhookEndpointId::from_wire(endpoint["id"].as_str().unwrap()).unwrap()
}

/// A receiver answering 200 to every POST at `/hook`.
async fn receiver() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST")).and(path("/hook")).respond_with(ResponseTemplate::new(200)).mount(&server).await;
    server
}

/// The POSTs `server` received, oldest first.
async fn received(server: &MockServer) -> Vec<Request> {
    server.received_requests().await.unwrap_or_default()
}

fn body(request: &Request) -> Value {
    serde_json::from_slice(&request.body).unwrap()
}

fn signature(request: &Request) -> SignatureHeader {
    let header = request.headers.get("withdrawals-signature").expect("signed").to_str().unwrap();
    SignatureHeader::parse(header).unwrap()
}

/// Waits until `server` has received `n` requests.
async fn wait_for_requests(app: &TestApp, server: &MockServer, n: usize) -> Vec<Request> {
    app.eventually(&format!("{n} deliveries"), WAIT, || async {
        let got = received(server).await;
        (got.len() >= n).then_some(got)
    })
    .await
}

async fn a_completed_withdrawal_s_events_arrive_signed_and_verify_with_the_secret(app: TestApp) {
    let server = receiver().await;
    let alice = app.customer("100.00").await;
    let endpoint = register(&app, &alice, &format!("{}/hook", server.uri()), json!(["*"])).await;
    let secret = endpoint["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_eq!(endpoint["status"], "enabled");
    // The secret is shown once: the list never shows it, and the database holds it sealed.
    let listed: Value = read(app.get(&alice, "/v1/webhook-endpoints").send().await.unwrap()).await;
    assert!(listed["data"][0].get("secret").is_none(), "{listed}");
    let row = store::endpoint(&app.db, alice.account_id, endpoint_id(&endpoint)).await.unwrap().unwrap();
    assert!(!row.secret_sealed.windows(16).any(|w| secret.as_bytes().windows(16).any(|s| s == w)), "sealed");

    let _worker = app.start_default_worker();
    let id = app.create_withdrawal(&alice, "n1", "25.00").await;
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    let mut requests = wait_for_requests(&app, &server, 2).await;
    // Two jobs, delivered concurrently: the order of arrival is not promised, `version` orders them.
    requests.sort_by_key(|r| body(r)["data"]["version"].as_i64());
    let bodies: Vec<Value> = requests.iter().map(body).collect();
    let types: Vec<&str> = bodies.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["withdrawal.created", "withdrawal.completed"], "{bodies:?}");

    for request in &requests {
        let header = signature(request);
        assert_eq!(header.signatures.len(), 1);
        assert!(header.verify(&[secret.as_str()], &request.body), "verifies with the endpoint's secret");
        assert!(!header.verify(&["whsec_other"], &request.body), "and with no other");
        assert!((chrono::Utc::now().timestamp() - header.timestamp).abs() < 60, "signed now");
        let event = body(request);
        assert_eq!(request.headers.get("withdrawals-event-id").unwrap().to_str().unwrap(), event["id"]);
        assert!(event["id"].as_str().unwrap().starts_with("evt_"));
    }
    // `data` is the withdrawal as the customer API showed it at that moment, version and all.
    let completed = &bodies[1];
    let now: Value = read(app.get(&alice, &format!("/v1/withdrawals/{id}")).send().await.unwrap()).await;
    assert_eq!(completed["data"], now, "the completed event shows the withdrawal as GET shows it");
    assert_eq!(bodies[0]["data"]["status"], "pending");
    assert_eq!(bodies[0]["data"]["version"], 1);
    assert!(completed["data"]["version"].as_i64().unwrap() > 1);
    assert_eq!(completed["data"]["destination"]["account_number"], "****5678", "masked");

    // The same events are in the events API, oldest first, and each notification is delivered.
    let events: Value = read(app.get(&alice, "/v1/events").send().await.unwrap()).await;
    assert_eq!(events["data"], json!(bodies), "the events API shows what was delivered");
    // The answer is recorded after it arrives: wait for the record.
    let notifications = app
        .eventually("both recorded delivered", WAIT, || async {
            let found = store::notifications(&app.db, Some(endpoint_id(&endpoint)), None, 10).await.unwrap();
            found.iter().all(|n| n.status == NotificationStatus::Delivered).then_some(found)
        })
        .await;
    assert_eq!(notifications.len(), 2);
    assert!(notifications.iter().all(|n| n.attempts == 1 && n.last_status_code == Some(200)));
    let metrics = app.metrics().send().await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|l| l.starts_with("notification_deliveries_total{result=\"delivered\"}")), "{metrics}");
    app.assert_ledger_invariant().await;
}

async fn a_receiver_failing_twice_then_succeeding_gets_it_three_times_with_growing_delays(app: TestApp) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500))
        .up_to_n_times(2)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(200)).with_priority(2).mount(&server).await;
    let alice = app.customer("100.00").await;
    let endpoint = register(&app, &alice, &server.uri(), json!(["withdrawal.created"])).await;
    let _worker = app.start_default_worker();
    app.create_withdrawal(&alice, "r1", "5.00").await;

    let requests = wait_for_requests(&app, &server, 3).await;
    let ids: Vec<Value> = requests.iter().map(|r| body(r)["id"].clone()).collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "the same event each time: {ids:?}");
    let notification = app
        .eventually("delivered", WAIT, || async {
            let found = store::notifications(&app.db, Some(endpoint_id(&endpoint)), None, 10).await.unwrap();
            found.into_iter().find(|n| n.status == NotificationStatus::Delivered)
        })
        .await;
    let attempts = store::attempts(&app.db, notification.account_id, notification.id).await.unwrap();
    let answers: Vec<(i32, DeliveryResult, Option<i32>)> =
        attempts.iter().map(|a| (a.attempt, a.result, a.status_code)).collect();
    assert_eq!(
        answers,
        [
            (1, DeliveryResult::HttpError, Some(500)),
            (2, DeliveryResult::HttpError, Some(500)),
            (3, DeliveryResult::Delivered, Some(200))
        ]
    );
    assert_eq!(received(&server).await.len(), 3, "nothing after the 2xx");
    // Full jitter: each wait is drawn below a ceiling that doubles (50 ms, then 100 ms with the
    // test's base delay), plus the time a claim takes; the ceilings grow, a draw may be short.
    let policy = worker_config("x").notify.retry;
    let gap = |i: usize| (attempts[i].at.0 - attempts[i - 1].at.0).to_std().unwrap();
    let slack = Duration::from_millis(700);
    assert!(gap(1) <= policy.backoff_ceiling(1) + slack, "{:?}", gap(1));
    assert!(gap(2) <= policy.backoff_ceiling(2) + slack, "{:?}", gap(2));
    assert!(policy.backoff_ceiling(2) > policy.backoff_ceiling(1));
}

async fn a_410_disables_the_endpoint_and_nothing_more_is_sent(app: TestApp) {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(410)).mount(&server).await;
    let alice = app.customer("100.00").await;
    let endpoint = register(&app, &alice, &server.uri(), json!(["withdrawal.created"])).await;
    let _worker = app.start_default_worker();
    app.create_withdrawal(&alice, "g1", "5.00").await;

    let listed: Value = app
        .eventually("the endpoint disabled", WAIT, || async {
            let listed: Value = read(app.get(&alice, "/v1/webhook-endpoints").send().await.unwrap()).await;
            (listed["data"][0]["status"] == "disabled").then_some(listed)
        })
        .await;
    assert!(listed["data"][0]["disabled_reason"].as_str().unwrap().contains("410"), "{listed}");
    let notifications = store::notifications(&app.db, Some(endpoint_id(&endpoint)), None, 10).await.unwrap();
    assert_eq!(notifications[0].status, NotificationStatus::Gone);

    // A later event reaches no disabled endpoint: it is written, and nothing is sent.
    let second = app.create_withdrawal(&alice, "g2", "5.00").await;
    app.eventually("the second event fanned out", WAIT, || async {
        let events: Value = read(app.get(&alice, "/v1/events?type=withdrawal.created").send().await.unwrap()).await;
        let ids: Vec<&str> =
            events["data"].as_array().unwrap().iter().filter_map(|e| e["data"]["id"].as_str()).collect();
        ids.contains(&second.to_string().as_str()).then_some(())
    })
    .await;
    app.wait_for_status(second, WithdrawalStatus::Completed, WAIT).await;
    assert_eq!(received(&server).await.len(), 1, "one POST: the one answered 410");
}

async fn a_rolled_back_change_writes_no_event(app: TestApp) {
    let alice = app.customer("10.00").await;
    // A create refused for its funds rolls back: no withdrawal, no event.
    let refused =
        app.post_withdrawal(&alice, "too-much", &crate::harness::withdrawal_body("50.00")).send().await.unwrap();
    assert_eq!(refused.status(), 422);
    let events: Value = read(app.get(&alice, "/v1/events").send().await.unwrap()).await;
    assert_eq!(events["data"], json!([]), "{events}");

    // A move to completed whose transaction rolls back leaves no `withdrawal.completed`.
    let id = app.create_withdrawal(&alice, "ok", "5.00").await;
    let key = app.key(id).await;
    use withdrawals::storage::withdrawals::{self as wstore, TransitionOutcome, TransitionRequest};
    for (from, to) in [(WithdrawalStatus::Pending, WithdrawalStatus::Processing)] {
        let mut tx = app.db.begin().await.unwrap();
        let actor = withdrawals::domain::Actor::System;
        let req = TransitionRequest {
            key,
            from,
            to,
            expected_version: None,
            actor: &actor,
            reason: "test",
            correlation_id: "c",
            failure_code: None,
            evidence: None,
        };
        assert!(matches!(wstore::transition(&mut tx, &req).await.unwrap(), TransitionOutcome::Applied(_)));
        tx.commit().await.unwrap();
    }
    let mut tx = app.db.begin().await.unwrap();
    let actor = withdrawals::domain::Actor::System;
    let req = TransitionRequest {
        key,
        from: WithdrawalStatus::Processing,
        to: WithdrawalStatus::Failed,
        expected_version: None,
        actor: &actor,
        reason: "rolled back",
        correlation_id: "c",
        failure_code: Some("test"),
        evidence: None,
    };
    assert!(matches!(wstore::transition(&mut tx, &req).await.unwrap(), TransitionOutcome::Applied(_)));
    drop(tx);
    let after = store::events_of(&app.db, alice.account_id, id).await.unwrap();
    let types: Vec<&str> = after.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, ["withdrawal.created"], "the rolled-back failure wrote no event");

    // The same move committed writes its event, with the version the move left.
    let mut tx = app.db.begin().await.unwrap();
    let TransitionOutcome::Applied(moved) = wstore::transition(&mut tx, &req).await.unwrap() else { panic!() };
    tx.commit().await.unwrap();
    let after = store::events_of(&app.db, alice.account_id, id).await.unwrap();
    assert_eq!(after.len(), 2);
    assert_eq!(after[1].event_type, "withdrawal.failed");
    assert_eq!(after[1].withdrawal_version, moved.version);
    assert_eq!(after[1].to_json()["data"]["failure_code"], "test");
    app.assert_ledger_invariant().await;
}

async fn another_account_s_endpoints_and_events_are_invisible(app: TestApp) {
    let server = receiver().await;
    let alice = app.customer("100.00").await;
    let bob = app.customer("100.00").await;
    let endpoint = register(&app, &alice, &format!("{}/hook", server.uri()), json!(["*"])).await;
    let id = endpoint["id"].as_str().unwrap();
    app.create_withdrawal(&alice, "a1", "5.00").await;

    let bobs: Value = read(app.get(&bob, "/v1/webhook-endpoints").send().await.unwrap()).await;
    assert_eq!(bobs["data"], json!([]));
    let bobs_events: Value = read(app.get(&bob, "/v1/events").send().await.unwrap()).await;
    assert_eq!(bobs_events["data"], json!([]));
    let alices_events: Value = read(app.get(&alice, "/v1/events").send().await.unwrap()).await;
    assert_eq!(alices_events["data"].as_array().unwrap().len(), 1);

    let delete = app.client.delete(app.url(&format!("/v1/webhook-endpoints/{id}"))).bearer_auth(&bob.api_key);
    let (status, code, _) = problem_code(delete.send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (404, "not_found"));
    let rotate =
        app.client.post(app.url(&format!("/v1/webhook-endpoints/{id}/rotate-secret"))).bearer_auth(&bob.api_key);
    let (status, _, _) = problem_code(rotate.send().await.unwrap()).await;
    assert_eq!(status, 404);
    // Bob's cursor cannot be Alice's event either: it pages nothing of hers.
    let after = alices_events["data"][0]["id"].as_str().unwrap();
    let paged: Value = read(app.get(&bob, &format!("/v1/events?after={after}")).send().await.unwrap()).await;
    assert_eq!(paged["data"], json!([]));

    // Alice deletes hers: gone from her list, 404 the second time.
    let delete = app.client.delete(app.url(&format!("/v1/webhook-endpoints/{id}"))).bearer_auth(&alice.api_key);
    assert_eq!(delete.send().await.unwrap().status(), 204);
    let listed: Value = read(app.get(&alice, "/v1/webhook-endpoints").send().await.unwrap()).await;
    assert_eq!(listed["data"], json!([]));
    let again = app.client.delete(app.url(&format!("/v1/webhook-endpoints/{id}"))).bearer_auth(&alice.api_key);
    assert_eq!(again.send().await.unwrap().status(), 404);
}

async fn during_a_rotation_both_secrets_sign_and_after_the_overlap_only_the_new_one(app: TestApp) {
    let overlap = Duration::from_secs(2);
    let mut config = test_config();
    config.notify.rotation_overlap = overlap;
    let short = serve_extra(&app, config).await;
    let server = receiver().await;
    let alice = app.customer("100.00").await;
    let endpoint = register(&app, &alice, &format!("{}/hook", server.uri()), json!(["withdrawal.created"])).await;
    let old = endpoint["secret"].as_str().unwrap().to_owned();
    let rotate = format!("{short}/v1/webhook-endpoints/{}/rotate-secret", endpoint["id"].as_str().unwrap());
    let rotated: Value = read(app.client.post(rotate).bearer_auth(&alice.api_key).send().await.unwrap()).await;
    let new = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(old, new);
    assert!(rotated["previous_secret_expires_at"].is_string(), "{rotated}");

    let _worker = app.start_default_worker();
    app.create_withdrawal(&alice, "during", "5.00").await;
    let first = wait_for_requests(&app, &server, 1).await;
    let header = signature(&first[0]);
    assert_eq!(header.signatures.len(), 2, "one v1 per valid secret");
    assert!(header.verify(&[old.as_str()], &first[0].body), "the old secret still verifies");
    assert!(header.verify(&[new.as_str()], &first[0].body), "the new one too");

    tokio::time::sleep(overlap + Duration::from_millis(200)).await; // the overlap itself must pass
    app.create_withdrawal(&alice, "after", "5.00").await;
    let both = wait_for_requests(&app, &server, 2).await;
    let header = signature(&both[1]);
    assert_eq!(header.signatures.len(), 1, "the overlap is over");
    assert!(header.verify(&[new.as_str()], &both[1].body));
    assert!(!header.verify(&[old.as_str()], &both[1].body), "the old secret no longer signs");
}

async fn endpoint_urls_to_private_or_link_local_addresses_are_refused(app: TestApp) {
    let mut strict = test_config();
    strict.notify.allow_insecure = false;
    let base = serve_extra(&app, strict).await;
    let alice = app.customer("100.00").await;
    for url in [
        "http://example.com/hook",
        "https://127.0.0.1/hook",
        "https://10.1.2.3/hook",
        "https://192.168.0.10/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/hook",
        "https://[fe80::1]/hook",
        "https://[::ffff:127.0.0.1]/hook",
        "https://localhost/hook",
        "https://user:pass@example.com/hook",
        "not a url",
    ] {
        let response = app
            .client
            .post(format!("{base}/v1/webhook-endpoints"))
            .bearer_auth(&alice.api_key)
            .json(&json!({"url": url, "events": ["*"]}))
            .send()
            .await
            .unwrap();
        let (status, code, problem) = problem_code(response).await;
        assert_eq!((status, code.as_str()), (422, "invalid_webhook_url"), "{url}: {problem:?}");
    }
    let listed: Value = read(app.get(&alice, "/v1/webhook-endpoints").send().await.unwrap()).await;
    assert_eq!(listed["data"], json!([]), "nothing was registered");
    // Unknown event types are refused too.
    let response = app
        .client
        .post(format!("{base}/v1/webhook-endpoints"))
        .bearer_auth(&alice.api_key)
        .json(&json!({"url": "https://example.com/hook", "events": ["payout.paid"]}))
        .send()
        .await
        .unwrap();
    let (status, code, _) = problem_code(response).await;
    assert_eq!((status, code.as_str()), (422, "invalid_events"));
}

async fn a_name_that_resolves_to_loopback_at_delivery_is_refused_at_connect_time(app: TestApp) {
    // Registered while insecure URLs were allowed (the app's test settings); delivered by a worker
    // that allows only public addresses: `localhost` resolves to loopback when it connects.
    let server = receiver().await;
    let port = server.address().port();
    let alice = app.customer("100.00").await;
    let endpoint = register(&app, &alice, &format!("https://localhost:{port}/hook"), json!(["*"])).await;
    let mut config = worker_config("w-strict");
    config.notify.allow_insecure = false;
    let _worker = app.start_worker(app.gateway.clone(), config);
    app.create_withdrawal(&alice, "ssrf", "5.00").await;

    let attempt = app
        .eventually("a refused attempt", WAIT, || async {
            let found = store::notifications(&app.db, Some(endpoint_id(&endpoint)), None, 10).await.unwrap();
            let first = found.into_iter().find(|n| n.attempts > 0)?;
            store::attempts(&app.db, first.account_id, first.id).await.unwrap().into_iter().next()
        })
        .await;
    assert_eq!(attempt.result, DeliveryResult::Refused, "{attempt:?}");
    assert!(received(&server).await.is_empty(), "nothing reached the loopback receiver");
}

async fn the_events_api_pages_through_a_thousand_events_without_gaps(app: TestApp) {
    use futures::StreamExt;
    let alice = app.customer("100000.00").await;
    let bob = app.customer("100.00").await;
    // A thousand events: created concurrently, with another account's interleaved.
    let created: Vec<_> = futures::stream::iter(0..1000)
        .map(|i| {
            let app = &app;
            let who = if i % 100 == 7 { &bob } else { &alice };
            async move { app.create_withdrawal(who, &format!("p{i}"), "1.00").await }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    assert_eq!(created.len(), 1000);
    let alices = 1000 - 10;

    for limit in [100, 37] {
        let (mut seen, mut after, mut pages) = (Vec::new(), None::<String>, 0);
        loop {
            let query = match &after {
                Some(cursor) => format!("/v1/events?limit={limit}&after={cursor}"),
                None => format!("/v1/events?limit={limit}"),
            };
            let page: Value = read(app.get(&alice, &query).send().await.unwrap()).await;
            pages += 1;
            for event in page["data"].as_array().unwrap() {
                seen.push(event["id"].as_str().unwrap().to_owned());
            }
            match page["next_cursor"].as_str() {
                Some(next) => after = Some(next.to_owned()),
                None => break,
            }
        }
        assert_eq!(seen.len(), alices, "every event once (limit {limit})");
        let mut sorted = seen.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, seen, "oldest first, no repeats (limit {limit})");
        assert_eq!(pages, alices.div_ceil(limit), "limit {limit}");
    }
    let typed: Value = read(app.get(&alice, "/v1/events?type=withdrawal.completed").send().await.unwrap()).await;
    assert_eq!(typed["data"], json!([]), "nothing completed: no worker ran");
    for bad in ["/v1/events?limit=0", "/v1/events?limit=101", "/v1/events?type=payout.paid", "/v1/events?after=x"] {
        let (status, _, _) = problem_code(app.get(&alice, bad).send().await.unwrap()).await;
        assert_eq!(status, 422, "{bad}");
    }
}

async fn an_undeliverable_notification_is_dead_lettered_and_a_replay_delivers_it(app: TestApp) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503).insert_header("Retry-After", "0"))
        .mount(&server)
        .await;
    let alice = app.customer("100.00").await;
    let endpoint = register(&app, &alice, &server.uri(), json!(["withdrawal.created"])).await;
    let mut config = worker_config("w-short-window");
    config.notify.retry.max_elapsed = Duration::from_millis(600);
    config.notify.breaker.minimum_number_of_calls = 1_000; // every attempt reaches the receiver
    let _worker = app.start_worker(app.gateway.clone(), config);
    let id = app.create_withdrawal(&alice, "dl", "5.00").await;

    let viewer = app.operator("viewer").await;
    let letters: Value = app
        .eventually("a notification_undeliverable dead letter", WAIT, || async {
            let page: Value = app.ops_get(&viewer, "/ops/v1/dead-letters?category=notification_undeliverable").await;
            (!page["data"].as_array().unwrap().is_empty()).then_some(page)
        })
        .await;
    let letter = &letters["data"][0];
    assert_eq!(letter["queue"], "notifications", "{letter}");
    assert_eq!(letter["owner"], "integration team");
    let notification = store::notifications(&app.db, Some(endpoint_id(&endpoint)), None, 10).await.unwrap().remove(0);
    assert_eq!(notification.status, NotificationStatus::Undeliverable);
    assert!(notification.attempts >= 2, "retried before giving up: {notification:?}");
    // The payout is untouched by its notification's fate.
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    let tried = received(&server).await.len();

    // The integrator mends the endpoint; an operator replays the letter to the notifications queue.
    server.reset().await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(200)).mount(&server).await;
    let admin = app.operator("admin").await;
    let start = json!({"reason": "integrator fixed their endpoint", "dead_letter_ids": [letter["id"]],
                       "expected_payload_version": 1, "destination_queue": "notifications",
                       "rate_per_second": 5, "max_concurrency": 10});
    let started = app.client.post(app.url("/ops/v1/replays")).bearer_auth(&admin).json(&start).send().await.unwrap();
    assert_eq!(started.status(), 201, "{:?}", started.text().await);
    let delivered = wait_for_requests(&app, &server, 1).await;
    assert_eq!(body(&delivered[0])["type"], "withdrawal.created");
    assert_eq!(body(&delivered[0])["data"]["id"], id.to_string());
    app.eventually("the notification delivered", WAIT, || async {
        let n = store::notification(&app.db, notification.id).await.unwrap().unwrap();
        (n.status == NotificationStatus::Delivered).then_some(())
    })
    .await;
    assert!(tried >= 2);
    // Delivered after all: its dead letter leaves the open queue.
    let open: Value = app
        .eventually("the letter closed", WAIT, || async {
            let page: Value =
                app.ops_get(&viewer, "/ops/v1/dead-letters?category=notification_undeliverable&state=open").await;
            page["data"].as_array().unwrap().is_empty().then_some(page)
        })
        .await;
    assert_eq!(open["data"], json!([]));
    app.assert_ledger_invariant().await;
}

/// A delivery that finishes frees its slot and the worker claims the next due delivery at once:
/// with one slot and a poll interval far longer than the wait, eight deliveries still land
/// within seconds (before, each waited for the poll once the slots had been full: the bench
/// delivered 8 a second however fast the receiver).
async fn a_freed_delivery_slot_claims_the_next_delivery_at_once(app: TestApp) {
    let server = receiver().await;
    let alice = app.customer("100.00").await;
    register(&app, &alice, &format!("{}/hook", server.uri()), json!(["withdrawal.created"])).await;
    for i in 0..8 {
        app.create_withdrawal(&alice, &format!("slot-{i}"), "1.00").await;
    }
    let mut config = worker_config("w-one-slot");
    config.poll_interval = Duration::from_secs(120);
    config.notify.concurrency = 1;
    let _worker = app.start_worker(app.gateway.clone(), config);
    let requests = wait_for_requests(&app, &server, 8).await;
    let mut ids: Vec<String> = requests.iter().map(|r| body(r)["id"].as_str().unwrap().to_owned()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 8, "eight distinct events");
    app.assert_ledger_invariant().await;
}

/// One dispatcher batch of 500 events at nine endpoints each is 4 500 notifications and as many
/// jobs: more values than one statement may bind (PostgreSQL's limit is 65 535). The fan-out takes
/// fewer events per transaction instead of failing the batch forever; every notification is made
/// exactly once.
async fn a_fan_out_larger_than_one_statement_s_parameters_is_split(app: TestApp) {
    use futures::StreamExt;
    let alice = app.customer("100000.00").await;
    for i in 0..9 {
        register(&app, &alice, &format!("http://127.0.0.1:9/hook{i}"), json!(["withdrawal.created"])).await;
    }
    let created: Vec<_> = futures::stream::iter(0..500)
        .map(|i| {
            let app = &app;
            let alice = &alice;
            async move { app.create_withdrawal(alice, &format!("f{i}"), "1.00").await }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    assert_eq!(created.len(), 500);
    let (mut events, mut notifications, mut rounds) = (0, 0, 0);
    loop {
        let (e, n) = store::fan_out(&app.db, 500).await.expect("a fan-out batch commits");
        if e == 0 {
            break;
        }
        events += e;
        notifications += n;
        rounds += 1;
        assert!(rounds < 20, "the fan-out makes progress");
    }
    assert_eq!((events, notifications), (500, 4500));
    let stored = store::notifications(&app.db, None, None, 5000).await.unwrap();
    assert_eq!(stored.len(), 4500, "each event once per endpoint");
}

/// An operator's redelivery runs a second job beside the one retrying: when one has delivered,
/// the other's failure (recorded after it) leaves the notification delivered.
async fn a_later_failed_attempt_does_not_move_a_delivered_notification_back(app: TestApp) {
    let alice = app.customer("100.00").await;
    let endpoint = register(&app, &alice, "http://127.0.0.1:9/hook", json!(["withdrawal.created"])).await;
    app.create_withdrawal(&alice, "two-jobs", "1.00").await;
    assert_eq!(store::fan_out(&app.db, 10).await.unwrap(), (1, 1));
    let n = store::notifications(&app.db, Some(endpoint_id(&endpoint)), None, 10).await.unwrap().remove(0);
    let attempt = |attempt, result, status_code, status| store::Attempted {
        account: n.account_id,
        notification: n.id,
        endpoint: n.endpoint_id,
        endpoint_was_failing: false,
        attempt,
        result,
        status_code,
        error: None,
        duration_ms: 5,
        at: withdrawals::storage::DbTime::now(),
        status,
    };
    let mut tx = app.db.begin().await.unwrap();
    let first = attempt(1, DeliveryResult::Delivered, Some(200), NotificationStatus::Delivered);
    assert_eq!(store::record_attempt(&mut tx, &first).await.unwrap(), store::Recorded::Open { failing_since: None });
    tx.commit().await.unwrap();
    let mut tx = app.db.begin().await.unwrap();
    let late = attempt(1, DeliveryResult::Timeout, None, NotificationStatus::Pending);
    assert_eq!(store::record_attempt(&mut tx, &late).await.unwrap(), store::Recorded::Settled);
    tx.commit().await.unwrap();
    let now = store::notification(&app.db, n.id).await.unwrap().unwrap();
    assert_eq!(now.status, NotificationStatus::Delivered);
    assert!(now.delivered_at.is_some(), "{now:?}");
    assert_eq!(store::attempts(&app.db, n.account_id, n.id).await.unwrap().len(), 2, "both attempts recorded");
}

/// A dead endpoint's breaker opens and turns its deliveries away without an attempt; the window
/// still runs for them: each is dead-lettered when it ends (not held until the breaker's long
/// wait, nor `skipped` days later when the endpoint is disabled).
async fn a_notification_the_breaker_holds_through_its_window_is_dead_lettered(app: TestApp) {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(500)).mount(&server).await;
    let alice = app.customer("100.00").await;
    let endpoint = register(&app, &alice, &server.uri(), json!(["withdrawal.created"])).await;
    for i in 0..8 {
        app.create_withdrawal(&alice, &format!("held-{i}"), "1.00").await;
    }
    let mut config = worker_config("w-breaker-window");
    config.notify.retry.max_elapsed = Duration::from_millis(1_500);
    config.notify.breaker.minimum_number_of_calls = 4;
    config.notify.breaker.wait_duration_in_open = Duration::from_secs(120);
    let _worker = app.start_worker(app.gateway.clone(), config);
    let settled = app
        .eventually("every notification dead-lettered", WAIT, || async {
            let found = store::notifications(&app.db, Some(endpoint_id(&endpoint)), None, 10).await.unwrap();
            (found.len() == 8 && found.iter().all(|n| n.status == NotificationStatus::Undeliverable)).then_some(found)
        })
        .await;
    let never_tried = settled.iter().filter(|n| n.attempts == 0).count();
    assert!(never_tried > 0 || settled.iter().any(|n| n.attempts < 3), "the breaker held some: {settled:?}");
    let viewer = app.operator("viewer").await;
    let page: Value = app.ops_get(&viewer, "/ops/v1/dead-letters?category=notification_undeliverable&limit=50").await;
    let letters = page["data"].as_array().unwrap();
    assert_eq!(letters.len(), 8, "{page}");
    assert!(letters.iter().any(|l| l["error_code"] == "endpoint_breaker_open"), "{page}");
}
