//! Redaction: the one set of rules applied before anything is stored in a dead letter and before
//! any log line is written (SPEC §6, §9, §10).
//!
//! - account numbers (under an account-ish key, or any run of 6+ digits, or an IBAN) keep their
//!   last four characters;
//! - secrets (bearer tokens, our `wdk_`/`wdo_` credentials, `key=value` credentials, and any JSON
//!   member whose name says secret, token, password, credential, api key or authorization) are
//!   removed.
//!
//! UUIDs are left whole: they are identifiers, not secrets, and operators need them.

use std::io::{self, Write};
use std::sync::LazyLock;

use regex::{Captures, Regex};
use serde_json::{Map, Value};

use crate::domain::mask_account_number;

pub const REMOVED: &str = "[redacted]";

static SECRET_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(secret|token|passw|credential|api[_-]?key|authorization|private[_-]?key|cvv|\bpin\b)").unwrap()
});
static ACCOUNT_KEY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)(account[_-]?(number|no)|\biban\b|\bacct\b)").unwrap());
static BEARER: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+").unwrap());
static CREDENTIAL: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\bwd[ko]_[0-9a-fA-F]{32}_[0-9a-fA-F]+").unwrap());
static KEY_VALUE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\b((?:[a-z_-]*)(?:secret|token|password|passwd|credential|api[_-]?key|authorization)[a-z_-]*)(\\?["']?\s*[:=]\s*\\?["']?)[^\s"'\\,;}&]+"#,
    )
    .unwrap()
});
// A UUID is matched first so the digit rule never bites into one.
static NUMBERS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|\b[A-Z]{2}[0-9]{2}[A-Z0-9]{10,30}\b|\b[0-9]{6,34}\b",
    )
    .unwrap()
});

/// Redacts free text: an error message, a log line.
pub fn text(input: &str) -> String {
    let out = CREDENTIAL.replace_all(input, REMOVED);
    let out = BEARER.replace_all(&out, |c: &Captures| format!("{} {REMOVED}", &c[1]));
    let out = KEY_VALUE.replace_all(&out, |c: &Captures| format!("{}{}{REMOVED}", &c[1], &c[2]));
    let out = NUMBERS.replace_all(&out, |c: &Captures| {
        let found = &c[0];
        if found.contains('-') {
            found.to_owned()
        } else {
            mask_account_number(found)
        }
    });
    out.into_owned()
}

/// Redacts a JSON document: secret members removed, account members masked, strings as [`text`].
pub fn json(value: &Value) -> Value {
    match value {
        Value::Object(members) => {
            let mut out = Map::new();
            for (key, member) in members {
                if SECRET_KEY.is_match(key) {
                    continue;
                }
                let redacted = match member {
                    Value::String(s) if ACCOUNT_KEY.is_match(key) => Value::String(mask_account_number(s)),
                    Value::Number(n) if ACCOUNT_KEY.is_match(key) => Value::String(mask_account_number(&n.to_string())),
                    other => json(other),
                };
                out.insert(key.clone(), redacted);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(json).collect()),
        Value::String(s) => Value::String(text(s)),
        Value::Number(n) => {
            let digits = n.to_string();
            if digits.len() >= 6 && digits.bytes().all(|b| b.is_ascii_digit()) {
                Value::String(mask_account_number(&digits))
            } else {
                value.clone()
            }
        }
        Value::Bool(_) | Value::Null => value.clone(),
    }
}

/// A log writer that redacts every line before it reaches stderr (or any inner writer).
pub struct RedactingWriter<W: Write> {
    inner: W,
}

impl<W: Write> RedactingWriter<W> {
    pub fn new(inner: W) -> Self {
        Self { inner }
    }
}

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // tracing-subscriber hands over one formatted event per write.
        let line = String::from_utf8_lossy(buf);
        self.inner.write_all(text(&line).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn masks_account_numbers_and_removes_secrets_in_text() {
        let line = "paying 12345678 for wd 0193a1b2-c3d4-7e5f-8a9b-0f0e0d0c0b0a with Authorization: Bearer abc.def \
                    api_key=sk_live_42 and wdk_0193a1b2c3d47e5f8a9b123456789012_deadbeef iban GB29NWBK60161331926819";
        let out = text(line);
        assert!(out.contains("****5678"), "{out}");
        assert!(out.contains("0193a1b2-c3d4-7e5f-8a9b-0f0e0d0c0b0a"), "uuids stay whole: {out}");
        for secret in ["abc.def", "sk_live_42", "deadbeef", "12345678", "GB29NWBK60161331926819"] {
            assert!(!out.contains(secret), "{secret} leaked: {out}");
        }
    }

    #[test]
    fn json_members_are_removed_or_masked_by_name() {
        let doc = json!({
            "withdrawal_id": "0193a1b2-c3d4-7e5f-8a9b-0f0e0d0c0b0a",
            "destination": {"type": "bank_account", "account_number": "GB29NWBK60161331926819", "bank_code": "NWBKGB2L"},
            "api_key": "sk_live_42", "Authorization": "Bearer x", "nested": [{"password": "p"}, "token=abc"],
            "amount": "125.50"
        });
        let out = json(&doc);
        assert_eq!(out["destination"]["account_number"], "******************6819");
        assert_eq!(out["withdrawal_id"], doc["withdrawal_id"]);
        assert_eq!(out["amount"], "125.50");
        assert!(out.get("api_key").is_none() && out.get("Authorization").is_none());
        assert_eq!(out["nested"], json!([{}, "token=[redacted]"]));
    }
}
