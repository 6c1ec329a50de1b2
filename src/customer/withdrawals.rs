//! The withdrawal resource's rules (SPEC §3): create under an idempotency key (its phases:
//! a new key, a replay, a reused key, a key still in progress, a claim taken over), read, list
//! with a cursor, cancel while pending.

use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::types::{CreateWithdrawalRequest, ListQuery, ReturnView, WithdrawalList, WithdrawalView};
use super::{Customers, ServiceError, ServiceResult};
use crate::domain::{
    check_reference, AccountId, Actor, Amount, AmountLimits, Currency, Destination, IdempotencyKey, Withdrawal,
    WithdrawalId, WithdrawalKey, WithdrawalStatus,
};
use crate::storage::batch::{Writes, Written};
use crate::storage::idempotency::{self, Begin};
use crate::storage::withdrawals::{self as store, NewWithdrawal, PageCursor, TransitionOutcome};
use crate::storage::DbTime;

/// The status a created withdrawal is answered with, and its replays too (SPEC §3).
const CREATED: u16 = 201;

/// Parse, don't validate: the request becomes domain values or a refusal naming the field.
/// Public for the fuzz targets (`fuzz/`), not an API of the crate.
#[doc(hidden)]
pub fn parse_request(body: &[u8], limits: &AmountLimits) -> ServiceResult<(Amount, Destination, Option<String>)> {
    let malformed = || ServiceError::malformed("malformed_json", "the request body is not valid JSON");
    let de = &mut serde_json::Deserializer::from_slice(body);
    let request: CreateWithdrawalRequest = serde_path_to_error::deserialize(&mut *de).map_err(|err| {
        let field = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            malformed()
        } else {
            let field = if field == "." { "body".to_owned() } else { field };
            ServiceError::invalid("invalid_field", &field, inner.to_string())
        }
    })?;
    // One JSON document and nothing after it (whitespace aside): `{…} x` is not JSON.
    de.end().map_err(|_| malformed())?;
    let currency =
        Currency::parse(&request.currency).map_err(|e| ServiceError::invalid(e.code(), "currency", e.to_string()))?;
    let amount = Amount::parse(&request.amount, currency, limits)
        .map_err(|e| ServiceError::invalid(e.code(), "amount", e.to_string()))?;
    let d = &request.destination;
    let destination = Destination::parse(&d.kind, &d.account_number, &d.bank_code)
        .map_err(|e| ServiceError::invalid("invalid_destination", e.field(), e.to_string()))?;
    // Trimmed of blank characters (spaces, no-break and ideographic spaces, line separators), not
    // of control characters: those are refused wherever they stand (trimming all whitespace
    // first let a trailing vertical tab or newline through, and a reference made of one became
    // "no reference"). A reference of blanks alone is none.
    let blank = |c: char| c.is_whitespace() && !c.is_control();
    let reference = request.reference.map(|r| r.trim_matches(blank).to_owned()).filter(|r| !r.is_empty());
    if let Some(r) = &reference {
        check_reference(r).map_err(|e| ServiceError::invalid("invalid_reference", "reference", e.to_string()))?;
    }
    Ok((amount, destination, reference))
}

/// The fingerprint of a request body as `POST /v1/withdrawals` computes it (tests and support
/// use it to reason about idempotency records); `None` if the body is not a valid request.
pub fn request_fingerprint(body: &serde_json::Value) -> Option<Vec<u8>> {
    let bytes = serde_json::to_vec(body).ok()?;
    let (amount, destination, reference) = parse_request(&bytes, &AmountLimits::default()).ok()?;
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

/// Who asks for a withdrawal: the account, and the request's correlation id (stored with it).
#[derive(Debug, Clone)]
pub struct Caller<'a> {
    pub account_id: AccountId,
    pub correlation_id: &'a str,
}

