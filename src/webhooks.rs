//! The providers' webhooks (SPEC §15, §16), free of HTTP: [`endpoint`] says which provider a
//! route is and which secrets sign its events (each provider's own: one provider's signature never
//! passes for another's event); [`receive`] checks a request's signature and timestamp against
//! those secrets, reads the event, and stores it under that provider with the job that decides on
//! it (`jobs::webhook`, which asks that provider), in one transaction — or refuses it, storing
//! nothing. What an event comes to is never decided here: an event is a trigger, and only the
//! provider's own record, read by that job, moves money.
//!
//! Refusals (400, nothing stored, the body never echoed): `webhook_signature_invalid` (no header,
//! a header that does not read, or no `v1` that verifies under any of the provider's secrets),
//! `webhook_timestamp_stale` (a valid signature made outside the tolerance), `webhook_malformed`
//! (a body over the limit, or a validly signed body that is not an event). An event id the same
//! provider sent before is answered as a duplicate and changes nothing (ids are the provider's:
//! two providers may use one); a type the service does not handle is stored, decided `no_op` at
//! once. Every answer is counted under the route's provider, a configured name: a request to a
//! name that is not one never gets here (404), so it adds no label value.

use std::time::Duration;

use provider_contract::webhook::{Event, EventType, SignatureHeader};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use sqlx::types::Json;

use crate::config::providers::{Providers, DEFAULT_PROVIDER};
use crate::config::{AppConfig, WebhookSettings};
use crate::domain::{AccountId, WebhookEventId, WebhookResult, WithdrawalId};
use crate::jobs::ApplyWebhookEvent;
use crate::metrics::{self, WEBHOOK_TYPE_OTHER, WEBHOOK_TYPE_UNKNOWN};
use crate::refusal::{ServiceError, ServiceResult};
use crate::storage::webhooks::{self as store, EventRow};
use crate::storage::{jobs as job_store, withdrawals, Db, DbTime};

/// The longest provider event id kept (an id is unique per provider; a longer one is refused as
/// malformed).
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

/// One provider's webhook route, as served: the provider its events are stored and counted
/// under, and the secrets its signatures are checked against (never empty).
#[derive(Debug, Clone, Copy)]
pub struct Endpoint<'a> {
    pub provider: &'a str,
    pub secrets: &'a [SecretString],
}

/// The route of the provider called `name` (`None`: the bare `/webhooks/provider`, `default`'s),
/// when it is served. Without a providers file the one provider is `default`, signed with
/// `PROVIDER_WEBHOOK_SECRET`; with one, each provider signs with its own secrets (its
/// `webhook_secrets_env`) and the bare route is the provider called `default`, if there is one.
/// **Choice:** `PROVIDER_WEBHOOK_SECRET` is no fallback for a file's provider without secrets:
/// a secret shared by two providers would let one's signature pass for the other's event. An
/// unknown name and a provider without secrets both come to `None` (404), which does not say
/// which names exist.
pub fn endpoint<'a>(config: &'a AppConfig, name: Option<&str>) -> Option<Endpoint<'a>> {
    endpoint_in(&config.webhooks, config.providers.as_ref(), name)
}

fn endpoint_in<'a>(
    settings: &'a WebhookSettings,
    providers: Option<&'a Providers>,
    name: Option<&str>,
) -> Option<Endpoint<'a>> {
    let name = name.unwrap_or(DEFAULT_PROVIDER);
    let (provider, secrets) = match providers {
        None => (name == DEFAULT_PROVIDER).then_some((DEFAULT_PROVIDER, settings.secrets.as_slice()))?,
        Some(file) => file.get(name).map(|p| (p.name.as_str(), p.webhook_secrets.as_slice()))?,
    };
    (!secrets.is_empty()).then_some(Endpoint { provider, secrets })
}

