//! `withdrawals replay …`: start (dry run first), list, show (following progress), pause,
//! resume, cancel, approve.

use clap::Subcommand;
use uuid::Uuid;

use super::client::Client;
use super::dlq::FilterArgs;
use super::format::{o, rate};
use super::Connection;
use crate::domain::ReplayStatus;
use crate::ops::routes;
use crate::ops::types::{List, ReasonRequest, ReplayControl, ReplayQuery, ReplayRunView, StartReplay, Started};

// Parsed once per process; boxing the big variant would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum ReplayCommand {
    /// Start a replay run (or a dry run): a reason, a selection, the expected payload version and a destination queue.
    Start {
        #[arg(long)]
        reason: String,
        /// Dead-letter ids to replay (repeatable); or select with the filters.
        #[arg(long = "id")]
        ids: Vec<Uuid>,
        #[command(flatten)]
        filter: FilterArgs,
        #[arg(long)]
        expected_payload_version: i64,
        /// Queue the released jobs go to (payouts or reconciliation).
        #[arg(long)]
        destination: String,
        /// Report the count and a sample; change nothing.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        rate: Option<i64>,
        #[arg(long)]
        max_concurrency: Option<i64>,
        #[arg(long)]
        auto_pause: Option<i64>,
        /// Follow the run with a progress bar until it ends.
        #[arg(long)]
        watch: bool,
        /// Start only if the selection is still exactly what the dry run showed (its
        /// `selection` digest); otherwise refused with `selection_changed`.
        #[arg(long = "expect-selection")]
        expect_selection: Option<String>,
    },
    /// Runs, newest first, with their progress.
    List {
        /// Only runs in this status (awaiting_approval, running, paused, completed, cancelled).
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// A run's progress.
    Status {
        id: String,
        #[arg(long)]
        watch: bool,
    },
    Pause {
        id: String,
        #[arg(long)]
        reason: String,
    },
    Resume {
        id: String,
        #[arg(long)]
        reason: String,
    },
    Cancel {
        id: String,
        #[arg(long)]
        reason: String,
    },
    /// Approve a run over the threshold (a second operator, admin role).
    Approve {
        id: String,
        #[arg(long)]
        reason: String,
    },
}

