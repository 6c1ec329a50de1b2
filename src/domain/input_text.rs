//! The one rule for text a client sends, on every surface (query parameters, JSON body fields,
//! console form fields): it is valid UTF-8 and holds no control character (Unicode `Cc`: NUL, the
//! rest of C0, DEL, C1) other than tab, line feed and carriage return, which free-text reasons
//! may use. PostgreSQL refuses NUL in `text` and `jsonb` (and SQLite would store it), and the
//! other controls only hide what a value says, so such text is refused before anything reads it.
//!
//! The checks run on decoded values — a JSON string's `\u0000` escape, a query's `%00` — never on
//! raw bytes; and they never echo the text, only where it is and the code point at fault.

use serde_json::Value;

/// Where a text input was refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidText {
    /// The field at fault: a query parameter's or form field's name, or a JSON body's dotted path
    /// (`destination.account_number`, `items[2]`); `query`, `form` or `body` when the name
    /// itself is the invalid text.
    pub field: String,
    pub fault: TextFault,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFault {
    /// A control character, by code point.
    Control(u32),
    /// Percent-encoded bytes that are not UTF-8.
    NotUtf8,
}

impl std::fmt::Display for InvalidText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.fault {
            TextFault::Control(c) => write!(
                f,
                "`{}` contains the control character U+{c:04X}; text may hold no control character but tab, \
                 line feed and carriage return",
                self.field
            ),
            TextFault::NotUtf8 => write!(f, "`{}` is not valid UTF-8 once percent-decoded", self.field),
        }
    }
}

/// Whether `c` is refused in text a client sends.
pub fn is_refused(c: char) -> bool {
    c.is_control() && !matches!(c, '\t' | '\n' | '\r')
}

/// The first refused character of `text`, if any.
pub fn refused_char(text: &str) -> Option<char> {
    text.chars().find(|&c| is_refused(c))
}

/// Every string of a decoded JSON document, keys included, obeys the rule.
pub fn check_json(value: &Value) -> Result<(), InvalidText> {
    check_value(value, &mut String::new(), &[])
}

/// As [`check_json`], but the values at the paths `own` (dotted, as [`InvalidText::field`] names
/// them) are left to a parser that judges their text itself (a settlement report's CSV names the
/// line and column at fault).
pub fn check_json_except(value: &Value, own: &[&str]) -> Result<(), InvalidText> {
    check_value(value, &mut String::new(), own)
}

