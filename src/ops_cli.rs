//! The operator commands of the CLI (`status`, `breakers`, `ledger`, `review`, `dlq`, `replay`,
//! `audit`, `settlement` (in [`settlement`]), `accounts fund` (in [`credits`]), and the credential lifecycle: `accounts keys …`, `operators list|disable|enable|rotate-token`):
//! thin clients of `/ops/v1`, so roles and the audit log apply exactly as they do over HTTP.
//! `WITHDRAWALS_URL` and `WITHDRAWALS_TOKEN` say where and who; `--json` prints the API's JSON
//! for scripts. The credential commands also take `--direct`: the same ops routes run in this
//! process against `DATABASE_URL` (same token check, role and audit), for when the API is down.
//!
//! Requests are built from, and answers read into, the DTOs of [`crate::ops::types`]: the tables
//! print typed fields, and `--json` prints the answer exactly as the API wrote it.

mod credits;
mod settlement;

use std::fmt::Display;

use anyhow::{bail, Context};
use axum::http::{header, Method};
use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
use clap::{Args, Subcommand};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower::ServiceExt;
use uuid::Uuid;

use crate::http::AppState;
use crate::ops::types::{
    ApiKeyView, AuditEntry, AuditQuery, BreakerChanged, BreakerView, Closed, CreateKey, DeadLetterExportQuery,
    DeadLetterGroup, DeadLetterQuery, DeadLetterView, Decided, Decision, LedgerCheck, LedgerQuery, List, OperatorView,
    OpsWithdrawal, OptionalReason, Overview, Page, ProviderEvidence, ReasonRequest, Reconciling, ReplayControl,
    ReplayQuery, ReplayRunView, ResolveRequest, Resolved, SelectionFilter, StartReplay, Started, WithdrawalDetail,
    WithdrawalQuery,
};

pub use credits::fund;
pub use settlement::{settlement, ImportArgs, SettlementCommand};

#[derive(Debug, Args, Clone)]
pub struct Connection {
    /// Base URL of a running `withdrawals serve`.
    #[arg(long, env = "WITHDRAWALS_URL", default_value = "http://127.0.0.1:8080", global = true)]
    pub url: String,
    /// Operator token (`wdo_…`), from `withdrawals operators create`.
    #[arg(long, env = "WITHDRAWALS_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ReviewCommand {
    /// Withdrawals waiting in `requires_review`, oldest first.
    List {
        #[arg(long, default_value = "requires_review")]
        status: String,
        /// Only this customer account's withdrawals.
        #[arg(long)]
        account: Option<Uuid>,
        #[arg(long)]
        limit: Option<u32>,
    },
    /// One withdrawal with all its evidence.
    Show { id: String },
    /// Resolve a withdrawal: complete | fail | retry | reconcile.
    Resolve {
        id: String,
        #[arg(value_parser = ["complete", "fail", "retry", "reconcile"])]
        action: String,
        #[arg(long)]
        reason: String,
        /// The version you looked at (`review show`); a stale one is refused.
        #[arg(long)]
        version: i64,
        #[arg(long)]
        provider_reference: Option<String>,
    },
    /// Reconcile a withdrawal still in `processing` now (a worker died mid-call; you will not wait
    /// for the stuck sweep): the provider is asked by the operation key and decides.
    Reconcile {
        id: String,
        #[arg(long)]
        reason: String,
    },
    /// Decisions waiting for a second operator (the two-person rule), oldest first.
    Decisions,
    /// Approve the decision waiting on withdrawal ID (you must not be its requester); it is
    /// checked against the provider again and applied.
    Approve {
        id: String,
        #[arg(long)]
        reason: String,
    },
    /// Reject the decision waiting on withdrawal ID; nothing moves.
    Reject {
        id: String,
        #[arg(long)]
        reason: String,
    },
}

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

/// Where a credential command runs. Over HTTP by default, like every operator command; with
/// `--direct`, the ops routes run in this process on `DATABASE_URL` — for when the API is down.
/// Either way the operator token is checked, the role enforced and the action audited by the same
/// code; `--direct` needs database access *and* an admin token.
#[derive(Debug, Args, Clone)]
pub struct Remote {
    #[command(flatten)]
    pub conn: Connection,
    /// Run the ops API in this process against DATABASE_URL instead of calling WITHDRAWALS_URL
    /// (the API is down). The token, role check and audit row are the same.
    #[arg(long, global = true)]
    pub direct: bool,
}

