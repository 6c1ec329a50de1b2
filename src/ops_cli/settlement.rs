//! `withdrawals settlement import|import-status|reports|exceptions|show|resolve|credit-return`
//! (SPEC §14): thin clients of `/ops/v1/settlement`, like the other operator commands. An import
//! sends either only the day (the API fetches the report from the provider) or a file's text,
//! and `--provider NAME` for whose report it is (SPEC §16; the API's primary provider without it,
//! and an unknown name is the API's 422 `unknown_provider`, one line and a non-zero exit); the
//! API answers 202 with the queued import, and the command follows its progress until the job has
//! finished it (`--no-wait` prints the id instead; `import-status ID` reads it later). A refused
//! report is the API's `report_refused` naming the line, and the command exits non-zero.

use std::path::PathBuf;

use anyhow::Context;
use chrono::NaiveDate;
use clap::builder::PossibleValue;
use clap::{Args, Subcommand, ValueEnum};

use super::client::Client;
use super::format::{age, at, at_or_dash, o};
use super::Connection;
use crate::ops::routes;
use crate::ops::types::{
    CreditReturnRequest, ExceptionKind, ExceptionQuery, ExceptionView, ImportRequest, ImportSummary, ImportView, List,
    Page, ReportQuery, ReportView, Resolution, ResolveExceptionRequest,
};

// The names are the API's own (`text_enum!`), so the CLI offers exactly what the API accepts.
impl ValueEnum for Resolution {
    fn value_variants<'a>() -> &'a [Self] {
        &Resolution::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.as_str()))
    }
}

impl ValueEnum for ExceptionKind {
    fn value_variants<'a>() -> &'a [Self] {
        &ExceptionKind::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.as_str()))
    }
}

