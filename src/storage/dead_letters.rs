//! The dead-letter store (SPEC §6): envelopes are inserted once, in the transaction that kills
//! their job, and never updated or deleted (triggers refuse it on both backends). Handling state
//! goes to `dead_letter_events`.
//!
//! The open set (migration 0007) is kept here too, in Rust-issued SQL rather than triggers (the
//! bench's set-based seeder must maintain it in bulk, and per-row triggers would make that one
//! hot-row update per letter): `open_dead_letters` holds one row per open letter and
//! `dead_letter_open_counts` the open count per (category, error_code). [`insert`] adds to both
//! and the first `closed` event ([`add_event`], hence [`close_settled`]) removes from both, in the
//! caller's transaction, so the triage [`summary`] reads one counter row and one index probe per
//! group instead of anti-joining every letter with every event. Unlike the envelopes these rows
//! are updated and deleted: they are a derived index of the events, which stay the truth
//! (`storage::verify::open_dead_letters_from_events` recomputes it; the tests and `chaos` compare).
//!
//! A group's counter row is a hot row: every dead-lettering and every close in that group updates
//! it, and holds its lock until commit. Dead-lettering is rare (a few per minute in a bad hour), so
//! that serialisation costs nothing in practice. To keep it deadlock-free, every transaction locks
//! a withdrawal's row before any counter row, and counter rows in (category, error_code) order:
//! `bury` parks the withdrawal before inserting the envelope, the settling transition locks the
//! withdrawal before [`close_settled`], which closes its letters in group order.
//!
//! A letter, its events and its open-set row are keyed by the account of its job (README
//! "Scaling"), and every statement about one letter names it. Operators' reads by id alone
//! ([`get`], [`get_many`]) and the triage list and summary read across accounts.

use sqlx::types::Json;
use sqlx::QueryBuilder;
use uuid::Uuid;

use super::{Db, DbTime, Result, Tx};
use crate::domain::{
    AccountId, Category, DeadLetterEventId, DeadLetterId, JobId, JobKey, LetterEvent, ReplayRunId, SideEffect,
    WithdrawalId, WithdrawalKey, WithdrawalStatus,
};
use crate::{with_conn, with_read_conn};

/// An envelope, already redacted (see `dead_letter::envelope`).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct DeadLetter {
    pub id: DeadLetterId,
    /// Its job's account (its withdrawal's, or the system account's).
    pub account_id: AccountId,
    pub job_id: JobId,
    pub queue: String,
    pub job_type: String,
    pub payload_version: i64,
    pub payload: Option<Json<serde_json::Value>>,
    pub raw_payload: Option<Vec<u8>>,
    pub attempts: i64,
    pub first_attempt_at: Option<DbTime>,
    pub failed_at: DbTime,
    pub error_code: String,
    pub error_class: String,
    pub error_message: String,
    pub stack: Option<String>,
    pub worker_host: String,
    pub worker_version: String,
    pub correlation_id: String,
    pub idempotency_key: Option<String>,
    pub withdrawal_id: Option<WithdrawalId>,
    pub side_effect_state: SideEffect,
    pub category: Category,
    pub owner: String,
    pub runbook: String,
    /// The provider the withdrawal's latest attempt went to (SPEC §16); none for a job that never
    /// reached one, and for letters written before providers were named.
    pub provider: Option<String>,
}

const COLUMNS: &str =
    "id, account_id, job_id, queue, job_type, payload_version, payload, raw_payload, attempts, first_attempt_at, \
                       failed_at, error_code, error_class, error_message, stack, worker_host, worker_version, \
                       correlation_id, idempotency_key, withdrawal_id, side_effect_state, category, owner, runbook, \
                       provider";

