//! The console's one door to the operator core: a typed function per operation it uses
//! (`withdrawals`, `resolve`, `start_replay`, …), each taking the signed-in operator's [`Session`]
//! and answering with the DTO of [`crate::ops::types`] or a [`Refusal`] to show.
//!
//! Today each goes through the ops API (`/ops/v1/…`) in process, as that operator, and reads the
//! answer into its DTO; so roles, validation, guarded transitions and audit rows are the API's
//! own, and the console adds no second path to the data. Pages call only these functions, never
//! the transport, so it can become a direct call to the service layer without touching a page.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower::ServiceExt;
use uuid::Uuid;

use super::session::Session;
use crate::domain::WithdrawalId;
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::types::{
    AuditEntry, AuditQuery, Closed, DeadLetterGroup, DeadLetterQuery, DeadLetterView, Decided, DecisionVerdict, List,
    OpsWithdrawal, Overview, Page, ReasonRequest, ReplayControl, ReplayQuery, ReplayRunView, ResolveRequest, Resolved,
    StartReplay, Started, WithdrawalDetail, WithdrawalQuery,
};
use crate::http::ops::Delegated;

/// What the core refused, to show the operator.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub status: StatusCode,
    pub code: String,
    pub detail: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.detail, self.code)
    }
}

impl Refusal {
    /// A form field the core would not accept (422 with the core's code), found before asking.
    pub fn invalid(code: &str, detail: impl Into<String>) -> Self {
        Refusal { status: StatusCode::UNPROCESSABLE_ENTITY, code: code.to_owned(), detail: detail.into() }
    }

    /// What the core answers for an id that names nothing.
    pub fn not_found() -> Self {
        ApiError::not_found().into()
    }

    /// The core could not answer; the operator is told nothing more (the cause is logged).
    pub fn internal() -> Self {
        Refusal {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal_error".into(),
            detail: "the request could not be completed".into(),
        }
    }
}

