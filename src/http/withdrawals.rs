//! The withdrawal resource (SPEC §3): create with an idempotency key, read, list, cancel.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::auth::Customer;
use super::correlation::CorrelationId;
use super::error::ApiError;
use super::input::ApiQuery;
use super::AppState;
use crate::domain::{
    check_reference, Actor, Amount, Currency, Destination, IdempotencyKey, Withdrawal, WithdrawalId, WithdrawalStatus,
};
use crate::storage::batch::{Writes, Written};
use crate::storage::idempotency::{self, Begin};
use crate::storage::withdrawals::{self as store, NewWithdrawal, PageCursor, TransitionOutcome};
use crate::storage::DbTime;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/withdrawals", post(create).get(list))
        .route("/v1/withdrawals/{id}", get(read))
        .route("/v1/withdrawals/{id}/cancel", post(cancel))
}

/// The body of `POST /v1/withdrawals`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWithdrawalRequest {
    /// Decimal string with at most the currency's minor-unit digits.
    #[schema(example = "125.50")]
    pub amount: String,
    #[schema(example = "USD")]
    pub currency: String,
    pub destination: DestinationInput,
    /// Free client text, at most 140 characters.
    pub reference: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DestinationInput {
    #[serde(rename = "type")]
    #[schema(example = "bank_account")]
    pub kind: String,
    #[schema(example = "12345678")]
    pub account_number: String,
    #[schema(example = "021000021")]
    pub bank_code: String,
}

/// A withdrawal as customers see it: the account number masked to its last four.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WithdrawalView {
    pub id: Uuid,
    pub status: WithdrawalStatus,
    #[schema(example = "125.50")]
    pub amount: String,
    pub currency: String,
    pub destination: DestinationView,
    pub reference: Option<String>,
    pub failure_code: Option<String>,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// True for a withdrawal made in sandbox mode: no real money is ever paid out for it.
    #[serde(default)]
    pub sandbox: bool,
    /// The bank returned the payout after the provider paid it (SPEC §14.3): the amount is back
    /// in `available`; the withdrawal stays `completed`. Absent when there was no return.
    #[serde(rename = "return", default, skip_serializing_if = "Option::is_none")]
    pub returned: Option<ReturnView>,
}

/// A returned payout, as the customer sees it.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReturnView {
    pub returned_at: DateTime<Utc>,
    /// The provider's (bank's) return code, e.g. `R01`.
    pub return_code: String,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DestinationView {
    #[serde(rename = "type")]
    pub kind: String,
    #[schema(example = "****5678")]
    pub account_number: String,
    pub bank_code: String,
}

#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WithdrawalList {
    pub data: Vec<WithdrawalView>,
    pub next_cursor: Option<String>,
}

impl From<&Withdrawal> for WithdrawalView {
    fn from(w: &Withdrawal) -> Self {
        let Destination::BankAccount { account_number, bank_code } = w.destination.masked();
        WithdrawalView {
            id: w.id.0,
            status: w.status,
            amount: w.amount.value().to_string(),
            currency: w.amount.currency().code().to_owned(),
            destination: DestinationView { kind: "bank_account".into(), account_number, bank_code },
            reference: w.reference.clone(),
            failure_code: w.failure_code.clone(),
            version: w.version,
            created_at: w.created_at,
            updated_at: w.updated_at,
            sandbox: w.sandbox,
            returned: None,
        }
    }
}

/// Parse, don't validate: the request becomes domain values or a 4xx naming the field.
/// Public for the fuzz targets (`fuzz/`), not an API of the crate.
#[doc(hidden)]
pub fn parse_request(
    body: &[u8],
    limits: &crate::domain::AmountLimits,
) -> Result<(Amount, Destination, Option<String>), ApiError> {
    let malformed = || ApiError::new(StatusCode::BAD_REQUEST, "malformed_json", "the request body is not valid JSON");
    let de = &mut serde_json::Deserializer::from_slice(body);
    let request: CreateWithdrawalRequest = serde_path_to_error::deserialize(&mut *de).map_err(|err| {
        let field = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            malformed()
        } else {
            let field = if field == "." { "body".to_owned() } else { field };
            ApiError::unprocessable("invalid_field", &field, inner.to_string())
        }
    })?;
    // One JSON document and nothing after it (whitespace aside): `{…} x` is not JSON.
    de.end().map_err(|_| malformed())?;
    let currency =
        Currency::parse(&request.currency).map_err(|e| ApiError::unprocessable(e.code(), "currency", e.to_string()))?;
    let amount = Amount::parse(&request.amount, currency, limits)
        .map_err(|e| ApiError::unprocessable(e.code(), "amount", e.to_string()))?;
    let d = &request.destination;
    let destination = Destination::parse(&d.kind, &d.account_number, &d.bank_code)
        .map_err(|e| ApiError::unprocessable("invalid_destination", e.field(), e.to_string()))?;
    let reference = request.reference.map(|r| r.trim().to_owned()).filter(|r| !r.is_empty());
    if let Some(r) = &reference {
        check_reference(r).map_err(|e| ApiError::unprocessable("invalid_reference", "reference", e.to_string()))?;
    }
    Ok((amount, destination, reference))
}