pub async fn insert(tx: &mut Tx, d: &DeadLetter) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query(&format!(
            "INSERT INTO dead_letters ({COLUMNS})
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25)"
        ))
        .bind(d.id)
        .bind(d.account_id)
        .bind(d.job_id)
        .bind(&d.queue)
        .bind(&d.job_type)
        .bind(d.payload_version)
        .bind(&d.payload)
        .bind(&d.raw_payload)
        .bind(d.attempts)
        .bind(d.first_attempt_at)
        .bind(d.failed_at)
        .bind(&d.error_code)
        .bind(&d.error_class)
        .bind(&d.error_message)
        .bind(&d.stack)
        .bind(&d.worker_host)
        .bind(&d.worker_version)
        .bind(&d.correlation_id)
        .bind(&d.idempotency_key)
        .bind(d.withdrawal_id)
        .bind(d.side_effect_state)
        .bind(d.category)
        .bind(&d.owner)
        .bind(&d.runbook)
        .bind(&d.provider)
        .execute(&mut *conn)
        .await?;
        // A new dead letter is open.
        sqlx::query(
            "INSERT INTO open_dead_letters (account_id, dead_letter_id, category, error_code, failed_at)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(d.account_id)
        .bind(d.id)
        .bind(d.category)
        .bind(&d.error_code)
        .bind(d.failed_at)
        .execute(&mut *conn)
        .await?;
        sqlx::query(
            "INSERT INTO dead_letter_open_counts (category, error_code, open) VALUES ($1, $2, 1)
             ON CONFLICT (category, error_code) DO UPDATE SET open = dead_letter_open_counts.open + 1",
        )
        .bind(d.category)
        .bind(&d.error_code)
        .execute(&mut *conn)
        .await?;
    });
    Ok(())
}

/// A withdrawal's dead letters, oldest first.
pub async fn for_withdrawal(db: &Db, withdrawal: WithdrawalKey) -> Result<Vec<DeadLetter>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, DeadLetter>(&format!(
            "SELECT {COLUMNS} FROM dead_letters WHERE account_id = $1 AND withdrawal_id = $2 ORDER BY failed_at, id"
        ))
        .bind(withdrawal.account)
        .bind(withdrawal.id)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// A job's dead letter (at most one).
pub async fn for_job(db: &Db, job: JobKey) -> Result<Vec<DeadLetter>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, DeadLetter>(&format!(
            "SELECT {COLUMNS} FROM dead_letters WHERE account_id = $1 AND job_id = $2"
        ))
        .bind(job.account)
        .bind(job.id)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// A dead letter by its id alone, whatever its account (operators name letters by id).
pub async fn get(db: &Db, id: DeadLetterId) -> Result<Option<DeadLetter>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, DeadLetter>(&format!("SELECT {COLUMNS} FROM dead_letters WHERE id = $1"))
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?
    }))
}

/// One account's dead letter.
pub async fn get_of(db: &Db, account: AccountId, id: DeadLetterId) -> Result<Option<DeadLetter>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, DeadLetter>(&format!(
            "SELECT {COLUMNS} FROM dead_letters WHERE account_id = $1 AND id = $2"
        ))
        .bind(account)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
    }))
}

/// Triage filters (SPEC §8.2); `None` means any.
#[derive(Debug, Clone, Default)]
pub struct DeadLetterFilter {
    pub queue: Option<String>,
    pub job_type: Option<String>,
    pub error_code: Option<String>,
    pub category: Option<String>,
    pub failed_after: Option<DbTime>,
    pub failed_before: Option<DbTime>,
    /// `Some(true)` open only, `Some(false)` closed only.
    pub open: Option<bool>,
    /// Page after this (failed_at, id), in the list's order.
    pub after: Option<(DbTime, Uuid)>,
    /// Oldest failure first (what waited longest), instead of newest first.
    pub oldest_first: bool,
    pub limit: i64,
}

/// A dead letter with its handling state.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ListedDeadLetter {
    #[sqlx(flatten)]
    pub letter: DeadLetter,
    pub closed_at: Option<DbTime>,
}

