//! The operator console (issue 9) in a real headless Chromium: sign in, resolve a review,
//! triage dead letters from the summary, replay with a confirmed dry run and a second operator's
//! approval, roles, CSRF and sign-out. Each test names what it clicks; screenshots of every main
//! page are saved under `target/console-screenshots/`.

use std::time::Duration;

use fantoccini::Locator;
use futures::future::join_all;
use serde_json::json;
use withdrawals::config::AppConfig;
use withdrawals::domain::{SessionId, WithdrawalId, WithdrawalStatus};
use withdrawals::storage::audit::{self, AuditFilter};

use crate::both_backends;
use crate::browser::Browser;
use crate::harness::{Backend, TestApp};

both_backends!(
    with = app;
    an_operator_signs_in_fails_a_review_and_sees_the_funds_released,
    a_stale_version_is_a_clear_message_and_changes_nothing,
    dead_letters_are_filtered_from_the_summary_and_a_confirmed_replay_is_approved_and_watched_to_the_end,
    a_viewer_sees_no_resolve_form_and_the_server_refuses_a_forged_one,
    a_form_post_without_the_csrf_token_is_refused,
    a_dead_letter_close_without_this_sessions_csrf_token_is_refused_before_it_acts,
    sign_out_ends_the_session_on_the_server,
    sessions_expire_cookies_are_strict_and_sign_in_refuses_what_it_should,
    one_dead_letter_is_replayed_from_its_page_another_is_closed_and_time_filters_apply,
    old_expired_sessions_are_purged_and_live_ones_kept,
    a_large_fail_waits_for_a_second_operator_who_approves_it_in_the_console,
);

const WAIT: Duration = Duration::from_secs(30);

/// Replays of more than two letters wait for approval, so the test sees the approval step; review
/// decisions of 30 USD or more need a second operator (the other tests decide on 25.00).
async fn app(backend: Backend) -> TestApp {
    let mut config = AppConfig::default();
    config.replay.approval_threshold = 2;
    config.review.approval_thresholds.default_max = "30".parse().unwrap();
    TestApp::spawn_with(backend, config).await
}

/// `n` withdrawals of 25.00 from an account of 100.00, rejected by the provider (see
/// `TestApp::rejected_withdrawals`).
async fn rejected(app: &TestApp, n: usize) -> (Vec<WithdrawalId>, crate::harness::Customer) {
    app.rejected_withdrawals(n, "100.00", "25.00").await
}

async fn status_of(app: &TestApp, id: WithdrawalId) -> WithdrawalStatus {
    withdrawals::storage::withdrawals::find(&app.db, id).await.unwrap().unwrap().status
}

