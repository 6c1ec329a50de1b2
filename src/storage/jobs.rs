//! The jobs table (SPEC §5): enqueue inside the caller's transaction, claim in batches under a
//! lease, and finish (succeed, reschedule, defer, kill) only while holding that lease.
//!
//! Every write after the claim is fenced by `lease_token`: a worker whose lease expired and was
//! re-claimed by another finds its late write matching zero rows, and must roll back whatever
//! it wrote beside it. A job has a lease token only while `running` (the claim sets it; every
//! write that ends a run clears it), so the fenced writes match on `id` and the token alone:
//! adding `status = 'running'` would let the planner, with statistics taken while few jobs
//! ran, scan the whole `jobs_lease_idx` for each of them instead of probing the primary key
//! (measured: no-op jobs 8 300/s after an `ANALYZE` with none running, against ~37 000/s). PostgreSQL claims with `FOR UPDATE SKIP LOCKED`; SQLite's single writer
//! serialises claims.
//!
//! A job is keyed by its account and id ([`JobKey`]): its withdrawal's account, or the system
//! account for work about no withdrawal. Every write to one job names both, so a distributed
//! database routes it to one shard; the claim and the lease sweep read across accounts (README
//! "Scaling": the claim a distributed queue needs).

use chrono::TimeDelta;
use uuid::Uuid;

use super::batch::{Arg, SetUpdate, Sql, Writes, Written};
use super::{Db, DbTime, Result, Tx, TxConn};
use crate::domain::job::{ApplyWebhookEvent, ImportSettlement, JobKind, JobType, ReconcilePayout, SubmitPayout};
use crate::domain::{AccountId, JobId, JobKey, JobStatus, LeaseToken, WithdrawalId, WithdrawalKey};
use crate::with_conn;

/// A job to enqueue. The payload is stored as raw bytes so a job that cannot be decoded later
/// can still be dead-lettered with exactly what was stored.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// Its kind, and through it its queue.
    pub kind: JobType,
    pub payload: Vec<u8>,
    pub payload_version: i64,
    pub run_at: DbTime,
    pub correlation_id: String,
    /// The account the job belongs to: its withdrawal's, or [`AccountId::SYSTEM`].
    pub account_id: AccountId,
    pub withdrawal_id: Option<WithdrawalId>,
}

impl NewJob {
    /// A built-in job carrying `payload` at its kind's current version.
    fn builtin(
        kind: JobKind,
        payload: &impl serde::Serialize,
        correlation_id: &str,
        run_at: DbTime,
        account: AccountId,
        withdrawal: Option<WithdrawalId>,
    ) -> Self {
        NewJob {
            kind: kind.into(),
            payload: serde_json::to_vec(payload).expect("payload serialises"),
            payload_version: kind.current_version(),
            run_at,
            correlation_id: correlation_id.to_owned(),
            account_id: account,
            withdrawal_id: withdrawal,
        }
    }
}

impl SubmitPayout {
    /// The job that pays the withdrawal out (of `account`), to enqueue in the caller's transaction.
    pub fn job(self, account: AccountId, correlation_id: &str, run_at: DbTime) -> NewJob {
        NewJob::builtin(JobKind::SubmitPayout, &self, correlation_id, run_at, account, Some(self.withdrawal_id))
    }
}

impl ReconcilePayout {
    /// The job that asks the provider about `withdrawal_id` (of `account`), to enqueue in the
    /// caller's transaction.
    pub fn job(self, account: AccountId, correlation_id: &str, run_at: DbTime) -> NewJob {
        NewJob::builtin(JobKind::ReconcilePayout, &self, correlation_id, run_at, account, Some(self.withdrawal_id))
    }
}

impl ApplyWebhookEvent {
    /// The job that decides on a stored provider event, to enqueue in the transaction that
    /// stores it. `account` is the account its key resolved to, or [`AccountId::SYSTEM`]. It
    /// names no withdrawal on the job row: several events of one withdrawal may wait at once,
    /// which the one-live-job-per-withdrawal key would refuse.
    pub fn job(self, account: AccountId, correlation_id: &str, run_at: DbTime) -> NewJob {
        NewJob::builtin(JobKind::ApplyWebhookEvent, &self, correlation_id, run_at, account, None)
    }
}

