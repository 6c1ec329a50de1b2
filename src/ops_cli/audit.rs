//! `withdrawals audit`: the audit log, newest first.

use super::client::Client;
use super::format::at;
use super::Connection;
use crate::ops::routes;
use crate::ops::types::{AuditEntry, AuditQuery, Page};

pub async fn audit(
    conn: &Connection,
    action: Option<String>,
    target: Option<String>,
    limit: Option<u32>,
) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    let query = AuditQuery { action, target_id: target, limit: limit.map(i64::from), ..AuditQuery::default() };
    let answer = client.get::<Page<AuditEntry>>(&routes::AUDIT.path(&[]), &query).await?;
    for r in answer.unless_json(conn.json).map(|p| p.data).unwrap_or_default() {
        println!(
            "{}  {} ({})  {} {} {}  {}  reason: {}",
            at(r.at),
            r.operator_name,
            r.role,
            r.action,
            r.target_type,
            r.target_id,
            r.result,
            r.reason
        );
    }
    Ok(())
}
