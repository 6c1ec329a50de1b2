//! The `withdrawals` binary: provisioning commands print what they promise, errors are one line.

use std::process::Command;

use serde_json::Value;

use withdrawals::storage::audit::{self, AuditFilter};

use crate::both_backends;
use crate::harness::{fresh_database, service_url, Backend, TestApp};
use crate::ops::cli as ops_cli;

both_backends!(
    accounts_and_operators_are_created_from_the_cli,
    accounts_fund_credits_through_the_ops_route_once_per_key_and_refuses_bad_amounts_in_one_line,
    cli_errors_are_one_line_with_a_non_zero_exit,
    a_worker_process_pays_out_and_serves_its_own_metrics,
    a_fresh_serve_process_exports_every_metric_family_at_zero,
    a_providers_file_is_checked_at_start_and_refused_in_one_line,
);

fn withdrawals(app: &TestApp, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_withdrawals"))
        .args(args)
        .env("DATABASE_URL", &app.database_url)
        .output()
        .expect("run the withdrawals binary")
}

async fn accounts_and_operators_are_created_from_the_cli(app: TestApp) {
    let out =
        withdrawals(&app, &["accounts", "create", "--name", "Ada", "--currency", "USD", "--fund", "1000.00", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut keys: Vec<&str> = created.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(keys, ["account_id", "api_key"]);
    let account = created["account_id"].as_str().unwrap();
    let key = created["api_key"].as_str().unwrap();
    // Issue 27: the funding is a credit by the local actor, on the ledger and in the audit log.
    let account_id: withdrawals::domain::AccountId = account.parse().unwrap();
    let entries = withdrawals::storage::accounts::funding_entries(&app.db, account_id).await.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].amount, 100_000);
    let actor = entries[0].actor.clone().unwrap();
    assert!(actor.starts_with("local:"), "{actor}");
    let filter = AuditFilter { action: Some("account.credit".into()), limit: 10, ..Default::default() };
    let rows = audit::list(&app.db, &filter).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].target_id.as_str(), rows[0].operator_name.as_str(), rows[0].result.as_str()),
        (account, actor.as_str(), "ok")
    );

    let out = withdrawals(&app, &["operators", "create", "--name", "Grace", "--role", "treasury", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let operator: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(operator["operator_id"].as_str().is_some());
    let token = operator["token"].as_str().unwrap();
    assert!(token.starts_with("wdo_"));

    let fund = ops_cli(
        &app,
        token,
        &["accounts", "fund", account, "--amount", "5.25", "--currency", "USD", "--reason", "wire"],
    );
    assert!(fund.status.success(), "{}", String::from_utf8_lossy(&fund.stderr));

    let balances: Value =
        app.client.get(app.url("/v1/balances")).bearer_auth(key).send().await.unwrap().json().await.unwrap();
    assert_eq!(balances["data"][0]["available"], "1005.25");
    app.assert_ledger_invariant().await;
}

/// Issue 27: `accounts fund` needed only DATABASE_URL, wrote no audit row, had no idempotency,
/// took `1e3` and panicked on `1e20`. Now it calls `POST /ops/v1/accounts/{id}/credits`.
async fn accounts_fund_credits_through_the_ops_route_once_per_key_and_refuses_bad_amounts_in_one_line(app: TestApp) {
    let alice = app.customer("100.00").await;
    let account = alice.account_id.to_string();
    let treasury = app.operator("treasury").await;
    let fund = |token: &str, amount: &str, extra: &[&str]| {
        let mut args =
            vec!["accounts", "fund", account.as_str(), "--amount", amount, "--currency", "USD", "--reason", "wire"];
        args.extend_from_slice(extra);
        ops_cli(&app, token, &args)
    };

    let out = fund(&treasury, "5.25", &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("credited") && stdout.contains("idempotency key fund-"), "{stdout}");
    for _ in 0..2 {
        let out = fund(&treasury, "10.00", &["--idempotency-key", "ticket-17"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(app.usd_balance(&alice).await.0, "115.25", "the key credits once");

    for bad in ["1e3", "1_000", "+5", "5.", ".5", "1e-2", "1e20", "100000000000000000000"] {
        let out = fund(&treasury, bad, &[]);
        assert!(!out.status.success(), "{bad}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
        let code = if bad.starts_with("1000") { "amount_over_limit" } else { "invalid_amount" };
        assert!(stderr.starts_with("error: ") && stderr.contains(code), "{bad}: {stderr}");
    }
    let out = withdrawals(&app, &["accounts", "create", "--name", "Ada", "--fund", "1e3"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("invalid_amount"), "{stderr}");

    let operator = app.operator("operator").await;
    let out = fund(&operator, "1.00", &[]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("403 forbidden"), "an operator may not credit");
    assert_eq!(app.usd_balance(&alice).await.0, "115.25");
    app.assert_ledger_invariant().await;
}

async fn cli_errors_are_one_line_with_a_non_zero_exit(app: TestApp) {
    for args in [
        &["accounts", "create", "--name", "Ada", "--currency", "ZZZ", "--fund", "10"][..],
        &["accounts", "create", "--name", "Ada", "--currency", "USD", "--fund", "1.001"][..],
        &["accounts", "fund", "not-a-uuid", "--amount", "1", "--currency", "USD", "--reason", "r"][..],
        &[
            "accounts",
            "fund",
            "00000000-0000-0000-0000-000000000000",
            "--amount",
            "1",
            "--currency",
            "USD",
            "--reason",
            "r",
        ][..],
        &["accounts", "create", "--name", "Ada", "--currency", "USD", "--fund", "1e20"][..],
    ] {
        let out = withdrawals(&app, args);
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.starts_with("error: "), "{stderr}");
    }
}

async fn a_worker_process_pays_out_and_serves_its_own_metrics(app: TestApp) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // As production runs it: migrations as the owner, work as the service's role.
    let mut worker = Command::new(env!("CARGO_BIN_EXE_withdrawals"))
        .args(["worker", "--metrics-bind", &format!("127.0.0.1:{port}")])
        .env("DATABASE_URL", &app.service_url)
        .env("MIGRATION_DATABASE_URL", &app.database_url)
        .env("PROVIDER_URL", app.provider.mock.url())
        .env("PROVIDER_API_KEY", "test-provider-key")
        .env("WORKER_POLL_MS", "100")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let metrics_url = format!("http://127.0.0.1:{port}/metrics");
    let client = app.client.clone();
    app.eventually("the worker's /healthz", std::time::Duration::from_secs(30), || {
        let client = client.clone();
        let url = format!("http://127.0.0.1:{port}/healthz");
        async move { client.get(url).send().await.ok().filter(|r| r.status() == 200) }
    })
    .await;

    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "by-process", "5.00").await;
    app.wait_for_status(id, withdrawals::domain::WithdrawalStatus::Completed, std::time::Duration::from_secs(30)).await;
    let text = client.get(&metrics_url).send().await.unwrap().text().await.unwrap();
    worker.kill().unwrap();
    let _ = worker.wait();
    assert!(
        text.lines().any(|l| l == "job_attempts_total{queue=\"payouts\",kind=\"submit_payout\"} 1"),
        "the worker's own counters, exact:\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l
                .starts_with("provider_request_duration_seconds_count{provider=\"default\",outcome=\"success\"} 1")),
        "{text}"
    );
    app.assert_ledger_invariant().await;
}

/// SPEC §9: before any traffic, `/metrics` of a new process has every family of the catalogue,
/// with its known label sets at zero — an alert sees "0", not "no data".
async fn a_fresh_serve_process_exports_every_metric_family_at_zero(app: TestApp) {
    let serve = app.serve_process(&[
        ("PROVIDER_URL", &app.provider.mock.url()),
        ("PROVIDER_API_KEY", "test-provider-key"),
        ("PROVIDER_WEBHOOK_SECRET", "whsec_old, whsec_new"),
    ]);
    let (port, metrics_port) = (serve.port, serve.metrics_port);
    let client = app.client.clone();
    let metrics_url = format!("http://127.0.0.1:{metrics_port}/metrics");
    // Once the first database refresh has run (its gauges come from a database with no rows).
    app.eventually("a fresh process's /metrics", std::time::Duration::from_secs(30), || {
        let (client, url) = (client.clone(), metrics_url.clone());
        async move {
            let text = client.get(url).send().await.ok()?.text().await.ok()?;
            text.contains("ledger_invariant_violations 0").then_some(())
        }
    })
    .await;
    // A scrape renders family by family while start-up may still register: one that saw the
    // refresh began after what start-up registers before it, so read again.
    let text = client.get(&metrics_url).send().await.unwrap().text().await.unwrap();
    // PROVIDER_WEBHOOK_SECRET's list reached the route: unsigned is refused, either secret taken.
    let webhook = format!("http://127.0.0.1:{port}/webhooks/provider");
    let unsigned = client.post(&webhook).body("{}").send().await.unwrap();
    assert_eq!(unsigned.status(), 400);
    for (i, secret) in ["whsec_old", "whsec_new"].into_iter().enumerate() {
        let body = serde_json::to_vec(&serde_json::json!({"id": format!("evt_cli_{i}"), "type": "transfer.created",
            "created_at": "2026-12-07T00:00:00Z", "data": {}}))
        .unwrap();
        let signature = provider_contract::webhook::header_value(&[secret], chrono::Utc::now().timestamp(), &body);
        let taken = client.post(&webhook).header("Provider-Signature", signature).body(body).send().await.unwrap();
        assert_eq!(taken.status(), 200, "an unhandled type signed with {secret}: taken and ignored");
    }
    drop(serve);

    // A move between providers needs two of them: its series are checked where a process has
    // two (`a_providers_file_is_checked_at_start_and_refused_in_one_line`).
    let missing: Vec<&str> = withdrawals::metrics::CATALOGUE
        .iter()
        .map(|(name, _, _)| *name)
        .filter(|name| *name != withdrawals::metrics::PAYOUT_FAILOVERS)
        .filter(|name| {
            !text.lines().any(|l| {
                l.starts_with(&format!("{name}{{"))
                    || l.starts_with(&format!("{name} "))
                    || l.starts_with(&format!("{name}_"))
            })
        })
        .collect();
    assert!(missing.is_empty(), "families missing from a fresh process: {missing:?}\n{text}");
    for series in [
        "circuit_breaker_state{breaker=\"payout_provider\",provider=\"default\"} 0",
        "circuit_breaker_transitions_total{breaker=\"payout_provider\",provider=\"default\",from=\"closed\",to=\"open\"} 0",
        "job_retries_total{queue=\"payouts\",kind=\"submit_payout\"} 0",
        "job_retries_exhausted_total{queue=\"reconciliation\",kind=\"reconcile_payout\"} 0",
        "dead_letters_total{queue=\"payouts\",job_type=\"submit_payout\",category=\"infrastructure\",error_code=\"\"} 0",
        "withdrawal_transitions_total{from=\"processing\",to=\"requires_review\"} 0",
        "reconciliation_results_total{provider=\"default\",result=\"mismatch\"} 0",
        "replay_items_total{outcome=\"released\"} 0",
        "withdrawals_created_total{currency=\"USD\"} 0",
        "provider_request_duration_seconds_count{provider=\"default\",outcome=\"unknown\"} 0",
        "dead_letters_open 0",
        "jobs_due{queue=\"reconciliation\"} 0",
    ] {
        assert!(text.lines().any(|l| l == series), "no `{series}` in a fresh process:\n{text}");
    }
}

/// Issue 29 item 3: on a fresh PostgreSQL database the service's role (a member of
/// `withdrawals_app`) may not migrate, and says how to; `migrate` with the owner's
/// MIGRATION_DATABASE_URL applies the migrations and checks the service's role sees them; after
/// that the role runs commands with no owner URL at all.
#[tokio::test]
async fn the_service_role_migrates_only_through_the_owners_url_postgres() {
    let app = TestApp::spawn(Backend::Postgres).await; // makes the service's login role
    let (owner_url, _) = fresh_database(Backend::Postgres).await;
    let service = service_url(&owner_url).await;
    let run = |args: &[&str], migration_url: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_withdrawals"));
        command.args(args).env("DATABASE_URL", &service).env_remove("MIGRATION_DATABASE_URL");
        if let Some(url) = migration_url {
            command.env("MIGRATION_DATABASE_URL", url);
        }
        command.output().expect("run the withdrawals binary")
    };

    let refused = run(&["migrate"], None);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "the service's role may not create tables");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("MIGRATION_DATABASE_URL") && stderr.contains("permission denied"), "{stderr}");

    let migrated = run(&["migrate"], Some(&owner_url));
    let stdout = String::from_utf8_lossy(&migrated.stdout);
    assert!(migrated.status.success(), "{}", String::from_utf8_lossy(&migrated.stderr));
    assert_eq!(stdout.trim(), "migrations applied (Postgres); the service's role sees a current schema");

    let created = run(&["accounts", "create", "--name", "by-the-service", "--json"], None);
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let answer: Value = serde_json::from_slice(&created.stdout).unwrap();
    assert!(answer["api_key"].as_str().is_some_and(|k| !k.is_empty()), "{answer}");
    drop(app);
}

