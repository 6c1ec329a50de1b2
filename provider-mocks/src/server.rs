//! The HTTP side of the provider: the accept loop and the provider routes
//! (`/v1/transfers...`, `/v1/reports/settlements`). Connections are served with hyper directly rather
//! than `axum::serve` so that a handler can drop its own connection without
//! answering, which is how timeouts and resets after commit are simulated.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, Request, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use hyper::body::Incoming;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower::Service;

use crate::faults::{FaultContext, FaultEffect, FaultPlan};
use crate::model::{CreateTransfer, RequestRecord, Route};
use crate::state::{CreateOutcome, RequestSlot, Shared};

/// Lets a handler end the connection it arrived on, unanswered.
#[derive(Clone)]
pub(crate) struct ConnControl(CancellationToken);

impl ConnControl {
    /// The connection task drops the connection, and this handler's future
    /// with it, so the pending future below never resolves.
    async fn drop_connection(&self) -> Response {
        self.0.cancel();
        std::future::pending().await
    }
}

/// Accepts until `shutdown` fires; cancelling it also drops every open
/// connection, including ones held open by timeout faults.
///
/// Every connection gets the listener's header-read and idle timeouts and
/// counts against its connection cap ([`http_guard`]). There is no request
/// timeout: timeout faults hold a request on purpose (30 s by default) after
/// its headers arrived, and it is the client's own timeout under test.
pub(crate) async fn serve(listener: http_guard::GuardedListener, router: Router, shutdown: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let conn_token = shutdown.child_token();
        let router = router.clone();
        tokio::spawn(async move {
            let ctl = ConnControl(conn_token.clone());
            let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(ctl.clone());
                let mut router = router.clone();
                async move { Ok::<_, Infallible>(router.call(req).await.into_response()) }
            });
            let (conn, _slot) = accepted.serve(service);
            tokio::select! {
                result = conn => {
                    if let Err(err) = result {
                        tracing::debug!(%err, "connection ended with error");
                    }
                }
                _ = conn_token.cancelled() => {}
            }
        });
    }
}

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/v1/transfers", post(create).get(lookup))
        .route("/v1/transfers/{id}", get(get_by_id))
        .route("/v1/reports/settlements", get(settlement_report))
}

pub(crate) fn error(status: StatusCode, code: &str) -> Response {
    (status, Json(json!({ "code": code }))).into_response()
}

fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// Logs the request on arrival, then checks auth: even rejected requests
/// belong in the log, since tests count attempts.
fn begin(
    shared: &Shared,
    route: Route,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    idempotency_key: Option<String>,
) -> Result<RequestSlot, Unauthorized> {
    let record = RequestRecord {
        method: method.to_string(),
        route,
        path: uri.path().to_string(),
        idempotency_key,
        correlation_id: header_str(headers, "x-correlation-id"),
        at: chrono::Utc::now(),
        outcome: "in_progress".to_string(),
    };
    let slot = shared.lock().record_request(record);
    if let Some(key) = &shared.api_key {
        let expected = format!("Bearer {key}");
        if header_str(headers, "authorization").as_deref() != Some(expected.as_str()) {
            shared.lock().set_outcome(slot, "unauthorized");
            return Err(Unauthorized);
        }
    }
    Ok(slot)
}

/// Rejection of [`begin`], kept small so the `Result` stays cheap to move.
struct Unauthorized;

impl IntoResponse for Unauthorized {
    fn into_response(self) -> Response {
        error(StatusCode::UNAUTHORIZED, "unauthorized")
    }
}

fn finish(shared: &Shared, slot: RequestSlot, outcome: &str, response: Response) -> Response {
    shared.lock().set_outcome(slot, outcome);
    response
}

async fn hold(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// Applies latency, then any terminal fault that acts before the route does
/// its work. `Some` is the final response; `None` means go on.
async fn before_work(shared: &Shared, slot: RequestSlot, ctl: &ConnControl, plan: &FaultPlan) -> Option<Response> {
    if plan.latency_ms > 0 {
        hold(plan.latency_ms).await;
    }
    let response = match plan.terminal.as_ref()? {
        FaultEffect::Status { code, retry_after_secs } => {
            let status = StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = error(status, "fault_injected");
            if let Some(secs) = retry_after_secs {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(*secs));
            }
            finish(shared, slot, &format!("status:{code}"), response)
        }
        FaultEffect::TimeoutBeforeCommit { ms } => {
            shared.lock().set_outcome(slot, "timeout_before_commit");
            hold(*ms).await;
            ctl.drop_connection().await
        }
        FaultEffect::InvalidAccount => {
            finish(shared, slot, "invalid_account", error(StatusCode::UNPROCESSABLE_ENTITY, "invalid_account"))
        }
        FaultEffect::LookupUnavailable => {
            finish(shared, slot, "lookup_unavailable", error(StatusCode::SERVICE_UNAVAILABLE, "lookup_unavailable"))
        }
        _ => return None,
    };
    Some(response)
}

/// Sends the route's response, unless a fault says to swallow it after the
/// work is done.
async fn after_work(
    shared: &Shared,
    slot: RequestSlot,
    ctl: &ConnControl,
    plan: &FaultPlan,
    outcome: &str,
    response: Response,
) -> Response {
    match plan.terminal {
        Some(FaultEffect::TimeoutAfterCommit { ms }) => {
            shared.lock().set_outcome(slot, "timeout_after_commit");
            hold(ms).await;
            ctl.drop_connection().await
        }
        Some(FaultEffect::ResetAfterCommit) => {
            shared.lock().set_outcome(slot, "reset_after_commit");
            ctl.drop_connection().await
        }
        _ => finish(shared, slot, outcome, response),
    }
}

