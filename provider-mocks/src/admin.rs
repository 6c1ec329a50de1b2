//! Admin routes under `/__admin`: change faults, report faults, settlement,
//! webhook settings and webhook faults at run time, return paid transfers (now
//! or at a given time), move the mock clock, send a forged webhook event, read
//! the ground truth (executed transfers, received requests, webhook
//! deliveries), reset.
//! They never require the API key, so a test harness needs no credentials
//! to steer or inspect the mock.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::faults::{FaultConfig, FaultRule};
use crate::model::Settlement;
use crate::report::ReportFaultConfig;
use crate::server::error;
use crate::state::{ReturnRefused, Shared};
use crate::webhooks::{ForgedEvent, RetryPolicy, SendRefused, WebhookFaults, WebhookSettings};

/// Body of `POST /__admin/returns`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReturnRequest {
    idempotency_key: String,
    return_code: String,
    /// RFC 3339; absent means now.
    #[serde(default)]
    at: Option<DateTime<Utc>>,
}

/// Body of `POST /__admin/clock`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClockUpdate {
    offset_secs: i64,
}

/// Body of `POST /__admin/faults`: a [`FaultConfig`] that may also reseed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultUpdate {
    #[serde(default)]
    rules: Vec<FaultRule>,
    #[serde(default)]
    seed: Option<u64>,
}

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/__admin/faults", post(set_faults).get(get_faults))
        .route("/__admin/report-faults", post(set_report_faults).get(get_report_faults))
        .route("/__admin/returns", post(return_transfer))
        .route("/__admin/clock", post(set_clock).get(get_clock))
        .route("/__admin/settlement", post(set_settlement))
        .route("/__admin/transfers", get(transfers))
        .route("/__admin/requests", get(requests))
        .route("/__admin/reset", post(reset))
        .route("/__admin/webhooks", put(set_webhooks).post(set_webhooks).get(get_webhooks))
        .route("/__admin/webhook-faults", put(set_webhook_faults).post(set_webhook_faults).get(get_webhook_faults))
        .route("/__admin/webhooks/send", post(send_event))
        .route("/__admin/webhooks/deliveries", get(webhook_deliveries))
}

/// `GET /__admin/webhooks`: the settings without the secrets, only how many.
#[derive(Debug, Serialize)]
struct WebhooksView {
    url: Option<String>,
    secret_count: usize,
    retry: RetryPolicy,
    timeout_ms: u64,
    faults: WebhookFaults,
}