fn check_value(value: &Value, path: &mut String, own: &[&str]) -> Result<(), InvalidText> {
    if own.contains(&path.as_str()) {
        return Ok(());
    }
    let at = |path: &str, c: char| InvalidText {
        field: if path.is_empty() { "body".to_owned() } else { path.to_owned() },
        fault: TextFault::Control(c as u32),
    };
    match value {
        Value::String(s) => match refused_char(s) {
            Some(c) => Err(at(path, c)),
            None => Ok(()),
        },
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                check_value(item, path, own)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::Object(map) => {
            for (key, item) in map {
                if let Some(c) = refused_char(key) {
                    return Err(at(path, c));
                }
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                check_value(item, path, own)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
    }
}

/// Every name and value of a query string (without its `?`) obeys the rule, once decoded as
/// `application/x-www-form-urlencoded` (`+` is a space, `%XX` a byte).
pub fn check_query(raw: &str) -> Result<(), InvalidText> {
    check_urlencoded(raw.as_bytes(), "query")
}

/// Every name and value of a form body obeys the rule, decoded as a query string is.
pub fn check_form(body: &[u8]) -> Result<(), InvalidText> {
    check_urlencoded(body, "form")
}

fn check_urlencoded(raw: &[u8], whole: &str) -> Result<(), InvalidText> {
    for pair in raw.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
        let (name, value) = match pair.iter().position(|&b| b == b'=') {
            Some(i) => (&pair[..i], &pair[i + 1..]),
            None => (pair, &[][..]),
        };
        let invalid = |field: &str, fault| InvalidText { field: field.to_owned(), fault };
        let name = match String::from_utf8(percent_decode(name)) {
            Ok(name) => match refused_char(&name) {
                Some(c) => return Err(invalid(whole, TextFault::Control(c as u32))),
                None => name,
            },
            Err(_) => return Err(invalid(whole, TextFault::NotUtf8)),
        };
        match String::from_utf8(percent_decode(value)) {
            Ok(value) => {
                if let Some(c) = refused_char(&value) {
                    return Err(invalid(&name, TextFault::Control(c as u32)));
                }
            }
            Err(_) => return Err(invalid(&name, TextFault::NotUtf8)),
        }
    }
    Ok(())
}

/// `+` as a space and `%XX` as its byte; a `%` not followed by two hex digits is itself.
fn percent_decode(raw: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'+' => out.push(b' '),
            b'%' => match (raw.get(i + 1).copied().and_then(hex), raw.get(i + 2).copied().and_then(hex)) {
                (Some(hi), Some(lo)) => {
                    out.push(hi * 16 + lo);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy;
    use serde_json::json;

    #[test]
    fn nul_and_other_controls_are_refused_but_tab_and_newlines_are_not() {
        for c in ['\0', '\u{1}', '\u{1B}', '\u{7F}', '\u{85}', '\u{9F}'] {
            assert!(is_refused(c), "U+{:04X}", c as u32);
        }
        for c in ['\t', '\n', '\r', ' ', 'é', '\u{202E}', '\u{FFFD}'] {
            assert!(!is_refused(c), "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn a_json_document_names_the_path_of_its_first_invalid_string() {
        assert_eq!(check_json(&json!({"reason": "ok\nfine", "n": 1, "items": ["a"]})), Ok(()));
        let err = check_json(&json!({"filter": {"queues": ["a", "b\u{0}"]}})).unwrap_err();
        assert_eq!(err, InvalidText { field: "filter.queues[1]".into(), fault: TextFault::Control(0) });
        let err = check_json(&json!({"a": {"bad\u{1}key": 1}})).unwrap_err();
        assert_eq!(err.field, "a");
        assert_eq!(check_json(&json!("\u{0}")).unwrap_err().field, "body");
        assert!(!err.to_string().contains('\u{1}'), "the message never echoes the text");
        assert_eq!(check_json_except(&json!({"csv": "a\u{0}", "date": "x"}), &["csv"]), Ok(()));
        assert_eq!(check_json_except(&json!({"csv": "a", "note": "\u{0}"}), &["csv"]).unwrap_err().field, "note");
    }

    #[test]
    fn a_query_is_checked_once_decoded() {
        assert_eq!(check_query("action=a%20b&limit=5&x=%E2%82%AC+y&empty&="), Ok(()));
        assert_eq!(check_query("%zz=%4"), Ok(()), "a stray percent is itself");
        let err = check_query("limit=5&action=%00").unwrap_err();
        assert_eq!(err, InvalidText { field: "action".into(), fault: TextFault::Control(0) });
        assert_eq!(
            check_query("queue=%FF").unwrap_err(),
            InvalidText { field: "queue".into(), fault: TextFault::NotUtf8 }
        );
        assert_eq!(check_query("a%00b=1").unwrap_err().field, "query");
        assert_eq!(check_form(b"csrf=x&reason=%1B").unwrap_err().field, "reason");
        assert_eq!(check_query("a=%0"), Ok(()));
        assert_eq!(check_query("a=%"), Ok(()));
    }

    fn percent_encoded(text: &str) -> String {
        text.bytes()
            .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect()
    }

    proptest::proptest! {
        /// Any text, as a query value, a form value and a JSON string (and member name), is
        /// refused exactly when it holds a refused character, and the refusal names its field.
        #[test]
        fn any_text_is_refused_exactly_when_it_holds_a_control_character(
            text in "(?s).{0,24}",
            control in proptest::char::range('\0', '\u{9f}').prop_filter("a control", |c| is_refused(*c)),
            at in 0usize..25,
            insert in proptest::bool::ANY,
        ) {
            let text = if insert {
                let mut chars: Vec<char> = text.chars().collect();
                chars.insert(at.min(chars.len()), control);
                chars.into_iter().collect()
            } else {
                text
            };
            let refused = refused_char(&text).is_some();
            let query = check_query(&format!("limit=5&f={}", percent_encoded(&text)));
            proptest::prop_assert_eq!(query.is_err(), refused);
            if let Err(e) = query {
                proptest::prop_assert_eq!(e.field, "f");
            }
            proptest::prop_assert_eq!(check_form(format!("f={}", percent_encoded(&text)).as_bytes()).is_err(), refused);
            let body = check_json(&json!({"outer": {"f": [text.clone()]}}));
            proptest::prop_assert_eq!(body.is_err(), refused);
            if let Err(e) = body {
                proptest::prop_assert_eq!(e.field, "outer.f[0]");
            }
            proptest::prop_assert_eq!(check_json(&json!({ text.clone(): 1 })).is_err(), refused);
        }
    }
}
