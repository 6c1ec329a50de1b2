//! Stored credentials: customer API keys and operator tokens, hashed (never the secret itself),
//! and their lifecycle: several labelled keys per account, revoked with a reason; operators
//! disabled and enabled with a reason, their token's hash replaced on rotation. Rows that list
//! credentials never carry the hash. Every write of an operator's credential (create, rotate,
//! re-enable) records who issued it ([`Issuer`]), for the two-person rule (SPEC §8).

use uuid::Uuid;

use super::{DbTime, Result, Tx, TxConn};
use crate::domain::{AccountId, ApiKeyId, OperatorId, Role};
use crate::{with_conn, with_read_conn};

/// What authentication needs of an API key.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredApiKey {
    pub account_id: Uuid,
    pub secret_hash: Vec<u8>,
    pub revoked_at: Option<DbTime>,
    pub last_used_at: Option<DbTime>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredOperator {
    pub id: Uuid,
    pub name: String,
    pub role: Role,
    pub secret_hash: Vec<u8>,
    pub disabled_at: Option<DbTime>,
}

/// An API key as operators see it: no secret, no hash.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ApiKeyRow {
    pub id: Uuid,
    pub account_id: Uuid,
    pub label: Option<String>,
    pub created_at: DbTime,
    pub last_used_at: Option<DbTime>,
    pub revoked_at: Option<DbTime>,
    pub revoked_reason: Option<String>,
}

/// An operator as admins see them: no hash.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct OperatorRow {
    pub id: Uuid,
    pub name: String,
    pub role: Role,
    pub created_at: DbTime,
    pub disabled_at: Option<DbTime>,
    pub disabled_reason: Option<String>,
    pub token_rotated_at: Option<DbTime>,
    /// Who issued the current credential: an operator, or [`LOCAL_ACTOR`]; `None` before 0019.
    pub credential_issued_by: Option<Uuid>,
    /// The issuer's name when it was issued (`local:<os user>` for the local actor).
    pub credential_issuer_name: Option<String>,
}

/// The reserved operator row that stands for a local actor: someone who ran a command with only
/// `DATABASE_URL` (no token). Disabled, with an empty hash, so it can never sign in; audit rows
/// and credential issuers name it (with the OS user) because they must name an operator row.
pub const LOCAL_ACTOR: OperatorId = OperatorId(Uuid::nil());

/// Who issued a credential: an operator's id, and their name then (for a local actor, the nil id
/// and `local:<os user>`).
#[derive(Debug, Clone, PartialEq)]
pub struct Issuer {
    pub id: OperatorId,
    pub name: String,
}

const KEY_COLUMNS: &str = "id, account_id, label, created_at, last_used_at, revoked_at, revoked_reason";
const OPERATOR_COLUMNS: &str = "id, name, role, created_at, disabled_at, disabled_reason, token_rotated_at, \
                                credential_issued_by, credential_issuer_name";

pub async fn insert_api_key(
    tx: &mut Tx,
    key_id: ApiKeyId,
    account: AccountId,
    label: Option<&str>,
    secret_hash: &[u8],
) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query(
            "INSERT INTO api_keys (id, account_id, label, secret_hash, created_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(key_id)
        .bind(account.0)
        .bind(label)
        .bind(secret_hash)
        .bind(DbTime::now())
        .execute(&mut *conn)
        .await?;
    });
    Ok(())
}

/// Read on every customer request: no cache sits in front of it, so a revoke is seen by the
/// next request on every instance. The token names the key, not its account, so this reads by
/// the key's id alone (a plain index; on a distributed database, a fan-out — README "Scaling").
/// Every later statement about the key names its account.
pub async fn find_api_key(db: &super::Db, key_id: ApiKeyId) -> Result<Option<StoredApiKey>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, StoredApiKey>(
            "SELECT account_id, secret_hash, revoked_at, last_used_at FROM api_keys WHERE id = $1",
        )
        .bind(key_id)
        .fetch_optional(&mut *conn)
        .await?
    }))
}

/// Records that `account`'s key was used at `at`, unless a later use is already recorded.
pub async fn touch_api_key(db: &super::Db, account: AccountId, key_id: ApiKeyId, at: DbTime) -> Result<()> {
    let mut tx = db.begin().await?;
    with_conn!(&mut tx, |conn| {
        sqlx::query(
            "UPDATE api_keys SET last_used_at = $3
             WHERE account_id = $1 AND id = $2 AND (last_used_at IS NULL OR last_used_at < $3)",
        )
        .bind(account)
        .bind(key_id)
        .bind(at)
        .execute(&mut *conn)
        .await?;
    });
    tx.commit().await
}

