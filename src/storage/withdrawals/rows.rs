//! Withdrawals as stored and read: one, many, a page of an account's, a page in one state.
//!
//! A withdrawal is keyed by (account, id) ([`WithdrawalKey`]): reads that know the account name
//! it, so a distributed database routes them to one shard — a job or a letter carries its
//! withdrawal's account. The reads by id alone ([`find`], [`get_many`]) serve the callers that
//! hold only an id — an operator's URL, a settlement line's key at import — through a plain index
//! on `withdrawals (id)`; on a distributed database they fan out (README "Scaling").

use sqlx::types::Json;
use uuid::Uuid;

use crate::domain::{
    AccountId, Amount, Currency, Destination, Withdrawal, WithdrawalId, WithdrawalKey, WithdrawalStatus,
};
use crate::storage::{DbTime, Result, StorageError, Tx};
use crate::{with_conn, with_read_conn};

pub(super) const COLUMNS: &str =
    "id, account_id, status, amount, currency, destination, reference, failure_code, version, \
                       idempotency_key, correlation_id, created_at, updated_at, sandbox";

#[derive(Debug, sqlx::FromRow)]
pub(super) struct WithdrawalRow {
    id: Uuid,
    account_id: Uuid,
    status: String,
    amount: i64,
    currency: String,
    destination: Json<Destination>,
    reference: Option<String>,
    failure_code: Option<String>,
    version: i64,
    idempotency_key: String,
    correlation_id: String,
    created_at: DbTime,
    updated_at: DbTime,
    sandbox: bool,
}

impl TryFrom<WithdrawalRow> for Withdrawal {
    type Error = StorageError;
    fn try_from(row: WithdrawalRow) -> Result<Self> {
        let currency = Currency::parse(&row.currency).map_err(StorageError::corrupt)?;
        Ok(Withdrawal {
            id: WithdrawalId(row.id),
            account_id: AccountId(row.account_id),
            status: row.status.parse().map_err(StorageError::corrupt)?,
            amount: Amount::from_minor(row.amount, currency).map_err(StorageError::corrupt)?,
            destination: row.destination.0,
            reference: row.reference,
            failure_code: row.failure_code,
            version: row.version,
            idempotency_key: row.idempotency_key,
            correlation_id: row.correlation_id,
            created_at: row.created_at.0,
            updated_at: row.updated_at.0,
            sandbox: row.sandbox,
        })
    }
}

/// Reads one withdrawal of one account (another account's withdrawal reads as absent).
pub async fn get(db: &crate::storage::Db, key: WithdrawalKey) -> Result<Option<Withdrawal>> {
    let row: Option<WithdrawalRow> = with_read_conn!(db, |conn| {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM withdrawals WHERE account_id = $1 AND id = $2"))
            .bind(key.account.0)
            .bind(key.id.0)
            .fetch_optional(&mut *conn)
            .await?
    });
    row.map(Withdrawal::try_from).transpose()
}

/// Reads one withdrawal by its id alone, whatever its account (operators, and jobs until they
/// carry the account).
pub async fn find(db: &crate::storage::Db, id: WithdrawalId) -> Result<Option<Withdrawal>> {
    let row: Option<WithdrawalRow> = with_read_conn!(db, |conn| {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM withdrawals WHERE id = $1"))
            .bind(id.0)
            .fetch_optional(&mut *conn)
            .await?
    });
    row.map(Withdrawal::try_from).transpose()
}

/// Ids per statement in [`get_many`]: well under both backends' bound-parameter limits.
const IDS_PER_QUERY: usize = 500;

