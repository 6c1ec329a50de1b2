//! Several writes of one transaction sent as one statement where the backend allows it.
//!
//! A [`Writes`] is a list of `INSERT`/`UPDATE` statements, each with its own parameters
//! numbered from `$1`, that do not read each other's results. On PostgreSQL they go to the
//! server as one statement of data-modifying CTEs (`WITH w0 AS (… RETURNING 1), w1 AS (…) SELECT
//! count(*) …`): one round trip instead of one per write, and foreign keys between them hold
//! because PostgreSQL checks them at the end of the statement. SQLite runs in-process, where a
//! statement costs no round trip, and runs them one by one in order. Either way the caller gets
//! the rows each write touched, and decides — before committing — whether the transaction stands.
//!
//! A batch must not write the same row twice: PostgreSQL applies only one of two modifications
//! of one row within a statement. The batches built here write distinct rows (a withdrawal, its
//! transition, one balance, ledger entries, a job, an idempotency record).
//!
//! Each write's SQL is the one its owner module always runs, so a single write through
//! [`Writes::run`] and the same write in a batch are the same statement.

use serde_json::Value;
use sqlx::Row;
use uuid::Uuid;

use super::{DbTime, Result, Tx, TxConn};

/// Binds one [`Arg`] to a query of either backend (the same match, monomorphised per backend).
macro_rules! bind_arg {
    ($query:expr, $arg:expr) => {
        match $arg {
            Arg::Uuid(v) => $query.bind(*v),
            Arg::OptUuid(v) => $query.bind(*v),
            Arg::I64(v) => $query.bind(*v),
            Arg::OptI64(v) => $query.bind(*v),
            Arg::Bool(v) => $query.bind(*v),
            Arg::Text(v) => $query.bind(v.as_str()),
            Arg::OptText(v) => $query.bind(v.as_deref()),
            Arg::Bytes(v) => $query.bind(v.as_slice()),
            Arg::Time(v) => $query.bind(*v),
            Arg::OptTime(v) => $query.bind(*v),
            Arg::Json(v) => $query.bind(sqlx::types::Json(v)),
            Arg::OptJson(v) => $query.bind(v.as_ref().map(sqlx::types::Json)),
        }
    };
}

/// One bound value.
#[derive(Debug, Clone)]
pub enum Arg {
    Uuid(Uuid),
    OptUuid(Option<Uuid>),
    I64(i64),
    OptI64(Option<i64>),
    Bool(bool),
    Text(String),
    OptText(Option<String>),
    Bytes(Vec<u8>),
    Time(DbTime),
    OptTime(Option<DbTime>),
    Json(Value),
    OptJson(Option<Value>),
}

#[derive(Debug, Clone)]
struct Write {
    sql: &'static str,
    args: Vec<Arg>,
}

/// A write added to a [`Writes`]: asks the [`Ran`] outcome how many rows it touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written(usize);

/// The writes of another batch appended to this one ([`Writes::append`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    first: usize,
    len: usize,
}

/// What running a [`Writes`] did: the rows each write touched, read by its handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    counts: Vec<u64>,
}

impl Ran {
    /// The rows `write` touched.
    pub fn rows(&self, write: Written) -> u64 {
        self.counts[write.0]
    }

    /// Whether `write` touched exactly one row (a guarded update that applied, an insert).
    pub fn applied(&self, write: Written) -> bool {
        self.rows(write) == 1
    }

    /// The outcome of the appended writes alone, read by the handles their own batch gave.
    pub fn part(&self, appended: Appended) -> Ran {
        Ran { counts: self.counts[appended.first..appended.first + appended.len].to_vec() }
    }
}

/// Writes to send together; see the module documentation.
#[derive(Debug, Clone, Default)]
pub struct Writes {
    writes: Vec<Write>,
    /// A PostgreSQL `NOTIFY` (channel, payload) sent by the same statement, delivered at commit.
    notify: Option<[Arg; 2]>,
}

impl Writes {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a write; its handle reads its outcome from what [`Writes::run`] returns.
    pub fn push(&mut self, sql: &'static str, args: Vec<Arg>) -> Written {
        self.writes.push(Write { sql, args });
        Written(self.writes.len() - 1)
    }

    /// Appends `other`'s writes (and its notification).
    pub fn append(&mut self, other: Writes) -> Appended {
        let first = self.writes.len();
        let len = other.writes.len();
        self.writes.extend(other.writes);
        if other.notify.is_some() {
            self.notify = other.notify;
        }
        Appended { first, len }
    }

    /// Also sends `NOTIFY channel, payload` on PostgreSQL; on SQLite, wakes this process's
    /// workers instead ([`super::jobs::local_wakeups`]).
    pub fn notify(&mut self, channel: &'static str, payload: &str) {
        self.notify = Some([Arg::Text(channel.to_owned()), Arg::Text(payload.to_owned())]);
    }

    /// Runs the writes inside `tx`; the outcome reads the rows each one touched by its handle.
    pub async fn run(&self, tx: &mut Tx) -> Result<Ran> {
        Ok(Ran { counts: self.counts(tx).await? })
    }