enum Transport {
    Http {
        http: reqwest::Client,
        base: String,
    },
    /// `/ops/v1` served in process, on a database this process opened.
    Local(AppState),
}

struct Client {
    transport: Transport,
    token: String,
    /// Sent as `Idempotency-Key` on every request (`accounts fund`).
    idempotency_key: Option<String>,
}

/// An answer of the API: read into its DTO, and kept as the API wrote it for `--json`.
struct Answer<T> {
    typed: T,
    json: Value,
}

impl<T> Answer<T> {
    /// With `--json`, prints the API's JSON and gives nothing to print as a table.
    fn unless_json(self, json: bool) -> Option<T> {
        if json {
            println!("{}", self.json);
            None
        } else {
            Some(self.typed)
        }
    }
}

/// The parts of a problem+json refusal the CLI reports.
#[derive(Deserialize)]
struct ProblemBody {
    code: Option<String>,
    detail: Option<String>,
}

/// Largest in-process response read (a list of keys or operators is far smaller).
const MAX_LOCAL_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

impl Client {
    fn new(conn: &Connection) -> anyhow::Result<Self> {
        let token = conn.token.clone().context("WITHDRAWALS_TOKEN (or --token) is required")?;
        let transport =
            Transport::Http { http: reqwest::Client::new(), base: conn.url.trim_end_matches('/').to_owned() };
        Ok(Self { transport, token, idempotency_key: None })
    }

    /// Over HTTP, or with `--direct` in process on `database_url` (migrated first, like every
    /// command that opens the database).
    async fn for_remote(remote: &Remote, database_url: &str) -> anyhow::Result<Self> {
        let mut client = Self::new(&remote.conn)?;
        if remote.direct {
            let db = crate::startup::open(database_url, crate::storage::PoolSettings::default()).await?;
            client.transport = Transport::Local(AppState::new(db, crate::config::AppConfig::default()));
        }
        Ok(client)
    }

    fn describe(&self) -> String {
        match &self.transport {
            Transport::Http { base, .. } => base.clone(),
            Transport::Local(_) => "the database (--direct)".to_owned(),
        }
    }