/// Clicks: the sign-in button; "Review queue" in the navigation; the withdrawal's id; the
/// "Fail and release funds" button after typing a reason.
async fn an_operator_signs_in_fails_a_review_and_sees_the_funds_released(app: TestApp) {
    let (ids, alice) = rejected(&app, 1).await;
    let id = ids[0];
    assert_eq!(app.usd_balance(&alice).await, ("75.00".into(), "25.00".into(), "0.00".into()));
    let browser = Browser::start(&app).await;

    browser.sign_in(&app.operator("operator").await).await;
    let overview = browser.wait_for_text("Withdrawals by state").await;
    assert!(overview.contains("Signed in as operator op (operator)"), "{overview}");
    let review_row = browser.client.find(Locator::Css("#withdrawals-by-state")).await.unwrap().text().await.unwrap();
    assert!(review_row.contains("requires_review 1"), "the overview counts the review: {review_row}");
    assert!(browser.body_text().await.contains("dependency_rejected"), "open dead letters by category");
    browser.screenshot("overview").await;

    browser.click("a[href='/ops/review']").await;
    browser.wait_for_text("Review queue").await;
    let queue = browser.wait_for_text(&id.to_string()).await;
    assert!(queue.contains("25.00 USD"), "{queue}");
    browser.screenshot("review-queue").await;
    browser.click(&format!("a[href='/ops/withdrawals/{id}']")).await;
    let page = browser.wait_for_text("Evidence timeline").await;
    for evidence in ["Transition", "Provider attempt 1", "Dead letter", "Ledger entry hold"] {
        assert!(page.contains(evidence), "the timeline shows {evidence}: {page}");
    }
    browser.screenshot("withdrawal-timeline").await;

    // A refused decision keeps what was typed: complete with a transfer the provider never made.
    browser.fill("#provider_reference", "tr_made_up").await;
    browser.fill("#reason-complete", "customer says it arrived").await;
    browser.click("#submit-complete").await;
    let refused = browser.wait_for_text("Not done.").await;
    assert!(refused.contains("provider_reference_mismatch"), "{refused}");
    let kept = |css: &'static str| {
        let browser = &browser;
        async move { browser.client.find(Locator::Css(css)).await.unwrap().prop("value").await.unwrap() }
    };
    assert_eq!(kept("#provider_reference").await.as_deref(), Some("tr_made_up"));
    assert_eq!(kept("#reason-complete").await.as_deref(), Some("customer says it arrived"));
    assert_eq!(status_of(&app, id).await, WithdrawalStatus::RequiresReview);

    browser.fill("#reason-fail", "account closed at the bank; customer told").await;
    browser.click("#submit-fail").await;

    let after = browser.wait_for_text("funds are released").await;
    assert!(after.contains("Ledger entry release"), "the release is in the timeline: {after}");
    assert!(after.contains("available 25.00"), "{after}");
    assert!(!browser.exists("#resolve-fail").await, "a failed withdrawal has nothing left to resolve");
    assert_eq!(status_of(&app, id).await, WithdrawalStatus::Failed);
    assert_eq!(app.usd_balance(&alice).await, ("100.00".into(), "0.00".into(), "0.00".into()));
    let rows = audit::list(
        &app.db,
        &AuditFilter { action: Some("withdrawal.resolve".into()), limit: 10, ..Default::default() },
    )
    .await
    .unwrap();
    assert_eq!(rows.len(), 2, "the refused complete and the fail");
    assert_eq!((rows[0].result.as_str(), rows[0].reason.as_str()), ("ok", "account closed at the bank; customer told"));
    assert_eq!(rows[1].result, "provider_reference_mismatch");
    app.assert_ledger_invariant().await;
}

