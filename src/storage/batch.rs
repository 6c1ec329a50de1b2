//! Several writes of one transaction sent as one statement where the backend allows it.
//!
//! A [`Writes`] is a list of `INSERT`/`UPDATE` statements that do not read each other's
//! results. Each is an [`Sql`]: its text and its values in order, the way `sqlx::QueryBuilder`
//! builds a query (`.sql(text)`, `.bind(value)`), so no statement carries parameter numbers of
//! its own: they are given when the batch is built, by `QueryBuilder::push_bind`. On PostgreSQL
//! the writes go to the server as one statement of data-modifying CTEs (`WITH w0 AS (… RETURNING
//! 1), w1 AS (…) SELECT count(*) …`): one round trip instead of one per write, and foreign keys
//! between them hold because PostgreSQL checks them at the end of the statement; the rows of one
//! plain `INSERT` shape ([`Sql::row`]) share one CTE, a multi-row `INSERT`. SQLite runs
//! in-process, where a statement costs no round trip, and runs them one by one in order. Either
//! way [`Writes::run`] returns a [`Ran`] that answers, for the typed handle ([`Written`]) each
//! write was given when pushed, how many rows it touched — before the caller commits.
//!
//! A batch must not write the same row twice: PostgreSQL applies only one of two modifications
//! of one row within a statement. The batches built here write distinct rows (a withdrawal, its
//! transition, one balance, ledger entries, a job, an idempotency record).
//!
//! Each write's SQL is the one its owner module always runs, so a single write through
//! [`Writes::run`] and the same write in a batch are the same statement.

use serde_json::Value;
use sqlx::{Postgres, QueryBuilder, Row, Sqlite};
use uuid::Uuid;

use super::{DbTime, Result, Tx, TxConn};

/// Pushes an [`Sql`]'s text and values onto a `QueryBuilder` of either backend (the same match,
/// monomorphised per backend): text with `push`, every value with `push_bind`.
macro_rules! push_sql {
    ($builder:expr, $sql:expr) => {
        push_pieces!($builder, &$sql.pieces)
    };
}

