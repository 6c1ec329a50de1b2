//! Withdrawals and their transitions (SPEC §1.1).
//!
//! Creation holds the funds, inserts the withdrawal, records its first transition and enqueues
//! its submit job — all in the caller's transaction. Every later state change goes through
//! [`transition`], the guarded compare-and-set write: zero rows updated means someone else moved
//! the withdrawal first, and the caller is told so instead of overwriting it.

use sqlx::types::Json;
use uuid::Uuid;

use super::accounts::{self, EntryKind};
use super::batch::{Arg, Ran, SetUpdate, Sql, Writes, Written};
use super::jobs;
use super::{DbTime, Result, StorageError, Tx, TxConn};
use crate::domain::job::SubmitPayout;
use crate::domain::{
    check_transition, AccountId, Actor, Amount, Currency, Destination, LedgerEffect, TransitionError, Withdrawal,
    WithdrawalId, WithdrawalStatus,
};
use crate::{with_conn, with_read_conn};

const COLUMNS: &str = "id, account_id, status, amount, currency, destination, reference, failure_code, version, \
                       idempotency_key, correlation_id, created_at, updated_at, sandbox";

#[derive(Debug, sqlx::FromRow)]
struct WithdrawalRow {
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

/// A validated request to withdraw.
#[derive(Debug, Clone)]
pub struct NewWithdrawal {
    pub account_id: AccountId,
    pub amount: Amount,
    pub destination: Destination,
    pub reference: Option<String>,
    pub idempotency_key: String,
    pub correlation_id: String,
    /// Created by a process in sandbox mode.
    pub sandbox: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateRejected {
    InsufficientFunds,
}

/// The withdrawal `new` becomes, as [`create`] will store it (a fresh id, `pending`, version 1).
pub fn prepare(new: &NewWithdrawal) -> Withdrawal {
    let now = DbTime::now().0;
    Withdrawal {
        id: WithdrawalId::new(),
        account_id: new.account_id,
        status: WithdrawalStatus::Pending,
        amount: new.amount,
        destination: new.destination.clone(),
        reference: new.reference.clone(),
        failure_code: None,
        version: 1,
        idempotency_key: new.idempotency_key.clone(),
        correlation_id: new.correlation_id.clone(),
        created_at: now,
        updated_at: now,
        sandbox: new.sandbox,
    }
}

/// Creates `withdrawal` (from [`prepare`]) with its funds held, its first transition recorded and
/// its submit job enqueued, together with the caller's writes `also` — all in `tx`, as one
/// statement on PostgreSQL ([`Writes`]). Returns the outcome of `also`'s writes, read by their own
/// handles, and whether the hold applied. On `Err(CreateRejected)` the transaction holds partial
/// writes: the caller must drop it.
pub async fn create(
    tx: &mut Tx,
    withdrawal: &Withdrawal,
    also: Writes,
) -> Result<(Ran, std::result::Result<(), CreateRejected>)> {
    let w = withdrawal;
    let now = DbTime::from(w.created_at);
    let mut writes = Writes::new();
    writes.push(
        Sql::new(
            "INSERT INTO withdrawals (id, account_id, amount, currency, destination, reference, idempotency_key,
                                      correlation_id, created_at, updated_at, sandbox, status, version)
             VALUES (",
        )
        .binds([
            Arg::Uuid(w.id.0),
            Arg::Uuid(w.account_id.0),
            Arg::I64(w.amount.to_minor()),
            w.amount.currency().code().into(),
            Arg::Json(serde_json::to_value(&w.destination).map_err(StorageError::corrupt)?),
            Arg::OptText(w.reference.clone()),
            w.idempotency_key.as_str().into(),
            w.correlation_id.as_str().into(),
            Arg::Time(now),
            Arg::Time(now),
            Arg::Bool(w.sandbox),
        ])
        .sql(", 'pending', 1)"),
    );
    let transition = transition_in(
        &mut writes,
        w.id,
        None,
        WithdrawalStatus::Pending,
        &Actor::Customer,
        "created",
        &w.correlation_id,
        None,
    );
    let held = accounts::hold_in(&mut writes, w.account_id, w.amount, w.id, transition);
    jobs::enqueue_in(&mut writes, &SubmitPayout::new(w.id, None).job(&w.correlation_id, now));
    let theirs = writes.append(also);
    let counts = writes.run(tx).await?;
    let held = match counts.applied(held) {
        true => Ok(()),
        false => Err(CreateRejected::InsufficientFunds),
    };
    Ok((counts.part(theirs), held))
}

/// Reads one withdrawal; with `account` set, another account's withdrawal reads as absent.
pub async fn get(db: &super::Db, account: Option<AccountId>, id: WithdrawalId) -> Result<Option<Withdrawal>> {
    let row: Option<WithdrawalRow> = with_read_conn!(db, |conn| {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM withdrawals WHERE id = $1 AND ($2 IS NULL OR account_id = $2)"))
            .bind(id.0)
            .bind(account.map(|a| a.0))
            .fetch_optional(&mut *conn)
            .await?
    });
    row.map(Withdrawal::try_from).transpose()
}

/// Ids per statement in [`get_many`]: well under both backends' bound-parameter limits.
const IDS_PER_QUERY: usize = 500;

/// The withdrawals among `ids` that exist, one query per [`IDS_PER_QUERY`] ids, in no
/// particular order (absent ids are simply missing).
pub async fn get_many(db: &super::Db, ids: &[WithdrawalId]) -> Result<Vec<Withdrawal>> {
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

/// Reads one withdrawal inside a transaction (workers decide on what they will write against).
pub async fn get_in_tx(tx: &mut Tx, id: WithdrawalId) -> Result<Option<Withdrawal>> {
    let row: Option<WithdrawalRow> = with_conn!(tx, |conn| {
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM withdrawals WHERE id = $1"))
            .bind(id.0)
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
    const LATEST: &str = "FROM provider_attempts a WHERE a.withdrawal_id = w.id ORDER BY a.attempt_no DESC LIMIT 1";
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
pub async fn get_with_last_attempt(tx: &mut Tx, id: WithdrawalId) -> Result<Option<(Withdrawal, Option<LastAttempt>)>> {
    let row: Option<WithLastAttemptRow> = with_conn!(tx, |conn| {
        sqlx::query_as(&format!("{} WHERE w.id = $1", with_last_attempt()))
            .bind(id.0)
            .fetch_optional(&mut *conn)
            .await?
    });
    row.map(WithLastAttemptRow::parse).transpose()
}

/// [`get_with_last_attempt`] for many withdrawals in one query (a claimed batch's first read),
/// in no particular order; absent ids are simply missing.
pub async fn get_many_with_last_attempt(
    tx: &mut Tx,
    ids: &[WithdrawalId],
) -> Result<Vec<(Withdrawal, Option<LastAttempt>)>> {
    let mut found = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(IDS_PER_QUERY) {
        let rows: Vec<WithLastAttemptRow> = with_conn!(tx, |conn| {
            let mut query = sqlx::QueryBuilder::new(format!("{} WHERE w.id IN (", with_last_attempt()));
            let mut list = query.separated(", ");
            for id in chunk {
                list.push_bind(id.0);
            }
            query.push(")");
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

/// Position in a newest-first listing: the last item's creation time and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCursor {
    pub created_at: DbTime,
    pub id: Uuid,
}

/// One page of an account's withdrawals, newest first, strictly after `cursor`.
pub async fn list(
    db: &super::Db,
    account: AccountId,
    status: Option<WithdrawalStatus>,
    limit: u32,
    cursor: Option<PageCursor>,
) -> Result<Vec<Withdrawal>> {
    let rows: Vec<WithdrawalRow> = with_read_conn!(db, |conn| {
        sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM withdrawals
             WHERE account_id = $1 AND ($2 IS NULL OR status = $2)
               AND ($3 IS NULL OR created_at < $3 OR (created_at = $3 AND id < $4))
             ORDER BY created_at DESC, id DESC LIMIT $5"
        ))
        .bind(account.0)
        .bind(status.map(WithdrawalStatus::as_str))
        .bind(cursor.map(|c| c.created_at))
        .bind(cursor.map(|c| c.id))
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await?
    });
    rows.into_iter().map(Withdrawal::try_from).collect()
}

/// A requested state change.
#[derive(Debug, Clone)]
pub struct TransitionRequest<'a> {
    pub id: WithdrawalId,
    pub from: WithdrawalStatus,
    pub to: WithdrawalStatus,
    /// When set, the write also requires this version (operators acting on what they saw).
    pub expected_version: Option<i64>,
    pub actor: &'a Actor,
    pub reason: &'a str,
    pub correlation_id: &'a str,
    /// The withdrawal's `failure_code` after the move: why it failed, or why it waits in
    /// `requires_review`; `None` clears it (a retry, a completion).
    pub failure_code: Option<&'a str>,
    /// What the decision rested on (the provider's answer at that moment), stored with the
    /// transition row.
    pub evidence: Option<&'a crate::domain::StoredEvidence>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransitionOutcome {
    Applied(Box<Withdrawal>),
    /// Someone else moved the withdrawal first (or the version was stale); nothing changed.
    Stale,
    /// The state machine has no such move; nothing changed.
    Forbidden(TransitionError),
}

/// The compare-and-set of every transition: on status, and on version when one is expected.
/// Each move sets `failure_code` to what it says (none clears it).
fn guarded(req: &TransitionRequest<'_>, now: DbTime) -> Sql {
    let sql = Sql::new("UPDATE withdrawals SET status = ")
        .bind(req.to.as_str())
        .sql(", version = version + 1, updated_at = ")
        .bind(now)
        .sql(", failure_code = ")
        .bind(req.failure_code)
        .sql(" WHERE id = ")
        .bind(req.id.0)
        .sql(" AND status = ")
        .bind(req.from.as_str());
    match req.expected_version {
        Some(version) => sql.sql(" AND version = ").bind(version),
        None => sql,
    }
}

/// [`guarded`] in set form, for the moves of a batch ([`Sql::keyed`]): the same compare-and-set.
static GUARDED_SET: SetUpdate = SetUpdate {
    set: "UPDATE withdrawals AS t SET status = v.to_status, version = t.version + 1, updated_at = v.at, \
          failure_code = v.failure_code",
    values: "v(id, to_status, at, failure_code, from_status, expected_version)",
    filter:
        "t.id = v.id AND t.status = v.from_status AND (v.expected_version IS NULL OR t.version = v.expected_version)",
};

/// The guarded write of SPEC §1.1: compare-and-set on status (and version), then the transition
/// row and the ledger entries of its effect, all in `tx`.
pub async fn transition(tx: &mut Tx, req: &TransitionRequest<'_>) -> Result<TransitionOutcome> {
    let effect = match check_transition(req.from, req.to) {
        Ok(effect) => effect,
        Err(err) => return Ok(TransitionOutcome::Forbidden(err)),
    };
    let sql = guarded(req, DbTime::now()).sql(" RETURNING ").sql(COLUMNS);
    let row: Option<WithdrawalRow> = match &mut tx.conn {
        TxConn::Sqlite(t) => sql.sqlite().build_query_as().fetch_optional(&mut **t).await?,
        TxConn::Postgres(t) => sql.postgres().build_query_as().fetch_optional(&mut **t).await?,
    };
    let Some(row) = row else {
        stale(req);
        return Ok(TransitionOutcome::Stale);
    };
    let withdrawal = Withdrawal::try_from(row)?;
    // The transition row and the ledger entries of its effect: one round trip on PostgreSQL.
    let mut writes = Writes::new();
    effect_in(&mut writes, &withdrawal, req, effect);
    writes.run(tx).await?;
    applied(tx, req).await?;
    Ok(TransitionOutcome::Applied(Box::new(withdrawal)))
}

/// [`transition`] of a withdrawal the caller has already read (so its account and amount are
/// known), in two batches: the guarded update goes into the caller's batch `writes`; once that
/// ran, [`KnownTransition::settle`] says whether it applied and, if so, writes the transition
/// row and the ledger entries of its effect. (They cannot share the guard's batch: the writes of
/// a batch do not see each other's results, and a stale move's ledger write could break a balance
/// constraint before the caller sees the guard's count.) `Err` when the state machine has no
/// such move (nothing was added).
pub fn transition_known_in(
    writes: &mut Writes,
    req: &TransitionRequest<'_>,
) -> std::result::Result<KnownTransition, TransitionError> {
    let effect = check_transition(req.from, req.to)?;
    let now = DbTime::now();
    let values = [
        req.to.as_str().into(),
        Arg::Time(now),
        req.failure_code.into(),
        req.from.as_str().into(),
        Arg::OptI64(req.expected_version),
    ];
    let guarded = writes.push(Sql::keyed(guarded(req, now), &GUARDED_SET, req.id.0, values));
    Ok(KnownTransition { guarded, effect })
}

/// A [`transition_known_in`] whose guarded update is in a batch.
#[derive(Debug, Clone, Copy)]
pub struct KnownTransition {
    guarded: Written,
    effect: LedgerEffect,
}

impl KnownTransition {
    /// After the guard's batch ran in `tx` with `counts`: false if someone moved the withdrawal
    /// first (nothing of the move was written). Otherwise writes the transition row, the ledger
    /// entries of its effect and the caller's writes `also` as one batch, finishes as
    /// [`transition`] does (a settled withdrawal's open dead letters are closed), and is true.
    pub async fn settle(
        &self,
        tx: &mut Tx,
        counts: &Ran,
        withdrawal: &Withdrawal,
        req: &TransitionRequest<'_>,
        also: Writes,
    ) -> Result<bool> {
        let mut writes = Writes::new();
        if !self.settle_in(&mut writes, counts, withdrawal, req) {
            return Ok(false);
        }
        writes.append(also);
        writes.run(tx).await?;
        applied(tx, req).await?;
        Ok(true)
    }

    /// [`KnownTransition::settle`] for a batch of moves: false if someone moved the withdrawal
    /// first (nothing is added); otherwise adds the transition row and the ledger entries of its
    /// effect to `writes` and is true. The caller runs `writes` — whose writes must touch each
    /// balance row once ([`Balance`]) — then [`applied_many`] for the moves that applied.
    pub fn settle_in(
        &self,
        writes: &mut Writes,
        counts: &Ran,
        withdrawal: &Withdrawal,
        req: &TransitionRequest<'_>,
    ) -> bool {
        if !counts.applied(self.guarded) {
            stale(req);
            return false;
        }
        effect_in(writes, withdrawal, req, self.effect);
        true
    }
}

/// The balance row a move's ledger effect writes: a batch of settles touches each at most once
/// (a statement applies only one of two updates of a row).
pub type Balance = (AccountId, crate::domain::Currency);

/// The balance row `w`'s ledger effects write.
pub fn balance_of(w: &Withdrawal) -> Balance {
    (w.account_id, w.amount.currency())
}

/// The transition row and, for a move with a ledger effect, the balance change and its entry.
fn effect_in(writes: &mut Writes, withdrawal: &Withdrawal, req: &TransitionRequest<'_>, effect: LedgerEffect) {
    let transition_id =
        transition_in(writes, req.id, Some(req.from), req.to, req.actor, req.reason, req.correlation_id, req.evidence);
    let kind = match effect {
        LedgerEffect::None => None,
        LedgerEffect::SettleHold => Some(EntryKind::Settle),
        LedgerEffect::ReleaseHold => Some(EntryKind::Release),
    };
    if let Some(kind) = kind {
        accounts::move_held_in(writes, kind, withdrawal.account_id, withdrawal.amount, withdrawal.id, transition_id);
    }
}

/// What follows every applied transition in its transaction: superseding a review decision that
/// still waits on it once it leaves review, and, once settled, closing the withdrawal's open dead
/// letters. (Its metric is the caller's, once the transaction has committed.)
async fn applied(tx: &mut Tx, req: &TransitionRequest<'_>) -> Result<()> {
    applied_many(tx, &[req]).await
}

/// [`applied`] for a batch of moves that applied: the settled withdrawals' open dead letters are
/// found in one query.
pub async fn applied_many(tx: &mut Tx, reqs: &[&TransitionRequest<'_>]) -> Result<()> {
    // Every applied move is counted here, once its transaction commits: no caller counts by hand.
    for (from, to) in reqs.iter().map(|r| (r.from, r.to)) {
        tx.after_commit(move || crate::metrics::transition(from, to));
    }
    for req in reqs.iter().filter(|r| r.from == WithdrawalStatus::RequiresReview) {
        let why = format!("withdrawal moved to {} by {}: {}", req.to, req.actor, req.reason);
        super::review_decisions::supersede(tx, req.id, &why).await?;
    }
    let settled: Vec<_> = reqs
        .iter()
        .filter(|r| matches!(r.to, WithdrawalStatus::Completed | WithdrawalStatus::Failed))
        .map(|r| super::dead_letters::Settled {
            withdrawal: r.id,
            actor: r.actor.to_string(),
            reason: r.reason,
            status: r.to,
        })
        .collect();
    super::dead_letters::close_settled(tx, &settled).await?;
    Ok(())
}

/// Moves a withdrawal automation gave up on to `requires_review` along
/// [`path_to_review`](crate::domain::path_to_review) (through `processing` if it was still
/// `pending`, so every move is one the state machine allows and is recorded), with
/// `failure_code` saying why it waits there (the dead-letter category). A stale step (someone
/// moved it first) is left alone. Returns the moves that applied.
pub async fn park_for_review(
    tx: &mut Tx,
    w: &Withdrawal,
    actor: &Actor,
    reason: &str,
    correlation_id: &str,
    failure_code: &str,
) -> Result<Vec<(WithdrawalStatus, WithdrawalStatus)>> {
    let mut moved = Vec::new();
    for &(from, to) in crate::domain::path_to_review(w.status) {
        let request = TransitionRequest {
            id: w.id,
            from,
            to,
            expected_version: None,
            actor,
            reason,
            correlation_id,
            failure_code: (to == WithdrawalStatus::RequiresReview).then_some(failure_code),
            evidence: None,
        };
        match transition(tx, &request).await? {
            TransitionOutcome::Applied(_) => moved.push((from, to)),
            TransitionOutcome::Stale => {}
            // `path_to_review` is made of allowed moves (tested in the domain).
            TransitionOutcome::Forbidden(err) => return Err(StorageError::corrupt(err)),
        }
    }
    Ok(moved)
}

fn stale(req: &TransitionRequest<'_>) {
    tracing::warn!(
        event = "stale_transition",
        withdrawal_id = %req.id,
        from = %req.from,
        to = %req.to,
        expected_version = ?req.expected_version,
        actor = %req.actor,
        "stale_transition: the withdrawal was moved by someone else first; nothing changed"
    );
}

#[allow(clippy::too_many_arguments)]
fn transition_in(
    writes: &mut Writes,
    id: WithdrawalId,
    from: Option<WithdrawalStatus>,
    to: WithdrawalStatus,
    actor: &Actor,
    reason: &str,
    correlation_id: &str,
    evidence: Option<&crate::domain::StoredEvidence>,
) -> Uuid {
    let transition_id = Uuid::now_v7();
    writes.push(Sql::row(
        "INSERT INTO withdrawal_transitions (id, withdrawal_id, from_status, to_status, actor, reason,
                                                 correlation_id, at, evidence)
             VALUES ",
        [
            Arg::Uuid(transition_id),
            Arg::Uuid(id.0),
            Arg::OptText(from.map(|f| f.as_str().to_owned())),
            Arg::Text(to.as_str().to_owned()),
            Arg::Text(actor.to_string()),
            // Reasons are free text from people and providers: redacted like everything stored.
            Arg::Text(crate::redact::text(reason)),
            Arg::Text(correlation_id.to_owned()),
            Arg::Time(DbTime::now()),
            // Provider answers carry no account numbers, but evidence is redacted like the rest.
            Arg::OptJson(evidence.map(|e| crate::redact::json(&e.to_json()))),
        ],
        "",
    ));
    transition_id
}

/// One recorded state change, oldest first in [`transitions`].
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TransitionRow {
    pub from_status: Option<WithdrawalStatus>,
    pub to_status: WithdrawalStatus,
    pub actor: String,
    pub reason: String,
    pub correlation_id: String,
    pub at: DbTime,
    pub evidence: Option<Json<serde_json::Value>>,
}

pub async fn transitions(db: &super::Db, id: WithdrawalId) -> Result<Vec<TransitionRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, TransitionRow>(
            "SELECT from_status, to_status, actor, reason, correlation_id, at, evidence
             FROM withdrawal_transitions WHERE withdrawal_id = $1 ORDER BY at, id",
        )
        .bind(id.0)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// How many withdrawals exist in each status (tests, and the operator overview later).
pub async fn count_for_account(db: &super::Db, account: AccountId) -> Result<i64> {
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
    db: &super::Db,
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
