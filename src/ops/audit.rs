//! The audit log (SPEC §8): every operator action and refusal, newest first, filterable.

use super::types::{AuditEntry, AuditQuery, Page};
use super::{decode_cursor, encode_cursor, page, page_limit, Operator, Ops, OpsResult, Role};
use crate::storage::audit::{self as store, AuditFilter, AuditRow};

fn entry(r: &AuditRow) -> AuditEntry {
    AuditEntry {
        id: r.id,
        operator_id: r.operator_id,
        operator_name: r.operator_name.clone(),
        role: r.role,
        action: r.action.clone(),
        target_type: r.target_type.clone(),
        target_id: r.target_id.clone(),
        reason: r.reason.clone(),
        parameters: r.parameters.0.clone(),
        result: r.result.clone(),
        at: r.at.0,
    }
}

/// One page of the audit log, newest first.
pub async fn list(ops: &Ops<'_>, operator: &Operator, q: AuditQuery) -> OpsResult<Page<AuditEntry>> {
    operator.require(Role::Viewer)?;
    let limit = page_limit(q.limit)?;
    let filter = AuditFilter {
        operator_id: q.operator_id,
        action: q.action,
        target_id: q.target_id,
        before: q.cursor.as_deref().map(decode_cursor).transpose()?,
        limit: limit + 1,
    };
    let rows = store::list(ops.db, &filter).await?;
    Ok(page(rows, limit, |r| encode_cursor(r.at, r.id), entry))
}
