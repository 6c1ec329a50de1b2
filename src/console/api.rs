//! The console's one door to the operator core: a typed function per operation it uses
//! (`withdrawals`, `resolve`, `start_replay`, …), each taking the signed-in operator's [`Session`]
//! and answering with the DTO of [`crate::ops::types`] or a [`PageRefusal`] to show.
//!
//! Each calls the operator core's function directly, as that operator — the same function the
//! ops API's handler calls — so roles, validation, guarded transitions and audit rows are the
//! core's own, and the console adds no second path to the data and no HTTP round trip.

use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use uuid::Uuid;

use super::session::Session;
use crate::domain::{DeadLetterId, NotificationId, ReplayRunId, SettlementExceptionId, WithdrawalId};
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::ops::acts::SettlementExceptionResolve;
use crate::ops::types::{
    ApproveOrReject, AuditEntry, AuditQuery, Closed, DeadLetterGroup, DeadLetterQuery, DeadLetterView, DecisionResult,
    ExceptionQuery, ExceptionView, List, NotificationDetail, NotificationQuery, NotificationView, OpsWithdrawal,
    Overview, Page, ReasonRequest, Redelivered, ReplayControl, ReplayQuery, ReplayRunView, ReportQuery, ReportView,
    Resolution, ResolveExceptionRequest, ResolveRequest, Resolved, StartReplay, Started, WebhookEndpointQuery,
    WebhookEndpointView, WithdrawalDetail, WithdrawalQuery,
};
use crate::ops::{self, Action, OpsError};

/// What the core refused, to show the operator.
#[derive(Debug, Clone)]
pub struct PageRefusal {
    pub status: StatusCode,
    pub code: String,
    pub detail: String,
}

impl std::fmt::Display for PageRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.detail, self.code)
    }
}

impl PageRefusal {
    /// A form field the core would not accept (422 with the core's code), found before asking.
    pub fn invalid(code: &str, detail: impl Into<String>) -> Self {
        PageRefusal { status: StatusCode::UNPROCESSABLE_ENTITY, code: code.to_owned(), detail: detail.into() }
    }

    /// What the core answers for an id that names nothing.
    pub fn not_found() -> Self {
        ApiError::not_found().into()
    }

    /// The core could not answer; the operator is told nothing more (the cause is logged).
    pub fn internal() -> Self {
        PageRefusal {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal_error".into(),
            detail: "the request could not be completed".into(),
        }
    }
}

