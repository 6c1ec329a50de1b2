//! Settlement imports as stored: the accepted request with its report's bytes, queued for its
//! job, and its progress and outcome.

use serde_json::Value;
use sqlx::types::Json;

use crate::domain::settlement::ImportState;
use crate::domain::OperatorId;
use crate::storage::{Db, DbTime, Result, Tx};
use crate::{with_conn, with_read_conn};

/// An import as stored (its report's bytes aside: [`import_bytes`]).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ImportRow {
    pub id: uuid::Uuid,
    /// The provider whose report it is (SPEC §16): the one asked for, else the primary.
    pub provider: String,
    pub state: ImportState,
    pub report_date: String,
    pub source: crate::domain::settlement::ReportSource,
    pub digest: String,
    pub line_count: i32,
    pub requested_by: OperatorId,
    /// The audit row the request prepared (operator, action, target, parameters).
    pub audit: Json<crate::storage::audit::PreparedAudit>,
    /// The job's summary, once done.
    pub summary: Option<Json<Value>>,
    pub error: Option<String>,
    pub created_at: DbTime,
    pub finished_at: Option<DbTime>,
}

const IMPORT_COLUMNS: &str =
    "id, provider, state, report_date, source, digest, line_count, requested_by, audit, summary, \
                              error, created_at, finished_at";

/// Stores an accepted import, queued, with its report's bytes (in the transaction that enqueues
/// its job).
pub async fn insert_import(tx: &mut Tx, row: &ImportRow, report: &[u8]) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query(&format!(
            "INSERT INTO settlement_imports ({IMPORT_COLUMNS}, report)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
        ))
        .bind(row.id)
        .bind(&row.provider)
        .bind(row.state)
        .bind(&row.report_date)
        .bind(row.source)
        .bind(&row.digest)
        .bind(row.line_count)
        .bind(row.requested_by)
        .bind(&row.audit)
        .bind(&row.summary)
        .bind(&row.error)
        .bind(row.created_at)
        .bind(row.finished_at)
        .bind(report)
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    Ok(())
}

/// One import.
pub async fn get_import(db: &Db, id: uuid::Uuid) -> Result<Option<ImportRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ImportRow>(&format!("SELECT {IMPORT_COLUMNS} FROM settlement_imports WHERE id = $1"))
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?
    }))
}

/// Imports, newest first.
pub async fn list_imports(db: &Db, limit: i64) -> Result<Vec<ImportRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, ImportRow>(&format!(
            "SELECT {IMPORT_COLUMNS} FROM settlement_imports ORDER BY created_at DESC, id DESC LIMIT $1"
        ))
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?
    }))
}

/// The report's bytes an import stored.
pub async fn import_bytes(db: &Db, id: uuid::Uuid) -> Result<Option<Vec<u8>>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_scalar::<_, Vec<u8>>("SELECT report FROM settlement_imports WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?
    }))
}

/// Marks a queued import `running` (its job started); a finished one is left as it is.
pub async fn start_import(db: &Db, id: uuid::Uuid) -> Result<()> {
    let mut tx = db.begin().await?;
    with_conn!(tx, |conn| {
        sqlx::query("UPDATE settlement_imports SET state = 'running' WHERE id = $1 AND state = 'queued'")
            .bind(id)
            .execute(&mut *conn)
            .await?
            .rows_affected()
    });
    tx.commit().await
}

/// Finishes an import (`done` with its summary, or `failed` with why), once: false when it was
/// already finished (a re-run of its job), and then nothing changes.
pub async fn finish_import(
    tx: &mut Tx,
    id: uuid::Uuid,
    state: ImportState,
    summary: Option<&Value>,
    error: Option<&str>,
) -> Result<bool> {
    let done = with_conn!(tx, |conn| {
        sqlx::query(
            "UPDATE settlement_imports SET state = $2, summary = $3, error = $4, finished_at = $5
             WHERE id = $1 AND state IN ('queued', 'running')",
        )
        .bind(id)
        .bind(state)
        .bind(summary.map(Json))
        .bind(error)
        .bind(DbTime::now())
        .execute(&mut *conn)
        .await?
        .rows_affected()
    });
    Ok(done == 1)
}

/// How far matching has got with the provider's report of `date` and `digest`: (lines stored,
/// lines decided, lines that opened an exception). Zeros while the report is not stored yet.
pub async fn import_progress(db: &Db, provider: &str, date: &str, digest: &str) -> Result<(i64, i64, i64)> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, (i64, i64, i64)>(
            "SELECT COUNT(l.id), COUNT(l.result),
                    (SELECT COUNT(*) FROM settlement_exceptions e
                       JOIN settlement_lines l2 ON l2.account_id = e.account_id AND l2.id = e.line_id
                       JOIN settlement_reports r2 ON r2.id = l2.report_id
                      WHERE r2.provider = $1 AND r2.report_date = $2 AND r2.digest = $3)
               FROM settlement_lines l JOIN settlement_reports r ON r.id = l.report_id
              WHERE r.provider = $1 AND r.report_date = $2 AND r.digest = $3",
        )
        .bind(provider)
        .bind(date)
        .bind(digest)
        .fetch_one(&mut *conn)
        .await?
    }))
}