pub async fn replay(conn: &Connection, command: ReplayCommand) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    match command {
        ReplayCommand::Start {
            reason,
            ids,
            filter,
            expected_payload_version,
            destination,
            dry_run,
            rate,
            max_concurrency,
            auto_pause,
            watch,
            expect_selection,
        } => {
            let (dead_letter_ids, filter) =
                if ids.is_empty() { (None, Some(filter.into())) } else { (Some(ids), None) };
            let request = StartReplay {
                reason,
                dead_letter_ids,
                filter,
                expected_payload_version,
                destination_queue: destination,
                dry_run,
                rate_per_second: rate,
                max_concurrency,
                auto_pause_threshold: auto_pause,
                expected_selection_digest: expect_selection,
            };
            let answer = client.post::<_, Started>(&routes::REPLAYS.path(&[]), &request).await?;
            let run = match &answer.typed {
                Started::Run(run) => Some(run.id),
                Started::DryRun(_) => None,
            };
            match answer.unless_json(conn.json) {
                Some(Started::DryRun(preview)) => {
                    println!(
                        "dry run: {} dead letters would be replayed{}",
                        preview.count,
                        if preview.needs_approval { " (needs a second operator's approval)" } else { "" }
                    );
                    println!(
                        "selection {} (start with --expect-selection {} to require exactly these)",
                        preview.selection_digest, preview.selection_digest
                    );
                    for item in &preview.sample {
                        println!(
                            "  {} {} {} withdrawal {}",
                            item.dead_letter_id,
                            item.category,
                            item.error_code,
                            o(&item.withdrawal_id)
                        );
                    }
                }
                Some(Started::Run(run)) => {
                    println!("replay run {} started: {} items, status {}", run.id, run.total, run.status)
                }
                None => {}
            }
            if let Some(run) = run.filter(|_| watch) {
                follow(&client, &run.to_string()).await?;
            }
        }
        ReplayCommand::List { status, limit } => {
            let query = ReplayQuery { status, limit: Some(limit) };
            let answer = client.get::<List<ReplayRunView>>(&routes::REPLAYS.path(&[]), &query).await?;
            for run in answer.unless_json(conn.json).map(|l| l.data).unwrap_or_default() {
                let p = run.progress.as_ref();
                println!(
                    "{} {:<17} {} items: {} succeeded, {} failed, {} pending  {}",
                    run.id,
                    run.status,
                    run.total,
                    o(&p.map(|p| p.succeeded)),
                    o(&p.map(|p| p.failed)),
                    o(&p.map(|p| p.pending)),
                    run.reason
                );
            }
        }
        ReplayCommand::Status { id, watch } => {
            if watch {
                follow(&client, &id).await?;
            } else {
                let answer = client.get::<ReplayRunView>(&routes::REPLAY.path(&[&id]), &()).await?;
                if let Some(run) = answer.unless_json(conn.json) {
                    let p = run.progress.as_ref();
                    let count = |f: fn(&crate::ops::types::ReplayProgress) -> i64| o(&p.map(f));
                    println!(
                        "run {} {}: total {}, released {}, reconciling {}, skipped {}, succeeded {}, failed {}, new dead letters {}, {} /s{}",
                        run.id, run.status, count(|p| p.total), count(|p| p.released), count(|p| p.reconciling),
                        count(|p| p.skipped), count(|p| p.succeeded), count(|p| p.failed), count(|p| p.new_dead_letters),
                        o(&p.map(|p| rate(p.released_per_second))),
                        run.paused_reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default()
                    );
                    println!(
                        "  started by {}{}: {}",
                        run.started_by_name,
                        run.approved_by_name.as_ref().map(|a| format!(", approved by {a}")).unwrap_or_default(),
                        run.reason
                    );
                }
            }
        }
        ReplayCommand::Pause { id, reason } => return replay_control(conn, ReplayControl::Pause, &id, reason).await,
        ReplayCommand::Resume { id, reason } => return replay_control(conn, ReplayControl::Resume, &id, reason).await,
        ReplayCommand::Cancel { id, reason } => return replay_control(conn, ReplayControl::Cancel, &id, reason).await,
        ReplayCommand::Approve { id, reason } => {
            return replay_control(conn, ReplayControl::Approve, &id, reason).await
        }
    }
    Ok(())
}

/// pause | resume | cancel | approve.
async fn replay_control(conn: &Connection, action: ReplayControl, id: &str, reason: String) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    let path = routes::replay_control(action).path(&[&id]);
    let answer = client.post::<_, ReplayRunView>(&path, &ReasonRequest { reason }).await?;
    if let Some(run) = answer.unless_json(conn.json) {
        println!("run {} is now {}", run.id, run.status);
    }
    Ok(())
}

/// A live progress bar until the run completes, is cancelled or pauses.
async fn follow(client: &Client, id: &str) -> anyhow::Result<()> {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    loop {
        let run = client.get::<ReplayRunView>(&routes::REPLAY.path(&[&id]), &()).await?.typed;
        let p = run.progress.unwrap_or(crate::ops::types::ReplayProgress {
            total: 0,
            pending: 0,
            released: 0,
            reconciling: 0,
            skipped: 0,
            cancelled: 0,
            in_flight: 0,
            succeeded: 0,
            failed: 0,
            new_dead_letters: 0,
            released_per_second: 0.0,
        });
        let done = p.released + p.reconciling + p.skipped + p.cancelled;
        bar.set_length(u64::try_from(p.total).unwrap_or(0));
        bar.set_position(u64::try_from(done).unwrap_or(0));
        bar.set_message(format!(
            "{} · succeeded {} · failed {} · new dead letters {} · {} /s",
            run.status,
            p.succeeded,
            p.failed,
            p.new_dead_letters,
            rate(p.released_per_second)
        ));
        if matches!(run.status, ReplayStatus::Completed | ReplayStatus::Cancelled | ReplayStatus::Paused) {
            bar.finish();
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}
