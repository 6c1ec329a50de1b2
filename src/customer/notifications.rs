//! Customer notifications, the customer's side (SPEC §17): the account's events, oldest first
//! with a cursor (the recovery path for an integrator whose endpoint was down), and its webhook
//! endpoints — register (the signing secret shown once, stored sealed), list, delete, rotate the
//! secret (the old one signs beside the new one for the overlap). An account sees only its own:
//! another account's endpoint or event is 404, like one that does not exist.

use chrono::{DateTime, Utc};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use super::{Customers, ServiceError, ServiceResult};
use crate::domain::{AccountId, EventId, EventType, EventTypes, WebhookEndpointId};
use crate::storage::notifications as store;
use crate::storage::DbTime;

/// The body of `POST /v1/webhook-endpoints`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpointRequest {
    /// `https` URL resolving to public addresses only.
    #[schema(example = "https://example.com/hooks/withdrawals")]
    pub url: String,
    /// Event types to receive, or `["*"]` for all.
    #[schema(example = json!(["withdrawal.completed", "withdrawal.failed"]))]
    pub events: Vec<String>,
}

/// An endpoint as its customer sees it; `secret` only in the answer that created or rotated it.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EndpointView {
    #[schema(example = "we_0190c3b2a1b27000800000000000000a")]
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    /// `enabled` or `disabled` (answered 410, or failed for longer than the retry window).
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    /// The signing secret (`whsec_…`): shown here once, never again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// During a rotation's overlap: until when the previous secret still signs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EndpointList {
    pub data: Vec<EndpointView>,
}

/// An event on the wire (SPEC §17); `data` is the withdrawal as `GET /v1/withdrawals/{id}`
/// showed it when the event was written.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EventView {
    #[schema(example = "evt_0190c3b2a1b27000800000000000000a")]
    pub id: String,
    #[serde(rename = "type")]
    #[schema(example = "withdrawal.completed")]
    pub kind: String,
    pub created_at: DateTime<Utc>,
    pub data: crate::domain::view::WithdrawalView,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EventList {
    pub data: Vec<EventView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// The query of `GET /v1/events`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events of this type.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub kind: Option<String>,
    /// An event id (`evt_…`): only events after it.
    pub after: Option<String>,
    /// Page size, 1–100 (default 20).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
}

const DEFAULT_PAGE: u32 = 20;
const MAX_PAGE: u32 = 100;
/// Endpoints one account may register.
pub const MAX_ENDPOINTS: usize = 16;

fn endpoint_not_found() -> ServiceError {
    ServiceError::not_found()
}

fn parse_endpoint(raw: &str) -> ServiceResult<WebhookEndpointId> {
    WebhookEndpointId::from_wire(raw).ok_or_else(endpoint_not_found)
}

/// The sealing key, or 503 `notifications_unavailable` when none is configured.
fn key<'a>(customers: &'a Customers<'_>) -> ServiceResult<&'a [u8; 32]> {
    customers.config.notify.secret_key.as_deref().map(ExposeSecret::expose_secret).ok_or_else(|| {
        ServiceError::unavailable(
            "notifications_unavailable",
            "webhook endpoints cannot be registered here: the service has no NOTIFY_SECRET_KEY",
        )
    })
}

fn view(row: &store::EndpointRow, secret: Option<&SecretString>, now: DbTime) -> ServiceResult<EndpointView> {
    let overlap = row.previous_secret_expires_at.filter(|until| now < *until).map(|t| t.0);
    Ok(EndpointView {
        id: row.id.wire(),
        url: row.url.clone(),
        events: row.types()?.names(),
        status: row.status.as_str().to_owned(),
        disabled_reason: row.disabled_reason.clone(),
        created_at: row.created_at.0,
        secret: secret.map(|s| s.expose_secret().to_owned()),
        previous_secret_expires_at: overlap,
    })
}

