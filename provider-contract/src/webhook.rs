//! Signed webhook events (SPEC §15): the Stripe scheme both ends of a webhook share. A sender
//! signs `"<t>.<raw body>"` with HMAC-SHA256 under each of its secrets and sends
//! `<header>: t=<unix seconds>,v1=<hex>[,v1=<hex>…]`; a receiver parses the header
//! ([`SignatureHeader::parse`]), accepts the body when one `v1` matches one of its secrets,
//! compared in constant time ([`SignatureHeader::verify`]), and checks the timestamp against its
//! tolerance itself. The provider's events name it [`PROVIDER_SIGNATURE_HEADER`]; the service's
//! own notifications (SPEC §17) use the same scheme under their own header.

use std::fmt;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// The header a provider's event is signed in.
pub const PROVIDER_SIGNATURE_HEADER: &str = "Provider-Signature";

/// The most `v1` values one header may carry (a sender rotating through a few secrets needs a
/// handful; a header of thousands is an attack on the verifier's time).
pub const MAX_SIGNATURES: usize = 8;

type HmacSha256 = Hmac<Sha256>;

/// A parsed signature header: the signing time and the `v1` signatures (other schemes, such as
/// Stripe's `v0`, are skipped, as Stripe's own libraries do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureHeader {
    /// Unix seconds, as the sender signed them.
    pub timestamp: i64,
    pub signatures: Vec<[u8; 32]>,
}

/// Why a signature header cannot be read. Each is a refusal; none says which secret was tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// No `t=`, or more than one.
    Timestamp,
    /// No `v1=` value at all.
    NoSignature,
    /// A `v1=` value that is not 64 hex digits.
    BadSignature,
    /// More than [`MAX_SIGNATURES`] `v1=` values.
    TooManySignatures,
    /// An element that is not `key=value`.
    Malformed,
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HeaderError::Timestamp => "the signature header needs exactly one t=<unix seconds>",
            HeaderError::NoSignature => "the signature header has no v1 signature",
            HeaderError::BadSignature => "a v1 signature is not 64 hex digits",
            HeaderError::TooManySignatures => "the signature header has too many v1 signatures",
            HeaderError::Malformed => "the signature header is not a list of key=value pairs",
        })
    }
}

impl std::error::Error for HeaderError {}

impl SignatureHeader {
    /// Reads `t=<unix seconds>,v1=<hex>[,v1=<hex>…]`; elements are separated by commas and may
    /// carry surrounding spaces; keys other than `t` and `v1` are skipped.
    pub fn parse(value: &str) -> Result<SignatureHeader, HeaderError> {
        let mut timestamp = None;
        let mut signatures = Vec::new();
        for element in value.split(',') {
            let element = element.trim();
            let (key, val) = element.split_once('=').ok_or(HeaderError::Malformed)?;
            match key.trim() {
                "t" => {
                    let val = val.trim();
                    // Digits only, no leading zero: the text signed is the number's own.
                    let canonical = val == "0" || !val.starts_with('0');
                    let parsed = (canonical && !val.is_empty() && val.bytes().all(|b| b.is_ascii_digit()))
                        .then(|| val.parse::<i64>().ok())
                        .flatten()
                        .ok_or(HeaderError::Timestamp)?;
                    if timestamp.replace(parsed).is_some() {
                        return Err(HeaderError::Timestamp);
                    }
                }
                "v1" => {
                    if signatures.len() == MAX_SIGNATURES {
                        return Err(HeaderError::TooManySignatures);
                    }
                    let mut digest = [0u8; 32];
                    hex::decode_to_slice(val.trim(), &mut digest).map_err(|_| HeaderError::BadSignature)?;
                    signatures.push(digest);
                }
                _ => {}
            }
        }
        let timestamp = timestamp.ok_or(HeaderError::Timestamp)?;
        if signatures.is_empty() {
            return Err(HeaderError::NoSignature);
        }
        Ok(SignatureHeader { timestamp, signatures })
    }

    /// Whether one of the header's signatures is `body`'s at its timestamp under one of
    /// `secrets`. Every comparison is constant-time (`Mac::verify_slice`).
    pub fn verify<S: AsRef<[u8]>>(&self, secrets: &[S], body: &[u8]) -> bool {
        let mut valid = false;
        for secret in secrets {
            let mac = signer(secret.as_ref(), self.timestamp, body);
            for signature in &self.signatures {
                // No early exit: the time taken does not say which pair matched.
                valid |= mac.clone().verify_slice(signature).is_ok();
            }
        }
        valid
    }
}

fn signer(secret: &[u8], timestamp: i64, body: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The hex HMAC-SHA256 of `"<timestamp>.<body>"` under `secret`.
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    hex::encode(signer(secret, timestamp, body).finalize().into_bytes())
}

/// The header value signing `body` at `timestamp` under each of `secrets` (one `v1` each).
pub fn header_value<S: AsRef<[u8]>>(secrets: &[S], timestamp: i64, body: &[u8]) -> String {
    let mut value = format!("t={timestamp}");
    for secret in secrets {
        value.push_str(",v1=");
        value.push_str(&sign(secret.as_ref(), timestamp, body));
    }
    value
}

/// A provider event's type: a transfer became paid, failed or returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EventType {
    #[serde(rename = "transfer.paid")]
    TransferPaid,
    #[serde(rename = "transfer.failed")]
    TransferFailed,
    #[serde(rename = "transfer.returned")]
    TransferReturned,
}

