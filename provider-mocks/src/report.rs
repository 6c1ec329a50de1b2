//! Settlement reports (SPEC §14.1): the CSV the provider publishes per UTC
//! day, one line per status change (`paid`, `failed`, `returned`), built from
//! the mock's ground truth; and the report discrepancy faults, which change
//! only what the report says, never the transfers API.

use chrono::{DateTime, NaiveDate, NaiveTime, SecondsFormat, Utc};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// The report's header, exactly as SPEC §14.1 gives it.
pub const REPORT_HEADER: [&str; 8] =
    ["transfer_id", "idempotency_key", "reference", "amount", "currency", "fee", "status", "event_at"];

/// The report discrepancy faults in force; every one applies to every report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReportFaultConfig {
    pub rules: Vec<ReportFault>,
}

/// One way the report differs from the ground truth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ReportFault {
    /// The `paid` line of the transfer under this key is left out.
    OmitPaid { idempotency_key: String },
    /// Every line of the transfer under this key shows `amount`.
    WrongAmount {
        idempotency_key: String,
        #[serde(with = "rust_decimal::serde::str")]
        amount: Decimal,
    },
    /// A `paid` line, at noon UTC of `date`, for a transfer no withdrawal
    /// asked for (`reference` defaults to `transfer_id`).
    UnknownTransfer {
        transfer_id: String,
        idempotency_key: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reference: Option<String>,
        #[serde(with = "rust_decimal::serde::str")]
        amount: Decimal,
        currency: String,
        date: NaiveDate,
    },
    /// A `returned` line right after the `paid` line (same day, same
    /// `event_at`) of a transfer that is still `paid`.
    SpuriousReturn { idempotency_key: String },
    /// Every line of the transfer under this key appears twice in a row.
    DuplicateLine { idempotency_key: String },
    /// A line whose amount is not a decimal (`amount`, `"not-a-number"` by
    /// default), at noon UTC of `date`.
    MalformedLine {
        date: NaiveDate,
        #[serde(default = "not_a_number")]
        amount: String,
    },
}

fn not_a_number() -> String {
    "not-a-number".to_string()
}

/// One line of a report; `amount` is text so a malformed line fits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReportLine {
    pub transfer_id: String,
    pub idempotency_key: String,
    pub reference: String,
    pub amount: String,
    pub currency: String,
    pub fee: String,
    pub status: crate::TransferStatus,
    pub at: DateTime<Utc>,
    /// Tie-breaker for lines with the same `at` (recording order).
    pub seq: u64,
}

/// A zero fee written with the currency's minor units (`0.00`, `0` for JPY).
pub(crate) fn zero_fee(currency: &str) -> String {
    let exponent = match currency {
        "BIF" | "CLP" | "DJF" | "GNF" | "ISK" | "JPY" | "KMF" | "KRW" | "PYG" | "RWF" | "UGX" | "VND" | "VUV"
        | "XAF" | "XOF" | "XPF" => 0,
        "BHD" | "IQD" | "JOD" | "KWD" | "LYD" | "OMR" | "TND" => 3,
        _ => 2,
    };
    Decimal::new(0, exponent).to_string()
}

/// Noon UTC of `date`: where lines added by faults sit in the day.
pub(crate) fn noon(date: NaiveDate) -> DateTime<Utc> {
    date.and_time(NaiveTime::from_hms_opt(12, 0, 0).expect("valid time")).and_utc()
}

/// Parses a `YYYY-MM-DD` date, strictly (zero-padded, nothing around it).
pub(crate) fn parse_date(text: &str) -> Option<NaiveDate> {
    if text.len() != 10 {
        return None;
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()
}

/// Writes the header and `lines` (already in event order) as CSV.
pub(crate) fn to_csv(lines: &[ReportLine]) -> Result<String, csv::Error> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer.write_record(REPORT_HEADER)?;
    for line in lines {
        let at = line.at.to_rfc3339_opts(SecondsFormat::Millis, true);
        writer.write_record([
            line.transfer_id.as_str(),
            &line.idempotency_key,
            &line.reference,
            &line.amount,
            &line.currency,
            &line.fee,
            line.status.as_str(),
            &at,
        ])?;
    }
    let bytes = writer.into_inner().map_err(|e| csv::Error::from(e.into_error()))?;
    Ok(String::from_utf8(bytes).expect("CSV of UTF-8 fields is UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_strict_and_fees_follow_the_currency() {
        assert_eq!(parse_date("2024-03-01"), NaiveDate::from_ymd_opt(2024, 3, 1));
        assert_eq!(parse_date("2024-3-1"), None);
        assert_eq!(parse_date("2024-02-30"), None);
        assert_eq!(parse_date(""), None);
        assert_eq!(zero_fee("USD"), "0.00");
        assert_eq!(zero_fee("JPY"), "0");
        assert_eq!(zero_fee("KWD"), "0.000");
    }

    #[test]
    fn fault_json_round_trips() {
        let json = r#"{"rules":[{"type":"omit_paid","idempotency_key":"k1"},
            {"type":"wrong_amount","idempotency_key":"k2","amount":"11.00"},
            {"type":"unknown_transfer","transfer_id":"tr_x","idempotency_key":"kx","amount":"5.00",
             "currency":"USD","date":"2024-03-01"},
            {"type":"spurious_return","idempotency_key":"k3"},
            {"type":"duplicate_line","idempotency_key":"k4"},
            {"type":"malformed_line","date":"2024-03-01"}]}"#;
        let config: ReportFaultConfig = serde_json::from_str(json).unwrap();
        assert_eq!(config.rules.len(), 6);
        assert_eq!(
            config.rules[5],
            ReportFault::MalformedLine { date: NaiveDate::from_ymd_opt(2024, 3, 1).unwrap(), amount: not_a_number() }
        );
        let again: ReportFaultConfig = serde_json::from_value(serde_json::to_value(&config).unwrap()).unwrap();
        assert_eq!(again, config);
    }
}