/// `POST /v1/webhook-endpoints`: 201 with the secret, shown once. The URL must be `https` and
/// resolve to public addresses only (422 `invalid_webhook_url`), unless `NOTIFY_ALLOW_INSECURE`.
pub async fn create(
    customers: &Customers<'_>,
    account: AccountId,
    req: &CreateEndpointRequest,
) -> ServiceResult<EndpointView> {
    let key = key(customers)?;
    let types = EventTypes::parse(&req.events).map_err(|e| ServiceError::invalid("invalid_events", "events", e))?;
    if req.url.len() > 2048 {
        return Err(ServiceError::invalid("invalid_webhook_url", "url", "the URL is longer than 2048 characters"));
    }
    let url = crate::outbound::check_endpoint(&req.url, customers.config.notify.allow_insecure)
        .await
        .map_err(|e| ServiceError::invalid("invalid_webhook_url", "url", e.to_string()))?;
    if store::endpoints_of(customers.db, account).await?.len() >= MAX_ENDPOINTS {
        return Err(ServiceError::conflict(
            "too_many_endpoints",
            format!("an account may register at most {MAX_ENDPOINTS} endpoints; delete one first"),
        ));
    }
    let id = WebhookEndpointId::new();
    let secret = crate::credentials::new_signing_secret();
    let sealed = crate::credentials::seal(key, id.0, secret.expose_secret().as_bytes());
    let row = store::create_endpoint(customers.db, id, account, url.as_str(), types, &sealed).await?;
    tracing::info!(event = "webhook_endpoint_created", endpoint_id = %id.wire(), "webhook endpoint registered");
    view(&row, Some(&secret), DbTime::now())
}

/// `GET /v1/webhook-endpoints`: the account's endpoints, oldest first, without secrets.
pub async fn list(customers: &Customers<'_>, account: AccountId) -> ServiceResult<EndpointList> {
    let now = DbTime::now();
    let rows = store::endpoints_of(customers.db, account).await?;
    Ok(EndpointList { data: rows.iter().map(|r| view(r, None, now)).collect::<ServiceResult<_>>()? })
}

/// `DELETE /v1/webhook-endpoints/{id}`: nothing more is delivered to it; 404 if the account has
/// no such endpoint.
pub async fn delete(customers: &Customers<'_>, account: AccountId, id: &str) -> ServiceResult<()> {
    let id = parse_endpoint(id)?;
    match store::delete_endpoint(customers.db, account, id).await? {
        true => {
            tracing::info!(event = "webhook_endpoint_deleted", endpoint_id = %id.wire(), "webhook endpoint deleted");
            Ok(())
        }
        false => Err(endpoint_not_found()),
    }
}

/// `POST /v1/webhook-endpoints/{id}/rotate-secret`: a new secret, shown once; the previous one
/// keeps signing (both `v1=` are sent) for the configured overlap.
pub async fn rotate_secret(customers: &Customers<'_>, account: AccountId, id: &str) -> ServiceResult<EndpointView> {
    let key = key(customers)?;
    let id = parse_endpoint(id)?;
    let secret = crate::credentials::new_signing_secret();
    let sealed = crate::credentials::seal(key, id.0, secret.expose_secret().as_bytes());
    let overlap = chrono::TimeDelta::from_std(customers.config.notify.rotation_overlap).map_err(anyhow::Error::from)?;
    let until = DbTime::now().plus(overlap);
    let row = store::rotate_secret(customers.db, account, id, &sealed, until).await?.ok_or_else(endpoint_not_found)?;
    tracing::info!(event = "webhook_secret_rotated", endpoint_id = %id.wire(), "webhook endpoint secret rotated");
    view(&row, Some(&secret), DbTime::now())
}

/// `GET /v1/events`: the account's events oldest first, `after` a cursor; an event shows once
/// it is `EVENTS_SETTLE_MS` old, so a page never passes by one still committing.
pub async fn events(customers: &Customers<'_>, account: AccountId, query: &EventsQuery) -> ServiceResult<EventList> {
    let kind = query
        .kind
        .as_deref()
        .map(str::parse::<EventType>)
        .transpose()
        .map_err(|e| ServiceError::invalid("invalid_type", "type", e.to_string()))?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ServiceError::invalid("invalid_limit", "limit", format!("limit must be 1 to {MAX_PAGE}")));
    }
    let after = query
        .after
        .as_deref()
        .map(|raw| {
            EventId::from_wire(raw)
                .ok_or_else(|| ServiceError::invalid("invalid_cursor", "after", "after must be an event id (evt_…)"))
        })
        .transpose()?;
    let settle = chrono::TimeDelta::from_std(customers.config.notify.events_settle).map_err(anyhow::Error::from)?;
    let visible_until = DbTime::now().plus(-settle);
    let mut rows = store::events_page(customers.db, account, kind, after, visible_until, limit + 1).await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let data = rows.iter().map(event_view).collect::<ServiceResult<Vec<_>>>()?;
    let next_cursor = more.then(|| data.last().map(|e| e.id.clone())).flatten();
    Ok(EventList { data, next_cursor })
}

/// One event as the customer sees it.
pub fn event_view(row: &store::EventRow) -> ServiceResult<EventView> {
    let wire = row.to_json();
    let data = serde_json::from_value(wire["data"].clone()).map_err(anyhow::Error::from)?;
    Ok(EventView { id: row.id.wire(), kind: row.event_type.clone(), created_at: row.created_at.0, data })
}
