//! Several providers (SPEC §16, issue 31): routing by currency and priority, one breaker each,
//! and failover only where no money can have moved — against two provider mocks over real HTTP,
//! through the gateways a providers file builds (`startup::gateways_from`, as `serve` does).

use std::time::Duration;

use provider_mocks::{FaultConfig, FaultEffect, FaultRule, RouteMatch};
use serde_json::{json, Value};
use withdrawals::domain::{WithdrawalId, WithdrawalStatus};
use withdrawals::jobs::Queue;
use withdrawals::provider::Gateways;
use withdrawals::storage::attempts;
use withdrawals::storage::withdrawals as store;

use crate::both_backends;
use crate::harness::{provider_mock, read, worker_config, ProviderHarness, TestApp};

both_backends!(
    refused_connections_at_the_first_provider_move_the_withdrawal_to_the_next_which_pays_it_once,
    a_timeout_after_commit_is_reconciled_at_its_provider_and_never_sent_to_the_next,
    a_5xx_waits_for_its_provider_until_that_providers_lookup_finds_nothing,
    one_providers_open_breaker_leaves_the_others_withdrawals_alone,
    each_provider_retries_by_its_own_policy_and_its_dead_letters_name_it,
    a_provider_taken_out_of_the_configuration_is_not_replaced_by_the_one_left,
);

const WAIT: Duration = Duration::from_secs(30);

/// Two providers over real HTTP: `acme` (first for USD, the only one for EUR) and `bolt` (USD).
struct Two {
    acme: ProviderHarness,
    bolt: ProviderHarness,
    gateways: Gateways,
}

/// A closed port: a provider there refuses every connection.
fn refusing_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    format!("http://127.0.0.1:{port}")
}

/// The providers file for `acme` at `acme_url` (USD and EUR, priority 1, opening after one failed
/// call for `open_s`) and `bolt` (USD, priority 2, never opening), read as `serve` reads it.
async fn two(acme_url: Option<String>, open_s: u64) -> Two {
    let acme_breaker = json!({"failure_rate": 0.5, "window_s": 60, "min_calls": 1, "open_s": open_s});
    two_with(acme_url, json!({ "breaker": acme_breaker })).await.0
}

/// [`two`] with `acme_extra` merged into acme's entry of the file; also the file, read.
async fn two_with(acme_url: Option<String>, acme_extra: Value) -> (Two, withdrawals::config::providers::Providers) {
    let (acme, bolt) = (provider_mock(500).await, provider_mock(500).await);
    let acme_url = acme_url.unwrap_or_else(|| acme.mock.url());
    let mut acme_entry =
        json!({"name": "acme", "url": acme_url, "currencies": ["USD", "EUR"], "priority": 1, "api_key_env": "KEY"});
    for (k, v) in acme_extra.as_object().unwrap() {
        acme_entry[k] = v.clone();
    }
    let file = json!({"providers": [
        acme_entry,
        {"name": "bolt", "url": bolt.mock.url(), "currencies": ["USD"], "priority": 2, "api_key_env": "KEY",
         "breaker": {"failure_rate": 1.0, "window_s": 60, "min_calls": 100000, "open_s": 1}},
    ]});
    let env = |name: &str| (name == "KEY").then(|| "test-provider-key".to_owned());
    let providers = withdrawals::config::providers::Providers::parse(&file.to_string(), false, &env).unwrap();
    let default = withdrawals::provider::breaker::BreakerConfig::default();
    let (connect, request) = (Duration::from_millis(300), Duration::from_millis(500));
    let gateways = withdrawals::startup::gateways_from(&providers, &default, connect, request).unwrap();
    (Two { acme, bolt, gateways }, providers)
}

impl Two {
    fn breaker(&self, name: &str) -> &withdrawals::provider::breaker::CircuitBreaker {
        &self.gateways.get(name).unwrap().breaker
    }
}

fn paid_keys(mock: &provider_mocks::RunningMock) -> Vec<String> {
    mock.transfers().into_iter().map(|t| t.idempotency_key).collect()
}

/// The providers the withdrawal's attempts went to, oldest first.
async fn attempted_at(app: &TestApp, id: WithdrawalId) -> Vec<String> {
    let attempts = attempts::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    attempts.into_iter().map(|a| a.provider).collect()
}

