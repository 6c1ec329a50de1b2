//! Fuzzes the payload migrations: `jobs::payload::upgrade(kind, version, bytes)`.
//!
//! Every input is tried as the payload of every job kind (`JobKind::ALL`) at versions 0, 1, 2
//! and 3.
//!
//! Invariants:
//! - nothing panics;
//! - a success returns the kind's current version (`kind.current_version()`), and upgrading its
//!   output again (at that version) is the identity;
//! - a payload already at the current version is returned byte for byte;
//! - versions outside `1..=current` are `UnknownVersion` (an unknown kind cannot be named: kinds
//!   are an enum);
//! - `submit_payout` v1 → v2 writes `operation_key`, the canonical form of `withdrawal_id`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use withdrawals::domain::job::JobKind;
use withdrawals::jobs::payload::{upgrade, PayloadError};

fuzz_target!(|data: &[u8]| {
    for kind in JobKind::ALL {
        let current = kind.current_version();
        for version in 0..=3 {
            check(kind, current, version, data);
        }
    }
});

fn check(kind: JobKind, current: i64, version: i64, payload: &[u8]) {
    match upgrade(kind, version, payload) {
        Ok((bytes, upgraded)) => {
            assert_eq!(upgraded, current, "{kind} v{version} upgraded to v{upgraded}");
            assert!((1..=current).contains(&version), "{kind} v{version} (current v{current}) was accepted");
            if version == current {
                assert_eq!(bytes, payload, "{kind} v{version}: a current payload was changed");
            }
            let again = upgrade(kind, upgraded, &bytes);
            assert_eq!(again.as_ref(), Ok(&(bytes.clone(), upgraded)), "{kind}: upgrading v{upgraded} again");
            if kind == JobKind::SubmitPayout && version == 1 {
                let v1: serde_json::Value = serde_json::from_slice(payload).expect("an upgraded v1 payload is JSON");
                // Read back as a map, not a `Value`: with serde_json's `raw_value` feature (on, via
                // sqlx) an object whose first key is `$serde_json::private::RawValue` — and the
                // upgrade writes keys sorted, so such a key comes first — is read as a raw value.
                let v2: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_slice(&bytes).expect("the upgrade wrote a JSON object");
                let id = v1["withdrawal_id"].as_str().expect("v1 had a withdrawal_id");
                let id = uuid::Uuid::parse_str(id).expect("v1's withdrawal_id is a UUID");
                assert_eq!(v2["operation_key"], serde_json::Value::String(id.to_string()));
            }
        }
        Err(err) => {
            assert!(!err.code().is_empty() && !err.to_string().is_empty());
            if !(1..=current).contains(&version) {
                assert!(matches!(err, PayloadError::UnknownVersion { .. }), "{kind} v{version}: {err:?}");
            }
        }
    }
}
