//! The operator audit log (SPEC §8): one append-only row per operator action, refused or not.

use sqlx::types::Json;
use uuid::Uuid;

use super::{Db, DbTime, Result, Tx};
use crate::domain::{OperatorId, Role};
use crate::{with_conn, with_read_conn};

#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct AuditRow {
    pub id: Uuid,
    pub operator_id: Uuid,
    pub operator_name: String,
    pub role: Role,
    pub action: String,
    pub target_type: String,
    pub target_id: String,
    pub reason: String,
    pub parameters: Json<serde_json::Value>,
    /// `ok`, or the refusal's error code.
    pub result: String,
    pub at: DbTime,
}

/// The part of an audit row a request prepares for a job to finish (the settlement import: who
/// asked, as what, why), stored with the job's row as typed JSON.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PreparedAudit {
    pub operator_name: String,
    pub role: Role,
    pub action: String,
    pub target_type: String,
    pub reason: String,
    pub parameters: serde_json::Value,
}

impl PreparedAudit {
    pub fn of(row: AuditRow) -> Self {
        PreparedAudit {
            operator_name: row.operator_name,
            role: row.role,
            action: row.action,
            target_type: row.target_type,
            reason: row.reason,
            parameters: row.parameters.0,
        }
    }

    /// The audit row, when the job that finishes the action knows its outcome.
    pub fn finish(
        &self,
        operator: OperatorId,
        target_id: &str,
        parameters: serde_json::Value,
        result: &str,
    ) -> AuditRow {
        AuditRow {
            id: Uuid::now_v7(),
            operator_id: operator.0,
            operator_name: self.operator_name.clone(),
            role: self.role,
            action: self.action.clone(),
            target_type: self.target_type.clone(),
            target_id: target_id.to_owned(),
            reason: self.reason.clone(),
            parameters: Json(parameters),
            result: result.to_owned(),
            at: DbTime::now(),
        }
    }
}

const COLUMNS: &str =
    "id, operator_id, operator_name, role, action, target_type, target_id, reason, parameters, result, at";

pub async fn insert(tx: &mut Tx, row: &AuditRow) -> Result<()> {
    with_conn!(tx, |conn| {
        sqlx::query(&format!(
            "INSERT INTO audit_log ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
        ))
        .bind(row.id)
        .bind(row.operator_id)
        .bind(&row.operator_name)
        .bind(row.role)
        .bind(&row.action)
        .bind(&row.target_type)
        .bind(&row.target_id)
        .bind(&row.reason)
        .bind(&row.parameters)
        .bind(&row.result)
        .bind(row.at)
        .execute(&mut *conn)
        .await?;
    });
    Ok(())
}

/// Filters for [`list`]; `None` means any.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub operator_id: Option<Uuid>,
    pub action: Option<String>,
    pub target_id: Option<String>,
    /// Page after this (at, id), newest first.
    pub before: Option<(DbTime, Uuid)>,
    pub limit: i64,
}

pub async fn list(db: &Db, f: &AuditFilter) -> Result<Vec<AuditRow>> {
    Ok(with_read_conn!(db, |conn| {
        sqlx::query_as::<_, AuditRow>(&format!(
            "SELECT {COLUMNS} FROM audit_log
             WHERE ($1 IS NULL OR operator_id = $1) AND ($2 IS NULL OR action = $2) AND ($3 IS NULL OR target_id = $3)
               AND ($4 IS NULL OR at < $4 OR (at = $4 AND id < $5))
             ORDER BY at DESC, id DESC LIMIT $6"
        ))
        .bind(f.operator_id)
        .bind(&f.action)
        .bind(&f.target_id)
        .bind(f.before.map(|b| b.0))
        .bind(f.before.map(|b| b.1))
        .bind(f.limit)
        .fetch_all(&mut *conn)
        .await?
    }))
}
