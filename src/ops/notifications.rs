//! Customer notifications for operators (SPEC §17, issue item 5): every account's webhook
//! endpoints with their health, the notifications (one event to one endpoint) with what each
//! receiver answered, one notification with its event and attempts, and redelivery.
//!
//! Reading needs the viewer role and changes nothing, so it is not audited. A redelivery needs the
//! operator role and a reason, and writes its `notification.redeliver` audit row in the
//! transaction that makes the notification pending again and enqueues its delivery job. Nothing
//! is sent to an endpoint that is not enabled (disabled by a 410 or a long failure, or deleted by
//! its customer): such a redelivery is refused, 409 `notification_not_redeliverable`.
//!
//! Endpoints and events go by their wire ids (`we_…`, `evt_…`); a notification's id is a plain
//! UUID (customers never see it).

use serde_json::json;

use super::acts::NotificationRedeliver;
use super::types::{
    DeliveryAttemptView, List, NotificationCounts, NotificationDetail, NotificationQuery, NotificationView,
    ReasonRequest, Redelivered, WebhookEndpointQuery, WebhookEndpointView,
};
use super::{page_limit, require_reason, Action, Operator, Ops, OpsError, OpsResult, Role};
use crate::domain::{EndpointStatus, EventType, NotificationId, NotificationStatus, WebhookEndpointId, WithdrawalId};
use crate::storage::notifications::{self as store, AttemptRow, EndpointRow, NotificationRow};
use crate::storage::Db;

/// An endpoint as operators see it, with its notifications counted by status.
async fn endpoint_view(db: &Db, row: &EndpointRow) -> OpsResult<WebhookEndpointView> {
    let mut counts = NotificationCounts::default();
    for (status, n) in store::endpoint_health(db, row.id).await? {
        counts.add(status, n);
    }
    Ok(WebhookEndpointView {
        id: row.id.wire(),
        account_id: row.account_id.0,
        url: crate::redact::text(&row.url),
        events: row.types()?.iter().collect(),
        status: row.status,
        disabled_reason: row.disabled_reason.clone(),
        created_at: row.created_at.0,
        failing_since: row.failing_since.map(|t| t.0),
        notifications: counts,
    })
}

fn notification_view(n: &NotificationRow, event_type: EventType, withdrawal: WithdrawalId) -> NotificationView {
    NotificationView {
        id: n.id.0,
        account_id: n.account_id.0,
        endpoint_id: n.endpoint_id.wire(),
        event_id: n.event_id.wire(),
        event_type,
        withdrawal_id: withdrawal.0,
        status: n.status,
        attempts: n.attempts.into(),
        last_status_code: n.last_status_code,
        last_error: n.last_error.clone(),
        last_attempt_at: n.last_attempt_at.map(|t| t.0),
        delivered_at: n.delivered_at.map(|t| t.0),
        created_at: n.created_at.0,
    }
}

fn attempt_view(a: &AttemptRow) -> DeliveryAttemptView {
    DeliveryAttemptView {
        attempt: a.attempt.into(),
        result: a.result,
        status_code: a.status_code,
        error: a.error.clone(),
        duration_ms: a.duration_ms,
        at: a.at.0,
    }
}

/// A row that names what is not there: the schema's references make it a corrupt database.
fn missing(what: &str, n: &NotificationRow) -> OpsError {
    OpsError::Internal(anyhow::anyhow!("notification {} names a {what} that does not exist", n.id))
}

/// Every account's endpoints, deleted ones too, newest first, each with its notifications
/// counted by status (`limit`: 50 unless asked, 1 to 500).
pub async fn endpoints(
    ops: &Ops<'_>,
    operator: &Operator,
    q: WebhookEndpointQuery,
) -> OpsResult<List<WebhookEndpointView>> {
    operator.require(Role::Viewer)?;
    let limit = page_limit(q.limit)?;
    let mut data = Vec::new();
    for row in store::all_endpoints(ops.db, limit as u32).await? {
        data.push(endpoint_view(ops.db, &row).await?);
    }
    Ok(List { data })
}