const FILTER: &str =
    "($1 IS NULL OR d.queue = $1) AND ($2 IS NULL OR d.job_type = $2) AND ($3 IS NULL OR d.error_code = $3)
       AND ($4 IS NULL OR d.category = $4) AND ($5 IS NULL OR d.failed_at > $5) AND ($6 IS NULL OR d.failed_at < $6)";
const CLOSED: &str = "(SELECT MIN(e.at) FROM dead_letter_events e
      WHERE e.account_id = d.account_id AND e.dead_letter_id = d.id AND e.action = 'closed')";

/// The triage list's SQL: one text for the query and for its plan (the benchmark explains it).
fn list_sql(oldest_first: bool) -> String {
    filtered_sql(&format!("{CLOSED} AS closed_at"), oldest_first)
}

/// The letters [`DeadLetterFilter`] selects, with `extra` columns after the envelope's, newest
/// (or oldest) failure first; the page cursor continues in the same direction.
fn filtered_sql(extra: &str, oldest_first: bool) -> String {
    let (past, order) = match oldest_first {
        true => (">", "ASC"),
        false => ("<", "DESC"),
    };
    format!(
        "SELECT {}, {extra} FROM dead_letters d
         WHERE {FILTER}
           AND ($7 IS NULL OR ($7 = (NOT EXISTS (SELECT 1 FROM dead_letter_events e
                                                 WHERE e.account_id = d.account_id AND e.dead_letter_id = d.id
                                                   AND e.action = 'closed'))))
           AND ($8 IS NULL OR d.failed_at {past} $8 OR (d.failed_at = $8 AND d.id {past} $9))
         ORDER BY d.failed_at {order}, d.id {order} LIMIT $10",
        qualified_columns()
    )
}

/// [`COLUMNS`] prefixed with the `d` alias.
fn qualified_columns() -> String {
    COLUMNS.split(", ").map(|c| format!("d.{}", c.trim())).collect::<Vec<_>>().join(", ")
}

/// Binds a [`DeadLetterFilter`] to the parameters of [`list_sql`], whatever the query's type.
macro_rules! bind_filter {
    ($query:expr, $f:expr) => {
        $query
            .bind(&$f.queue)
            .bind(&$f.job_type)
            .bind(&$f.error_code)
            .bind(&$f.category)
            .bind($f.failed_after)
            .bind($f.failed_before)
            .bind($f.open)
            .bind($f.after.map(|a| a.0))
            .bind($f.after.map(|a| a.1))
            .bind($f.limit)
    };
}

pub async fn list(db: &Db, f: &DeadLetterFilter) -> Result<Vec<ListedDeadLetter>> {
    let sql = list_sql(f.oldest_first);
    Ok(with_read_conn!(db, |conn| {
        bind_filter!(sqlx::query_as::<_, ListedDeadLetter>(&sql), f).fetch_all(&mut *conn).await?
    }))
}

/// One group of the triage summary: open dead letters by category and error code.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SummaryRow {
    pub category: Category,
    pub error_code: String,
    pub open: i64,
    pub oldest_open: Option<DbTime>,
}

/// Reads the maintained open set (see the module doc): one counter row per group, and each
/// group's oldest open failure by one probe of `open_dead_letters_group_idx` (a `MIN` over an
/// equality prefix of the index). The same answer as the anti-join of `dead_letters` with
/// `closed` events, which `storage::verify::open_dead_letters_from_events` still computes.
const SUMMARY_SQL: &str = "SELECT c.category, c.error_code, c.open,
            (SELECT MIN(o.failed_at) FROM open_dead_letters o
              WHERE o.category = c.category AND o.error_code = c.error_code) AS oldest_open
     FROM dead_letter_open_counts c
     WHERE c.open > 0
     ORDER BY c.open DESC, c.category, c.error_code";