#[derive(Debug, Subcommand)]
pub enum SettlementCommand {
    /// Import a day's settlement report: `--date D` asks the API to fetch it from the provider;
    /// `--file PATH` sends a report file's text (with `--date D`, the day its lines must be).
    /// `--provider NAME` says whose report it is (the primary provider without it): its lines
    /// match only that provider's withdrawals. The same report twice changes nothing; a malformed
    /// one is refused whole, naming its line.
    Import {
        #[command(flatten)]
        source: ImportArgs,
        /// The provider whose report it is (SPEC §16): fetched from it, matched only to the
        /// withdrawals sent to it. Without it, the primary provider (`default` with one).
        #[arg(long)]
        provider: Option<String>,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// An import's state and progress (lines done of all, matched, exceptions).
    ImportStatus { id: String },
    /// Imported report versions, newest first.
    Reports {
        /// Only this day's versions (YYYY-MM-DD).
        #[arg(long)]
        date: Option<NaiveDate>,
        /// Only this provider's reports.
        #[arg(long)]
        provider: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Settlement exceptions, oldest first (open ones unless `--status` says otherwise).
    Exceptions {
        #[arg(long, value_enum)]
        kind: Option<ExceptionKind>,
        /// Only this provider's exceptions.
        #[arg(long)]
        provider: Option<String>,
        #[arg(long, value_parser = ["open", "resolved", "all"])]
        status: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
        /// Where the previous page ended (printed under it).
        #[arg(long)]
        cursor: Option<String>,
    },
    /// One exception with all its fields and the evidence it was opened on.
    Show { id: String },
    /// Resolve an open exception: why, and a note saying what was found or done. It records the
    /// finding and moves no money (money moves only through `withdrawals review`).
    Resolve {
        id: String,
        #[arg(long, value_enum)]
        reason: Resolution,
        #[arg(long)]
        note: String,
    },
    /// Credit the return a `returned` exception refused, now that the provider's record shows it:
    /// the API asks the provider at once and credits only a return of the withdrawal's own
    /// amount and currency, resolving the exception.
    CreditReturn {
        id: String,
        #[arg(long)]
        note: String,
    },
}

/// Where the report comes from: the provider (`--date` alone) or a file (`--file`, `--date`
/// optional). One of them is required.
#[derive(Debug, Args)]
#[group(id = "source", required = true, multiple = true)]
pub struct ImportArgs {
    /// The report's day (YYYY-MM-DD, UTC).
    #[arg(long)]
    date: Option<NaiveDate>,
    /// A report file (CSV) to import instead of fetching it from the provider.
    #[arg(long)]
    file: Option<PathBuf>,
}

/// How the command follows the import's job.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Print the queued import's id and return, without waiting for the job.
    #[arg(long)]
    no_wait: bool,
    /// How long to wait for the job to finish the import, in seconds.
    #[arg(long, default_value_t = 600)]
    wait_secs: u64,
}

impl ImportArgs {
    fn request(&self, provider: Option<String>) -> anyhow::Result<ImportRequest> {
        let csv = match &self.file {
            Some(path) => {
                Some(std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?)
            }
            None => None,
        };
        Ok(ImportRequest { date: self.date, csv, provider })
    }
}

pub async fn settlement(conn: &Connection, command: SettlementCommand) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    match command {
        SettlementCommand::Import { source, provider, wait: args } => {
            let request = source.request(provider)?;
            let queued = client.post::<_, ImportView>(&routes::SETTLEMENT_IMPORTS.path(&[]), &request).await?;
            if args.no_wait {
                if let Some(view) = queued.unless_json(conn.json) {
                    println!(
                        "import {} queued: follow it with `withdrawals settlement import-status {}`",
                        view.id, view.id
                    );
                }
                return Ok(());
            }
            let path = routes::SETTLEMENT_IMPORT.path(&[&queued.typed.id]);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(args.wait_secs);
            let mut shown = -1;
            let answer = loop {
                let answer = client.get::<ImportView>(&path, &()).await?;
                let view = &answer.typed;
                if view.finished() {
                    break answer;
                }
                if std::time::Instant::now() > deadline {
                    anyhow::bail!(
                        "import {} is still {} after {} s: see `withdrawals settlement import-status {}`",
                        view.id,
                        view.state,
                        args.wait_secs,
                        view.id
                    );
                }
                if !conn.json && view.lines_done != shown {
                    eprintln!("import {}: {} — {} of {} lines done", view.id, view.state, view.lines_done, view.lines);
                    shown = view.lines_done;
                }
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            };
            let failed = answer
                .typed
                .error
                .clone()
                .filter(|_| answer.typed.state == crate::domain::settlement::ImportState::Failed);
            if let Some(view) = answer.unless_json(conn.json) {
                print_import(&view);
            }
            if let Some(error) = failed {
                anyhow::bail!("{error}");
            }
        }
        SettlementCommand::ImportStatus { id } => {
            let answer = client.get::<ImportView>(&routes::SETTLEMENT_IMPORT.path(&[&id]), &()).await?;
            if let Some(view) = answer.unless_json(conn.json) {
                print_import(&view);
            }
        }
        SettlementCommand::CreditReturn { id, note } => {
            let path = routes::SETTLEMENT_EXCEPTION_CREDIT_RETURN.path(&[&id]);
            let answer = client.post::<_, ExceptionView>(&path, &CreditReturnRequest { note }).await?;
            if let Some(e) = answer.unless_json(conn.json) {
                println!("return credited; exception {} resolved as {}", e.id, o(&e.resolution));
            }
        }
        SettlementCommand::Reports { date, provider, limit } => {
            let query = ReportQuery { date: date.map(|d| d.to_string()), provider, limit: limit.map(i64::from) };
            let answer = client.get::<List<ReportView>>(&routes::SETTLEMENT_REPORTS.path(&[]), &query).await?;
            let Some(reports) = answer.unless_json(conn.json) else { return Ok(()) };
            println!(
                "{:<10} {:<12} {:>3} {:<12} {:<8} {:>6} {:<24} {:<27}  imported by",
                "date", "provider", "ver", "digest", "source", "lines", "added/removed/changed", "imported at"
            );
            for r in reports.data {
                let count = |field: &str| r.differences.get(field).and_then(|v| v.as_u64()).unwrap_or(0);
                println!(
                    "{:<10} {:<12} {:>3} {:<12} {:<8} {:>6} {:<24} {:<27}  {}",
                    r.date,
                    r.provider,
                    r.version,
                    short(&r.digest),
                    r.source,
                    r.lines,
                    format!("{}/{}/{}", count("added"), count("removed"), count("changed")),
                    at(r.imported_at),
                    r.imported_by
                );
            }
        }
        SettlementCommand::Exceptions { kind, provider, status, limit, cursor } => {
            let query = ExceptionQuery {
                kind: kind.map(|k| k.as_str().to_owned()),
                provider,
                status,
                limit: limit.map(i64::from),
                cursor,
            };
            let answer = client.get::<Page<ExceptionView>>(&routes::SETTLEMENT_EXCEPTIONS.path(&[]), &query).await?;
            let Some(page) = answer.unless_json(conn.json) else { return Ok(()) };
            println!(
                "{:<36} {:<19} {:<12} {:<8} {:>5} {:<36} {:<24}  detail",
                "id", "kind", "provider", "status", "age", "withdrawal", "transfer"
            );
            for e in &page.data {
                println!(
                    "{:<36} {:<19} {:<12} {:<8} {:>5} {:<36} {:<24}  {}",
                    e.id.to_string(),
                    e.kind.as_str(),
                    e.provider,
                    e.status.as_str(),
                    age(e.age_seconds),
                    o(&e.withdrawal_id),
                    o(&e.transfer_id),
                    e.detail
                );
            }
            if let Some(next) = page.next_cursor {
                println!("more: --cursor {next}");
            }
        }
        SettlementCommand::Show { id } => {
            let answer = client.get::<ExceptionView>(&routes::SETTLEMENT_EXCEPTION.path(&[&id]), &()).await?;
            if let Some(e) = answer.unless_json(conn.json) {
                print_exception(&e)?;
            }
        }
        SettlementCommand::Resolve { id, reason, note } => {
            let path = routes::SETTLEMENT_EXCEPTION_RESOLVE.path(&[&id]);
            let answer = client.post::<_, ExceptionView>(&path, &ResolveExceptionRequest { reason, note }).await?;
            if let Some(e) = answer.unless_json(conn.json) {
                println!("resolved {} ({}) as {}", e.id, e.kind, o(&e.resolution));
            }
        }
    }
    Ok(())
}