/// The withdrawals among `ids` that exist, one query per [`IDS_PER_QUERY`] ids, in no
/// particular order (absent ids are simply missing).
pub async fn get_many(db: &crate::storage::Db, ids: &[WithdrawalId]) -> Result<Vec<Withdrawal>> {
    let mut found = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(IDS_PER_QUERY) {
        let rows: Vec<WithdrawalRow> = with_read_conn!(db, |conn| {
            let mut query = sqlx::QueryBuilder::new(format!("SELECT {COLUMNS} FROM withdrawals WHERE id IN ("));
            let mut list = query.separated(", ");
            for id in chunk {
                list.push_bind(id.0);
            }
            query.push(")");
            query.build_query_as::<WithdrawalRow>().fetch_all(&mut *conn).await?
        });
        for row in rows {
            found.push(Withdrawal::try_from(row)?);
        }
    }
    Ok(found)
}

/// The withdrawals among `keys` that exist, one query per [`IDS_PER_QUERY`] keys, in no
/// particular order (absent ones are simply missing): [`get`] for a batch, each named by its
/// account (settlement matching, whose lines carry the account).
pub async fn get_many_keyed(db: &crate::storage::Db, keys: &[WithdrawalKey]) -> Result<Vec<Withdrawal>> {
    let mut found = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(IDS_PER_QUERY) {
        let rows: Vec<WithdrawalRow> = with_read_conn!(db, |conn| {
            let mut query = sqlx::QueryBuilder::new(format!("SELECT {COLUMNS} FROM withdrawals WHERE "));
            crate::storage::push_keys_in(&mut query, "(account_id, id)", chunk.iter().map(|k| (k.account.0, k.id.0)));
            query.build_query_as::<WithdrawalRow>().fetch_all(&mut *conn).await?
        });
        for row in rows {
            found.push(Withdrawal::try_from(row)?);
        }
    }
    Ok(found)
}

/// Reads one withdrawal inside a transaction (workers decide on what they will write against).
pub async fn get_in_tx(tx: &mut Tx, key: WithdrawalKey) -> Result<Option<Withdrawal>> {
    let row: Option<WithdrawalRow> = with_conn!(tx, |conn| {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM withdrawals WHERE account_id = $1 AND id = $2"))
            .bind(key.account.0)
            .bind(key.id.0)
            .fetch_optional(&mut *conn)
            .await?
    });
    row.map(Withdrawal::try_from).transpose()
}

/// The latest provider attempt of a withdrawal, as the payout handler needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastAttempt {
    pub attempt_no: i64,
    /// Whether it has an outcome (one without may have reached the provider).
    pub finished: bool,
}

/// A withdrawal with its latest provider attempt, before the caller's `WHERE`.
fn with_last_attempt() -> String {
    const LATEST: &str = "FROM provider_attempts a WHERE a.account_id = w.account_id AND a.withdrawal_id = w.id
                          ORDER BY a.attempt_no DESC LIMIT 1";
    format!(
        "SELECT {COLUMNS}, (SELECT a.attempt_no {LATEST}) AS last_attempt_no,
                (SELECT a.outcome IS NOT NULL {LATEST}) AS last_attempt_finished
         FROM withdrawals w"
    )
}

#[derive(Debug, sqlx::FromRow)]
struct WithLastAttemptRow {
    #[sqlx(flatten)]
    withdrawal: WithdrawalRow,
    last_attempt_no: Option<i64>,
    last_attempt_finished: Option<bool>,
}

/// [`get_in_tx`] with the withdrawal's latest provider attempt, in one query (the payout
/// handler's first read).
pub async fn get_with_last_attempt(
    tx: &mut Tx,
    key: WithdrawalKey,
) -> Result<Option<(Withdrawal, Option<LastAttempt>)>> {
    let row: Option<WithLastAttemptRow> = with_conn!(tx, |conn| {
        sqlx::query_as(&format!("{} WHERE w.account_id = $1 AND w.id = $2", with_last_attempt()))
            .bind(key.account.0)
            .bind(key.id.0)
            .fetch_optional(&mut *conn)
            .await?
    });
    row.map(WithLastAttemptRow::parse).transpose()
}

