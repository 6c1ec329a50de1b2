//! A provider's settlement report (SPEC §14.1), parsed and checked whole: the header exactly
//! `transfer_id,idempotency_key,reference,amount,currency,fee,status,event_at`, every amount a
//! plain positive decimal in its currency's minor units, every currency known, every status
//! `paid`, `failed` or `returned`, every time RFC 3339, and no line twice. One bad line refuses the
//! whole report, naming its line number, so nothing of a malformed report is ever applied.
//!
//! The report's digest (SHA-256 of its bytes) and each line's key (transfer, status, event time)
//! make an import idempotent. Pure: the caller fetches or reads the bytes.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use super::{Amount, AmountError, Currency};
use crate::text_enum;

text_enum! {
    /// A settlement import's progress (SPEC §14.1): queued, being matched, done, or failed.
    pub enum ImportState("settlement import state", 4) {
        Queued = "queued",
        Running = "running",
        Done = "done",
        Failed = "failed",
    }
}

impl ImportState {
    /// Done or failed: nothing more happens to the import.
    pub fn is_final(self) -> bool {
        matches!(self, ImportState::Done | ImportState::Failed)
    }
}

text_enum! {
    /// What matching made of one report line (SPEC §14.2).
    pub enum LineResult("settlement line result", 6) {
        /// The line agrees with the withdrawal (or a safe outcome was applied from it).
        Matched = "matched",
        /// The line's amount or currency (or reference) differs from the withdrawal's.
        AmountMismatch = "amount_mismatch",
        /// The provider paid what we hold as failed, or failed what we hold as completed.
        StatusMismatch = "status_mismatch",
        /// No withdrawal has this operation key.
        UnknownTransfer = "unknown_transfer",
        /// A return: re-credited once, or an exception when it cannot be.
        Returned = "returned",
        /// The same line, unchanged, was matched in an earlier import.
        SeenBefore = "seen_before",
    }
}

text_enum! {
    /// Where a settlement report came from.
    pub enum ReportSource("settlement report source", 2) {
        /// Fetched from the provider's reports endpoint.
        Provider = "provider",
        /// A file an operator supplied.
        File = "file",
    }
}

text_enum! {
    /// What matching applied from a report line, once the provider's live record agreed.
    pub enum LineApplied("settlement line effect", 3) {
        /// The withdrawal was completed.
        Completed = "completed",
        /// The withdrawal was failed and its hold released.
        Failed = "failed",
        /// The return was credited back to the customer (SPEC §14.3).
        ReturnCredited = "return_credited",
    }
}

text_enum! {
    /// The kinds of settlement exception operators resolve.
    pub enum ExceptionKind("settlement exception kind", 5) {
        AmountMismatch = "amount_mismatch",
        StatusMismatch = "status_mismatch",
        UnknownTransfer = "unknown_transfer",
        /// A return that could not be credited: the provider's record does not show it, or we
        /// never completed the withdrawal.
        Returned = "returned",
        /// Completed here, but no report shows it paid within the grace days.
        MissingFromReport = "missing_from_report",
    }
}

text_enum! {
    /// Where a settlement exception stands.
    pub enum ExceptionStatus("settlement exception status", 2) {
        Open = "open",
        Resolved = "resolved",
    }
}

text_enum! {
    /// Why an operator resolved a settlement exception. Resolving records the finding; it never
    /// moves money (money moves only through the review actions, checked live at the provider).
    pub enum Resolution("settlement resolution", 5) {
        /// The provider corrected its report (a later version matches).
        ProviderCorrected = "provider_corrected",
        /// The withdrawal was put right through review (complete, fail) or a return was applied.
        ResolvedInReview = "resolved_in_review",
        /// Not ours: a transfer of another merchant or a test line, confirmed with the provider.
        NotOurs = "not_ours",
        /// A known, accepted difference (e.g. a timing difference across days).
        AcceptedDifference = "accepted_difference",
        /// Raised with the provider; their case number is in the note.
        EscalatedToProvider = "escalated_to_provider",
    }
}

