//! The client's `Idempotency-Key` (SPEC §3): 1–255 visible ASCII characters, or the same inside
//! a structured-field string (`"…"`), as the IETF idempotency-key draft allows.

use crate::text_enum;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

text_enum! {
    /// An idempotency record's phase: claimed by a request still running, or completed with the
    /// response every replay repeats.
    pub enum IdempotencyState("idempotency record state", 2) {
        InProgress = "in_progress",
        Completed = "completed",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdempotencyKeyError {
    #[error("the Idempotency-Key must be 1 to 255 characters")]
    Length,
    #[error("the Idempotency-Key may contain only visible ASCII characters")]
    Charset,
}

impl IdempotencyKey {
    pub const MAX_LEN: usize = 255;

    pub fn parse(raw: &str) -> Result<Self, IdempotencyKeyError> {
        // A structured-field string: strip the quotes; escapes are not allowed inside a key.
        let key = match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
            Some(inner) if raw.len() >= 2 => inner,
            _ => raw,
        };
        if key.is_empty() || key.len() > Self::MAX_LEN {
            return Err(IdempotencyKeyError::Length);
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(IdempotencyKeyError::Charset);
        }
        Ok(Self(key.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_and_quoted_keys() {
        assert_eq!(IdempotencyKey::parse("abc-123").unwrap().as_str(), "abc-123");
        assert_eq!(IdempotencyKey::parse("\"abc-123\"").unwrap().as_str(), "abc-123");
        assert_eq!(IdempotencyKey::parse(&"k".repeat(255)).unwrap().as_str().len(), 255);
    }

    #[test]
    fn rejects_empty_long_and_invisible_keys() {
        assert_eq!(IdempotencyKey::parse(""), Err(IdempotencyKeyError::Length));
        assert_eq!(IdempotencyKey::parse("\"\""), Err(IdempotencyKeyError::Length));
        assert_eq!(IdempotencyKey::parse(&"k".repeat(256)), Err(IdempotencyKeyError::Length));
        assert_eq!(IdempotencyKey::parse("a b"), Err(IdempotencyKeyError::Charset));
        assert_eq!(IdempotencyKey::parse("é"), Err(IdempotencyKeyError::Charset));
    }
}