/// The core's own error, as the operator sees it: a problem's status, code and detail; an
/// internal error stays generic (its cause is logged where it happened).
impl From<ApiError> for Refusal {
    fn from(err: ApiError) -> Self {
        match err {
            ApiError::Problem(p) => Refusal {
                status: StatusCode::from_u16(p.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                code: p.code,
                detail: p.detail,
            },
            ApiError::Internal(_) => Refusal::internal(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The operations

/// `GET /ops/v1/overview`.
pub async fn overview(state: &AppState, session: &Session) -> Result<Overview, Refusal> {
    get(state, session, "/ops/v1/overview", &()).await
}

/// The review queue: withdrawals in a state, oldest first.
pub async fn withdrawals(
    state: &AppState,
    session: &Session,
    query: &WithdrawalQuery,
) -> Result<Page<OpsWithdrawal>, Refusal> {
    get(state, session, "/ops/v1/withdrawals", query).await
}

/// One withdrawal with all its evidence.
pub async fn withdrawal(state: &AppState, session: &Session, id: WithdrawalId) -> Result<WithdrawalDetail, Refusal> {
    get(state, session, &format!("/ops/v1/withdrawals/{id}"), &()).await
}

/// Resolves a withdrawal in review (or stores the decision for a second operator).
pub async fn resolve(
    state: &AppState,
    session: &Session,
    id: WithdrawalId,
    request: &ResolveRequest,
) -> Result<Resolved, Refusal> {
    post(state, session, &format!("/ops/v1/withdrawals/{id}/resolve"), request).await
}

/// Approves or rejects the decision waiting on a withdrawal.
pub async fn decide(
    state: &AppState,
    session: &Session,
    id: WithdrawalId,
    verdict: DecisionVerdict,
    request: &ReasonRequest,
) -> Result<Decided, Refusal> {
    post(state, session, &format!("/ops/v1/withdrawals/{id}/decision/{}", verdict.as_str()), request).await
}

/// Open dead letters by category and error code.
pub async fn dead_letter_summary(state: &AppState, session: &Session) -> Result<List<DeadLetterGroup>, Refusal> {
    get(state, session, "/ops/v1/dead-letters/summary", &()).await
}

/// Dead letters, newest first, filtered.
pub async fn dead_letters(
    state: &AppState,
    session: &Session,
    query: &DeadLetterQuery,
) -> Result<Page<DeadLetterView>, Refusal> {
    get(state, session, "/ops/v1/dead-letters", query).await
}

/// One dead letter with its history.
pub async fn dead_letter(state: &AppState, session: &Session, id: Uuid) -> Result<DeadLetterView, Refusal> {
    get(state, session, &format!("/ops/v1/dead-letters/{id}"), &()).await
}

/// Closes (archives) a dead letter.
pub async fn close_dead_letter(
    state: &AppState,
    session: &Session,
    id: Uuid,
    request: &ReasonRequest,
) -> Result<Closed, Refusal> {
    post(state, session, &format!("/ops/v1/dead-letters/{id}/close"), request).await
}

/// Replay runs, newest first, with their progress.
pub async fn replays(state: &AppState, session: &Session, query: &ReplayQuery) -> Result<List<ReplayRunView>, Refusal> {
    get(state, session, "/ops/v1/replays", query).await
}

/// One run with its progress and items.
pub async fn replay(state: &AppState, session: &Session, id: Uuid) -> Result<ReplayRunView, Refusal> {
    get(state, session, &format!("/ops/v1/replays/{id}"), &()).await
}

/// A dry run's report, or the new run.
pub async fn start_replay(state: &AppState, session: &Session, request: &StartReplay) -> Result<Started, Refusal> {
    post(state, session, "/ops/v1/replays", request).await
}

/// Pauses, resumes, cancels or approves a run.
pub async fn control_replay(
    state: &AppState,
    session: &Session,
    id: Uuid,
    action: ReplayControl,
    request: &ReasonRequest,
) -> Result<ReplayRunView, Refusal> {
    post(state, session, &format!("/ops/v1/replays/{id}/{}", action.as_str()), request).await
}

/// The audit log, newest first.
pub async fn audit(state: &AppState, session: &Session, query: &AuditQuery) -> Result<Page<AuditEntry>, Refusal> {
    get(state, session, "/ops/v1/audit", query).await
}

// ---------------------------------------------------------------------------------------------
// The transport (in-process HTTP, until the service layer is called directly)

const MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

async fn get<Q: Serialize, T: DeserializeOwned>(
    state: &AppState,
    session: &Session,
    path: &str,
    query: &Q,
) -> Result<T, Refusal> {
    let query = serde_urlencoded::to_string(query).map_err(|_| Refusal::internal())?;
    let uri = if query.is_empty() { path.to_owned() } else { format!("{path}?{query}") };
    typed(call(state, session, Method::GET, &uri, None).await?)
}

async fn post<B: Serialize, T: DeserializeOwned>(
    state: &AppState,
    session: &Session,
    path: &str,
    body: &B,
) -> Result<T, Refusal> {
    let body = serde_json::to_vec(body).map_err(|_| Refusal::internal())?;
    typed(call(state, session, Method::POST, path, Some(body)).await?)
}

/// A 2xx answer read into its DTO; one that does not fit is the core's fault, not the operator's.
fn typed<T: DeserializeOwned>(answer: Value) -> Result<T, Refusal> {
    serde_json::from_value(answer).map_err(|err| {
        tracing::error!(error = %err, "an ops API answer does not match its DTO");
        Refusal::internal()
    })
}

/// Calls the ops API as `session`'s operator. `Ok` holds the JSON of a 2xx answer.
async fn call(
    state: &AppState,
    session: &Session,
    method: Method,
    uri: &str,
    body: Option<Vec<u8>>,
) -> Result<Value, Refusal> {
    let body = body.map(Body::from).unwrap_or_else(Body::empty);
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(|_| Refusal::internal())?;
    request.extensions_mut().insert(Delegated(session.operator.clone()));
    let response =
        crate::http::ops::router().with_state(state.clone()).oneshot(request).await.map_err(|_| Refusal::internal())?;
    let status = response.status();
    let bytes =
        axum::body::to_bytes(response.into_body(), MAX_RESPONSE_BYTES).await.map_err(|_| Refusal::internal())?;
    if status.is_success() {
        return Ok(serde_json::from_slice(&bytes).unwrap_or(Value::Null));
    }
    match serde_json::from_slice::<ProblemBody>(&bytes) {
        Ok(problem) => Err(Refusal {
            status,
            code: problem.code.unwrap_or_else(|| "error".into()),
            detail: problem.detail.unwrap_or_else(|| "the request was refused".into()),
        }),
        // No problem body: a path no route serves.
        Err(_) if status == StatusCode::NOT_FOUND => {
            Err(Refusal { status, code: "not_found".into(), detail: "no such page".into() })
        }
        Err(_) => Err(Refusal { status, code: "error".into(), detail: "the request was refused".into() }),
    }
}

/// The parts of a problem+json answer the operator is shown.
#[derive(Deserialize)]
struct ProblemBody {
    code: Option<String>,
    detail: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Form values into typed requests and queries

/// A query string from the non-empty pairs (empty form fields mean "no filter").
pub fn query<S: AsRef<str>>(pairs: &[(&str, Option<S>)]) -> String {
    let kept = kept(pairs);
    if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", serde_urlencoded::to_string(kept).unwrap_or_default())
    }
}

fn kept<'a, S: AsRef<str>>(pairs: &'a [(&'a str, Option<S>)]) -> Vec<(&'a str, &'a str)> {
    pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| v.as_ref().trim()).filter(|v| !v.is_empty()).map(|v| (*k, v)))
        .collect()
}

/// A page's filter fields (the non-empty ones) as a typed list query, judged the way the API
/// judges a query string: a value that does not parse is a 422 `invalid_query`.
pub fn parse_query<Q: DeserializeOwned, S: AsRef<str>>(pairs: &[(&str, Option<S>)]) -> Result<Q, Refusal> {
    let text = serde_urlencoded::to_string(kept(pairs)).map_err(|_| Refusal::internal())?;
    serde_urlencoded::from_str(&text)
        .map_err(|err| Refusal::invalid("invalid_query", format!("Failed to deserialize query string: {err}")))
}

/// What a browser's `datetime-local` input sends, with and without seconds.
const DATETIME_LOCAL: [&str; 2] = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"];

/// A browser's `datetime-local` value (`2026-12-02T18:00`, read as UTC) as the API's RFC 3339;
/// anything else is passed on for the API to judge.
pub fn utc_param(value: &str) -> String {
    let value = value.trim();
    for format in DATETIME_LOCAL {
        if let Ok(at) = chrono::NaiveDateTime::parse_from_str(value, format) {
            return at.and_utc().to_rfc3339();
        }
    }
    value.to_owned()
}

/// A path id as a withdrawal id; one that is not names nothing (404, as the API answers).
pub fn withdrawal_id(raw: &str) -> Result<WithdrawalId, Refusal> {
    raw.parse().map_err(|_| Refusal::not_found())
}

/// A path id as a UUID; one that is not names nothing (404, as the API answers).
pub fn uuid(raw: &str) -> Result<Uuid, Refusal> {
    Uuid::parse_str(raw).map_err(|_| Refusal::not_found())
}
