//! The provider's webhook (SPEC §15), free of HTTP: [`receive`] checks a request's signature and
//! timestamp against the configured secrets, reads the event, and stores it with the job that
//! decides on it (`jobs::webhook`), in one transaction — or refuses it, storing nothing. What
//! an event comes to is never decided here: an event is a trigger, and only the provider's own
//! record, read by that job, moves money.
//!
//! Refusals (400, nothing stored, the body never echoed): `webhook_signature_invalid` (no header,
//! a header that does not read, or no `v1` that verifies under any secret),
//! `webhook_timestamp_stale` (a valid signature made outside the tolerance), `webhook_malformed`
//! (a body over the limit, or a validly signed body that is not an event). An event id stored
//! before is answered as a duplicate and changes nothing; a type the service does not handle is
//! stored, decided `no_op` at once.

use std::time::Duration;

use provider_contract::webhook::{Event, EventType, SignatureHeader};
use secrecy::ExposeSecret;
use serde_json::Value;
use sqlx::types::Json;

use crate::config::WebhookSettings;
use crate::domain::{AccountId, WebhookEventId, WebhookResult, WithdrawalId};
use crate::jobs::ApplyWebhookEvent;
use crate::metrics::{self, WEBHOOK_TYPE_OTHER, WEBHOOK_TYPE_UNKNOWN};
use crate::refusal::{ServiceError, ServiceResult};
use crate::storage::webhooks::{self as store, EventRow};
use crate::storage::{jobs as job_store, withdrawals, Db, DbTime};

/// The longest provider event id kept (an id is unique; a longer one is refused as malformed).
pub const MAX_EVENT_ID_BYTES: usize = 255;

/// What a request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Receipt {
    /// Stored, its job enqueued.
    Accepted(WebhookEventId),
    /// Its event id was stored before: nothing changed.
    Duplicate,
    /// A type the service does not handle: stored, decided `no_op`.
    Ignored(WebhookEventId),
}

/// A request as the route hands it over.
pub struct Request<'a> {
    /// The `Provider-Signature` header, if any (as text).
    pub signature: Option<&'a str>,
    /// The request's headers as received, name → value ([`kept_headers`] decides what is stored).
    pub headers: Value,
    pub body: &'a [u8],
    pub correlation_id: &'a str,
    /// Who sent it (the peer, or the trusted proxy's `X-Forwarded-For`): logged with a refusal.
    pub source: &'a str,
}

/// The event fields read before anything is stored: its type may be one the service does not
/// handle, so it is read as text first.
#[derive(serde::Deserialize)]
struct Envelope {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    data: Value,
}

/// A body over `limit` bytes: refused `webhook_malformed` like any unreadable request (the route
/// refuses it before reading, from its `Content-Length` or as soon as it passes the limit).
pub fn too_large(source: &str, limit: usize) -> ServiceError {
    refuse(source, "malformed", "webhook_malformed", &format!("the body is over {limit} bytes"))
}

/// Refused: counted, logged with its source but without the body, and answered 400 with `code`.
fn refuse(source: &str, result: &'static str, code: &str, detail: &str) -> ServiceError {
    metrics::webhook_event(WEBHOOK_TYPE_UNKNOWN, result);
    tracing::warn!(code, detail, source, "provider webhook refused");
    ServiceError::malformed(code, detail)
}