impl ImportSettlement {
    /// The job that imports this day's report, to enqueue in the caller's transaction.
    pub fn job(self, correlation_id: &str, run_at: DbTime) -> NewJob {
        NewJob::builtin(JobKind::ImportSettlement, &self, correlation_id, run_at, AccountId::SYSTEM, None)
    }
}

/// Enqueues `job` in `tx`; returns where it lives.
pub async fn enqueue(tx: &mut Tx, job: &NewJob) -> Result<JobKey> {
    let mut writes = Writes::new();
    let id = enqueue_in(&mut writes, job);
    writes.run(tx).await?;
    Ok(JobKey { account: job.account_id, id })
}

/// [`enqueue`] as a write of a larger batch. On PostgreSQL the batch also sends a `NOTIFY`,
/// delivered at commit to every process that listens ([`listen`]); on SQLite it wakes this
/// process's workers ([`local_wakeups`]).
pub fn enqueue_in(writes: &mut Writes, job: &NewJob) -> JobId {
    let id = JobId::new();
    let now = DbTime::now();
    writes.push(
        Sql::new(
            "INSERT INTO jobs (id, account_id, queue, kind, payload, payload_version, run_at,
                               correlation_id, withdrawal_id, created_at, updated_at, status)
             VALUES (",
        )
        .binds([
            Arg::Uuid(id.0),
            Arg::Uuid(job.account_id.0),
            job.kind.queue().into(),
            job.kind.kind().into(),
            job.payload.as_slice().into(),
            Arg::I64(job.payload_version),
            Arg::Time(job.run_at),
            job.correlation_id.as_str().into(),
            Arg::OptUuid(job.withdrawal_id.map(|w| w.0)),
            Arg::Time(now),
            Arg::Time(now),
        ])
        .sql(", 'scheduled')"),
    );
    writes.notify(JOBS_CHANNEL, job.kind.queue());
    id
}

/// In-process wake-ups (SQLite's stand-in for `NOTIFY`): they live in the storage root, where
/// the batch that enqueues sends them without importing this file.
pub use super::local_wakeups;

/// The PostgreSQL notification channel for new jobs.
pub const JOBS_CHANNEL: &str = "withdrawals_jobs";

/// A job as stored, for inspection (tests, operators).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JobRow {
    pub id: JobId,
    pub queue: String,
    pub kind: String,
    pub payload: Vec<u8>,
    pub payload_version: i64,
    pub status: JobStatus,
    pub attempts: i64,
    pub receives: i64,
    pub run_at: DbTime,
    pub last_error: Option<String>,
    pub correlation_id: String,
}