    /// `uri` is the path and query; `body` JSON. `Ok` holds a 2xx answer's JSON.
    async fn call(&self, method: Method, uri: &str, body: Option<Vec<u8>>) -> anyhow::Result<Value> {
        let (status, bytes) = match &self.transport {
            Transport::Http { http, base } => {
                let mut request = http.request(method, format!("{base}{uri}")).bearer_auth(&self.token);
                if let Some(key) = &self.idempotency_key {
                    request = request.header("idempotency-key", key);
                }
                if let Some(body) = body {
                    request = request.header(header::CONTENT_TYPE, "application/json").body(body);
                }
                let response = request.send().await.with_context(|| format!("cannot reach {}", self.describe()))?;
                let status = response.status();
                (status, response.bytes().await.unwrap_or_default())
            }
            Transport::Local(state) => {
                let mut request = axum::http::Request::builder()
                    .method(method)
                    .uri(uri)
                    .header(header::AUTHORIZATION, format!("Bearer {}", self.token))
                    .header(header::CONTENT_TYPE, "application/json");
                if let Some(key) = &self.idempotency_key {
                    request = request.header("idempotency-key", key);
                }
                let request = request.body(body.map(axum::body::Body::from).unwrap_or_else(axum::body::Body::empty))?;
                let response = crate::http::ops::router().with_state(state.clone()).oneshot(request).await?;
                let status = response.status();
                (status, axum::body::to_bytes(response.into_body(), MAX_LOCAL_RESPONSE_BYTES).await?)
            }
        };
        if !status.is_success() {
            let problem = serde_json::from_slice::<ProblemBody>(&bytes).ok();
            let code = problem.as_ref().and_then(|p| p.code.as_deref()).unwrap_or("error");
            let detail = problem.as_ref().and_then(|p| p.detail.as_deref()).unwrap_or("");
            bail!("{} {code}: {detail}", status.as_u16());
        }
        Ok(serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    async fn answer<T: DeserializeOwned>(
        &self,
        method: Method,
        uri: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<Answer<T>> {
        let json = self.call(method, uri, body).await?;
        let typed = T::deserialize(&json).context("the API's answer is not what this CLI expects (a newer server?)")?;
        Ok(Answer { typed, json })
    }

    /// `GET path?query`; `query` is a list query of `ops::types` (or `()` for none).
    async fn get<T: DeserializeOwned>(&self, path: &str, query: &impl Serialize) -> anyhow::Result<Answer<T>> {
        let query = serde_urlencoded::to_string(query)?;
        let uri = if query.is_empty() { path.to_owned() } else { format!("{path}?{query}") };
        self.answer(Method::GET, &uri, None).await
    }

    async fn post<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> anyhow::Result<Answer<T>> {
        self.answer(Method::POST, path, Some(serde_json::to_vec(body)?)).await
    }
}

fn age(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7_200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

fn age_or_dash(seconds: Option<i64>) -> String {
    seconds.map_or_else(|| "-".to_owned(), age)
}

/// A value that may be absent (`-`).
fn o<T: Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".to_owned(), T::to_string)
}

/// A time as the API writes it.
fn at(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

fn at_or_dash(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(|| "-".to_owned(), at)
}

/// A rate as the API writes it (`0.0`, `2.5`).
fn rate(per_second: f64) -> String {
    serde_json::Number::from_f64(per_second).map_or_else(|| "-".to_owned(), |n| n.to_string())
}

pub async fn review(conn: &Connection, command: ReviewCommand) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    match command {
        ReviewCommand::List { status, account, limit } => {
            let query = WithdrawalQuery {
                status: Some(status),
                account_id: account,
                limit: limit.map(i64::from),
                cursor: None,
            };
            let answer = client.get::<Page<OpsWithdrawal>>("/ops/v1/withdrawals", &query).await?;
            let Some(page) = answer.unless_json(conn.json) else { return Ok(()) };
            println!("{:<38} {:>12} {:<4} {:>5} {:>7}  status", "id", "amount", "cur", "ver", "age");
            for w in page.data {
                println!(
                    "{:<38} {:>12} {:<4} {:>5} {:>7}  {}",
                    w.id.to_string(),
                    w.amount,
                    w.currency,
                    w.version,
                    age(w.age_seconds),
                    w.status
                );
            }
        }
        ReviewCommand::Show { id } => {
            let answer = client.get::<WithdrawalDetail>(&format!("/ops/v1/withdrawals/{id}"), &()).await?;
            if let Some(shown) = answer.unless_json(conn.json) {
                print_withdrawal(&shown);
            }
        }
        ReviewCommand::Resolve { id, action, reason, version, provider_reference } => {
            let request = ResolveRequest { action: action.clone(), reason, version, provider_reference };
            let answer = client.post::<_, Resolved>(&format!("/ops/v1/withdrawals/{id}/resolve"), &request).await?;
            let Some(resolved) = answer.unless_json(conn.json) else { return Ok(()) };
            let w = &resolved.withdrawal;
            if resolved.is_pending_approval() {
                println!(
                    "{action}: decision {} on {} waits for a second operator (withdrawals review approve {} --reason …)",
                    o(&resolved.decision.as_ref().map(|d| d.id)),
                    w.id,
                    w.id
                );
            } else {
                println!("{action}: {} is now {} (version {})", w.id, w.status, w.version);
            }
        }
        ReviewCommand::Reconcile { id, reason } => {
            let path = format!("/ops/v1/withdrawals/{id}/reconcile");
            let answer = client.post::<_, Reconciling>(&path, &ReasonRequest { reason }).await?;
            if let Some(queued) = answer.unless_json(conn.json) {
                println!(
                    "reconciling {}: job {} asks the provider now (withdrawals review show {} for the result)",
                    queued.withdrawal.id, queued.job_id, queued.withdrawal.id
                );
            }
        }
        ReviewCommand::Decisions => {
            let answer = client.get::<List<Decision>>("/ops/v1/review-decisions", &()).await?;
            let Some(decisions) = answer.unless_json(conn.json) else { return Ok(()) };
            println!("{:<38} {:<9} {:<24}  reason", "withdrawal", "action", "requested by");
            for d in decisions.data {
                println!(
                    "{:<38} {:<9} {:<24}  {}",
                    d.withdrawal_id.to_string(),
                    d.action,
                    d.requested_by_name,
                    d.reason
                );
            }
        }
        ReviewCommand::Approve { id, reason } => {
            let path = format!("/ops/v1/withdrawals/{id}/decision/approve");
            let answer = client.post::<_, Decided>(&path, &ReasonRequest { reason }).await?;
            if let Some(decided) = answer.unless_json(conn.json) {
                let w = decided.withdrawal.as_ref();
                println!("approved: {id} is now {} (version {})", o(&w.map(|w| w.status)), o(&w.map(|w| w.version)));
            }
        }
        ReviewCommand::Reject { id, reason } => {
            let path = format!("/ops/v1/withdrawals/{id}/decision/reject");
            let answer = client.post::<_, Decided>(&path, &ReasonRequest { reason }).await?;
            if answer.unless_json(conn.json).is_some() {
                println!("rejected: the decision on {id} is dropped; nothing moved");
            }
        }
    }
    Ok(())
}

/// `review show`: the withdrawal, then each kind of evidence.
fn print_withdrawal(shown: &WithdrawalDetail) {
    let w = &shown.withdrawal;
    if w.sandbox {
        println!("SANDBOX: made in sandbox mode; no real money is paid out for it");
    }
    println!(
        "{} {} {} — {} (version {}, {} in state)",
        w.id,
        w.amount,
        w.currency,
        w.status,
        w.version,
        age(w.age_seconds)
    );
    for d in &shown.review_decisions {
        println!(
            "  decision {} {} {} requested by {} ({}): {}",
            d.id,
            d.action,
            d.status,
            d.requested_by_name,
            at(d.requested_at),
            d.reason
        );
    }
    for t in &shown.transitions {
        println!("  transition  {} → {}  by {}: {}  ({})", o(&t.from), t.to, t.actor, t.reason, at(t.at));
        let evidence = t.evidence.as_ref().map(ProviderEvidence::read).unwrap_or_default();
        if let Some(verdict) = &evidence.verdict {
            let transfer = evidence.transfer.as_ref().map_or("none", |t| t.id.as_str());
            println!("    provider said: {verdict} (transfer {transfer}) at {}", at_or_dash(evidence.asked_at));
        }
    }
    for a in &shown.provider_attempts {
        println!(
            "  attempt #{} {} side effect {} {} ({})",
            a.attempt_no,
            o(&a.outcome),
            a.side_effect,
            o(&a.error_code),
            at(a.started_at)
        );
    }
    for r in &shown.reconciliation_results {
        println!("  reconciliation {}: {} ({})", r.result, r.detail, at(r.at));
    }
    for d in &shown.dead_letters {
        println!("  dead letter {} {} {} — owner {}, see {}", d.id, d.category, d.error_code, d.owner, d.runbook);
    }
    for e in &shown.ledger_entries {
        println!("  ledger {} available {} held {} paid out {}", e.kind, e.available, e.held, e.paid_out);
    }
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
                let answer = client.get::<Page<DeadLetterView>>("/ops/v1/dead-letters/export", &query).await?;
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
            let answer = client.get::<Page<DeadLetterView>>("/ops/v1/dead-letters", &query).await?;
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
            let answer = client.get::<List<DeadLetterGroup>>("/ops/v1/dead-letters/summary", &()).await?;
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
            let answer = client.get::<DeadLetterView>(&format!("/ops/v1/dead-letters/{id}"), &()).await?;
            // The envelope is shown whole, as the API wrote it (every field, in its order).
            let json = answer.json.clone();
            if answer.unless_json(conn.json).is_some() {
                println!("{}", serde_json::to_string_pretty(&json)?);
            }
        }
        DlqCommand::Close { id, reason } => {
            let answer = client
                .post::<_, Closed>(&format!("/ops/v1/dead-letters/{id}/close"), &ReasonRequest { reason })
                .await?;
            if answer.unless_json(conn.json).is_some() {
                println!("closed {id}");
            }
        }
    }
    Ok(())
}

/// `withdrawals status`: the overview (withdrawals by state, dead letters, queues, breakers, replays).
pub async fn status(conn: &Connection) -> anyhow::Result<()> {
    let answer = Client::new(conn)?.get::<Overview>("/ops/v1/overview", &()).await?;
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
            let answer = Client::new(conn)?.get::<LedgerCheck>("/ops/v1/ledger/verify", &query).await?;
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
            let answer = client.get::<List<BreakerView>>("/ops/v1/breakers", &()).await?;
            for b in answer.unless_json(conn.json).map(|l| l.data).unwrap_or_default() {
                print_breaker(&b);
            }
            return Ok(());
        }
        Some(BreakersCommand::ForceOpen { name, reason }) => (name, "force-open", reason),
        Some(BreakersCommand::ForceClosed { name, reason }) => (name, "force-closed", reason),
        Some(BreakersCommand::Release { name, reason }) => (name, "release", reason),
    };
    let path = format!("/ops/v1/breakers/{}/{action}", urlencoding(&name));
    let answer = client.post::<_, BreakerChanged>(&path, &ReasonRequest { reason }).await?;
    if let Some(changed) = answer.unless_json(conn.json) {
        println!("{}: {} (every process obeys within one poll interval)", changed.name, changed.action);
        print_breaker(&changed.breaker);
    }
    Ok(())
}

