//! Admin routes under `/__admin`: change faults and settlement at run time,
//! read the ground truth (executed transfers, received requests), reset.
//! They never require the API key, so a test harness needs no credentials
//! to steer or inspect the mock.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use crate::faults::{FaultConfig, FaultRule};
use crate::model::Settlement;
use crate::server::error;
use crate::state::Shared;

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
        .route("/__admin/settlement", post(set_settlement))
        .route("/__admin/transfers", get(transfers))
        .route("/__admin/requests", get(requests))
        .route("/__admin/reset", post(reset))
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

async fn reset(State(shared): State<Shared>) -> StatusCode {
    shared.lock().reset();
    StatusCode::NO_CONTENT
}