/// The withdrawal's failover entries in the transition log: (reason, evidence).
async fn moves(app: &TestApp, id: WithdrawalId) -> Vec<(String, Value)> {
    let log = store::transitions(&app.db, app.key(id).await).await.unwrap();
    log.into_iter()
        .filter(|t| t.from_status == Some(t.to_status))
        .map(|t| (t.reason, t.evidence.map(|e| e.0).unwrap_or(Value::Null)))
        .collect()
}

/// Provider A refuses connections: the attempt there is `not_started`, A's breaker opens, and the
/// withdrawal moves to B, where it is paid once; the move is in the transition log with A's
/// attempts as its evidence.
async fn refused_connections_at_the_first_provider_move_the_withdrawal_to_the_next_which_pays_it_once(app: TestApp) {
    let two = two(Some(refusing_url()), 3600).await;
    app.start_worker(two.gateways.clone(), worker_config("w-failover"));
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k-refused", "10.00").await;
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;

    assert_eq!(paid_keys(&two.bolt.mock), [id.to_string()], "paid once, at bolt");
    assert_eq!(attempted_at(&app, id).await, ["acme", "bolt"]);
    let attempts = attempts::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert_eq!(attempts[0].side_effect, attempts::SideEffect::NotStarted, "refused before the request left");
    let moves = moves(&app, id).await;
    assert_eq!(moves.len(), 1, "one recorded move: {moves:?}");
    let (reason, evidence) = &moves[0];
    assert_eq!(reason, "failover from acme to bolt: move: every attempt not_started");
    assert_eq!(evidence["source"], "failover");
    assert_eq!(evidence["failover"]["from"], "acme");
    assert_eq!(evidence["failover"]["to"], "bolt");
    assert_eq!(evidence["failover"]["breaker"], "open");
    assert_eq!(evidence["failover"]["attempts"][0]["side_effect"], "not_started");
    assert_eq!(evidence["failover"]["attempts"][0]["error_code"], "connect_failed");
    // The operator's view names each attempt's provider.
    let view: Value = read(
        app.client
            .get(app.url(&format!("/ops/v1/withdrawals/{id}")))
            .bearer_auth(app.operator("viewer").await)
            .send()
            .await
            .unwrap(),
    )
    .await;
    let providers: Vec<&str> =
        view["provider_attempts"].as_array().unwrap().iter().map(|a| a["provider"].as_str().unwrap()).collect();
    assert_eq!(providers, ["acme", "bolt"], "{view}");
    app.assert_ledger_invariant().await;
}

/// A timeout after A committed: the outcome is unknown, so the withdrawal is reconciled at A —
/// which paid it — and never sent to B, though B is healthy and A's breaker opened.
async fn a_timeout_after_commit_is_reconciled_at_its_provider_and_never_sent_to_the_next(app: TestApp) {
    let two = two(None, 3).await;
    let hold = FaultRule {
        times: Some(1),
        ..FaultRule::new(RouteMatch::Create, FaultEffect::TimeoutAfterCommit { ms: 1_500 })
    };
    two.acme.mock.set_faults(FaultConfig { rules: vec![hold] });
    let mut config = worker_config("w-timeout");
    config.in_flight_grace = Duration::from_millis(200);
    app.start_worker(two.gateways.clone(), config);
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k-timeout", "10.00").await;
    // A's breaker opens on the timeout; the withdrawal waits for A and is not moved.
    app.eventually("acme's breaker open", WAIT, || async {
        matches!(two.breaker("acme").state(), withdrawals::domain::BreakerState::Open).then_some(())
    })
    .await;
    // A stray submit job arrives meanwhile (as a replayed dead letter would enqueue one): A's
    // breaker is open, but its attempt may have paid, so the rule keeps it waiting for A.
    let key = app.key(id).await;
    let stray = withdrawals::jobs::SubmitPayout::new(id, None).job(
        key.account,
        "stray-submit",
        withdrawals::storage::DbTime::now(),
    );
    let mut tx = app.db.begin().await.unwrap();
    withdrawals::storage::jobs::enqueue(&mut tx, &stray).await.unwrap();
    tx.commit().await.unwrap();
    app.eventually("the stray submit deferred, not moved", WAIT, || async {
        let jobs = withdrawals::storage::jobs::jobs_for_withdrawal(&app.db, key).await.unwrap();
        jobs.iter()
            .any(|j| j.correlation_id == "stray-submit" && j.last_error.as_deref() == Some("circuit breaker open"))
            .then_some(())
    })
    .await;
    assert!(two.bolt.mock.requests().is_empty(), "nothing reached bolt while acme may have paid");
    // Once A can be asked again (its breaker's probe), A's record decides.
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    assert_eq!(paid_keys(&two.acme.mock), [id.to_string()], "acme paid it, once");
    assert!(two.bolt.mock.requests().is_empty(), "never sent to bolt");
    // (The stray job may have asked acme again under the same key once its breaker let it: the
    // provider's idempotency answers with the one transfer.)
    let attempted = attempted_at(&app, id).await;
    assert!(attempted.iter().all(|p| p == "acme"), "{attempted:?}");
    assert!(moves(&app, id).await.is_empty());
    let results = withdrawals::storage::reconciliations::for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    assert!(results.iter().all(|r| r.provider == "acme"), "only acme was asked: {results:?}");
    app.assert_ledger_invariant().await;
}