/// Bodies are parsed by hand, not with `Json`, so a typo in a rule gets the
/// same JSON error shape as the provider routes, plus serde's message
/// saying what was wrong.
fn invalid(err: serde_json::Error) -> Response {
    let body = json!({ "code": "invalid_request", "message": err.to_string() });
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

async fn set_faults(State(shared): State<Shared>, body: Bytes) -> Response {
    match serde_json::from_slice::<FaultUpdate>(&body) {
        Ok(update) => {
            let faults = FaultConfig { rules: update.rules };
            shared.lock().set_faults(faults, update.seed);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(err) => invalid(err),
    }
}

async fn get_faults(State(shared): State<Shared>) -> Json<FaultConfig> {
    Json(shared.lock().fault_config())
}

async fn set_report_faults(State(shared): State<Shared>, body: Bytes) -> Response {
    match serde_json::from_slice::<ReportFaultConfig>(&body) {
        Ok(faults) => {
            shared.lock().set_report_faults(faults);
            StatusCode::NO_CONTENT.into_response()
        }
        Err(err) => invalid(err),
    }
}

async fn get_report_faults(State(shared): State<Shared>) -> Json<ReportFaultConfig> {
    Json(shared.lock().report_faults())
}

async fn return_transfer(State(shared): State<Shared>, body: Bytes) -> Response {
    let request = match serde_json::from_slice::<ReturnRequest>(&body) {
        Ok(request) => request,
        Err(err) => return invalid(err),
    };
    match shared.lock().return_transfer(&request.idempotency_key, &request.return_code, request.at) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(ReturnRefused::NotFound) => error(StatusCode::NOT_FOUND, "not_found"),
        Err(ReturnRefused::NotPaid) => error(StatusCode::CONFLICT, "not_paid"),
        Err(ReturnRefused::BeforePaid) => {
            let body = json!({ "code": "invalid_request", "message": "at is before the transfer was paid" });
            (StatusCode::BAD_REQUEST, Json(body)).into_response()
        }
    }
}

fn clock(shared: &Shared) -> Response {
    let state = shared.lock();
    let now = state.now().to_rfc3339_opts(SecondsFormat::Millis, true);
    Json(json!({ "now": now, "offset_secs": state.clock_offset().num_seconds() })).into_response()
}

async fn set_clock(State(shared): State<Shared>, body: Bytes) -> Response {
    let update = match serde_json::from_slice::<ClockUpdate>(&body) {
        Ok(update) => update,
        Err(err) => return invalid(err),
    };
    let Some(offset) = TimeDelta::try_seconds(update.offset_secs) else {
        return error(StatusCode::BAD_REQUEST, "invalid_request");
    };
    shared.lock().set_clock_offset(offset);
    clock(&shared)
}

async fn get_clock(State(shared): State<Shared>) -> Response {
    clock(&shared)
}

async fn set_settlement(State(shared): State<Shared>, body: Bytes) -> Response {
    match serde_json::from_slice::<Settlement>(&body) {
        Ok(settlement) if (0.0..=1.0).contains(&settlement.fail_ratio) => {
            shared.lock().set_settlement(settlement);
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(_) => error(StatusCode::BAD_REQUEST, "invalid_request"),
        Err(err) => invalid(err),
    }
}

async fn transfers(State(shared): State<Shared>) -> Response {
    let data = shared.lock().transfers();
    Json(json!({ "data": data })).into_response()
}

async fn requests(State(shared): State<Shared>) -> Response {
    let data = shared.lock().requests();
    Json(json!({ "data": data })).into_response()
}

fn invalid_settings(reason: impl std::fmt::Display) -> Response {
    let body = json!({ "code": "invalid_request", "message": reason.to_string() });
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

async fn set_webhooks(State(shared): State<Shared>, body: Bytes) -> Response {
    let settings = match serde_json::from_slice::<WebhookSettings>(&body) {
        Ok(settings) => settings,
        Err(err) => return invalid(err),
    };
    if let Err(reason) = settings.validate() {
        return invalid_settings(reason);
    }
    shared.lock().set_webhooks(settings);
    StatusCode::NO_CONTENT.into_response()
}

async fn get_webhooks(State(shared): State<Shared>) -> Json<WebhooksView> {
    let settings = shared.lock().webhooks();
    Json(WebhooksView {
        url: settings.url,
        secret_count: settings.secrets.len(),
        retry: settings.retry,
        timeout_ms: settings.timeout_ms,
        faults: settings.faults,
    })
}

async fn set_webhook_faults(State(shared): State<Shared>, body: Bytes) -> Response {
    let faults = match serde_json::from_slice::<WebhookFaults>(&body) {
        Ok(faults) => faults,
        Err(err) => return invalid(err),
    };
    if let Err(reason) = faults.validate() {
        return invalid_settings(reason);
    }
    shared.lock().set_webhook_faults(faults);
    StatusCode::NO_CONTENT.into_response()
}

async fn get_webhook_faults(State(shared): State<Shared>) -> Json<WebhookFaults> {
    Json(shared.lock().webhooks().faults)
}

async fn send_event(State(shared): State<Shared>, body: Bytes) -> Response {
    let forged = match serde_json::from_slice::<ForgedEvent>(&body) {
        Ok(forged) => forged,
        Err(err) => return invalid(err),
    };
    let sent = shared.lock().forge(&forged);
    match sent {
        Ok(id) => (StatusCode::ACCEPTED, Json(json!({ "id": id }))).into_response(),
        Err(SendRefused::UnknownTransfer) => error(StatusCode::NOT_FOUND, "not_found"),
        Err(SendRefused::WebhooksOff) => error(StatusCode::CONFLICT, "webhooks_off"),
    }
}

async fn webhook_deliveries(State(shared): State<Shared>) -> Response {
    let data = shared.lock().webhook_deliveries();
    Json(json!({ "data": data })).into_response()
}

async fn reset(State(shared): State<Shared>) -> StatusCode {
    shared.lock().reset();
    StatusCode::NO_CONTENT
}
