//! Replay runs and items (SPEC §8.3). A run is released by a worker holding the run's lease;
//! each item moves `pending → released | reconciling | skipped | cancelled` exactly once.

use sqlx::types::Json;
use sqlx::QueryBuilder;

use super::{Db, DbTime, Result, Tx};
use crate::domain::{
    AccountId, DeadLetterId, JobId, JobKey, OperatorId, ReplayAction, ReplayItemId, ReplayItemStatus, ReplayRunId,
    ReplayStatus,
};
use crate::{with_conn, with_read_conn};

#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ReplayRun {
    pub id: ReplayRunId,
    pub started_by: OperatorId,
    pub reason: String,
    pub selection: Json<serde_json::Value>,
    pub expected_payload_version: i64,
    pub destination_queue: crate::domain::job::Queue,
    pub status: ReplayStatus,
    pub total: i64,
    pub rate_per_second: i64,
    pub max_concurrency: i64,
    pub auto_pause_threshold: i64,
    pub dead_letter_baseline: i64,
    pub approved_by: Option<OperatorId>,
    pub paused_reason: Option<String>,
    pub created_at: DbTime,
    pub updated_at: DbTime,
}

const RUN_COLUMNS: &str = "id, started_by, reason, selection, expected_payload_version, destination_queue, status, total, \
                           rate_per_second, max_concurrency, auto_pause_threshold, dead_letter_baseline, approved_by, paused_reason, \
                           created_at, updated_at";

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ReplayItem {
    pub id: ReplayItemId,
    /// Its dead letter's account.
    pub account_id: AccountId,
    pub run_id: ReplayRunId,
    pub dead_letter_id: DeadLetterId,
    pub status: ReplayItemStatus,
    pub detail: Option<String>,
    pub job_id: Option<JobId>,
    pub released_at: Option<DbTime>,
}

pub async fn insert_run(tx: &mut Tx, run: &ReplayRun) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query(&format!(
            "INSERT INTO replay_runs ({RUN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"
        ))
        .bind(run.id)
        .bind(run.started_by)
        .bind(&run.reason)
        .bind(&run.selection)
        .bind(run.expected_payload_version)
        .bind(run.destination_queue)
        .bind(run.status)
        .bind(run.total)
        .bind(run.rate_per_second)
        .bind(run.max_concurrency)
        .bind(run.auto_pause_threshold)
        .bind(run.dead_letter_baseline)
        .bind(run.approved_by)
        .bind(&run.paused_reason)
        .bind(run.created_at)
        .bind(run.updated_at)
        .execute(&mut *conn)
        .await?;
    });
    Ok(())
}

/// The run in which `dead_letter` is waiting to be replayed, if any.
pub async fn active_run_for(db: &Db, account: AccountId, dead_letter: DeadLetterId) -> Result<Option<ReplayRunId>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_scalar::<_, ReplayRunId>(
            "SELECT run_id FROM replay_items WHERE account_id = $1 AND dead_letter_id = $2 AND status = 'pending'",
        )
        .bind(account)
        .bind(dead_letter)
        .fetch_optional(&mut *conn)
        .await?
    }))
}

/// The runs in which any of `dead_letters` waits to be replayed, as (dead letter, run) pairs:
/// [`active_run_for`] for a whole selection of (account, letter) pairs, one query per 500.
pub async fn active_runs_for(
    db: &Db,
    dead_letters: &[(AccountId, DeadLetterId)],
) -> Result<Vec<(DeadLetterId, ReplayRunId)>> {
    let mut active = Vec::new();
    for chunk in dead_letters.chunks(500) {
        let found: Vec<(DeadLetterId, ReplayRunId)> = with_read_conn!(db, |conn| {
            let mut query =
                QueryBuilder::new("SELECT dead_letter_id, run_id FROM replay_items WHERE status = 'pending' AND ");
            super::push_keys_in(&mut query, "(account_id, dead_letter_id)", chunk.iter().map(|(a, id)| (a.0, id.0)));
            query.build_query_as().fetch_all(&mut *conn).await?
        });
        active.extend(found);
    }
    Ok(active)
}

/// Adds an item; a dead letter already in an active replay makes this fail with a unique
/// violation (see [`super::is_unique_violation`]).
pub async fn insert_item(tx: &mut Tx, run: ReplayRunId, account: AccountId, dead_letter: DeadLetterId) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query(
            "INSERT INTO replay_items (id, account_id, run_id, dead_letter_id, status, created_at)
             VALUES ($1, $2, $3, $4, 'pending', $5)",
        )
        .bind(ReplayItemId::new())
        .bind(account)
        .bind(run)
        .bind(dead_letter)
        .bind(DbTime::now())
        .execute(&mut *conn)
        .await?;
    });
    Ok(())
}

pub async fn get_run(db: &Db, id: ReplayRunId) -> Result<Option<ReplayRun>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ReplayRun>(&format!("SELECT {RUN_COLUMNS} FROM replay_runs WHERE id = $1"))
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?
    }))
}

