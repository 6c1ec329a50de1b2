//! The text rule (issue 27, finding 4): a NUL, another control character or percent-encoded bytes
//! that are not UTF-8 in any query parameter, body field or console form field are a 422
//! (`invalid_query`, `invalid_body`, or the field's own code) on both backends — never a 500 from
//! PostgreSQL refusing the text — and a refused operator action is audited without the text.

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use reqwest::Method;
use serde_json::{json, Value};
use uuid::Uuid;
use withdrawals::domain::input_text::refused_char;
use withdrawals::domain::Role;
use withdrawals::ops::types::{List, OperatorStatus, OperatorView};
use withdrawals::storage::audit::{self, AuditFilter};

use crate::both_backends;
use crate::console::{http_sign_in, session_cookie};
use crate::harness::{problem_code, withdrawal_body, TestApp};
use crate::ops::call;

both_backends!(
    a_nul_in_any_ops_query_parameter_is_a_422_invalid_query_naming_it,
    a_nul_in_any_action_body_is_a_422_invalid_body_and_its_refusal_is_audited_without_the_text,
    the_customer_api_refuses_a_nul_in_its_filters_and_its_body_fields_with_422,
    a_console_form_or_filter_holding_a_nul_is_refused_and_changes_nothing,
    arbitrary_text_in_every_query_parameter_and_body_field_never_answers_5xx,
);

/// Every text query parameter of the ops API, by route.
const OPS_QUERY_FIELDS: &[(&str, &[&str])] = &[
    ("/ops/v1/audit", &["action", "target_id", "cursor"]),
    ("/ops/v1/dead-letters", &["queue", "job_type", "category", "error_code", "state", "order", "cursor"]),
    ("/ops/v1/dead-letters/export", &["category", "cursor"]),
    ("/ops/v1/withdrawals", &["status", "reason", "cursor"]),
    ("/ops/v1/replays", &["status"]),
    ("/ops/v1/settlement/exceptions", &["kind", "status", "cursor"]),
    ("/ops/v1/settlement/reports", &["date"]),
    ("/ops/v1/ledger/verify", &["date"]),
    ("/ops/v1/notifications", &["endpoint", "status"]),
];

async fn a_nul_in_any_ops_query_parameter_is_a_422_invalid_query_naming_it(app: TestApp) {
    let viewer = app.operator("viewer").await;
    for (path, fields) in OPS_QUERY_FIELDS {
        for field in *fields {
            for bad in ["%00", "a%00b", "%1B%5B2J", "%7F", "%C2%85", "%FF", "%C3"] {
                let url = format!("{path}?limit=5&{field}={bad}");
                let response = call(&app, Method::GET, &url, Some(&viewer), None).await;
                let (status, code, body) = problem_code(response).await;
                assert_eq!((status, code.as_str()), (422, "invalid_query"), "{url}: {body:?}");
                assert_eq!(body.field.as_deref(), Some(*field), "{url}");
            }
        }
    }
    // Tab and newlines are text; an ordinary filter value still answers.
    let response = call(&app, Method::GET, "/ops/v1/audit?action=a%09b%0A", Some(&viewer), None).await;
    assert_eq!(response.status(), 200);
    // A name that is itself invalid text is refused too.
    let (status, code, _) =
        problem_code(call(&app, Method::GET, "/ops/v1/audit?ac%00tion=x", Some(&viewer), None).await).await;
    assert_eq!((status, code.as_str()), (422, "invalid_query"));
}