/// A key by its id alone, whatever its account (operators name keys by id).
pub async fn get_api_key(db: &super::Db, key_id: ApiKeyId) -> Result<Option<ApiKeyRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ApiKeyRow>(&format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = $1"))
            .bind(key_id)
            .fetch_optional(&mut *conn)
            .await?
    }))
}

/// An account's keys, oldest first, revoked ones included; `None` if there is no such account.
pub async fn list_api_keys(db: &super::Db, account: AccountId) -> Result<Option<Vec<ApiKeyRow>>> {
    Ok(with_read_conn!(db, |conn| {
        let known: Option<i32> = sqlx::query_scalar("SELECT 1 FROM accounts WHERE id = $1")
            .bind(account.0)
            .fetch_optional(&mut *conn)
            .await?;
        match known {
            None => None,
            Some(_) => Some(
                sqlx::query_as::<_, ApiKeyRow>(&format!(
                    "SELECT {KEY_COLUMNS} FROM api_keys WHERE account_id = $1 ORDER BY created_at, id"
                ))
                .bind(account.0)
                .fetch_all(&mut *conn)
                .await?,
            ),
        }
    }))
}

/// Revokes `account`'s live key. Returns the revoked row, or `None` if it was already revoked (or
/// unknown).
pub async fn revoke_api_key(
    tx: &mut Tx,
    account: AccountId,
    key_id: ApiKeyId,
    reason: &str,
) -> Result<Option<ApiKeyRow>> {
    Ok(with_conn!(tx, |conn| {
        sqlx::query_as::<_, ApiKeyRow>(&format!(
            "UPDATE api_keys SET revoked_at = $2, revoked_reason = $3
             WHERE account_id = $4 AND id = $1 AND revoked_at IS NULL
             RETURNING {KEY_COLUMNS}"
        ))
        .bind(key_id)
        .bind(DbTime::now())
        .bind(reason)
        .bind(account)
        .fetch_optional(&mut *conn)
        .await?
    }))
}

pub async fn insert_operator(
    tx: &mut Tx,
    id: OperatorId,
    name: &str,
    role: Role,
    secret_hash: &[u8],
    issuer: &Issuer,
) -> Result<()> {
    if issuer.id == LOCAL_ACTOR {
        ensure_local_actor(tx).await?;
    }
    with_conn!(tx, |conn| {
        sqlx::query(
            "INSERT INTO operators (id, name, role, secret_hash, created_at, credential_issued_by, \
             credential_issuer_name) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(id.0)
        .bind(name)
        .bind(role)
        .bind(secret_hash)
        .bind(DbTime::now())
        .bind(issuer.id.0)
        .bind(&issuer.name)
        .execute(&mut *conn)
        .await?;
    });
    Ok(())
}

/// Creates the [`LOCAL_ACTOR`] row if it is missing (disabled, an empty hash: it never signs in).
pub async fn ensure_local_actor(tx: &mut Tx) -> Result<()> {
    let now = DbTime::now();
    with_conn!(tx, |conn| {
        sqlx::query(
            "INSERT INTO operators (id, name, role, secret_hash, created_at, disabled_at, disabled_reason) \
             VALUES ($1, 'local', 'viewer', $2, $3, $3, 'reserved: stands for commands run with only DATABASE_URL') \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(LOCAL_ACTOR.0)
        .bind(Vec::<u8>::new())
        .bind(now)
        .execute(&mut *conn)
        .await?;
    });
    Ok(())
}

/// Read on every operator request (no cache): a disable or a rotation is seen at once.
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

pub async fn get_operator(db: &super::Db, id: OperatorId) -> Result<Option<OperatorRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, OperatorRow>(&format!("SELECT {OPERATOR_COLUMNS} FROM operators WHERE id = $1"))
            .bind(id.0)
            .fetch_optional(&mut *conn)
            .await?
    }))
}

/// The names of the operators `ids` (for views that show who did what, not an id).
pub async fn operator_names(
    db: &super::Db,
    ids: &[uuid::Uuid],
) -> Result<std::collections::HashMap<uuid::Uuid, String>> {
    if ids.is_empty() {
        return Ok(Default::default());
    }
    let sql = format!("SELECT id, name FROM operators WHERE id IN ({})", super::placeholders(ids.len()));
    let rows: Vec<(uuid::Uuid, String)> = with_read_conn!(db, |conn| {
        let mut q = sqlx::query_as::<_, (uuid::Uuid, String)>(&sql);
        for id in ids {
            q = q.bind(*id);
        }
        q.fetch_all(&mut *conn).await?
    });
    Ok(rows.into_iter().collect())
}

