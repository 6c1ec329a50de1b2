//! Storage: every SQL statement of the service lives under this module.
//!
//! Two backends, one behaviour (SPEC §2): SQLite (the embedded default) and PostgreSQL. Each
//! query is written once where the dialects agree (`$n` placeholders work on both) and the
//! [`with_conn!`](crate::with_conn) macro runs it on whichever connection type the [`Tx`] or [`Db`] holds; the
//! few dialect-specific statements sit side by side in the same function. Money is stored as
//! integer minor units, ids as UUIDs, times as [`DbTime`].
//!
//! Functions that change state take a `&mut Tx` so callers compose them into one transaction:
//! a state change, its transition row, its ledger entries and the job it implies commit
//! together (no dual writes). Reads that need no transaction take `&Db`. Writes that do not read
//! each other's results can also be composed as [`batch::Writes`] and sent as one statement.

pub mod accounts;
pub mod attempts;
pub mod audit;
pub mod batch;
pub mod breakers;
pub mod credentials;
pub mod dead_letters;
pub mod idempotency;
pub mod jobs;
pub mod metrics;
pub mod notifications;
pub mod reconciliations;
pub mod replays;
pub mod returns;
pub mod review_decisions;
pub mod sessions;
pub mod settlement;
pub mod time;
pub mod trends;
pub mod verify;
pub mod webhooks;
pub mod withdrawals;

use std::str::FromStr;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Postgres, Sqlite, Transaction};

pub use crate::config::PoolSettings;

pub use time::DbTime;

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/postgres");

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("database error")]
    Database(#[from] sqlx::Error),
    #[error("database migration failed")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("unsupported DATABASE_URL scheme `{0}`: use sqlite://… or postgres://…")]
    UnsupportedUrl(String),
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
}

impl StorageError {
    pub(crate) fn corrupt(what: impl std::fmt::Display) -> Self {
        StorageError::Corrupt(what.to_string())
    }
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// `$1, $2, …, $count`: the parameters of an `IN (…)` list, bound in order by the caller (both
/// dialects take `$n`).
pub(crate) fn placeholders(count: usize) -> String {
    (1..=count).map(|n| format!("${n}")).collect::<Vec<_>>().join(", ")
}

/// Pushes `<columns> IN (VALUES ($a, $b), …)` onto `query`, one row of two bound parameters per
/// (account, id) pair: a read of many rows by their whole key (README "Scaling"), which one
/// primary serves from the primary key and a distributed database can route row by row.
pub(crate) fn push_keys_in<'args, DB: sqlx::Database>(
    query: &mut sqlx::QueryBuilder<'args, DB>,
    columns: &str,
    keys: impl IntoIterator<Item = (uuid::Uuid, uuid::Uuid)>,
) where
    uuid::Uuid: sqlx::Encode<'args, DB> + sqlx::Type<DB>,
{
    query.push(columns).push(" IN (VALUES ");
    {
        let mut rows = query.separated(", ");
        for (account, id) in keys {
            rows.push("(").push_bind_unseparated(account).push_unseparated(", ");
            rows.push_bind_unseparated(id).push_unseparated(")");
        }
    }
    query.push(")");
}

/// Whether `err` (anywhere in its chain) is trouble of our own database that time may repair —
/// unreachable, restarting, out of connections, busy or locked — rather than a fault of the
/// statement or the data (SPEC §5: such failures are retried with backoff and, exhausted,
/// dead-lettered as `infrastructure`, never as `code_bug`).
pub fn is_infrastructure(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        let sqlx = match cause.downcast_ref::<StorageError>() {
            Some(StorageError::Database(e)) => Some(e),
            Some(_) => None,
            None => cause.downcast_ref::<sqlx::Error>(),
        };
        sqlx.is_some_and(sqlx_is_infrastructure)
    })
}

fn sqlx_is_infrastructure(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            match db.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
                // SQLite's primary result code is the low byte of the extended one: BUSY (5),
                // LOCKED (6), NOMEM (7), IOERR (10), FULL (13), CANTOPEN (14).
                Some(_) => code.parse::<i32>().is_ok_and(|c| matches!(c & 0xff, 5 | 6 | 7 | 10 | 13 | 14)),
                // PostgreSQL SQLSTATE classes: 08 connection exception, 53 insufficient
                // resources, 57P01–57P05 shutdown and idle timeouts, 58 system error; and the
                // statement-level conditions that only waiting repairs: serialization failure,
                // deadlock, lock not available, statement canceled by a timeout.
                None => {
                    code.starts_with("08")
                        || code.starts_with("53")
                        || code.starts_with("58")
                        || (code.starts_with("57P") && code.as_ref() != "57P04")
                        || matches!(code.as_ref(), "40001" | "40P01" | "55P03" | "57014")
                }
            }
        }
        _ => false,
    }
}