impl EventType {
    pub const ALL: [EventType; 3] = [EventType::TransferPaid, EventType::TransferFailed, EventType::TransferReturned];

    pub const fn as_str(self) -> &'static str {
        match self {
            EventType::TransferPaid => "transfer.paid",
            EventType::TransferFailed => "transfer.failed",
            EventType::TransferReturned => "transfer.returned",
        }
    }

    /// The transfer status the event announces.
    pub const fn status(self) -> crate::TransferStatus {
        match self {
            EventType::TransferPaid => crate::TransferStatus::Paid,
            EventType::TransferFailed => crate::TransferStatus::Failed,
            EventType::TransferReturned => crate::TransferStatus::Returned,
        }
    }

    /// The event announcing a transfer's change to `status`, if one does (`pending` has none).
    pub const fn announcing(status: crate::TransferStatus) -> Option<EventType> {
        match status {
            crate::TransferStatus::Pending => None,
            crate::TransferStatus::Paid => Some(EventType::TransferPaid),
            crate::TransferStatus::Failed => Some(EventType::TransferFailed),
            crate::TransferStatus::Returned => Some(EventType::TransferReturned),
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// A provider event on the wire: `{id, type, created_at, data: <transfer>}`. `created_at` is
/// RFC 3339 text (each side reads it with its own clock type); `data` is the transfer as the
/// provider's `GET /v1/transfers/{id}` shows it, in each side's own type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event<T> {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: EventType,
    pub created_at: String,
    pub data: T,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_body_verifies_under_its_secret_only() {
        let body = br#"{"id":"evt_1","type":"transfer.paid"}"#;
        let header = header_value(&["old-secret", "new-secret"], 1_700_000_000, body);
        let parsed = SignatureHeader::parse(&header).unwrap();
        assert_eq!(parsed.timestamp, 1_700_000_000);
        assert_eq!(parsed.signatures.len(), 2);
        assert!(parsed.verify(&["new-secret"], body));
        assert!(parsed.verify(&["other", "old-secret"], body));
        assert!(!parsed.verify(&["other"], body));
        assert!(!parsed.verify(&["new-secret"], b"{}"), "another body");
        let shifted = SignatureHeader { timestamp: 1_700_000_001, ..parsed.clone() };
        assert!(!shifted.verify(&["new-secret"], body), "another timestamp");
        assert!(!parsed.verify::<&str>(&[], body), "no secret verifies nothing");
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_timestamp_dot_body_in_hex() {
        // Computed independently (Python's hmac module):
        // hmac.new(b"whsec_test", b'1700000000.{"id":"evt_1"}', hashlib.sha256).hexdigest()
        assert_eq!(
            sign(b"whsec_test", 1_700_000_000, br#"{"id":"evt_1"}"#),
            "c89214b5b5da833daed6f0b8c5bb6bd58cea9022bd80ccc78230f3942d632925"
        );
    }

    #[test]
    fn headers_that_do_not_read_are_refused_by_name() {
        let sig = "a".repeat(64);
        let cases: Vec<(String, HeaderError)> = vec![
            (String::new(), HeaderError::Malformed),
            (format!("v1={sig}"), HeaderError::Timestamp),
            (format!("t=1,t=2,v1={sig}"), HeaderError::Timestamp),
            (format!("t=-5,v1={sig}"), HeaderError::Timestamp),
            (format!("t=+5,v1={sig}"), HeaderError::Timestamp),
            (format!("t=0017,v1={sig}"), HeaderError::Timestamp),
            (format!("t=99999999999999999999,v1={sig}"), HeaderError::Timestamp),
            ("t=1".to_owned(), HeaderError::NoSignature),
            ("t=1,v0=abc".to_owned(), HeaderError::NoSignature),
            ("t=1,v1=zz".to_owned(), HeaderError::BadSignature),
            (format!("t=1,v1={}", &sig[..62]), HeaderError::BadSignature),
            (format!("t=1,v1={sig},garbage"), HeaderError::Malformed),
            (format!("t=1{}", format!(",v1={sig}").repeat(MAX_SIGNATURES + 1)), HeaderError::TooManySignatures),
        ];
        for (value, expected) in cases {
            assert_eq!(SignatureHeader::parse(&value), Err(expected), "{value:?}");
        }
        let spaced = SignatureHeader::parse(&format!(" t=7 , v0=x, v1={sig} ")).unwrap();
        assert_eq!((spaced.timestamp, spaced.signatures.len()), (7, 1));
    }

    #[test]
    fn event_types_read_and_write_their_wire_names() {
        for kind in EventType::ALL {
            let wire = serde_json::to_value(kind).unwrap();
            assert_eq!(wire, serde_json::Value::String(kind.as_str().to_owned()));
            assert_eq!(EventType::announcing(kind.status()), Some(kind));
        }
        assert_eq!(EventType::announcing(crate::TransferStatus::Pending), None);
        let event: Event<serde_json::Value> = serde_json::from_str(
            r#"{"id":"evt_1","type":"transfer.failed","created_at":"2026-12-07T00:00:00Z","data":{}}"#,
        )
        .unwrap();
        assert_eq!(event.kind, EventType::TransferFailed);
    }
}
