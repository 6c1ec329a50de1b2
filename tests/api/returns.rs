//! Payout returns (SPEC §14.3): a bank return after `paid` re-credits the customer exactly once,
//! keeps the withdrawal `completed`, shows on the customer API, and never credits a withdrawal we
//! do not hold as completed.

use std::time::Duration;

use serde_json::Value;
use withdrawals::customer::types::WithdrawalView;
use withdrawals::domain::{Amount, Currency, WithdrawalStatus};
use withdrawals::storage::returns::{self, Applied};
use withdrawals::storage::withdrawals as store;
use withdrawals::storage::DbTime;

use crate::both_backends;
use crate::harness::{read, TestApp};

both_backends!(
    a_return_re_credits_the_customer_once_and_the_ledger_stays_exact,
    a_return_for_a_withdrawal_we_never_completed_credits_nothing,
);

const WAIT: Duration = Duration::from_secs(25);

/// Applies a return the provider reports for the withdrawal's own amount.
async fn apply(app: &TestApp, id: withdrawals::domain::WithdrawalId, code: &str) -> Applied {
    let key = app.key(id).await;
    let mut tx = app.db.begin().await.unwrap();
    let amount = store::get_in_tx(&mut tx, key).await.unwrap().unwrap().amount;
    drop(tx);
    apply_reported(app, id, amount, code).await
}

async fn apply_reported(app: &TestApp, id: withdrawals::domain::WithdrawalId, reported: Amount, code: &str) -> Applied {
    let key = app.key(id).await;
    let mut tx = app.db.begin().await.unwrap();
    let withdrawal = store::get_in_tx(&mut tx, key).await.unwrap().unwrap();
    use withdrawals::provider::{Transfer, TransferStatus, Verdict};
    let transfer = Transfer {
        id: "tr_returned".into(),
        reference: Some(withdrawal.id.to_string()),
        amount: reported.value(),
        currency: reported.currency().code().into(),
        status: TransferStatus::Returned,
        failure_code: None,
        return_code: Some(code.into()),
        created_at: None,
        updated_at: None,
    };
    let evidence = Verdict::Returned(transfer).evidence(&withdrawal, chrono::Utc::now()).into();
    let applied = returns::apply(&mut tx, &withdrawal, reported, code, DbTime::now(), &evidence).await.unwrap();
    tx.commit().await.unwrap();
    applied
}

async fn a_return_re_credits_the_customer_once_and_the_ledger_stays_exact(app: TestApp) {
    let stop = app.start_default_worker();
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "25.50").await;
    app.wait_for_status(id, WithdrawalStatus::Completed, WAIT).await;
    stop.cancel();
    assert_eq!(app.usd_balance(&alice).await, ("74.50".into(), "0.00".into(), "25.50".into()));

    // A return the provider reports for another amount, or in another currency, credits nothing.
    let usd = Currency::parse("USD").unwrap();
    let eur = Currency::parse("EUR").unwrap();
    for reported in [Amount::from_minor(2549, usd).unwrap(), Amount::from_minor(2550, eur).unwrap()] {
        assert_eq!(apply_reported(&app, id, reported, "R01").await, Applied::AmountMismatch);
        assert_eq!(app.usd_balance(&alice).await, ("74.50".into(), "0.00".into(), "25.50".into()), "{reported:?}");
        assert!(returns::for_withdrawal(&app.db, app.key(id).await).await.unwrap().is_none(), "no return recorded");
    }

    assert_eq!(apply(&app, id, "R01").await, Applied::Credited);
    assert_eq!(app.usd_balance(&alice).await, ("100.00".into(), "0.00".into(), "0.00".into()), "re-credited");
    app.assert_ledger_invariant().await;

    // The same return again (a re-imported report, a duplicated line): nothing changes.
    assert_eq!(apply(&app, id, "R01").await, Applied::AlreadyApplied);
    assert_eq!(app.usd_balance(&alice).await, ("100.00".into(), "0.00".into(), "0.00".into()), "credited once");
    let entries = withdrawals::storage::accounts::entries_for_withdrawal(&app.db, app.key(id).await).await.unwrap();
    let kinds: Vec<&str> = entries.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "return").count(), 1, "{kinds:?}");
    app.assert_ledger_invariant().await;

    // The withdrawal stays completed (the provider did pay) and shows the return.
    let body: WithdrawalView = read(app.get(&alice, &format!("/v1/withdrawals/{id}")).send().await.unwrap()).await;
    assert_eq!(body.status, WithdrawalStatus::Completed);
    let returned = body.returned.as_ref().expect("the return shown");
    assert_eq!(returned.return_code, "R01");
    let stored = returns::for_withdrawal(&app.db, app.key(id).await).await.unwrap().unwrap();
    assert_eq!((stored.amount_minor, stored.currency.as_str()), (2550, "USD"));
    assert_eq!(stored.evidence.0["transfer"]["return_code"], "R01", "the evidence is stored with the return");

    // The customer's events (SPEC §17): the return is newer than the completion by version, and
    // shows the withdrawal exactly as the API does now.
    let events = withdrawals::storage::notifications::events_of(&app.db, alice.account_id, id).await.unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(kinds.last(), Some(&"withdrawal.returned"), "{kinds:?}");
    let (completed, returned) = (&events[events.len() - 2], &events[events.len() - 1]);
    assert_eq!(completed.event_type, "withdrawal.completed");
    assert!(returned.withdrawal_version > completed.withdrawal_version, "{completed:?} {returned:?}");
    assert_eq!(returned.withdrawal_version, body.version, "the event's version is the row's");
    let now: Value = read(app.get(&alice, &format!("/v1/withdrawals/{id}")).send().await.unwrap()).await;
    assert_eq!(returned.to_json()["data"], now, "the returned event shows the withdrawal as GET shows it");
}

async fn a_return_for_a_withdrawal_we_never_completed_credits_nothing(app: TestApp) {
    let alice = app.customer("100.00").await;
    // No worker: the withdrawal stays pending with 40.00 held.
    let id = app.create_withdrawal(&alice, "k1", "40.00").await;
    assert_eq!(apply(&app, id, "R02").await, Applied::NotCompleted);
    assert_eq!(app.usd_balance(&alice).await, ("60.00".into(), "40.00".into(), "0.00".into()), "nothing moved");
    assert!(returns::for_withdrawal(&app.db, app.key(id).await).await.unwrap().is_none(), "no return recorded");
    let body: Value = app.get(&alice, &format!("/v1/withdrawals/{id}")).send().await.unwrap().json().await.unwrap();
    assert!(body.get("return").is_none(), "{body}");
    app.assert_ledger_invariant().await;
}