    async fn counts(&self, tx: &mut Tx) -> Result<Vec<u64>> {
        if self.writes.is_empty() && self.notify.is_none() {
            return Ok(Vec::new());
        }
        match &mut tx.conn {
            TxConn::Postgres(t) => {
                let (sql, args) = self.as_one_statement();
                let mut query = sqlx::query(&sql);
                for arg in args {
                    query = bind_arg!(query, arg);
                }
                let row = query.fetch_one(&mut **t).await?;
                (0..self.writes.len()).map(|i| Ok(row.try_get::<i64, _>(i)? as u64)).collect()
            }
            TxConn::Sqlite(t) => {
                if self.notify.is_some() {
                    // No NOTIFY on SQLite: wake this process's workers (see `jobs::local_wakeups`).
                    super::jobs::local_wakeups().notify_one();
                }
                let mut counts = Vec::with_capacity(self.writes.len());
                for write in &self.writes {
                    let mut query = sqlx::query(write.sql);
                    for arg in &write.args {
                        query = bind_arg!(query, arg);
                    }
                    counts.push(query.execute(&mut **t).await?.rows_affected());
                }
                Ok(counts)
            }
        }
    }

    /// The PostgreSQL statement: each write a CTE with its parameters renumbered after the
    /// previous writes', then one count per write (and the notification, if any).
    fn as_one_statement(&self) -> (String, Vec<&Arg>) {
        let mut ctes = Vec::with_capacity(self.writes.len());
        let mut counts = Vec::with_capacity(self.writes.len() + 1);
        let mut args: Vec<&Arg> = Vec::new();
        for (i, write) in self.writes.iter().enumerate() {
            ctes.push(format!("w{i} AS ({} RETURNING 1)", renumber(write.sql, args.len())));
            counts.push(format!("(SELECT count(*) FROM w{i})"));
            args.extend(&write.args);
        }
        if let Some(notify) = &self.notify {
            counts.push(format!("pg_notify(${}, ${})", args.len() + 1, args.len() + 2));
            args.extend(notify);
        }
        let with = if ctes.is_empty() { String::new() } else { format!("WITH {} ", ctes.join(", ")) };
        (format!("{with}SELECT {}", counts.join(", ")), args)
    }
}

/// `sql` with every `$n` parameter shifted by `offset`.
fn renumber(sql: &str, offset: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        out.push(c);
        if c != '$' {
            continue;
        }
        let mut digits = String::new();
        while let Some((_, d)) = chars.peek().filter(|(_, d)| d.is_ascii_digit()) {
            digits.push(*d);
            chars.next();
        }
        match digits.parse::<usize>() {
            Ok(n) => out.push_str(&(n + offset).to_string()),
            Err(_) => out.push_str(&digits),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_shifted_past_the_previous_writes() {
        assert_eq!(
            renumber("UPDATE t SET a = $1, b = $12 WHERE c = $2", 3),
            "UPDATE t SET a = $4, b = $15 WHERE c = $5"
        );
        assert_eq!(renumber("SELECT 'x' || $1", 0), "SELECT 'x' || $1");
    }

    #[test]
    fn writes_become_one_statement_with_a_count_each() {
        let mut writes = Writes::new();
        writes.push("INSERT INTO a (x) VALUES ($1)", vec![Arg::I64(1)]);
        writes.push("UPDATE b SET y = $1 WHERE z = $2", vec![Arg::I64(2), Arg::I64(3)]);
        writes.notify("chan", "payload");
        let (sql, args) = writes.as_one_statement();
        assert_eq!(
            sql,
            "WITH w0 AS (INSERT INTO a (x) VALUES ($1) RETURNING 1), w1 AS (UPDATE b SET y = $2 WHERE z = $3 RETURNING 1) \
             SELECT (SELECT count(*) FROM w0), (SELECT count(*) FROM w1), pg_notify($4, $5)"
        );
        assert_eq!(args.len(), 5);
    }

    #[test]
    fn handles_read_their_own_writes_outcome_also_after_an_append() {
        let mut theirs = Writes::new();
        let first = theirs.push("UPDATE c SET x = 1", vec![]);
        let second = theirs.push("UPDATE d SET x = 1", vec![]);
        let mut writes = Writes::new();
        let guard = writes.push("UPDATE a SET x = 1", vec![]);
        let insert = writes.push("INSERT INTO b (x) VALUES (1)", vec![]);
        let appended = writes.append(theirs);
        // As `run` would answer: the guard touched nothing, the rest one row or two.
        let ran = Ran { counts: vec![0, 1, 2, 1] };
        assert!(!ran.applied(guard) && ran.applied(insert));
        let part = ran.part(appended);
        assert_eq!((part.rows(first), part.rows(second)), (2, 1));
        assert!(!part.applied(first) && part.applied(second));
    }

    #[test]
    fn a_notification_alone_is_a_plain_select() {
        let mut writes = Writes::new();
        writes.notify("chan", "payload");
        assert_eq!(writes.as_one_statement().0, "SELECT pg_notify($1, $2)");
    }
}
