//! Accounts, per-currency balances and the append-only ledger (SPEC §1.2).
//!
//! A balance row only ever changes together with a ledger entry that explains it, in the same
//! transaction; [`ledger_violations`] is the one query that proves the invariant.

use uuid::Uuid;

use super::batch::{Arg, Sql, Writes, Written};
use super::{DbTime, Result, Tx};
pub use crate::domain::EntryKind;
use crate::domain::{AccountId, Amount, Currency, WithdrawalId, WithdrawalKey};
use crate::{with_conn, with_read_conn};

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

/// Whether a customer account exists. The system account ([`AccountId::SYSTEM`], the owner of
/// work about no withdrawal) is not one: it takes no credits and no keys.
pub async fn account_exists(tx: &mut Tx, id: AccountId) -> Result<bool> {
    if id == AccountId::SYSTEM {
        return Ok(false);
    }
    let count: i64 = with_conn!(tx, |conn| {
        sqlx::query_scalar("SELECT COUNT(*) FROM accounts WHERE id = $1").bind(id.0).fetch_one(&mut *conn).await?
    });
    Ok(count > 0)
}

/// A credit to write: the money, who put it in, and the answer to store under its key.
pub struct NewCredit<'a> {
    pub id: Uuid,
    pub account: AccountId,
    pub idempotency_key: &'a str,
    /// What makes two requests "the same credit" (see `ops::credits`).
    pub fingerprint: &'a [u8],
    pub amount: Amount,
    pub reason: &'a str,
    /// `operator:<id>` or `local:<os user>`, on the credit and its ledger entry.
    pub actor: &'a str,
    /// The id of its `funding` ledger entry (chosen first, so the stored answer can name it).
    pub ledger_entry: Uuid,
    /// The answer, stored so that a replay of the key gives it again.
    pub response_body: &'a [u8],
}

/// What [`credit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credit {
    /// Credited: the balance, its `funding` ledger entry and the credit record.
    Done,
    /// The key is already stored for this account (the caller rolls back and reads it).
    KeyTaken,
    /// The balance's total (available + held + paid out: what was funded) would pass 64-bit
    /// minor units; nothing is written and the caller must roll back.
    Overflow,
}

