//! The job queue's group commit (SPEC §5): effect-free completions are committed many per
//! transaction, and every one of them is still fenced by its own lease token; and the storage
//! batch the creation statement is built on.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use withdrawals::jobs::finisher::Finisher;
use withdrawals::jobs::worker::{JobContext, Worker};
use withdrawals::jobs::JobType;
use withdrawals::provider::BoxFuture;
use withdrawals::storage::batch::Sql;
use withdrawals::storage::jobs::{self as job_store, ClaimedJob, Finish, NewJob};
use withdrawals::storage::DbTime;

use crate::both_backends;
use crate::harness::{worker_config, TestApp};

both_backends!(
    a_batch_of_completions_commits_each_run_only_under_its_own_lease,
    a_runs_own_writes_commit_with_its_finish_only_under_its_own_lease_and_roll_back_with_it,
    a_worker_drives_effect_free_jobs_to_success_through_the_group_commit,
    writes_sent_together_report_their_own_counts_and_roll_back_together,
    pruning_removes_only_jobs_that_succeeded_before_the_retention,
    a_batchs_fenced_lease_checks_and_finishes_answer_and_write_row_by_row,
);

/// A queue no built-in worker claims from, so only the test's own claims and workers touch it.
const QUEUE: &str = "test_group_commit";
const KIND: &str = "test_effect_free";

/// A job of this file's queue: about no withdrawal, so the system account's.
fn system(id: withdrawals::domain::JobId) -> withdrawals::domain::JobKey {
    withdrawals::domain::JobKey { account: withdrawals::domain::AccountId::SYSTEM, id }
}

async fn enqueue(app: &TestApp, n: usize) -> HashSet<withdrawals::domain::JobId> {
    let mut tx = app.db.begin().await.unwrap();
    let mut ids = HashSet::new();
    for i in 0..n {
        let job = NewJob {
            kind: JobType::Extension { queue: QUEUE, kind: KIND },
            payload: format!("{{\"n\":{i}}}").into_bytes(),
            payload_version: 1,
            run_at: DbTime::now(),
            correlation_id: format!("group-commit-{i}"),
            account_id: withdrawals::domain::AccountId::SYSTEM,
            withdrawal_id: None,
        };
        ids.insert(job_store::enqueue(&mut tx, &job).await.unwrap().id);
    }
    tx.commit().await.unwrap();
    ids
}

/// Three runs of worker A, of which worker B took the third over: A's first two leases are live,
/// its third stale. Returns (A's live runs, A's stale run, B's run of the third job).
async fn two_live_and_one_stale(app: &TestApp) -> (Vec<ClaimedJob>, ClaimedJob, ClaimedJob) {
    enqueue(app, 3).await;
    let mut runs = job_store::claim(&app.db, QUEUE, "worker-a", 3, TimeDelta::zero()).await.unwrap();
    assert_eq!(runs.len(), 3);
    runs.sort_by_key(|r| r.id);
    // Worker A's leases were zero-length: B re-claims all three, then A's first two are handed
    // back to A (as if B lost them), so A holds two leases and B holds the third.
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(job_store::expire_leases(&app.db, 5).await.unwrap().is_empty());
    let mut retaken = job_store::claim(&app.db, QUEUE, "worker-b", 3, TimeDelta::seconds(30)).await.unwrap();
    retaken.sort_by_key(|r| r.id);
    assert_eq!(retaken.len(), 3);
    let mut tx = app.db.begin().await.unwrap();
    for r in &retaken[..2] {
        assert!(job_store::finish(&mut tx, r.key(), r.lease_token, &Finish::Release).await.unwrap());
    }
    tx.commit().await.unwrap();
    let again = job_store::claim(&app.db, QUEUE, "worker-a", 3, TimeDelta::seconds(30)).await.unwrap();
    assert_eq!(again.len(), 2);
    assert_eq!(runs[2].id, retaken[2].id);
    (again, runs.swap_remove(2), retaken.swap_remove(2))
}

