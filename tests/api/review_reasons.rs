//! Issue 33 items 4 and 5: the review queue says why each withdrawal waits (its dead letter's
//! category and code, or reconciliation's result) and what the provider last said, and filters by
//! that reason — in the ops API, the CLI and the console; `withdrawals status --watch` redraws the
//! overview in place until it is stopped.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;
use withdrawals::domain::{Category, ReconciliationResult, WithdrawalId};
use withdrawals::ops::types::{OpsWithdrawal, Page, ProviderStatus, ReasonKind, StatusSource};
use withdrawals::storage::{attempts, dead_letters, reconciliations};

use crate::both_backends;
use crate::console::{http_sign_in, session_cookie};
use crate::harness::{problem_code, TestApp};
use crate::ops::{call, cli, paid_but_unknown, rejected_withdrawal, resolve, version_of};

both_backends!(
    each_review_item_says_why_it_waits_and_what_the_provider_said_and_filters_by_reason,
    status_watch_redraws_in_place_keeps_trying_and_refuses_what_it_cannot_do,
);

/// The clear-screen-and-home sequence each `--watch` frame starts with.
const CLEAR: &str = "\x1b[2J\x1b[H";

fn item(page: &Page<OpsWithdrawal>, id: WithdrawalId) -> &OpsWithdrawal {
    page.data.iter().find(|w| w.id == id.0).unwrap_or_else(|| panic!("{id} is listed: {page:?}"))
}

fn ids(page: &Page<OpsWithdrawal>) -> Vec<uuid::Uuid> {
    page.data.iter().map(|w| w.id).collect()
}

/// What the rule says the provider last said: the later of reconciliation's newest answer (not
/// `window_expired`/`skipped`) and the newest attempt with an outcome, read from the stores.
async fn expected_provider_status(app: &TestApp, id: WithdrawalId) -> ProviderStatus {
    let key = app.key(id).await;
    let answer = reconciliations::for_withdrawal(&app.db, key)
        .await
        .unwrap()
        .into_iter()
        .rfind(|r| !matches!(r.result, ReconciliationResult::WindowExpired | ReconciliationResult::Skipped))
        .map(|r| (r.at.0, StatusSource::Reconciliation, r.provider, r.result.to_string()));
    let attempt =
        attempts::for_withdrawal(&app.db, key).await.unwrap().into_iter().rfind(|a| a.outcome.is_some()).map(|a| {
            (a.finished_at.unwrap_or(a.started_at).0, StatusSource::Attempt, a.provider, a.outcome.unwrap().to_string())
        });
    let latest = match (answer, attempt) {
        (Some(r), Some(a)) => Some(if a.0 > r.0 { a } else { r }),
        (r, a) => r.or(a),
    };
    let (at, source, provider, status) = latest.expect("the provider said something");
    ProviderStatus { status, source: Some(source), provider: Some(provider), at: Some(at) }
}