/// Which engine a [`Db`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// SQLite allows one writer at a time. All writes go through a single-connection pool so
/// in-process writers queue instead of failing with `SQLITE_BUSY`; reads use their own pool and
/// see WAL snapshots concurrently. Write transactions start with `BEGIN IMMEDIATE` so a writer
/// in another process (the CLI) waits on the busy timeout instead of deadlocking on upgrade.
#[derive(Debug, Clone)]
pub struct SqliteDb {
    writer: SqlitePool,
    reader: SqlitePool,
}

/// A handle to the database, cheap to clone.
#[derive(Debug, Clone)]
pub enum Db {
    Sqlite(SqliteDb),
    Postgres(PgPool),
}

/// One open transaction on either backend. Dropping it without [`Tx::commit`] rolls back.
///
/// It also carries what its caller wants done once it has committed ([`Tx::after_commit`]):
/// metrics of what it changed fire then, never for a transaction that rolled back.
pub struct Tx {
    /// Reached only through [`with_conn!`](crate::with_conn) (here, and in the tools' own SQL).
    #[doc(hidden)]
    pub conn: TxConn,
    after_commit: Vec<Box<dyn FnOnce() + Send + Sync>>,
}

/// The connection of a [`Tx`], per backend.
#[doc(hidden)]
pub enum TxConn {
    Sqlite(Transaction<'static, Sqlite>),
    Postgres(Transaction<'static, Postgres>),
}

/// Runs `$body` with `$conn` bound to the transaction's connection, monomorphised per backend.
#[macro_export]
#[doc(hidden)]
macro_rules! with_conn {
    ($tx:expr, |$conn:ident| $body:expr) => {
        match &mut ($tx).conn {
            $crate::storage::TxConn::Sqlite(t) => {
                let $conn: &mut sqlx::SqliteConnection = &mut *t;
                $body
            }
            $crate::storage::TxConn::Postgres(t) => {
                let $conn: &mut sqlx::PgConnection = &mut *t;
                $body
            }
        }
    };
}

/// Like [`with_conn!`](crate::with_conn) for reads outside a transaction: borrows a pooled connection.
#[macro_export]
#[doc(hidden)]
macro_rules! with_read_conn {
    ($db:expr, |$conn:ident| $body:expr) => {
        match $db {
            $crate::storage::Db::Sqlite(s) => {
                let mut pooled = s.reader().acquire().await?;
                let $conn: &mut sqlx::SqliteConnection = &mut pooled;
                $body
            }
            $crate::storage::Db::Postgres(p) => {
                let mut pooled = p.acquire().await?;
                let $conn: &mut sqlx::PgConnection = &mut pooled;
                $body
            }
        }
    };
}

impl SqliteDb {
    pub fn reader(&self) -> &SqlitePool {
        &self.reader
    }
}

impl Db {
    /// Opens `sqlite://path` (created if missing; WAL, `synchronous=FULL`, foreign keys on) or
    /// `postgres://…`.
    pub async fn connect(url: &str, settings: &PoolSettings) -> Result<Db> {
        let scheme = url.split(':').next().unwrap_or_default();
        match scheme {
            "sqlite" => {
                let options = SqliteConnectOptions::from_str(url)?
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Full)
                    .foreign_keys(true)
                    .busy_timeout(Duration::from_secs(10));
                let writer = SqlitePoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(settings.acquire_timeout)
                    .connect_with(options.clone())
                    .await?;
                let reader = SqlitePoolOptions::new()
                    .max_connections(settings.max_connections.max(2))
                    .acquire_timeout(settings.acquire_timeout)
                    .connect_with(options)
                    .await?;
                Ok(Db::Sqlite(SqliteDb { writer, reader }))
            }
            "postgres" | "postgresql" => {
                let options = PgConnectOptions::from_str(url)?;
                let pool = PgPoolOptions::new()
                    .max_connections(settings.max_connections)
                    .acquire_timeout(settings.acquire_timeout)
                    .connect_with(options)
                    .await?;
                Ok(Db::Postgres(pool))
            }
            other => Err(StorageError::UnsupportedUrl(other.to_owned())),
        }
    }

    pub fn backend(&self) -> Backend {
        match self {
            Db::Sqlite(_) => Backend::Sqlite,
            Db::Postgres(_) => Backend::Postgres,
        }
    }

    /// Applies the backend's migrations from `migrations/<backend>/` (embedded at build time).
    pub async fn migrate(&self) -> Result<()> {
        match self {
            Db::Sqlite(s) => SQLITE_MIGRATIONS.run(&s.writer).await?,
            Db::Postgres(p) => POSTGRES_MIGRATIONS.run(p).await?,
        }
        Ok(())
    }

    /// Starts a write transaction.
    pub async fn begin(&self) -> Result<Tx> {
        let conn = match self {
            Db::Sqlite(s) => TxConn::Sqlite(s.writer.begin_with("BEGIN IMMEDIATE").await?),
            Db::Postgres(p) => TxConn::Postgres(p.begin().await?),
        };
        Ok(Tx { conn, after_commit: Vec::new() })
    }

    /// Readiness: the database answers, every embedded migration has been applied, and each
    /// applied one is the migration this build embeds (same checksum). Reads `_sqlx_migrations`
    /// only, so a service role that may not migrate (PostgreSQL's `withdrawals_app`) can ask.
    pub async fn check_ready(&self) -> Result<()> {
        const APPLIED: &str = "SELECT version, checksum FROM _sqlx_migrations WHERE success";
        let (migrator, applied): (&Migrator, Vec<(i64, Vec<u8>)>) = match self {
            Db::Sqlite(s) => (&SQLITE_MIGRATIONS, sqlx::query_as(APPLIED).fetch_all(&s.reader).await?),
            Db::Postgres(p) => (&POSTGRES_MIGRATIONS, sqlx::query_as(APPLIED).fetch_all(p).await?),
        };
        let mut missing = Vec::new();
        for migration in migrator.iter() {
            match applied.iter().find(|(version, _)| *version == migration.version) {
                None => missing.push(migration.version),
                Some((version, checksum)) if *checksum != *migration.checksum => {
                    return Err(StorageError::corrupt(format!(
                        "migration {version} was applied with other contents than this build's"
                    )));
                }
                Some(_) => {}
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(StorageError::corrupt(format!("migrations not applied: {missing:?}")))
        }
    }

    /// Brings the schema up to date: nothing when [`Db::check_ready`] finds it current (so a
    /// role that may only use the tables, `withdrawals_app`, opens a migrated database), else
    /// [`Db::migrate`], which needs the owner's rights.
    pub async fn ensure_schema(&self) -> Result<()> {
        if self.check_ready().await.is_ok() {
            return Ok(());
        }
        self.migrate().await
    }

    pub async fn close(&self) {
        match self {
            Db::Sqlite(s) => {
                s.writer.close().await;
                s.reader.close().await;
            }
            Db::Postgres(p) => p.close().await,
        }
    }
}

impl Tx {
    /// Commits, then runs the [`Tx::after_commit`] actions in the order they were added.
    pub async fn commit(self) -> Result<()> {
        match self.conn {
            TxConn::Sqlite(t) => t.commit().await?,
            TxConn::Postgres(t) => t.commit().await?,
        }
        for action in self.after_commit {
            action();
        }
        Ok(())
    }

    /// Runs `action` once this transaction has committed; dropped with it if it rolls back.
    pub fn after_commit(&mut self, action: impl FnOnce() + Send + Sync + 'static) {
        self.after_commit.push(Box::new(action));
    }

    pub fn backend(&self) -> Backend {
        match self.conn {
            TxConn::Sqlite(_) => Backend::Sqlite,
            TxConn::Postgres(_) => Backend::Postgres,
        }
    }
}

/// Whether an error is a unique-constraint violation (a lost insert race).
pub fn is_unique_violation(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.is_unique_violation())
}

/// In-process wake-ups for workers of this process, SQLite's stand-in for `NOTIFY` (sent by
/// [`batch::Writes::run`]). A worker woken before the enqueuing transaction commits still sees the job:
/// its claim waits for the one writer. Not used on PostgreSQL, where a claim before the commit
/// would find nothing and the `NOTIFY` at commit wakes the workers anyway.
pub fn local_wakeups() -> &'static tokio::sync::Notify {
    static WAKEUPS: std::sync::OnceLock<tokio::sync::Notify> = std::sync::OnceLock::new();
    WAKEUPS.get_or_init(tokio::sync::Notify::new)
}
