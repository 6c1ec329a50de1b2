//! `withdrawals status`: the overview as a table.

use super::client::Client;
use super::format::{age, age_or_dash};
use super::Connection;
use crate::ops::routes;
use crate::ops::types::Overview;

/// `withdrawals status`: the overview (withdrawals by state, dead letters, queues, breakers, replays).
pub async fn status(conn: &Connection) -> anyhow::Result<()> {
    let answer = Client::new(conn)?.get::<Overview>(&routes::OVERVIEW.path(&[]), &()).await?;
    let Some(overview) = answer.unless_json(conn.json) else { return Ok(()) };
    if overview.sandbox {
        println!("SANDBOX MODE: payouts go to an in-process provider mock; no money moves");
    }
    println!("withdrawals            count  oldest");
    for w in &overview.withdrawals {
        println!("  {:<20} {:>5}  {}", w.state, w.count, age_or_dash(w.oldest_age_seconds));
    }
    let dl = &overview.dead_letters;
    println!("dead letters open      {:>5}  {}", dl.open, age_or_dash(dl.oldest_open_age_seconds));
    for c in &dl.by_category {
        println!("  {:<20} {:>5}  {}", c.category, c.open, age(c.oldest_age_seconds));
    }
    println!("queues                 scheduled  due  running  oldest due");
    for q in &overview.queues {
        println!(
            "  {:<20} {:>9}  {:>3}  {:>7}  {}",
            q.queue,
            q.scheduled,
            q.due,
            q.running,
            age_or_dash(q.oldest_due_age_seconds)
        );
    }
    for b in &overview.breakers {
        println!("breaker {}: {}", b.name, b.state);
    }
    for r in &overview.replays {
        println!("replays {}: {} (pending items {})", r.status, r.runs, r.pending_items);
    }
    Ok(())
}
