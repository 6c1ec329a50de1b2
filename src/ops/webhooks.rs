//! The providers' events for operators (SPEC §15, §16): list them by result, type and provider,
//! and show one with its body (redacted for display), the headers kept, and the provider's record its decision
//! rested on.
//! Viewer role; reading changes nothing, so nothing is audited.

use super::types::{Page, WebhookEventQuery, WebhookEventView};
use super::{decode_cursor, encode_cursor, page, page_limit, Operator, Ops, OpsError, OpsResult};
use crate::domain::{Role, WebhookEventId, WebhookResult};
use crate::storage::webhooks::{self as store, EventFilter, EventRow};

/// What an event came to, as operators read it: `pending` until its job decides.
fn result_name(row: &EventRow) -> String {
    row.result.map_or("pending", WebhookResult::as_str).to_owned()
}

fn view(row: &EventRow) -> WebhookEventView {
    WebhookEventView {
        id: row.id.0,
        provider: row.provider.clone(),
        event_id: row.event_id.clone(),
        kind: row.event_type.clone(),
        transfer_id: row.transfer_id.clone(),
        withdrawal_id: row.withdrawal_id.map(|w| w.0),
        account_id: row.account_id.map(|a| a.0),
        result: result_name(row),
        detail: row.detail.clone(),
        signed_at: row.signed_at.0,
        received_at: row.received_at.0,
        decided_at: row.decided_at.map(|t| t.0),
        provider_record: None,
        body: None,
        headers: None,
    }
}

/// Events newest first, by result (`pending`: not decided yet), type and provider. **Choice:** a
/// provider is any name, not only a configured one: a provider taken out of the file keeps its
/// stored events, and they stay readable.
pub async fn list(ops: &Ops<'_>, operator: &Operator, q: WebhookEventQuery) -> OpsResult<Page<WebhookEventView>> {
    operator.require(Role::Viewer)?;
    let result = match q.result.as_deref().filter(|r| !r.is_empty()) {
        None => None,
        Some("pending") => Some(None),
        Some(r) => Some(Some(r.parse::<WebhookResult>().map_err(|_| {
            let names: Vec<&str> = WebhookResult::ALL.iter().map(|r| r.as_str()).collect();
            OpsError::invalid("invalid_result", "result", format!("result is pending or one of {}", names.join(", ")))
        })?)),
    };
    let limit = page_limit(q.limit)?;
    let before = q.cursor.as_deref().map(decode_cursor).transpose()?.map(|(at, id)| (at, WebhookEventId(id)));
    let filter = EventFilter {
        result,
        event_type: q.kind.filter(|k| !k.is_empty()),
        provider: q.provider.filter(|p| !p.is_empty()),
        before,
        limit: limit + 1,
    };
    let rows = store::list(ops.db, &filter).await?;
    Ok(page(rows, limit, |e| encode_cursor(e.received_at, e.id.0), view))
}

/// One event, with its raw body, headers and the provider's record.
pub async fn show(ops: &Ops<'_>, operator: &Operator, id: WebhookEventId) -> OpsResult<WebhookEventView> {
    operator.require(Role::Viewer)?;
    let row = store::get(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
    let body = store::body(ops.db, id).await?.unwrap_or_default();
    let mut shown = view(&row);
    // Redacted for display, as every stored text operators read is (a real provider's body may
    // carry account details); the row keeps the raw bytes the signature covers.
    shown.body = Some(crate::redact::text(&String::from_utf8_lossy(&body)));
    shown.headers = Some(row.headers.0.clone());
    shown.provider_record = row.provider_record.as_ref().map(|r| r.0.clone());
    Ok(shown)
}
