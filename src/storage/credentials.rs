//! Stored credentials: customer API keys and operator tokens, hashed (never the secret itself).

use uuid::Uuid;

use super::{DbTime, Result, Tx};
use crate::domain::{AccountId, OperatorId};
use crate::{with_conn, with_read_conn};

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredApiKey {
    pub account_id: Uuid,
    pub secret_hash: Vec<u8>,
    pub revoked_at: Option<DbTime>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredOperator {
    pub id: Uuid,
    pub name: String,
    pub role: String,
    pub secret_hash: Vec<u8>,
    pub disabled_at: Option<DbTime>,
}

pub async fn insert_api_key(tx: &mut Tx, key_id: Uuid, account: AccountId, secret_hash: &[u8]) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query("INSERT INTO api_keys (id, account_id, secret_hash, created_at) VALUES ($1, $2, $3, $4)")
            .bind(key_id)
            .bind(account.0)
            .bind(secret_hash)
            .bind(DbTime::now())
            .execute(&mut *conn)
            .await?;
    });
    Ok(())
}

pub async fn find_api_key(db: &super::Db, key_id: Uuid) -> Result<Option<StoredApiKey>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, StoredApiKey>("SELECT account_id, secret_hash, revoked_at FROM api_keys WHERE id = $1")
            .bind(key_id)
            .fetch_optional(&mut *conn)
            .await?
    }))
}

pub async fn insert_operator(tx: &mut Tx, id: OperatorId, name: &str, role: &str, secret_hash: &[u8]) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query("INSERT INTO operators (id, name, role, secret_hash, created_at) VALUES ($1, $2, $3, $4, $5)")
            .bind(id.0)
            .bind(name)
            .bind(role)
            .bind(secret_hash)
            .bind(DbTime::now())
            .execute(&mut *conn)
            .await?;
    });
    Ok(())
}

pub async fn find_operator(db: &super::Db, id: OperatorId) -> Result<Option<StoredOperator>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, StoredOperator>(
            "SELECT id, name, role, secret_hash, disabled_at FROM operators WHERE id = $1",
        )
        .bind(id.0)
        .fetch_optional(&mut *conn)
        .await?
    }))
}