/// The answer to a create: the withdrawal it made now, or the stored answer of the request that
/// first used the key. Either way, `body` is the exact JSON the customer API sends.
#[derive(Debug)]
pub enum Created {
    New { withdrawal: Box<Withdrawal>, body: Vec<u8> },
    Replayed { status: u16, body: Vec<u8> },
}

/// `POST /v1/withdrawals`: holds the funds and enqueues the payout under `key`, or answers as the
/// key's first use did (SPEC §3). Nothing is committed unless the hold and the key's record both
/// apply; a claim that created nothing is given back, so the client can retry with the key.
pub async fn create(
    customers: &Customers<'_>,
    caller: &Caller<'_>,
    key: &IdempotencyKey,
    body: &[u8],
) -> ServiceResult<Created> {
    let config = customers.config;
    let (amount, destination, reference) = parse_request(body, &config.limits)?;
    let fingerprint = fingerprint(&amount, &destination, reference.as_deref());
    let new = NewWithdrawal {
        account_id: caller.account_id,
        amount,
        destination,
        reference,
        idempotency_key: key.as_str().to_owned(),
        correlation_id: caller.correlation_id.to_owned(),
        sandbox: config.sandbox,
    };

    // A new key, the common case: the record and the withdrawal in one transaction.
    if let Some(outcome) = create_with_new_key(customers, key, &fingerprint, &new).await? {
        return created(outcome);
    }
    // The key exists: replay, refuse, or take over an expired or abandoned one.
    let claim = match idempotency::begin(customers.db, caller.account_id, key, &fingerprint, config.idempotency).await?
    {
        Begin::Proceed(claim) => claim,
        Begin::Replay { status, body } => return Ok(Created::Replayed { status, body }),
        Begin::KeyReused => {
            return Err(ServiceError::invalid(
                "idempotency_key_reused",
                "Idempotency-Key",
                "this Idempotency-Key was already used with a different request body",
            ))
        }
        Begin::InProgress => return Err(in_progress()),
    };

    let outcome = create_under_claim(customers, key, claim, &new).await;
    if !matches!(outcome, Ok(CreateOutcome::Created(_))) {
        // Nothing committed: give the key back so the client can retry it.
        if let Err(err) = idempotency::release(customers.db, key, claim).await {
            tracing::warn!(error = format!("{:#}", anyhow::Error::from(err)), "could not release idempotency claim");
        }
    }
    created(outcome?)
}

/// The answer to a create that ran.
fn created(outcome: CreateOutcome) -> ServiceResult<Created> {
    match outcome {
        CreateOutcome::Created(created) => {
            let (withdrawal, body) = *created;
            tracing::info!(withdrawal_id = %withdrawal.id, amount = %withdrawal.amount, "withdrawal created");
            crate::metrics::withdrawal_created(withdrawal.amount.currency().code());
            Ok(Created::New { withdrawal: Box::new(withdrawal), body })
        }
        CreateOutcome::InsufficientFunds => Err(ServiceError::invalid(
            "insufficient_funds",
            "amount",
            "the available balance does not cover this withdrawal",
        )),
        CreateOutcome::ClaimLost => Err(in_progress()),
    }
}

