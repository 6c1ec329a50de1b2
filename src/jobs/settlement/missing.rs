//! The `missing_from_report` sweep, per provider: a withdrawal completed here, sent to that
//! provider, that none of its reports shows paid within the grace days.

use std::collections::HashSet;

use chrono::{TimeDelta, Utc};

use crate::config::SettlementSettings;
use crate::domain::settlement::ExceptionKind;
use crate::domain::{EvidenceSource, MissingEvidence};
use crate::storage::settlement::{self as store, NewException};
use crate::storage::{Db, DbTime};

/// Opens a `missing_from_report` exception for every withdrawal of `provider` (its latest attempt
/// went there) completed more than the grace days ago, on a day the provider's reports cover,
/// that no report line shows paid; another provider's withdrawals are that provider's reports'
/// business. Returns how many opened.
pub async fn sweep_missing(db: &Db, settings: &SettlementSettings, provider: &str) -> crate::storage::Result<usize> {
    let cutoff = DbTime::now().plus(-TimeDelta::days(settings.grace_days));
    // A line that names the withdrawal but waits for the provider's confirmation is not a
    // missing one.
    let awaiting: HashSet<String> = store::awaiting_keys(db, provider).await?.into_iter().collect();
    let mut opened = 0;
    loop {
        let batch = store::missing_from_reports(db, provider, cutoff, 500).await?;
        if batch.is_empty() {
            return Ok(opened);
        }
        let mut tx = db.begin().await?;
        let mut new_here = 0;
        for m in batch.iter().filter(|m| !awaiting.contains(&m.id.to_string())) {
            let e = MissingEvidence {
                source: EvidenceSource::SettlementReports,
                completed_at: m.completed_at.0,
                amount_minor: m.amount,
                currency: m.currency.clone(),
                grace_days: settings.grace_days,
                checked_at: Utc::now(),
            }
            .to_json();
            let detail = format!(
                "completed at {}, but no imported report of provider {provider} shows it paid within {} day(s)",
                m.completed_at.0.format("%Y-%m-%d %H:%M:%SZ"),
                settings.grace_days
            );
            let new = NewException {
                account_id: m.account_id,
                kind: ExceptionKind::MissingFromReport,
                dedupe_key: store::missing_key(m.id),
                withdrawal_id: Some(m.id),
                line_id: None,
                report_date: None,
                transfer_id: None,
                detail: &detail,
                evidence: &e,
            };
            new_here += usize::from(store::open_exception_at(&mut tx, provider, &new).await?);
        }
        tx.commit().await?;
        opened += new_here;
        if batch.len() < 500 || new_here == 0 {
            return Ok(opened);
        }
    }
}