async fn a_batch_of_completions_commits_each_run_only_under_its_own_lease(app: TestApp) {
    let (again, stale, theirs) = two_live_and_one_stale(&app).await;
    let stale = &stale;

    // A finishes its two live runs and its stale third run together; B's lease fences the third.
    let finisher = Finisher::start(app.db.clone(), 16);
    let (first, second, third) = tokio::join!(
        finisher.succeed(again[0].key(), again[0].lease_token),
        finisher.succeed(again[1].key(), again[1].lease_token),
        finisher.succeed(stale.key(), stale.lease_token),
    );
    assert!(first.unwrap() && second.unwrap(), "the live leases finished");
    assert!(!third.unwrap(), "the stale lease was refused");

    for run in &again {
        assert_eq!(job_store::job_status(&app.db, run.key()).await.unwrap().map(|s| s.as_str()), Some("succeeded"));
    }
    let kept = job_store::job_row(&app.db, stale.key()).await.unwrap().unwrap();
    assert_eq!((kept.status.as_str(), kept.receives), ("running", 2), "still worker B's run");
    let mut tx = app.db.begin().await.unwrap();
    let ours = job_store::finish(&mut tx, theirs.key(), theirs.lease_token, &Finish::Succeeded).await.unwrap();
    tx.commit().await.unwrap();
    assert!(ours, "B's lease still finishes its job");
}

/// A run's own writes (as a notification delivered to a healthy endpoint hands over) go in its
/// batch's transaction only if its lease held; a write that fails rolls back the transaction, and
/// the run is not marked succeeded.
async fn a_runs_own_writes_commit_with_its_finish_only_under_its_own_lease_and_roll_back_with_it(app: TestApp) {
    let (again, stale, theirs) = two_live_and_one_stale(&app).await;
    let mark = |run: &ClaimedJob| {
        vec![Sql::new("UPDATE jobs SET correlation_id = ")
            .bind("written with its finish")
            .sql(" WHERE account_id = ")
            .bind(run.key().account.0)
            .sql(" AND id = ")
            .bind(run.id.0)]
    };
    let correlation = |run: &ClaimedJob| {
        let key = run.key();
        let db = app.db.clone();
        async move { job_store::job_row(&db, key).await.unwrap().unwrap().correlation_id }
    };

    // A write that cannot apply: the transaction rolls back — the run's other writes and its
    // finish with it — and the run is answered the error.
    let finisher = Finisher::start(app.db.clone(), 16);
    let mut broken = mark(&again[0]);
    broken.push(Sql::new("UPDATE no_such_table SET x = 1"));
    assert!(finisher.succeed_with(again[0].key(), again[0].lease_token, broken).await.is_err());
    assert_eq!(job_store::job_status(&app.db, again[0].key()).await.unwrap().map(|s| s.as_str()), Some("running"));
    assert_ne!(correlation(&again[0]).await, "written with its finish");

    // The live runs' writes commit with their finish; the stale run's are dropped with it.
    let (first, second, third) = tokio::join!(
        finisher.succeed_with(again[0].key(), again[0].lease_token, mark(&again[0])),
        finisher.succeed_with(again[1].key(), again[1].lease_token, mark(&again[1])),
        finisher.succeed_with(stale.key(), stale.lease_token, mark(&stale)),
    );
    assert!(first.unwrap() && second.unwrap() && !third.unwrap());
    for run in &again {
        assert_eq!(job_store::job_status(&app.db, run.key()).await.unwrap().map(|s| s.as_str()), Some("succeeded"));
        assert_eq!(correlation(run).await, "written with its finish");
    }
    assert_ne!(correlation(&theirs).await, "written with its finish", "the stale run wrote nothing");
}

fn effect_free<'a>(ctx: &'a JobContext) -> BoxFuture<'a, anyhow::Result<()>> {
    Box::pin(async move { ctx.finish_in_own_tx(&Finish::Succeeded).await })
}

async fn a_worker_drives_effect_free_jobs_to_success_through_the_group_commit(app: TestApp) {
    let ids = enqueue(&app, 120).await;
    let mut config = worker_config("group-commit-worker");
    config.queues = vec![QUEUE];
    (config.concurrency, config.batch_size) = (32, 16);
    let worker = Worker::new(app.db.clone(), app.gateway.clone(), config).with_handler(KIND, 1, Arc::new(effect_free));
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone()));

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut done = 0;
    while tokio::time::Instant::now() < deadline {
        done = 0;
        for id in &ids {
            done += usize::from(
                job_store::job_status(&app.db, system(*id)).await.unwrap().map(|s| s.as_str()) == Some("succeeded"),
            );
        }
        if done == ids.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    running.await.unwrap().unwrap();
    assert_eq!(done, ids.len(), "every job succeeded");
    for id in &ids {
        let row = job_store::job_row(&app.db, system(*id)).await.unwrap().unwrap();
        assert_eq!((row.receives, row.attempts), (1, 0), "each job ran exactly once: {row:?}");
    }
}