/// A breaker name as one path segment.
fn urlencoding(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub async fn audit(
    conn: &Connection,
    action: Option<String>,
    target: Option<String>,
    limit: Option<u32>,
) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    let query = AuditQuery { action, target_id: target, limit: limit.map(i64::from), ..AuditQuery::default() };
    let answer = client.get::<Page<AuditEntry>>("/ops/v1/audit", &query).await?;
    for r in answer.unless_json(conn.json).map(|p| p.data).unwrap_or_default() {
        println!(
            "{}  {} ({})  {} {} {}  {}  reason: {}",
            at(r.at),
            r.operator_name,
            r.role,
            r.action,
            r.target_type,
            r.target_id,
            r.result,
            r.reason
        );
    }
    Ok(())
}

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
            let answer = client.post::<_, Started>("/ops/v1/replays", &request).await?;
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
            let answer = client.get::<List<ReplayRunView>>("/ops/v1/replays", &query).await?;
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
                let answer = client.get::<ReplayRunView>(&format!("/ops/v1/replays/{id}"), &()).await?;
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
    let path = format!("/ops/v1/replays/{id}/{}", action.as_str());
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
        let run = client.get::<ReplayRunView>(&format!("/ops/v1/replays/{id}"), &()).await?.typed;
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
        if matches!(run.status.as_str(), "completed" | "cancelled" | "paused") {
            bar.finish();
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// `withdrawals accounts keys …`: an account's API keys (admin; calls /ops/v1, or `--direct`).
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Issue a new API key for ACCOUNT_ID, printed once. The account's other keys keep working
    /// until revoked, so a client can move over before the old key is revoked.
    Create {
        account_id: String,
        /// A name for the key (what uses it), shown by `list`.
        #[arg(long)]
        label: Option<String>,
        /// Why (written to the audit log).
        #[arg(long)]
        reason: Option<String>,
    },
    /// The account's keys: id, status, created, last used (to the nearest few minutes), label.
    /// Never a secret or a hash.
    List { account_id: String },
    /// Revoke a key: it fails from the next request on, on every instance.
    Revoke {
        key_id: String,
        #[arg(long)]
        reason: String,
    },
}