/// The fingerprint of a request body as `POST /v1/withdrawals` computes it (tests and support
/// use it to reason about idempotency records); `None` if the body is not a valid request.
pub fn request_fingerprint(body: &serde_json::Value) -> Option<Vec<u8>> {
    let bytes = serde_json::to_vec(body).ok()?;
    let (amount, destination, reference) = parse_request(&bytes, &crate::domain::AmountLimits::default()).ok()?;
    Some(fingerprint(&amount, &destination, reference.as_deref()))
}

/// Identifies "the same request" by meaning, not bytes: `"125.5"` and `"125.50"` are the same.
fn fingerprint(amount: &Amount, destination: &Destination, reference: Option<&str>) -> Vec<u8> {
    let canonical = serde_json::json!({
        "amount": amount.value().to_string(),
        "currency": amount.currency().code(),
        "destination": destination,
        "reference": reference,
    });
    Sha256::digest(canonical.to_string().as_bytes()).to_vec()
}

/// The `Idempotency-Key` header (SPEC §3): 400 `idempotency_key_missing` or `idempotency_key_invalid`.
/// Shared by every route that takes one (withdrawals, credits).
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<IdempotencyKey, ApiError> {
    let raw = headers.get("idempotency-key").ok_or_else(|| {
        ApiError::new(StatusCode::BAD_REQUEST, "idempotency_key_missing", "the Idempotency-Key header is required")
            .with_field("Idempotency-Key")
    })?;
    let raw = raw.to_str().map_err(|_| {
        ApiError::new(StatusCode::BAD_REQUEST, "idempotency_key_invalid", "the Idempotency-Key must be visible ASCII")
            .with_field("Idempotency-Key")
    })?;
    IdempotencyKey::parse(raw).map_err(|e| {
        ApiError::new(StatusCode::BAD_REQUEST, "idempotency_key_invalid", e.to_string()).with_field("Idempotency-Key")
    })
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[utoipa::path(post, path = "/v1/withdrawals", tag = "withdrawals", security(("api_key" = [])),
    request_body = CreateWithdrawalRequest,
    params(("Idempotency-Key" = String, Header, description = "1–255 visible ASCII characters; scoped to the account, kept at least 24 h")),
    responses(
        (status = 201, description = "Created; funds held", body = WithdrawalView),
        (status = 200, description = "Never; a replay repeats the stored status (201) with `Idempotent-Replayed: true`"),
        (status = 400, description = "idempotency_key_missing, idempotency_key_invalid, malformed_json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 401, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "idempotency_request_in_progress", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "idempotency_key_reused, insufficient_funds, or a field error", body = super::error::Problem, content_type = "application/problem+json"),
    ))]
#[tracing::instrument(skip_all, fields(account_id = %customer.account_id))]
pub async fn create(
    State(state): State<AppState>,
    customer: Customer,
    Extension(correlation): Extension<CorrelationId>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers)?;
    let body = body.map_err(|rejection| {
        ApiError::new(rejection.status(), "payload_too_large", "the request body is too large or unreadable")
    })?;
    let (amount, destination, reference) = parse_request(&body, &state.config().limits)?;
    let fingerprint = fingerprint(&amount, &destination, reference.as_deref());
    let db = state.db();
    let new = NewWithdrawal {
        account_id: customer.account_id,
        amount,
        destination,
        reference,
        idempotency_key: key.as_str().to_owned(),
        correlation_id: correlation.0.clone(),
        sandbox: state.config().sandbox,
    };

    // A new key, the common case: the record and the withdrawal in one transaction.
    if let Some(outcome) = create_with_new_key(&state, &key, &fingerprint, &new).await? {
        return created_response(outcome);
    }
    // The key exists: replay, refuse, or take over an expired or abandoned one.
    let claim =
        match idempotency::begin(db, customer.account_id, &key, &fingerprint, state.config().idempotency).await? {
            Begin::Proceed(claim) => claim,
            Begin::Replay { status, body } => {
                let status = StatusCode::from_u16(status).map_err(anyhow::Error::from)?;
                let mut response = json_response(status, body);
                response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
                return Ok(response);
            }
            Begin::KeyReused => {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "idempotency_key_reused",
                    "this Idempotency-Key was already used with a different request body",
                )
                .with_field("Idempotency-Key"))
            }
            Begin::InProgress => return Err(in_progress()),
        };

    let outcome = create_under_claim(&state, &key, claim, &new).await;
    if !matches!(outcome, Ok(CreateOutcome::Created(_))) {
        // Nothing committed: give the key back so the client can retry it.
        if let Err(err) = idempotency::release(db, &key, claim).await {
            tracing::warn!(error = format!("{:#}", anyhow::Error::from(err)), "could not release idempotency claim");
        }
    }
    created_response(outcome?)
}