/// Every operator, oldest first.
pub async fn list_operators(db: &super::Db) -> Result<Vec<OperatorRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, OperatorRow>(&format!(
            "SELECT {OPERATOR_COLUMNS} FROM operators WHERE id <> $1 ORDER BY created_at, id"
        ))
        .bind(LOCAL_ACTOR.0)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// The outcome of [`disable_operator`].
#[derive(Debug, Clone, PartialEq)]
pub enum Disabled {
    Done(OperatorRow),
    NotFound,
    AlreadyDisabled,
    /// The operator is the last enabled admin: disabling them would leave nobody to administer.
    LastAdmin,
}

/// Disables an enabled operator, unless they are the last enabled admin. The admins' rows are
/// locked first, in id order (PostgreSQL; SQLite's one writer serialises), so two admins
/// disabling each other at once cannot both succeed: the second sees the first's commit.
pub async fn disable_operator(tx: &mut Tx, id: OperatorId, reason: &str) -> Result<Disabled> {
    const ADMINS: &str = "SELECT id, disabled_at FROM operators WHERE role = 'admin' ORDER BY id";
    let admins: Vec<(Uuid, Option<DbTime>)> = match &mut tx.conn {
        TxConn::Postgres(t) => sqlx::query_as(&format!("{ADMINS} FOR UPDATE")).fetch_all(&mut **t).await?,
        TxConn::Sqlite(t) => sqlx::query_as(ADMINS).fetch_all(&mut **t).await?,
    };
    let current: Option<(Role, Option<DbTime>)> = with_conn!(tx, |conn| {
        sqlx::query_as("SELECT role, disabled_at FROM operators WHERE id = $1")
            .bind(id.0)
            .fetch_optional(&mut *conn)
            .await?
    });
    let Some((role, disabled_at)) = current else { return Ok(Disabled::NotFound) };
    if disabled_at.is_some() {
        return Ok(Disabled::AlreadyDisabled);
    }
    let other_enabled_admins = admins.iter().filter(|(admin, at)| *admin != id.0 && at.is_none()).count();
    if role == Role::Admin && other_enabled_admins == 0 {
        return Ok(Disabled::LastAdmin);
    }
    let row = with_conn!(tx, |conn| {
        sqlx::query_as::<_, OperatorRow>(&format!(
            "UPDATE operators SET disabled_at = $2, disabled_reason = $3 WHERE id = $1 AND disabled_at IS NULL
             RETURNING {OPERATOR_COLUMNS}"
        ))
        .bind(id.0)
        .bind(DbTime::now())
        .bind(reason)
        .fetch_optional(&mut *conn)
        .await?
    });
    Ok(row.map(Disabled::Done).unwrap_or(Disabled::AlreadyDisabled))
}

/// Enables a disabled operator (the same token works again): the token is issued anew by
/// `issuer`, since whoever re-enables it decides that it counts again. `None` if not disabled,
/// unknown, or the local actor's reserved row.
pub async fn enable_operator(tx: &mut Tx, id: OperatorId, issuer: &Issuer) -> Result<Option<OperatorRow>> {
    Ok(with_conn!(tx, |conn| {
        sqlx::query_as::<_, OperatorRow>(&format!(
            "UPDATE operators SET disabled_at = NULL, disabled_reason = NULL, credential_issued_by = $2,
             credential_issuer_name = $3 WHERE id = $1 AND disabled_at IS NOT NULL AND id <> $4
             RETURNING {OPERATOR_COLUMNS}"
        ))
        .bind(id.0)
        .bind(issuer.id.0)
        .bind(&issuer.name)
        .bind(LOCAL_ACTOR.0)
        .fetch_optional(&mut *conn)
        .await?
    }))
}

/// Replaces an operator's token hash, issued by `issuer`: the old token stops verifying with this
/// commit. `None` if the operator is unknown (or the local actor's reserved row).
pub async fn rotate_operator_secret(
    tx: &mut Tx,
    id: OperatorId,
    secret_hash: &[u8],
    issuer: &Issuer,
) -> Result<Option<OperatorRow>> {
    Ok(with_conn!(tx, |conn| {
        sqlx::query_as::<_, OperatorRow>(&format!(
            "UPDATE operators SET secret_hash = $2, token_rotated_at = $3, credential_issued_by = $4,
             credential_issuer_name = $5 WHERE id = $1 AND id <> $6 RETURNING {OPERATOR_COLUMNS}"
        ))
        .bind(id.0)
        .bind(secret_hash)
        .bind(DbTime::now())
        .bind(issuer.id.0)
        .bind(&issuer.name)
        .bind(LOCAL_ACTOR.0)
        .fetch_optional(&mut *conn)
        .await?
    }))
}
