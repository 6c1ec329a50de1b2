//! The customer's free-text `reference`: shown to operators later, so it must display as what it
//! says. Control characters and Unicode format characters (general category Cf: bidirectional
//! overrides such as U+202E, zero-width joiners and spaces, soft hyphens, tag characters) are
//! refused, because they let a reference show operators something other than its text.

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// Longest accepted reference, in characters.
pub const MAX_REFERENCE_CHARS: usize = 140;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error("reference must be at most {MAX_REFERENCE_CHARS} characters")]
    TooLong,
    #[error("reference must not contain control or invisible formatting characters (U+{0:04X})")]
    Hidden(u32),
}

/// Checks a reference (already trimmed of spaces): its length, and that every character displays as
/// itself.
pub fn check_reference(reference: &str) -> Result<(), ReferenceError> {
    if reference.chars().count() > MAX_REFERENCE_CHARS {
        return Err(ReferenceError::TooLong);
    }
    match reference.chars().find(|c| c.is_control() || c.general_category() == GeneralCategory::Format) {
        Some(hidden) => Err(ReferenceError::Hidden(hidden as u32)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_and_control_characters_are_refused_and_ordinary_text_is_not() {
        for hidden in [
            '\u{202E}',
            '\u{202A}',
            '\u{2066}',
            '\u{200B}',
            '\u{200D}',
            '\u{FEFF}',
            '\u{00AD}',
            '\u{E0041}',
            '\n',
            '\u{7}',
        ] {
            let text = format!("rent{hidden}tner");
            assert_eq!(check_reference(&text), Err(ReferenceError::Hidden(hidden as u32)), "{hidden:?}");
        }
        for fine in ["June payout", "Überweisung für Miete", "家賃", "إيجار", "payout #42 — thanks!", "🙂 savings"]
        {
            assert_eq!(check_reference(fine), Ok(()), "{fine}");
        }
        assert_eq!(check_reference(&"x".repeat(141)), Err(ReferenceError::TooLong));
        assert_eq!(check_reference(&"é".repeat(140)), Ok(()), "characters, not bytes");
    }
}