/// Checks, stores and enqueues one provider event (see the module's doc). `now` is the
/// receiver's clock, the one the tolerance is measured on.
pub async fn receive(db: &Db, settings: &WebhookSettings, request: Request<'_>, now: DbTime) -> ServiceResult<Receipt> {
    if request.body.len() > settings.max_body_bytes {
        return Err(too_large(request.source, settings.max_body_bytes));
    }
    let invalid = "no valid signature for this body";
    let Some(header) = request.signature.and_then(|h| SignatureHeader::parse(h).ok()) else {
        return Err(refuse(request.source, "bad_signature", "webhook_signature_invalid", invalid));
    };
    let secrets: Vec<&str> = settings.secrets.iter().map(|s| s.expose_secret()).collect();
    if !header.verify(&secrets, request.body) {
        return Err(refuse(request.source, "bad_signature", "webhook_signature_invalid", invalid));
    }
    let skew = now.0.timestamp().abs_diff(header.timestamp);
    if Duration::from_secs(skew) > settings.tolerance {
        let detail = format!("the signature's timestamp is more than {} s from now", settings.tolerance.as_secs());
        return Err(refuse(request.source, "stale", "webhook_timestamp_stale", &detail));
    }
    let Ok(envelope) = serde_json::from_slice::<Envelope>(request.body) else {
        return Err(refuse(request.source, "malformed", "webhook_malformed", "the body is not a provider event"));
    };
    if envelope.id.is_empty() || envelope.id.len() > MAX_EVENT_ID_BYTES {
        let detail = format!("the event id must be 1 to {MAX_EVENT_ID_BYTES} bytes");
        return Err(refuse(request.source, "malformed", "webhook_malformed", &detail));
    }
    let Some(signed_at) = chrono::DateTime::from_timestamp(header.timestamp, 0) else {
        return Err(refuse(
            request.source,
            "malformed",
            "webhook_malformed",
            "the signature's timestamp is out of range",
        ));
    };
    // A handled type whose transfer this version cannot read (a new status, a missing amount) is
    // kept, as an unhandled type is, rather than refused and lost: the provider would retry it
    // in vain, and polling decides the withdrawal meanwhile.
    let readable = serde_json::from_slice::<Event<crate::provider::Transfer>>(request.body).is_ok();
    let kind = EventType::ALL.into_iter().find(|t| t.as_str() == envelope.kind).filter(|_| readable);
    let label = kind.map_or(WEBHOOK_TYPE_OTHER, EventType::as_str);
    let text = |field: &str| envelope.data.get(field).and_then(Value::as_str).map(str::to_owned);
    let operation_key = text("reference");
    // The key names the withdrawal, and through it the account the job runs in (read by id:
    // the event does not name the account).
    let withdrawal = match operation_key.as_deref().map(str::parse::<WithdrawalId>) {
        Some(Ok(id)) => withdrawals::find(db, id).await?,
        _ => None,
    };
    let id = WebhookEventId::new();
    let account = withdrawal.as_ref().map_or(AccountId::SYSTEM, |w| w.account_id);
    let mut row = EventRow {
        id,
        provider: crate::config::providers::DEFAULT_PROVIDER.to_owned(),
        event_id: envelope.id.clone(),
        event_type: envelope.kind.clone(),
        transfer_id: text("id"),
        operation_key,
        signed_at: DbTime(signed_at),
        received_at: now,
        headers: Json(kept_headers(&request.headers)),
        account_id: withdrawal.as_ref().map(|w| w.account_id),
        withdrawal_id: withdrawal.as_ref().map(|w| w.id),
        job_id: None,
        result: None,
        detail: None,
        provider_record: None,
        decided_at: None,
        correlation_id: request.correlation_id.to_owned(),
    };
    let mut tx = db.begin().await?;
    match kind {
        // Enqueued first, so the row names its job; a duplicate rolls both back.
        Some(_) => {
            let job = ApplyWebhookEvent { event: id }.job(account, request.correlation_id, now);
            row.job_id = Some(job_store::enqueue(&mut tx, &job).await?.id);
        }
        None => {
            row.result = Some(WebhookResult::NoOp);
            row.detail = Some(match EventType::ALL.iter().any(|t| t.as_str() == envelope.kind) {
                true => "its transfer cannot be read by this version".to_owned(),
                false => format!("type `{}` is not handled", envelope.kind),
            });
            row.decided_at = Some(now);
        }
    }
    if !store::insert(&mut tx, &row, request.body).await? {
        drop(tx);
        metrics::webhook_event(label, "duplicate");
        return Ok(Receipt::Duplicate);
    }
    let receipt = match kind {
        Some(_) => Receipt::Accepted(id),
        None => {
            tx.after_commit(move || metrics::webhook_event(WEBHOOK_TYPE_OTHER, "no_op"));
            Receipt::Ignored(id)
        }
    };
    tx.commit().await?;
    tracing::info!(event_id = %envelope.id, event_type = %envelope.kind, "provider webhook stored");
    Ok(receipt)
}

/// The headers as stored: without credentials and cookies, redacted like everything stored,
/// except the signature, which is kept exactly as received so the stored event can be verified
/// again against its body.
fn kept_headers(headers: &Value) -> Value {
    let mut kept = crate::redact::json(headers);
    if let Some(map) = kept.as_object_mut() {
        map.retain(|name, _| !matches!(name.as_str(), "authorization" | "cookie" | "proxy-authorization"));
    }
    let header = provider_contract::webhook::PROVIDER_SIGNATURE_HEADER.to_ascii_lowercase();
    if let (Some(map), Some(signature)) = (kept.as_object_mut(), headers.get(&header)) {
        map.insert(header, signature.clone());
    }
    kept
}
