//! The chaos run's checks catch what they claim to (the run itself is `withdrawals chaos`,
//! run small by `scripts/test`): a completed withdrawal the provider never paid, a key executed
//! twice, a second transfer for one withdrawal, a lost or unannounced withdrawal, a secret in a log.

use std::collections::{HashMap, HashSet};

use provider_mocks::{TransferRecord, TransferStatus};
use withdrawals::chaos::checks::{check, Secrets};
use withdrawals::chaos::load::Accepted;
use withdrawals::domain::WithdrawalStatus;

use crate::both_backends;
use crate::harness::TestApp;

both_backends!(the_chaos_checks_find_doubled_missing_and_leaked_money);

async fn the_chaos_checks_find_doubled_missing_and_leaked_money(app: TestApp) {
    app.start_default_worker();
    let alice = app.customer("100.00").await;
    let id = app.create_withdrawal(&alice, "k1", "25.00").await;
    app.wait_for_status(id, WithdrawalStatus::Completed, std::time::Duration::from_secs(20)).await;
    let paid: Vec<TransferRecord> = app.provider.mock.transfers();
    assert_eq!(paid.len(), 1);
    let accepted: HashMap<String, Accepted> = [("k1".to_owned(), Accepted { id: id.to_string() })].into();
    let dir = tempfile::tempdir().unwrap();
    let clean_log = dir.path().join("clean.log");
    std::fs::write(&clean_log, "paid to ****5678\n").unwrap();
    let secrets =
        Secrets { account_numbers: HashSet::from(["12345678".to_owned()]), strings: vec![alice.api_key.clone()] };

    let clean = check(&app.db, &accepted, &paid, std::slice::from_ref(&clean_log), &secrets).await.unwrap();
    assert_eq!(clean.violations, Vec::<String>::new());
    assert_eq!(clean.final_states.get("completed"), Some(&1));
    assert_eq!(clean.paid_transfers, 1);

    let found = |transfers: Vec<TransferRecord>, accepted: &HashMap<String, Accepted>, log: &std::path::Path| {
        let (db, transfers, accepted, log) = (app.db.clone(), transfers, accepted.clone(), log.to_path_buf());
        let secrets = Secrets { account_numbers: secrets.account_numbers.clone(), strings: secrets.strings.clone() };
        async move { check(&db, &accepted, &transfers, &[log], &secrets).await.unwrap().violations.join("\n") }
    };
    let unpaid = found(vec![], &accepted, &clean_log).await;
    assert!(unpaid.contains("completed with 0 paid transfers"), "{unpaid}");

    let mut twice = paid.clone();
    twice[0].executions = 2;
    let doubled = found(twice, &accepted, &clean_log).await;
    assert!(doubled.contains("paid twice"), "{doubled}");

    let mut second = paid[0].clone();
    second.id = "tr_second".into();
    second.idempotency_key = "another-key".into();
    let two = found(vec![paid[0].clone(), second], &accepted, &clean_log).await;
    assert!(two.contains("has 2 transfers at the provider"), "{two}");

    let mut failed = paid.clone();
    failed[0].status = TransferStatus::Failed;
    let contradicted = found(failed, &accepted, &clean_log).await;
    assert!(contradicted.contains("completed with 0 paid transfers"), "{contradicted}");

    let lost =
        found(paid.clone(), &[("k2".to_owned(), Accepted { id: uuid::Uuid::new_v4().to_string() })].into(), &clean_log)
            .await;
    assert!(lost.contains("lost: withdrawal"), "{lost}");
    assert!(lost.contains("no customer was told about it"), "{lost}");

    let leaky_log = dir.path().join("leaky.log");
    std::fs::write(&leaky_log, format!("account 12345678 key {}\n", alice.api_key)).unwrap();
    let leaked = found(paid.clone(), &accepted, &leaky_log).await;
    assert!(leaked.contains("full account number ending 5678"), "{leaked}");
    app.assert_ledger_invariant().await;
}