/// Every provider whose webhook series this configuration exports (from zero, when the routes are
/// built): the file's providers, or `default`. A closed set, so the label stays bounded.
pub fn providers(config: &AppConfig) -> Vec<&str> {
    match &config.providers {
        None => vec![DEFAULT_PROVIDER],
        Some(file) => file.all().iter().map(|p| p.name.as_str()).collect(),
    }
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

/// A body over `limit` bytes at `provider`'s route: refused `webhook_malformed` like any
/// unreadable request (the route refuses it before reading, from its `Content-Length` or as soon
/// as it passes the limit).
pub fn too_large(provider: &str, source: &str, limit: usize) -> ServiceError {
    refuse(provider, source, "malformed", "webhook_malformed", &format!("the body is over {limit} bytes"))
}

/// Refused at `provider`'s route: counted, logged with its source but without the body, and
/// answered 400 with `code`.
fn refuse(provider: &str, source: &str, result: &'static str, code: &str, detail: &str) -> ServiceError {
    metrics::webhook_event(provider, WEBHOOK_TYPE_UNKNOWN, result);
    tracing::warn!(code, detail, source, provider, "provider webhook refused");
    ServiceError::malformed(code, detail)
}

/// Checks, stores and enqueues one event at `endpoint`'s route (see the module's doc). `now` is
/// the receiver's clock, the one the tolerance is measured on.
pub async fn receive(
    db: &Db,
    settings: &WebhookSettings,
    endpoint: Endpoint<'_>,
    request: Request<'_>,
    now: DbTime,
) -> ServiceResult<Receipt> {
    let provider = endpoint.provider;
    let refused =
        |result: &'static str, code: &str, detail: &str| refuse(provider, request.source, result, code, detail);
    if request.body.len() > settings.max_body_bytes {
        return Err(too_large(provider, request.source, settings.max_body_bytes));
    }
    let invalid = "no valid signature for this body";
    let Some(header) = request.signature.and_then(|h| SignatureHeader::parse(h).ok()) else {
        return Err(refused("bad_signature", "webhook_signature_invalid", invalid));
    };
    let secrets: Vec<&str> = endpoint.secrets.iter().map(|s| s.expose_secret()).collect();
    if !header.verify(&secrets, request.body) {
        return Err(refused("bad_signature", "webhook_signature_invalid", invalid));
    }
    let skew = now.0.timestamp().abs_diff(header.timestamp);
    if Duration::from_secs(skew) > settings.tolerance {
        let detail = format!("the signature's timestamp is more than {} s from now", settings.tolerance.as_secs());
        return Err(refused("stale", "webhook_timestamp_stale", &detail));
    }
    let Ok(envelope) = serde_json::from_slice::<Envelope>(request.body) else {
        return Err(refused("malformed", "webhook_malformed", "the body is not a provider event"));
    };
    if envelope.id.is_empty() || envelope.id.len() > MAX_EVENT_ID_BYTES {
        let detail = format!("the event id must be 1 to {MAX_EVENT_ID_BYTES} bytes");
        return Err(refused("malformed", "webhook_malformed", &detail));
    }
    let Some(signed_at) = chrono::DateTime::from_timestamp(header.timestamp, 0) else {
        return Err(refused("malformed", "webhook_malformed", "the signature's timestamp is out of range"));
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
        provider: provider.to_owned(),
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
        metrics::webhook_event(provider, label, "duplicate");
        return Ok(Receipt::Duplicate);
    }
    let receipt = match kind {
        Some(_) => Receipt::Accepted(id),
        None => {
            let provider = provider.to_owned();
            tx.after_commit(move || metrics::webhook_event(&provider, WEBHOOK_TYPE_OTHER, "no_op"));
            Receipt::Ignored(id)
        }
    };
    tx.commit().await?;
    tracing::info!(event_id = %envelope.id, event_type = %envelope.kind, provider, "provider webhook stored");
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

#[cfg(test)]
mod tests {
    use super::*;

    /// (provider, its secrets joined) of the route `name` names, if it is served.
    fn route(settings: &WebhookSettings, file: Option<&Providers>, name: Option<&str>) -> Option<(String, String)> {
        endpoint_in(settings, file, name).map(|e| {
            let secrets: Vec<&str> = e.secrets.iter().map(|s| s.expose_secret()).collect();
            (e.provider.to_owned(), secrets.join(","))
        })
    }

    #[test]
    fn each_provider_has_its_own_route_and_secrets_and_the_bare_route_is_defaults() {
        let lone = WebhookSettings { secrets: WebhookSettings::secrets_from("whsec_lone"), ..Default::default() };
        let lone_route = Some(("default".to_owned(), "whsec_lone".to_owned()));
        assert_eq!(route(&lone, None, None), lone_route, "the bare route");
        assert_eq!(route(&lone, None, Some("default")), lone_route, "the same route by name");
        assert_eq!(route(&lone, None, Some("acme")), None);
        assert_eq!(route(&WebhookSettings::default(), None, None), None, "no secret: no route");

        let file = r#"{"providers": [
          {"name": "acme", "url": "https://a.example", "currencies": ["USD"], "priority": 1,
           "webhook_secrets_env": "ACME"},
          {"name": "bolt", "url": "https://b.example", "currencies": ["USD"], "priority": 2,
           "webhook_secrets_env": "BOLT"},
          {"name": "cash", "url": "https://c.example", "currencies": ["USD"], "priority": 3}
        ]}"#;
        let env = |name: &str| match name {
            "ACME" => Some("whsec_acme".to_owned()),
            "BOLT" => Some("whsec_bolt_old,whsec_bolt".to_owned()),
            _ => None,
        };
        let file = Providers::parse(file, false, &env).unwrap();
        let bolt = Some(("bolt".to_owned(), "whsec_bolt_old,whsec_bolt".to_owned()));
        assert_eq!(route(&lone, Some(&file), Some("bolt")), bolt, "bolt's own secrets");
        assert_eq!(route(&lone, Some(&file), Some("acme")).unwrap().1, "whsec_acme");
        assert_eq!(route(&lone, Some(&file), Some("cash")), None, "a provider without secrets has no route");
        assert_eq!(route(&lone, Some(&file), Some("nope")), None, "an unknown name");
        assert_eq!(route(&lone, Some(&file), None), None, "no provider is called default");
        assert_eq!(route(&lone, Some(&file), Some("default")), None, "PROVIDER_WEBHOOK_SECRET is no fallback");
        let config = AppConfig { providers: Some(file), ..AppConfig::default() };
        assert_eq!(providers(&config), ["acme", "bolt", "cash"]);
        assert_eq!(providers(&AppConfig::default()), ["default"]);

        let named_default = r#"{"providers": [{"name": "default", "url": "https://d.example",
          "currencies": ["USD"], "priority": 1, "webhook_secrets_env": "ACME"}]}"#;
        let named_default = Providers::parse(named_default, false, &env).unwrap();
        let expected = Some(("default".to_owned(), "whsec_acme".to_owned()));
        assert_eq!(route(&lone, Some(&named_default), None), expected, "the file's `default`, with its secrets");
    }
}