/// The amount a `wrong_amount` fault adds, if one applies to this request.
fn wrong_amount(plan: &FaultPlan) -> Option<rust_decimal::Decimal> {
    match &plan.terminal {
        Some(FaultEffect::WrongAmount { add }) => Some(*add),
        _ => None,
    }
}

async fn create(
    State(shared): State<Shared>,
    Extension(ctl): Extension<ConnControl>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = header_str(&headers, "idempotency-key").filter(|k| !k.trim().is_empty());
    let slot = match begin(&shared, Route::Create, Method::POST, &uri, &headers, key.clone()) {
        Ok(slot) => slot,
        Err(rejected) => return rejected.into_response(),
    };
    let Some(key) = key else {
        let response = error(StatusCode::BAD_REQUEST, "idempotency_key_missing");
        return finish(&shared, slot, "idempotency_key_missing", response);
    };
    let request = match serde_json::from_slice::<CreateTransfer>(&body) {
        Ok(request) if request.is_valid() => request,
        _ => {
            let response = error(StatusCode::BAD_REQUEST, "invalid_request");
            return finish(&shared, slot, "invalid_request", response);
        }
    };

    let plan = shared.lock().plan_faults(FaultContext {
        route: Route::Create,
        idempotency_key: Some(&key),
        reference: Some(&request.reference),
        account_number: Some(request.destination.account_number()),
    });
    if let Some(response) = before_work(&shared, slot, &ctl, &plan).await {
        return response;
    }
    let forced_failure = match &plan.terminal {
        Some(FaultEffect::SettleFailed { failure_code }) => Some(failure_code.clone()),
        _ => None,
    };
    let forced = forced_failure.is_some();
    let executed_amount = wrong_amount(&plan).map(|add| request.amount + add);
    let outcome = shared.lock().create(&key, &request, forced_failure, executed_amount);
    let (label, response) = match outcome {
        CreateOutcome::Created(view) => {
            (if forced { "settle_failed" } else { "created" }, (StatusCode::CREATED, Json(view)).into_response())
        }
        CreateOutcome::Replayed(view) => ("replayed", (StatusCode::OK, Json(view)).into_response()),
        CreateOutcome::Conflict => ("conflict", error(StatusCode::CONFLICT, "idempotency_conflict")),
    };
    after_work(&shared, slot, &ctl, &plan, label, response).await
}

async fn lookup(
    State(shared): State<Shared>,
    Extension(ctl): Extension<ConnControl>,
    Query(query): Query<HashMap<String, String>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let key = query.get("idempotency_key").cloned();
    let slot = match begin(&shared, Route::Lookup, Method::GET, &uri, &headers, key.clone()) {
        Ok(slot) => slot,
        Err(rejected) => return rejected.into_response(),
    };
    let Some(key) = key else {
        let response = error(StatusCode::BAD_REQUEST, "invalid_request");
        return finish(&shared, slot, "invalid_request", response);
    };
    let plan = shared.lock().plan_faults(FaultContext {
        route: Route::Lookup,
        idempotency_key: Some(&key),
        reference: None,
        account_number: None,
    });
    if let Some(response) = before_work(&shared, slot, &ctl, &plan).await {
        return response;
    }
    let mut data = shared.lock().lookup_by_key(&key);
    if let Some(add) = wrong_amount(&plan) {
        data.iter_mut().for_each(|t| t.amount += add);
    }
    let label = if data.is_empty() { "empty" } else { "found" };
    let response = Json(json!({ "data": data })).into_response();
    after_work(&shared, slot, &ctl, &plan, label, response).await
}

async fn get_by_id(
    State(shared): State<Shared>,
    Extension(ctl): Extension<ConnControl>,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let slot = match begin(&shared, Route::Get, Method::GET, &uri, &headers, None) {
        Ok(slot) => slot,
        Err(rejected) => return rejected.into_response(),
    };
    let plan = shared.lock().plan_faults(FaultContext {
        route: Route::Get,
        idempotency_key: None,
        reference: None,
        account_number: None,
    });
    if let Some(response) = before_work(&shared, slot, &ctl, &plan).await {
        return response;
    }
    let mut found = shared.lock().get_by_id(&id);
    if let (Some(view), Some(add)) = (found.as_mut(), wrong_amount(&plan)) {
        view.amount += add;
    }
    let (label, response) = match found {
        Some(view) => ("found", Json(view).into_response()),
        None => ("not_found", error(StatusCode::NOT_FOUND, "not_found")),
    };
    after_work(&shared, slot, &ctl, &plan, label, response).await
}

/// `GET /v1/reports/settlements?date=YYYY-MM-DD` (SPEC §14.1): the day's
/// status changes as CSV, with the report faults applied. Transport faults
/// do not apply here.
async fn settlement_report(
    State(shared): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let slot = match begin(&shared, Route::Report, Method::GET, &uri, &headers, None) {
        Ok(slot) => slot,
        Err(rejected) => return rejected.into_response(),
    };
    let Some(date) = query.get("date").and_then(|d| crate::report::parse_date(d)) else {
        let response = error(StatusCode::BAD_REQUEST, "invalid_request");
        return finish(&shared, slot, "invalid_request", response);
    };
    let lines = shared.lock().settlement_report(date);
    let response = match crate::report::to_csv(&lines) {
        Ok(csv) => ([(header::CONTENT_TYPE, "text/csv")], csv).into_response(),
        Err(err) => {
            tracing::error!(%err, "writing the settlement report");
            error(StatusCode::INTERNAL_SERVER_ERROR, "internal")
        }
    };
    finish(&shared, slot, "found", response)
}
