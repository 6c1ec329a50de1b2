//! Accounts, per-currency balances and the append-only ledger (SPEC §1.2).
//!
//! A balance row only ever changes together with a ledger entry that explains it, in the same
//! transaction; [`ledger_violations`] is the one query that proves the invariant.

use uuid::Uuid;

use super::batch::{Arg, Sql, Writes, Written};
use super::{DbTime, Result, Tx};
use crate::domain::{AccountId, Amount, Currency, WithdrawalId};
use crate::{with_conn, with_read_conn};

/// Why a balance moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// Money arriving from outside (the account's funding; the invariant's right-hand side).
    Funding,
    /// available → held, when a withdrawal is created.
    Hold,
    /// held → paid out, when the provider confirms.
    Settle,
    /// held → available, when a withdrawal definitively fails.
    Release,
    /// paid out → available, when the bank returns a paid payout (SPEC §14.3).
    Return,
}

impl EntryKind {
    fn as_str(self) -> &'static str {
        match self {
            EntryKind::Funding => "funding",
            EntryKind::Hold => "hold",
            EntryKind::Settle => "settle",
            EntryKind::Release => "release",
            EntryKind::Return => "return",
        }
    }

    /// (available, held, paid_out) deltas for `amount` minor units.
    fn deltas(self, amount: i64) -> (i64, i64, i64) {
        match self {
            EntryKind::Funding => (amount, 0, 0),
            EntryKind::Hold => (-amount, amount, 0),
            EntryKind::Settle => (0, -amount, amount),
            EntryKind::Release => (amount, -amount, 0),
            EntryKind::Return => (amount, 0, -amount),
        }
    }
}

pub async fn create_account(tx: &mut Tx, name: &str) -> Result<AccountId> {
    let id = AccountId::new();
    with_conn!(tx, |conn| {
        sqlx::query("INSERT INTO accounts (id, name, created_at) VALUES ($1, $2, $3)")
            .bind(id.0)
            .bind(name)
            .bind(DbTime::now())
            .execute(&mut *conn)
            .await?;
    });
    Ok(id)
}

pub async fn account_exists(tx: &mut Tx, id: AccountId) -> Result<bool> {
    let count: i64 = with_conn!(tx, |conn| {
        sqlx::query_scalar("SELECT COUNT(*) FROM accounts WHERE id = $1").bind(id.0).fetch_one(&mut *conn).await?
    });
    Ok(count > 0)
}

/// Credits money from outside the system.
pub async fn fund(tx: &mut Tx, account: AccountId, amount: Amount) -> Result<()> {
    let minor = amount.to_minor();
    let mut writes = Writes::new();
    writes.push(
        Sql::new("INSERT INTO balances (account_id, currency, available, held, paid_out) VALUES (")
            .binds([Arg::Uuid(account.0), amount.currency().code().into(), Arg::I64(minor)])
            .sql(", 0, 0) ON CONFLICT (account_id, currency) DO UPDATE SET available = balances.available + excluded.available"),
    );
    entry_in(&mut writes, account, amount.currency(), EntryKind::Funding, minor, None, None);
    writes.run(tx).await?;
    Ok(())
}

/// Moves `amount` from available to held if the account has it, as writes of a larger batch:
/// the conditional balance update (its count is the returned index; zero rows means
/// insufficient funds, and the caller must then roll back) and the ledger entry. The update
/// takes the balance row's lock, so two concurrent holds can never overdraw.
pub fn hold_in(
    writes: &mut Writes,
    account: AccountId,
    amount: Amount,
    withdrawal: WithdrawalId,
    transition: Uuid,
) -> Written {
    let minor = amount.to_minor();
    let held = writes.push(
        Sql::new("UPDATE balances SET available = available - ")
            .bind(minor)
            .sql(", held = held + ")
            .bind(minor)
            .sql(" WHERE account_id = ")
            .bind(account.0)
            .sql(" AND currency = ")
            .bind(amount.currency().code())
            .sql(" AND available >= ")
            .bind(minor),
    );
    entry_in(writes, account, amount.currency(), EntryKind::Hold, minor, Some(withdrawal), Some(transition));
    held
}

/// A returned payout's re-credit (paid out → available) with its ledger entry, as writes of a
/// larger batch.
pub fn return_in(writes: &mut Writes, account: AccountId, amount: Amount, withdrawal: WithdrawalId) {
    let minor = amount.to_minor();
    writes.push(
        Sql::new("UPDATE balances SET available = available + ")
            .bind(minor)
            .sql(", paid_out = paid_out - ")
            .bind(minor)
            .sql(" WHERE account_id = ")
            .bind(account.0)
            .sql(" AND currency = ")
            .bind(amount.currency().code()),
    );
    entry_in(writes, account, amount.currency(), EntryKind::Return, minor, Some(withdrawal), None);
}

