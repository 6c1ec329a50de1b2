//! The database gauges (SPEC §9): depth, ages, withdrawals by state, open settlement exceptions
//! and the ledger check, refreshed by one task on an interval ([`refresh_loop`]), never per
//! scrape. A refresh reads first ([`DatabaseGauges`], [`LedgerCheck`]) and then exports what it
//! read, so a test asserts on its own database's answer and on the export through a recorder of
//! its own: the process-wide gauges are written by every test of a binary at once. The names are
//! [`crate::metrics`]'s; this module sits above storage, which `metrics` must not (storage counts
//! transitions through it).

use std::time::Duration;

use metrics::gauge;
use tokio_util::sync::CancellationToken;

use crate::domain::job::Queue;
use crate::domain::settlement::ExceptionKind;
use crate::domain::{EndpointStatus, JobStatus, ReplayStatus, WithdrawalStatus};
use crate::metrics::{
    install, DEAD_LETTERS_OLDEST_OPEN_SECONDS, DEAD_LETTERS_OPEN, JOBS_DUE, JOBS_LIVE, JOBS_OLDEST_DUE_SECONDS,
    LEDGER_CHECK_FAILING, LEDGER_INVARIANT_VIOLATIONS, OLDEST_IN_STATE_SECONDS, REPLAY_ITEMS_PENDING, REPLAY_RUNS,
    SETTLEMENT_EXCEPTIONS_OPEN, SETTLEMENT_EXCEPTION_OLDEST_OPEN_AGE_SECONDS, WITHDRAWALS_BY_STATE,
};
use crate::storage::{metrics as queries, settlement as settlement_queries, Db};

/// Reads the database once and sets every gauge that describes it, and returns what it read.
/// Every label set is written on every refresh (zero when the database has no row for it), so a
/// queue that drains reads 0 rather than its last non-zero value.
pub async fn refresh_database_gauges(db: &Db) -> anyhow::Result<DatabaseGauges> {
    let gauges = DatabaseGauges::read(db, true).await?;
    gauges.export();
    Ok(gauges)
}

/// The states a withdrawal passes through: their counts and ages are read on every refresh, through
/// the status index. The final states (`completed`, `failed`) only grow: counting them is a scan
/// of the history, done on the full refreshes ([`LEDGER_CHECK_EVERY_TICKS`]).
const MOVING_STATES: [WithdrawalStatus; 3] =
    [WithdrawalStatus::Pending, WithdrawalStatus::Processing, WithdrawalStatus::RequiresReview];

/// One queue's live jobs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueGauges {
    pub queue: &'static str,
    pub scheduled: i64,
    pub running: i64,
    pub due: i64,
    pub oldest_due_seconds: f64,
}

/// What one refresh read from the database: the values of the database gauges, every label set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DatabaseGauges {
    /// Count and age (seconds since the oldest change) of each state this refresh read: the
    /// moving states on every refresh, all of them on a full one.
    pub withdrawals: Vec<(WithdrawalStatus, i64, f64)>,
    pub dead_letters_open: i64,
    pub dead_letters_oldest_open_seconds: f64,
    /// Customers' webhook endpoints in each state (SPEC §17).
    pub endpoints: Vec<(EndpointStatus, i64)>,
    pub queues: Vec<QueueGauges>,
    /// Runs and their pending items, by run status.
    pub replays: Vec<(ReplayStatus, i64, i64)>,
    /// Open exceptions and the oldest one's age in seconds, for every kind (0 and 0 when none).
    pub settlement_exceptions: Vec<(ExceptionKind, i64, f64)>,
    /// Unix time the newest event of a handled type was received, for each provider the
    /// database holds events of (a configured provider with none reads 0 from the start:
    /// [`crate::metrics::webhook_gauges_known`]).
    pub webhook_last_received: Vec<(String, f64)>,
}