/// Credits money from outside the system — the only write that does — inside the caller's
/// transaction: the credit record under its key first (so a concurrent request with the same key
/// waits for this one and then finds it), then the balance, raised only if its total still fits
/// 64 bits (checked in the statement, so it holds on both backends and under concurrency), then
/// the `funding` ledger entry naming the actor.
pub async fn credit(tx: &mut Tx, new: &NewCredit<'_>) -> Result<Credit> {
    let minor = new.amount.to_minor();
    let currency = new.amount.currency().code();
    let now = DbTime::now();
    let recorded = with_conn!(tx, |conn| {
        sqlx::query(
            "INSERT INTO account_credits (id, account_id, idempotency_key, fingerprint, currency, amount_minor, reason,
                                          actor, response_body, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (account_id, idempotency_key) DO NOTHING",
        )
        .bind(new.id)
        .bind(new.account.0)
        .bind(new.idempotency_key)
        .bind(new.fingerprint)
        .bind(currency)
        .bind(minor)
        .bind(new.reason)
        .bind(new.actor)
        .bind(new.response_body)
        .bind(now)
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    if recorded == 0 {
        return Ok(Credit::KeyTaken);
    }
    // `$max - $minor - held - paid_out` cannot overflow while the row's total fits 64 bits,
    // which every write keeps true (and the database refuses otherwise: migration 0018).
    let raised = with_conn!(tx, |conn| {
        sqlx::query(
            "INSERT INTO balances (account_id, currency, available, held, paid_out) VALUES ($1, $2, 0, 0, 0)
             ON CONFLICT (account_id, currency) DO NOTHING",
        )
        .bind(new.account.0)
        .bind(currency)
        .execute(&mut *conn)
        .await?;
        sqlx::query(
            "UPDATE balances SET available = available + $1
             WHERE account_id = $2 AND currency = $3 AND available <= $4 - $1 - held - paid_out",
        )
        .bind(minor)
        .bind(new.account.0)
        .bind(currency)
        .bind(i64::MAX)
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    if raised == 0 {
        return Ok(Credit::Overflow);
    }
    let mut writes = Writes::new();
    let funding = Entry { id: new.ledger_entry, kind: EntryKind::Funding, actor: Some(new.actor) };
    entry_in(&mut writes, new.account, new.amount.currency(), funding, minor, None, None);
    writes.run(tx).await?;
    Ok(Credit::Done)
}

/// A credit already stored under an account's key: what identifies its request, and its answer.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredCredit {
    pub fingerprint: Vec<u8>,
    pub response_body: Vec<u8>,
}

pub async fn stored_credit(tx: &mut Tx, account: AccountId, key: &str) -> Result<Option<StoredCredit>> {
    Ok(with_conn!(tx, |conn| {
        sqlx::query_as::<_, StoredCredit>(
            "SELECT fingerprint, response_body FROM account_credits WHERE account_id = $1 AND idempotency_key = $2",
        )
        .bind(account.0)
        .bind(key)
        .fetch_optional(&mut *conn)
        .await?
    }))
}

/// Moves `amount` from available to held if the account has it, as writes of a larger batch:
/// the conditional balance update (its count is the returned index; zero rows means
/// insufficient funds, and the caller must then roll back) and the ledger entry. The update
/// takes the balance row's lock, so two concurrent holds can never overdraw.
pub fn hold_in(writes: &mut Writes, withdrawal: WithdrawalKey, amount: Amount, transition: Uuid) -> Written {
    let account = withdrawal.account;
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
    entry_in(
        writes,
        account,
        amount.currency(),
        Entry::new(EntryKind::Hold),
        minor,
        Some(withdrawal.id),
        Some(transition),
    );
    held
}

/// A returned payout's re-credit (paid out → available) with its ledger entry, as writes of a
/// larger batch.
pub fn return_in(writes: &mut Writes, withdrawal: WithdrawalKey, amount: Amount) {
    let account = withdrawal.account;
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
    entry_in(writes, account, amount.currency(), Entry::new(EntryKind::Return), minor, Some(withdrawal.id), None);
}

/// A settle or release of a held amount with its ledger entry, as writes of a larger batch.
pub fn move_held_in(writes: &mut Writes, kind: EntryKind, withdrawal: WithdrawalKey, amount: Amount, transition: Uuid) {
    let account = withdrawal.account;
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
    entry_in(writes, account, amount.currency(), Entry::new(kind), minor, Some(withdrawal.id), Some(transition));
}

/// A ledger entry's identity: its id, its kind, and for a `funding` entry who put the money in
/// (the database refuses a new funding entry without).
struct Entry<'a> {
    id: Uuid,
    kind: EntryKind,
    actor: Option<&'a str>,
}

impl Entry<'_> {
    fn new(kind: EntryKind) -> Self {
        Entry { id: Uuid::now_v7(), kind, actor: None }
    }
}

/// A ledger entry as a write of a larger batch.
fn entry_in(
    writes: &mut Writes,
    account: AccountId,
    currency: Currency,
    entry: Entry<'_>,
    minor: i64,
    withdrawal: Option<WithdrawalId>,
    transition: Option<Uuid>,
) {
    let Entry { id, kind, actor } = entry;
    let (available, held, paid_out) = kind.deltas(minor);
    writes.push(Sql::row(
        "INSERT INTO ledger_entries (id, account_id, currency, kind, withdrawal_id, transition_id,
                                         available_delta, held_delta, paid_out_delta, created_at, actor)
             VALUES ",
        [
            Arg::Uuid(id),
            Arg::Uuid(account.0),
            Arg::Text(currency.code().to_owned()),
            Arg::Text(kind.as_str().to_owned()),
            Arg::OptUuid(withdrawal.map(|w| w.0)),
            Arg::OptUuid(transition),
            Arg::I64(available),
            Arg::I64(held),
            Arg::I64(paid_out),
            Arg::Time(DbTime::now()),
            Arg::OptText(actor.map(str::to_owned)),
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

/// A balance that its ledger does not explain, or whose stored values are not money.
///
/// Amounts are minor units in `i128`: a sum of 64-bit rows may pass 64 bits, and the check must
/// report that, not fail on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerViolation {
    pub account_id: Uuid,
    pub currency: String,
    pub available: i128,
    pub held: i128,
    pub paid_out: i128,
    pub funded: i128,
    pub ledger_available: i128,
    pub ledger_held: i128,
    pub ledger_paid_out: i128,
    /// What is stored that is not 64-bit integer minor units, in words (a REAL on SQLite, a
    /// total past 64 bits, ledger entries left out of the sums for that reason); empty for a
    /// plain difference. A corrupt value counts as 0 in the fields above.
    pub corrupt: Vec<String>,
}

/// One row of the check as the database wrote it: every amount as text, so nothing stored can
/// fail to decode (a REAL reads as `1.84467440737096e+19`, a sum past 64 bits as its digits).
#[derive(sqlx::FromRow)]
struct ViolationText {
    account_id: Uuid,
    currency: String,
    available: String,
    held: String,
    paid_out: String,
    funded: String,
    ledger_available: String,
    ledger_held: String,
    ledger_paid_out: String,
    corrupt_entries: i64,
}

impl ViolationText {
    fn into_violation(self) -> LedgerViolation {
        let mut corrupt = Vec::new();
        let mut amount = |what: &str, text: &str| match text.parse::<i128>() {
            Ok(minor) => minor,
            Err(_) => {
                corrupt.push(format!("{what} is not an integer amount: {text}"));
                0
            }
        };
        let mut v = LedgerViolation {
            account_id: self.account_id,
            available: amount("balance available", &self.available),
            held: amount("balance held", &self.held),
            paid_out: amount("balance paid_out", &self.paid_out),
            funded: amount("funded", &self.funded),
            ledger_available: amount("ledger available", &self.ledger_available),
            ledger_held: amount("ledger held", &self.ledger_held),
            ledger_paid_out: amount("ledger paid_out", &self.ledger_paid_out),
            currency: self.currency,
            corrupt,
        };
        if self.corrupt_entries > 0 {
            v.corrupt.push(format!(
                "{} ledger entr{} with non-integer amounts, left out of the sums",
                self.corrupt_entries,
                if self.corrupt_entries == 1 { "y" } else { "ies" }
            ));
        }
        if v.available + v.held + v.paid_out > i128::from(i64::MAX) {
            v.corrupt.push("the balance's total (what was funded) is past 64-bit minor units".to_owned());
        }
        v
    }
}

/// The ledger invariant of SPEC §1.2 as one query: for every account and currency,
/// `available + held + paid_out` equals the funding entries, and each balance column equals the
/// sum of its ledger deltas. Returns the rows that break it (none, always) — and the rows whose
/// values are not money (issue 27: a REAL balance answered 500 here), as findings, never as an
/// error. PostgreSQL sums in `numeric` (exact, cannot overflow); SQLite leaves non-integer values
/// out of its sums and names them.
pub async fn ledger_violations(db: &super::Db) -> Result<Vec<LedgerViolation>> {
    const POSTGRES: &str = "
        SELECT b.account_id, b.currency,
               CAST(b.available AS TEXT) AS available, CAST(b.held AS TEXT) AS held,
               CAST(b.paid_out AS TEXT) AS paid_out,
               CAST(COALESCE(l.funded, 0) AS TEXT) AS funded,
               CAST(COALESCE(l.available, 0) AS TEXT) AS ledger_available,
               CAST(COALESCE(l.held, 0) AS TEXT) AS ledger_held,
               CAST(COALESCE(l.paid_out, 0) AS TEXT) AS ledger_paid_out,
               CAST(0 AS BIGINT) AS corrupt_entries
        FROM balances b
        LEFT JOIN (
            SELECT account_id, currency,
                   SUM(CASE WHEN kind = 'funding' THEN available_delta ELSE 0 END) AS funded,
                   SUM(available_delta) AS available, SUM(held_delta) AS held, SUM(paid_out_delta) AS paid_out
            FROM ledger_entries GROUP BY account_id, currency
        ) l ON l.account_id = b.account_id AND l.currency = b.currency
        WHERE CAST(b.available AS NUMERIC) + b.held + b.paid_out <> COALESCE(l.funded, 0)
           OR b.available <> COALESCE(l.available, 0)
           OR b.held <> COALESCE(l.held, 0)
           OR b.paid_out <> COALESCE(l.paid_out, 0)
           OR CAST(b.available AS NUMERIC) + b.held + b.paid_out > 9223372036854775807";
    const SQLITE: &str = "
        SELECT b.account_id, b.currency,
               CAST(b.available AS TEXT) AS available, CAST(b.held AS TEXT) AS held,
               CAST(b.paid_out AS TEXT) AS paid_out,
               CAST(COALESCE(l.funded, 0) AS TEXT) AS funded,
               CAST(COALESCE(l.available, 0) AS TEXT) AS ledger_available,
               CAST(COALESCE(l.held, 0) AS TEXT) AS ledger_held,
               CAST(COALESCE(l.paid_out, 0) AS TEXT) AS ledger_paid_out,
               COALESCE(l.corrupt_entries, 0) AS corrupt_entries
        FROM balances b
        LEFT JOIN (
            SELECT account_id, currency,
                   SUM(CASE WHEN kind = 'funding' AND whole THEN available_delta ELSE 0 END) AS funded,
                   SUM(CASE WHEN whole THEN available_delta ELSE 0 END) AS available,
                   SUM(CASE WHEN whole THEN held_delta ELSE 0 END) AS held,
                   SUM(CASE WHEN whole THEN paid_out_delta ELSE 0 END) AS paid_out,
                   SUM(CASE WHEN whole THEN 0 ELSE 1 END) AS corrupt_entries
            FROM (SELECT account_id, currency, kind, available_delta, held_delta, paid_out_delta,
                         typeof(available_delta) = 'integer' AND typeof(held_delta) = 'integer'
                           AND typeof(paid_out_delta) = 'integer' AS whole
                  FROM ledger_entries)
            GROUP BY account_id, currency
        ) l ON l.account_id = b.account_id AND l.currency = b.currency
        WHERE typeof(b.available) <> 'integer' OR typeof(b.held) <> 'integer' OR typeof(b.paid_out) <> 'integer'
           OR typeof(b.available + b.held + b.paid_out) <> 'integer'
           OR COALESCE(l.corrupt_entries, 0) > 0
           OR b.available + b.held + b.paid_out <> COALESCE(l.funded, 0)
           OR b.available <> COALESCE(l.available, 0)
           OR b.held <> COALESCE(l.held, 0)
           OR b.paid_out <> COALESCE(l.paid_out, 0)";
    let rows: Vec<ViolationText> = match db {
        super::Db::Postgres(pool) => sqlx::query_as(POSTGRES).fetch_all(pool).await?,
        super::Db::Sqlite(sqlite) => sqlx::query_as(SQLITE).fetch_all(sqlite.reader()).await?,
    };
    Ok(rows.into_iter().map(ViolationText::into_violation).collect())
}

/// A `funding` ledger entry: money that entered, and who put it in.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct FundingEntry {
    pub id: Uuid,
    pub currency: String,
    /// Minor units.
    pub amount: i64,
    /// `operator:<id>` or `local:<os user>`; `None` for entries written before migration 0018.
    pub actor: Option<String>,
    pub created_at: DbTime,
}

/// The account's funding entries, oldest first.
pub async fn funding_entries(db: &super::Db, account: AccountId) -> Result<Vec<FundingEntry>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, FundingEntry>(
            "SELECT id, currency, available_delta AS amount, actor, created_at FROM ledger_entries
             WHERE account_id = $1 AND kind = 'funding' ORDER BY created_at, id",
        )
        .bind(account.0)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// One ledger entry, as evidence on a withdrawal.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LedgerEntry {
    pub id: Uuid,
    pub kind: EntryKind,
    pub currency: String,
    pub available_delta: i64,
    pub held_delta: i64,
    pub paid_out_delta: i64,
    pub created_at: DbTime,
}

/// A withdrawal's ledger entries, oldest first.
pub async fn entries_for_withdrawal(db: &super::Db, withdrawal: WithdrawalKey) -> Result<Vec<LedgerEntry>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, LedgerEntry>(
            "SELECT id, kind, currency, available_delta, held_delta, paid_out_delta, created_at
             FROM ledger_entries WHERE account_id = $1 AND withdrawal_id = $2 ORDER BY created_at, id",
        )
        .bind(withdrawal.account.0)
        .bind(withdrawal.id.0)
        .fetch_all(&mut *conn)
        .await?
    }))
}