/// The first 12 hex digits of a digest: enough to tell versions apart in a table.
fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

/// Where a report came from: fetched from its provider, or a file given as that provider's.
fn origin(source: &str, provider: &str) -> String {
    match source {
        "provider" => format!("fetched from provider {provider}"),
        other => format!("from a {other}, as provider {provider}'s"),
    }
}

fn print_import(v: &ImportView) {
    println!(
        "import {} of {} ({}): {} — {} of {} lines done, {} matched, {} exceptions",
        v.id,
        v.date,
        origin(v.source.as_str(), &v.provider),
        v.state,
        v.lines_done,
        v.lines,
        v.matched,
        v.exceptions
    );
    if let Some(error) = &v.error {
        println!("error: {error}");
    }
    if let Some(summary) = &v.summary {
        print_summary(summary);
    }
}

fn print_summary(s: &ImportSummary) {
    if s.already_imported {
        println!(
            "the report of {} is already imported (version {}, digest {}, {}): nothing new stored",
            s.date,
            s.version,
            short(&s.digest),
            origin(s.source.as_str(), &s.provider)
        );
    } else {
        println!(
            "imported the report of {}: version {}, digest {}, {}",
            s.date,
            s.version,
            short(&s.digest),
            origin(s.source.as_str(), &s.provider)
        );
    }
    println!("provider: {}", s.provider);
    println!("lines: {} ({} seen before)", s.lines, s.seen_before);
    let d = &s.differences;
    println!("differences from the previous version: {} added, {} removed, {} changed", d.added, d.removed, d.changed);
    let m = &s.matching;
    println!(
        "matching: matched {}, completed {}, failed {}, returns credited {} ({} already), exceptions opened {}, awaiting confirmation {}",
        m.matched,
        m.completed,
        m.failed,
        m.returns_credited,
        m.returns_already_applied,
        m.exceptions_opened,
        m.awaiting_confirmation
    );
    println!("missing from reports: exceptions opened {}", s.missing_opened);
    if m.exceptions_opened + s.missing_opened > 0 {
        match s.provider.as_str() {
            crate::config::providers::DEFAULT_PROVIDER => println!("see them with: withdrawals settlement exceptions"),
            named => println!("see them with: withdrawals settlement exceptions --provider {named}"),
        }
    }
}

fn print_exception(e: &ExceptionView) -> anyhow::Result<()> {
    println!("id:          {}", e.id);
    println!("kind:        {}", e.kind);
    println!("provider:    {}", e.provider);
    println!("status:      {}", e.status);
    println!("withdrawal:  {}", o(&e.withdrawal_id));
    println!("report date: {}", o(&e.report_date));
    println!("transfer:    {}", o(&e.transfer_id));
    println!("detail:      {}", e.detail);
    println!("opened:      {} ({} ago)", at(e.opened_at), age(e.age_seconds));
    println!("resolved:    {} by {}", at_or_dash(e.resolved_at), o(&e.resolved_by));
    println!("resolution:  {}", o(&e.resolution));
    println!("note:        {}", o(&e.resolution_note));
    println!("evidence:");
    println!("{}", serde_json::to_string_pretty(&e.evidence)?);
    Ok(())
}