/// A withdrawal's jobs, oldest first.
pub async fn jobs_for_withdrawal(db: &super::Db, withdrawal: WithdrawalKey) -> Result<Vec<JobRow>> {
    Ok(crate::with_read_conn!(db, |conn| {
        sqlx::query_as::<_, JobRow>(
            "SELECT id, queue, kind, payload, payload_version, status, attempts, receives, run_at, last_error,
                    correlation_id
             FROM jobs WHERE account_id = $1 AND withdrawal_id = $2 ORDER BY created_at, id",
        )
        .bind(withdrawal.account.0)
        .bind(withdrawal.id.0)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// A job handed to a worker under a lease.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedJob {
    pub id: JobId,
    /// Its account ([`JobKey`]).
    pub account_id: AccountId,
    pub queue: String,
    pub kind: String,
    pub payload: Vec<u8>,
    pub payload_version: i64,
    pub attempts: i64,
    pub receives: i64,
    pub first_attempt_at: Option<DbTime>,
    pub lease_token: LeaseToken,
    pub correlation_id: String,
    pub withdrawal_id: Option<WithdrawalId>,
    /// Times this job's lease ran out before it finished.
    pub lease_expiries: i64,
    /// Consecutive runs that ended in a handler error.
    pub handler_errors: i64,
}

impl ClaimedJob {
    /// Where it lives ([`JobKey`]): every write to it names this.
    pub fn key(&self) -> JobKey {
        JobKey { account: self.account_id, id: self.id }
    }

    /// Its built-in kind; none for an extension kind, or a stored name no handler knows.
    pub fn builtin_kind(&self) -> Option<JobKind> {
        self.kind.parse().ok()
    }
}

const CLAIMED_COLUMNS: &str =
    "id, account_id, queue, kind, payload, payload_version, attempts, receives, first_attempt_at, \
                               lease_token, correlation_id, withdrawal_id, lease_expiries, handler_errors";

/// Claims up to `limit` runnable jobs of `queue`: scheduled and due. The candidates are matched
/// back by their whole key, (account, id): by id alone the update could not use the primary key
/// (measured: no-op jobs fell from 21 600/s to 14 400/s before it named the account). Each claimed job gets the
/// lease `lease_token` until `now + lease`, and its receive count goes up by one. One statement:
/// on PostgreSQL it runs in its own implicit transaction (no `BEGIN`/`COMMIT` round trips).
pub async fn claim(db: &Db, queue: &str, worker: &str, limit: u32, lease: TimeDelta) -> Result<Vec<ClaimedJob>> {
    const CLAIM: &str = "UPDATE jobs SET status = 'running', locked_by = $2, locked_until = $3, lease_token = $6,
                                         receives = receives + 1, updated_at = $1
                         WHERE (account_id, id) IN (SELECT account_id, id FROM jobs
                                                    WHERE queue = $4 AND status = 'scheduled' AND run_at <= $1
                                                    ORDER BY run_at LIMIT $5";
    let now = DbTime::now();
    let token = LeaseToken::random();
    macro_rules! claim_on {
        ($sql:expr, $conn:expr) => {
            sqlx::query_as::<_, ClaimedJob>($sql)
                .bind(now)
                .bind(worker)
                .bind(now.plus(lease))
                .bind(queue)
                .bind(i64::from(limit))
                .bind(token)
                .fetch_all($conn)
                .await?
        };
    }
    Ok(match db {
        Db::Postgres(pool) => {
            claim_on!(&format!("{CLAIM} FOR UPDATE SKIP LOCKED) RETURNING {CLAIMED_COLUMNS}"), pool)
        }
        Db::Sqlite(_) => {
            // The one writer: no row locks to skip.
            let sql = format!("{CLAIM}) RETURNING {CLAIMED_COLUMNS}");
            let mut tx = db.begin().await?;
            let jobs = with_conn!(&mut tx, |conn| claim_on!(&sql, &mut *conn));
            tx.commit().await?;
            jobs
        }
    })
}

/// Jobs whose lease ran out: their worker died or stalled. Those whose lease has now expired
/// `max_expiries` times are returned for the caller to dead-letter as crashed (the
/// broker-fallback safety net); the others go back to `scheduled` so any worker can claim them.
pub async fn expire_leases(db: &Db, max_expiries: i64) -> Result<Vec<ClaimedJob>> {
    let now = DbTime::now();
    let mut tx = db.begin().await?;
    let exhausted: Vec<ClaimedJob> = with_conn!(&mut tx, |conn| {
        sqlx::query(
            "UPDATE jobs SET status = 'scheduled', run_at = $1, locked_by = NULL, locked_until = NULL,
                             lease_token = NULL, last_error = 'lease expired', lease_expiries = lease_expiries + 1,
                             updated_at = $1
             WHERE status = 'running' AND locked_until < $1 AND lease_expiries + 1 < $2",
        )
        .bind(now)
        .bind(max_expiries)
        .execute(&mut *conn)
        .await?;
        sqlx::query_as(&format!(
            "SELECT {CLAIMED_COLUMNS} FROM jobs WHERE status = 'running' AND locked_until < $1 AND lease_expiries + 1 >= $2"
        ))
        .bind(now)
        .bind(max_expiries)
        .fetch_all(&mut *conn)
        .await?
    });
    tx.commit().await?;
    Ok(exhausted)
}

/// Extends a lease in its own transaction (the heartbeat); false if the lease is no longer ours.
pub async fn heartbeat(db: &Db, job: JobKey, token: LeaseToken, lease: TimeDelta) -> Result<bool> {
    let mut tx = db.begin().await?;
    let held = extend_lease(&mut tx, job, token, lease, false).await?;
    tx.commit().await?;
    Ok(held)
}

/// How a leased job ends this run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish<'a> {
    Succeeded,
    /// Run again at `run_at`; `consumed_attempt` says whether this run counts against the policy
    /// (a breaker deferral does not).
    Reschedule {
        run_at: DbTime,
        consumed_attempt: bool,
        error: &'a str,
    },
    /// Dead: no more automatic runs.
    Dead {
        error: &'a str,
    },
    /// Handed back unfinished (graceful shutdown): runnable at once, no attempt consumed.
    Release,
    /// The handler failed for a reason that is not the job's outcome (database down, a bug):
    /// run again at `run_at`, no attempt consumed, one more consecutive handler error.
    HandlerError {
        run_at: DbTime,
        error: &'a str,
    },
}

/// Ends a leased run inside `tx`, fenced by the lease token. Returns false when the lease was
/// lost: the caller must then roll back `tx`, so nothing it wrote beside this survives.
pub async fn finish(tx: &mut Tx, job: JobKey, token: LeaseToken, how: &Finish<'_>) -> Result<bool> {
    let mut writes = Writes::new();
    let finished = finish_in(&mut writes, job, token, how);
    Ok(writes.run(tx).await?.applied(finished))
}

/// [`finish`] as a write of a larger batch; its count (the returned index) is 0 when the lease
/// was lost, and the caller must then roll back.
pub fn finish_in(writes: &mut Writes, job: JobKey, token: LeaseToken, how: &Finish<'_>) -> Written {
    let now = DbTime::now();
    // (status, run_at, attempts consumed, error, whether this run was a handler error)
    let (status, run_at, consumed, error, handler_error) = match how {
        Finish::Succeeded => ("succeeded", None, 0_i64, None, false),
        Finish::Reschedule { run_at, consumed_attempt, error } => {
            ("scheduled", Some(*run_at), i64::from(*consumed_attempt), Some(*error), false)
        }
        Finish::Dead { error } => ("dead", None, 0, Some(*error), false),
        Finish::Release => ("scheduled", Some(now), 0, None, false),
        Finish::HandlerError { run_at, error } => ("scheduled", Some(*run_at), 0, Some(*error), true),
    };
    let alone = Sql::new("UPDATE jobs SET status = ")
        .bind(status)
        .sql(", run_at = COALESCE(")
        .bind(run_at)
        .sql(", run_at), attempts = attempts + ")
        .bind(consumed)
        .sql(", last_error = COALESCE(")
        .bind(error)
        .sql(", last_error), locked_by = NULL, locked_until = NULL, lease_token = NULL, updated_at = ")
        .bind(now)
        .sql(if handler_error { ", handler_errors = handler_errors + 1" } else { ", handler_errors = 0" })
        .sql(" WHERE account_id = ")
        .bind(job.account.0)
        .sql(" AND id = ")
        .bind(job.id.0)
        .sql(" AND lease_token = ")
        .bind(token.0);
    let values = [
        Arg::Uuid(job.account.0),
        Arg::Uuid(token.0),
        status.into(),
        Arg::OptTime(run_at),
        Arg::I64(consumed),
        error.into(),
        Arg::Time(now),
        Arg::Bool(handler_error),
    ];
    writes.push(Sql::keyed(alone, &FINISH_SET, job.id.0, values))
}

/// [`finish_in`] in set form, for the finishes of a batch ([`Sql::keyed`]): the same fenced write.
static FINISH_SET: SetUpdate = SetUpdate {
    set: "UPDATE jobs AS t SET status = v.status, run_at = COALESCE(v.run_at, t.run_at), \
          attempts = t.attempts + v.consumed, last_error = COALESCE(v.error, t.last_error), locked_by = NULL, \
          locked_until = NULL, lease_token = NULL, updated_at = v.at, \
          handler_errors = CASE WHEN v.handler_error THEN t.handler_errors + 1 ELSE 0 END",
    values: "v(id, account_id, token, status, run_at, consumed, error, at, handler_error)",
    filter: "t.account_id = v.account_id AND t.id = v.id AND t.lease_token = v.token",
};

/// Marks many leased runs succeeded in one statement, each fenced by its own lease token: the
/// group commit of the jobs finisher (`jobs::finisher`). Returns the ids whose lease still held; a run not
/// among them was re-claimed by another worker and is left alone.
pub async fn succeed_many(tx: &mut Tx, runs: &[(JobKey, LeaseToken)]) -> Result<Vec<JobId>> {
    const SET: &str = "status = 'succeeded', locked_by = NULL, locked_until = NULL, lease_token = NULL,
                       updated_at = $1, handler_errors = 0";
    let now = DbTime::now();
    Ok(match &mut tx.conn {
        TxConn::Postgres(t) => {
            let accounts: Vec<Uuid> = runs.iter().map(|(job, _)| job.account.0).collect();
            let (ids, tokens): (Vec<Uuid>, Vec<Uuid>) = runs.iter().map(|(job, token)| (job.id.0, token.0)).unzip();
            sqlx::query_scalar(&format!(
                "UPDATE jobs SET {SET} FROM UNNEST($2::uuid[], $3::uuid[], $4::uuid[]) AS f(account_id, id, token)
                 WHERE jobs.account_id = f.account_id AND jobs.id = f.id AND jobs.lease_token = f.token
                 RETURNING jobs.id"
            ))
            .bind(now)
            .bind(accounts)
            .bind(ids)
            .bind(tokens)
            .fetch_all(&mut **t)
            .await?
        }
        TxConn::Sqlite(t) => {
            // No arrays in SQLite: one VALUES row of three parameters per run.
            let rows: Vec<String> =
                (0..runs.len()).map(|i| format!("(${}, ${}, ${})", 3 * i + 2, 3 * i + 3, 3 * i + 4)).collect();
            let sql = format!(
                "UPDATE jobs SET {SET} FROM (VALUES {}) AS f
                 WHERE jobs.account_id = f.column1 AND jobs.id = f.column2 AND jobs.lease_token = f.column3
                 RETURNING jobs.id",
                rows.join(", ")
            );
            let mut query = sqlx::query_scalar(&sql).bind(now);
            for (job, token) in runs {
                query = query.bind(job.account).bind(job.id).bind(*token);
            }
            query.fetch_all(&mut **t).await?
        }
    })
}

/// Marks the first run of a job (the start of its `max_elapsed` budget), fenced by the lease.
pub async fn mark_first_attempt(tx: &mut Tx, job: JobKey, token: LeaseToken) -> Result<DbTime> {
    let now = DbTime::now();
    let first: Option<DbTime> = with_conn!(tx, |conn| {
        sqlx::query_scalar(
            "UPDATE jobs SET first_attempt_at = COALESCE(first_attempt_at, $1)
             WHERE account_id = $2 AND id = $3 AND lease_token = $4 RETURNING first_attempt_at",
        )
        .bind(now)
        .bind(job.account)
        .bind(job.id)
        .bind(token)
        .fetch_optional(&mut *conn)
        .await?
    });
    Ok(first.unwrap_or(now))
}

/// The job's first run, for its dead letter: the `first_attempt_at` a run of it marked (in this
/// transaction or an earlier one), else `at` (a job that fails on its first run before any
/// provider call), which is then recorded on the job too. Not fenced: the caller's transaction
/// fences the job's death.
pub async fn first_run_at(tx: &mut Tx, job: JobKey, at: DbTime) -> Result<DbTime> {
    let first: Option<DbTime> = with_conn!(tx, |conn| {
        sqlx::query_scalar(
            "UPDATE jobs SET first_attempt_at = COALESCE(first_attempt_at, $1) WHERE account_id = $2 AND id = $3
             RETURNING first_attempt_at",
        )
        .bind(at)
        .bind(job.account)
        .bind(job.id)
        .fetch_optional(&mut *conn)
        .await?
    });
    Ok(first.unwrap_or(at))
}

/// Whether a job of `kind` is waiting or running for the withdrawal (so it is not enqueued twice).
pub async fn has_live_job(tx: &mut Tx, withdrawal: WithdrawalKey, kind: JobKind) -> Result<bool> {
    let count: i64 = with_conn!(tx, |conn| {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE account_id = $1 AND withdrawal_id = $2 AND kind = $3
               AND status IN ('scheduled', 'running')",
        )
        .bind(withdrawal.account.0)
        .bind(withdrawal.id.0)
        .bind(kind.as_str())
        .fetch_one(&mut *conn)
        .await?
    });
    Ok(count > 0)
}

/// Whether a job of `kind` with this correlation id was ever enqueued (in any status): how a
/// once-a-day job is enqueued once. Such jobs are the system account's.
pub async fn exists_with_correlation(tx: &mut Tx, kind: JobKind, correlation_id: &str) -> Result<bool> {
    let count: i64 = with_conn!(tx, |conn| {
        sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE account_id = $1 AND correlation_id = $2 AND kind = $3")
            .bind(AccountId::SYSTEM)
            .bind(correlation_id)
            .bind(kind.as_str())
            .fetch_one(&mut *conn)
            .await?
    });
    Ok(count > 0)
}

/// Forwards PostgreSQL job notifications to `wake` until `shutdown`; on SQLite there is nothing
/// to listen to (every writer is in-process or polled for).
pub async fn listen(
    db: &Db,
    wake: std::sync::Arc<tokio::sync::Notify>,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<()> {
    let Db::Postgres(pool) = db else { return Ok(()) };
    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
    listener.listen(JOBS_CHANNEL).await?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                received = listener.recv() => match received {
                    Ok(_) => wake.notify_one(),
                    Err(err) => {
                        // The listener reconnects on its own; polling covers the gap.
                        tracing::warn!(error = %err, "job notification listener error");
                        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                    }
                },
            }
        }
    });
    Ok(())
}

