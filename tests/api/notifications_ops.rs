//! Customer notifications on the operator side (SPEC §17, issue item 5), end to end against a
//! real receiving HTTP server (wiremock): the ops API lists every endpoint with its health and
//! the deliveries (filtered by endpoint and status), shows one with its event and attempts; a
//! redelivery needs the operator role and a reason, sends the same event again and is audited,
//! and is refused for a disabled endpoint; the CLI (the real binary) and the console (a real
//! headless Chromium) do the same through the same core.

use std::time::Duration;

use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};
use withdrawals::domain::{DeliveryResult, EndpointStatus, EventType, NotificationStatus};
use withdrawals::ops::types::{List, NotificationDetail, NotificationView, Redelivered, WebhookEndpointView};
use withdrawals::storage::audit::{self, AuditFilter, AuditRow};

use crate::both_backends;
use crate::browser::Browser;
use crate::harness::{problem_code, read, Customer, TestApp};
use crate::ops::cli;

both_backends!(
    operators_see_every_endpoint_with_its_health_and_filter_its_deliveries,
    a_viewer_cannot_redeliver_and_a_redelivery_needs_a_reason,
    an_operators_redelivery_sends_the_same_event_again_and_is_audited,
    a_redelivery_to_an_endpoint_disabled_by_a_410_is_refused,
    the_cli_lists_endpoints_and_notifications_and_redelivers_one,
    the_console_shows_each_endpoints_health_and_deliveries_and_redelivers_one,
);

const WAIT: Duration = Duration::from_secs(25);

/// A receiver answering `status` to every POST at `/hook`.
async fn receiver(status: u16) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST")).and(path("/hook")).respond_with(ResponseTemplate::new(status)).mount(&server).await;
    server
}

/// The POSTs `server` received, oldest first.
async fn received(server: &MockServer) -> Vec<Request> {
    server.received_requests().await.unwrap_or_default()
}

fn body(request: &Request) -> Value {
    serde_json::from_slice(&request.body).unwrap()
}