pub async fn api_keys(database_url: &str, remote: &Remote, command: KeysCommand) -> anyhow::Result<()> {
    let client = Client::for_remote(remote, database_url).await?;
    let json = remote.conn.json;
    match command {
        KeysCommand::Create { account_id, label, reason } => {
            let path = format!("/ops/v1/accounts/{account_id}/keys");
            let answer = client.post::<_, ApiKeyView>(&path, &CreateKey { label, reason }).await?;
            if let Some(key) = answer.unless_json(json) {
                println!(
                    "key_id:     {}\naccount_id: {}\nlabel:      {}\napi_key:    {}\n(the API key is shown once; store it now. The account's other keys keep working until revoked.)",
                    key.id,
                    key.account_id,
                    o(&key.label),
                    o(&key.api_key)
                );
            }
        }
        KeysCommand::List { account_id } => {
            let answer = client.get::<List<ApiKeyView>>(&format!("/ops/v1/accounts/{account_id}/keys"), &()).await?;
            let Some(keys) = answer.unless_json(json) else { return Ok(()) };
            println!("{:<36}  {:<7}  {:<27}  {:<27}  label", "id", "status", "created", "last used");
            for k in keys.data {
                println!(
                    "{:<36}  {:<7}  {:<27}  {:<27}  {}",
                    k.id.to_string(),
                    k.status,
                    at(k.created_at),
                    at_or_dash(k.last_used_at),
                    o(&k.label)
                );
                if let Some(reason) = &k.revoked_reason {
                    println!("  revoked {}: {reason}", at_or_dash(k.revoked_at));
                }
            }
        }
        KeysCommand::Revoke { key_id, reason } => {
            let path = format!("/ops/v1/api-keys/{key_id}/revoke");
            let answer = client.post::<_, ApiKeyView>(&path, &ReasonRequest { reason }).await?;
            if let Some(key) = answer.unless_json(json) {
                println!("revoked {key_id} (account {}): it fails from the next request on", key.account_id)
            }
        }
    }
    Ok(())
}