async fn a_nul_in_any_action_body_is_a_422_invalid_body_and_its_refusal_is_audited_without_the_text(app: TestApp) {
    let operator = app.operator("operator").await;
    let admin = app.operator("admin").await;
    let some = Uuid::now_v7();
    // A real operator to disable: before the fix its NUL reason reached PostgreSQL (500).
    let _victim = app.operator("viewer").await;
    let operators: List<OperatorView> = app.ops_get(&admin, "/ops/v1/operators").await;
    let other = operators.data.iter().find(|o| o.role == Role::Viewer).unwrap().id.to_string();
    let start = |filter: Value, reason: &str| json!({"reason": reason, "filter": filter, "expected_payload_version": 1, "destination_queue": "payouts", "dry_run": true});
    // (path, token, body, action audited, field named)
    let cases = [
        (
            format!("/ops/v1/withdrawals/{some}/resolve"),
            &operator,
            json!({"action": "fail", "reason": "bad\u{0}", "version": 1}),
            "withdrawal.resolve",
            "reason",
        ),
        (
            format!("/ops/v1/withdrawals/{some}/resolve"),
            &operator,
            json!({"action": "complete", "reason": "ok", "version": 1, "provider_reference": "\u{0}"}),
            "withdrawal.resolve",
            "provider_reference",
        ),
        (
            format!("/ops/v1/operators/{other}/disable"),
            &admin,
            json!({"reason": "\u{0}"}),
            "operator.disable",
            "reason",
        ),
        ("/ops/v1/replays".to_owned(), &operator, start(json!({}), "x\u{0}"), "replay.start", "reason"),
        (
            "/ops/v1/replays".to_owned(),
            &operator,
            start(json!({"queue": "payouts\u{1b}"}), "fine"),
            "replay.start",
            "filter.queue",
        ),
        (
            format!("/ops/v1/dead-letters/{some}/close"),
            &operator,
            json!({"reason": "\u{7f}"}),
            "dead_letter.close",
            "reason",
        ),
        (
            format!("/ops/v1/withdrawals/{some}/decision/approve"),
            &operator,
            json!({"reason": "a\u{0}b"}),
            "withdrawal.decision.approve",
            "reason",
        ),
    ];
    let audited = |action: &'static str| {
        let db = app.db.clone();
        async move {
            audit::list(&db, &AuditFilter { action: Some(action.into()), limit: 50, ..Default::default() })
                .await
                .unwrap()
        }
    };
    for (path, token, body, action, field) in cases {
        let before = audited(action).await.len();
        let response = call(&app, Method::POST, &path, Some(token), Some(body.clone())).await;
        let (status, code, problem) = problem_code(response).await;
        assert_eq!((status, code.as_str()), (422, "invalid_body"), "{path} {body}: {problem:?}");
        assert_eq!(problem.field.as_deref(), Some(field), "{path}");
        let rows = audited(action).await;
        assert_eq!(rows.len(), before + 1, "{path}: the refusal is audited once");
        let row = &rows[0];
        assert_eq!(
            (row.role.as_str(), row.result.as_str()),
            (if token == &admin { "admin" } else { "operator" }, "invalid_body"),
            "{path}"
        );
        assert_eq!(row.parameters.0, json!({"body": "refused", "field": field}), "{path}");
        assert_eq!(row.reason, "", "{path}: the refused text is not stored");
    }
    let operators: List<OperatorView> = app.ops_get(&admin, "/ops/v1/operators").await;
    let victim = operators.data.iter().find(|o| o.id.to_string() == other).unwrap();
    assert_eq!(victim.status, OperatorStatus::Enabled, "the refused disable changed nothing");
    // A role below the action's is still refused for its role first (the body is never read).
    let viewer = app.operator("viewer").await;
    let path = format!("/ops/v1/withdrawals/{some}/resolve");
    let response = call(&app, Method::POST, &path, Some(&viewer), Some(json!({"reason": "\u{0}"}))).await;
    assert_eq!(problem_code(response).await.1, "forbidden");
}

async fn the_customer_api_refuses_a_nul_in_its_filters_and_its_body_fields_with_422(app: TestApp) {
    let alice = app.customer("100.00").await;
    for field in ["status", "cursor"] {
        for bad in ["%00", "%FF", "%1B"] {
            let response = app.get(&alice, &format!("/v1/withdrawals?{field}={bad}")).send().await.unwrap();
            let (status, code, body) = problem_code(response).await;
            assert_eq!((status, code.as_str()), (422, "invalid_query"), "{field}={bad}: {body:?}");
            assert_eq!(body.field.as_deref(), Some(field));
        }
    }
    // Each body field keeps its own code, and every one is a 422.
    let mut body = withdrawal_body("5.00");
    body["reference"] = json!("inv\u{0}1");
    // A control character at either end is refused too, not trimmed away as whitespace.
    let mut trailing = withdrawal_body("5.00");
    trailing["reference"] = json!("inv-1\u{b}");
    let mut alone = withdrawal_body("5.00");
    alone["reference"] = json!("\n");
    let cases = [
        (body.clone(), "invalid_reference"),
        (trailing, "invalid_reference"),
        (alone, "invalid_reference"),
        (json!({"amount": "5\u{0}", "currency": "USD", "destination": body["destination"]}), "invalid_amount"),
        (json!({"amount": "5", "currency": "US\u{0}", "destination": body["destination"]}), "unsupported_currency"),
        (
            json!({"amount": "5", "currency": "USD", "destination": {"type": "bank_account", "account_number": "12345\u{0}678", "bank_code": "ABC"}}),
            "invalid_destination",
        ),
        (
            json!({"amount": "5", "currency": "USD", "destination": {"type": "bank\u{0}", "account_number": "12345678", "bank_code": "ABC"}}),
            "invalid_destination",
        ),
    ];
    for (i, (body, expected)) in cases.into_iter().enumerate() {
        let response = app.post_withdrawal(&alice, &format!("nul-{i}"), &body).send().await.unwrap();
        let (status, code, problem) = problem_code(response).await;
        assert_eq!((status, code.as_str()), (422, expected), "case {i}: {problem:?}");
    }
    app.assert_ledger_invariant().await;
}

