//! Fuzzes the text rule of client input (`src/domain/input_text.rs`) as the query and body
//! extractors (`src/http/input.rs`) apply it: `check_query` on the input as a query string,
//! `check_form` on it as a form body, `check_json` on it as a JSON document (when it parses).
//!
//! Invariants:
//! - nothing panics;
//! - `check_json` refuses exactly the documents holding a string (or a member name) with a
//!   refused character, and names a field that is itself valid text;
//! - a query string built by percent-encoding the input (as text, lossy UTF-8) as one value is
//!   refused exactly when that text holds a refused character, and then names the parameter;
//! - `check_query` and `check_form` agree on every input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use withdrawals::domain::input_text::{check_form, check_json, check_query, refused_char};

fn any_refused(value: &Value) -> bool {
    match value {
        Value::String(s) => refused_char(s).is_some(),
        Value::Array(items) => items.iter().any(any_refused),
        Value::Object(map) => map.iter().any(|(k, v)| refused_char(k).is_some() || any_refused(v)),
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(value) = serde_json::from_slice::<Value>(data) {
        let checked = check_json(&value);
        assert_eq!(checked.is_err(), any_refused(&value), "check_json disagrees on {value:?}");
        if let Err(invalid) = checked {
            assert!(refused_char(&invalid.field).is_none(), "the field name is valid text");
        }
    }
    let text = String::from_utf8_lossy(data);
    let encoded: String = text
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect();
    let checked = check_query(&format!("limit=5&field={encoded}"));
    assert_eq!(checked.is_err(), refused_char(&text).is_some(), "check_query disagrees on {text:?}");
    if let Err(invalid) = checked {
        assert_eq!(invalid.field, "field");
    }
    if let Ok(raw) = std::str::from_utf8(data) {
        assert_eq!(check_query(raw), check_form(raw.as_bytes()).map_err(|mut e| {
            if e.field == "form" {
                e.field = "query".into();
            }
            e
        }));
    }
});
