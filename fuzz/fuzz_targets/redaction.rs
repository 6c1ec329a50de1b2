//! Fuzzes the redaction rules (`src/redact.rs`): `redact::text` on the input as text (lossy
//! UTF-8, as the log writer reads it) and `redact::json` on the input as JSON — the document
//! itself when it parses, otherwise an object built from its lines (`key: value`).
//!
//! Invariants:
//! - nothing panics;
//! - both are idempotent: `text(text(x)) == text(x)`, `json(json(v)) == json(v)`;
//! - the digit rule, exactly as `src/redact.rs` implements it (the `NUMBERS` alternative
//!   `\b[0-9]{6,34}\b`, after the UUID alternative that keeps UUIDs whole): a run of **9 to 34**
//!   ASCII digits whose neighbours are not word characters (`\w`, Unicode, as the regex's `\b`)
//!   and which is not preceded by `-` (it could be a UUID's last group) does not survive `text`.
//!   The check applies when that digit string occurs only once in the input (elsewhere it could
//!   legitimately survive, e.g. inside a UUID). Runs of 35+ digits and runs glued to a letter or
//!   `_` are not masked by the current rules and are not asserted here;
//! - `json`, member by member: a member whose (ASCII) name contains secret, token, passw,
//!   credential, api_key/api-key/apikey or authorization is removed; `account_number`, `iban`,
//!   `acct`, `account_no` keep only their last four characters; other members are kept, strings
//!   become `text(s)`, numbers of 6+ digits are masked, everything else is unchanged. Names with
//!   non-ASCII characters, or that only may be matched by the rules' regexes (pin, cvv, private
//!   key, other account-ish names), are not asserted on.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use withdrawals::domain::mask_account_number;
use withdrawals::redact;

fuzz_target!(|data: &[u8]| {
    let input = String::from_utf8_lossy(data);
    let once = redact::text(&input);
    assert_eq!(redact::text(&once), once, "text is not idempotent on {input:?}");
    check_digit_runs(&input, &once);

    let doc = serde_json::from_slice::<Value>(data).unwrap_or_else(|_| object_from_lines(&input));
    let redacted = redact::json(&doc);
    assert_eq!(redact::json(&redacted), redacted, "json is not idempotent on {doc}");
    check_json(&doc, &redacted);
});

/// `{"message": input, key: value, …}` from the lines `key: value` (a value that parses as JSON
/// is used as such).
fn object_from_lines(input: &str) -> Value {
    let mut members = Map::new();
    members.insert("message".into(), Value::String(input.to_owned()));
    for line in input.lines() {
        if let Some((key, value)) = line.split_once(':') {
            let value = value.trim();
            let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()));
            members.insert(key.trim().to_owned(), value);
        }
    }
    Value::Object(members)
}

fn check_digit_runs(input: &str, output: &str) {
    let bytes = input.as_bytes();
    let mut start = 0;
    while start < bytes.len() {
        if !bytes[start].is_ascii_digit() {
            start += 1;
            continue;
        }
        let end = start + bytes[start..].iter().take_while(|b| b.is_ascii_digit()).count();
        let run = &input[start..end];
        let before = input[..start].chars().next_back();
        let after = input[end..].chars().next();
        let bounded = |c: Option<char>| c.is_none_or(|c| !regex_syntax::is_word_character(c));
        let masked_by_the_rules =
            (9..=34).contains(&run.len()) && bounded(before) && bounded(after) && before != Some('-');
        if masked_by_the_rules && input.find(run) == input.rfind(run) {
            assert!(!output.contains(run), "account-number-like run {run} survived: {input:?} -> {output:?}");
        }
        start = end;
    }
}

/// Names the documented rules certainly treat as secrets.
fn certainly_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["secret", "token", "passw", "credential", "api_key", "api-key", "apikey", "authorization"]
        .iter()
        .any(|word| name.contains(word))
}

/// Names the rules' regexes may treat as secrets or account numbers (a superset of the certain
/// ones, plus pin, cvv, private keys and anything account-ish), or that fold case beyond ASCII.
fn maybe_special(name: &str) -> bool {
    const WORDS: &[&str] = &[
        "secret",
        "token",
        "passw",
        "credential",
        "api",
        "authorization",
        "private",
        "cvv",
        "pin",
        "account",
        "iban",
        "acct",
    ];
    let lower = name.to_ascii_lowercase();
    !name.is_ascii() || WORDS.iter().any(|word| lower.contains(word))
}

/// Names the documented rules certainly treat as account numbers.
fn certainly_account(name: &str) -> bool {
    ["account_number", "iban", "acct", "account_no"].contains(&name)
}

fn check_json(input: &Value, output: &Value) {
    match (input, output) {
        (Value::Object(members), Value::Object(kept)) => {
            assert!(kept.keys().all(|k| members.contains_key(k)), "json added members: {output}");
            for (name, member) in members {
                let out = kept.get(name);
                if certainly_secret(name) {
                    assert!(out.is_none(), "secret member {name:?} kept: {output}");
                } else if certainly_account(name) && matches!(member, Value::String(_) | Value::Number(_)) {
                    let raw = match member {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    assert_eq!(out, Some(&Value::String(mask_account_number(&raw))), "member {name:?}");
                } else if !maybe_special(name) {
                    let out = out.unwrap_or_else(|| panic!("member {name:?} removed: {output}"));
                    check_json(member, out);
                }
            }
        }
        (Value::Array(items), Value::Array(out)) => {
            assert_eq!(items.len(), out.len());
            items.iter().zip(out).for_each(|(item, out)| check_json(item, out));
        }
        (Value::String(s), out) => assert_eq!(out, &Value::String(redact::text(s))),
        (Value::Number(n), out) => {
            let digits = n.to_string();
            if digits.len() >= 6 && digits.bytes().all(|b| b.is_ascii_digit()) {
                assert_eq!(out, &Value::String(mask_account_number(&digits)));
            } else {
                assert_eq!(out, input);
            }
        }
        (Value::Bool(_) | Value::Null, out) => assert_eq!(out, input),
        (input, output) => panic!("json changed the shape of {input} into {output}"),
    }
}