impl ExceptionKind {
    /// What a line that opens this exception is recorded as (`missing_from_report` has no line).
    pub fn line_result(self) -> Option<LineResult> {
        match self {
            ExceptionKind::AmountMismatch => Some(LineResult::AmountMismatch),
            ExceptionKind::StatusMismatch => Some(LineResult::StatusMismatch),
            ExceptionKind::UnknownTransfer => Some(LineResult::UnknownTransfer),
            ExceptionKind::Returned => Some(LineResult::Returned),
            ExceptionKind::MissingFromReport => None,
        }
    }
}

/// The header every report starts with (SPEC §14.1).
pub const REPORT_HEADER: [&str; 8] =
    ["transfer_id", "idempotency_key", "reference", "amount", "currency", "fee", "status", "event_at"];

text_enum! {
    /// A transfer's status change as the report states it.
    pub enum LineStatus("settlement line status", 3) {
        Paid = "paid",
        Failed = "failed",
        Returned = "returned",
    }
}

/// One line of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettlementLine {
    /// The line's number in the file (the header is line 1).
    pub line: u64,
    pub transfer_id: String,
    /// The operation key: our withdrawal id.
    pub idempotency_key: String,
    pub reference: String,
    pub amount: Amount,
    /// The provider's fee, in the currency's minor units (zero or more).
    pub fee_minor: i64,
    pub status: LineStatus,
    pub event_at: DateTime<Utc>,
}

impl SettlementLine {
    /// What makes a line the same line in another import or version of the report.
    pub fn key(&self) -> String {
        format!("{}|{}|{}", self.transfer_id, self.status.as_str(), self.event_at.timestamp_micros())
    }

    /// Everything the line says, digested: the same key with another digest is a corrected line.
    pub fn content_digest(&self) -> String {
        let text = format!(
            "{}|{}|{}|{}|{}|{}|{}|{}",
            self.transfer_id,
            self.idempotency_key,
            self.reference,
            self.amount.to_minor(),
            self.amount.currency().code(),
            self.fee_minor,
            self.status.as_str(),
            self.event_at.timestamp_micros()
        );
        hex::encode(Sha256::digest(text.as_bytes()))
    }
}

impl SettlementReport {
    /// The one UTC day every line happened on, if they all agree (none for an empty report).
    pub fn day(&self) -> Result<Option<chrono::NaiveDate>, ReportError> {
        let Some(first) = self.lines.first() else { return Ok(None) };
        let day = first.event_at.date_naive();
        match self.lines.iter().find(|l| l.event_at.date_naive() != day) {
            Some(other) => Err(refuse(
                other.line,
                format!("happened on {}, not on the report's day {day}", other.event_at.date_naive()),
            )),
            None => Ok(Some(day)),
        }
    }
}

/// A whole, well-formed report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettlementReport {
    /// Hex SHA-256 of the report's bytes: the same file imported twice has the same digest.
    pub digest: String,
    pub lines: Vec<SettlementLine>,
}

/// Why a report was refused, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ReportError {
    pub line: u64,
    pub reason: String,
}

fn refuse(line: u64, reason: impl Into<String>) -> ReportError {
    ReportError { line, reason: reason.into() }
}

/// Parses and checks a report; the first problem refuses it whole.
pub fn parse_report(bytes: &[u8]) -> Result<SettlementReport, ReportError> {
    parse_report_within(bytes, usize::MAX)
}

