//! `withdrawals breakers`: every provider breaker across the cluster, and its kill switch.

use clap::Subcommand;

use super::client::Client;
use super::Connection;
use crate::ops::routes;
use crate::ops::types::{BreakerChanged, BreakerView, List, ReasonRequest};

/// `withdrawals breakers`: each provider breaker's state as the API process sees it.
/// The kill switch of a provider breaker (SPEC §8; admin).
#[derive(Debug, Subcommand)]
pub enum BreakersCommand {
    /// Reject every provider call of every process until released (payouts are deferred, not
    /// failed).
    ForceOpen {
        name: String,
        #[arg(long)]
        reason: String,
    },
    /// Let every call through and count nothing, whatever the provider answers, until released.
    ForceClosed {
        name: String,
        #[arg(long)]
        reason: String,
    },
    /// Hand the breaker back to its own judgement (closed, counting afresh).
    Release {
        name: String,
        #[arg(long)]
        reason: String,
    },
}

fn print_breaker(b: &BreakerView) {
    println!("{}  {}", b.name, b.state);
    if let Some(o) = &b.forced {
        println!("  override {} by {} at {}: {}", o.mode, o.set_by_name, o.set_at.to_rfc3339(), o.reason);
    }
    for p in &b.processes {
        println!(
            "  {:<7} {:<14} {:<24} since {}  ({}, {})",
            p.role,
            p.state,
            p.host,
            p.since.to_rfc3339(),
            p.process_id,
            p.version
        );
    }
}

/// `withdrawals breakers`: every breaker across the cluster; with a subcommand, the kill switch.
pub async fn breakers(conn: &Connection, command: Option<BreakersCommand>) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    let (name, action, reason) = match command {
        None => {
            let answer = client.get::<List<BreakerView>>(&routes::BREAKERS.path(&[]), &()).await?;
            for b in answer.unless_json(conn.json).map(|l| l.data).unwrap_or_default() {
                print_breaker(&b);
            }
            return Ok(());
        }
        Some(BreakersCommand::ForceOpen { name, reason }) => (name, routes::BREAKER_FORCE_OPEN, reason),
        Some(BreakersCommand::ForceClosed { name, reason }) => (name, routes::BREAKER_FORCE_CLOSED, reason),
        Some(BreakersCommand::Release { name, reason }) => (name, routes::BREAKER_RELEASE, reason),
    };
    let path = action.path(&[&name]);
    let answer = client.post::<_, BreakerChanged>(&path, &ReasonRequest { reason }).await?;
    if let Some(changed) = answer.unless_json(conn.json) {
        println!("{}: {} (every process obeys within one poll interval)", changed.name, changed.action);
        print_breaker(&changed.breaker);
    }
    Ok(())
}
