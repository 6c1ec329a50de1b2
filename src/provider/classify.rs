//! SPEC §4's classification table as functions: submit responses, transport errors, and the two reads
//! (lookup by key, get by id).
//! Tested row by row against a real HTTP server (wiremock) in `tests/api/provider.rs`.

use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;
use serde::Deserialize;

use super::{LookupOutcome, ProviderError, SubmitOutcome, Transfer};
use crate::domain::SideEffect;

fn error(code: impl Into<String>, status: Option<u16>, message: impl Into<String>) -> ProviderError {
    ProviderError { code: code.into(), http_status: status, message: message.into(), retry_after: None }
}

/// `Retry-After` as delay-seconds or an HTTP date (RFC 9110 §10.2.3).
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let delta = at.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(delta.to_std().unwrap_or(Duration::ZERO))
}

#[derive(Deserialize)]
struct ErrorBody {
    code: Option<String>,
}

fn body_code(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<ErrorBody>(body).ok().and_then(|b| b.code)
}

/// Classifies a complete HTTP response to `POST /v1/transfers`.
pub fn classify_response(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> SubmitOutcome {
    let code = status.as_u16();
    if status.is_success() {
        return match serde_json::from_slice::<Transfer>(body) {
            Ok(transfer) => SubmitOutcome::Accepted { transfer, http_status: code },
            // The provider answered yes, but we cannot read what it did: it may have paid.
            Err(err) => SubmitOutcome::Unknown(error("unparseable_success", Some(code), err.to_string())),
        };
    }
    let provider_code = body_code(body);
    let named = |fallback: &str| provider_code.clone().unwrap_or_else(|| fallback.to_owned());
    match code {
        429 | 503 => {
            let mut e = error(format!("http_{code}"), Some(code), format!("provider asked to retry later ({status})"));
            e.retry_after = retry_after(headers);
            SubmitOutcome::Retryable(e)
        }
        500 | 502 | 504 => SubmitOutcome::Unknown(error(
            format!("http_{code}"),
            Some(code),
            format!("provider failed after receiving the request ({status})"),
        )),
        400 | 422 => SubmitOutcome::Permanent {
            error: error(
                named(&format!("http_{code}")),
                Some(code),
                format!("provider rejected the request ({status})"),
            ),
            side_effect: SideEffect::Confirmed,
        },
        401 | 403 => SubmitOutcome::Permanent {
            error: error(
                "provider_credentials_rejected",
                Some(code),
                format!("provider refused our credentials ({status})"),
            ),
            side_effect: SideEffect::NotStarted,
        },
        409 => SubmitOutcome::IdempotencyConflict(error(
            "provider_idempotency_conflict",
            Some(code),
            "provider holds a different request under this idempotency key",
        )),
        // Anything else from a server we do not understand: the request reached it, so unknown.
        _ => SubmitOutcome::Unknown(error(
            format!("http_{code}"),
            Some(code),
            format!("unexpected provider status {status}"),
        )),
    }
}

/// Classifies a transport error: before the request left (connect, DNS, TLS) is retryable;
/// anything after it left (timeout, reset, broken body) is unknown.
pub fn classify_error(err: &reqwest::Error) -> SubmitOutcome {
    if err.is_connect() {
        return SubmitOutcome::Retryable(error("connect_failed", None, "could not connect to the provider"));
    }
    if err.is_builder() {
        return SubmitOutcome::Permanent {
            error: error("invalid_provider_request", None, "the provider request could not be built"),
            side_effect: SideEffect::NotStarted,
        };
    }
    if err.is_timeout() {
        return SubmitOutcome::Unknown(error("timeout_after_send", None, "the provider did not answer in time"));
    }
    SubmitOutcome::Unknown(error(
        "connection_lost_after_send",
        None,
        "the connection to the provider broke mid-request",
    ))
}

#[derive(Deserialize)]
struct TransferList {
    data: Vec<Transfer>,
}

/// Classifies a lookup response: only a readable 200 decides anything.
pub fn classify_lookup(status: StatusCode, body: &[u8]) -> LookupOutcome {
    if status == StatusCode::OK {
        match serde_json::from_slice::<TransferList>(body) {
            Ok(list) if list.data.is_empty() => LookupOutcome::NotFound,
            Ok(list) => LookupOutcome::Found(list.data),
            Err(err) => LookupOutcome::Unavailable(error("unparseable_lookup", Some(200), err.to_string())),
        }
    } else {
        let code = status.as_u16();
        LookupOutcome::Unavailable(error(format!("http_{code}"), Some(code), format!("lookup failed ({status})")))
    }
}

/// Classifies `GET /v1/transfers/{id}`: a readable 200 is the transfer, a 404 says there is no
/// such transfer, anything else could not be asked.
pub fn classify_get(status: StatusCode, body: &[u8]) -> LookupOutcome {
    match status {
        StatusCode::OK => match serde_json::from_slice::<Transfer>(body) {
            Ok(transfer) => LookupOutcome::Found(vec![transfer]),
            Err(err) => LookupOutcome::Unavailable(error("unparseable_transfer", Some(200), err.to_string())),
        },
        StatusCode::NOT_FOUND => LookupOutcome::NotFound,
        other => {
            let code = other.as_u16();
            LookupOutcome::Unavailable(error(format!("http_{code}"), Some(code), format!("get failed ({other})")))
        }
    }
}
