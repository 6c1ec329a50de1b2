//! A day's totals per currency (SPEC §14.4), ours against the report's.

use std::collections::HashMap;

use crate::domain::settlement::LineStatus;
use crate::storage::{Db, DbTime, Result};
use crate::with_read_conn;

/// The withdrawal `w` is of a provider whose report of the day (`$3`) is imported.
const REPORTED: &str = "COALESCE((SELECT a.provider FROM provider_attempts a
                                  WHERE a.account_id = w.account_id AND a.withdrawal_id = w.id
                                  ORDER BY a.attempt_no DESC LIMIT 1), 'default')
                         IN (SELECT provider FROM settlement_reports WHERE report_date = $3)";

/// One currency's totals for a day, in minor units: ours and the report's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DayTotals {
    pub report_paid: i64,
    pub report_returned: i64,
    pub ours_paid: i64,
    pub ours_returned: i64,
}

/// A day's totals per currency (SPEC §14.4): the `paid` and `returned` lines of the latest
/// version of each provider's report of that day against the withdrawals we hold completed that
/// were paid that day (UTC: by the provider's `paid` line when one was matched to it, else by our
/// completion time) and the returns we recorded as returned that day — ours counting only the
/// withdrawals of the providers whose report of that day is imported (a withdrawal is its latest
/// attempt's provider's, SPEC §16; `default`'s when never attempted), so one provider's report is
/// compared with that provider's payouts. Lines of a transfer resolved `not_ours` are left out.
/// `None` when no report of that day was imported.
pub async fn day_totals(db: &Db, date: chrono::NaiveDate) -> Result<Option<HashMap<String, DayTotals>>> {
    let day = date.format("%Y-%m-%d").to_string();
    let start = DbTime(date.and_time(chrono::NaiveTime::MIN).and_utc());
    let end = start.plus(chrono::TimeDelta::days(1));
    let (report, ours, returns) = with_read_conn!(db, |conn| {
        let imported: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM settlement_reports WHERE report_date = $1")
            .bind(&day)
            .fetch_one(&mut *conn)
            .await?;
        if imported == 0 {
            return Ok(None);
        }
        // A transfer an operator found not ours (`unknown_transfer` resolved `not_ours`) is not
        // part of our books.
        let report: Vec<(String, LineStatus, i64)> = sqlx::query_as(
            "SELECT l.currency, l.status, CAST(SUM(l.amount_minor) AS BIGINT) FROM settlement_lines l
             JOIN settlement_reports r ON r.id = l.report_id
             WHERE r.report_date = $1
               AND r.version = (SELECT MAX(r2.version) FROM settlement_reports r2
                                WHERE r2.provider = r.provider AND r2.report_date = r.report_date)
               AND l.status IN ('paid', 'returned')
               AND NOT EXISTS (SELECT 1 FROM settlement_exceptions e
                               WHERE e.account_id = l.account_id AND e.kind = 'unknown_transfer'
                                 AND e.resolution = 'not_ours' AND e.transfer_id = l.transfer_id)
             GROUP BY l.currency, l.status",
        )
        .bind(&day)
        .fetch_all(&mut *conn)
        .await?;
        // A withdrawal is paid on the day the provider's `paid` line says; without one, on the
        // day we completed it.
        let ours: Vec<(String, i64)> = sqlx::query_as(&format!(
            "SELECT w.currency, CAST(SUM(w.amount) AS BIGINT) FROM withdrawals w
             LEFT JOIN (SELECT account_id, withdrawal_id, MIN(event_at) AS paid_at FROM settlement_lines
                        WHERE status = 'paid' AND withdrawal_id IS NOT NULL GROUP BY account_id, withdrawal_id) p
               ON p.account_id = w.account_id AND p.withdrawal_id = w.id
             WHERE w.status = 'completed'
               AND ((p.paid_at >= $1 AND p.paid_at < $2)
                    OR (p.paid_at IS NULL AND w.updated_at >= $1 AND w.updated_at < $2))
               AND {REPORTED}
             GROUP BY w.currency"
        ))
        .bind(start)
        .bind(end)
        .bind(&day)
        .fetch_all(&mut *conn)
        .await?;
        let returns: Vec<(String, i64)> = sqlx::query_as(&format!(
            "SELECT t.currency, CAST(SUM(t.amount_minor) AS BIGINT) FROM payout_returns t
             JOIN withdrawals w ON w.account_id = t.account_id AND w.id = t.withdrawal_id
             WHERE t.returned_at >= $1 AND t.returned_at < $2 AND {REPORTED}
             GROUP BY t.currency"
        ))
        .bind(start)
        .bind(end)
        .bind(&day)
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
