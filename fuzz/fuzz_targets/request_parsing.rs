//! Fuzzes the parsing and validation of `POST /v1/withdrawals` and the domain parsers it uses.
//!
//! The input is used twice:
//! 1. as the raw request body for `customer::withdrawals::parse_request`, with the service's default
//!    limits (`AppConfig::default().limits`, as `create` passes `&state.config().limits`);
//! 2. as text (lossy UTF-8): the whole text, and its lines taken as
//!    `currency`, `amount`, `type`, `account_number`, `bank_code`, `Idempotency-Key`, go through
//!    `Currency::parse`, `Amount::parse` (also in USD, JPY, KWD and CLF: 2, 0, 3 and 4 decimals),
//!    `Destination::parse` and `IdempotencyKey::parse`.
//!
//! Invariants:
//! - nothing panics;
//! - `parse_request` fails only with a client problem: 400 `malformed_json` or a 422 with one of
//!   the documented field codes and a `field`; never an internal error;
//! - an accepted amount is positive, has no more decimal places than its currency's minor unit
//!   (neither as a value nor in the literal the client sent), is within the limit, converts to
//!   and from integer minor units exactly, and re-parses from its canonical string to itself;
//! - an accepted destination is upper-case alphanumeric within the documented lengths, re-parses
//!   to itself, and its `Debug` form does not show the account number;
//! - an accepted reference is trimmed, non-empty, at most 140 characters, without controls;
//! - an accepted body is one JSON document (a body that is not JSON is 400 `malformed_json`);
//! - the canonical form of an accepted request parses back to the same values, and has the same
//!   idempotency fingerprint as the body that was sent ("same body" means the same request);
//! - an accepted idempotency key is 1–255 visible ASCII characters and round-trips through the
//!   structured-field quoted form.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use withdrawals::config::AppConfig;
use withdrawals::domain::{Amount, AmountLimits, Currency, Destination, IdempotencyKey};
use withdrawals::customer::withdrawals::{parse_request, request_fingerprint};
use withdrawals::refusal::{RefusalKind, ServiceError};

static LIMITS: LazyLock<AmountLimits> = LazyLock::new(|| AppConfig::default().limits);

/// Currencies every amount string is also tried in: 2, 0, 3 and 4 decimal places.
static CURRENCIES: LazyLock<Vec<Currency>> = LazyLock::new(|| {
    ["USD", "JPY", "KWD", "CLF"].iter().map(|code| Currency::parse(code).expect("a known currency")).collect()
});

/// The 422 codes `parse_request` may answer with (README, "Errors").
const FIELD_CODES: &[&str] = &[
    "invalid_field",
    "unsupported_currency",
    "invalid_amount",
    "amount_not_positive",
    "amount_too_precise",
    "amount_over_limit",
    "invalid_destination",
    "invalid_reference",
];

fuzz_target!(|data: &[u8]| {
    check_request(data, &LIMITS);

    let text = String::from_utf8_lossy(data);
    let lines: Vec<&str> = text.split('\n').collect();
    let field = |i: usize| lines.get(i).copied().unwrap_or(&text);
    check_currency(&text);
    check_currency(field(0));
    for raw in [&*text, field(1)] {
        check_amount_string(raw, Currency::parse(field(0)).ok());
    }
    check_destination_parts(field(2), field(3), field(4));
    check_destination_parts("bank_account", field(3), field(4));
    check_destination_parts("bank_account", &text, &text);
    check_idempotency_key(&text);
    check_idempotency_key(field(5));
});

fn check_request(body: &[u8], limits: &AmountLimits) {
    match parse_request(body, limits) {
        Ok((amount, destination, reference)) => {
            check_amount(&amount, limits);
            check_destination(&destination);
            if let Some(r) = &reference {
                assert!(!r.is_empty() && r.trim() == r, "reference not trimmed: {r:?}");
                assert!(r.chars().count() <= 140, "reference too long: {}", r.chars().count());
                assert!(!r.chars().any(char::is_control), "reference with a control character: {r:?}");
            }

            // The canonical form of the request parses back to the same values.
            let Destination::BankAccount { account_number, bank_code } = &destination;
            let canonical = serde_json::json!({
                "amount": amount.value().to_string(),
                "currency": amount.currency().code(),
                "destination": {"type": "bank_account", "account_number": account_number, "bank_code": bank_code},
                "reference": reference,
            });
            let again = parse_request(canonical.to_string().as_bytes(), limits)
                .unwrap_or_else(|e| panic!("the canonical form {canonical} does not parse: {e:?}"));
            assert_eq!(again, (amount, destination, reference), "canonical form {canonical}");

            // Only a JSON document is a request (anything else is 400 malformed_json), and "same
            // body" means the same request: its fingerprint is the canonical form's.
            let sent: serde_json::Value = serde_json::from_slice(body).unwrap_or_else(|e| {
                panic!("accepted a body that is not JSON ({e}): {:?}", String::from_utf8_lossy(body))
            });
            let expected = request_fingerprint(&canonical).expect("the canonical form has a fingerprint");
            assert_eq!(request_fingerprint(&sent), Some(expected), "fingerprint of {sent} differs from {canonical}");
        }
        Err(ServiceError::Refused(refusal)) => match refusal.kind {
            RefusalKind::Malformed => assert_eq!(refusal.code, "malformed_json", "{refusal:?}"),
            RefusalKind::Invalid => {
                assert!(FIELD_CODES.contains(&refusal.code.as_str()), "undocumented code: {refusal:?}");
                // The field may be "" when the member at fault is named "" (`{"": 1, …}`).
                assert!(refusal.field.is_some(), "422 without a field: {refusal:?}");
            }
            _ => panic!("parse_request answered with a {:?} refusal: {refusal:?}", refusal.kind),
        },
        Err(ServiceError::Internal(err)) => panic!("parse_request returned an internal error: {err:#}"),
    }
}