/// [`push_sql!`] for a slice of pieces (a row of a multi-row `INSERT`).
macro_rules! push_pieces {
    ($builder:expr, $pieces:expr) => {
        for piece in $pieces {
            match piece {
                Piece::Text(text) => {
                    $builder.push(*text);
                }
                Piece::Value(arg) => {
                    match arg {
                        Arg::Uuid(v) => $builder.push_bind(*v),
                        Arg::OptUuid(v) => $builder.push_bind(*v),
                        Arg::I64(v) => $builder.push_bind(*v),
                        Arg::OptI64(v) => $builder.push_bind(*v),
                        Arg::Bool(v) => $builder.push_bind(*v),
                        Arg::Text(v) => $builder.push_bind(v.as_str()),
                        Arg::OptText(v) => $builder.push_bind(v.as_deref()),
                        Arg::Bytes(v) => $builder.push_bind(v.as_slice()),
                        Arg::Time(v) => $builder.push_bind(*v),
                        Arg::OptTime(v) => $builder.push_bind(*v),
                        Arg::Json(v) => $builder.push_bind(sqlx::types::Json(v)),
                        Arg::OptJson(v) => $builder.push_bind(v.as_ref().map(sqlx::types::Json)),
                    };
                }
            }
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

macro_rules! arg_from {
    ($($t:ty => $variant:ident),* $(,)?) => {
        $(impl From<$t> for Arg {
            fn from(v: $t) -> Self {
                Arg::$variant(v.into())
            }
        })*
    };
}

arg_from!(
    Uuid => Uuid, Option<Uuid> => OptUuid, i64 => I64, Option<i64> => OptI64, bool => Bool,
    String => Text, &str => Text, Option<String> => OptText, Vec<u8> => Bytes, &[u8] => Bytes,
    DbTime => Time, Option<DbTime> => OptTime, Value => Json, Option<Value> => OptJson,
);

impl From<Option<&str>> for Arg {
    fn from(v: Option<&str>) -> Self {
        Arg::OptText(v.map(str::to_owned))
    }
}

#[derive(Debug, Clone)]
enum Piece {
    Text(&'static str),
    Value(Arg),
}

/// One statement's text and values in order (see the module documentation):
/// `Sql::new("UPDATE t SET a = ").bind(1_i64).sql(" WHERE id = ").bind(id)`.
#[derive(Debug, Clone, Default)]
pub struct Sql {
    pieces: Vec<Piece>,
    /// For one row of a plain `INSERT` ([`Sql::row`]): its text before the row and the constants
    /// closing the row. A batch sends the rows of one such shape as one multi-row `INSERT`.
    row_of: Option<(&'static str, &'static str)>,
    /// For one row of a guarded `UPDATE` that a batch may send set-based ([`Sql::keyed`]).
    keyed: Option<Keyed>,
}

/// The shape of a guarded `UPDATE` of one row by its id, in set form: `UPDATE <table> AS t SET
/// <set> FROM (VALUES (…), (…)) AS <values> WHERE <filter>`. The first value of every row is
/// the id of the row it updates, and the set form returns the ids it updated.
#[derive(Debug)]
pub struct SetUpdate {
    /// `UPDATE <table> AS t SET …`, reading each row's values as `v.<column>`.
    pub set: &'static str,
    /// `v(id, …)`: the names of the values, the id first.
    pub values: &'static str,
    /// The guard, comparing `t` with `v` (`t.id = v.id AND …`).
    pub filter: &'static str,
}

#[derive(Debug, Clone)]
struct Keyed {
    shape: &'static SetUpdate,
    id: Uuid,
    /// The row's values after the id, as [`Piece::Value`]s.
    values: Vec<Piece>,
}

impl Sql {
    pub fn new(text: &'static str) -> Self {
        Self { pieces: vec![Piece::Text(text)], row_of: None, keyed: None }
    }

    /// A guarded `UPDATE` of the row `id`: `alone` is the statement on its own; `shape` and
    /// `values` (the row's values in the order `shape.values` names them, after the id) are the
    /// same guard in set form. In a batch on PostgreSQL, two or more rows of one shape go as one
    /// set-based `UPDATE … FROM (VALUES …)` — one statement per table — and each row's handle
    /// reads whether its guard held from the ids the statement returned. `alone` and the set form
    /// must be the same guard: the payout tests and chaos run the set form (batches) and the
    /// single form (one-job path, SQLite) against the same expectations.
    pub fn keyed<const N: usize>(alone: Sql, shape: &'static SetUpdate, id: Uuid, values: [Arg; N]) -> Self {
        Self { keyed: Some(Keyed { shape, id, values: values.into_iter().map(Piece::Value).collect() }), ..alone }
    }

    /// One row of a plain `INSERT` (no `ON CONFLICT`, no `RETURNING`): `head` is
    /// `INSERT INTO t (…) VALUES `, then `(values…` and `constants` (literal columns after the
    /// values, such as `, 'pending'`, or empty) and `)`. In a batch on PostgreSQL, every row of
    /// the same `head` and `constants` goes in one multi-row `INSERT` — one statement per table
    /// for the whole batch — and each keeps its own handle: a plain insert either writes its one
    /// row or fails the statement, so each counts 1.
    pub fn row<const N: usize>(head: &'static str, values: [Arg; N], constants: &'static str) -> Self {
        let mut sql = Self::new(head).sql("(").binds(values).sql(constants).sql(")");
        sql.row_of = Some((head, constants));
        sql
    }

    /// More text.
    pub fn sql(mut self, text: &'static str) -> Self {
        self.pieces.push(Piece::Text(text));
        self
    }

    /// A value, sent as a bound parameter.
    pub fn bind(mut self, value: impl Into<Arg>) -> Self {
        self.pieces.push(Piece::Value(value.into()));
        self
    }

    /// Values separated by commas (an `INSERT`'s `VALUES (…)` list).
    pub fn binds<const N: usize>(mut self, values: [Arg; N]) -> Self {
        for (i, value) in values.into_iter().enumerate() {
            if i > 0 {
                self.pieces.push(Piece::Text(", "));
            }
            self.pieces.push(Piece::Value(value));
        }
        self
    }

    /// The statement for PostgreSQL, to run on its own (a read-back with `RETURNING`, say).
    pub fn postgres(&self) -> QueryBuilder<'_, Postgres> {
        let mut builder = QueryBuilder::new("");
        push_sql!(builder, self);
        builder
    }

    /// The statement for SQLite.
    pub fn sqlite(&self) -> QueryBuilder<'_, Sqlite> {
        let mut builder = QueryBuilder::new("");
        push_sql!(builder, self);
        builder
    }
}

/// One CTE of the PostgreSQL statement: a write, or the rows of one `INSERT` shape.
#[derive(Debug, PartialEq, Eq)]
enum Cte {
    One(usize),
    Rows(Vec<usize>),
    /// Rows of one [`SetUpdate`] shape: the CTE returns the ids it updated.
    Set(Vec<usize>),
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
    writes: Vec<Sql>,
    /// A PostgreSQL `NOTIFY` (channel, payload) sent by the same statement, delivered at commit.
    notify: Option<(&'static str, String)>,
}

impl Writes {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a write; its handle reads its outcome from what [`Writes::run`] returns.
    pub fn push(&mut self, sql: Sql) -> Written {
        self.writes.push(sql);
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
    /// workers instead ([`super::local_wakeups`]).
    pub fn notify(&mut self, channel: &'static str, payload: &str) {
        self.notify = Some((channel, payload.to_owned()));
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
                let row = self.as_one_statement().build().fetch_one(&mut **t).await?;
                let mut counts = vec![0; self.writes.len()];
                for (c, cte) in self.ctes().iter().enumerate() {
                    if let Cte::Set(rows) = cte {
                        let updated: Vec<Uuid> = row.try_get(c)?;
                        for i in rows {
                            counts[*i] = u64::from(updated.contains(&self.keyed(*i).id));
                        }
                        continue;
                    }
                    let touched = row.try_get::<i64, _>(c)? as u64;
                    match cte {
                        Cte::One(i) => counts[*i] = touched,
                        // Plain inserts: all of them, or the statement failed.
                        Cte::Rows(rows) => rows.iter().for_each(|i| counts[*i] = touched / rows.len() as u64),
                        Cte::Set(_) => unreachable!("read above"),
                    }
                }
                Ok(counts)
            }
            TxConn::Sqlite(t) => {
                if self.notify.is_some() {
                    // No NOTIFY on SQLite: wake this process's workers (see `local_wakeups`).
                    super::local_wakeups().notify_one();
                }
                let mut counts = Vec::with_capacity(self.writes.len());
                for write in &self.writes {
                    counts.push(write.sqlite().build().execute(&mut **t).await?.rows_affected());
                }
                Ok(counts)
            }
        }
    }

    /// The set-form part of write `i` (only called for writes a [`Cte::Set`] holds).
    fn keyed(&self, i: usize) -> &Keyed {
        self.writes[i].keyed.as_ref().expect("a set-form write carries its keyed values")
    }

    /// The statement's CTEs: each write its own, except rows of one [`Sql::row`] shape, which
    /// share one (at the place of the first).
    fn ctes(&self) -> Vec<Cte> {
        let mut ctes = Vec::with_capacity(self.writes.len());
        let mut shapes: Vec<((&str, &str), usize)> = Vec::new();
        let mut sets: Vec<(&'static SetUpdate, usize)> = Vec::new();
        for (i, write) in self.writes.iter().enumerate() {
            if let Some(keyed) = &write.keyed {
                let same = |other: &Keyed| std::ptr::eq(other.shape, keyed.shape);
                // Set form only for two rows or more of a shape; one row stays its own statement.
                if self.writes.iter().filter_map(|w| w.keyed.as_ref()).filter(|k| same(k)).count() > 1 {
                    match sets.iter().find(|(shape, _)| std::ptr::eq(*shape, keyed.shape)) {
                        Some((_, c)) => {
                            if let Cte::Set(rows) = &mut ctes[*c] {
                                rows.push(i);
                            }
                        }
                        None => {
                            sets.push((keyed.shape, ctes.len()));
                            ctes.push(Cte::Set(vec![i]));
                        }
                    }
                    continue;
                }
            }
            let Some(shape) = write.row_of else {
                ctes.push(Cte::One(i));
                continue;
            };
            match shapes.iter().find(|(s, _)| *s == shape) {
                Some((_, c)) => {
                    if let Cte::Rows(rows) = &mut ctes[*c] {
                        rows.push(i);
                    }
                }
                None => {
                    shapes.push((shape, ctes.len()));
                    ctes.push(Cte::Rows(vec![i]));
                }
            }
        }
        ctes
    }

    /// The PostgreSQL statement: each write a CTE (rows of one `INSERT` shape one together), then one count per write (and the
    /// notification, if any); the parameters are numbered by the builder as they are pushed.
    fn as_one_statement(&self) -> QueryBuilder<'_, Postgres> {
        let mut builder = QueryBuilder::new("");
        let ctes = self.ctes();
        for (c, cte) in ctes.iter().enumerate() {
            builder.push(if c == 0 { "WITH " } else { ", " });
            builder.push(format_args!("w{c} AS ("));
            match cte {
                Cte::One(i) => push_sql!(builder, self.writes[*i]),
                Cte::Rows(rows) => {
                    for (n, i) in rows.iter().enumerate() {
                        // The head once, then each row's `(…)`.
                        let pieces = &self.writes[*i].pieces;
                        let from = if n == 0 { 0 } else { 1 };
                        if n > 0 {
                            builder.push(", ");
                        }
                        push_pieces!(builder, &pieces[from..]);
                    }
                }
                Cte::Set(rows) => {
                    let shape = self.keyed(rows[0]).shape;
                    builder.push(shape.set).push(" FROM (VALUES ");
                    for (n, i) in rows.iter().enumerate() {
                        let keyed = self.keyed(*i);
                        builder.push(if n == 0 { "(" } else { ", (" });
                        builder.push_bind(keyed.id);
                        for value in &keyed.values {
                            builder.push(", ");
                            push_pieces!(builder, std::slice::from_ref(value));
                        }
                        builder.push(")");
                    }
                    builder.push(") AS ").push(shape.values).push(" WHERE ").push(shape.filter);
                    builder.push(" RETURNING t.id)");
                    continue;
                }
            }
            builder.push(" RETURNING 1)");
        }
        builder.push(if ctes.is_empty() { "SELECT " } else { " SELECT " });
        for (c, cte) in ctes.iter().enumerate() {
            builder.push(if c == 0 { "" } else { ", " });
            match cte {
                Cte::Set(_) => builder.push(format_args!("ARRAY(SELECT id FROM w{c})")),
                _ => builder.push(format_args!("(SELECT count(*) FROM w{c})")),
            };
        }
        if let Some((channel, payload)) = &self.notify {
            builder.push(if self.writes.is_empty() { "pg_notify(" } else { ", pg_notify(" });
            builder.push_bind(*channel).push(", ").push_bind(payload.as_str()).push(")");
        }
        builder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_become_one_statement_numbered_by_the_builder_with_a_count_each() {
        let mut writes = Writes::new();
        writes.push(Sql::new("INSERT INTO a (x) VALUES (").bind(1_i64).sql(")"));
        writes
            .push(Sql::new("UPDATE b SET y = ").bind(2_i64).sql(" WHERE z = ").bind(3_i64).sql(" OR w = ").bind(2_i64));
        writes.notify("chan", "payload");
        assert_eq!(
            writes.as_one_statement().sql(),
            "WITH w0 AS (INSERT INTO a (x) VALUES ($1) RETURNING 1), \
             w1 AS (UPDATE b SET y = $2 WHERE z = $3 OR w = $4 RETURNING 1) \
             SELECT (SELECT count(*) FROM w0), (SELECT count(*) FROM w1), pg_notify($5, $6)"
        );
    }

    #[test]
    fn a_statement_alone_numbers_its_own_values_from_one() {
        let sql = Sql::new("INSERT INTO t (a, b, c) VALUES (").binds([Arg::I64(1), "x".into(), true.into()]).sql(")");
        assert_eq!(sql.postgres().sql(), "INSERT INTO t (a, b, c) VALUES ($1, $2, $3)");
        assert_eq!(sql.sqlite().sql(), "INSERT INTO t (a, b, c) VALUES (?, ?, ?)");
    }

    #[test]
    fn rows_of_one_insert_shape_become_one_multi_row_insert_at_the_first_ones_place() {
        let mut writes = Writes::new();
        let head = "INSERT INTO t (a, b, c) VALUES ";
        let first = writes.push(Sql::row(head, [Arg::I64(1), Arg::I64(2)], ", 'x'"));
        let update = writes.push(Sql::new("UPDATE u SET y = ").bind(3_i64));
        let other = writes.push(Sql::row(head, [Arg::I64(4), Arg::I64(5)], ""));
        let second = writes.push(Sql::row(head, [Arg::I64(6), Arg::I64(7)], ", 'x'"));
        assert_eq!(writes.ctes(), [Cte::Rows(vec![0, 3]), Cte::One(1), Cte::Rows(vec![2])]);
        assert_eq!(
            writes.as_one_statement().sql(),
            "WITH w0 AS (INSERT INTO t (a, b, c) VALUES ($1, $2, 'x'), ($3, $4, 'x') RETURNING 1), \
             w1 AS (UPDATE u SET y = $5 RETURNING 1), \
             w2 AS (INSERT INTO t (a, b, c) VALUES ($6, $7) RETURNING 1) \
             SELECT (SELECT count(*) FROM w0), (SELECT count(*) FROM w1), (SELECT count(*) FROM w2)"
        );
        // Alone (SQLite runs each write by itself), a row is an ordinary INSERT.
        assert_eq!(writes.writes[first.0].postgres().sql(), "INSERT INTO t (a, b, c) VALUES ($1, $2, 'x')");
        assert_eq!((update.0, other.0, second.0), (1, 2, 3));
    }

    static SHAPE: SetUpdate =
        SetUpdate { set: "UPDATE t AS t SET a = v.a", values: "v(id, a, b)", filter: "t.id = v.id AND t.b = v.b" };

    #[test]
    fn guarded_updates_of_one_shape_go_set_based_and_a_lone_one_as_itself() {
        let keyed = |id: u128, a: i64| {
            let alone = Sql::new("UPDATE t SET a = ").bind(a).sql(" WHERE id = ").bind(Uuid::from_u128(id));
            Sql::keyed(alone, &SHAPE, Uuid::from_u128(id), [Arg::I64(a), Arg::I64(0)])
        };
        let mut writes = Writes::new();
        writes.push(keyed(1, 10));
        writes.push(Sql::new("UPDATE u SET y = 1"));
        writes.push(keyed(2, 20));
        assert_eq!(writes.ctes(), [Cte::Set(vec![0, 2]), Cte::One(1)]);
        assert_eq!(
            writes.as_one_statement().sql(),
            "WITH w0 AS (UPDATE t AS t SET a = v.a FROM (VALUES ($1, $2, $3), ($4, $5, $6)) AS v(id, a, b) \
             WHERE t.id = v.id AND t.b = v.b RETURNING t.id), w1 AS (UPDATE u SET y = 1 RETURNING 1) \
             SELECT ARRAY(SELECT id FROM w0), (SELECT count(*) FROM w1)"
        );
        let mut lone = Writes::new();
        lone.push(keyed(3, 30));
        assert_eq!(lone.ctes(), [Cte::One(0)]);
        assert_eq!(
            lone.as_one_statement().sql(),
            "WITH w0 AS (UPDATE t SET a = $1 WHERE id = $2 RETURNING 1) SELECT (SELECT count(*) FROM w0)"
        );
    }

    #[test]
    fn handles_read_their_own_writes_outcome_also_after_an_append() {
        let mut theirs = Writes::new();
        let first = theirs.push(Sql::new("UPDATE c SET x = 1"));
        let second = theirs.push(Sql::new("UPDATE d SET x = 1"));
        let mut writes = Writes::new();
        let guard = writes.push(Sql::new("UPDATE a SET x = 1"));
        let insert = writes.push(Sql::new("INSERT INTO b (x) VALUES (1)"));
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
        assert_eq!(writes.as_one_statement().sql(), "SELECT pg_notify($1, $2)");
    }
}