/// A settle or release of a held amount with its ledger entry, as writes of a larger batch.
pub fn move_held_in(
    writes: &mut Writes,
    kind: EntryKind,
    account: AccountId,
    amount: Amount,
    withdrawal: WithdrawalId,
    transition: Uuid,
) {
    let minor = amount.to_minor();
    let (available, held, paid_out) = kind.deltas(minor);
    writes.push(
        Sql::new("UPDATE balances SET available = available + ")
            .bind(available)
            .sql(", held = held + ")
            .bind(held)
            .sql(", paid_out = paid_out + ")
            .bind(paid_out)
            .sql(" WHERE account_id = ")
            .bind(account.0)
            .sql(" AND currency = ")
            .bind(amount.currency().code()),
    );
    entry_in(writes, account, amount.currency(), kind, minor, Some(withdrawal), Some(transition));
}

fn entry_in(
    writes: &mut Writes,
    account: AccountId,
    currency: Currency,
    kind: EntryKind,
    minor: i64,
    withdrawal: Option<WithdrawalId>,
    transition: Option<Uuid>,
) {
    let (available, held, paid_out) = kind.deltas(minor);
    writes.push(Sql::row(
        "INSERT INTO ledger_entries (id, account_id, currency, kind, withdrawal_id, transition_id,
                                         available_delta, held_delta, paid_out_delta, created_at)
             VALUES ",
        [
            Arg::Uuid(Uuid::now_v7()),
            Arg::Uuid(account.0),
            Arg::Text(currency.code().to_owned()),
            Arg::Text(kind.as_str().to_owned()),
            Arg::OptUuid(withdrawal.map(|w| w.0)),
            Arg::OptUuid(transition),
            Arg::I64(available),
            Arg::I64(held),
            Arg::I64(paid_out),
            Arg::Time(DbTime::now()),
        ],
        "",
    ));
}

/// One currency's balance, in minor units.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct BalanceRow {
    pub currency: String,
    pub available: i64,
    pub held: i64,
    pub paid_out: i64,
}

pub async fn balances(db: &super::Db, account: AccountId) -> Result<Vec<BalanceRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, BalanceRow>(
            "SELECT currency, available, held, paid_out FROM balances WHERE account_id = $1 ORDER BY currency",
        )
        .bind(account.0)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// A balance that its ledger does not explain.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LedgerViolation {
    pub account_id: Uuid,
    pub currency: String,
    pub available: i64,
    pub held: i64,
    pub paid_out: i64,
    pub funded: i64,
    pub ledger_available: i64,
    pub ledger_held: i64,
    pub ledger_paid_out: i64,
}

/// The ledger invariant of SPEC §1.2 as one query: for every account and currency,
/// `available + held + paid_out` equals the funding entries, and each balance column equals the
/// sum of its ledger deltas. Returns the rows that break it (none, always).
pub async fn ledger_violations(db: &super::Db) -> Result<Vec<LedgerViolation>> {
    const SQL: &str = "
        SELECT b.account_id, b.currency, b.available, b.held, b.paid_out,
               COALESCE(l.funded, 0) AS funded,
               COALESCE(l.available, 0) AS ledger_available,
               COALESCE(l.held, 0) AS ledger_held,
               COALESCE(l.paid_out, 0) AS ledger_paid_out
        FROM balances b
        LEFT JOIN (
            SELECT account_id, currency,
                   CAST(SUM(CASE WHEN kind = 'funding' THEN available_delta ELSE 0 END) AS BIGINT) AS funded,
                   CAST(SUM(available_delta) AS BIGINT) AS available,
                   CAST(SUM(held_delta) AS BIGINT) AS held,
                   CAST(SUM(paid_out_delta) AS BIGINT) AS paid_out
            FROM ledger_entries GROUP BY account_id, currency
        ) l ON l.account_id = b.account_id AND l.currency = b.currency
        WHERE b.available + b.held + b.paid_out <> COALESCE(l.funded, 0)
           OR b.available <> COALESCE(l.available, 0)
           OR b.held <> COALESCE(l.held, 0)
           OR b.paid_out <> COALESCE(l.paid_out, 0)";
    Ok(with_read_conn!(db, |conn| sqlx::query_as::<_, LedgerViolation>(SQL).fetch_all(&mut *conn).await?))
}

/// One ledger entry, as evidence on a withdrawal.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LedgerEntry {
    pub id: Uuid,
    pub kind: String,
    pub currency: String,
    pub available_delta: i64,
    pub held_delta: i64,
    pub paid_out_delta: i64,
    pub created_at: DbTime,
}

pub async fn entries_for_withdrawal(db: &super::Db, withdrawal: WithdrawalId) -> Result<Vec<LedgerEntry>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, LedgerEntry>(
            "SELECT id, kind, currency, available_delta, held_delta, paid_out_delta, created_at
             FROM ledger_entries WHERE withdrawal_id = $1 ORDER BY created_at, id",
        )
        .bind(withdrawal.0)
        .fetch_all(&mut *conn)
        .await?
    }))
}