impl DatabaseGauges {
    /// Reads the database; the final states' withdrawal counts only when `full`.
    pub async fn read(db: &Db, full: bool) -> anyhow::Result<Self> {
        let now = chrono::Utc::now();
        let age = |t: Option<crate::storage::DbTime>| t.map(|t| (now - t.0).num_seconds().max(0) as f64).unwrap_or(0.0);

        let (states, written): (_, &[WithdrawalStatus]) = match full {
            true => (queries::withdrawals_by_state(db).await?, &WithdrawalStatus::ALL),
            false => (queries::withdrawals_in_states(db, &MOVING_STATES).await?, &MOVING_STATES),
        };
        let withdrawals = written
            .iter()
            .map(|status| {
                let row = states.iter().find(|r| r.status == *status);
                (*status, row.map_or(0, |r| r.count), age(row.and_then(|r| r.oldest_change)))
            })
            .collect();

        let open = queries::open_dead_letters(db).await?;

        let depths = queries::live_jobs_by_queue(db).await?;
        let queues = Queue::ALL
            .map(Queue::as_str)
            .into_iter()
            .map(|queue| {
                let row = |status| depths.iter().find(|d| d.queue == queue && d.status == status);
                let scheduled = row(JobStatus::Scheduled);
                QueueGauges {
                    queue,
                    scheduled: scheduled.map_or(0, |d| d.count),
                    running: row(JobStatus::Running).map_or(0, |d| d.count),
                    due: scheduled.map_or(0, |d| d.due),
                    oldest_due_seconds: age(scheduled.and_then(|d| d.oldest_due)),
                }
            })
            .collect();

        let runs = queries::replay_runs_by_status(db).await?;
        let replays = ReplayStatus::ALL
            .into_iter()
            .map(|status| {
                let row = runs.iter().find(|r| r.status == status);
                (status, row.map_or(0, |r| r.runs), row.map_or(0, |r| r.pending_items))
            })
            .collect();

        // Every kind, so an alert on a kind that has never been open reads 0, not "no data".
        let exceptions = settlement_queries::open_exception_counts(db).await?;
        let settlement_exceptions = ExceptionKind::ALL
            .into_iter()
            .map(|kind| {
                let row = exceptions.iter().find(|(k, _, _)| *k == kind);
                (kind, row.map_or(0, |(_, count, _)| *count), age(row.map(|(_, _, opened_at)| *opened_at)))
            })
            .collect();

        let webhook_last_received = crate::storage::webhooks::last_received_by_provider(db)
            .await?
            .into_iter()
            .map(|(provider, at)| (provider, at.0.timestamp() as f64))
            .collect();

        let counts = crate::storage::notifications::endpoint_counts(db).await?;
        let endpoints = EndpointStatus::ALL
            .into_iter()
            .map(|state| (state, counts.iter().find(|(s, _)| *s == state).map_or(0, |(_, n)| *n)))
            .collect();

        Ok(DatabaseGauges {
            endpoints,
            webhook_last_received,
            withdrawals,
            dead_letters_open: open.count,
            dead_letters_oldest_open_seconds: age(open.oldest),
            queues,
            replays,
            settlement_exceptions,
        })
    }

    /// Sets the gauges to what was read, through the recorder in effect (the process-wide one,
    /// or a test's local one).
    pub fn export(&self) {
        for (status, count, age) in &self.withdrawals {
            gauge!(WITHDRAWALS_BY_STATE, "state" => status.as_str()).set(*count as f64);
            gauge!(OLDEST_IN_STATE_SECONDS, "state" => status.as_str()).set(*age);
        }
        gauge!(DEAD_LETTERS_OPEN).set(self.dead_letters_open as f64);
        for (state, count) in &self.endpoints {
            gauge!(crate::metrics::NOTIFICATION_ENDPOINTS, "state" => state.as_str()).set(*count as f64);
        }
        for (provider, at) in &self.webhook_last_received {
            gauge!(crate::metrics::WEBHOOK_LAST_RECEIVED, "provider" => provider.clone()).set(*at);
        }
        gauge!(DEAD_LETTERS_OLDEST_OPEN_SECONDS).set(self.dead_letters_oldest_open_seconds);
        for q in &self.queues {
            gauge!(JOBS_LIVE, "queue" => q.queue, "status" => JobStatus::Scheduled.as_str()).set(q.scheduled as f64);
            gauge!(JOBS_LIVE, "queue" => q.queue, "status" => JobStatus::Running.as_str()).set(q.running as f64);
            gauge!(JOBS_DUE, "queue" => q.queue).set(q.due as f64);
            gauge!(JOBS_OLDEST_DUE_SECONDS, "queue" => q.queue).set(q.oldest_due_seconds);
        }
        for (status, runs, pending) in &self.replays {
            gauge!(REPLAY_RUNS, "status" => status.as_str()).set(*runs as f64);
            gauge!(REPLAY_ITEMS_PENDING, "status" => status.as_str()).set(*pending as f64);
        }
        for (kind, count, age) in &self.settlement_exceptions {
            gauge!(SETTLEMENT_EXCEPTIONS_OPEN, "kind" => kind.as_str()).set(*count as f64);
            gauge!(SETTLEMENT_EXCEPTION_OLDEST_OPEN_AGE_SECONDS, "kind" => kind.as_str()).set(*age);
        }
    }
}

/// The answer of one ledger check (SPEC §1.2): how many account/currency pairs disagree, or that
/// the check could not run. "Could not check" is never exported as "0 violations".
#[derive(Debug)]
pub enum LedgerCheck {
    Checked { differences: usize },
    Failed(anyhow::Error),
}