/// `withdrawals operators list|disable|enable|rotate-token` (admin; calls /ops/v1, or `--direct`).
#[derive(Debug, Subcommand)]
pub enum OperatorCommand {
    /// Every operator: id, name, role, status, created, last token rotation. No secrets.
    List {
        #[command(flatten)]
        remote: Remote,
    },
    /// Disable an operator: their token fails from the next request on and their console
    /// sessions end. The last enabled admin cannot be disabled.
    Disable {
        id: String,
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Enable a disabled operator: their current token works again (rotate it if it leaked).
    Enable {
        id: String,
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        remote: Remote,
    },
    /// Issue an operator a new token, printed once; the old one fails from the next request on
    /// and their console sessions end.
    RotateToken {
        id: String,
        /// Why (written to the audit log).
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        remote: Remote,
    },
}

pub async fn operators(database_url: &str, command: OperatorCommand) -> anyhow::Result<()> {
    let remote = match &command {
        OperatorCommand::List { remote }
        | OperatorCommand::Disable { remote, .. }
        | OperatorCommand::Enable { remote, .. }
        | OperatorCommand::RotateToken { remote, .. } => remote,
    };
    let client = Client::for_remote(remote, database_url).await?;
    let json = remote.conn.json;
    match &command {
        OperatorCommand::List { .. } => {
            let answer = client.get::<List<OperatorView>>("/ops/v1/operators", &()).await?;
            let Some(operators) = answer.unless_json(json) else { return Ok(()) };
            println!("{:<36}  {:<8}  {:<8}  {:<27}  {:<27}  name", "id", "role", "status", "created", "token rotated");
            for op in operators.data {
                println!(
                    "{:<36}  {:<8}  {:<8}  {:<27}  {:<27}  {}",
                    op.id.to_string(),
                    op.role.as_str(),
                    op.status,
                    at(op.created_at),
                    at_or_dash(op.token_rotated_at),
                    op.name
                );
                if let Some(reason) = &op.disabled_reason {
                    println!("  disabled {}: {reason}", at_or_dash(op.disabled_at));
                }
            }
        }
        OperatorCommand::Disable { id, reason, .. } => {
            let path = format!("/ops/v1/operators/{id}/disable");
            let answer = client.post::<_, OperatorView>(&path, &ReasonRequest { reason: reason.clone() }).await?;
            if let Some(op) = answer.unless_json(json) {
                println!(
                    "disabled {} ({}): their token fails from the next request on; {} console sessions ended",
                    op.name,
                    op.id,
                    o(&op.sessions_ended)
                );
            }
        }
        OperatorCommand::Enable { id, reason, .. } => {
            let path = format!("/ops/v1/operators/{id}/enable");
            let answer = client.post::<_, OperatorView>(&path, &ReasonRequest { reason: reason.clone() }).await?;
            if let Some(op) = answer.unless_json(json) {
                println!("enabled {} ({})", op.name, op.id);
            }
        }
        OperatorCommand::RotateToken { id, reason, .. } => {
            let path = format!("/ops/v1/operators/{id}/rotate-token");
            let answer = client.post::<_, OperatorView>(&path, &OptionalReason { reason: reason.clone() }).await?;
            if let Some(op) = answer.unless_json(json) {
                println!(
                    "operator_id: {}\nstatus:      {}\ntoken:       {}\n(the token is shown once; the old token no longer works and {} console sessions ended)",
                    op.id,
                    op.status,
                    o(&op.token),
                    o(&op.sessions_ended)
                );
                if op.own_token == Some(true) {
                    println!("(this was your own token: use the new one from now on)");
                }
            }
        }
    }
    Ok(())
}
