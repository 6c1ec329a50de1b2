//! Withdrawals as stored and read: one, many, a page of an account's, a page in one state with
//! why each waits there (the review queue).
//!
//! A withdrawal is keyed by (account, id) ([`WithdrawalKey`]): reads that know the account name
//! it, so a distributed database routes them to one shard — a job or a letter carries its
//! withdrawal's account. The reads by id alone ([`find`], [`get_many`]) serve the callers that
//! hold only an id — an operator's URL, a settlement line's key at import — through a plain index
//! on `withdrawals (id)`; on a distributed database they fan out (README "Scaling").

use sqlx::types::Json;
use uuid::Uuid;

use crate::domain::{
    AccountId, Amount, AttemptResult, Category, Currency, Destination, ReconciliationResult, Withdrawal, WithdrawalId,
    WithdrawalKey, WithdrawalStatus,
};
use crate::storage::{Backend, DbTime, Result, StorageError, Tx};
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

/// A review-queue filter by why a withdrawal waits (README "Why each review item waits"):
/// a kind (`dead_letter`, `reconciliation`, `unknown`) or one exact reason
/// (`dead_letter:retries_exhausted`, `reconciliation:window_expired`). The caller checks the
/// value against the vocabulary; here it is compared with [`REASON_KIND`] or [`REASON`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasonFilter<'a> {
    Kind(&'a str),
    Exact(&'a str),
}

/// A value the provider gave about a withdrawal, as stored: by whom, what, when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said<T> {
    pub provider: String,
    pub value: T,
    pub at: DbTime,
}

/// A withdrawal's newest dead letter, as the review queue shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewestLetter {
    pub id: Uuid,
    pub category: Category,
    pub error_code: String,
    pub failed_at: DbTime,
}

/// One row of the review queue: the withdrawal and the stored evidence of why it waits, all read
/// in the page's one statement.
#[derive(Debug, Clone)]
pub struct QueueItem {
    pub withdrawal: Withdrawal,
    /// `dead_letter:<category>`, `reconciliation:<result>` or `unknown` ([`REASON`]).
    pub reason: String,
    /// Its newest dead letter (every entry into `requires_review` writes one: `dead_letter::bury`).
    pub letter: Option<NewestLetter>,
    /// Reconciliation's newest result of any kind.
    pub reconciliation: Option<ReconciliationResult>,
    /// Reconciliation's newest result that is the provider's answer (not `window_expired` or
    /// `skipped`, which are the service's own verdicts).
    pub provider_answer: Option<Said<ReconciliationResult>>,
    /// The newest provider attempt with a recorded outcome, at its finish.
    pub attempt: Option<Said<AttemptResult>>,
}

#[derive(Debug, sqlx::FromRow)]
struct QueueRow {
    #[sqlx(flatten)]
    withdrawal: WithdrawalRow,
    reason: String,
    letter_id: Option<Uuid>,
    letter_category: Option<Category>,
    letter_code: Option<String>,
    letter_failed_at: Option<DbTime>,
    reconciliation: Option<ReconciliationResult>,
    answer_provider: Option<String>,
    answer: Option<ReconciliationResult>,
    answer_at: Option<DbTime>,
    attempt_provider: Option<String>,
    attempt_outcome: Option<AttemptResult>,
    attempt_at: Option<DbTime>,
}

impl TryFrom<QueueRow> for QueueItem {
    type Error = StorageError;
    fn try_from(row: QueueRow) -> Result<Self> {
        let letter = match (row.letter_id, row.letter_category, row.letter_code, row.letter_failed_at) {
            (Some(id), Some(category), Some(error_code), Some(failed_at)) => {
                Some(NewestLetter { id, category, error_code, failed_at })
            }
            _ => None,
        };
        let said = |provider: Option<String>, at: Option<DbTime>| provider.zip(at);
        Ok(QueueItem {
            withdrawal: Withdrawal::try_from(row.withdrawal)?,
            reason: row.reason,
            letter,
            reconciliation: row.reconciliation,
            provider_answer: said(row.answer_provider, row.answer_at)
                .zip(row.answer)
                .map(|((provider, at), value)| Said { provider, value, at }),
            attempt: said(row.attempt_provider, row.attempt_at)
                .zip(row.attempt_outcome)
                .map(|((provider, at), value)| Said { provider, value, at }),
        })
    }
}

/// What put a withdrawal in review, over the page's newest dead letter `d` and newest
/// reconciliation result `r`: `reconciliation` when a reconciliation job wrote the letter (and
/// reconciliation has a result), `dead_letter` for any other letter, `unknown` without one.
pub const REASON_KIND: &str = "CASE WHEN d.id IS NULL THEN 'unknown' \
     WHEN d.job_type = 'reconcile_payout' AND r.id IS NOT NULL THEN 'reconciliation' ELSE 'dead_letter' END";