/// [`get_with_last_attempt`] for many withdrawals in one query (a claimed batch's first read),
/// in no particular order; absent ones are simply missing.
pub async fn get_many_with_last_attempt(
    tx: &mut Tx,
    keys: &[WithdrawalKey],
) -> Result<Vec<(Withdrawal, Option<LastAttempt>)>> {
    let mut found = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(IDS_PER_QUERY) {
        let rows: Vec<WithLastAttemptRow> = with_conn!(tx, |conn| {
            let mut query = sqlx::QueryBuilder::new(format!("{} WHERE ", with_last_attempt()));
            let keys = chunk.iter().map(|k| (k.account.0, k.id.0));
            crate::storage::push_keys_in(&mut query, "(w.account_id, w.id)", keys);
            query.build_query_as::<WithLastAttemptRow>().fetch_all(&mut *conn).await?
        });
        for row in rows {
            found.push(row.parse()?);
        }
    }
    Ok(found)
}

impl WithLastAttemptRow {
    fn parse(self) -> Result<(Withdrawal, Option<LastAttempt>)> {
        let last = match (self.last_attempt_no, self.last_attempt_finished) {
            (Some(attempt_no), Some(finished)) => Some(LastAttempt { attempt_no, finished }),
            _ => None,
        };
        Ok((Withdrawal::try_from(self.withdrawal)?, last))
    }
}

/// Position in a newest-first listing: the last item's id. Ids are UUIDv7, minted at creation,
/// so id order is creation order, and the page is read along the (account_id, id) primary key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCursor {
    pub id: Uuid,
}

/// One page of an account's withdrawals, newest first, strictly after `cursor`.
pub async fn list(
    db: &crate::storage::Db,
    account: AccountId,
    status: Option<WithdrawalStatus>,
    limit: u32,
    cursor: Option<PageCursor>,
) -> Result<Vec<Withdrawal>> {
    // The first page and the next ones are two statements, so each reads the key range it needs.
    let after = if cursor.is_some() { "AND id < $4" } else { "" };
    let sql = format!(
        "SELECT {COLUMNS} FROM withdrawals
         WHERE account_id = $1 AND ($2 IS NULL OR status = $2) {after}
         ORDER BY id DESC LIMIT $3"
    );
    let rows: Vec<WithdrawalRow> = with_read_conn!(db, |conn| {
        let query =
            sqlx::query_as(&sql).bind(account.0).bind(status.map(WithdrawalStatus::as_str)).bind(i64::from(limit));
        match cursor {
            Some(cursor) => query.bind(cursor.id).fetch_all(&mut *conn).await?,
            None => query.fetch_all(&mut *conn).await?,
        }
    });
    rows.into_iter().map(Withdrawal::try_from).collect()
}

/// How many withdrawals exist in each status (tests, and the operator overview later).
pub async fn count_for_account(db: &crate::storage::Db, account: AccountId) -> Result<i64> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM withdrawals WHERE account_id = $1")
            .bind(account.0)
            .fetch_one(&mut *conn)
            .await?
    }))
}

/// A page of withdrawals in one status, oldest change first (the review queue: longest waiting
/// first), strictly after `after` = (updated_at, id).
pub async fn list_by_status(
    db: &crate::storage::Db,
    status: WithdrawalStatus,
    account: Option<AccountId>,
    limit: i64,
    after: Option<(DbTime, Uuid)>,
) -> Result<Vec<Withdrawal>> {
    let rows: Vec<WithdrawalRow> = with_read_conn!(db, |conn| {
        sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM withdrawals
             WHERE status = $1 AND ($2 IS NULL OR updated_at > $2 OR (updated_at = $2 AND id > $3))
               AND ($5 IS NULL OR account_id = $5)
             ORDER BY updated_at, id LIMIT $4"
        ))
        .bind(status.as_str())
        .bind(after.map(|a| a.0))
        .bind(after.map(|a| a.1))
        .bind(limit)
        .bind(account.map(|a| a.0))
        .fetch_all(&mut *conn)
        .await?
    });
    rows.into_iter().map(Withdrawal::try_from).collect()
}