pub async fn summary(db: &Db) -> Result<Vec<SummaryRow>> {
    Ok(with_read_conn!(db, |conn| sqlx::query_as::<_, SummaryRow>(SUMMARY_SQL).fetch_all(&mut *conn).await?))
}

/// The plan of [`summary`]: `EXPLAIN (ANALYZE, BUFFERS)` on PostgreSQL (it runs the query),
/// `EXPLAIN QUERY PLAN` on SQLite. One line per plan row.
pub async fn explain_summary(db: &Db) -> Result<Vec<String>> {
    explain(db, SUMMARY_SQL, None).await
}

/// The plan of [`list`] with filter `f`.
pub async fn explain_list(db: &Db, f: &DeadLetterFilter) -> Result<Vec<String>> {
    explain(db, &list_sql(f.oldest_first), Some(f)).await
}

async fn explain(db: &Db, sql: &str, f: Option<&DeadLetterFilter>) -> Result<Vec<String>> {
    Ok(with_read_conn!(db, |conn| {
        match db {
            Db::Postgres(_) => {
                let text = format!("EXPLAIN (ANALYZE, BUFFERS) {sql}");
                let q = sqlx::query_scalar::<_, String>(&text);
                match f {
                    Some(f) => bind_filter!(q, f).fetch_all(&mut *conn).await?,
                    None => q.fetch_all(&mut *conn).await?,
                }
            }
            Db::Sqlite(_) => {
                let text = format!("EXPLAIN QUERY PLAN {sql}");
                let q = sqlx::query_as::<_, (i64, i64, i64, String)>(&text);
                let rows = match f {
                    Some(f) => bind_filter!(q, f).fetch_all(&mut *conn).await?,
                    None => q.fetch_all(&mut *conn).await?,
                };
                rows.into_iter().map(|(id, parent, _, detail)| format!("{id:>3} {parent:>3}  {detail}")).collect()
            }
        }
    }))
}

/// A handling event (closed, replayed, …) beside an untouched envelope.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Event {
    pub id: DeadLetterEventId,
    /// Its letter's account.
    pub account_id: AccountId,
    pub dead_letter_id: DeadLetterId,
    pub action: LetterEvent,
    pub actor: String,
    pub reason: String,
    pub details: Option<Json<serde_json::Value>>,
    pub at: DbTime,
}

const EVENT_COLUMNS: &str = "id, account_id, dead_letter_id, action, actor, reason, details, at";

/// The events of many dead letters (an export page), in one query, each letter's in order;
/// `letters` are (account, letter) pairs.
pub async fn events_of(db: &Db, letters: &[(AccountId, DeadLetterId)]) -> Result<Vec<Event>> {
    if letters.is_empty() {
        return Ok(Vec::new());
    }
    Ok(with_read_conn!(db, |conn| {
        let mut query = QueryBuilder::new(format!("SELECT {EVENT_COLUMNS} FROM dead_letter_events WHERE "));
        super::push_keys_in(&mut query, "(account_id, dead_letter_id)", letters.iter().map(|(a, id)| (a.0, id.0)));
        query.push(" ORDER BY dead_letter_id, at, id");
        query.build_query_as::<Event>().fetch_all(&mut *conn).await?
    }))
}

/// A letter's events, oldest first.
pub async fn events(db: &Db, letter: &DeadLetter) -> Result<Vec<Event>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, Event>(&format!(
            "SELECT {EVENT_COLUMNS} FROM dead_letter_events
             WHERE account_id = $1 AND dead_letter_id = $2 ORDER BY at, id"
        ))
        .bind(letter.account_id)
        .bind(letter.id)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// Records a handling event. Returns false if it is a second `closed` (refused by a unique index).