/// The core's own error, as the operator sees it: a problem's status, code and detail; an
/// internal error stays generic (its cause is logged where it happened).
impl From<ApiError> for PageRefusal {
    fn from(err: ApiError) -> Self {
        match err {
            ApiError::Problem(p) => PageRefusal {
                status: StatusCode::from_u16(p.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                code: p.code,
                detail: p.detail,
            },
            ApiError::Internal(err) => {
                tracing::error!(error = format!("{err:#}"), "internal error");
                PageRefusal::internal()
            }
        }
    }
}

impl From<OpsError> for PageRefusal {
    fn from(err: OpsError) -> Self {
        ApiError::from(err).into()
    }
}

// ---------------------------------------------------------------------------------------------
// The operations

/// The overview page's numbers.
pub async fn overview(state: &AppState, session: &Session) -> Result<Overview, PageRefusal> {
    Ok(ops::overview::overview(&state.ops(), &session.operator).await?)
}

/// The breakers' kill switch (admin).
pub async fn switch_breaker(
    state: &AppState,
    session: &Session,
    name: &str,
    action: ops::types::BreakerAction,
    request: ReasonRequest,
) -> Result<crate::ops::types::BreakerChanged, PageRefusal> {
    Ok(ops::overview::force_breaker(&state.ops(), &session.operator, name, action, request).await?)
}

/// The review queue: withdrawals in a state, oldest first.
pub async fn withdrawals(
    state: &AppState,
    session: &Session,
    query: &WithdrawalQuery,
) -> Result<Page<OpsWithdrawal>, PageRefusal> {
    Ok(ops::review::list(&state.ops(), &session.operator, query.clone()).await?)
}

/// One withdrawal with all its evidence.
pub async fn withdrawal(
    state: &AppState,
    session: &Session,
    id: WithdrawalId,
) -> Result<WithdrawalDetail, PageRefusal> {
    Ok(ops::review::show(&state.ops(), &session.operator, id).await?)
}

/// Resolves a withdrawal in review (or stores the decision for a second operator).
pub async fn resolve(
    state: &AppState,
    session: &Session,
    id: WithdrawalId,
    request: &ResolveRequest,
) -> Result<Resolved, PageRefusal> {
    Ok(ops::review::resolve(&state.ops(), &session.operator, id, request.clone()).await?)
}

/// Approves or rejects the decision waiting on a withdrawal.
pub async fn decide(
    state: &AppState,
    session: &Session,
    id: WithdrawalId,
    verdict: ApproveOrReject,
    request: &ReasonRequest,
) -> Result<DecisionResult, PageRefusal> {
    let (ops, operator, request) = (state.ops(), &session.operator, request.clone());
    Ok(match verdict {
        ApproveOrReject::Approve => ops::decisions::approve(&ops, operator, id, request).await?,
        ApproveOrReject::Reject => ops::decisions::reject(&ops, operator, id, request).await?,
    })
}

/// Open dead letters by category and error code.
pub async fn dead_letter_summary(state: &AppState, session: &Session) -> Result<List<DeadLetterGroup>, PageRefusal> {
    Ok(ops::dead_letters::summary(&state.ops(), &session.operator).await?)
}

/// Dead letters, newest first, filtered.
pub async fn dead_letters(
    state: &AppState,
    session: &Session,
    query: &DeadLetterQuery,
) -> Result<Page<DeadLetterView>, PageRefusal> {
    Ok(ops::dead_letters::list(&state.ops(), &session.operator, query.clone()).await?)
}

/// One dead letter with its history.
pub async fn dead_letter(state: &AppState, session: &Session, id: Uuid) -> Result<DeadLetterView, PageRefusal> {
    Ok(ops::dead_letters::show(&state.ops(), &session.operator, DeadLetterId(id)).await?)
}

/// Closes (archives) a dead letter.
pub async fn close_dead_letter(
    state: &AppState,
    session: &Session,
    id: Uuid,
    request: &ReasonRequest,
) -> Result<Closed, PageRefusal> {
    Ok(ops::dead_letters::close(&state.ops(), &session.operator, DeadLetterId(id), request.clone()).await?)
}

/// Replay runs, newest first, with their progress.
pub async fn replays(
    state: &AppState,
    session: &Session,
    query: &ReplayQuery,
) -> Result<List<ReplayRunView>, PageRefusal> {
    Ok(ops::replays::list(&state.ops(), &session.operator, query.clone()).await?)
}

/// One run with its progress and items.
pub async fn replay(state: &AppState, session: &Session, id: Uuid) -> Result<ReplayRunView, PageRefusal> {
    Ok(ops::replays::status(&state.ops(), &session.operator, ReplayRunId(id)).await?)
}

/// A dry run's report, or the new run.
pub async fn start_replay(state: &AppState, session: &Session, request: &StartReplay) -> Result<Started, PageRefusal> {
    Ok(ops::replays::start(&state.ops(), &session.operator, request.clone()).await?)
}

/// Pauses, resumes, cancels or approves a run.
pub async fn control_replay(
    state: &AppState,
    session: &Session,
    id: Uuid,
    action: ReplayControl,
    request: &ReasonRequest,
) -> Result<ReplayRunView, PageRefusal> {
    Ok(ops::replays::control(&state.ops(), &session.operator, ReplayRunId(id), action, request.clone()).await?)
}

/// Imported settlement report versions, newest first.
pub async fn settlement_reports(
    state: &AppState,
    session: &Session,
    query: &ReportQuery,
) -> Result<List<ReportView>, PageRefusal> {
    Ok(ops::settlement::reports(&state.ops(), &session.operator, query.clone()).await?)
}

/// The latest settlement imports with their progress, newest first.
pub async fn settlement_imports(
    state: &AppState,
    session: &Session,
    query: &crate::ops::types::ImportListQuery,
) -> Result<List<crate::ops::types::ImportView>, PageRefusal> {
    Ok(ops::settlement::imports(&state.ops(), &session.operator, query.clone()).await?)
}

/// Settlement exceptions by kind and status (open by default), oldest first.
pub async fn settlement_exceptions(
    state: &AppState,
    session: &Session,
    query: &ExceptionQuery,
) -> Result<Page<ExceptionView>, PageRefusal> {
    Ok(ops::settlement::exceptions(&state.ops(), &session.operator, query.clone()).await?)
}

/// One settlement exception with its evidence.
pub async fn settlement_exception(state: &AppState, session: &Session, id: Uuid) -> Result<ExceptionView, PageRefusal> {
    Ok(ops::settlement::exception(&state.ops(), &session.operator, SettlementExceptionId(id)).await?)
}

/// Resolves a settlement exception with the resolution a form names and a note. As over HTTP,
/// the role is checked (and its refusal audited) before the form's reason is read, so a viewer's
/// forged form is a 403 whatever it carries.
pub async fn resolve_settlement_exception(
    state: &AppState,
    session: &Session,
    id: Uuid,
    reason: &str,
    note: &str,
) -> Result<ExceptionView, PageRefusal> {
    let (ops, id) = (state.ops(), SettlementExceptionId(id));
    let Ok(reason) = reason.trim().parse::<Resolution>() else {
        ops.authorize(&session.operator, &SettlementExceptionResolve::ACT, &id.to_string()).await?;
        let names: Vec<&str> = Resolution::ALL.iter().map(|r| r.as_str()).collect();
        return Err(PageRefusal::invalid("invalid_body", format!("the reason is one of {}", names.join(", "))));
    };
    let request = ResolveExceptionRequest { reason, note: note.to_owned() };
    Ok(ops::settlement::resolve(&ops, &session.operator, id, request).await?)
}

/// Every account's webhook endpoints with their health, newest first.
pub async fn webhook_endpoints(
    state: &AppState,
    session: &Session,
    query: &WebhookEndpointQuery,
) -> Result<List<WebhookEndpointView>, PageRefusal> {
    Ok(ops::notifications::endpoints(&state.ops(), &session.operator, query.clone()).await?)
}

/// Customer notifications, newest first, by endpoint and status.
pub async fn notifications(
    state: &AppState,
    session: &Session,
    query: &NotificationQuery,
) -> Result<List<NotificationView>, PageRefusal> {
    Ok(ops::notifications::notifications(&state.ops(), &session.operator, query.clone()).await?)
}

/// One notification with its endpoint, event and attempts.
pub async fn notification(state: &AppState, session: &Session, id: Uuid) -> Result<NotificationDetail, PageRefusal> {
    Ok(ops::notifications::notification(&state.ops(), &session.operator, NotificationId(id)).await?)
}

/// Sends a notification again (operator; audited).
pub async fn redeliver_notification(
    state: &AppState,
    session: &Session,
    id: Uuid,
    request: &ReasonRequest,
) -> Result<Redelivered, PageRefusal> {
    Ok(ops::notifications::redeliver(&state.ops(), &session.operator, NotificationId(id), request.clone()).await?)
}

/// The audit log, newest first.
pub async fn audit(state: &AppState, session: &Session, query: &AuditQuery) -> Result<Page<AuditEntry>, PageRefusal> {
    Ok(ops::audit::list(&state.ops(), &session.operator, query.clone()).await?)
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
/// judges a query string: a value that does not parse, or holds text the text rule refuses (a
/// NUL, another control character), is a 422 `invalid_query`.
pub fn parse_query<Q: DeserializeOwned, S: AsRef<str>>(pairs: &[(&str, Option<S>)]) -> Result<Q, PageRefusal> {
    let text = serde_urlencoded::to_string(kept(pairs)).map_err(|_| PageRefusal::internal())?;
    crate::domain::input_text::check_query(&text).map_err(|e| PageRefusal::invalid("invalid_query", e.to_string()))?;
    serde_urlencoded::from_str(&text)
        .map_err(|err| PageRefusal::invalid("invalid_query", format!("Failed to deserialize query string: {err}")))
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
pub fn withdrawal_id(raw: &str) -> Result<WithdrawalId, PageRefusal> {
    raw.parse().map_err(|_| PageRefusal::not_found())
}

/// A path id as a UUID; one that is not names nothing (404, as the API answers).
pub fn uuid(raw: &str) -> Result<Uuid, PageRefusal> {
    Uuid::parse_str(raw).map_err(|_| PageRefusal::not_found())
}