/// The answer to a create that ran.
fn created_response(outcome: CreateOutcome) -> Result<Response, ApiError> {
    match outcome {
        CreateOutcome::Created(created) => {
            let (withdrawal, body) = *created;
            tracing::info!(withdrawal_id = %withdrawal.id, amount = %withdrawal.amount, "withdrawal created");
            crate::metrics::withdrawal_created(withdrawal.amount.currency().code());
            let mut response = json_response(StatusCode::CREATED, body);
            let location = format!("/v1/withdrawals/{}", withdrawal.id);
            if let Ok(value) = HeaderValue::from_str(&location) {
                response.headers_mut().insert(header::LOCATION, value);
            }
            Ok(response)
        }
        CreateOutcome::InsufficientFunds => Err(ApiError::unprocessable(
            "insufficient_funds",
            "amount",
            "the available balance does not cover this withdrawal",
        )),
        CreateOutcome::ClaimLost => Err(in_progress()),
    }
}

fn in_progress() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "idempotency_request_in_progress",
        "a request with this Idempotency-Key is still in progress; retry later",
    )
    .with_field("Idempotency-Key")
}

enum CreateOutcome {
    Created(Box<(Withdrawal, Vec<u8>)>),
    InsufficientFunds,
    ClaimLost,
}

/// What [`create_recording`] did: committed the withdrawal, or rolled back because the hold or
/// the key's write did not apply (each caller decides which of the two answers first).
enum Recording {
    Created(Box<(Withdrawal, Vec<u8>)>),
    RolledBack { held: bool, recorded: bool },
}

/// Hold, insert, enqueue and record the key with its response — `record` adds the key's write —
/// in one transaction (one statement on PostgreSQL), committed only if both the hold and the
/// key's write applied.
async fn create_recording(
    state: &AppState,
    new: &NewWithdrawal,
    record: impl FnOnce(&mut Writes, WithdrawalId, &[u8]) -> Written,
) -> Result<Recording, ApiError> {
    let withdrawal = store::prepare(new);
    let body = serde_json::to_vec(&WithdrawalView::from(&withdrawal)).map_err(anyhow::Error::from)?;
    let mut also = Writes::new();
    let recorded = record(&mut also, withdrawal.id, &body);
    let mut tx = state.db().begin().await?;
    let (counts, held) = store::create(&mut tx, &withdrawal, also).await?;
    let (held, recorded) = (held.is_ok(), counts.applied(recorded));
    if !(held && recorded) {
        return Ok(Recording::RolledBack { held, recorded });
    }
    tx.commit().await?;
    Ok(Recording::Created(Box::new((withdrawal, body))))
}