/// Clicks: the withdrawal page is opened, someone else resolves it through the API, then the
/// "Retry the payout" button is clicked with the version the page showed.
async fn a_stale_version_is_a_clear_message_and_changes_nothing(app: TestApp) {
    let (ids, _alice) = rejected(&app, 1).await;
    let id = ids[0];
    let browser = Browser::start(&app).await;
    browser.sign_in(&app.operator("operator").await).await;
    browser.goto(&format!("/ops/withdrawals/{id}")).await;
    browser.wait_for_text("Evidence timeline").await;
    let shown: i64 =
        browser.client.find(Locator::Css("#withdrawal-version")).await.unwrap().text().await.unwrap().parse().unwrap();

    let other = app.operator("operator").await;
    let response = app
        .client
        .post(app.url(&format!("/ops/v1/withdrawals/{id}/resolve")))
        .bearer_auth(&other)
        .json(&json!({"action": "fail", "reason": "decided elsewhere", "version": shown}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    browser.fill("#reason-retry", "provider fixed it").await;
    browser.click("#submit-retry").await;

    let page = browser.wait_for_text("Not done.").await;
    assert!(page.contains("the withdrawal changed since you looked"), "{page}");
    assert!(page.contains("stale_version"), "{page}");
    assert_eq!(status_of(&app, id).await, WithdrawalStatus::Failed, "the stale retry changed nothing");
    app.assert_ledger_invariant().await;
}

/// Clicks: "Dead letters" in the navigation; the `dependency_rejected / invalid_account` group in
/// the summary; "Replay the open letters matching this filter…"; "Dry run" after typing a reason;
/// "Confirm"; then, signed in as a second operator (an admin), "Approve" after typing a reason.
/// The run page refreshes its progress by itself until the run is completed.
async fn dead_letters_are_filtered_from_the_summary_and_a_confirmed_replay_is_approved_and_watched_to_the_end(
    app: TestApp,
) {
    let (ids, alice) = rejected(&app, 3).await;
    // A second group, which the filter must leave out: a dead letter of another error code.
    let browser = Browser::start(&app).await;
    browser.sign_in(&app.operator("operator").await).await;

    browser.click("a[href='/ops/dead-letters']").await;
    let triage = browser.wait_for_text("Open, by category and error code").await;
    assert!(triage.contains("dependency_rejected / invalid_account 3"), "{triage}");
    browser.screenshot("dead-letters").await;
    browser
        .click(
            "#dead-letter-summary a[href='/ops/dead-letters?category=dependency_rejected&error_code=invalid_account']",
        )
        .await;
    browser.wait_for_text("(shown below)").await;
    let listed = browser.client.find_all(Locator::Css("#dead-letter-list tbody td.group")).await.unwrap();
    assert_eq!(listed.len(), 3, "the group's three letters are listed");
    for cell in listed {
        assert_eq!(cell.text().await.unwrap(), "dependency_rejected / invalid_account");
    }
    assert_eq!(
        browser.client.find(Locator::Css("#f-error_code")).await.unwrap().prop("value").await.unwrap().as_deref(),
        Some("invalid_account"),
        "the filter form shows the group"
    );
    // The filter is applied, not ignored: another error code lists nothing (and is no error).
    browser.goto("/ops/dead-letters?category=dependency_rejected&error_code=http_503").await;
    let other = browser.wait_for_text("0 shown, newest first.").await;
    assert!(!other.contains("Not done."), "{other}");
    // An unfiltered list (only the open/closed state) offers no replay: never "retry all".
    browser.goto("/ops/dead-letters?state=open").await;
    browser.wait_for_text("3 shown, newest first.").await;
    assert!(!browser.exists("#replay-these").await);
    browser.client.back().await.unwrap();
    browser.client.back().await.unwrap();
    browser.wait_for_text("(shown below)").await;

    browser.click("#replay-these").await;
    browser.wait_for_text("Start a replay").await;
    browser.fill("#r-reason", "provider fixed the account check").await;
    browser.click("#dry-run").await;
    let preview = browser.wait_for_text("Replay preview (dry run)").await;
    assert!(
        preview.contains("3 open dead letters with category dependency_rejected, error code invalid_account"),
        "{preview}"
    );
    assert!(preview.contains("needs a second operator's approval"), "{preview}");
    assert_eq!(browser.client.find_all(Locator::Css("#preview-sample tbody tr")).await.unwrap().len(), 3);
    browser.screenshot("replay-preview").await;
    assert!(
        withdrawals::storage::replays::list_runs(&app.db, None, 10).await.unwrap().is_empty(),
        "a dry run starts nothing"
    );

    browser.click("#confirm-replay").await;
    browser.wait_for_text("The replay is recorded").await;
    let run_path = browser.wait_for_path("/ops/replays/").await;
    let run_id = run_path.trim_start_matches("/ops/replays/").split('?').next().unwrap().to_owned();
    let waiting = browser.wait_for_text("awaiting_approval").await;
    assert!(waiting.contains("Approval needs an admin other than the operator who started the run"), "{waiting}");
    assert!(!browser.exists("#control-approve").await, "the starter cannot approve");
    browser.sign_out().await;

    browser.sign_in(&app.operator("admin").await).await;
    browser.goto(&format!("/ops/replays/{run_id}")).await;
    browser.fill("#reason-approve", "checked the sample; provider confirmed the fix").await;
    browser.click("#submit-approve").await;
    browser.wait_for_text("The replay is approved and running.").await;
    // No reload from here on: the page's own script refreshes the progress section.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        // The page reloads itself when the status changes: a read may land mid-reload.
        let status = match browser.client.find(Locator::Css("#run-status")).await {
            Ok(element) => element.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        if status == "completed" && !browser.exists("#control-cancel").await {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the run page still says {status:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(browser.path().await, format!("/ops/replays/{run_id}"), "reloaded without the old banner");
    assert_eq!(browser.client.find_all(Locator::Css("#replay-items td:nth-child(2)")).await.unwrap().len(), 3);
    for cell in browser.client.find_all(Locator::Css("#replay-items td:nth-child(2)")).await.unwrap() {
        assert_eq!(cell.text().await.unwrap(), "released", "the items table is current");
    }
    assert_eq!(browser.client.find(Locator::Css("#progress-succeeded")).await.unwrap().text().await.unwrap(), "3");
    browser.screenshot("replay-run").await;
    for id in &ids {
        app.wait_for_status(*id, WithdrawalStatus::Completed, WAIT).await;
        let executions: u32 =
            app.provider.mock.transfers().iter().filter(|t| t.reference == id.to_string()).map(|t| t.executions).sum();
        assert_eq!(executions, 1, "paid once");
    }
    assert_eq!(app.usd_balance(&alice).await, ("25.00".into(), "0.00".into(), "75.00".into()));
    browser.goto("/ops/audit?action=replay.approve").await;
    let audit_page = browser.wait_for_text("Audit log").await;
    assert!(audit_page.contains("checked the sample; provider confirmed the fix"), "{audit_page}");
    assert!(!audit_page.contains("replay.start") && !audit_page.contains("console.sign_in"), "filtered: {audit_page}");
    browser.screenshot("audit-log").await;
    app.assert_ledger_invariant().await;
}

/// Clicks: signs in as a viewer, opens the withdrawal (no resolve form is there), then submits a
/// hand-made form carrying the viewer's own valid CSRF token.
async fn a_viewer_sees_no_resolve_form_and_the_server_refuses_a_forged_one(app: TestApp) {
    let (ids, _alice) = rejected(&app, 1).await;
    let id = ids[0];
    let browser = Browser::start(&app).await;
    browser.sign_in(&app.operator("viewer").await).await;
    browser.goto(&format!("/ops/withdrawals/{id}")).await;
    let page = browser.wait_for_text("Evidence timeline").await;
    assert!(page.contains("Your role (viewer) can view but not resolve withdrawals"), "{page}");
    for form in ["#resolve-complete", "#resolve-fail", "#resolve-retry", "#resolve-reconcile"] {
        assert!(!browser.exists(form).await, "a viewer is not shown {form}");
    }
    let version = browser.client.find(Locator::Css("#withdrawal-version")).await.unwrap().text().await.unwrap();

    browser
        .client
        .execute(
            "const csrf = document.querySelector('form[action=\"/ops/sign-out\"] input[name=csrf]').value;
             const f = document.createElement('form');
             f.method = 'post'; f.action = location.pathname + '/resolve';
             for (const [k, v] of Object.entries({csrf, action: 'fail', reason: 'viewer tries', version: arguments[0]})) {
               const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i);
             }
             document.body.appendChild(f); f.submit();",
            vec![json!(version)],
        )
        .await
        .unwrap();

    let refused = browser.wait_for_text("Not done.").await;
    assert!(refused.contains("this action needs the operator role; you have viewer"), "{refused}");
    assert_eq!(status_of(&app, id).await, WithdrawalStatus::RequiresReview, "nothing changed");
    let rows = audit::list(
        &app.db,
        &AuditFilter { action: Some("withdrawal.resolve".into()), limit: 10, ..Default::default() },
    )
    .await
    .unwrap();
    assert_eq!(rows.len(), 1, "the refusal is audited");
    assert_eq!((rows[0].role.as_str(), rows[0].result.as_str()), ("viewer", "forbidden"));
}

/// Clicks: "Fail and release funds" on a form whose CSRF field was removed first.
async fn a_form_post_without_the_csrf_token_is_refused(app: TestApp) {
    let (ids, alice) = rejected(&app, 1).await;
    let id = ids[0];
    let browser = Browser::start(&app).await;
    browser.sign_in(&app.operator("operator").await).await;
    browser.goto(&format!("/ops/withdrawals/{id}")).await;
    browser.wait_for_text("Evidence timeline").await;
    browser.client.execute("document.querySelector('#resolve-fail input[name=csrf]').remove();", vec![]).await.unwrap();
    browser.fill("#reason-fail", "no csrf").await;
    browser.click("#submit-fail").await;

    let refused = browser.wait_for_text("Form refused").await;
    assert!(refused.contains("did not carry this session's CSRF token, so nothing was changed"), "{refused}");
    assert_eq!(status_of(&app, id).await, WithdrawalStatus::RequiresReview);
    assert_eq!(app.usd_balance(&alice).await, ("75.00".into(), "25.00".into(), "0.00".into()));
    // A token, but not this session's (another session's, or a guess): refused the same way.
    browser.goto(&format!("/ops/withdrawals/{id}")).await;
    browser.wait_for_text("Evidence timeline").await;
    browser
        .client
        .execute("document.querySelector('#resolve-fail input[name=csrf]').value = 'a'.repeat(64);", vec![])
        .await
        .unwrap();
    browser.fill("#reason-fail", "wrong csrf").await;
    browser.click("#submit-fail").await;
    browser.wait_for_text("Form refused").await;
    assert_eq!(status_of(&app, id).await, WithdrawalStatus::RequiresReview);
    let rows = audit::list(
        &app.db,
        &AuditFilter { action: Some("withdrawal.resolve".into()), limit: 10, ..Default::default() },
    )
    .await
    .unwrap();
    assert!(rows.is_empty(), "the request never reached the action: {rows:?}");
}

/// Over plain HTTP (no browser): a close posted with no CSRF token, then with one that is not this
/// session's, is refused before it reaches the action — the letter stays open and the audit log
/// has no `dead_letter.close` row, not even a refusal; the page's own token then closes it.
async fn a_dead_letter_close_without_this_sessions_csrf_token_is_refused_before_it_acts(app: TestApp) {
    let (ids, _alice) = rejected(&app, 1).await;
    let letter =
        withdrawals::storage::dead_letters::for_withdrawal(&app.db, app.key(ids[0]).await).await.unwrap().remove(0).id;
    let signed_in = http_sign_in(&app.base_url, &app.operator("operator").await, "/ops/overview", false).await;
    let cookie = session_cookie(&signed_in).split(';').next().unwrap().to_owned();
    let plain = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let close = |form: Vec<(&'static str, String)>| {
        plain.post(app.url(&format!("/ops/dead-letters/{letter}/close"))).header("cookie", &cookie).form(&form).send()
    };
    let closes = || async {
        let rows = audit::list(
            &app.db,
            &AuditFilter { action: Some("dead_letter.close".into()), limit: 10, ..Default::default() },
        )
        .await
        .unwrap();
        let stored = withdrawals::storage::dead_letters::get(&app.db, letter).await.unwrap().unwrap();
        let events = withdrawals::storage::dead_letters::events(&app.db, &stored).await.unwrap();
        (rows.len(), events.iter().filter(|e| e.action == withdrawals::domain::LetterEvent::Closed).count())
    };

    let reason = || ("reason", "handled by support".to_owned());
    for (what, form) in [("no token", vec![reason()]), ("another token", vec![("csrf", "a".repeat(64)), reason()])] {
        let refused = close(form).await.unwrap();
        assert_eq!(refused.status(), 403, "{what}");
        let page = refused.text().await.unwrap();
        assert!(page.contains("did not carry this session's CSRF token, so nothing was changed"), "{what}: {page}");
        assert_eq!(closes().await, (0, 0), "{what}: the letter is open and nothing was audited");
    }

    let page = plain
        .get(app.url(&format!("/ops/dead-letters/{letter}")))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let token = page.split("name=\"csrf\" value=\"").nth(1).and_then(|rest| rest.split('"').next()).unwrap();
    let closed = close(vec![("csrf", token.to_owned()), reason()]).await.unwrap();
    assert_eq!(closed.status(), 303);
    assert_eq!(closed.headers()["location"], format!("/ops/dead-letters/{letter}?done=close").as_str());
    assert_eq!(closes().await, (1, 1), "the session's own token closes it, audited once");
}

/// Clicks: signs in, reads the session cookie's flags, clicks "Sign out", then tries the overview
/// with no cookie and again with the old cookie put back.
async fn sign_out_ends_the_session_on_the_server(app: TestApp) {
    let browser = Browser::start(&app).await;
    browser.sign_in(&app.operator("operator").await).await;
    let cookies = browser.client.get_all_cookies().await.unwrap();
    let session = cookies.iter().find(|c| c.name() == "wd_console").expect("a session cookie").clone();
    assert_eq!(session.http_only(), Some(true));
    assert_eq!(session.same_site().map(|s| s.to_string()).as_deref(), Some("Strict"));
    assert_eq!(session.path(), Some("/ops"));
    assert!(session.value().starts_with("wds_"));

    browser.sign_out().await;
    assert!(browser.path().await.starts_with("/ops/sign-in"));
    browser.goto("/ops/overview").await;
    browser.wait_for_path("/ops/sign-in?next=").await;
    browser.wait_for_text("Sign in to the operator console").await;

    // The old cookie is dead on the server, not only forgotten by the browser.
    browser
        .client
        .execute("document.cookie = 'wd_console=' + arguments[0] + '; path=/ops';", vec![json!(session.value())])
        .await
        .unwrap();
    assert!(browser.client.get_all_cookies().await.unwrap().iter().any(|c| c.name() == "wd_console"), "put back");
    browser.goto("/ops/overview").await;
    browser.wait_for_path("/ops/sign-in").await;
    let plain = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let response = plain
        .get(app.url("/ops/overview"))
        .header("cookie", format!("wd_console={}", cookies.iter().find(|c| c.name() == "wd_console").unwrap().value()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert!(response.headers()["location"].to_str().unwrap().starts_with("/ops/sign-in"));
    let rows =
        audit::list(&app.db, &AuditFilter { action: Some("console.sign_out".into()), limit: 10, ..Default::default() })
            .await
            .unwrap();
    assert_eq!(rows.len(), 1);
}

/// Signs in over plain HTTP (what the form does): fetches the sign-in nonce, posts the token.
/// Returns the sign-in response.
pub(crate) async fn http_sign_in(base: &str, token: &str, next: &str, https: bool) -> reqwest::Response {
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let form = client.get(format!("{base}/ops/sign-in")).send().await.unwrap();
    let nonce = form.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let value = nonce.split_once('=').unwrap().1.to_owned();
    let mut request = client.post(format!("{base}/ops/sign-in")).header("cookie", nonce).form(&[
        ("token", token),
        ("csrf", value.as_str()),
        ("next", next),
    ]);
    if https {
        request = request.header("x-forwarded-proto", "https");
    }
    request.send().await.unwrap()
}

pub(crate) fn session_cookie(response: &reqwest::Response) -> String {
    let header = response
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|c| c.starts_with("wd_console="))
        .expect("a session cookie");
    header
}

/// Sign-in over HTTP: cookie flags (`Secure` behind a TLS proxy), security headers, no open
/// redirect, bad tokens and forged sign-in forms refused, and a session that expires.
async fn sessions_expire_cookies_are_strict_and_sign_in_refuses_what_it_should(app: TestApp) {
    let token = app.operator("operator").await;
    let plain = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();

    let signed_in = http_sign_in(&app.base_url, &token, "/ops/review?status=failed", true).await;
    assert_eq!(signed_in.status(), 303);
    assert_eq!(signed_in.headers()["location"], "/ops/review?status=failed");
    let cookie = session_cookie(&signed_in);
    for flag in ["HttpOnly", "SameSite=Strict", "Secure", "Path=/ops", "Max-Age=28800"] {
        assert!(cookie.contains(flag), "{flag} in {cookie}");
    }
    let cookie_pair = cookie.split(';').next().unwrap().to_owned();
    let page = plain.get(app.url("/ops/overview")).header("cookie", &cookie_pair).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let headers = page.headers().clone();
    assert!(headers["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'"));
    assert_eq!(headers["x-frame-options"], "DENY");
    assert_eq!(headers["cache-control"], "no-store");
    assert!(page.text().await.unwrap().contains("Withdrawals by state"));

    // The console's cookie is no credential for the API.
    let api = plain.get(app.url("/ops/v1/overview")).header("cookie", &cookie_pair).send().await.unwrap();
    assert_eq!(api.status(), 401);
    // The run page's background refresh gets a plain 401 when signed out, not a sign-in page.
    let fragment =
        plain.get(app.url(&format!("/ops/replays/{}?part=progress", uuid::Uuid::now_v7()))).send().await.unwrap();
    assert_eq!(fragment.status(), 401);

    let over_http = http_sign_in(&app.base_url, &token, "//evil.example/", false).await;
    assert_eq!(over_http.headers()["location"], "/ops/overview", "no redirect off the console");
    for next in ["/ops/v1/overview", "/ops/\\evil.example", "https://evil.example/ops/"] {
        let response = http_sign_in(&app.base_url, &token, next, false).await;
        assert_eq!(response.headers()["location"], "/ops/overview", "{next}");
    }
    assert!(!session_cookie(&over_http).contains("Secure"), "plain HTTP without a TLS proxy: no Secure flag");

    let bad = http_sign_in(&app.base_url, "wdo_00000000000000000000000000000000_nope", "/ops/overview", false).await;
    assert_eq!(bad.status(), 401);
    assert!(bad.text().await.unwrap().contains("not a valid, enabled operator token"));
    let forged = plain
        .post(app.url("/ops/sign-in"))
        .form(&[("token", token.as_str()), ("csrf", "guessed"), ("next", "/ops/overview")])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403, "a sign-in form from elsewhere (no nonce cookie) is refused");
    assert!(forged.headers().get("set-cookie").is_none_or(|c| !c.to_str().unwrap().starts_with("wd_console=")));

    // A second app on the same database with one-second sessions: the session ends by itself.
    let mut config = AppConfig::default();
    config.console.session_ttl = chrono::TimeDelta::seconds(1);
    let short = crate::harness::serve_extra(&app, config).await;
    let brief = session_cookie(&http_sign_in(&short, &token, "/ops/overview", false).await);
    assert!(brief.contains("Max-Age=1"), "{brief}");
    let brief_pair = brief.split(';').next().unwrap().to_owned();
    let expired = app
        .eventually("the one-second session to expire", WAIT, || {
            let (plain, short, brief_pair) = (&plain, &short, &brief_pair);
            async move {
                let r = plain.get(format!("{short}/ops/overview")).header("cookie", brief_pair).send().await.unwrap();
                (r.status() == 303).then_some(r)
            }
        })
        .await;
    assert!(expired.headers()["location"].to_str().unwrap().starts_with("/ops/sign-in?next="));
    let rows =
        audit::list(&app.db, &AuditFilter { action: Some("console.sign_in".into()), limit: 10, ..Default::default() })
            .await
            .unwrap();
    assert_eq!(rows.len(), 6, "each sign-in is audited");

    // Disabling the operator ends their live session at once.
    assert_eq!(plain.get(app.url("/ops/overview")).header("cookie", &cookie_pair).send().await.unwrap().status(), 200);
    app.execute_raw("UPDATE operators SET disabled_at = created_at").await;
    let disabled = plain.get(app.url("/ops/overview")).header("cookie", &cookie_pair).send().await.unwrap();
    assert_eq!(disabled.status(), 303);
}

/// Clicks: the dead-letter list filtered by failure time (through the form's URL), a letter's
/// link, "Replay this dead letter…", "Dry run", "Confirm"; then the other letter's "Close dead
/// letter" after typing a reason.
async fn one_dead_letter_is_replayed_from_its_page_another_is_closed_and_time_filters_apply(app: TestApp) {
    let (ids, _alice) = rejected(&app, 2).await;
    let letters: Vec<_> = join_all(
        ids.iter()
            .map(|id| async { withdrawals::storage::dead_letters::for_withdrawal(&app.db, app.key(*id).await).await }),
    )
    .await
    .into_iter()
    .map(|l| l.unwrap().remove(0))
    .collect();
    let browser = Browser::start(&app).await;
    browser.sign_in(&app.operator("operator").await).await;

    let hour_ago = (chrono::Utc::now() - chrono::TimeDelta::hours(1)).format("%Y-%m-%dT%H:%M").to_string();
    browser.goto(&format!("/ops/dead-letters?failed_before={hour_ago}")).await;
    let none = browser.wait_for_text("No dead letter matches.").await;
    assert!(!none.contains("Not done."), "an empty result, not an error: {none}");
    browser.goto(&format!("/ops/dead-letters?failed_after={hour_ago}")).await;
    browser.wait_for_text("2 shown, newest first.").await;
    browser.assert_accessible().await;

    let first = letters[0].id;
    browser.click(&format!("#dead-letter-list a[href='/ops/dead-letters/{first}']")).await;
    let envelope = browser.wait_for_text("Payload (redacted)").await;
    assert!(envelope.contains("invalid_account") && envelope.contains(&ids[0].to_string()), "{envelope}");
    assert!(!envelope.contains("12345678"), "the full account number is never shown: {envelope}");
    browser.screenshot("dead-letter").await;
    browser.click("#replay-this").await;
    browser.wait_for_text(&format!("Selected: dead letter {first} only.")).await;
    browser.fill("#r-reason", "this one account was fixed").await;
    browser.click("#dry-run").await;
    let preview = browser.wait_for_text("Replay preview (dry run)").await;
    assert!(preview.contains(&format!("1 dead letter {first} would be released")), "{preview}");
    browser.click("#confirm-replay").await;
    browser.wait_for_text("The replay is recorded").await;
    app.wait_for_status(ids[0], WithdrawalStatus::Completed, WAIT).await;
    assert_eq!(status_of(&app, ids[1]).await, WithdrawalStatus::RequiresReview, "only the chosen letter was replayed");

    let second = letters[1].id;
    browser.goto(&format!("/ops/dead-letters/{second}")).await;
    browser.fill("#close-reason", "customer asked to cancel; handled by support").await;
    browser.click("#close-form button[type=submit]").await;
    let closed = browser.wait_for_text("The dead letter is closed.").await;
    assert!(closed.contains("closed by operator:"), "{closed}");
    assert!(!browser.exists("#close-form").await);
    browser.goto("/ops/dead-letters").await;
    browser.wait_for_text("0 shown, newest first.").await;
}

/// Storage: the purge deletes sessions that expired before the cut-off, and only those.
async fn old_expired_sessions_are_purged_and_live_ones_kept(app: TestApp) {
    use withdrawals::storage::{sessions, DbTime};
    let token = app.operator("viewer").await;
    let operator = withdrawals::ops::authenticate(&app.db, &token).await.unwrap();
    let now = DbTime::now();
    let (old, recent, live) = (SessionId::new(), SessionId::new(), SessionId::new());
    let mut tx = app.db.begin().await.unwrap();
    sessions::insert(&mut tx, old, operator.id, b"h", now.plus(chrono::TimeDelta::days(-31))).await.unwrap();
    sessions::insert(&mut tx, recent, operator.id, b"h", now.plus(chrono::TimeDelta::days(-1))).await.unwrap();
    sessions::insert(&mut tx, live, operator.id, b"h", now.plus(chrono::TimeDelta::hours(8))).await.unwrap();
    tx.commit().await.unwrap();

    let purged = sessions::purge_expired(&app.db, now.plus(chrono::TimeDelta::days(-30))).await.unwrap();

    assert_eq!(purged, 1);
    assert!(sessions::find(&app.db, old).await.unwrap().is_none());
    assert!(sessions::find(&app.db, recent).await.unwrap().is_some(), "expired a day ago: kept as evidence");
    assert!(sessions::find(&app.db, live).await.unwrap().is_some());
}

/// Clicks: as the first operator, "Fail and release funds" on a 40.00 withdrawal (at or above
/// the two-person threshold): it waits, with only "Reject" offered to its requester; signs out,
/// signs in as a second operator, and clicks "Approve and apply": the provider is asked again, the
/// withdrawal fails and its funds are released.
async fn a_large_fail_waits_for_a_second_operator_who_approves_it_in_the_console(app: TestApp) {
    let (ids, alice) = app.rejected_withdrawals(1, "100.00", "40.00").await;
    let id = ids[0];
    let browser = Browser::start(&app).await;
    browser.sign_in(&app.operator("operator").await).await;
    browser.goto(&format!("/ops/withdrawals/{id}")).await;
    browser.wait_for_text("Evidence timeline").await;

    browser.fill("#reason-fail", "account closed; customer asked for the money back").await;
    browser.click("#submit-fail").await;

    let waiting = browser.wait_for_text("waits for a second operator").await;
    assert!(waiting.contains("Waiting for a second operator"), "{waiting}");
    assert!(
        waiting.contains("the provider said: no_transfer") || waiting.contains("provider said: no_transfer"),
        "{waiting}"
    );
    assert!(!browser.exists("#decision-approve").await, "the requester cannot approve their own decision");
    assert!(browser.exists("#decision-reject").await, "but may withdraw it");
    assert_eq!(status_of(&app, id).await, WithdrawalStatus::RequiresReview);
    assert_eq!(app.usd_balance(&alice).await.1, "40.00", "nothing moved yet");
    browser.screenshot("pending-decision").await;

    browser.sign_out().await;
    browser.sign_in(&app.operator("operator").await).await;
    browser.goto(&format!("/ops/withdrawals/{id}")).await;
    browser.wait_for_text("Waiting for a second operator").await;
    browser.fill("#decision-reason-approve", "checked the bank's closure notice").await;
    browser.click("#submit-decision-approve").await;

    let after = browser.wait_for_text("You approved the decision").await;
    assert!(after.contains("Ledger entry release"), "{after}");
    assert!(after.contains("Decision requested fail"), "the decision is in the timeline: {after}");
    assert!(after.contains("the provider said no_transfer"), "the transition shows the provider's answer: {after}");
    assert_eq!(status_of(&app, id).await, WithdrawalStatus::Failed);
    assert_eq!(app.usd_balance(&alice).await, ("100.00".into(), "0.00".into(), "0.00".into()));
    let trail: Vec<(String, String)> =
        audit::list(&app.db, &AuditFilter { target_id: Some(id.to_string()), limit: 10, ..Default::default() })
            .await
            .unwrap()
            .into_iter()
            .rev()
            .map(|r| (r.action, r.result))
            .collect();
    let trail: Vec<(&str, &str)> = trail.iter().map(|(a, r)| (a.as_str(), r.as_str())).collect();
    assert_eq!(trail, [("withdrawal.resolve", "pending_approval"), ("withdrawal.decision.approve", "ok")]);
    app.assert_ledger_invariant().await;
}