/// [`parse_report`] refusing a report of more than `max_lines` lines as soon as the reader
/// reaches line `max_lines + 1` (`SETTLEMENT_MAX_REPORT_LINES`), and any cell holding NUL or
/// another control character (a tab aside): text no column may store (PostgreSQL refuses NUL).
pub fn parse_report_within(bytes: &[u8], max_lines: usize) -> Result<SettlementReport, ReportError> {
    let digest = hex::encode(Sha256::digest(bytes));
    let mut reader = csv::ReaderBuilder::new().has_headers(true).flexible(false).from_reader(bytes);
    let header = reader.headers().map_err(|e| refuse(1, format!("unreadable header: {e}")))?;
    if header.iter().ne(REPORT_HEADER.iter().copied()) {
        return Err(refuse(1, format!("the header must be `{}`", REPORT_HEADER.join(","))));
    }
    let mut lines = Vec::new();
    let mut seen = HashSet::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            refuse(line, format!("not a CSV line of {} fields: {e}", REPORT_HEADER.len()))
        })?;
        let line = record.position().map_or(0, |p| p.line());
        if lines.len() >= max_lines {
            return Err(refuse(line, format!("the report has more than {max_lines} lines")));
        }
        if let Some(i) = record.iter().position(|cell| cell.chars().any(|c| c.is_control() && c != '\t')) {
            return Err(refuse(line, format!("`{}` holds a NUL or control character", REPORT_HEADER[i])));
        }
        let field = |i: usize| record.get(i).unwrap_or_default().trim();
        let non_empty = |i: usize| {
            let value = field(i);
            if value.is_empty() {
                Err(refuse(line, format!("`{}` is empty", REPORT_HEADER[i])))
            } else {
                Ok(value.to_owned())
            }
        };
        let currency =
            Currency::parse(field(4)).map_err(|_| refuse(line, format!("unknown currency `{}`", field(4))))?;
        let amount = Amount::parse_reported(field(3), currency)
            .map_err(|e| refuse(line, format!("amount `{}`: {e}", field(3))))?;
        let fee_minor =
            fee(field(5), currency).ok_or_else(|| refuse(line, format!("fee `{}` is not a fee", field(5))))?;
        let status = field(6)
            .parse::<LineStatus>()
            .ok()
            .ok_or_else(|| refuse(line, format!("status `{}` is not paid, failed or returned", field(6))))?;
        let event_at = DateTime::parse_from_rfc3339(field(7))
            .map_err(|_| refuse(line, format!("event_at `{}` is not an RFC 3339 time", field(7))))?
            .with_timezone(&Utc);
        let parsed = SettlementLine {
            line,
            transfer_id: non_empty(0)?,
            idempotency_key: non_empty(1)?,
            reference: field(2).to_owned(),
            amount,
            fee_minor,
            status,
            event_at,
        };
        if !seen.insert(parsed.key()) {
            return Err(refuse(
                line,
                format!("duplicates an earlier line ({} {})", parsed.transfer_id, status.as_str()),
            ));
        }
        lines.push(parsed);
    }
    Ok(SettlementReport { digest, lines })
}