/// A new key: its record is inserted `completed` with the response by the creation's own
/// statement. `None` when the key already exists (nothing committed).
async fn create_with_new_key(
    state: &AppState,
    key: &IdempotencyKey,
    fingerprint: &[u8],
    new: &NewWithdrawal,
) -> Result<Option<CreateOutcome>, ApiError> {
    let settings = state.config().idempotency;
    let recording = create_recording(state, new, |writes, id, body| {
        let created = StatusCode::CREATED.as_u16();
        idempotency::insert_completed_in(writes, new.account_id, key, fingerprint, settings, created, body, id)
    })
    .await?;
    Ok(match recording {
        Recording::Created(created) => Some(CreateOutcome::Created(created)),
        // A known key is decided by its record (a replay, say), never by this attempt's balance.
        Recording::RolledBack { recorded: false, .. } => None,
        Recording::RolledBack { .. } => Some(CreateOutcome::InsufficientFunds),
    })
}

/// Phase two: the creation under the claim, which stores the response — fenced by the claim.
async fn create_under_claim(
    state: &AppState,
    key: &IdempotencyKey,
    claim: idempotency::Claim,
    new: &NewWithdrawal,
) -> Result<CreateOutcome, ApiError> {
    let recording = create_recording(state, new, |writes, id, body| {
        idempotency::complete_in(writes, key, claim, StatusCode::CREATED.as_u16(), body, Some(id))
    })
    .await?;
    Ok(match recording {
        Recording::Created(created) => CreateOutcome::Created(created),
        Recording::RolledBack { held: false, .. } => CreateOutcome::InsufficientFunds,
        Recording::RolledBack { .. } => CreateOutcome::ClaimLost,
    })
}

fn parse_id(raw: &str) -> Result<WithdrawalId, ApiError> {
    // A malformed id names no withdrawal: 404, like another account's.
    raw.parse().map_err(|_| ApiError::not_found())
}

#[utoipa::path(get, path = "/v1/withdrawals/{id}", tag = "withdrawals", security(("api_key" = [])),
    params(("id" = Uuid, Path)),
    responses(
        (status = 200, body = WithdrawalView),
        (status = 401, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such withdrawal for this account", body = super::error::Problem, content_type = "application/problem+json"),
    ))]
pub async fn read(
    State(state): State<AppState>,
    customer: Customer,
    Path(id): Path<String>,
) -> Result<Json<WithdrawalView>, ApiError> {
    let id = parse_id(&id)?;
    let withdrawal = store::get(state.db(), Some(customer.account_id), id).await?.ok_or_else(ApiError::not_found)?;
    let mut view = WithdrawalView::from(&withdrawal);
    if withdrawal.status == WithdrawalStatus::Completed {
        view.returned = crate::storage::returns::for_withdrawal(state.db(), withdrawal.id)
            .await?
            .map(|r| ReturnView { returned_at: r.returned_at.0, return_code: r.return_code });
    }
    Ok(Json(view))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only withdrawals in this status.
    pub status: Option<String>,
    /// Page size, 1–100 (default 20).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// `next_cursor` from the previous page.
    pub cursor: Option<String>,
}

const DEFAULT_PAGE: u32 = 20;
const MAX_PAGE: u32 = 100;

fn encode_cursor(w: &Withdrawal) -> String {
    hex::encode(format!("{}|{}", DbTime::from(w.created_at).0.timestamp_micros(), w.id))
}

fn decode_cursor(raw: &str) -> Option<PageCursor> {
    let text = String::from_utf8(hex::decode(raw).ok()?).ok()?;
    let (micros, id) = text.split_once('|')?;
    let created_at = DbTime::from_client_micros(micros.parse().ok()?)?;
    Some(PageCursor { created_at, id: Uuid::parse_str(id).ok()? })
}

#[utoipa::path(get, path = "/v1/withdrawals", tag = "withdrawals", security(("api_key" = [])),
    params(ListQuery),
    responses(
        (status = 200, description = "Newest first", body = WithdrawalList),
        (status = 401, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "invalid_query, invalid_status, invalid_limit, invalid_cursor", body = super::error::Problem, content_type = "application/problem+json"),
    ))]
