//! Payload versions and their migrations. A payload written by an older producer is upgraded to
//! the kind's current version before it is run or replayed; one that cannot be upgraded is a
//! `bad_payload` (at dispatch) or a skipped replay item with its reason (at replay).

use serde_json::Value;

use super::JobKind;

/// The error code of a payload naming a withdrawal that does not exist: poison, like an
/// undecodable one (no retry can make the withdrawal exist).
pub const UNKNOWN_WITHDRAWAL: &str = "unknown_withdrawal";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("no handler knows {kind} payload version {version}")]
    UnknownVersion { kind: JobKind, version: i64 },
    #[error("payload cannot be upgraded from version {version}: {reason}")]
    NotUpgradable { version: i64, reason: String },
}

impl PayloadError {
    pub fn code(&self) -> &'static str {
        match self {
            PayloadError::UnknownVersion { .. } => "unknown_payload_version",
            PayloadError::NotUpgradable { .. } => "undecodable_payload",
        }
    }
}

/// One registered migration: `kind` from `from` to `from + 1`.
type Migration = fn(Value) -> Result<Value, String>;

const MIGRATIONS: &[(JobKind, i64, Migration)] =
    &[(JobKind::SubmitPayout, 1, submit_v1_to_v2), (JobKind::ImportSettlement, 1, import_settlement_v1_to_v2)];

/// v2 may name an operator's stored import; a v1 job is the daily fetch, which names none.
fn import_settlement_v1_to_v2(mut v: Value) -> Result<Value, String> {
    v.get("date").and_then(Value::as_str).ok_or("date is missing")?;
    v["import_id"] = Value::Null;
    Ok(v)
}

/// v2 makes the provider operation key explicit (it was implied by `withdrawal_id`).
fn submit_v1_to_v2(mut v: Value) -> Result<Value, String> {
    let id = v.get("withdrawal_id").and_then(Value::as_str).ok_or("withdrawal_id is missing")?;
    let id = uuid::Uuid::parse_str(id).map_err(|e| format!("withdrawal_id is not a UUID: {e}"))?;
    v["operation_key"] = Value::String(id.to_string());
    Ok(v)
}

/// Upgrades `payload` of `kind` from `version` to the current version. Returns the bytes to run
/// and the version they now have.
pub fn upgrade(kind: JobKind, version: i64, payload: &[u8]) -> Result<(Vec<u8>, i64), PayloadError> {
    let current = kind.current_version();
    if version == current {
        return Ok((payload.to_vec(), version));
    }
    if version > current || version < 1 {
        return Err(PayloadError::UnknownVersion { kind, version });
    }
    let mut value: Value = serde_json::from_slice(payload)
        .map_err(|e| PayloadError::NotUpgradable { version, reason: format!("not JSON: {e}") })?;
    for step in version..current {
        let (_, _, migrate) = MIGRATIONS
            .iter()
            .find(|(k, from, _)| *k == kind && *from == step)
            .ok_or(PayloadError::UnknownVersion { kind, version })?;
        value = migrate(value).map_err(|reason| PayloadError::NotUpgradable { version, reason })?;
    }
    Ok((serde_json::to_vec(&value).expect("JSON serialises"), current))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v1_submit_payload_is_upgraded_to_v2() {
        let v1 = br#"{"withdrawal_id":"0193a1b2-c3d4-7e5f-8a9b-0f0e0d0c0b0a"}"#;
        let (bytes, version) = upgrade(JobKind::SubmitPayout, 1, v1).unwrap();
        let v2: crate::jobs::SubmitPayout = serde_json::from_slice(&bytes).unwrap();
        assert_eq!((version, v2.operation_key.as_str()), (2, "0193a1b2-c3d4-7e5f-8a9b-0f0e0d0c0b0a"));
    }

    #[test]
    fn unknown_versions_and_broken_payloads_are_refused_with_a_reason() {
        assert!(matches!(upgrade(JobKind::SubmitPayout, 3, b"{}"), Err(PayloadError::UnknownVersion { .. })));
        assert!(matches!(upgrade(JobKind::ReconcilePayout, 0, b"{}"), Err(PayloadError::UnknownVersion { .. })));
        let err = upgrade(JobKind::SubmitPayout, 1, br#"{"withdrawal_id": 7}"#).unwrap_err();
        assert_eq!(err.code(), "undecodable_payload");
        assert!(err.to_string().contains("withdrawal_id is missing"));
    }
}