/// The mechanism under the creation statement: writes sent together report their own row
/// counts (the caller's check before committing), and roll back together.
async fn writes_sent_together_report_their_own_counts_and_roll_back_together(app: TestApp) {
    use withdrawals::domain::IdempotencyKey;
    use withdrawals::storage::batch::Writes;
    use withdrawals::storage::idempotency::{self, Begin, IdempotencySettings};
    let alice = app.customer("100.00").await;
    let keys: Vec<IdempotencyKey> =
        ["k1", "k2", "never-claimed"].iter().map(|k| IdempotencyKey::parse(k).unwrap()).collect();
    let settings = IdempotencySettings::default();
    let begin = |key: &IdempotencyKey| {
        let (db, key) = (app.db.clone(), key.clone());
        async move { idempotency::begin(&db, alice.account_id, &key, b"fingerprint", settings).await.unwrap() }
    };
    let (Begin::Proceed(first), Begin::Proceed(second)) = (begin(&keys[0]).await, begin(&keys[1]).await) else {
        panic!("new keys are claimed");
    };
    let writes = || {
        let mut writes = Writes::new();
        let a = idempotency::complete_in(&mut writes, &keys[0], first, 201, b"{\"n\":1}", None);
        // The same claim on a key nobody claimed matches no row.
        let none = idempotency::complete_in(&mut writes, &keys[2], first, 201, b"{}", None);
        let b = idempotency::complete_in(&mut writes, &keys[1], second, 201, b"{\"n\":2}", None);
        (writes, [a, none, b])
    };
    let counts = |ran: &withdrawals::storage::batch::Ran, handles: [withdrawals::storage::batch::Written; 3]| {
        handles.map(|h| ran.rows(h))
    };

    let mut tx = app.db.begin().await.unwrap();
    let (batch, handles) = writes();
    assert_eq!(counts(&batch.run(&mut tx).await.unwrap(), handles), [1, 0, 1]);
    drop(tx);
    assert_eq!(begin(&keys[0]).await, Begin::InProgress, "rolled back together");
    assert_eq!(begin(&keys[1]).await, Begin::InProgress, "rolled back together");

    let mut tx = app.db.begin().await.unwrap();
    let (batch, handles) = writes();
    assert_eq!(counts(&batch.run(&mut tx).await.unwrap(), handles), [1, 0, 1]);
    tx.commit().await.unwrap();
    assert_eq!(begin(&keys[0]).await, Begin::Replay { status: 201, body: b"{\"n\":1}".to_vec() });
    assert_eq!(begin(&keys[1]).await, Begin::Replay { status: 201, body: b"{\"n\":2}".to_vec() });
}

async fn pruning_removes_only_jobs_that_succeeded_before_the_retention(app: TestApp) {
    let ids = enqueue(&app, 5).await;
    let mut runs = job_store::claim(&app.db, QUEUE, "worker-a", 4, TimeDelta::seconds(30)).await.unwrap();
    assert_eq!(runs.len(), 4, "one job stays scheduled");
    runs.sort_by_key(|r| r.id);
    let finish = |run: &job_store::ClaimedJob, how: Finish<'static>| {
        let (db, id, token) = (app.db.clone(), run.key(), run.lease_token);
        async move {
            let mut tx = db.begin().await.unwrap();
            assert!(job_store::finish(&mut tx, id, token, &how).await.unwrap());
            tx.commit().await.unwrap();
        }
    };
    // Old: one succeeded, one dead. Then the retention's edge; then one succeeds after it.
    finish(&runs[0], Finish::Succeeded).await;
    finish(&runs[1], Finish::Dead { error: "gave up" }).await;
    let finished = DbTime::now().0.timestamp_millis();
    while DbTime::now().0.timestamp_millis() <= finished {
        tokio::task::yield_now().await; // the edge is a later millisecond than the old finishes
    }
    let before = DbTime::now();
    finish(&runs[2], Finish::Succeeded).await;
    // runs[3] is still running.

    assert_eq!(job_store::prune_succeeded(&app.db, before, 1).await.unwrap(), 1);
    let mut kept = Vec::new();
    for id in &ids {
        if let Some(row) = job_store::job_row(&app.db, system(*id)).await.unwrap() {
            kept.push((row.id, row.status.as_str().to_owned()));
        }
    }
    kept.sort();
    let mut expected: Vec<_> = ids.iter().filter(|id| **id != runs[0].id).copied().collect();
    expected.sort();
    assert_eq!(kept.iter().map(|(id, _)| *id).collect::<Vec<_>>(), expected, "only the old success is gone");
    let statuses: HashSet<_> = kept.into_iter().map(|(_, status)| status).collect();
    assert_eq!(statuses, HashSet::from(["dead", "succeeded", "running", "scheduled"].map(str::to_owned)));
    // Pruning again finds nothing more.
    assert_eq!(job_store::prune_succeeded(&app.db, before, 1).await.unwrap(), 0);
}

