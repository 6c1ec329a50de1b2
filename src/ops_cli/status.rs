//! `withdrawals status`: the overview as a table; with `--watch`, redrawn in place every
//! `--interval` seconds like `top`, for on-call with only a terminal.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use anyhow::bail;
use clap::Args;

use super::client::Client;
use super::format::{age, age_or_dash};
use super::Connection;
use crate::ops::routes;
use crate::ops::types::Overview;

/// Clears the terminal and moves the cursor home (ANSI `ED 2` + `CUP`): each frame starts here.
pub const CLEAR_SCREEN: &str = "\x1b[2J\x1b[H";

/// How long `--watch` waits for one overview before showing the error and trying again.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// `withdrawals status [--watch [--interval S]]`.
#[derive(Debug, Args, Clone)]
pub struct StatusArgs {
    /// Redraw the overview in place (like `top`) until Ctrl-C; not with --json.
    #[arg(long)]
    pub watch: bool,
    /// Seconds between redraws with --watch.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub interval: u64,
}

/// `withdrawals status`: the overview (withdrawals by state, dead letters, queues, breakers,
/// replays); with `--watch`, [`watch`].
pub async fn status(conn: &Connection, args: &StatusArgs) -> anyhow::Result<()> {
    if args.watch && conn.json {
        bail!("--watch redraws a table in place; it cannot be combined with --json");
    }
    let client = Client::new(conn)?;
    if args.watch {
        return watch(&client, Duration::from_secs(args.interval)).await;
    }
    let answer = client.get::<Overview>(&routes::OVERVIEW.path(&[]), &()).await?;
    let Some(overview) = answer.unless_json(conn.json) else { return Ok(()) };
    print!("{}", table(&overview));
    Ok(())
}

/// Redraws the overview every `every` until Ctrl-C (exit 0). A first fetch that fails is the
/// command's one-line error; a later one is shown as an error line above the last overview read,
/// and the next tick tries again. A fetch gets at most [`FETCH_TIMEOUT`] or `every`, the longer.
async fn watch(client: &Client, every: Duration) -> anyhow::Result<()> {
    let within = FETCH_TIMEOUT.max(every);
    let path = routes::OVERVIEW.path(&[]);
    let path = path.as_str();
    let fetch = || async move {
        let asked = client.get::<Overview>(path, &());
        match tokio::time::timeout(within, asked).await {
            Ok(answer) => answer.map(|a| a.typed),
            Err(_) => bail!("no answer from {} within {}s", client.describe(), within.as_secs()),
        }
    };
    let mut last = fetch().await?;
    let mut error: Option<String> = None;
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        draw(&last, error.as_deref(), every)?;
        let fetched = tokio::select! {
            _ = &mut interrupted => break,
            fetched = async { tokio::time::sleep(every).await; fetch().await } => fetched,
        };
        match fetched {
            Ok(overview) => (last, error) = (overview, None),
            Err(err) => error = Some(format!("{err:#}")),
        }
    }
    println!();
    Ok(())
}

/// One frame: clear, a header with the time, the error line if the last fetch failed, the table.
fn draw(overview: &Overview, error: Option<&str>, every: Duration) -> anyhow::Result<()> {
    let now = chrono::Utc::now().format("%Y-%m-%d %H:%M:%S UTC");
    let mut frame = format!("{CLEAR_SCREEN}withdrawals status — {now}, every {}s (Ctrl-C to stop)\n", every.as_secs());
    if let Some(error) = error {
        let _ = writeln!(frame, "error: {error} (showing the last overview read; trying again)");
    }
    frame.push('\n');
    frame.push_str(&table(overview));
    let mut out = std::io::stdout().lock();
    out.write_all(frame.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// The overview as the table `withdrawals status` prints.
fn table(overview: &Overview) -> String {
    let mut t = String::new();
    // Writing to a String cannot fail.
    let mut line = |text: String| {
        t.push_str(&text);
        t.push('\n');
    };
    if overview.sandbox {
        line("SANDBOX MODE: payouts go to an in-process provider mock; no money moves".into());
    }
    line("withdrawals            count  oldest".into());
    for w in &overview.withdrawals {
        line(format!("  {:<20} {:>5}  {}", w.state, w.count, age_or_dash(w.oldest_age_seconds)));
    }
    let dl = &overview.dead_letters;
    line(format!("dead letters open      {:>5}  {}", dl.open, age_or_dash(dl.oldest_open_age_seconds)));
    for c in &dl.by_category {
        line(format!("  {:<20} {:>5}  {}", c.category, c.open, age(c.oldest_age_seconds)));
    }
    line("queues                 scheduled  due  running  oldest due".into());
    for q in &overview.queues {
        line(format!(
            "  {:<20} {:>9}  {:>3}  {:>7}  {}",
            q.queue,
            q.scheduled,
            q.due,
            q.running,
            age_or_dash(q.oldest_due_age_seconds)
        ));
    }
    for b in &overview.breakers {
        line(format!("breaker {}: {}", b.name, b.state));
    }
    for r in &overview.replays {
        line(format!("replays {}: {} (pending items {})", r.status, r.runs, r.pending_items));
    }
    t
}