/// Extends the lease inside `tx`; false if it is no longer ours. With `mark_first_attempt` (the
/// one write before a provider call) it also marks the job's first attempt if it has none.
pub async fn extend_lease(
    tx: &mut Tx,
    job: JobKey,
    token: LeaseToken,
    lease: TimeDelta,
    mark_first_attempt: bool,
) -> Result<bool> {
    let mut writes = Writes::new();
    let extended = extend_lease_in(&mut writes, job, token, lease, mark_first_attempt);
    Ok(writes.run(tx).await?.applied(extended))
}

/// [`extend_lease`] as a write of a larger batch; its count (the returned index) is 0 when the
/// lease is no longer ours, and the caller must then roll back.
pub fn extend_lease_in(
    writes: &mut Writes,
    job: JobKey,
    token: LeaseToken,
    lease: TimeDelta,
    mark_first_attempt: bool,
) -> Written {
    let now = DbTime::now();
    let mut sql = Sql::new("UPDATE jobs SET locked_until = ").bind(now.plus(lease));
    if mark_first_attempt {
        sql = sql.sql(", first_attempt_at = COALESCE(first_attempt_at, ").bind(now).sql(")");
    }
    let alone = sql
        .sql(" WHERE account_id = ")
        .bind(job.account.0)
        .sql(" AND id = ")
        .bind(job.id.0)
        .sql(" AND lease_token = ")
        .bind(token.0);
    let values = [
        Arg::Uuid(job.account.0),
        Arg::Uuid(token.0),
        Arg::Time(now.plus(lease)),
        Arg::Bool(mark_first_attempt),
        Arg::Time(now),
    ];
    writes.push(Sql::keyed(alone, &LEASE_SET, job.id.0, values))
}