/// A 500 from A may have been executed: while A's lookups cannot answer, the withdrawal waits for
/// A, however long A's breaker stays open. Once A's own lookup says "no such transfer" and A's
/// breaker is still (forced) open, it moves to B and is paid there once.
async fn a_5xx_waits_for_its_provider_until_that_providers_lookup_finds_nothing(app: TestApp) {
    let two = two(None, 1).await;
    let failing_create = FaultRule::new(RouteMatch::Create, FaultEffect::Status { code: 500, retry_after_secs: None });
    let failing_lookup = FaultRule::new(RouteMatch::Lookup, FaultEffect::LookupUnavailable);
    two.acme.mock.set_faults(FaultConfig { rules: vec![failing_create.clone(), failing_lookup] });
    let payouts = |id: &str| {
        let mut config = worker_config(id);
        config.queues = vec![Queue::Payouts.as_str()];
        config
    };
    let mut reconciler = worker_config("w-reconcile");
    reconciler.queues = vec![Queue::Reconciliation.as_str()];
    reconciler.in_flight_grace = Duration::from_millis(200);
    app.start_worker(two.gateways.clone(), reconciler);
    let first = app.start_worker(two.gateways.clone(), payouts("w-pay-1"));
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k-500", "10.00").await;
    let key = app.key(id).await;

    // The 500 opens A's breaker; A's lookups fail; the withdrawal waits for A.
    app.eventually("the reconciliation deferred by acme's open breaker", WAIT, || async {
        let jobs = withdrawals::storage::jobs::jobs_for_withdrawal(&app.db, key).await.unwrap();
        jobs.iter()
            .any(|j| j.kind == "reconcile_payout" && j.last_error.as_deref() == Some("circuit breaker open"))
            .then_some(())
    })
    .await;
    assert_eq!(attempted_at(&app, id).await, ["acme"], "a 500 may have been executed: it waits for acme");
    assert!(two.bolt.mock.requests().is_empty());
    assert_eq!(app.wait_for_status(id, WithdrawalStatus::Processing, WAIT).await.status, WithdrawalStatus::Processing);

    // A's lookups answer again: with no payouts worker running, A's "no such transfer" leads to a
    // controlled retry that waits for the next payouts worker, while an operator forces A open.
    first.cancel();
    two.acme.mock.set_faults(FaultConfig { rules: vec![failing_create] });
    two.breaker("acme").reset();
    app.eventually("acme's lookup found nothing", WAIT, || async {
        let results = withdrawals::storage::reconciliations::for_withdrawal(&app.db, key).await.unwrap();
        results.iter().any(|r| r.provider == "acme" && r.follow_up_job_id.is_some()).then_some(())
    })
    .await;
    two.breaker("acme").force_open();
    app.start_worker(two.gateways.clone(), payouts("w-pay-2"));
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;

    assert_eq!(paid_keys(&two.bolt.mock), [id.to_string()], "paid once, at bolt");
    assert!(paid_keys(&two.acme.mock).is_empty(), "acme executed nothing");
    assert_eq!(attempted_at(&app, id).await, ["acme", "bolt"]);
    let moves = moves(&app, id).await;
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert_eq!(moves[0].0, "failover from acme to bolt: move: lookup found no transfer");
    assert_eq!(moves[0].1["failover"]["breaker"], "forced_open");
    assert_eq!(moves[0].1["failover"]["not_found_after_last_attempt"], true);
    app.assert_ledger_invariant().await;
}