/// Runs newest first, optionally only those in `status`.
pub async fn list_runs(db: &Db, status: Option<ReplayStatus>, limit: i64) -> Result<Vec<ReplayRun>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ReplayRun>(&format!(
            "SELECT {RUN_COLUMNS} FROM replay_runs WHERE ($1 IS NULL OR status = $1) ORDER BY created_at DESC, id DESC LIMIT $2"
        ))
        .bind(status)
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// The guarded move of a run by `action` (SPEC §8.3): only from the states the domain's table
/// allows for it ([`ReplayAction::from_states`]), to the state it leads to. Returns whether it
/// happened (false: the run was not in one of those states, or does not exist).
pub async fn set_status(
    tx: &mut Tx,
    id: ReplayRunId,
    action: ReplayAction,
    paused_reason: Option<&str>,
    approved_by: Option<OperatorId>,
) -> Result<bool> {
    let from = action.from_states();
    let Some(to) = from.first().and_then(|f| crate::domain::check_replay_transition(*f, action).ok()) else {
        return Ok(false);
    };
    let now = DbTime::now();
    let updated = with_conn!(tx, |conn| {
        let mut query = QueryBuilder::new("UPDATE replay_runs SET status = ");
        query.push_bind(to);
        query.push(", paused_reason = ").push_bind(paused_reason);
        query.push(", approved_by = COALESCE(").push_bind(approved_by).push(", approved_by)");
        query.push(", updated_at = ").push_bind(now);
        query.push(" WHERE id = ").push_bind(id).push(" AND status IN (");
        let mut states = query.separated(", ");
        for state in from {
            states.push_bind(state);
        }
        query.push(")");
        query.build().execute(&mut *conn).await?.rows_affected()
    });
    Ok(updated == 1)
}

/// Runs a releaser may work on, leased to `worker` until `until` (one releaser per run).
pub async fn lease_running(db: &Db, worker: &str, until: DbTime) -> Result<Vec<ReplayRun>> {
    let now = DbTime::now();
    let mut tx = db.begin().await?;
    let runs = with_conn!(&mut tx, |conn| {
        sqlx::query_as::<_, ReplayRun>(&format!(
            "UPDATE replay_runs SET leased_by = $1, lease_until = $2
             WHERE status = 'running' AND (lease_until IS NULL OR lease_until < $3 OR leased_by = $1)
             RETURNING {RUN_COLUMNS}"
        ))
        .bind(worker)
        .bind(until)
        .bind(now)
        .fetch_all(&mut *conn)
        .await?
    });
    tx.commit().await?;
    Ok(runs)
}

pub async fn pending_items(db: &Db, run: ReplayRunId, limit: i64) -> Result<Vec<ReplayItem>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ReplayItem>(
            "SELECT id, account_id, run_id, dead_letter_id, status, detail, job_id, released_at FROM replay_items
             WHERE run_id = $1 AND status = 'pending' ORDER BY id LIMIT $2",
        )
        .bind(run)
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?
    }))
}

pub async fn items(db: &Db, run: ReplayRunId) -> Result<Vec<ReplayItem>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ReplayItem>(
            "SELECT id, account_id, run_id, dead_letter_id, status, detail, job_id, released_at FROM replay_items
             WHERE run_id = $1 ORDER BY id",
        )
        .bind(run)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Moves a pending item on; false if someone else already did.
pub async fn finish_item(
    tx: &mut Tx,
    item: &ReplayItem,
    to: ReplayItemStatus,
    detail: Option<&str>,
    job: Option<JobId>,
) -> Result<bool> {
    let updated = with_conn!(tx, |conn| {
        sqlx::query(
            "UPDATE replay_items SET status = $1, detail = $2, job_id = $3, released_at = $4
             WHERE account_id = $5 AND id = $6 AND status = 'pending'",
        )
        .bind(to)
        .bind(detail)
        .bind(job)
        .bind(DbTime::now())
        .bind(item.account_id)
        .bind(item.id)
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    Ok(updated == 1)
}

/// Links a released job to its item (both of the letter's account: `job.account`).
pub async fn link_job(tx: &mut Tx, job: JobKey, item: ReplayItemId) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query("UPDATE jobs SET replay_item_id = $1 WHERE account_id = $2 AND id = $3")
            .bind(item)
            .bind(job.account)
            .bind(job.id)
            .execute(&mut *conn)
            .await?;
    });
    Ok(())
}

pub async fn cancel_pending(tx: &mut Tx, run: ReplayRunId) -> Result<u64> {
    Ok(with_conn!(tx, |conn| {
        sqlx::query("UPDATE replay_items SET status = 'cancelled', detail = 'run cancelled' WHERE run_id = $1 AND status = 'pending'")
            .bind(run)
            .execute(&mut *conn)
            .await?
            .rows_affected()
    }))
}

/// A run's progress, counted from its items and the jobs they released.
#[derive(Debug, Clone, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct Progress {
    pub pending: i64,
    pub released: i64,
    pub reconciling: i64,
    pub skipped: i64,
    pub cancelled: i64,
    /// Released jobs still scheduled or running.
    pub in_flight: i64,
    pub succeeded: i64,
    pub failed: i64,
    /// Dead letters written by jobs this run released.
    pub new_dead_letters: i64,
}