/// What every accepted amount must satisfy.
fn check_amount(amount: &Amount, limits: &AmountLimits) {
    let value = amount.value();
    let currency = amount.currency();
    assert!(value.is_sign_positive() && !value.is_zero(), "not positive: {value}");
    assert!(value.scale() <= currency.minor_units(), "{value} has more decimals than {currency}");
    assert!(value <= limits.max_for(currency), "{value} {currency} over the limit");
    assert_eq!(Currency::parse(currency.code()), Ok(currency));

    let minor = amount.to_minor();
    assert!(minor > 0, "{value} {currency} has {minor} minor units");
    assert_eq!(Amount::from_minor(minor, currency).as_ref(), Ok(amount), "minor units {minor}");
    assert_eq!(withdrawals::domain::format_minor(minor, currency), value.to_string());

    let canonical = value.to_string();
    assert_eq!(Amount::parse(&canonical, currency, limits).as_ref(), Ok(amount), "re-parsing {canonical:?}");
}

fn check_currency(code: &str) {
    if let Ok(currency) = Currency::parse(code) {
        assert_eq!(currency.code(), code);
        assert!(code.len() == 3 && code.bytes().all(|b| b.is_ascii_uppercase()), "currency code {code:?}");
        assert!(currency.minor_units() <= 4, "{code} has {} minor units", currency.minor_units());
    }
}

fn check_amount_string(raw: &str, parsed_currency: Option<Currency>) {
    for currency in CURRENCIES.iter().copied().chain(parsed_currency) {
        let Ok(amount) = Amount::parse(raw, currency, &LIMITS) else { continue };
        assert_eq!(amount.currency(), currency);
        check_amount(&amount, &LIMITS);
        // Scale is checked literally: what the client wrote has a sign, digits and at most one
        // point followed by no more digits than the currency's minor unit.
        let literal = raw.trim();
        let unsigned = literal.strip_prefix(['+', '-']).unwrap_or(literal);
        let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
        assert!(
            whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit()),
            "{literal:?} accepted as {} {currency}",
            amount.value()
        );
        assert!(!whole.is_empty() || !fraction.is_empty(), "{literal:?} accepted without digits");
        assert!(
            fraction.len() <= currency.minor_units() as usize,
            "{literal:?} accepted in {currency} ({} decimals)",
            currency.minor_units()
        );
    }
}

fn check_destination_parts(kind: &str, account_number: &str, bank_code: &str) {
    if let Ok(destination) = Destination::parse(kind, account_number, bank_code) {
        assert_eq!(kind, "bank_account");
        check_destination(&destination);
    }
}

fn check_destination(destination: &Destination) {
    let Destination::BankAccount { account_number, bank_code } = destination;
    let upper_alnum = |s: &str| s.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_uppercase());
    assert!((6..=34).contains(&account_number.len()) && upper_alnum(account_number), "account {account_number:?}");
    assert!((3..=11).contains(&bank_code.len()) && upper_alnum(bank_code), "bank code {bank_code:?}");
    assert_eq!(Destination::parse("bank_account", account_number, bank_code).as_ref(), Ok(destination));

    let Destination::BankAccount { account_number: masked, .. } = destination.masked();
    let keep = account_number.len() - 4;
    assert_eq!(masked, format!("{}{}", "*".repeat(keep), &account_number[keep..]));
    let debug = format!("{destination:?}");
    if !bank_code.contains(account_number.as_str()) {
        assert!(!debug.contains(account_number.as_str()), "Debug shows the account number: {debug}");
    }
}

fn check_idempotency_key(raw: &str) {
    let Ok(key) = IdempotencyKey::parse(raw) else { return };
    let k = key.as_str();
    assert!((1..=IdempotencyKey::MAX_LEN).contains(&k.len()), "key of {} bytes", k.len());
    assert!(k.bytes().all(|b| b.is_ascii_graphic()), "key {k:?}");
    let quoted = raw.len() >= 2 && raw.starts_with('"') && raw.ends_with('"');
    if !quoted {
        assert_eq!(k, raw);
    }
    assert_eq!(IdempotencyKey::parse(&format!("\"{k}\"")).as_ref(), Ok(&key));
}