async fn a_console_form_or_filter_holding_a_nul_is_refused_and_changes_nothing(app: TestApp) {
    let signed_in = http_sign_in(&app.base_url, &app.operator("operator").await, "/ops/overview", false).await;
    let cookie = session_cookie(&signed_in).split(';').next().unwrap().to_owned();
    let plain = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let page = |path: String| plain.get(app.url(&path)).header("cookie", &cookie).send();
    let overview = page("/ops/overview".into()).await.unwrap().text().await.unwrap();
    let csrf = overview.split("name=\"csrf\" value=\"").nth(1).and_then(|rest| rest.split('"').next()).unwrap();

    let letter = Uuid::now_v7();
    let refused = plain
        .post(app.url(&format!("/ops/dead-letters/{letter}/close")))
        .header("cookie", &cookie)
        .form(&[("csrf", csrf), ("reason", "handled\u{0}")])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);
    let text = refused.text().await.unwrap();
    assert!(text.contains("Form refused") && text.contains("invalid_body") && text.contains("`reason`"), "{text}");

    for path in ["/ops/dead-letters?queue=%00", "/ops/audit?action=%00", "/ops/review?status=%00"] {
        let response = page(path.into()).await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        assert_eq!(status, 422, "{path}: {text}");
        assert!(text.contains("invalid_query"), "{path}: {text}");
    }
}

/// A request body with the text under test in one field.
type BodyWith = fn(&str) -> Value;

/// Every text query parameter and body field of the ops API and the customer API gets arbitrary
/// strings (proptest's any-`char` strings, half of them with a NUL or another control character
/// put in): no answer is a 5xx, and one whose text the rule refuses is a 422.
async fn arbitrary_text_in_every_query_parameter_and_body_field_never_answers_5xx(app: TestApp) {
    const CASES: usize = 12;
    let mut runner = TestRunner::deterministic();
    let plain = || proptest::string::string_regex("(?s).{0,12}").unwrap();
    let controlled =
        (plain(), 0usize..13, proptest::char::range('\0', '\u{1f}')).prop_map(|(s, at, c): (String, usize, char)| {
            let mut chars: Vec<char> = s.chars().collect();
            chars.insert(at.min(chars.len()), c);
            chars.into_iter().collect::<String>()
        });
    let strategy = proptest::prop_oneof![plain(), controlled];
    let mut samples =
        || -> Vec<String> { (0..CASES).map(|_| strategy.new_tree(&mut runner).unwrap().current()).collect() };
    let viewer = app.operator("viewer").await;
    let operator = app.operator("operator").await;
    let alice = app.customer("100.00").await;
    let refused = |s: &str| refused_char(s).is_some();

    for (path, fields) in OPS_QUERY_FIELDS {
        for field in *fields {
            for text in samples() {
                let url = format!("{}{path}", app.base_url);
                let response =
                    app.client.get(&url).query(&[(*field, text.as_str())]).bearer_auth(&viewer).send().await.unwrap();
                let status = response.status().as_u16();
                assert!(status < 500, "{path} {field}={text:?}: {status}");
                if refused(&text) {
                    let (status, code, _) = problem_code(response).await;
                    assert_eq!((status, code.as_str()), (422, "invalid_query"), "{path} {field}={text:?}");
                }
            }
        }
    }
    let some = Uuid::now_v7();
    let resolve = format!("/ops/v1/withdrawals/{some}/resolve");
    let close = format!("/ops/v1/dead-letters/{some}/close");
    let bodies: [(&str, &str, BodyWith); 5] = [
        (&resolve, "reason", |t| json!({"action": "fail", "reason": t, "version": 1})),
        (&resolve, "action", |t| json!({"action": t, "reason": "r", "version": 1})),
        (
            &resolve,
            "provider_reference",
            |t| json!({"action": "complete", "reason": "r", "version": 1, "provider_reference": t}),
        ),
        (&close, "reason", |t| json!({"reason": t})),
        (
            "/ops/v1/replays",
            "filter.error_code",
            |t| json!({"reason": "r", "filter": {"error_code": t}, "expected_payload_version": 1, "destination_queue": "payouts", "dry_run": true}),
        ),
    ];
    for (path, field, body) in bodies {
        for text in samples() {
            let response = call(&app, Method::POST, path, Some(&operator), Some(body(&text))).await;
            let status = response.status().as_u16();
            assert!(status < 500, "{path} {field}={text:?}: {status}");
            if refused(&text) {
                let (status, code, problem) = problem_code(response).await;
                assert_eq!((status, code.as_str()), (422, "invalid_body"), "{path} {field}={text:?}");
                assert_eq!(problem.field.as_deref(), Some(field));
            }
        }
    }
    for field in ["status", "cursor"] {
        for text in samples() {
            let url = format!("{}/v1/withdrawals", app.base_url);
            let response =
                app.client.get(&url).query(&[(field, text.as_str())]).bearer_auth(&alice.api_key).send().await.unwrap();
            let status = response.status().as_u16();
            assert!(status < 500, "/v1/withdrawals {field}={text:?}: {status}");
            if refused(&text) {
                assert_eq!(status, 422, "/v1/withdrawals {field}={text:?}");
            }
        }
    }
    for (i, text) in samples().into_iter().enumerate() {
        let mut body = withdrawal_body("1.00");
        body["reference"] = json!(text);
        let response = app.post_withdrawal(&alice, &format!("prop-{i}"), &body).send().await.unwrap();
        let status = response.status().as_u16();
        assert!(status < 500, "reference={text:?}: {status}");
        if refused(&text) {
            assert_eq!(status, 422, "reference={text:?}");
        }
    }
    app.assert_ledger_invariant().await;
}
