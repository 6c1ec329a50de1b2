//! `POST /webhooks/provider/{name}` and the bare `POST /webhooks/provider` (`default`'s) (SPEC
//! §15, §16): each provider's signed events, outside `/v1` and `/ops` and with no customer or
//! operator credential — the signature, under that provider's secrets, is the credential. Thin:
//! [`crate::webhooks::endpoint`] says whose route it is (none: 404, before the body is read),
//! the body is read up to the limit (a longer one is refused before it is read, from its
//! `Content-Length`, or as soon as it passes the limit), then [`crate::webhooks::receive`]
//! decides.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::correlation::CorrelationId;
use super::error::ApiError;
use super::AppState;
use crate::storage::DbTime;
use crate::webhooks::{self, Receipt, Request};

/// What the route answers an event it took.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookAck {
    /// `accepted` (stored, to be decided on the provider's record), `duplicate` (an event id
    /// this provider sent before: nothing changed) or `ignored` (a type not handled).
    pub status: String,
}

/// The request's headers as JSON, name → value; the core decides what of them is stored.
fn headers_json(headers: &HeaderMap) -> Value {
    let pairs = headers.iter().map(|(name, value)| {
        (name.as_str().to_owned(), Value::String(String::from_utf8_lossy(value.as_bytes()).into_owned()))
    });
    Value::Object(pairs.collect::<Map<_, _>>())
}

#[utoipa::path(post, path = "/webhooks/provider", tag = "webhooks",
    description = "The `default` payout provider's signed events (SPEC §15): with a lone PROVIDER_URL, the one provider's; with a providers file, the provider named `default`, if there is one. `Provider-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, \"<t>.<raw body>\")>`. Stored at once and decided later on the provider's own record.",
    request_body(content = Value, content_type = "application/json", description = "`{id, type, created_at, data: <transfer>}`"),
    params(("Provider-Signature" = String, Header, description = "t=<unix seconds>,v1=<hex>[,v1=<hex>…]")),
    responses(
        (status = 202, body = WebhookAck, description = "stored; its job decides on the provider's record"),
        (status = 200, body = WebhookAck, description = "a duplicate (an event id this provider sent before) or an unhandled type: nothing applied"),
        (status = 400, body = super::error::Problem, content_type = "application/problem+json",
         description = "webhook_signature_invalid, webhook_timestamp_stale or webhook_malformed: nothing stored"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json",
         description = "no `default` provider, or it has no webhook secret (PROVIDER_WEBHOOK_SECRET)"),
    ))]
pub async fn receive(
    State(state): State<AppState>,
    Extension(correlation): Extension<CorrelationId>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    take(&state, None, &correlation, request).await
}

#[utoipa::path(post, path = "/webhooks/provider/{name}", tag = "webhooks",
    description = "Provider `name`'s signed events (SPEC §16), checked against that provider's own secrets (its `webhook_secrets_env`; `default` without a providers file: PROVIDER_WEBHOOK_SECRET) and stored under its name; event ids are unique per provider. Otherwise as `POST /webhooks/provider`.",
    request_body(content = Value, content_type = "application/json", description = "`{id, type, created_at, data: <transfer>}`"),
    params(
        ("name" = String, Path, description = "the provider's name, as the providers file gives it"),
        ("Provider-Signature" = String, Header, description = "t=<unix seconds>,v1=<hex>[,v1=<hex>…]"),
    ),
    responses(
        (status = 202, body = WebhookAck, description = "stored; its job decides on this provider's record"),
        (status = 200, body = WebhookAck, description = "a duplicate (an event id this provider sent before) or an unhandled type: nothing applied"),
        (status = 400, body = super::error::Problem, content_type = "application/problem+json",
         description = "webhook_signature_invalid, webhook_timestamp_stale or webhook_malformed: nothing stored"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json",
         description = "no such provider, or it has no webhook secret (the answer does not say which)"),
    ))]
pub async fn receive_from(
    State(state): State<AppState>,
    Extension(correlation): Extension<CorrelationId>,
    name: Result<Path<String>, axum::extract::rejection::PathRejection>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    // A name that does not even decode is no provider's either.
    let Ok(Path(name)) = name else { return Err(ApiError::not_found()) };
    take(&state, Some(&name), &correlation, request).await
}

/// One request at the route of provider `name` (`None`: the bare route).
async fn take(
    state: &AppState,
    name: Option<&str>,
    correlation: &CorrelationId,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    // Not a served route (an unknown name, no secret): the same 404 as any unknown path, counted
    // nowhere, so a stranger's names add no label value.
    let Some(endpoint) = webhooks::endpoint(state.config(), name) else {
        return Err(ApiError::not_found());
    };
    let (parts, body): (_, Body) = request.into_parts();
    let headers = &parts.headers;
    // Who sent it, for the refusal's log line (the same reading as the auth-failure limiter's).
    let source = state.auth_guard().source(headers, &parts.extensions).to_string();
    let settings = &state.config().webhooks;
    let limit = settings.max_body_bytes;
    let declared = headers.get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let over = || ApiError::from(webhooks::too_large(endpoint.provider, &source, limit));
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(over());
    }
    let Ok(body) = axum::body::to_bytes(body, limit).await else { return Err(over()) };
    let signature = headers.get(provider_contract::webhook::PROVIDER_SIGNATURE_HEADER).and_then(|v| v.to_str().ok());
    let request = Request {
        signature,
        headers: headers_json(headers),
        body: &body,
        correlation_id: &correlation.0,
        source: &source,
    };
    let (status, ack) = match webhooks::receive(state.db(), settings, endpoint, request, DbTime::now()).await? {
        Receipt::Accepted(_) => (StatusCode::ACCEPTED, "accepted"),
        Receipt::Duplicate => (StatusCode::OK, "duplicate"),
        Receipt::Ignored(_) => (StatusCode::OK, "ignored"),
    };
    Ok((status, Json(WebhookAck { status: ack.to_owned() })).into_response())
}

/// The routes. Their metric series, one set per configured provider, start at zero when the
/// application's router is built from its settings ([`series_from_zero`]).
pub fn router() -> Router<AppState> {
    Router::new().route("/webhooks/provider", post(receive)).route("/webhooks/provider/{name}", post(receive_from))
}

/// Every configured provider's webhook series from zero (SPEC §9), its counters and its
/// last-received gauge: called where the router meets its settings ([`super::layered`]).
pub fn series_from_zero(state: &AppState) {
    let providers = webhooks::providers(state.config());
    crate::metrics::webhook_providers_known(providers.iter().copied());
    crate::metrics::webhook_gauges_known(providers);
}