/// [`extend_lease_in`] in set form, for the lease checks of a batch ([`Sql::keyed`]).
static LEASE_SET: SetUpdate = SetUpdate {
    set: "UPDATE jobs AS t SET locked_until = v.until, \
          first_attempt_at = CASE WHEN v.mark THEN COALESCE(t.first_attempt_at, v.at) ELSE t.first_attempt_at END",
    values: "v(id, account_id, token, until, mark, at)",
    filter: "t.account_id = v.account_id AND t.id = v.id AND t.lease_token = v.token",
};

/// Kills a job whose lease expired (no live holder to fence against); false if someone
/// renewed or finished it meanwhile.
pub async fn kill_expired(tx: &mut Tx, job: JobKey, error: &str) -> Result<bool> {
    let now = DbTime::now();
    let updated = with_conn!(tx, |conn| {
        sqlx::query(
            "UPDATE jobs SET status = 'dead', last_error = $1, locked_by = NULL, locked_until = NULL,
                             lease_token = NULL, updated_at = $2
             WHERE account_id = $3 AND id = $4 AND status = 'running' AND locked_until < $2",
        )
        .bind(error)
        .bind(now)
        .bind(job.account)
        .bind(job.id)
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    Ok(updated == 1)
}

/// One job's status (tests, operators).
pub async fn job_status(db: &Db, job: JobKey) -> Result<Option<JobStatus>> {
    Ok(crate::with_read_conn!(db, |conn| {
        sqlx::query_scalar::<_, JobStatus>("SELECT status FROM jobs WHERE account_id = $1 AND id = $2")
            .bind(job.account)
            .bind(job.id)
            .fetch_optional(&mut *conn)
            .await?
    }))
}

/// One job as stored.
pub async fn job_row(db: &Db, job: JobKey) -> Result<Option<JobRow>> {
    Ok(crate::with_read_conn!(db, |conn| {
        sqlx::query_as::<_, JobRow>(
            "SELECT id, queue, kind, payload, payload_version, status, attempts, receives, run_at, last_error,
                    correlation_id
             FROM jobs WHERE account_id = $1 AND id = $2",
        )
        .bind(job.account)
        .bind(job.id)
        .fetch_optional(&mut *conn)
        .await?
    }))
}

/// Deletes jobs that succeeded before `before` (SPEC §5 `JOB_RETENTION_DAYS`), `batch` at a
/// time, each batch its own short transaction; returns how many. Every other job stays: running,
/// scheduled, dead (its dead letter names it) and the daily settlement imports (their
/// correlation id says which days were imported). Job ids are UUIDv7, so a job that finished
/// before `before` has an id below the first id of that millisecond, and no index on the finish
/// time is needed (nor maintained on every finish). Since the primary key leads with the account
/// (issue 29) no index is ordered by id alone, so a batch takes the first eligible jobs the scan
/// meets, in no order: the old ones sit at the start of the table, and the scan stops at the
/// batch's size.
pub async fn prune_succeeded(db: &Db, before: DbTime, batch: i64) -> Result<u64> {
    let below = Uuid::from_bytes(v7_floor(before));
    let mut pruned = 0;
    loop {
        let mut tx = db.begin().await?;
        let deleted = with_conn!(&mut tx, |conn| {
            sqlx::query(
                "DELETE FROM jobs WHERE (account_id, id) IN
                   (SELECT account_id, id FROM jobs
                    WHERE id < $1 AND status = 'succeeded' AND updated_at < $2 AND kind <> 'import_settlement'
                      AND NOT EXISTS (SELECT 1 FROM dead_letters d
                                      WHERE d.account_id = jobs.account_id AND d.job_id = jobs.id)
                    LIMIT $3)",
            )
            .bind(below)
            .bind(before)
            .bind(batch.max(1))
            .execute(&mut *conn)
            .await?
            .rows_affected()
        });
        tx.commit().await?;
        pruned += deleted;
        if deleted < batch.max(1) as u64 {
            return Ok(pruned);
        }
    }
}

/// The smallest UUIDv7 of `at`'s millisecond: its 48-bit Unix time in milliseconds, then zeros.
fn v7_floor(at: DbTime) -> [u8; 16] {
    let millis = u64::try_from(at.0.timestamp_millis()).unwrap_or(0);
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_v7_floor_of_a_millisecond_is_below_its_ids_and_above_the_previous_ones() {
        let id = JobId::new().0;
        let ms = id.get_timestamp().unwrap().to_unix();
        let at = chrono::DateTime::from_timestamp(ms.0 as i64, ms.1).unwrap();
        let floor = Uuid::from_bytes(v7_floor(DbTime(at)));
        assert!(floor <= id, "{floor} ≤ {id}");
        let next = Uuid::from_bytes(v7_floor(DbTime(at + TimeDelta::milliseconds(1))));
        assert!(id < next, "{id} < {next}");
    }
}
