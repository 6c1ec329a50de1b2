//! The set-based reads behind replay selection (issue 18): one query answers, for a whole
//! selection, what used to take four per dead letter — does it exist, is it closed, was it
//! already released by a run, is it waiting in one now — and the guarded run-status write takes
//! its allowed states from the domain's table. On both backends, past the per-query id chunk.

use serde_json::json;
use sqlx::types::Json;
use withdrawals::domain::{
    Category, DeadLetterEventId, DeadLetterId, OperatorId, ReplayAction, ReplayItemStatus, ReplayRunId, ReplayStatus,
    Role, SideEffect,
};
use withdrawals::jobs::{JobKind, Queue};
use withdrawals::storage::dead_letters::{self, DeadLetter, DeadLetterFilter, Event};
use withdrawals::storage::jobs::{self as job_store, NewJob};
use withdrawals::storage::replays::{self, ReplayRun};
use withdrawals::storage::{credentials, DbTime};

use crate::both_backends;
use crate::harness::TestApp;

both_backends!(
    a_selection_is_read_in_one_pass_with_closed_replayed_and_active_runs,
    a_run_moves_only_from_the_states_its_action_allows,
    a_pages_run_progress_in_one_query_is_each_runs_own_progress
);

async fn letter(app: &TestApp, n: usize, error_code: &str) -> DeadLetterId {
    let mut tx = app.db.begin().await.unwrap();
    let job = job_store::enqueue(
        &mut tx,
        &NewJob {
            kind: JobKind::SubmitPayout.into(),
            payload: b"{}".to_vec(),
            payload_version: 2,
            run_at: DbTime::now(),
            correlation_id: format!("selection-{n}"),
            account_id: withdrawals::domain::AccountId::SYSTEM,
            withdrawal_id: None,
        },
    )
    .await
    .unwrap();
    let id = DeadLetterId::new();
    let letter = DeadLetter {
        id,
        account_id: job.account,
        job_id: job.id,
        queue: Queue::Payouts.as_str().into(),
        job_type: JobKind::SubmitPayout.as_str().into(),
        payload_version: 2,
        payload: Some(Json(json!({}))),
        raw_payload: None,
        attempts: 1,
        first_attempt_at: None,
        failed_at: DbTime::now(),
        error_code: error_code.into(),
        error_class: "permanent".into(),
        error_message: "refused".into(),
        stack: None,
        worker_host: "test".into(),
        worker_version: "0".into(),
        correlation_id: format!("selection-{n}"),
        idempotency_key: None,
        withdrawal_id: None,
        side_effect_state: SideEffect::NotStarted,
        category: Category::DependencyRejected,
        owner: Category::DependencyRejected.owner().into(),
        runbook: Category::DependencyRejected.runbook().into(),
        provider: None,
    };
    dead_letters::insert(&mut tx, &letter).await.unwrap();
    tx.commit().await.unwrap();
    id
}

async fn operator(app: &TestApp) -> OperatorId {
    let id = OperatorId::new();
    let mut tx = app.db.begin().await.unwrap();
    let issuer = credentials::Issuer { id, name: format!("op-{id}") };
    credentials::insert_operator(&mut tx, id, &format!("op-{id}"), Role::Admin, b"hash", &issuer).await.unwrap();
    tx.commit().await.unwrap();
    id
}

async fn run(app: &TestApp, by: OperatorId, status: ReplayStatus, letters: &[DeadLetterId]) -> ReplayRunId {
    let now = DbTime::now();
    let run = ReplayRun {
        id: ReplayRunId::new(),
        started_by: by,
        reason: "test".into(),
        selection: Json(json!({})),
        expected_payload_version: 2,
        destination_queue: Queue::Payouts,
        status,
        total: letters.len() as i64,
        rate_per_second: 1,
        max_concurrency: 1,
        auto_pause_threshold: 1,
        dead_letter_baseline: 0,
        approved_by: None,
        paused_reason: None,
        created_at: now,
        updated_at: now,
    };
    let mut tx = app.db.begin().await.unwrap();
    replays::insert_run(&mut tx, &run).await.unwrap();
    for letter in letters {
        replays::insert_item(&mut tx, run.id, withdrawals::domain::AccountId::SYSTEM, *letter).await.unwrap();
    }
    tx.commit().await.unwrap();
    run.id
}

