//! Fuzzes the signed-webhook header (`provider-contract/src/webhook.rs`, SPEC §15):
//! `SignatureHeader::parse` on the input's first line as the header (lossy UTF-8), and on the
//! whole input when it has more than one line; what follows the first newline is the body
//! (none without a newline). `verify`, `sign` and `header_value` are exercised over that body.
//!
//! Invariants:
//! - nothing panics;
//! - an accepted header has a non-negative timestamp and 1 to `MAX_SIGNATURES` signatures, one
//!   per `v1` element it holds (other keys, such as `v0`, are skipped);
//!   `TooManySignatures` means more than `MAX_SIGNATURES` `v1` elements; every error displays;
//! - an accepted header re-serialised as `t=<ts>,v1=<hex>[,v1=<hex>…]` parses to the same value;
//! - `verify` under a few fixed secrets agrees with a plain (not constant-time) comparison of
//!   `sign(secret, t, body)` with each signature, and no secret at all verifies nothing;
//! - `header_value(&[secret], t, body)` (t = the parsed timestamp, else one read from the
//!   input's first 8 bytes, made non-negative) parses, verifies under that secret and under no
//!   other, not at t + 1 and not for another body; the same for the input's first line as the
//!   secret (other secrets that HMAC treats as the same key, i.e. equal up to trailing zero
//!   bytes, excepted); a header signed under all the fixed secrets verifies under each one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use provider_contract::webhook::{header_value, sign, HeaderError, SignatureHeader, MAX_SIGNATURES};

/// Distinct as HMAC keys (none is another plus trailing zero bytes; all 64 bytes or fewer).
const SECRETS: [&[u8]; 4] = [b"whsec_test", b"old-secret", b"new-secret", b""];

fuzz_target!(|data: &[u8]| {
    let (line, body) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &data[data.len()..]),
    };
    let header = String::from_utf8_lossy(line);
    let parsed = check_parse(&header, body);
    if line.len() < data.len() {
        check_parse(&String::from_utf8_lossy(data), body);
    }

    let mut prefix = [0u8; 8];
    let n = data.len().min(8);
    prefix[..n].copy_from_slice(&data[..n]);
    let timestamp = parsed.map_or((u64::from_le_bytes(prefix) & i64::MAX as u64) as i64, |h| h.timestamp);
    for secret in SECRETS {
        check_signed(secret, timestamp, body);
    }
    check_signed(line, timestamp, body);

    let all =
        SignatureHeader::parse(&header_value(&SECRETS, timestamp, body)).expect("a header of every secret parses");
    assert_eq!(all.signatures.len(), SECRETS.len());
    for secret in SECRETS {
        assert!(all.verify(&[secret], body), "the header of every secret does not verify under {secret:?}");
    }
});

/// `value`'s elements whose key is `v1`, as the parser reads elements.
fn v1_elements(value: &str) -> usize {
    value.split(',').filter(|e| e.trim().split_once('=').is_some_and(|(key, _)| key.trim() == "v1")).count()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn check_parse(value: &str, body: &[u8]) -> Option<SignatureHeader> {
    let header = match SignatureHeader::parse(value) {
        Ok(header) => header,
        Err(err) => {
            assert!(!err.to_string().is_empty());
            if err == HeaderError::TooManySignatures {
                assert!(v1_elements(value) > MAX_SIGNATURES, "{value:?}: too many signatures, but not that many v1");
            }
            return None;
        }
    };
    assert!(header.timestamp >= 0, "{value:?}: negative timestamp {}", header.timestamp);
    assert!(
        (1..=MAX_SIGNATURES).contains(&header.signatures.len()),
        "{value:?}: {} signatures",
        header.signatures.len()
    );
    assert_eq!(header.signatures.len(), v1_elements(value), "{value:?}: not one signature per v1");

    let mut canonical = format!("t={}", header.timestamp);
    for signature in &header.signatures {
        canonical.push_str(",v1=");
        canonical.push_str(&to_hex(signature));
    }
    assert_eq!(SignatureHeader::parse(&canonical).as_ref(), Ok(&header), "{value:?} re-serialised as {canonical:?}");

    let expected =
        SECRETS.iter().any(|s| header.signatures.iter().any(|sig| to_hex(sig) == sign(s, header.timestamp, body)));
    assert_eq!(header.verify(&SECRETS, body), expected, "{value:?}: verify disagrees with sign");
    assert!(!header.verify::<&[u8]>(&[], body), "{value:?}: verified under no secret");
    Some(header)
}

/// Whether HMAC-SHA256 treats `a` and `b` as one key: a key of at most a block (64 bytes) is
/// padded with zero bytes. (Longer keys are hashed first; a clash with one of them would need a
/// SHA-256 preimage, so they count as distinct.)
fn same_hmac_key(a: &[u8], b: &[u8]) -> bool {
    fn trimmed(key: &[u8]) -> &[u8] {
        &key[..key.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)]
    }
    a.len() <= 64 && b.len() <= 64 && trimmed(a) == trimmed(b)
}

fn check_signed(secret: &[u8], timestamp: i64, body: &[u8]) {
    let value = header_value(&[secret], timestamp, body);
    let header = SignatureHeader::parse(&value).unwrap_or_else(|e| panic!("{value:?} does not parse: {e:?}"));
    assert_eq!(header.timestamp, timestamp);
    assert_eq!(header.signatures.len(), 1);
    assert!(header.verify(&[secret], body), "{value:?} does not verify under its secret {secret:?}");
    for other in SECRETS {
        if !same_hmac_key(secret, other) {
            assert!(!header.verify(&[other], body), "{value:?} (under {secret:?}) verifies under {other:?}");
        }
    }
    if let Some(later) = timestamp.checked_add(1) {
        let shifted = SignatureHeader { timestamp: later, ..header.clone() };
        assert!(!shifted.verify(&[secret], body), "{value:?} verifies at t + 1");
    }
    let mut other_body = body.to_vec();
    other_body.push(b'x');
    assert!(!header.verify(&[secret], &other_body), "{value:?} verifies for another body");
}