pub async fn list(
    State(state): State<AppState>,
    customer: Customer,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<WithdrawalList>, ApiError> {
    let status = query
        .status
        .as_deref()
        .map(str::parse::<WithdrawalStatus>)
        .transpose()
        .map_err(|e| ApiError::unprocessable("invalid_status", "status", e.to_string()))?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::unprocessable("invalid_limit", "limit", format!("limit must be 1 to {MAX_PAGE}")));
    }
    let cursor = query
        .cursor
        .as_deref()
        .map(|raw| {
            decode_cursor(raw).ok_or_else(|| ApiError::unprocessable("invalid_cursor", "cursor", "unknown cursor"))
        })
        .transpose()?;
    let mut rows = store::list(state.db(), customer.account_id, status, limit + 1, cursor).await?;
    let next_cursor = if rows.len() > limit as usize {
        rows.truncate(limit as usize);
        rows.last().map(encode_cursor)
    } else {
        None
    };
    Ok(Json(WithdrawalList { data: rows.iter().map(WithdrawalView::from).collect(), next_cursor }))
}

#[utoipa::path(post, path = "/v1/withdrawals/{id}/cancel", tag = "withdrawals", security(("api_key" = [])),
    params(("id" = Uuid, Path)),
    responses(
        (status = 200, description = "Cancelled: status failed, funds released", body = WithdrawalView),
        (status = 401, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "withdrawal_not_cancellable: no longer pending", body = super::error::Problem, content_type = "application/problem+json"),
    ))]
#[tracing::instrument(skip_all, fields(account_id = %customer.account_id, withdrawal_id = %id))]
pub async fn cancel(
    State(state): State<AppState>,
    customer: Customer,
    Extension(correlation): Extension<CorrelationId>,
    Path(id): Path<String>,
) -> Result<Json<WithdrawalView>, ApiError> {
    let id = parse_id(&id)?;
    let current = store::get(state.db(), Some(customer.account_id), id).await?.ok_or_else(ApiError::not_found)?;
    let not_cancellable = |status: WithdrawalStatus| {
        ApiError::new(
            StatusCode::CONFLICT,
            "withdrawal_not_cancellable",
            format!("only a pending withdrawal can be cancelled; this one is {status}"),
        )
    };
    if current.status != WithdrawalStatus::Pending {
        return Err(not_cancellable(current.status));
    }
    let mut tx = state.db().begin().await?;
    let request = store::TransitionRequest {
        id,
        from: WithdrawalStatus::Pending,
        to: WithdrawalStatus::Failed,
        expected_version: None,
        actor: &Actor::Customer,
        reason: "cancelled by the customer",
        correlation_id: &correlation.0,
        failure_code: Some("cancelled_by_customer"),
        evidence: None,
    };
    match store::transition(&mut tx, &request).await? {
        TransitionOutcome::Applied(withdrawal) => {
            crate::metrics::transition_on_commit(&mut tx, request.from, request.to);
            tx.commit().await?;
            Ok(Json(WithdrawalView::from(withdrawal.as_ref())))
        }
        TransitionOutcome::Stale => {
            drop(tx);
            let now = store::get(state.db(), Some(customer.account_id), id).await?.ok_or_else(ApiError::not_found)?;
            Err(not_cancellable(now.status))
        }
        TransitionOutcome::Forbidden(err) => Err(ApiError::Internal(err.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::AmountLimits;

    const VALID: &str = r#"{"amount":"5","currency":"ILS","destination":{"type":"bank_account","account_number":" b29n01613 ","bank_code":"gb2l"}}"#;

    fn code(body: &[u8]) -> Option<String> {
        match parse_request(body, &AmountLimits::default()) {
            Ok(_) => None,
            Err(ApiError::Problem(p)) => Some(format!("{} {}", p.status, p.code)),
            Err(ApiError::Internal(e)) => Some(format!("internal {e:#}")),
        }
    }

    /// Found by the `request_parsing` fuzz target (minimised): a valid request followed by
    /// more bytes was accepted (201) although the body is not JSON.
    #[test]
    fn trailing_bytes_after_the_request_are_malformed_json() {
        assert_eq!(code(VALID.as_bytes()), None);
        assert_eq!(code(format!("{VALID} \n\t").as_bytes()), None, "trailing whitespace is still JSON");
        let fuzzed = [VALID.as_bytes(), b"A/\x1a"].concat();
        assert_eq!(code(&fuzzed).as_deref(), Some("400 malformed_json"));
        assert_eq!(code(format!("{VALID}{VALID}").as_bytes()).as_deref(), Some("400 malformed_json"));
        assert_eq!(code(format!("{VALID}}}").as_bytes()).as_deref(), Some("400 malformed_json"));
    }
}