async fn a_selection_is_read_in_one_pass_with_closed_replayed_and_active_runs(app: TestApp) {
    // Arrange: an open letter, a closed one, one a run released, one waiting in a run.
    let open = letter(&app, 1, "selection_a").await;
    let closed = letter(&app, 2, "selection_a").await;
    let released = letter(&app, 3, "selection_a").await;
    let waiting = letter(&app, 4, "selection_b").await;
    let mut tx = app.db.begin().await.unwrap();
    let event = Event {
        id: DeadLetterEventId::new(),
        account_id: withdrawals::domain::AccountId::SYSTEM,
        dead_letter_id: closed,
        action: withdrawals::domain::LetterEvent::Closed,
        actor: "test".into(),
        reason: "handled".into(),
        details: None,
        at: DbTime::now(),
    };
    assert!(dead_letters::add_event(&mut tx, &event).await.unwrap());
    tx.commit().await.unwrap();
    let by = operator(&app).await;
    let done = run(&app, by, ReplayStatus::Running, &[released]).await;
    let item = replays::items(&app.db, done).await.unwrap().pop().unwrap();
    let mut tx = app.db.begin().await.unwrap();
    assert!(replays::finish_item(&mut tx, &item, ReplayItemStatus::Released, None, None).await.unwrap());
    tx.commit().await.unwrap();
    let active = run(&app, by, ReplayStatus::Paused, &[waiting]).await;

    // Act: the four named among many unknown ids (more than one chunk of the query).
    let mut ids: Vec<DeadLetterId> = (0..1_100).map(|_| DeadLetterId::new()).collect();
    ids.splice(300..300, [open, closed]);
    ids.splice(800..800, [released, waiting]);
    let mut found = dead_letters::get_many(&app.db, &ids).await.unwrap();
    found.sort_by_key(|s| s.letter.id);

    // Assert
    let facts: Vec<(DeadLetterId, bool, bool, Option<ReplayRunId>)> =
        found.iter().map(|s| (s.letter.id, s.closed, s.replayed, s.active_run)).collect();
    let mut expected = vec![
        (open, false, false, None),
        (closed, true, false, None),
        (released, false, true, None),
        (waiting, false, false, Some(active)),
    ];
    expected.sort_by_key(|f| f.0);
    assert_eq!(facts, expected);
    let typed = found.iter().find(|s| s.letter.id == open).unwrap();
    assert_eq!(
        (typed.letter.category, typed.letter.side_effect_state),
        (Category::DependencyRejected, SideEffect::NotStarted)
    );
    assert_eq!(
        replays::active_runs_for(
            &app.db,
            &ids.iter().map(|id| (withdrawals::domain::AccountId::SYSTEM, *id)).collect::<Vec<_>>()
        )
        .await
        .unwrap(),
        vec![(waiting, active)]
    );
    assert_eq!(
        replays::active_run_for(&app.db, withdrawals::domain::AccountId::SYSTEM, waiting).await.unwrap(),
        Some(active)
    );

    // The filter path: the same rows as the triage list, with the same facts.
    let filter = DeadLetterFilter {
        error_code: Some("selection_a".into()),
        open: Some(true),
        limit: 10,
        ..DeadLetterFilter::default()
    };
    let listed: Vec<DeadLetterId> =
        dead_letters::list(&app.db, &filter).await.unwrap().into_iter().map(|l| l.letter.id).collect();
    let selected = dead_letters::list_selection(&app.db, &filter).await.unwrap();
    assert_eq!(selected.iter().map(|s| s.letter.id).collect::<Vec<_>>(), listed);
    let replayed: Vec<(DeadLetterId, bool)> = selected.iter().map(|s| (s.letter.id, s.replayed)).collect();
    assert_eq!(replayed, vec![(released, true), (open, false)], "newest first; the closed one is left out");
    assert!(dead_letters::get_many(&app.db, &[]).await.unwrap().is_empty());
}