/// The counts of [`Progress`] over a run's items (`i`) and the jobs they released (`j`).
const PROGRESS_COLUMNS: &str = "
    COALESCE(SUM(CASE WHEN i.status = 'pending' THEN 1 ELSE 0 END), 0) AS pending,
    COALESCE(SUM(CASE WHEN i.status = 'released' THEN 1 ELSE 0 END), 0) AS released,
    COALESCE(SUM(CASE WHEN i.status = 'reconciling' THEN 1 ELSE 0 END), 0) AS reconciling,
    COALESCE(SUM(CASE WHEN i.status = 'skipped' THEN 1 ELSE 0 END), 0) AS skipped,
    COALESCE(SUM(CASE WHEN i.status = 'cancelled' THEN 1 ELSE 0 END), 0) AS cancelled,
    COALESCE(SUM(CASE WHEN j.status IN ('scheduled', 'running') THEN 1 ELSE 0 END), 0) AS in_flight,
    COALESCE(SUM(CASE WHEN j.status = 'succeeded' THEN 1 ELSE 0 END), 0) AS succeeded,
    COALESCE(SUM(CASE WHEN j.status = 'dead' THEN 1 ELSE 0 END), 0) AS failed,
    COALESCE(SUM(CASE WHEN EXISTS (SELECT 1 FROM dead_letters d WHERE d.account_id = j.account_id AND d.job_id = j.id)
                      THEN 1 ELSE 0 END), 0)
      AS new_dead_letters";

pub async fn progress(db: &Db, run: ReplayRunId) -> Result<Progress> {
    let sql = format!(
        "SELECT {PROGRESS_COLUMNS} FROM replay_items i LEFT JOIN jobs j ON j.account_id = i.account_id AND j.id = i.job_id
         WHERE i.run_id = $1"
    );
    Ok(with_read_conn!(db, |conn| sqlx::query_as::<_, Progress>(&sql).bind(run).fetch_one(&mut *conn).await?))
}

#[derive(sqlx::FromRow)]
struct RunProgress {
    run_id: uuid::Uuid,
    #[sqlx(flatten)]
    progress: Progress,
}

/// The progress of many runs (a page of the run list) in one query, grouped by run; a run with no
/// items reads all zeros, as [`progress`] gives it.
pub async fn progress_of_runs(
    db: &Db,
    runs: &[ReplayRunId],
) -> Result<std::collections::HashMap<ReplayRunId, Progress>> {
    if runs.is_empty() {
        return Ok(Default::default());
    }
    let sql = format!(
        "SELECT i.run_id, {PROGRESS_COLUMNS} FROM replay_items i
         LEFT JOIN jobs j ON j.account_id = i.account_id AND j.id = i.job_id
         WHERE i.run_id IN ({}) GROUP BY i.run_id",
        super::placeholders(runs.len())
    );
    let rows: Vec<RunProgress> = with_read_conn!(db, |conn| {
        let mut q = sqlx::query_as::<_, RunProgress>(&sql);
        for run in runs {
            q = q.bind(*run);
        }
        q.fetch_all(&mut *conn).await?
    });
    let mut found: std::collections::HashMap<ReplayRunId, Progress> =
        rows.into_iter().map(|r| (ReplayRunId(r.run_id), r.progress)).collect();
    for run in runs {
        found.entry(*run).or_default();
    }
    Ok(found)
}

/// Whether `dead_letter` was already released by some run (filters leave those out).
pub async fn was_replayed(db: &Db, account: AccountId, dead_letter: DeadLetterId) -> Result<bool> {
    let count: i64 = with_read_conn!(db, |conn| {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM replay_items
             WHERE account_id = $1 AND dead_letter_id = $2 AND status IN ('released', 'reconciling')",
        )
        .bind(account)
        .bind(dead_letter)
        .fetch_one(&mut *conn)
        .await?
    });
    Ok(count > 0)
}

/// Takes an item for release inside `tx`: only while it is pending and its run is running and
/// leased to `releaser`. The row lock (PostgreSQL) or the one writer (SQLite) makes a pause,
/// cancel or second releaser either come before (and this fails) or wait for this release.
pub async fn take_item(tx: &mut Tx, item: &ReplayItem, run: ReplayRunId, releaser: &str) -> Result<bool> {
    let updated = with_conn!(tx, |conn| {
        sqlx::query(
            "UPDATE replay_items SET detail = detail
             WHERE account_id = $4 AND id = $1 AND status = 'pending'
               AND EXISTS (SELECT 1 FROM replay_runs r WHERE r.id = $2 AND r.status = 'running' AND r.leased_by = $3)",
        )
        .bind(item.id)
        .bind(run)
        .bind(releaser)
        .bind(item.account_id)
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    Ok(updated == 1)
}

/// On resume: auto-pause counts only dead letters that arrive from now on.
pub async fn reset_baseline(tx: &mut Tx, run: ReplayRunId, new_dead_letters: i64) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query("UPDATE replay_runs SET dead_letter_baseline = $1 WHERE id = $2")
            .bind(new_dead_letters)
            .bind(run)
            .execute(&mut *conn)
            .await?;
    });
    Ok(())
}