/// A's breaker forced open (through the ops API, the cluster's kill switch): B's withdrawals are
/// paid as ever, a withdrawal only A pays (EUR) waits, and each provider's breaker is its own row
/// in the breaker view. Released, A pays the waiting one.
async fn one_providers_open_breaker_leaves_the_others_withdrawals_alone(app: TestApp) {
    let two = two(None, 1).await;
    let ops = crate::harness::serve_extra_with(&app, crate::harness::test_config(), two.gateways.clone()).await;
    let admin = app.operator("admin").await;
    let force = |action: &str| {
        app.client
            .post(format!("{ops}/ops/v1/breakers/acme/{action}"))
            .bearer_auth(&admin)
            .json(&json!({"reason": "acme degraded, INC-3101"}))
            .send()
    };
    assert_eq!(force("force-open").await.unwrap().status(), 200);
    let view: Value =
        read(app.client.get(format!("{ops}/ops/v1/breakers")).bearer_auth(&admin).send().await.unwrap()).await;
    let rows: Vec<(&str, &str)> = view["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["name"].as_str().unwrap(), b["state"].as_str().unwrap()))
        .collect();
    assert_eq!(rows, [("acme", "forced_open"), ("bolt", "closed")], "{view}");

    app.start_worker(two.gateways.clone(), worker_config("w-isolation"));
    let alice = app.customer("100.00").await;
    let eur = withdrawals::domain::Currency::parse("EUR").unwrap();
    let funded = withdrawals::domain::Amount::new(rust_decimal::Decimal::new(10_000, 2), eur).unwrap();
    let bob = withdrawals::provisioning::create_account(&app.db, "euro customer", Some(funded)).await.unwrap();
    let mut body = crate::harness::withdrawal_body("7.00");
    body["currency"] = "EUR".into();
    let euro = app
        .client
        .post(app.url("/v1/withdrawals"))
        .bearer_auth(&bob.api_key)
        .header("Idempotency-Key", "k-eur")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(euro.status(), 201);
    let euro = WithdrawalId(read::<withdrawals::customer::types::WithdrawalView>(euro).await.id);
    let usd = app.create_withdrawal(&alice, "k-usd", "10.00").await;
    app.wait_for_status(usd, WithdrawalStatus::Completed, WAIT).await;
    assert_eq!(paid_keys(&two.bolt.mock), [usd.to_string()], "bolt pays USD while acme is forced open");
    // Only acme pays EUR: that one waits, and nothing was sent anywhere.
    app.eventually("the EUR submit deferred by acme's breaker", WAIT, || async {
        let jobs = withdrawals::storage::jobs::jobs_for_withdrawal(&app.db, app.key(euro).await).await.unwrap();
        jobs.iter().any(|j| j.last_error.as_deref() == Some("circuit breaker open")).then_some(())
    })
    .await;
    assert!(attempted_at(&app, euro).await.is_empty());
    assert!(two.acme.mock.requests().is_empty());

    assert_eq!(force("release").await.unwrap().status(), 200);
    app.wait_for_status(euro, WithdrawalStatus::Completed, WAIT).await;
    assert_eq!(paid_keys(&two.acme.mock), [euro.to_string()]);
    assert_eq!(attempted_at(&app, usd).await, ["bolt"], "USD routed past acme's open breaker, never tried there");
    assert_eq!(moves(&app, usd).await.len(), 1, "routing past an open first choice is a recorded move");
    // The log reads in order: created, claimed, moved, completed.
    let log = store::transitions(&app.db, app.key(usd).await).await.unwrap();
    let steps: Vec<(Option<WithdrawalStatus>, WithdrawalStatus)> =
        log.iter().map(|t| (t.from_status, t.to_status)).collect();
    use WithdrawalStatus::{Completed, Pending, Processing};
    assert_eq!(
        steps,
        [(None, Pending), (Some(Pending), Processing), (Some(Processing), Processing), (Some(Processing), Completed)]
    );
    app.assert_ledger_invariant().await;
}

/// A provider's own retry keys decide its retries (SPEC §16): acme allows one attempt, so a 503
/// there (its breaker not open: nothing moves) is exhausted at once — a `retries_exhausted` dead
/// letter naming acme — where the process's policy would have retried.
async fn each_provider_retries_by_its_own_policy_and_its_dead_letters_name_it(app: TestApp) {
    let never_opens = json!({"failure_rate": 1.0, "window_s": 60, "min_calls": 100000, "open_s": 1});
    let (two, providers) = two_with(None, json!({"breaker": never_opens, "retry": {"max_attempts": 1}})).await;
    let busy = FaultRule::new(RouteMatch::Create, FaultEffect::Status { code: 503, retry_after_secs: None });
    two.acme.mock.set_faults(FaultConfig { rules: vec![busy] });
    let mut config = worker_config("w-policy");
    assert_eq!(config.submit_policy.max_attempts, 8, "the process would retry");
    config.learn_provider_policies(&providers).unwrap();
    assert_eq!(config.submit_policy_for("acme").max_attempts, 1);
    assert_eq!(config.submit_policy_for("bolt").max_attempts, 8, "bolt keeps the process's policy");
    app.start_worker(two.gateways.clone(), config);
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k-policy", "10.00").await;
    app.wait_for_status(id, WithdrawalStatus::RequiresReview, WAIT).await;
    assert_eq!(
        attempted_at(&app, id).await,
        ["acme"],
        "one attempt, at acme; a refusal with acme closed moves nothing"
    );
    assert!(two.bolt.mock.requests().is_empty());
    let letters: Value = read(
        app.client.get(app.url("/ops/v1/dead-letters")).bearer_auth(app.operator("viewer").await).send().await.unwrap(),
    )
    .await;
    let letter = &letters["data"][0];
    assert_eq!(letter["category"], "retries_exhausted", "{letters}");
    assert_eq!(letter["provider"], "acme", "{letters}");
    app.assert_ledger_invariant().await;
}

/// bolt's answer to W is unknown (a timeout after commit) when bolt is taken out of the
/// configuration: the one provider left, acme, is never asked about W nor sent it — W waits for
/// its provider (`no configured provider`), whatever acme would say.
async fn a_provider_taken_out_of_the_configuration_is_not_replaced_by_the_one_left(app: TestApp) {
    let two = two(None, 3600).await;
    two.breaker("acme").force_open();
    let hold = FaultRule::new(RouteMatch::Create, FaultEffect::TimeoutAfterCommit { ms: 1_500 });
    two.bolt.mock.set_faults(FaultConfig { rules: vec![hold] });
    let mut payouts = worker_config("w-before");
    payouts.queues = vec![Queue::Payouts.as_str()];
    let before = app.start_worker(two.gateways.clone(), payouts);
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k-removed", "10.00").await;
    let key = app.key(id).await;
    app.eventually("bolt's attempt answered unknown", WAIT, || async {
        let attempts = attempts::for_withdrawal(&app.db, key).await.unwrap();
        attempts
            .iter()
            .any(|a| a.provider == "bolt" && a.outcome == Some(withdrawals::domain::AttemptResult::Unknown))
            .then_some(())
    })
    .await;
    before.cancel();
    // The process restarts with acme alone.
    two.breaker("acme").reset();
    let acme_alone = Gateways::from(two.gateways.get("acme").unwrap().clone());
    let mut config = worker_config("w-after");
    config.in_flight_grace = Duration::from_millis(200);
    app.start_worker(acme_alone, config);
    app.eventually("the reconciliation waiting for its provider", WAIT, || async {
        let jobs = withdrawals::storage::jobs::jobs_for_withdrawal(&app.db, key).await.unwrap();
        jobs.iter().any(|j| j.last_error.as_deref() == Some("no configured provider")).then_some(())
    })
    .await;
    let asked_acme = two.acme.mock.requests().iter().any(|r| format!("{r:?}").contains(&id.to_string()));
    assert!(!asked_acme, "acme was never asked about nor sent the withdrawal");
    assert_eq!(attempted_at(&app, id).await, ["bolt"]);
    assert_eq!(app.wait_for_status(id, WithdrawalStatus::Processing, WAIT).await.status, WithdrawalStatus::Processing);
    app.assert_ledger_invariant().await;
}