async fn a_run_moves_only_from_the_states_its_action_allows(app: TestApp) {
    let by = operator(&app).await;
    let approver = operator(&app).await;
    let letter = letter(&app, 9, "selection_c").await;
    let id = run(&app, by, ReplayStatus::AwaitingApproval, &[letter]).await;
    let status = |app: &TestApp| {
        let db = app.db.clone();
        async move { replays::get_run(&db, id).await.unwrap().unwrap().status }
    };
    let act = |action: ReplayAction, approved_by: Option<OperatorId>| {
        let db = app.db.clone();
        async move {
            let mut tx = db.begin().await.unwrap();
            let moved = replays::set_status(&mut tx, id, action, Some("because"), approved_by).await.unwrap();
            tx.commit().await.unwrap();
            moved
        }
    };

    // Resume and pause do not apply to a run awaiting approval; approve does.
    assert!(!act(ReplayAction::Resume, None).await, "resume is not approve");
    assert!(!act(ReplayAction::Pause, None).await);
    assert_eq!(status(&app).await, ReplayStatus::AwaitingApproval);
    assert!(act(ReplayAction::Approve, Some(approver)).await);
    let approved = replays::get_run(&app.db, id).await.unwrap().unwrap();
    assert_eq!((approved.status, approved.approved_by), (ReplayStatus::Running, Some(approver)));
    assert!(!act(ReplayAction::Approve, None).await, "approved once");
    assert!(act(ReplayAction::Pause, None).await);
    assert_eq!(status(&app).await, ReplayStatus::Paused);
    assert!(!act(ReplayAction::Complete, None).await, "a paused run does not complete");
    assert!(act(ReplayAction::Cancel, None).await);
    assert_eq!(status(&app).await, ReplayStatus::Cancelled);
    for action in ReplayAction::ALL {
        assert!(!act(action, None).await, "a cancelled run never moves ({action:?})");
    }
    let listed = replays::list_runs(&app.db, Some(ReplayStatus::Cancelled), 10).await.unwrap();
    assert_eq!(listed.iter().map(|r| r.id).collect::<Vec<_>>(), vec![id]);
}

/// The run list reads its page's progress in one grouped query: for each run the same counts as
/// the run's own progress query, and zeros for a run with no items.
async fn a_pages_run_progress_in_one_query_is_each_runs_own_progress(app: TestApp) {
    let by = operator(&app).await;
    let mut letters = Vec::new();
    for n in 0..5 {
        letters.push(letter(&app, 100 + n, "http_503").await);
    }
    let first = run(&app, by, ReplayStatus::Running, &letters[..3]).await;
    let second = run(&app, by, ReplayStatus::Paused, &letters[3..]).await;
    let empty = run(&app, by, ReplayStatus::Completed, &[]).await;
    // One item of the first run skipped, so the counts differ between runs.
    let item = replays::items(&app.db, first).await.unwrap().remove(0);
    let mut tx = app.db.begin().await.unwrap();
    let skipped = withdrawals::domain::ReplayItemStatus::Skipped;
    assert!(replays::finish_item(&mut tx, &item, skipped, Some("payload version 3"), None).await.unwrap());
    tx.commit().await.unwrap();

    let together = replays::progress_of_runs(&app.db, &[first, second, empty]).await.unwrap();
    assert_eq!(together.len(), 3);
    for id in [first, second, empty] {
        assert_eq!(together[&id], replays::progress(&app.db, id).await.unwrap(), "run {id}");
    }
    assert_eq!((together[&first].pending, together[&first].skipped), (2, 1));
    assert_eq!(together[&second].pending, 2);
    assert_eq!(together[&empty], replays::Progress::default());
}