/// The first `closed` event takes the letter out of the open set, in `tx`.
pub async fn add_event(tx: &mut Tx, event: &Event) -> Result<bool> {
    let inserted = with_conn!(tx, |conn| {
        sqlx::query(
            "INSERT INTO dead_letter_events (id, account_id, dead_letter_id, action, actor, reason, details, at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
        )
        .bind(event.id)
        .bind(event.account_id)
        .bind(event.dead_letter_id)
        .bind(event.action)
        .bind(&event.actor)
        .bind(&event.reason)
        .bind(&event.details)
        .bind(event.at)
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    if inserted == 1 && event.action == LetterEvent::Closed {
        leave_open_set(tx, event.account_id, event.dead_letter_id).await?;
    }
    Ok(inserted == 1)
}

/// Removes a just-closed letter from `open_dead_letters` and its group's count. Driven by the
/// deleted row, so the count can only drop for a letter that was counted.
async fn leave_open_set(tx: &mut Tx, account: AccountId, dead_letter: DeadLetterId) -> Result<()> {
    with_conn!(tx, |conn| {
        let group = sqlx::query_as::<_, (String, String)>(
            "DELETE FROM open_dead_letters WHERE account_id = $1 AND dead_letter_id = $2
             RETURNING category, error_code",
        )
        .bind(account)
        .bind(dead_letter)
        .fetch_optional(&mut *conn)
        .await?;
        if let Some((category, error_code)) = group {
            sqlx::query("UPDATE dead_letter_open_counts SET open = open - 1 WHERE category = $1 AND error_code = $2")
                .bind(category)
                .bind(error_code)
                .execute(&mut *conn)
                .await?;
        }
    });
    Ok(())
}

/// A withdrawal that just settled, whose open dead letters close with it.
#[derive(Debug, Clone)]
pub struct Settled<'a> {
    pub withdrawal: WithdrawalKey,
    pub actor: String,
    pub reason: &'a str,
    pub status: WithdrawalStatus,
}

/// Closes every open dead letter of withdrawals that just reached a final state (`completed` or
/// `failed`): their failure is settled, so they leave the triage queue. The envelope stays; the
/// `closed` event says who settled it and how. Called by the guarded transitions, in their
/// transaction; the letters are found in one query per 500 withdrawals. Letters close in
/// (category, error_code) order, so two transactions settling letters of several groups lock the
/// groups' counter rows in the same order. Returns how many closed.
pub async fn close_settled(tx: &mut Tx, settled: &[Settled<'_>]) -> Result<u64> {
    let mut closed = 0;
    for chunk in settled.chunks(500) {
        let open: Vec<(AccountId, DeadLetterId, WithdrawalId)> = with_conn!(tx, |conn| {
            let mut query = QueryBuilder::new(
                "SELECT d.account_id, d.id, d.withdrawal_id FROM dead_letters d
                 WHERE NOT EXISTS (SELECT 1 FROM dead_letter_events e
                                   WHERE e.account_id = d.account_id AND e.dead_letter_id = d.id
                                     AND e.action = 'closed')
                   AND ",
            );
            let keys = chunk.iter().map(|s| (s.withdrawal.account.0, s.withdrawal.id.0));
            super::push_keys_in(&mut query, "(d.account_id, d.withdrawal_id)", keys);
            query.push(" ORDER BY d.category, d.error_code, d.id");
            query.build_query_as().fetch_all(&mut *conn).await?
        });
        for (account, id, withdrawal) in open {
            let Some(s) = chunk.iter().find(|s| s.withdrawal.id == withdrawal) else { continue };
            let event = Event {
                id: DeadLetterEventId::new(),
                account_id: account,
                dead_letter_id: id,
                action: LetterEvent::Closed,
                actor: s.actor.clone(),
                reason: format!("withdrawal {}: {}", s.status, s.reason),
                details: Some(Json(serde_json::json!({"settled_by_transition": s.status}))),
                at: DbTime::now(),
            };
            add_event(tx, &event).await?;
            closed += 1;
        }
    }
    Ok(closed)
}

/// Closes the open dead letter of `job` (of `account`), if it has one: its failure was mended
/// after all (a dead-lettered notification delivered by a replay or a redelivery). Returns
/// whether one closed.
pub async fn close_for_job(tx: &mut Tx, account: AccountId, job: JobId, actor: &str, reason: &str) -> Result<bool> {
    let open: Option<DeadLetterId> = with_conn!(tx, |conn| {
        sqlx::query_scalar(
            "SELECT d.id FROM dead_letters d
             WHERE d.account_id = $1 AND d.job_id = $2
               AND NOT EXISTS (SELECT 1 FROM dead_letter_events e
                               WHERE e.account_id = d.account_id AND e.dead_letter_id = d.id AND e.action = 'closed')",
        )
        .bind(account)
        .bind(job)
        .fetch_optional(&mut *conn)
        .await?
    });
    let Some(id) = open else {
        return Ok(false);
    };
    let event = Event {
        id: DeadLetterEventId::new(),
        account_id: account,
        dead_letter_id: id,
        action: LetterEvent::Closed,
        actor: actor.to_owned(),
        reason: reason.to_owned(),
        details: None,
        at: DbTime::now(),
    };
    add_event(tx, &event).await
}

/// A dead letter as a replay selection sees it: the envelope, and — read in the same query —
/// whether it is closed, whether some run already released it, and the run in which it is
/// waiting now, if any.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct SelectedLetter {
    #[sqlx(flatten)]
    pub letter: DeadLetter,
    pub closed: bool,
    /// Released (or sent to reconciliation) by some run.
    pub replayed: bool,
    pub active_run: Option<ReplayRunId>,
}

/// The selection facts of [`SelectedLetter`], as columns over the alias `d`.
const SELECTION_FACTS: &str = "EXISTS (SELECT 1 FROM dead_letter_events e
             WHERE e.account_id = d.account_id AND e.dead_letter_id = d.id AND e.action = 'closed') AS closed,
     EXISTS (SELECT 1 FROM replay_items i
             WHERE i.account_id = d.account_id AND i.dead_letter_id = d.id AND i.status IN ('released', 'reconciling'))
       AS replayed,
     (SELECT i.run_id FROM replay_items i
       WHERE i.account_id = d.account_id AND i.dead_letter_id = d.id AND i.status = 'pending'
       ORDER BY i.run_id LIMIT 1) AS active_run";

