//! Every state change after creation: the guarded compare-and-set write (SPEC §1.1), alone or in
//! a batch, with the transition row and the ledger entries of its effect; and the transition log.

use sqlx::types::Json;
use uuid::Uuid;

use super::rows::{WithdrawalRow, COLUMNS};
use crate::domain::view::WithdrawalView;
use crate::domain::EventType;
use crate::domain::{
    check_transition, AccountId, Actor, LedgerEffect, TransitionError, Withdrawal, WithdrawalKey, WithdrawalStatus,
};
use crate::storage::accounts::{self, EntryKind};
use crate::storage::batch::{Arg, Ran, SetUpdate, Sql, Writes, Written};
use crate::storage::notifications::{self, EventVersion};
use crate::storage::{DbTime, Result, StorageError, Tx, TxConn};
use crate::with_read_conn;

/// A requested state change.
#[derive(Debug, Clone)]
pub struct TransitionRequest<'a> {
    pub key: WithdrawalKey,
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
        .sql(" WHERE account_id = ")
        .bind(req.key.account.0)
        .sql(" AND id = ")
        .bind(req.key.id.0)
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
    values: "v(id, account_id, to_status, at, failure_code, from_status, expected_version)",
    filter: "t.account_id = v.account_id AND t.id = v.id AND t.status = v.from_status AND (v.expected_version IS NULL OR t.version = v.expected_version)",
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
    let (at, version) = (DbTime::from(withdrawal.updated_at), EventVersion::Known(withdrawal.version));
    effect_in(&mut writes, &withdrawal, req, effect, at, version);
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
        Arg::Uuid(req.key.account.0),
        req.to.as_str().into(),
        Arg::Time(now),
        req.failure_code.into(),
        req.from.as_str().into(),
        Arg::OptI64(req.expected_version),
    ];
    let guarded = writes.push(Sql::keyed(guarded(req, now), &GUARDED_SET, req.key.id.0, values));
    Ok(KnownTransition { guarded, effect, at: now })
}

/// A [`transition_known_in`] whose guarded update is in a batch.
#[derive(Debug, Clone, Copy)]
pub struct KnownTransition {
    guarded: Written,
    effect: LedgerEffect,
    /// The guard's `updated_at`.
    at: DbTime,
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
        // The guard ran in an earlier statement of this transaction: the event reads the version
        // it left.
        effect_in(writes, withdrawal, req, self.effect, self.at, EventVersion::Current);
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

/// The transition row; for a move with a ledger effect, the balance change and its entry; for a
/// move customers hear about (SPEC §17), its event, showing the withdrawal as the move leaves it
/// (`withdrawal` may be the one read before the move: its status, failure code and `updated_at`
/// are the move's, `at`, and its version the row's after the guard).
fn effect_in(
    writes: &mut Writes,
    withdrawal: &Withdrawal,
    req: &TransitionRequest<'_>,
    effect: LedgerEffect,
    at: DbTime,
    version: EventVersion,
) {
    let transition_id =
        transition_in(writes, req.key, Some(req.from), req.to, req.actor, req.reason, req.correlation_id, req.evidence);
    if let Some(kind) = EventType::for_move(Some(req.from), req.to) {
        let mut after = withdrawal.clone();
        after.status = req.to;
        after.failure_code = req.failure_code.map(str::to_owned);
        after.updated_at = at.0;
        notifications::event_in(writes, kind, &after, version, WithdrawalView::from(&after));
    }
    let kind = match effect {
        LedgerEffect::None => None,
        LedgerEffect::SettleHold => Some(EntryKind::Settle),
        LedgerEffect::ReleaseHold => Some(EntryKind::Release),
    };
    if let Some(kind) = kind {
        accounts::move_held_in(writes, kind, withdrawal.key(), withdrawal.amount, transition_id);
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
    // A decision on an open outcome (SPEC §15): which channel reached it.
    for req in reqs.iter().filter(|r| {
        matches!(r.from, WithdrawalStatus::Processing | WithdrawalStatus::RequiresReview) && r.to.is_terminal()
    }) {
        if let Some(source) = crate::metrics::decision_source(req.actor) {
            tx.after_commit(move || crate::metrics::reconciliation_decision(source));
        }
    }
    for req in reqs.iter().filter(|r| r.from == WithdrawalStatus::RequiresReview) {
        let why = format!("withdrawal moved to {} by {}: {}", req.to, req.actor, req.reason);
        crate::storage::review_decisions::supersede(tx, req.key, &why).await?;
    }
    let settled: Vec<_> = reqs
        .iter()
        .filter(|r| matches!(r.to, WithdrawalStatus::Completed | WithdrawalStatus::Failed))
        .map(|r| crate::storage::dead_letters::Settled {
            withdrawal: r.key,
            actor: r.actor.to_string(),
            reason: r.reason,
            status: r.to,
        })
        .collect();
    crate::storage::dead_letters::close_settled(tx, &settled).await?;
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
            key: w.key(),
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
        withdrawal_id = %req.key.id,
        from = %req.from,
        to = %req.to,
        expected_version = ?req.expected_version,
        actor = %req.actor,
        "stale_transition: the withdrawal was moved by someone else first; nothing changed"
    );
}

/// A move to another provider (SPEC §16) in the transition log: a row from and to the
/// withdrawal's current `status`, with the move's evidence. The state does not change and no
/// money moves; the log says why the next attempt goes elsewhere.
pub fn failover_in(
    writes: &mut Writes,
    key: WithdrawalKey,
    status: WithdrawalStatus,
    actor: &Actor,
    reason: &str,
    correlation_id: &str,
    evidence: &crate::domain::StoredEvidence,
) -> Uuid {
    transition_in(writes, key, Some(status), status, actor, reason, correlation_id, Some(evidence))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn transition_in(
    writes: &mut Writes,
    key: WithdrawalKey,
    from: Option<WithdrawalStatus>,
    to: WithdrawalStatus,
    actor: &Actor,
    reason: &str,
    correlation_id: &str,
    evidence: Option<&crate::domain::StoredEvidence>,
) -> Uuid {
    let transition_id = Uuid::now_v7();
    writes.push(Sql::row(
        "INSERT INTO withdrawal_transitions (id, account_id, withdrawal_id, from_status, to_status, actor, reason,
                                                 correlation_id, at, evidence)
             VALUES ",
        [
            Arg::Uuid(transition_id),
            Arg::Uuid(key.account.0),
            Arg::Uuid(key.id.0),
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

/// A withdrawal's recorded state changes, oldest first.
pub async fn transitions(db: &crate::storage::Db, key: WithdrawalKey) -> Result<Vec<TransitionRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, TransitionRow>(
            "SELECT from_status, to_status, actor, reason, correlation_id, at, evidence
             FROM withdrawal_transitions WHERE account_id = $1 AND withdrawal_id = $2 ORDER BY at, id",
        )
        .bind(key.account.0)
        .bind(key.id.0)
        .fetch_all(&mut *conn)
        .await?
    }))
}