/// One withdrawal the provider rejected (a `dependency_rejected` dead letter from the submit job)
/// and one whose reconciliation window closed without an answer (a `side_effect_unknown` letter
/// written by the reconciliation job): each shows its own reason and the provider's last word, in
/// the API, the CLI and the console, and each filter keeps only its own.
async fn each_review_item_says_why_it_waits_and_what_the_provider_said_and_filters_by_reason(app: TestApp) {
    let (rejected, _) = rejected_withdrawal(&app).await;
    let (unknown, _) = paid_but_unknown(&app).await;
    let viewer = app.operator("viewer").await;
    let letter = dead_letters::for_withdrawal(&app.db, app.key(rejected).await).await.unwrap().pop().unwrap();
    let recon_letter = dead_letters::for_withdrawal(&app.db, app.key(unknown).await).await.unwrap().pop().unwrap();
    assert_eq!(recon_letter.job_type, "reconcile_payout", "the setup: reconciliation wrote this letter");

    // The ops API.
    let queue: Page<OpsWithdrawal> = app.ops_get(&viewer, "/ops/v1/withdrawals").await;
    let w = item(&queue, rejected);
    let reason = w.reason.as_ref().expect("a reason in review");
    assert_eq!(reason.value, "dead_letter:dependency_rejected");
    assert_eq!(reason.kind, ReasonKind::DeadLetter);
    assert_eq!(
        (reason.category, reason.code.as_deref()),
        (Some(Category::DependencyRejected), Some("invalid_account"))
    );
    assert_eq!(reason.dead_letter_id, Some(letter.id.0));
    assert_eq!(reason.since, Some(letter.failed_at.0));
    assert_eq!(reason.reconciliation_result, None);
    let said = w.provider_status.clone().unwrap();
    assert_eq!((said.status.as_str(), said.source), ("permanent", Some(StatusSource::Attempt)), "{said:?}");
    assert_eq!(said, expected_provider_status(&app, rejected).await);

    let w = item(&queue, unknown);
    let reason = w.reason.as_ref().expect("a reason in review");
    assert_eq!(reason.value, "reconciliation:window_expired");
    assert_eq!(reason.kind, ReasonKind::Reconciliation);
    assert_eq!(reason.reconciliation_result, Some(ReconciliationResult::WindowExpired));
    assert_eq!(reason.category, Some(Category::SideEffectUnknown));
    assert_eq!(reason.code.as_deref(), Some(recon_letter.error_code.as_str()));
    assert!(reason.code.as_deref().unwrap().starts_with("reconciliation_"), "{reason:?}");
    assert_eq!(reason.dead_letter_id, Some(recon_letter.id.0));
    let said = w.provider_status.clone().unwrap();
    assert_ne!(said.status, "window_expired", "the service's own verdict is not the provider's word");
    assert_eq!(said, expected_provider_status(&app, unknown).await);

    // The filter keeps only the matching ones.
    for (reason, expected) in [
        ("dead_letter", vec![rejected.0]),
        ("dead_letter:dependency_rejected", vec![rejected.0]),
        ("dead_letter:side_effect_unknown", vec![]),
        ("reconciliation", vec![unknown.0]),
        ("reconciliation:window_expired", vec![unknown.0]),
        ("reconciliation:mismatch", vec![]),
        ("unknown", vec![]),
    ] {
        let page: Page<OpsWithdrawal> = app.ops_get(&viewer, &format!("/ops/v1/withdrawals?reason={reason}")).await;
        assert_eq!(ids(&page), expected, "reason={reason}");
    }
    // A page of one, then the next: the filter holds across the cursor.
    let first: Page<OpsWithdrawal> = app.ops_get(&viewer, "/ops/v1/withdrawals?reason=reconciliation&limit=1").await;
    assert_eq!((ids(&first), first.next_cursor), (vec![unknown.0], None));

    // A value outside the vocabulary, or a reason for another state, is a 422 naming the field.
    for bad in [
        "bogus",
        "dead_letter:nope",
        "reconciliation:",
        "unknown:x",
        "DEAD_LETTER",
        "dead_letter%3Adependency_rejected&status=failed",
    ] {
        let response = call(&app, Method::GET, &format!("/ops/v1/withdrawals?reason={bad}"), Some(&viewer), None).await;
        let (status, code, body) = problem_code(response).await;
        assert_eq!((status, code.as_str()), (422, "invalid_reason"), "{bad}: {body:?}");
        assert_eq!(body.field.as_deref(), Some("reason"), "{bad}");
    }

    // Its text obeys the API's text rule like every query parameter.
    let response = call(&app, Method::GET, "/ops/v1/withdrawals?reason=dead_letter%00", Some(&viewer), None).await;
    let (status, code, body) = problem_code(response).await;
    assert_eq!((status, code.as_str(), body.field.as_deref()), (422, "invalid_query", Some("reason")));

    // The CLI.
    let token = app.operator("operator").await;
    let listed = cli(&app, &token, &["review", "list"]);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    let table = String::from_utf8_lossy(&listed.stdout);
    for line in [rejected, unknown].map(|id| table.lines().find(|l| l.starts_with(&id.to_string())).unwrap().to_owned())
    {
        let expected = if line.starts_with(&rejected.to_string()) {
            ["dead_letter:dependency_rejected", "invalid_account", "permanent (attempt"]
        } else {
            ["reconciliation:window_expired", recon_letter.error_code.as_str(), "("]
        };
        for part in expected {
            assert!(line.contains(part), "{part} in {line}");
        }
    }
    let only = cli(&app, &token, &["review", "list", "--reason", "dead_letter:dependency_rejected", "--json"]);
    assert!(only.status.success(), "{}", String::from_utf8_lossy(&only.stderr));
    let only: Page<OpsWithdrawal> = serde_json::from_slice(&only.stdout).unwrap();
    assert_eq!(ids(&only), vec![rejected.0]);
    let only = cli(&app, &token, &["review", "list", "--reason", "reconciliation"]);
    let table = String::from_utf8_lossy(&only.stdout);
    assert!(table.contains(&unknown.to_string()) && !table.contains(&rejected.to_string()), "{table}");
    let refused = cli(&app, &token, &["review", "list", "--reason", "bogus"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("422 invalid_reason"), "{stderr}");

    // The console: the reasons and statuses in the queue, the select, the filter and its refusal.
    let cookie = session_cookie(&http_sign_in(&app.base_url, &viewer, "/ops/overview", false).await);
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let page = |query: &'static str| {
        let request = app.client.get(app.url(&format!("/ops/review{query}"))).header("cookie", &cookie);
        async move {
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let (status, html) = page("").await;
    assert_eq!(status, 200);
    for part in [
        "<select id=\"reason\" name=\"reason\">",
        "<option value=\"reconciliation:window_expired\">",
        "dead_letter:dependency_rejected",
        "invalid_account",
        "reconciliation:window_expired",
        &recon_letter.error_code,
        "permanent",
        &format!("/ops/dead-letters/{}", letter.id),
        &format!("/ops/dead-letters/{}", recon_letter.id),
        &rejected.to_string(),
        &unknown.to_string(),
    ] {
        assert!(html.contains(part), "{part} on the queue page");
    }
    let (status, html) = page("?reason=dead_letter%3Adependency_rejected").await;
    assert_eq!(status, 200);
    assert!(html.contains(&rejected.to_string()) && !html.contains(&unknown.to_string()));
    assert!(html.contains("<option value=\"dead_letter:dependency_rejected\" selected>"), "the select keeps it");
    let (status, html) = page("?reason=reconciliation").await;
    assert_eq!(status, 200);
    assert!(html.contains(&unknown.to_string()) && !html.contains(&rejected.to_string()));
    let (status, html) = page("?reason=bogus").await;
    assert_eq!(status, 422);
    assert!(html.contains("unknown reason"), "{html}");

    // Out of review it has no reason; what the provider said is still shown.
    let operator = app.operator("operator").await;
    let version = version_of(&app, rejected, &operator).await;
    let failed = resolve(&app, rejected, &operator, json!({"action": "fail", "reason": "r", "version": version})).await;
    assert_eq!(failed.status(), 200);
    let page: Page<OpsWithdrawal> = app.ops_get(&viewer, "/ops/v1/withdrawals?status=failed").await;
    let w = item(&page, rejected);
    assert_eq!(w.reason, None);
    assert_eq!(w.provider_status.as_ref().map(|s| s.status.as_str()), Some("permanent"));
    let response =
        call(&app, Method::GET, "/ops/v1/withdrawals?status=failed&reason=dead_letter", Some(&viewer), None).await;
    assert_eq!(problem_code(response).await.1, "invalid_reason", "a reason is only why a withdrawal waits in review");
}

/// `status --watch --interval 1` against a served app: at least two frames, each starting with the
/// clear-screen sequence; when the server goes away a frame says so and the command keeps trying;
/// with `--json`, or with nothing to reach at the first fetch, one line and a non-zero exit.
async fn status_watch_redraws_in_place_keeps_trying_and_refuses_what_it_cannot_do(app: TestApp) {
    let viewer = app.operator("viewer").await;
    // Its own server, so the test can stop it while the watch runs.
    let stop = app.shutdown_token().child_token();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let state = withdrawals::http::AppState::with_gateway(app.db.clone(), Default::default(), app.gateway.clone());
    tokio::spawn(withdrawals::startup::serve(listener, state, stop.clone()));

    let mut child = Command::new(env!("CARGO_BIN_EXE_withdrawals"))
        .args(["status", "--watch", "--interval", "1"])
        .env("WITHDRAWALS_URL", &url)
        .env("WITHDRAWALS_TOKEN", &viewer)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the withdrawals binary");
    let mut stdout = child.stdout.take().unwrap();
    let (chunks, received) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || chunks.send(String::from_utf8_lossy(&buf[..n]).into_owned()).is_err() {
                break;
            }
        }
    });
    let mut seen = String::new();
    let mut read_until = |what: &str, done: &dyn Fn(&str) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done(&seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            match received.recv_timeout(left) {
                Ok(chunk) => seen.push_str(&chunk),
                Err(_) => panic!("{what} within 20 s; read so far: {seen:?}"),
            }
        }
        seen.clone()
    };
    let frames = read_until("two frames", &|s| s.matches(CLEAR).count() >= 3);
    let second = frames.split(CLEAR).nth(2).unwrap();
    assert!(second.contains("withdrawals status") && second.contains("dead letters open"), "{second:?}");
    assert!(!second.contains("error:"), "{second:?}");

    // The server goes away: the next frame says so, and the watch keeps running.
    stop.cancel();
    let after = read_until("an error frame", &|s| s.rsplit(CLEAR).next().is_some_and(|f| f.contains("error:")));
    let frame = after.rsplit(CLEAR).next().unwrap();
    assert!(frame.contains("dead letters open"), "the last overview read stays on screen: {frame:?}");
    assert!(child.try_wait().unwrap().is_none(), "still watching after a failed fetch");
    child.kill().unwrap();
    child.wait().unwrap();

    let json = cli(&app, &viewer, &["status", "--watch", "--json"]);
    let stderr = String::from_utf8_lossy(&json.stderr);
    assert!(!json.status.success());
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--json"), "{stderr}");

    // A port nothing listens on: the first fetch fails, and so does the command.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let unreachable = Command::new(env!("CARGO_BIN_EXE_withdrawals"))
        .args(["status", "--watch", "--interval", "1"])
        .env("WITHDRAWALS_URL", &nowhere)
        .env("WITHDRAWALS_TOKEN", &viewer)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&unreachable.stderr);
    assert!(!unreachable.status.success());
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot reach"), "{stderr}");
    assert!(!String::from_utf8_lossy(&unreachable.stdout).contains(CLEAR), "nothing drawn");
}