/// Registers `<server>/hook` for every event type as `customer`; returns its `we_…` id.
async fn register(app: &TestApp, customer: &Customer, server: &MockServer) -> String {
    let response = app
        .client
        .post(app.url("/v1/webhook-endpoints"))
        .bearer_auth(&customer.api_key)
        .json(&json!({"url": format!("{}/hook", server.uri()), "events": ["*"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "{:?}", response.text().await);
    let endpoint: Value = read(response).await;
    endpoint["id"].as_str().unwrap().to_owned()
}

/// The notifications an operator lists for `query` (`?endpoint=…&status=…`).
async fn listed(app: &TestApp, token: &str, query: &str) -> Vec<NotificationView> {
    app.ops_get::<List<NotificationView>>(token, &format!("/ops/v1/notifications{query}")).await.data
}

/// A customer with an endpoint at a receiver answering 200, and a withdrawal paid out: its
/// `created` and `completed` events both delivered. Returns the receiver, the endpoint's id and
/// the two notifications (newest first), as a viewer lists them.
async fn two_delivered(app: &TestApp, viewer: &str) -> (MockServer, Customer, String, Vec<NotificationView>) {
    let server = receiver(200).await;
    let alice = app.customer("100.00").await;
    let endpoint = register(app, &alice, &server).await;
    app.start_default_worker();
    app.create_withdrawal(&alice, "n1", "25.00").await;
    let query = format!("?endpoint={endpoint}");
    let delivered = app
        .eventually("both notifications delivered", WAIT, || async {
            let all = listed(app, viewer, &query).await;
            (all.len() == 2 && all.iter().all(|n| n.status == NotificationStatus::Delivered)).then_some(all)
        })
        .await;
    assert_eq!(received(&server).await.len(), 2);
    (server, alice, endpoint, delivered)
}

async fn audit_rows(app: &TestApp, action: &str) -> Vec<AuditRow> {
    let filter = AuditFilter { action: Some(action.into()), limit: 20, ..Default::default() };
    audit::list(&app.db, &filter).await.unwrap()
}

fn redeliver(app: &TestApp, token: &str, id: impl std::fmt::Display, reason: &str) -> reqwest::RequestBuilder {
    app.client
        .post(app.url(&format!("/ops/v1/notifications/{id}/redeliver")))
        .bearer_auth(token)
        .json(&json!({"reason": reason}))
}

async fn operators_see_every_endpoint_with_its_health_and_filter_its_deliveries(app: TestApp) {
    let viewer = app.operator("viewer").await;
    let (server, alice, endpoint, delivered) = two_delivered(&app, &viewer).await;

    let endpoints: List<WebhookEndpointView> = app.ops_get(&viewer, "/ops/v1/webhook-endpoints").await;
    assert_eq!(endpoints.data.len(), 1);
    let e = &endpoints.data[0];
    assert_eq!((e.id.as_str(), e.account_id), (endpoint.as_str(), alice.account_id.0));
    assert_eq!(e.url, format!("{}/hook", server.uri()));
    assert_eq!(e.events, EventType::ALL.to_vec());
    assert_eq!((e.status, e.disabled_reason.as_deref(), e.failing_since), (EndpointStatus::Enabled, None, None));
    assert_eq!((e.notifications.delivered, e.notifications.pending, e.notifications.gone), (2, 0, 0));
    let raw: Value = app.ops_get(&viewer, "/ops/v1/webhook-endpoints").await;
    assert!(raw["data"][0].get("secret").is_none() && !raw.to_string().contains("whsec_"), "no secret: {raw}");

    // Newest first, each with the event the receiver got.
    let types: Vec<EventType> = delivered.iter().map(|n| n.event_type).collect();
    assert_eq!(types, [EventType::Completed, EventType::Created]);
    // Both are sent at once (the receiver sees them in either order), each with its event's id.
    let mut sent: Vec<String> =
        received(&server).await.iter().map(|r| body(r)["id"].as_str().unwrap().to_owned()).collect();
    let mut ids: Vec<String> = delivered.iter().map(|n| n.event_id.clone()).collect();
    sent.sort();
    ids.sort();
    assert_eq!(sent, ids);
    for n in &delivered {
        assert_eq!((n.attempts, n.last_status_code, n.last_error.as_deref()), (1, Some(200), None));
        assert!(n.delivered_at.is_some() && n.endpoint_id == endpoint);
    }

    // Filters: by status, by endpoint; what matches nothing is an empty list.
    assert_eq!(listed(&app, &viewer, "?status=delivered").await.len(), 2);
    assert!(listed(&app, &viewer, "?status=pending").await.is_empty());
    assert!(listed(&app, &viewer, &format!("?endpoint={endpoint}&status=undeliverable")).await.is_empty());
    assert_eq!(listed(&app, &viewer, "?limit=1").await.len(), 1);
    let other = withdrawals::domain::WebhookEndpointId::new().wire();
    assert!(listed(&app, &viewer, &format!("?endpoint={other}")).await.is_empty());
    for (query, code, field) in [
        ("?status=paid", "invalid_status", "status"),
        ("?endpoint=not-an-endpoint", "invalid_endpoint", "endpoint"),
        ("?limit=0", "invalid_limit", "limit"),
        ("?status=%00", "invalid_query", "status"),
        ("?endpoint=we_%1B", "invalid_query", "endpoint"),
    ] {
        let response = app
            .client
            .get(app.url(&format!("/ops/v1/notifications{query}")))
            .bearer_auth(&viewer)
            .send()
            .await
            .unwrap();
        let (status, got, problem) = problem_code(response).await;
        assert_eq!((status, got.as_str(), problem.field.as_deref()), (422, code, Some(field)), "{query}");
    }

    // One notification: its endpoint, the event exactly as sent, and its attempt.
    let completed = &delivered[0];
    let detail: NotificationDetail = app.ops_get(&viewer, &format!("/ops/v1/notifications/{}", completed.id)).await;
    assert_eq!(detail.notification.id, completed.id);
    assert_eq!(detail.endpoint.id, endpoint);
    let as_sent = received(&server).await.iter().map(body).find(|b| b["id"] == completed.event_id.as_str()).unwrap();
    assert_eq!(detail.event, as_sent, "the event as the receiver got it");
    assert_eq!(detail.attempts.len(), 1);
    let a = &detail.attempts[0];
    assert_eq!((a.attempt, a.result, a.status_code), (1, DeliveryResult::Delivered, Some(200)));

    // An unknown or malformed id names nothing; without a token, nothing is shown.
    for id in [uuid::Uuid::now_v7().to_string(), "ntf_nope".to_owned()] {
        let response =
            app.client.get(app.url(&format!("/ops/v1/notifications/{id}"))).bearer_auth(&viewer).send().await.unwrap();
        assert_eq!(problem_code(response).await.0, 404, "{id}");
    }
    for path in ["/ops/v1/notifications", "/ops/v1/webhook-endpoints"] {
        let response = app.client.get(app.url(path)).bearer_auth(&alice.api_key).send().await.unwrap();
        assert_eq!(problem_code(response).await.0, 401, "a customer's key is no operator token: {path}");
    }
    assert!(audit_rows(&app, "notification.redeliver").await.is_empty(), "reading is not audited");
}

async fn a_viewer_cannot_redeliver_and_a_redelivery_needs_a_reason(app: TestApp) {
    let viewer = app.operator("viewer").await;
    let operator = app.operator("operator").await;
    let (server, _alice, _endpoint, delivered) = two_delivered(&app, &viewer).await;
    let id = delivered[0].id;

    // The role is checked before the body is read: a viewer's request is a 403 even without one.
    let (status, code, _) = problem_code(redeliver(&app, &viewer, id, "customer asked").send().await.unwrap()).await;
    assert_eq!((status, code.as_str()), (403, "forbidden"));
    let bare = app.client.post(app.url(&format!("/ops/v1/notifications/{id}/redeliver"))).bearer_auth(&viewer);
    assert_eq!(problem_code(bare.send().await.unwrap()).await.0, 403);

    for reason in ["", "   "] {
        let (status, code, problem) = problem_code(redeliver(&app, &operator, id, reason).send().await.unwrap()).await;
        assert_eq!((status, code.as_str(), problem.field.as_deref()), (422, "reason_required", Some("reason")));
    }
    let missing = app
        .client
        .post(app.url(&format!("/ops/v1/notifications/{id}/redeliver")))
        .bearer_auth(&operator)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(problem_code(missing).await.0, 422, "no reason at all");
    let nul = redeliver(&app, &operator, id, "bad\u{0}").send().await.unwrap();
    let (status, code, problem) = problem_code(nul).await;
    assert_eq!((status, code.as_str(), problem.field.as_deref()), (422, "invalid_body", Some("reason")));
    let unknown = redeliver(&app, &operator, uuid::Uuid::now_v7(), "customer asked").send().await.unwrap();
    assert_eq!(problem_code(unknown).await.0, 404);

    // Nothing was sent again or changed; every refusal is audited.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(received(&server).await.len(), 2);
    let detail: NotificationDetail = app.ops_get(&viewer, &format!("/ops/v1/notifications/{id}")).await;
    assert_eq!((detail.notification.status, detail.notification.attempts), (NotificationStatus::Delivered, 1));
    let rows = audit_rows(&app, "notification.redeliver").await;
    let results: Vec<(&str, &str)> = rows.iter().rev().map(|r| (r.role.as_str(), r.result.as_str())).collect();
    assert_eq!(
        results,
        [
            ("viewer", "forbidden"),
            ("viewer", "forbidden"),
            ("operator", "reason_required"),
            ("operator", "reason_required"),
            ("operator", "invalid_body"),
            ("operator", "invalid_body"),
            ("operator", "not_found"),
        ]
    );
    assert!(rows.iter().filter(|r| r.result != "not_found").all(|r| r.target_id == id.to_string()));
    assert!(rows.iter().all(|r| !r.reason.contains('\u{0}') && !r.parameters.0.to_string().contains("bad")));
}

async fn an_operators_redelivery_sends_the_same_event_again_and_is_audited(app: TestApp) {
    let viewer = app.operator("viewer").await;
    let operator = app.operator("operator").await;
    let (server, _alice, endpoint, delivered) = two_delivered(&app, &viewer).await;
    let n = &delivered[0];

    let response = redeliver(&app, &operator, n.id, "customer's receiver lost it in a deploy").send().await.unwrap();
    assert_eq!(response.status(), 202);
    let queued: Redelivered = read(response).await;
    assert_eq!((queued.notification.id, queued.notification.status), (n.id, NotificationStatus::Pending));

    let requests = app
        .eventually("the event sent again", WAIT, || async {
            let got = received(&server).await;
            (got.len() >= 3).then_some(got)
        })
        .await;
    assert_eq!(requests.len(), 3, "one more POST, nothing else");
    let again = body(&requests[2]);
    assert_eq!(again["id"], n.event_id.as_str(), "the same event, same id");
    assert_eq!(again["type"], EventType::Completed.as_str());
    let first = requests.iter().map(body).find(|b| b["id"] == n.event_id.as_str()).unwrap();
    assert_eq!(again, first, "the same body");
    assert_eq!(requests[2].headers.get("withdrawals-delivery-attempt").unwrap().to_str().unwrap(), "2");

    let detail = app
        .eventually("the redelivery recorded", WAIT, || async {
            let d: NotificationDetail = app.ops_get(&viewer, &format!("/ops/v1/notifications/{}", n.id)).await;
            (d.notification.status == NotificationStatus::Delivered && d.attempts.len() == 2).then_some(d)
        })
        .await;
    assert_eq!(detail.notification.attempts, 2);
    assert_eq!(detail.attempts[1].status_code, Some(200));
    let endpoints: List<WebhookEndpointView> = app.ops_get(&viewer, "/ops/v1/webhook-endpoints").await;
    assert_eq!(endpoints.data[0].notifications.delivered, 2, "still two notifications, both delivered");

    let rows = audit_rows(&app, "notification.redeliver").await;
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(
        (row.result.as_str(), row.role.as_str(), row.target_type.as_str(), row.target_id.as_str()),
        ("ok", "operator", "notification", n.id.to_string().as_str())
    );
    assert_eq!(row.reason, "customer's receiver lost it in a deploy");
    assert_eq!(row.parameters.0["endpoint_id"], endpoint.as_str());
    assert_eq!(row.parameters.0["event_id"], n.event_id.as_str());
    assert_eq!(row.parameters.0["status_before"], "delivered");
}

async fn a_redelivery_to_an_endpoint_disabled_by_a_410_is_refused(app: TestApp) {
    let viewer = app.operator("viewer").await;
    let operator = app.operator("operator").await;
    let server = receiver(410).await;
    let alice = app.customer("100.00").await;
    let endpoint = register(&app, &alice, &server).await;
    app.start_default_worker();
    app.create_withdrawal(&alice, "g1", "5.00").await;

    let disabled = app
        .eventually("the endpoint disabled by its 410", WAIT, || async {
            let list: List<WebhookEndpointView> = app.ops_get(&viewer, "/ops/v1/webhook-endpoints").await;
            let e = list.data.into_iter().next()?;
            let settled = e.notifications.gone >= 1 && e.notifications.pending == 0;
            (e.status == EndpointStatus::Disabled && settled).then_some(e)
        })
        .await;
    assert_eq!(disabled.id, endpoint);
    assert!(disabled.disabled_reason.as_deref().unwrap().contains("410"), "{disabled:?}");
    // The created and completed events may both have been sent before the first 410 disabled it.
    let gone = listed(&app, &viewer, "?status=gone").await;
    assert_eq!(gone.len() as i64, disabled.notifications.gone);
    assert_eq!(gone[0].last_status_code, Some(410));
    let sent_before = received(&server).await.len();
    assert_eq!(sent_before, gone.len(), "one POST per notification answered 410");

    let response = redeliver(&app, &operator, gone[0].id, "customer says it is back").send().await.unwrap();
    let (status, code, problem) = problem_code(response).await;
    assert_eq!((status, code.as_str()), (409, "notification_not_redeliverable"));
    assert!(problem.detail.contains(&endpoint) && problem.detail.contains("disabled"), "{}", problem.detail);

    let d: NotificationDetail = app.ops_get(&viewer, &format!("/ops/v1/notifications/{}", gone[0].id)).await;
    assert_eq!(d.notification.status, NotificationStatus::Gone, "unchanged");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(received(&server).await.len(), sent_before, "nothing sent again");
    let rows = audit_rows(&app, "notification.redeliver").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].result.as_str(), rows[0].reason.as_str()),
        ("notification_not_redeliverable", "customer says it is back")
    );
}