/// A payout batch sends its lease checks and its finishes as one statement (on PostgreSQL, one
/// set-based `UPDATE` per shape); each run is still fenced by its own token and answers for
/// itself, and a run whose lease another worker holds is left as it was.
async fn a_batchs_fenced_lease_checks_and_finishes_answer_and_write_row_by_row(app: TestApp) {
    use withdrawals::domain::{JobStatus, LeaseToken};
    use withdrawals::storage::batch::Writes;
    enqueue(&app, 3).await;
    let mut runs = job_store::claim(&app.db, QUEUE, "worker-a", 3, TimeDelta::seconds(30)).await.unwrap();
    runs.sort_by_key(|r| r.id);
    // The third run's lease is someone else's: a token that is not the job's.
    let tokens = [runs[0].lease_token, runs[1].lease_token, LeaseToken::random()];

    let mut tx = app.db.begin().await.unwrap();
    let mut writes = Writes::new();
    let leases: Vec<_> = runs
        .iter()
        .zip(tokens)
        .map(|(r, token)| job_store::extend_lease_in(&mut writes, r.key(), token, TimeDelta::seconds(60), true))
        .collect();
    let ran = writes.run(&mut tx).await.unwrap();
    assert_eq!(leases.iter().map(|l| ran.applied(*l)).collect::<Vec<_>>(), [true, true, false]);

    let later = DbTime::now().plus(TimeDelta::seconds(90));
    let hows = [
        Finish::Reschedule { run_at: later, consumed_attempt: true, error: "retry me" },
        Finish::HandlerError { run_at: later, error: "handler failed" },
        Finish::Succeeded,
    ];
    let mut writes = Writes::new();
    let finishes: Vec<_> = runs
        .iter()
        .zip(tokens)
        .zip(&hows)
        .map(|((r, token), how)| job_store::finish_in(&mut writes, r.key(), token, how))
        .collect();
    let ran = writes.run(&mut tx).await.unwrap();
    assert_eq!(finishes.iter().map(|f| ran.applied(*f)).collect::<Vec<_>>(), [true, true, false]);
    tx.commit().await.unwrap();

    let row = |i: usize| {
        let (db, id) = (app.db.clone(), runs[i].id);
        async move { job_store::job_row(&db, system(id)).await.unwrap().unwrap() }
    };
    let (first, second, third) = (row(0).await, row(1).await, row(2).await);
    assert_eq!(
        (first.status, first.attempts, first.last_error.as_deref()),
        (JobStatus::Scheduled, 1, Some("retry me"))
    );
    assert_eq!(first.run_at.0.timestamp_millis(), later.0.timestamp_millis());
    assert_eq!(
        (second.status, second.attempts, second.last_error.as_deref()),
        (JobStatus::Scheduled, 0, Some("handler failed")),
        "a handler error consumes no attempt"
    );
    assert_eq!((third.status, third.attempts, third.last_error), (JobStatus::Running, 0, None), "fenced: untouched");
    // The fenced run is still its holder's to finish.
    let mut tx = app.db.begin().await.unwrap();
    assert!(job_store::finish(&mut tx, runs[2].key(), runs[2].lease_token, &Finish::Succeeded).await.unwrap());
    tx.commit().await.unwrap();
}
