//! `withdrawals dlq …`: dead-letter triage (list, summary, export, show, close) and the
//! filters `replay start` shares.

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};

use super::client::Client;
use super::format::{age, o};
use super::Connection;
use crate::ops::routes;
use crate::ops::types::{
    Closed, DeadLetterExportQuery, DeadLetterGroup, DeadLetterQuery, DeadLetterView, List, Page, ReasonRequest,
    SelectionFilter,
};

/// The dead-letter triage filters, shared by `dlq list` and `replay start`.
#[derive(Debug, Args, Clone)]
pub struct FilterArgs {
    #[arg(long)]
    pub queue: Option<String>,
    #[arg(long)]
    pub job_type: Option<String>,
    #[arg(long)]
    pub error_code: Option<String>,
    #[arg(long)]
    pub category: Option<String>,
    /// RFC 3339 time.
    #[arg(long)]
    pub failed_after: Option<DateTime<Utc>>,
    /// RFC 3339 time.
    #[arg(long)]
    pub failed_before: Option<DateTime<Utc>>,
}

impl From<FilterArgs> for SelectionFilter {
    fn from(f: FilterArgs) -> Self {
        SelectionFilter {
            queue: f.queue,
            job_type: f.job_type,
            error_code: f.error_code,
            category: f.category,
            failed_after: f.failed_after,
            failed_before: f.failed_before,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// Dead letters, newest first (or oldest first), filtered.
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// open (default), closed or all.
        #[arg(long)]
        state: Option<String>,
        /// What waited longest first, instead of the newest.
        #[arg(long)]
        oldest_first: bool,
        #[arg(long)]
        limit: Option<u32>,
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Open dead letters grouped by category and error code.
    Summary,
    /// For archive: every dead letter (open and closed) that failed before DATE, oldest first,
    /// as JSON lines on stdout — the redacted envelope with its handling events. Deletes nothing.
    Export {
        /// A day (`2026-11-01`, midnight UTC) or an RFC 3339 time.
        #[arg(long)]
        before: String,
        #[arg(long)]
        category: Option<String>,
    },
    /// One dead letter's envelope and handling events.
    Show { id: String },
    /// Close (archive) a dead letter.
    Close {
        id: String,
        #[arg(long)]
        reason: String,
    },
}

/// `--before`: a day (midnight UTC) or an RFC 3339 time.
fn parse_before(raw: &str) -> anyhow::Result<DateTime<Utc>> {
    if let Ok(day) = chrono::NaiveDate::parse_from_str(raw, "%Y-%m-%d") {
        return Ok(day.and_time(chrono::NaiveTime::MIN).and_utc());
    }
    DateTime::parse_from_rfc3339(raw)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| anyhow::anyhow!("--before must be a day (2026-11-01) or an RFC 3339 time, not `{raw}`"))
}

pub async fn dlq(conn: &Connection, command: DlqCommand) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    match command {
        DlqCommand::Export { before, category } => {
            let before = parse_before(&before)?;
            let mut cursor: Option<String> = None;
            let mut exported = 0_u64;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            loop {
                let query = DeadLetterExportQuery {
                    before: Some(before),
                    category: category.clone(),
                    limit: Some(500),
                    cursor: cursor.take(),
                };
                let answer = client.get::<Page<DeadLetterView>>(&routes::DEAD_LETTERS_EXPORT.path(&[]), &query).await?;
                for letter in &answer.json["data"].as_array().cloned().unwrap_or_default() {
                    // As the API wrote it: nothing of the envelope is re-rendered on the way out.
                    std::io::Write::write_all(&mut out, serde_json::to_string(letter)?.as_bytes())?;
                    std::io::Write::write_all(&mut out, b"\n")?;
                    exported += 1;
                }
                match answer.typed.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            std::io::Write::flush(&mut out)?;
            eprintln!("exported {exported} dead letters that failed before {}", before.to_rfc3339());
        }
        DlqCommand::List { filter, state, oldest_first, limit, cursor } => {
            let f = SelectionFilter::from(filter);
            let query = DeadLetterQuery {
                queue: f.queue,
                job_type: f.job_type,
                error_code: f.error_code,
                category: f.category,
                failed_after: f.failed_after,
                failed_before: f.failed_before,
                state,
                order: oldest_first.then(|| "oldest_first".to_owned()),
                limit: limit.map(i64::from),
                cursor,
            };
            let answer = client.get::<Page<DeadLetterView>>(&routes::DEAD_LETTERS.path(&[]), &query).await?;
            let Some(page) = answer.unless_json(conn.json) else { return Ok(()) };
            println!(
                "{:<38} {:<20} {:<28} {:<12} {:>7}  withdrawal",
                "id", "category", "error_code", "side_effect", "age"
            );
            for d in &page.data {
                println!(
                    "{:<38} {:<20} {:<28} {:<12} {:>7}  {}",
                    d.id.to_string(),
                    d.category,
                    d.error_code,
                    d.side_effect_state,
                    age(d.age_seconds),
                    o(&d.withdrawal_id)
                );
            }
            if let Some(next) = page.next_cursor {
                println!("more: --cursor {next}");
            }
        }
        DlqCommand::Summary => {
            let answer = client.get::<List<DeadLetterGroup>>(&routes::DEAD_LETTERS_SUMMARY.path(&[]), &()).await?;
            let Some(groups) = answer.unless_json(conn.json) else { return Ok(()) };
            println!("{:<20} {:<28} {:>6} {:>10}", "category", "error_code", "open", "oldest");
            for g in groups.data {
                println!(
                    "{:<20} {:<28} {:>6} {:>10}",
                    g.category,
                    g.error_code,
                    g.open,
                    age(g.oldest_open_age_seconds.unwrap_or(0))
                );
            }
        }
        DlqCommand::Show { id } => {
            let answer = client.get::<DeadLetterView>(&routes::DEAD_LETTER.path(&[&id]), &()).await?;
            // The envelope is shown whole, as the API wrote it (every field, in its order).
            let json = answer.json.clone();
            if answer.unless_json(conn.json).is_some() {
                println!("{}", serde_json::to_string_pretty(&json)?);
            }
        }
        DlqCommand::Close { id, reason } => {
            let answer =
                client.post::<_, Closed>(&routes::DEAD_LETTER_CLOSE.path(&[&id]), &ReasonRequest { reason }).await?;
            if answer.unless_json(conn.json).is_some() {
                println!("closed {id}");
            }
        }
    }
    Ok(())
}