/// Ids per statement in the set-based reads: well under SQLite's bound-parameter limit (32 766;
/// 999 before SQLite 3.32) and PostgreSQL's (65 535).
const IDS_PER_QUERY: usize = 500;

/// The dead letters among `ids` that exist, each with its selection facts: one query per
/// [`IDS_PER_QUERY`] ids instead of four per letter. In no particular order; absent ids are
/// simply missing.
pub async fn get_many(db: &Db, ids: &[DeadLetterId]) -> Result<Vec<SelectedLetter>> {
    let mut letters = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(IDS_PER_QUERY) {
        let head = format!("SELECT {}, {SELECTION_FACTS} FROM dead_letters d WHERE d.id IN (", qualified_columns());
        let found: Vec<SelectedLetter> = with_read_conn!(db, |conn| {
            let mut query = QueryBuilder::new(&head);
            let mut list = query.separated(", ");
            for id in chunk {
                list.push_bind(*id);
            }
            query.push(")");
            query.build_query_as::<SelectedLetter>().fetch_all(&mut *conn).await?
        });
        letters.extend(found);
    }
    Ok(letters)
}

/// What [`list`] returns for `f`, newest first, each letter with its selection facts (the same
/// rows, one query).
pub async fn list_selection(db: &Db, f: &DeadLetterFilter) -> Result<Vec<SelectedLetter>> {
    let sql = filtered_sql(SELECTION_FACTS, f.oldest_first);
    Ok(with_read_conn!(db, |conn| {
        bind_filter!(sqlx::query_as::<_, SelectedLetter>(&sql), f).fetch_all(&mut *conn).await?
    }))
}
