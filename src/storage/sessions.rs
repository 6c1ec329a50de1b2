//! Operator console sessions (issue 9): created at sign-in, found by the cookie's id and checked
//! against the stored SHA-256 of its secret, ended at sign-out. Expiry is a stored time, so every
//! instance sharing the database agrees on it.

use uuid::Uuid;

use super::{Db, DbTime, Result, Tx};
use crate::domain::{OperatorId, Role, SessionId};
use crate::{with_conn, with_read_conn};

/// A live session and the operator it belongs to.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredSession {
    pub id: Uuid,
    pub secret_hash: Vec<u8>,
    pub expires_at: DbTime,
    pub ended_at: Option<DbTime>,
    pub operator_id: Uuid,
    pub operator_name: String,
    pub operator_role: Role,
    pub operator_disabled_at: Option<DbTime>,
}

pub async fn insert(
    tx: &mut Tx,
    id: SessionId,
    operator: OperatorId,
    secret_hash: &[u8],
    expires_at: DbTime,
) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query(
            "INSERT INTO console_sessions (id, operator_id, secret_hash, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(id)
        .bind(operator)
        .bind(secret_hash)
        .bind(DbTime::now())
        .bind(expires_at)
        .execute(&mut *conn)
        .await?;
    });
    Ok(())
}

pub async fn find(db: &Db, id: SessionId) -> Result<Option<StoredSession>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, StoredSession>(
            "SELECT s.id, s.secret_hash, s.expires_at, s.ended_at, o.id AS operator_id, o.name AS operator_name,
                    o.role AS operator_role, o.disabled_at AS operator_disabled_at
               FROM console_sessions s JOIN operators o ON o.id = s.operator_id
              WHERE s.id = $1",
        )
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
    }))
}

/// Ends a session (sign-out). Returns whether it was still live.
pub async fn end(tx: &mut Tx, id: SessionId) -> Result<bool> {
    let ended = with_conn!(tx, |conn| {
        sqlx::query("UPDATE console_sessions SET ended_at = $2 WHERE id = $1 AND ended_at IS NULL")
            .bind(id)
            .bind(DbTime::now())
            .execute(&mut *conn)
            .await?
            .rows_affected()
    });
    Ok(ended == 1)
}

/// Ends every live session of an operator (disabled, or their token rotated): re-enabling them
/// later does not bring an old sign-in back. Returns how many were live.
pub async fn end_all_for_operator(tx: &mut Tx, operator: OperatorId) -> Result<u64> {
    let ended = with_conn!(tx, |conn| {
        sqlx::query("UPDATE console_sessions SET ended_at = $2 WHERE operator_id = $1 AND ended_at IS NULL")
            .bind(operator)
            .bind(DbTime::now())
            .execute(&mut *conn)
            .await?
            .rows_affected()
    });
    Ok(ended)
}

/// Deletes sessions that expired before `before` (kept a while after expiry as evidence, beside
/// the audit log's sign-in and sign-out rows). Returns how many.
pub async fn purge_expired(db: &Db, before: DbTime) -> Result<u64> {
    let mut tx = db.begin().await?;
    let deleted = with_conn!(&mut tx, |conn| {
        sqlx::query("DELETE FROM console_sessions WHERE expires_at < $1")
            .bind(before)
            .execute(&mut *conn)
            .await?
            .rows_affected()
    });
    tx.commit().await?;
    Ok(deleted)
}
