//! Idempotency records for `POST /v1/withdrawals` (SPEC §3).
//!
//! A new key — the common case — takes no phases: its record is inserted already `completed`,
//! with the response, by the creation's own statement ([`insert_completed_in`]); a key that exists
//! makes that insert do nothing, and the caller rolls back and decides through the two phases
//! below. (A request racing the first with the same key waits the few milliseconds of that
//! statement and gets its stored response.)
//!
//! Otherwise, two atomic phases.
//! Phase one ([`begin`]) claims the key in its own short transaction, so a concurrent request
//! with the same key sees `in_progress` and gets a 409 instead of waiting. Phase two is the
//! caller's creation transaction, which ends with [`complete`] — fenced by the claim's
//! `locked_at`, so a request that lost its claim (it ran past the lock timeout and another took
//! over) cannot also store a response. A claim whose owner died is taken over after the lock
//! timeout: its creation transaction never committed, so re-running it is safe.

use super::batch::{Arg, Sql, Writes, Written};
use super::{Db, DbTime, Result, Tx};
use crate::domain::{AccountId, IdempotencyKey, IdempotencyState, WithdrawalId};
use crate::with_conn;

/// What phase one decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begin {
    /// The key is ours; run the request and [`complete`] with this claim.
    Proceed(Claim),
    /// The same key and body already completed: answer with the stored response.
    Replay { status: u16, body: Vec<u8> },
    /// The key was used with a different request body.
    KeyReused,
    /// The first request with this key is still running.
    InProgress,
}

/// Proof of ownership of a key for the length of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub account_id: AccountId,
    locked_at: DbTime,
}

#[derive(Debug, sqlx::FromRow)]
struct RecordRow {
    fingerprint: Vec<u8>,
    state: IdempotencyState,
    response_status: Option<i64>,
    response_body: Option<Vec<u8>>,
    locked_at: DbTime,
    expires_at: DbTime,
}

pub use crate::config::IdempotencySettings;

pub async fn begin(
    db: &Db,
    account: AccountId,
    key: &IdempotencyKey,
    fingerprint: &[u8],
    settings: IdempotencySettings,
) -> Result<Begin> {
    const CLAIM: &str = "INSERT INTO idempotency_records
                             (account_id, key, fingerprint, state, locked_at, created_at, expires_at)
                         VALUES ($1, $2, $3, 'in_progress', $4, $4, $5) ON CONFLICT (account_id, key) DO NOTHING";
    let now = DbTime::now();
    let claimed = Begin::Proceed(Claim { account_id: account, locked_at: now });
    if let Db::Postgres(pool) = db {
        // The common case, a new key, is one statement in its own transaction (no BEGIN/COMMIT
        // round trips); a key already present is decided below.
        let inserted = sqlx::query(CLAIM)
            .bind(account.0)
            .bind(key.as_str())
            .bind(fingerprint)
            .bind(now)
            .bind(now.plus(settings.retention))
            .execute(pool)
            .await?
            .rows_affected();
        if inserted == 1 {
            return Ok(claimed);
        }
    }
    let mut tx = db.begin().await?;
    let inserted = with_conn!(&mut tx, |conn| {
        sqlx::query(CLAIM)
            .bind(account.0)
            .bind(key.as_str())
            .bind(fingerprint)
            .bind(now)
            .bind(now.plus(settings.retention))
            .execute(&mut *conn)
            .await?
            .rows_affected()
    });
    if inserted == 1 {
        tx.commit().await?;
        return Ok(claimed);
    }
    let existing: RecordRow = with_conn!(&mut tx, |conn| {
        sqlx::query_as(
            "SELECT fingerprint, state, response_status, response_body, locked_at, expires_at
             FROM idempotency_records WHERE account_id = $1 AND key = $2",
        )
        .bind(account.0)
        .bind(key.as_str())
        .fetch_one(&mut *conn)
        .await?
    });
    let expired = existing.expires_at <= now;
    let stale_claim =
        existing.state == IdempotencyState::InProgress && existing.locked_at.plus(settings.lock_timeout) <= now;
    let decision = if expired || (stale_claim && existing.fingerprint == fingerprint) {
        // Take the key over: an expired record is forgotten; a dead claim never committed. The
        // update re-checks both conditions, so a claim that completed since we read it (its
        // `locked_at` is unchanged) is never overwritten.
        let taken = with_conn!(&mut tx, |conn| {
            sqlx::query(
                "UPDATE idempotency_records
                 SET fingerprint = $1, state = 'in_progress', response_status = NULL, response_body = NULL,
                     withdrawal_id = NULL, locked_at = $2, created_at = $2, expires_at = $3
                 WHERE account_id = $4 AND key = $5 AND locked_at = $6
                   AND (expires_at <= $2 OR state = 'in_progress')",
            )
            .bind(fingerprint)
            .bind(now)
            .bind(now.plus(settings.retention))
            .bind(account.0)
            .bind(key.as_str())
            .bind(existing.locked_at)
            .execute(&mut *conn)
            .await?
            .rows_affected()
        });
        if taken == 1 {
            Begin::Proceed(Claim { account_id: account, locked_at: now })
        } else {
            Begin::InProgress
        }
    } else if existing.fingerprint != fingerprint {
        Begin::KeyReused
    } else if existing.state == IdempotencyState::Completed {
        let status = existing.response_status.and_then(|s| u16::try_from(s).ok());
        match (status, existing.response_body) {
            (Some(status), Some(body)) => Begin::Replay { status, body },
            _ => return Err(super::StorageError::corrupt("completed idempotency record without a response")),
        }
    } else {
        Begin::InProgress
    };
    tx.commit().await?;
    Ok(decision)
}