/// Issue 31 (SPEC §16): `PROVIDERS` is read and checked before anything starts; each refused
/// configuration exits non-zero with one line saying why, and a two-provider file routes each
/// withdrawal by currency, then priority, in a real process.
async fn a_providers_file_is_checked_at_start_and_refused_in_one_line(app: TestApp) {
    let dir = tempfile::tempdir().unwrap();
    let mock = app.provider.mock.url();
    let provider = |name: &str, currencies: &str, priority: u32, extra: &str| {
        format!(r#"{{"name": "{name}", "url": "{mock}", "currencies": {currencies}, "priority": {priority}{extra}}}"#)
    };
    let write = |file: &str, providers: &[String]| {
        let path = dir.path().join(file);
        std::fs::write(&path, format!(r#"{{"providers": [{}]}}"#, providers.join(","))).unwrap();
        path
    };
    let serve = |providers: &std::path::Path, extra_env: &[(&str, &str)]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_withdrawals"));
        command
            .args(["serve", "--bind", "127.0.0.1:0"])
            .env("DATABASE_URL", &app.database_url)
            .env("PROVIDERS", providers)
            .env_remove("PROVIDER_URL")
            .env_remove("ACME_API_KEY");
        for (name, value) in extra_env {
            command.env(name, value);
        }
        command.output().expect("run the withdrawals binary")
    };
    /// A file, the environment beside it, and what the refusal says.
    type Case<'a> = (std::path::PathBuf, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            write("twice.json", &[provider("acme", r#"["USD"]"#, 1, ""), provider("acme", r#"["EUR"]"#, 2, "")]),
            vec![],
            "provider `acme` is configured twice",
        ),
        (write("currency.json", &[provider("acme", r#"["USD", "XYZ"]"#, 1, "")]), vec![], "unknown currency `XYZ`"),
        (
            write("key.json", &[provider("acme", r#"["USD"]"#, 1, r#", "api_key_env": "ACME_API_KEY""#)]),
            vec![],
            "its credential variable ACME_API_KEY is not set",
        ),
        (
            write("both.json", &[provider("acme", r#"["USD"]"#, 1, "")]),
            vec![("PROVIDER_URL", "http://127.0.0.1:9")],
            "PROVIDERS and PROVIDER_URL are both set",
        ),
    ];
    for (path, env, expected) in cases {
        let refused = serve(&path, &env);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{expected}: {stderr}");
        assert!(stderr.contains(expected), "{stderr:?} should say {expected:?}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    }

    // Two providers in the file, each key from the variable it names: a real process routes each
    // withdrawal by currency, then priority — USD to bolt (priority 1), EUR to acme, the only one
    // that pays it — and exports every provider's series from zero.
    let bolt = crate::harness::provider_mock(2_000).await;
    let bolt_url = bolt.mock.url();
    let two = write(
        "two.json",
        &[
            provider("acme", r#"["USD", "EUR"]"#, 2, r#", "api_key_env": "ACME_API_KEY""#),
            format!(
                r#"{{"name": "bolt", "url": "{bolt_url}", "currencies": ["USD"], "priority": 1, "api_key_env": "BOLT_API_KEY"}}"#
            ),
        ],
    );
    let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (port, metrics_port) = (free(), free());
    let mut process = Command::new(env!("CARGO_BIN_EXE_withdrawals"))
        .args(["serve", "--bind", &format!("127.0.0.1:{port}"), "--metrics-bind", &format!("127.0.0.1:{metrics_port}")])
        .env("DATABASE_URL", &app.database_url)
        .env("PROVIDERS", &two)
        .env("ACME_API_KEY", "test-provider-key")
        .env("BOLT_API_KEY", "test-provider-key")
        .env_remove("PROVIDER_URL")
        .env("WORKER_POLL_MS", "100")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let alice = app.customer("100.00").await;
    let eur = withdrawals::domain::Currency::parse("EUR").unwrap();
    let funded = withdrawals::domain::Amount::new(rust_decimal::Decimal::new(10_000, 2), eur).unwrap();
    let bob = withdrawals::provisioning::create_account(&app.db, "euro customer", Some(funded)).await.unwrap();
    let client = app.client.clone();
    let mut ids = Vec::new();
    for (key, currency) in [(alice.api_key.clone(), "USD"), (bob.api_key.clone(), "EUR")] {
        let mut body = crate::harness::withdrawal_body("5.00");
        body["currency"] = currency.into();
        let id = app
            .eventually("a withdrawal accepted by the process", std::time::Duration::from_secs(30), || {
                let (client, key, body) = (client.clone(), key.clone(), body.clone());
                async move {
                    let response = client
                        .post(format!("http://127.0.0.1:{port}/v1/withdrawals"))
                        .bearer_auth(key)
                        .header("Idempotency-Key", "via-providers-file")
                        .json(&body)
                        .send()
                        .await
                        .ok()?;
                    let view: withdrawals::customer::types::WithdrawalView = response.json().await.ok()?;
                    Some(withdrawals::domain::WithdrawalId(view.id))
                }
            })
            .await;
        ids.push(id);
    }
    for id in &ids {
        app.wait_for_status(*id, withdrawals::domain::WithdrawalStatus::Completed, std::time::Duration::from_secs(30))
            .await;
    }
    let metrics = client.get(format!("http://127.0.0.1:{metrics_port}/metrics")).send().await.unwrap();
    let text = metrics.text().await.unwrap();
    process.kill().unwrap();
    let _ = process.wait();
    let paid_at = |mock: &provider_mocks::RunningMock| -> Vec<String> {
        mock.transfers().into_iter().map(|t| t.idempotency_key).collect()
    };
    assert_eq!(paid_at(&bolt.mock), [ids[0].to_string()], "USD: bolt, the first by priority");
    assert_eq!(paid_at(&app.provider.mock), [ids[1].to_string()], "EUR: acme, the only one paying it");
    for (id, expected) in ids.iter().zip(["bolt", "acme"]) {
        let attempts = withdrawals::storage::attempts::for_withdrawal(&app.db, app.key(*id).await).await.unwrap();
        let names: Vec<&str> = attempts.iter().map(|a| a.provider.as_str()).collect();
        assert_eq!(names, [expected], "the attempt names its provider");
    }
    for series in [
        "circuit_breaker_state{breaker=\"acme\",provider=\"acme\"} 0",
        "circuit_breaker_state{breaker=\"bolt\",provider=\"bolt\"} 0",
        "payout_failovers_total{from=\"acme\",to=\"bolt\"} 0",
        "payout_failovers_total{from=\"bolt\",to=\"acme\"} 0",
        "provider_request_duration_seconds_count{provider=\"acme\",outcome=\"unknown\"} 0",
        "provider_request_duration_seconds_count{provider=\"bolt\",outcome=\"retryable\"} 0",
    ] {
        assert!(text.lines().any(|l| l == series), "no `{series}` in a two-provider process:\n{text}");
    }
    app.assert_ledger_invariant().await;
}