/// `endpoint` (a `we_…` id) and `status` as the query names them; an empty value is no filter.
fn filters(q: &NotificationQuery) -> OpsResult<(Option<WebhookEndpointId>, Option<NotificationStatus>)> {
    let given = |v: &Option<String>| v.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
    let endpoint = given(&q.endpoint)
        .map(|raw| {
            WebhookEndpointId::from_wire(&raw).ok_or_else(|| {
                OpsError::invalid(
                    "invalid_endpoint",
                    "endpoint",
                    "endpoint is a webhook endpoint id (we_ and 32 hex digits)",
                )
            })
        })
        .transpose()?;
    let status = given(&q.status)
        .map(|raw| {
            raw.parse::<NotificationStatus>().map_err(|_| {
                let names: Vec<&str> = NotificationStatus::ALL.iter().map(|s| s.as_str()).collect();
                OpsError::invalid("invalid_status", "status", format!("status is one of {}", names.join(", ")))
            })
        })
        .transpose()?;
    Ok((endpoint, status))
}

/// Notifications newest first, of one endpoint and/or in one status.
pub async fn notifications(
    ops: &Ops<'_>,
    operator: &Operator,
    q: NotificationQuery,
) -> OpsResult<List<NotificationView>> {
    operator.require(Role::Viewer)?;
    let (endpoint, status) = filters(&q)?;
    let limit = page_limit(q.limit)?;
    let rows = store::notifications_listed(ops.db, endpoint, status, limit as u32).await?;
    let mut data = Vec::with_capacity(rows.len());
    for row in &rows {
        data.push(notification_view(&row.notification, row.kind()?, row.withdrawal_id));
    }
    Ok(List { data })
}

/// One notification with its endpoint, its event exactly as it is sent (the withdrawal in it is
/// the customer's view, its account number already masked) and every attempt, first first.
pub async fn notification(ops: &Ops<'_>, operator: &Operator, id: NotificationId) -> OpsResult<NotificationDetail> {
    operator.require(Role::Viewer)?;
    let n = store::notification(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
    let event = store::event(ops.db, n.account_id, n.event_id).await?.ok_or_else(|| missing("event", &n))?;
    let endpoint = store::endpoint_by_id(ops.db, n.endpoint_id).await?.ok_or_else(|| missing("endpoint", &n))?;
    let attempts = store::attempts(ops.db, n.account_id, id).await?;
    Ok(NotificationDetail {
        notification: notification_view(&n, event.kind()?, event.withdrawal_id),
        endpoint: endpoint_view(ops.db, &endpoint).await?,
        event: event.to_json(),
        attempts: attempts.iter().map(attempt_view).collect(),
    })
}

/// Sends a notification again, whatever it came to (delivered, undeliverable, …): it is pending
/// again and a new delivery job — with a fresh retry window — sends the same event, same `id`,
/// so a receiver that already has it deduplicates it. Operator role and a reason; refused (409
/// `notification_not_redeliverable`) when its endpoint is not enabled. A notification still
/// pending gets a second job beside the one retrying it: delivery is at least once, and the
/// first job to deliver ends the other's sending.
pub async fn redeliver(
    ops: &Ops<'_>,
    operator: &Operator,
    id: NotificationId,
    req: ReasonRequest,
) -> OpsResult<Redelivered> {
    let act = NotificationRedeliver::ACT;
    ops.perform(operator, &act, id.to_string(), &req.reason, json!({}), async |audited| {
        require_reason(&req.reason)?;
        let n = store::notification(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
        let event = store::event(ops.db, n.account_id, n.event_id).await?.ok_or_else(|| missing("event", &n))?;
        let endpoint = store::endpoint_by_id(ops.db, n.endpoint_id).await?.ok_or_else(|| missing("endpoint", &n))?;
        audited.parameters = json!({
            "endpoint_id": endpoint.id.wire(),
            "event_id": event.id.wire(),
            "status_before": n.status,
        });
        if endpoint.status != EndpointStatus::Enabled {
            let why = endpoint.disabled_reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
            return Err(OpsError::conflict(
                "notification_not_redeliverable",
                format!(
                    "its endpoint {} is {}{why}: nothing is sent to it until its customer registers an endpoint again",
                    endpoint.id.wire(),
                    endpoint.status
                ),
            ));
        }
        let mut tx = ops.db.begin().await?;
        let job = store::redeliver(&mut tx, id).await?.ok_or_else(OpsError::not_found)?;
        audited.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        tracing::info!(
            notification_id = %id,
            endpoint_id = %endpoint.id.wire(),
            event_id = %event.id.wire(),
            operator = %operator.name,
            "notification redelivery queued"
        );
        let mut notification = notification_view(&n, event.kind()?, event.withdrawal_id);
        notification.status = NotificationStatus::Pending;
        Ok(Redelivered { notification, job_id: job.0 })
    })
    .await
}