/// A fee: zero or a plain positive decimal within the currency's minor units.
fn fee(raw: &str, currency: Currency) -> Option<i64> {
    match Amount::parse_reported(raw, currency) {
        Ok(fee) => Some(fee.to_minor()),
        Err(AmountError::NotPositive) if !raw.starts_with('-') => Some(0),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "transfer_id,idempotency_key,reference,amount,currency,fee,status,event_at\n";

    fn report(lines: &str) -> Vec<u8> {
        format!("{HEADER}{lines}").into_bytes()
    }

    #[test]
    fn a_well_formed_report_parses_with_line_numbers_keys_and_a_stable_digest() {
        let bytes = report(
            "tr_1,k1,r1,25.50,USD,0.00,paid,2026-12-03T10:00:00.000Z\n\
             tr_2,k2,r2,1000,JPY,0,failed,2026-12-03T11:00:00Z\n\
             tr_1,k1,r1,25.50,USD,0.00,returned,2026-12-03T12:00:00Z\n",
        );
        let parsed = parse_report(&bytes).unwrap();
        assert_eq!(parsed.lines.len(), 3);
        assert_eq!(parsed.lines[0].line, 2);
        assert_eq!(parsed.lines[0].amount.to_minor(), 2550);
        assert_eq!(parsed.lines[1].amount.to_minor(), 1000);
        assert_eq!(parsed.lines[2].status, LineStatus::Returned);
        assert_ne!(parsed.lines[0].key(), parsed.lines[2].key(), "paid and returned are two lines");
        assert_eq!(parsed.digest, parse_report(&bytes).unwrap().digest);
        assert_eq!(parsed.digest.len(), 64);
    }

    #[test]
    fn an_empty_report_is_a_report_with_no_lines() {
        assert!(parse_report(HEADER.as_bytes()).unwrap().lines.is_empty());
    }

    #[test]
    fn evidence_names_round_trip() {
        crate::assert_text_enum_round_trips!(LineResult);
        crate::assert_text_enum_round_trips!(LineApplied);
        crate::assert_text_enum_round_trips!(ReportSource);
        crate::assert_text_enum_round_trips!(ExceptionKind);
        crate::assert_text_enum_round_trips!(ExceptionStatus);
        crate::assert_text_enum_round_trips!(Resolution);
    }

    #[test]
    fn a_corrected_line_keeps_its_key_and_changes_its_digest_and_a_report_has_one_day() {
        let one = parse_report(&report("tr_1,k1,r1,25.50,USD,0.00,paid,2026-12-03T10:00:00Z\n")).unwrap();
        let two = parse_report(&report("tr_1,k1,r1,25.00,USD,0.00,paid,2026-12-03T10:00:00Z\n")).unwrap();
        assert_eq!(one.lines[0].key(), two.lines[0].key());
        assert_ne!(one.lines[0].content_digest(), two.lines[0].content_digest());
        assert_eq!(one.day().unwrap(), chrono::NaiveDate::from_ymd_opt(2026, 12, 3));
        let spread = parse_report(&report(
            "tr_1,k1,r1,25.50,USD,0.00,paid,2026-12-03T10:00:00Z\ntr_2,k2,r2,1.00,USD,0.00,paid,2026-12-04T00:00:01Z\n",
        ))
        .unwrap();
        assert_eq!(spread.day().unwrap_err().line, 3);
    }

    #[test]
    fn every_malformation_refuses_the_whole_report_naming_its_line() {
        let good = "tr_1,k1,r1,25.50,USD,0.00,paid,2026-12-03T10:00:00Z\n";
        let cases = [
            ("amount", "tr_2,k2,r2,not-a-number,USD,0.00,paid,2026-12-03T10:00:00Z\n"),
            ("amount", "tr_2,k2,r2,-5.00,USD,0.00,paid,2026-12-03T10:00:00Z\n"),
            ("amount", "tr_2,k2,r2,5.001,USD,0.00,paid,2026-12-03T10:00:00Z\n"),
            ("currency", "tr_2,k2,r2,5.00,XXX1,0.00,paid,2026-12-03T10:00:00Z\n"),
            ("status", "tr_2,k2,r2,5.00,USD,0.00,settled,2026-12-03T10:00:00Z\n"),
            ("event_at", "tr_2,k2,r2,5.00,USD,0.00,paid,yesterday\n"),
            ("fee", "tr_2,k2,r2,5.00,USD,-1,paid,2026-12-03T10:00:00Z\n"),
            ("transfer_id", ",k2,r2,5.00,USD,0.00,paid,2026-12-03T10:00:00Z\n"),
            ("fields", "tr_2,k2,r2,5.00,USD\n"),
            ("duplicates", good),
        ];
        for (what, bad) in cases {
            let err = parse_report(&report(&format!("{good}{bad}"))).unwrap_err();
            assert_eq!(err.line, 3, "{what}: {err}");
            assert!(err.to_string().contains(what), "{what}: {err}");
        }
        let err = parse_report(b"id,amount\nx,1\n").unwrap_err();
        assert_eq!((err.line, err.reason.contains("header")), (1, true));
    }
}
