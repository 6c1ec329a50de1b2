//! Redaction as a property: random payloads and messages carrying account numbers and secrets go
//! through every path that writes a dead letter (the envelope builder) or a log line (the
//! redacting writer behind the tracing subscriber), and none of them comes out whole.

use std::io::Write;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use serde_json::json;
use withdrawals::dead_letter::{envelope, Category, Failure};
use withdrawals::redact::RedactingWriter;
use withdrawals::storage::attempts::SideEffect;
use withdrawals::storage::jobs::ClaimedJob;

fn account_number() -> impl Strategy<Value = String> {
    prop_oneof!["[0-9]{8,17}", "GB[0-9]{2}[A-Z]{4}[0-9]{14}", "DE[0-9]{20}",]
}

fn secret() -> impl Strategy<Value = String> {
    "[A-Za-z0-9]{24,40}".prop_map(|s| format!("sk_{s}"))
}

/// Where a secret may appear in free text, in the forms the redactor recognises.
fn secret_in_text(secret: &str, form: u8) -> String {
    match form % 5 {
        0 => format!("Authorization: Bearer {secret}"),
        1 => format!("api_key={secret}"),
        2 => format!("\"token\": \"{secret}\""),
        3 => format!("password={secret}"),
        _ => format!("client_secret: {secret}"),
    }
}

fn job_with(payload: Vec<u8>) -> ClaimedJob {
    ClaimedJob {
        id: withdrawals::domain::JobId::new(),
        account_id: withdrawals::domain::AccountId::SYSTEM,
        queue: "payouts".into(),
        kind: "submit_payout".into(),
        payload,
        payload_version: 1,
        attempts: 1,
        receives: 1,
        first_attempt_at: None,
        lease_token: withdrawals::domain::LeaseToken::random(),
        correlation_id: "c".into(),
        withdrawal_id: None,
        lease_expiries: 0,
        handler_errors: 0,
    }
}

/// A writer that collects what the redacting writer lets through.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn no_account_number_or_secret_survives_a_dead_letter(
        account in account_number(),
        token in secret(),
        form in any::<u8>(),
        key in prop_oneof![Just("account_number"), Just("iban"), Just("note"), Just("acct")],
        secret_key in prop_oneof![Just("api_key"), Just("token"), Just("password"), Just("Authorization"), Just("client_secret")],
        valid_json in any::<bool>(),
    ) {
        let payload = json!({
            "withdrawal_id": uuid::Uuid::now_v7(),
            "destination": {"type": "bank_account", key: account.clone(), "bank_code": "021000021"},
            secret_key: token.clone(),
            "message": format!("paying {account} with {}", secret_in_text(&token, form)),
        });
        let bytes = if valid_json { serde_json::to_vec(&payload).unwrap() } else {
            format!("garbage {{ {account} {} ", secret_in_text(&token, form)).into_bytes()
        };
        let failure = Failure {
            category: if valid_json { Category::DependencyRejected } else { Category::BadPayload },
            error_code: "invalid_account".into(),
            error_class: "permanent",
            message: format!("provider said no for {account}; {}", secret_in_text(&token, form)),
            stack: Some(format!("at handler ({})", secret_in_text(&token, form.wrapping_add(1)))),
            side_effect: Some(SideEffect::Confirmed),
        };

        let letter = envelope(&job_with(bytes), &failure, SideEffect::Confirmed, "host");

        let stored = format!(
            "{:?} {} {} {:?} {}",
            letter.payload.as_ref().map(|p| p.0.to_string()),
            letter.error_message,
            letter.error_code,
            letter.stack,
            String::from_utf8_lossy(letter.raw_payload.as_deref().unwrap_or_default()),
        );
        prop_assert!(!stored.contains(&account), "account number leaked: {stored}");
        prop_assert!(!stored.contains(&token), "secret leaked: {stored}");
        let last4 = &account[account.len() - 4..];
        prop_assert!(stored.contains(last4), "the last four stay for operators: {stored}");
    }

    #[test]
    fn no_account_number_or_secret_survives_a_log_line(
        account in account_number(),
        token in secret(),
        form in any::<u8>(),
        json_format in any::<bool>(),
    ) {
        let captured = Captured::default();
        let sink = captured.clone();
        let make = move || RedactingWriter::new(sink.clone());
        let builder = tracing_subscriber::fmt().with_ansi(false).with_writer(make);
        let dispatch = if json_format {
            tracing::Dispatch::new(builder.json().finish())
        } else {
            tracing::Dispatch::new(builder.finish())
        };
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::info!(account_number = %account, detail = %secret_in_text(&token, form), "paying {account}");
            tracing::warn!(error = %format!("provider rejected {account}: {}", secret_in_text(&token, form.wrapping_add(2))), "failed");
        });

        let out = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        prop_assert!(!out.is_empty());
        prop_assert!(!out.contains(&account), "account number leaked: {out}");
        prop_assert!(!out.contains(&token), "secret leaked: {out}");
    }
}