impl LedgerCheck {
    /// Checks the ledger invariant for every account and currency: a whole-ledger read, so the
    /// refresh loop runs it every [`LEDGER_CHECK_EVERY_TICKS`] refreshes, not on each.
    pub async fn run(db: &Db) -> Self {
        match crate::storage::accounts::ledger_violations(db).await {
            Ok(violations) => LedgerCheck::Checked { differences: violations.len() },
            Err(err) => LedgerCheck::Failed(anyhow::Error::from(err).context("the ledger check could not run")),
        }
    }

    /// `ledger_check_failing` 1 and `ledger_invariant_violations` left at its last value when the
    /// check failed; otherwise 0 and the count.
    pub fn export(&self) {
        match self {
            LedgerCheck::Checked { differences } => {
                gauge!(LEDGER_INVARIANT_VIOLATIONS).set(*differences as f64);
                gauge!(LEDGER_CHECK_FAILING).set(0.0);
            }
            LedgerCheck::Failed(_) => gauge!(LEDGER_CHECK_FAILING).set(1.0),
        }
    }
}

/// Checks the ledger, exports the answer ([`LedgerCheck::export`]) and returns the number of
/// differences, or why the check could not run.
pub async fn refresh_ledger_gauge(db: &Db) -> anyhow::Result<usize> {
    let check = LedgerCheck::run(db).await;
    check.export();
    match check {
        LedgerCheck::Checked { differences } => Ok(differences),
        LedgerCheck::Failed(err) => Err(err),
    }
}

/// How many gauge refreshes pass between two ledger checks (the first refresh checks too).
pub const LEDGER_CHECK_EVERY_TICKS: u64 = 20;

/// The one task that refreshes database gauges, every `every`, until `shutdown`.
pub async fn refresh_loop(db: Db, every: Duration, shutdown: CancellationToken) {
    install();
    database_gauges_at_zero();
    let mut tick = tokio::time::interval(every);
    let mut ticks: u64 = 0;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        // The final states' counts (a scan of the history) with the ledger check, not every tick.
        match DatabaseGauges::read(&db, ticks % LEDGER_CHECK_EVERY_TICKS == 0).await {
            Ok(gauges) => gauges.export(),
            Err(err) => tracing::warn!(error = format!("{err:#}"), "metrics refresh failed"),
        }
        if ticks % LEDGER_CHECK_EVERY_TICKS == 0 {
            let check = LedgerCheck::run(&db).await;
            check.export();
            match check {
                LedgerCheck::Checked { differences: 0 } => {}
                LedgerCheck::Checked { differences } => {
                    tracing::error!(differences, "the ledger invariant does not hold: run `withdrawals ledger verify`")
                }
                LedgerCheck::Failed(err) => tracing::error!(
                    error = format!("{err:#}"),
                    "ledger check failed: ledger_check_failing is 1 and ledger_invariant_violations is stale"
                ),
            }
        }
        ticks += 1;
    }
}

/// The database gauges at zero, in a process that refreshes them ([`refresh_loop`]), until the
/// first refresh writes them (every label set, every time).
fn database_gauges_at_zero() {
    for status in WithdrawalStatus::ALL.map(WithdrawalStatus::as_str) {
        gauge!(WITHDRAWALS_BY_STATE, "state" => status).set(0.0);
        gauge!(OLDEST_IN_STATE_SECONDS, "state" => status).set(0.0);
    }
    gauge!(DEAD_LETTERS_OPEN).set(0.0);
    gauge!(DEAD_LETTERS_OLDEST_OPEN_SECONDS).set(0.0);
    gauge!(LEDGER_INVARIANT_VIOLATIONS).set(0.0);
    gauge!(LEDGER_CHECK_FAILING).set(0.0);
    for queue in Queue::ALL.map(Queue::as_str) {
        for status in [JobStatus::Scheduled, JobStatus::Running] {
            gauge!(JOBS_LIVE, "queue" => queue, "status" => status.as_str()).set(0.0);
        }
        gauge!(JOBS_DUE, "queue" => queue).set(0.0);
        gauge!(JOBS_OLDEST_DUE_SECONDS, "queue" => queue).set(0.0);
    }
    for status in ReplayStatus::ALL {
        gauge!(REPLAY_RUNS, "status" => status.as_str()).set(0.0);
        gauge!(REPLAY_ITEMS_PENDING, "status" => status.as_str()).set(0.0);
    }
    for kind in ExceptionKind::ALL {
        gauge!(SETTLEMENT_EXCEPTIONS_OPEN, "kind" => kind.as_str()).set(0.0);
        gauge!(SETTLEMENT_EXCEPTION_OLDEST_OPEN_AGE_SECONDS, "kind" => kind.as_str()).set(0.0);
    }
    for state in EndpointStatus::ALL {
        gauge!(crate::metrics::NOTIFICATION_ENDPOINTS, "state" => state.as_str()).set(0.0);
    }
}