/// Stores the response under the claimed key, inside the request's own transaction. Returns
/// false if the claim was lost (the caller must then roll back).
pub async fn complete(
    tx: &mut Tx,
    key: &IdempotencyKey,
    claim: Claim,
    status: u16,
    body: &[u8],
    withdrawal: Option<WithdrawalId>,
) -> Result<bool> {
    let mut writes = Writes::new();
    let completed = complete_in(&mut writes, key, claim, status, body, withdrawal);
    Ok(writes.run(tx).await?.applied(completed))
}

/// A new key's record, inserted `completed` with its response by the creation's own batch — one
/// transaction instead of a claim and a completion. Its count is 0 when the key already exists
/// (in flight, completed or expired): the caller must then roll back and go through [`begin`].
#[allow(clippy::too_many_arguments)]
pub fn insert_completed_in(
    writes: &mut Writes,
    account: AccountId,
    key: &IdempotencyKey,
    fingerprint: &[u8],
    settings: IdempotencySettings,
    status: u16,
    body: &[u8],
    withdrawal: WithdrawalId,
) -> Written {
    let now = DbTime::now();
    writes.push(
        Sql::new(
            "INSERT INTO idempotency_records
                 (account_id, key, fingerprint, locked_at, created_at, expires_at, response_status, response_body,
                  withdrawal_id, state)
             VALUES (",
        )
        .binds([
            Arg::Uuid(account.0),
            key.as_str().into(),
            fingerprint.into(),
            Arg::Time(now),
            Arg::Time(now),
            Arg::Time(now.plus(settings.retention)),
            Arg::I64(i64::from(status)),
            body.into(),
            Arg::Uuid(withdrawal.0),
        ])
        .sql(", 'completed') ON CONFLICT (account_id, key) DO NOTHING"),
    )
}

/// [`complete`] as a write of a larger batch; its count (the returned index) is 1, or 0 if the
/// claim was lost and the caller must roll back.
pub fn complete_in(
    writes: &mut Writes,
    key: &IdempotencyKey,
    claim: Claim,
    status: u16,
    body: &[u8],
    withdrawal: Option<WithdrawalId>,
) -> Written {
    writes.push(
        Sql::new("UPDATE idempotency_records SET state = 'completed', response_status = ")
            .bind(i64::from(status))
            .sql(", response_body = ")
            .bind(body)
            .sql(", withdrawal_id = ")
            .bind(withdrawal.map(|w| w.0))
            .sql(" WHERE account_id = ")
            .bind(claim.account_id.0)
            .sql(" AND key = ")
            .bind(key.as_str())
            .sql(" AND state = 'in_progress' AND locked_at = ")
            .bind(claim.locked_at),
    )
}

/// Gives a key back after a request that changed nothing (e.g. insufficient funds), so the
/// client may retry it with the same key.
pub async fn release(db: &Db, key: &IdempotencyKey, claim: Claim) -> Result<()> {
    let mut tx = db.begin().await?;
    with_conn!(&mut tx, |conn| {
        sqlx::query(
            "DELETE FROM idempotency_records
             WHERE account_id = $1 AND key = $2 AND state = 'in_progress' AND locked_at = $3",
        )
        .bind(claim.account_id.0)
        .bind(key.as_str())
        .bind(claim.locked_at)
        .execute(&mut *conn)
        .await?;
    });
    tx.commit().await
}

/// Deletes completed records past their retention, `batch` at a time, each batch its own short
/// transaction (a long purge never holds locks or bloats one transaction); returns how many.
pub async fn purge_expired(db: &Db, batch: i64) -> Result<u64> {
    let now = DbTime::now();
    let mut purged = 0;
    loop {
        let mut tx = db.begin().await?;
        let deleted = with_conn!(&mut tx, |conn| {
            sqlx::query(
                "DELETE FROM idempotency_records WHERE (account_id, key) IN
                   (SELECT account_id, key FROM idempotency_records
                    WHERE expires_at <= $1 AND state = 'completed' ORDER BY expires_at LIMIT $2)",
            )
            .bind(now)
            .bind(batch.max(1))
            .execute(&mut *conn)
            .await?
            .rows_affected()
        });
        tx.commit().await?;
        purged += deleted;
        if deleted < batch.max(1) as u64 {
            return Ok(purged);
        }
    }
}