fn stdout(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// One line on stderr, a non-zero exit.
fn refusal(out: &std::process::Output) -> String {
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    stderr
}

async fn the_cli_lists_endpoints_and_notifications_and_redelivers_one(app: TestApp) {
    let viewer = app.operator("viewer").await;
    let operator = app.operator("operator").await;
    let (server, alice, endpoint, delivered) = two_delivered(&app, &viewer).await;

    let table = stdout(&cli(&app, &viewer, &["notifications", "endpoints"]));
    let row = table.lines().find(|l| l.starts_with(&endpoint)).unwrap_or_else(|| panic!("{table}"));
    assert!(
        row.contains(&alice.account_id.to_string()) && row.contains("enabled") && row.contains(&server.uri()),
        "{row}"
    );

    let table =
        stdout(&cli(&app, &viewer, &["notifications", "list", "--endpoint", &endpoint, "--status", "delivered"]));
    for n in &delivered {
        let row = table.lines().find(|l| l.starts_with(&n.id.to_string())).unwrap_or_else(|| panic!("{table}"));
        assert!(row.contains(n.event_type.as_str()) && row.contains("delivered") && row.contains("200"), "{row}");
    }
    let json = stdout(&cli(&app, &viewer, &["notifications", "list", "--status", "pending", "--json"]));
    let pending: List<NotificationView> = serde_json::from_str(&json).unwrap();
    assert!(pending.data.is_empty(), "{json}");
    let shown = stdout(&cli(&app, &viewer, &["notifications", "show", &delivered[1].id.to_string()]));
    assert!(shown.contains(&delivered[1].event_id) && shown.contains("event as sent"), "{shown}");

    // Bad input: one line, non-zero exit, the server's code.
    assert!(refusal(&cli(&app, &viewer, &["notifications", "list", "--status", "paid"])).contains("422 invalid_status"));
    assert!(refusal(&cli(&app, &viewer, &["notifications", "list", "--endpoint", "we_x"])).contains("invalid_endpoint"));
    assert!(refusal(&cli(&app, &viewer, &["notifications", "show", "nope"])).contains("404 not_found"));
    let id = delivered[1].id.to_string();
    let by_viewer = refusal(&cli(&app, &viewer, &["notifications", "redeliver", &id, "--reason", "r"]));
    assert!(by_viewer.contains("403 forbidden"), "{by_viewer}");
    let blank = refusal(&cli(&app, &operator, &["notifications", "redeliver", &id, "--reason", " "]));
    assert!(blank.contains("422 reason_required"), "{blank}");
    assert_eq!(received(&server).await.len(), 2, "nothing sent");

    let done = stdout(&cli(&app, &operator, &["notifications", "redeliver", &id, "--reason", "integrator asked"]));
    assert!(done.contains("redelivery of") && done.contains(&delivered[1].event_id), "{done}");
    let requests = app
        .eventually("the event sent again", WAIT, || async {
            let got = received(&server).await;
            (got.len() >= 3).then_some(got)
        })
        .await;
    assert_eq!(body(&requests[2])["id"], delivered[1].event_id.as_str());
    let rows = audit_rows(&app, "notification.redeliver").await;
    assert_eq!(rows[0].result, "ok");
    assert_eq!(rows[0].reason, "integrator asked");
}

/// Clicks: "Notifications" in the navigation; the endpoint (filters the deliveries); a
/// notification's id; "Redeliver notification" after typing a reason.
async fn the_console_shows_each_endpoints_health_and_deliveries_and_redelivers_one(app: TestApp) {
    let viewer = app.operator("viewer").await;
    let (server, alice, endpoint, delivered) = two_delivered(&app, &viewer).await;
    let browser = Browser::start(&app).await;
    browser.sign_in(&app.operator("operator").await).await;

    browser.click("a[href='/ops/notifications']").await;
    browser.wait_for_text("Recent deliveries").await;
    let row = browser.client.find(fantoccini::Locator::Css("#endpoints tbody tr")).await.unwrap().text().await.unwrap();
    assert!(row.contains(&endpoint) && row.contains(&alice.account_id.to_string()), "{row}");
    assert!(row.contains(&server.uri()) && row.contains("enabled"), "{row}");
    let delivered_count = browser
        .client
        .find(fantoccini::Locator::Css("#endpoints tbody tr [data-status=delivered] strong"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(delivered_count, "2");
    let deliveries = browser.client.find(fantoccini::Locator::Css("#deliveries")).await.unwrap().text().await.unwrap();
    for n in &delivered {
        assert!(deliveries.contains(&n.id.to_string()) && deliveries.contains(n.event_type.as_str()), "{deliveries}");
    }
    assert!(deliveries.contains("200"), "the last answer: {deliveries}");
    browser.screenshot("notifications").await;

    // Filtered by the query string: by status, then by the endpoint's link.
    browser.goto("/ops/notifications?status=pending").await;
    browser.wait_for_text("No notification matches.").await;
    browser.goto("/ops/notifications").await;
    browser.click(&format!("#endpoints a[href='/ops/notifications?endpoint={endpoint}']")).await;
    browser.wait_for_text("2 shown, newest first.").await;

    let n = &delivered[0];
    browser.click(&format!("#deliveries a[href='/ops/notifications/{}']", n.id)).await;
    let page = browser.wait_for_text("Event as sent").await;
    assert!(page.contains(&n.event_id) && page.contains(&endpoint), "{page}");
    let attempts = browser.client.find(fantoccini::Locator::Css("#attempts")).await.unwrap().text().await.unwrap();
    assert!(attempts.contains("delivered") && attempts.contains("200"), "{attempts}");
    browser.screenshot("notification").await;

    browser.fill("#redeliver-reason", "the integrator restored their receiver").await;
    browser.click("#submit-redeliver").await;
    browser.wait_for_text("The redelivery is queued").await;
    let requests = app
        .eventually("the event sent again", WAIT, || async {
            let got = received(&server).await;
            (got.len() >= 3).then_some(got)
        })
        .await;
    assert_eq!(body(&requests[2])["id"], n.event_id.as_str());
    let rows = audit_rows(&app, "notification.redeliver").await;
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].result.as_str(), rows[0].reason.as_str()), ("ok", "the integrator restored their receiver"));

    // A viewer sees the page but no form; a forged form with the viewer's own token is refused.
    browser.sign_out().await;
    browser.sign_in(&viewer).await;
    browser.goto(&format!("/ops/notifications/{}", n.id)).await;
    let page = browser.wait_for_text("Event as sent").await;
    assert!(page.contains("Your role (viewer) can view but not redeliver notifications"), "{page}");
    assert!(!browser.exists("#redeliver-form").await);
    browser
        .client
        .execute(
            "const csrf = document.querySelector('form[action=\"/ops/sign-out\"] input[name=csrf]').value;
             const f = document.createElement('form');
             f.method = 'post'; f.action = location.pathname + '/redeliver';
             for (const [k, v] of Object.entries({csrf, reason: 'viewer tries'})) {
               const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i);
             }
             document.body.appendChild(f); f.submit();",
            vec![],
        )
        .await
        .unwrap();
    let refused = browser.wait_for_text("Not done.").await;
    assert!(refused.contains("this action needs the operator role; you have viewer"), "{refused}");
    let rows = audit_rows(&app, "notification.redeliver").await;
    assert_eq!((rows.len(), rows[0].role.as_str(), rows[0].result.as_str()), (2, "viewer", "forbidden"));
}