fn in_progress() -> ServiceError {
    ServiceError::conflict(
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
    customers: &Customers<'_>,
    new: &NewWithdrawal,
    record: impl FnOnce(&mut Writes, WithdrawalId, &[u8]) -> Written,
) -> ServiceResult<Recording> {
    let withdrawal = store::prepare(new);
    let body = serde_json::to_vec(&WithdrawalView::from(&withdrawal)).map_err(anyhow::Error::from)?;
    let mut also = Writes::new();
    let recorded = record(&mut also, withdrawal.id, &body);
    let mut tx = customers.db.begin().await?;
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
    customers: &Customers<'_>,
    key: &IdempotencyKey,
    fingerprint: &[u8],
    new: &NewWithdrawal,
) -> ServiceResult<Option<CreateOutcome>> {
    let settings = customers.config.idempotency;
    let recording = create_recording(customers, new, |writes, id, body| {
        idempotency::insert_completed_in(writes, new.account_id, key, fingerprint, settings, CREATED, body, id)
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
    customers: &Customers<'_>,
    key: &IdempotencyKey,
    claim: idempotency::Claim,
    new: &NewWithdrawal,
) -> ServiceResult<CreateOutcome> {
    let recording = create_recording(customers, new, |writes, id, body| {
        idempotency::complete_in(writes, key, claim, CREATED, body, Some(id))
    })
    .await?;
    Ok(match recording {
        Recording::Created(created) => CreateOutcome::Created(created),
        Recording::RolledBack { held: false, .. } => CreateOutcome::InsufficientFunds,
        Recording::RolledBack { .. } => CreateOutcome::ClaimLost,
    })
}

fn parse_id(raw: &str) -> ServiceResult<WithdrawalId> {
    // A malformed id names no withdrawal: 404, like another account's.
    raw.parse().map_err(|_| ServiceError::not_found())
}

async fn get(customers: &Customers<'_>, account: AccountId, id: WithdrawalId) -> ServiceResult<Withdrawal> {
    store::get(customers.db, WithdrawalKey { account, id }).await?.ok_or_else(ServiceError::not_found)
}

/// `GET /v1/withdrawals/{id}`: the account's withdrawal, with its return when it had one.
pub async fn read(customers: &Customers<'_>, account: AccountId, id: &str) -> ServiceResult<WithdrawalView> {
    let withdrawal = get(customers, account, parse_id(id)?).await?;
    let mut view = WithdrawalView::from(&withdrawal);
    if withdrawal.status == WithdrawalStatus::Completed {
        view.returned = crate::storage::returns::for_withdrawal(customers.db, withdrawal.key())
            .await?
            .map(|r| ReturnView { returned_at: r.returned_at.0, return_code: r.return_code });
    }
    Ok(view)
}

const DEFAULT_PAGE: u32 = 20;
const MAX_PAGE: u32 = 100;

fn encode_cursor(w: &Withdrawal) -> String {
    hex::encode(format!("{}|{}", DbTime::from(w.created_at).0.timestamp_micros(), w.id))
}

/// The cursor still carries the creation time (cursors handed out before issue 29 stay valid);
/// the page is found by the id alone.
fn decode_cursor(raw: &str) -> Option<PageCursor> {
    let text = String::from_utf8(hex::decode(raw).ok()?).ok()?;
    let (micros, id) = text.split_once('|')?;
    DbTime::from_client_micros(micros.parse().ok()?)?;
    Some(PageCursor { id: Uuid::parse_str(id).ok()? })
}

/// `GET /v1/withdrawals`: the account's withdrawals, newest first, a page at a time.
pub async fn list(customers: &Customers<'_>, account: AccountId, query: &ListQuery) -> ServiceResult<WithdrawalList> {
    let status = query
        .status
        .as_deref()
        .map(str::parse::<WithdrawalStatus>)
        .transpose()
        .map_err(|e| ServiceError::invalid("invalid_status", "status", e.to_string()))?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ServiceError::invalid("invalid_limit", "limit", format!("limit must be 1 to {MAX_PAGE}")));
    }
    let cursor = query
        .cursor
        .as_deref()
        .map(|raw| {
            decode_cursor(raw).ok_or_else(|| ServiceError::invalid("invalid_cursor", "cursor", "unknown cursor"))
        })
        .transpose()?;
    let mut rows = store::list(customers.db, account, status, limit + 1, cursor).await?;
    let next_cursor = if rows.len() > limit as usize {
        rows.truncate(limit as usize);
        rows.last().map(encode_cursor)
    } else {
        None
    };
    Ok(WithdrawalList { data: rows.iter().map(WithdrawalView::from).collect(), next_cursor })
}

/// `POST /v1/withdrawals/{id}/cancel`: a pending withdrawal fails with `cancelled_by_customer`
/// and its funds are released; any other state is 409 `withdrawal_not_cancellable`.
pub async fn cancel(customers: &Customers<'_>, caller: &Caller<'_>, id: &str) -> ServiceResult<WithdrawalView> {
    let id = parse_id(id)?;
    let current = get(customers, caller.account_id, id).await?;
    let not_cancellable = |status: WithdrawalStatus| {
        ServiceError::conflict(
            "withdrawal_not_cancellable",
            format!("only a pending withdrawal can be cancelled; this one is {status}"),
        )
    };
    if current.status != WithdrawalStatus::Pending {
        return Err(not_cancellable(current.status));
    }
    let mut tx = customers.db.begin().await?;
    let request = store::TransitionRequest {
        key: current.key(),
        from: WithdrawalStatus::Pending,
        to: WithdrawalStatus::Failed,
        expected_version: None,
        actor: &Actor::Customer,
        reason: "cancelled by the customer",
        correlation_id: caller.correlation_id,
        failure_code: Some("cancelled_by_customer"),
        evidence: None,
    };
    match store::transition(&mut tx, &request).await? {
        TransitionOutcome::Applied(withdrawal) => {
            tx.commit().await?;
            Ok(WithdrawalView::from(withdrawal.as_ref()))
        }
        TransitionOutcome::Stale => {
            drop(tx);
            Err(not_cancellable(get(customers, caller.account_id, id).await?.status))
        }
        TransitionOutcome::Forbidden(err) => Err(ServiceError::Internal(err.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refusal::RefusalKind;

    const VALID: &str = r#"{"amount":"5","currency":"ILS","destination":{"type":"bank_account","account_number":" b29n01613 ","bank_code":"gb2l"}}"#;

    fn code(body: &[u8]) -> Option<String> {
        match parse_request(body, &AmountLimits::default()) {
            Ok(_) => None,
            Err(ServiceError::Refused(r)) => Some(format!("{:?} {}", r.kind, r.code)),
            Err(ServiceError::Internal(e)) => Some(format!("internal {e:#}")),
        }
    }

    /// Found by the `request_parsing` fuzz target (minimised): a valid request followed by
    /// more bytes was accepted (201) although the body is not JSON.
    #[test]
    fn trailing_bytes_after_the_request_are_malformed_json() {
        let malformed = Some(format!("{:?} malformed_json", RefusalKind::Malformed));
        assert_eq!(code(VALID.as_bytes()), None);
        assert_eq!(code(format!("{VALID} \n\t").as_bytes()), None, "trailing whitespace is still JSON");
        let fuzzed = [VALID.as_bytes(), b"A/\x1a"].concat();
        assert_eq!(code(&fuzzed), malformed);
        assert_eq!(code(format!("{VALID}{VALID}").as_bytes()), malformed);
        assert_eq!(code(format!("{VALID}}}").as_bytes()), malformed);
    }

    fn with_reference(reference: &str) -> Vec<u8> {
        let mut body: serde_json::Value = serde_json::from_str(VALID).unwrap();
        body["reference"] = serde_json::Value::from(reference);
        serde_json::to_vec(&body).unwrap()
    }

    /// Found by the ops text-input property test: a reference ending in a vertical tab was
    /// trimmed as whitespace and accepted. Blanks are trimmed; control characters never are.
    #[test]
    fn blanks_are_trimmed_from_a_reference_and_control_characters_refused_wherever_they_stand() {
        let reference = |text: &str| parse_request(&with_reference(text), &AmountLimits::default()).map(|r| r.2);
        assert_eq!(reference(" \u{a0}inv 1\u{3000}\u{2028}").unwrap().as_deref(), Some("inv 1"));
        assert_eq!(reference("\u{a0} \u{3000}").unwrap(), None, "blanks alone are no reference");
        let refused = format!("{:?} invalid_reference", RefusalKind::Invalid);
        for text in ["inv 1\u{b}", "\ninv 1", "\t", "inv\u{0}1", "\u{85}"] {
            assert_eq!(code(&with_reference(text)), Some(refused.clone()), "{text:?}");
        }
    }
}
