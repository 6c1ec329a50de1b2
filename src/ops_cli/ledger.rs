//! `withdrawals ledger verify`: the ledger invariant, and a day against its settlement report.

use chrono::NaiveDate;
use clap::Subcommand;

use super::client::Client;
use super::Connection;
use crate::ops::routes;
use crate::ops::types::{LedgerCheck, LedgerQuery};

/// `withdrawals ledger …`.
#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Check the ledger invariant (SPEC §1.2) for every account and currency; with `--date`, also
    /// our totals of that day against its imported settlement report, per currency (SPEC §14.4).
    Verify {
        /// The day (YYYY-MM-DD, UTC) whose totals are checked against its settlement report.
        #[arg(long)]
        date: Option<NaiveDate>,
    },
}

pub async fn ledger(conn: &Connection, command: LedgerCommand) -> anyhow::Result<()> {
    match command {
        LedgerCommand::Verify { date } => {
            let query = LedgerQuery { date: date.map(|d| d.to_string()) };
            let answer = Client::new(conn)?.get::<LedgerCheck>(&routes::LEDGER_VERIFY.path(&[]), &query).await?;
            let Some(check) = answer.unless_json(conn.json) else { return Ok(()) };
            println!("ledger verified: every account and currency agrees with its entries and its funding");
            if let Some(date) = check.date {
                println!("{date}: our totals agree with the settlement report");
                println!(
                    "{:<8} {:>16} {:>16} {:>16} {:>16}",
                    "currency", "ours paid", "report paid", "ours returned", "report returned"
                );
                for t in &check.totals {
                    println!(
                        "{:<8} {:>16} {:>16} {:>16} {:>16}",
                        t.currency, t.ours_paid, t.report_paid, t.ours_returned, t.report_returned
                    );
                }
            }
            Ok(())
        }
    }
}
