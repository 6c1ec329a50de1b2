//! A day's totals per currency (SPEC §14.4), ours against the report's.

use std::collections::HashMap;

use crate::domain::settlement::LineStatus;
use crate::domain::SettlementReportId;
use crate::storage::{Db, DbTime, Result};
use crate::with_read_conn;

/// One currency's totals for a day, in minor units: ours and the report's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DayTotals {
    pub report_paid: i64,
    pub report_returned: i64,
    pub ours_paid: i64,
    pub ours_returned: i64,
}

/// A day's totals per currency (SPEC §14.4): the latest report version's `paid` and `returned`
/// lines against the withdrawals we hold completed that were paid that day (UTC: by the
/// provider's `paid` line when one was matched to it, else by our completion time) and the
/// returns we recorded as returned that day; lines of a transfer resolved `not_ours` are left
/// out. `None` when no report of that day was imported.
pub async fn day_totals(db: &Db, date: chrono::NaiveDate) -> Result<Option<HashMap<String, DayTotals>>> {
    let day = date.format("%Y-%m-%d").to_string();
    let start = DbTime(date.and_time(chrono::NaiveTime::MIN).and_utc());
    let end = start.plus(chrono::TimeDelta::days(1));
    let (report, ours, returns) = with_read_conn!(db, |conn| {
        let latest: Option<SettlementReportId> = sqlx::query_scalar(
            "SELECT id FROM settlement_reports WHERE report_date = $1 ORDER BY version DESC LIMIT 1",
        )
        .bind(&day)
        .fetch_optional(&mut *conn)
        .await?;
        let Some(latest) = latest else { return Ok(None) };
        // A transfer an operator found not ours (`unknown_transfer` resolved `not_ours`) is not
        // part of our books.
        let report: Vec<(String, LineStatus, i64)> = sqlx::query_as(
            "SELECT l.currency, l.status, CAST(SUM(l.amount_minor) AS BIGINT) FROM settlement_lines l
             WHERE l.report_id = $1 AND l.status IN ('paid', 'returned')
               AND NOT EXISTS (SELECT 1 FROM settlement_exceptions e
                               WHERE e.account_id = l.account_id AND e.kind = 'unknown_transfer'
                                 AND e.resolution = 'not_ours' AND e.transfer_id = l.transfer_id)
             GROUP BY l.currency, l.status",
        )
        .bind(latest)
        .fetch_all(&mut *conn)
        .await?;
        // A withdrawal is paid on the day the provider's `paid` line says; without one, on the
        // day we completed it.
        let ours: Vec<(String, i64)> = sqlx::query_as(
            "SELECT w.currency, CAST(SUM(w.amount) AS BIGINT) FROM withdrawals w
             LEFT JOIN (SELECT account_id, withdrawal_id, MIN(event_at) AS paid_at FROM settlement_lines
                        WHERE status = 'paid' AND withdrawal_id IS NOT NULL GROUP BY account_id, withdrawal_id) p
               ON p.account_id = w.account_id AND p.withdrawal_id = w.id
             WHERE w.status = 'completed'
               AND ((p.paid_at >= $1 AND p.paid_at < $2)
                    OR (p.paid_at IS NULL AND w.updated_at >= $1 AND w.updated_at < $2))
             GROUP BY w.currency",
        )
        .bind(start)
        .bind(end)
        .fetch_all(&mut *conn)
        .await?;
        let returns: Vec<(String, i64)> = sqlx::query_as(
            "SELECT currency, CAST(SUM(amount_minor) AS BIGINT) FROM payout_returns
             WHERE returned_at >= $1 AND returned_at < $2 GROUP BY currency",
        )
        .bind(start)
        .bind(end)
        .fetch_all(&mut *conn)
        .await?;
        (report, ours, returns)
    });
    let mut totals: HashMap<String, DayTotals> = HashMap::new();
    for (currency, status, sum) in report {
        let t = totals.entry(currency).or_default();
        if status == LineStatus::Paid {
            t.report_paid = sum;
        } else {
            t.report_returned = sum;
        }
    }
    for (currency, sum) in ours {
        totals.entry(currency).or_default().ours_paid = sum;
    }
    for (currency, sum) in returns {
        totals.entry(currency).or_default().ours_returned = sum;
    }
    Ok(Some(totals))
}
