//! Issue 17's sandbox guard: sandbox mode (no `PROVIDER_URL`) only on the embedded SQLite
//! database or when asked for; withdrawals made in it are marked and never paid by a real
//! provider, and a sandbox never pretends to pay a real one.

use std::process::Command;
use std::time::Duration;

use withdrawals::config::AppConfig;
use withdrawals::customer::types::WithdrawalView;
use withdrawals::domain::WithdrawalStatus;
use withdrawals::ops::types::{Overview, WithdrawalDetail};
use withdrawals::storage::dead_letters;

use crate::both_backends;
use crate::harness::{read, worker_config, Backend, TestApp};

both_backends!(a_sandbox_withdrawal_is_marked_and_paid_only_by_a_sandbox, a_real_withdrawal_is_never_paid_by_a_sandbox);

const WAIT: Duration = Duration::from_secs(25);

/// `serve` without a provider on PostgreSQL refuses to start with one line naming both ways out;
/// the check runs before any connection, so no server is needed.
#[test]
fn serve_on_postgres_without_a_provider_refuses_to_start_unless_sandbox_is_asked_for() {
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_withdrawals"));
        cmd.args(args).env_remove("PROVIDER_URL").env_remove("WITHDRAWALS_SANDBOX").env_remove("DATABASE_URL");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let pg = "postgres://nobody@127.0.0.1:1/none";
    for role in ["all", "worker", "api"] {
        let refused = run(&["serve", "--role", role, "--database-url", pg], &[]);
        assert!(!refused.status.success(), "{role}");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.contains("refusing to start") && stderr.contains("PROVIDER_URL") && stderr.contains("--sandbox"),
            "{stderr}"
        );
    }
    // Both at once is a contradiction, refused the same way.
    let both = run(&["serve", "--sandbox", "--database-url", pg], &[("PROVIDER_URL", "http://127.0.0.1:1")]);
    assert!(String::from_utf8_lossy(&both.stderr).contains("exclude each other"));
    // Asked for (flag or environment), it gets past the guard: the next error is the database.
    for (args, env) in [
        (vec!["serve", "--sandbox", "--database-url", pg], vec![]),
        (vec!["serve", "--database-url", pg], vec![("WITHDRAWALS_SANDBOX", "1")]),
    ] {
        let out = run(&args, &env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("refusing to start"), "{stderr}");
        assert!(stderr.contains("database"), "{stderr}");
    }
}

async fn sandboxed(backend: Backend) -> TestApp {
    TestApp::spawn_with(backend, AppConfig { sandbox: true, ..AppConfig::default() }).await
}

async fn a_sandbox_withdrawal_is_marked_and_paid_only_by_a_sandbox(app: TestApp) {
    let app =
        sandboxed(if app.database_url.starts_with("sqlite:") { Backend::Sqlite } else { Backend::Postgres }).await;
    let alice = app.customer("100.00").await;
    // A real worker first: it must not pay sandbox money.
    let real = app.start_worker(app.gateway.clone(), worker_config("w-real"));
    let id = app.create_withdrawal(&alice, "k1", "25.00").await;
    app.wait_for_status(id, WithdrawalStatus::RequiresReview, WAIT).await;
    real.cancel();
    let letter = dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap().remove(0);
    assert_eq!((letter.category.as_str(), letter.error_code.as_str()), ("dependency_rejected", "sandbox_mismatch"));
    assert!(app.provider.mock.transfers().is_empty(), "nothing was sent");

    let mut config = worker_config("w-sandbox");
    config.sandbox = true;
    app.start_worker(app.gateway.clone(), config);
    let paid = app.create_withdrawal(&alice, "k2", "25.00").await;
    app.wait_for_status(paid, WithdrawalStatus::Completed, WAIT).await;

    let shown: WithdrawalView = read(app.get(&alice, &format!("/v1/withdrawals/{paid}")).send().await.unwrap()).await;
    assert!(shown.sandbox, "the customer sees the marker");
    let operator = app.operator("viewer").await;
    let overview: Overview = app.ops_get(&operator, "/ops/v1/overview").await;
    assert!(overview.sandbox, "the overview shows sandbox mode");
    let ops: WithdrawalDetail = app.ops_get(&operator, &format!("/ops/v1/withdrawals/{paid}")).await;
    assert!(ops.withdrawal.sandbox);
    app.assert_ledger_invariant().await;
}

async fn a_real_withdrawal_is_never_paid_by_a_sandbox(app: TestApp) {
    let mut config = worker_config("w-sandbox");
    config.sandbox = true;
    app.start_worker(app.gateway.clone(), config);
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "25.00").await;

    app.wait_for_status(id, WithdrawalStatus::RequiresReview, WAIT).await;

    let letter = dead_letters::for_withdrawal(&app.db, app.key(id).await).await.unwrap().remove(0);
    assert_eq!(letter.error_code, "sandbox_mismatch");
    assert_eq!(letter.side_effect_state, withdrawals::domain::SideEffect::NotStarted);
    assert!(app.provider.mock.transfers().is_empty());
    let shown: WithdrawalView = read(app.get(&alice, &format!("/v1/withdrawals/{id}")).send().await.unwrap()).await;
    assert!(!shown.sandbox);
    assert_eq!(app.usd_balance(&alice).await, ("75.00".into(), "25.00".into(), "0.00".into()), "held, not paid");
    app.assert_ledger_invariant().await;
}