/// [`REASON_KIND`] with its detail: the letter's category, or reconciliation's newest result.
pub const REASON: &str = "CASE WHEN d.id IS NULL THEN 'unknown' \
     WHEN d.job_type = 'reconcile_payout' AND r.id IS NOT NULL THEN 'reconciliation:' || r.result \
     ELSE 'dead_letter:' || d.category END";

/// The joins of the review queue's page: per withdrawal `w`, its newest dead letter `d`, newest
/// reconciliation result `r`, newest provider answer among them `ra` and newest finished attempt
/// `a` — each one index probe on the table's (account, withdrawal) index. PostgreSQL reads each
/// as a `LATERAL` subquery; SQLite (no `LATERAL`) joins the row whose id a correlated subquery
/// picks.
fn newest_joins(backend: Backend) -> String {
    let newest = [
        ("d", "dead_letters", "", "x.failed_at DESC, x.id DESC"),
        ("r", "reconciliation_results", "", "x.at DESC, x.id DESC"),
        ("ra", "reconciliation_results", "AND x.result NOT IN ('window_expired', 'skipped')", "x.at DESC, x.id DESC"),
        ("a", "provider_attempts", "AND x.outcome IS NOT NULL", "x.attempt_no DESC"),
    ];
    newest
        .iter()
        .map(|(alias, table, only, order)| {
            let pick = format!(
                "FROM {table} x WHERE x.account_id = w.account_id AND x.withdrawal_id = w.id {only} \
                 ORDER BY {order} LIMIT 1"
            );
            match backend {
                Backend::Postgres => format!("\n LEFT JOIN LATERAL (SELECT x.* {pick}) {alias} ON true"),
                Backend::Sqlite => format!(
                    "\n LEFT JOIN {table} {alias} ON {alias}.account_id = w.account_id AND {alias}.id = (SELECT x.id {pick})"
                ),
            }
        })
        .collect()
}

/// A page of withdrawals in one status, oldest change first (the review queue: longest waiting
/// first), strictly after `after` = (updated_at, id), each with why it waits and what the provider
/// last said — one statement for the page, whatever its size; `reason` keeps only the matching.
pub async fn queue_page(
    db: &crate::storage::Db,
    status: WithdrawalStatus,
    account: Option<AccountId>,
    reason: Option<ReasonFilter<'_>>,
    limit: i64,
    after: Option<(DbTime, Uuid)>,
) -> Result<Vec<QueueItem>> {
    let columns: Vec<String> = COLUMNS.split(',').map(|c| format!("w.{}", c.trim())).collect();
    let columns = columns.join(", ");
    let joins = newest_joins(db.backend());
    let (kind, exact) = match reason {
        Some(ReasonFilter::Kind(kind)) => (Some(kind), None),
        Some(ReasonFilter::Exact(exact)) => (None, Some(exact)),
        None => (None, None),
    };
    let sql = format!(
        "SELECT {columns}, {REASON} AS reason,
                d.id AS letter_id, d.category AS letter_category, d.error_code AS letter_code,
                d.failed_at AS letter_failed_at, r.result AS reconciliation,
                ra.provider AS answer_provider, ra.result AS answer, ra.at AS answer_at,
                a.provider AS attempt_provider, a.outcome AS attempt_outcome,
                COALESCE(a.finished_at, a.started_at) AS attempt_at
         FROM withdrawals w {joins}
         WHERE w.status = $1 AND ($2 IS NULL OR w.updated_at > $2 OR (w.updated_at = $2 AND w.id > $3))
           AND ($5 IS NULL OR w.account_id = $5)
           AND ($6 IS NULL OR {REASON_KIND} = $6) AND ($7 IS NULL OR {REASON} = $7)
         ORDER BY w.updated_at, w.id LIMIT $4"
    );
    let rows: Vec<QueueRow> = with_read_conn!(db, |conn| {
        sqlx::query_as(&sql)
            .bind(status.as_str())
            .bind(after.map(|a| a.0))
            .bind(after.map(|a| a.1))
            .bind(limit)
            .bind(account.map(|a| a.0))
            .bind(kind)
            .bind(exact)
            .fetch_all(&mut *conn)
            .await?
    });
    rows.into_iter().map(QueueItem::try_from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::job::JobKind;

    #[test]
    fn the_reason_names_the_reconciliation_job_kind_as_it_is_stored() {
        let kind = format!("d.job_type = '{}'", JobKind::ReconcilePayout.as_str());
        assert!(REASON.contains(&kind) && REASON_KIND.contains(&kind), "{REASON}");
    }
}
