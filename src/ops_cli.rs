//! The operator commands of the CLI (`status`, `breakers`, `review`, `dlq`, `replay`, `audit`,
//! and the credential lifecycle: `accounts keys …`, `operators list|disable|enable|rotate-token`):
//! thin clients of `/ops/v1`, so roles and the audit log apply exactly as they do over HTTP.
//! `WITHDRAWALS_URL` and `WITHDRAWALS_TOKEN` say where and who; `--json` prints the API's JSON
//! for scripts. The credential commands also take `--direct`: the same ops routes run in this
//! process against `DATABASE_URL` (same token check, role and audit), for when the API is down.

use anyhow::{bail, Context};
use axum::http::{header, Method};
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::http::AppState;

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
        account: Option<String>,
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
#[derive(Debug, Args, Clone, serde::Serialize)]
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
    pub failed_after: Option<String>,
    /// RFC 3339 time.
    #[arg(long)]
    pub failed_before: Option<String>,
}

impl FilterArgs {
    fn query(&self) -> Vec<(&'static str, String)> {
        [
            opt("queue", &self.queue),
            opt("job_type", &self.job_type),
            opt("error_code", &self.error_code),
            opt("category", &self.category),
            opt("failed_after", &self.failed_after),
            opt("failed_before", &self.failed_before),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// Dead letters, newest first, filtered.
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// open (default), closed or all.
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Open dead letters grouped by category and error code.
    Summary,
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
}

/// Largest in-process response read (a list of keys or operators is far smaller).
const MAX_LOCAL_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

impl Client {
    fn new(conn: &Connection) -> anyhow::Result<Self> {
        let token = conn.token.clone().context("WITHDRAWALS_TOKEN (or --token) is required")?;
        let transport =
            Transport::Http { http: reqwest::Client::new(), base: conn.url.trim_end_matches('/').to_owned() };
        Ok(Self { transport, token })
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

    async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let (status, body) = match &self.transport {
            Transport::Http { http, base } => {
                let mut request = http.request(method, format!("{base}{path}")).query(query).bearer_auth(&self.token);
                if let Some(body) = body {
                    request = request.json(body);
                }
                let response = request.send().await.with_context(|| format!("cannot reach {}", self.describe()))?;
                let status = response.status();
                (status, response.json::<Value>().await.unwrap_or(Value::Null))
            }
            Transport::Local(state) => {
                let mut uri = path.to_owned();
                if !query.is_empty() {
                    uri = format!("{uri}?{}", serde_urlencoded::to_string(query)?);
                }
                let request = axum::http::Request::builder()
                    .method(method)
                    .uri(uri)
                    .header(header::AUTHORIZATION, format!("Bearer {}", self.token))
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(
                        body.map(|b| axum::body::Body::from(b.to_string())).unwrap_or_else(axum::body::Body::empty),
                    )?;
                let response = crate::http::ops::router().with_state(state.clone()).oneshot(request).await?;
                let status = response.status();
                let bytes = axum::body::to_bytes(response.into_body(), MAX_LOCAL_RESPONSE_BYTES).await?;
                (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
            }
        };
        if !status.is_success() {
            let code = body["code"].as_str().unwrap_or("error");
            let detail = body["detail"].as_str().unwrap_or("");
            bail!("{} {code}: {detail}", status.as_u16());
        }
        Ok(body)
    }

    async fn get(&self, path: &str, query: &[(&str, String)]) -> anyhow::Result<Value> {
        self.call(Method::GET, path, query, None).await
    }

    async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.call(Method::POST, path, &[], Some(body)).await
    }
}

fn opt(name: &'static str, value: &Option<impl ToString>) -> Option<(&'static str, String)> {
    value.as_ref().map(|v| (name, v.to_string()))
}

fn age(seconds: &Value) -> String {
    let s = seconds.as_i64().unwrap_or(0);
    match s {
        s if s < 120 => format!("{s}s"),
        s if s < 7_200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

pub async fn review(conn: &Connection, command: ReviewCommand) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    let body = match &command {
        ReviewCommand::List { status, account, limit } => {
            let query: Vec<_> = [Some(("status", status.clone())), opt("account_id", account), opt("limit", limit)]
                .into_iter()
                .flatten()
                .collect();
            client.get("/ops/v1/withdrawals", &query).await?
        }
        ReviewCommand::Show { id } => client.get(&format!("/ops/v1/withdrawals/{id}"), &[]).await?,
        ReviewCommand::Resolve { id, action, reason, version, provider_reference } => {
            let request = json!({"action": action, "reason": reason, "version": version, "provider_reference": provider_reference});
            client.post(&format!("/ops/v1/withdrawals/{id}/resolve"), &request).await?
        }
        ReviewCommand::Decisions => client.get("/ops/v1/review-decisions", &[]).await?,
        ReviewCommand::Approve { id, reason } => {
            client.post(&format!("/ops/v1/withdrawals/{id}/decision/approve"), &json!({"reason": reason})).await?
        }
        ReviewCommand::Reject { id, reason } => {
            client.post(&format!("/ops/v1/withdrawals/{id}/decision/reject"), &json!({"reason": reason})).await?
        }
    };
    if conn.json {
        println!("{body}");
        return Ok(());
    }
    match command {
        ReviewCommand::List { .. } => {
            println!("{:<38} {:>12} {:<4} {:>5} {:>7}  status", "id", "amount", "cur", "ver", "age");
            for w in body["data"].as_array().into_iter().flatten() {
                println!(
                    "{:<38} {:>12} {:<4} {:>5} {:>7}  {}",
                    s(&w["id"]),
                    s(&w["amount"]),
                    s(&w["currency"]),
                    s(&w["version"]),
                    age(&w["age_seconds"]),
                    s(&w["status"])
                );
            }
        }
        ReviewCommand::Show { .. } => {
            let w = &body["withdrawal"];
            if w["sandbox"] == true {
                println!("SANDBOX: made in sandbox mode; no real money is paid out for it");
            }
            println!(
                "{} {} {} — {} (version {}, {} in state)",
                s(&w["id"]),
                s(&w["amount"]),
                s(&w["currency"]),
                s(&w["status"]),
                s(&w["version"]),
                age(&w["age_seconds"])
            );
            for d in body["review_decisions"].as_array().into_iter().flatten() {
                println!(
                    "  decision {} {} {} requested by {} ({}): {}",
                    s(&d["id"]),
                    s(&d["action"]),
                    s(&d["status"]),
                    s(&d["requested_by"]),
                    s(&d["requested_at"]),
                    s(&d["reason"])
                );
            }
            for t in body["transitions"].as_array().into_iter().flatten() {
                println!(
                    "  transition  {} → {}  by {}: {}  ({})",
                    s(&t["from"]),
                    s(&t["to"]),
                    s(&t["actor"]),
                    s(&t["reason"]),
                    s(&t["at"])
                );
                if let Some(verdict) = t["evidence"]["verdict"].as_str() {
                    let transfer = t["evidence"]["transfer"]["id"].as_str().unwrap_or("none");
                    println!("    provider said: {verdict} (transfer {transfer}) at {}", s(&t["evidence"]["asked_at"]));
                }
            }
            for a in body["provider_attempts"].as_array().into_iter().flatten() {
                println!(
                    "  attempt #{} {} side effect {} {} ({})",
                    s(&a["attempt_no"]),
                    s(&a["outcome"]),
                    s(&a["side_effect"]),
                    s(&a["error_code"]),
                    s(&a["started_at"])
                );
            }
            for r in body["reconciliation_results"].as_array().into_iter().flatten() {
                println!("  reconciliation {}: {} ({})", s(&r["result"]), s(&r["detail"]), s(&r["at"]));
            }
            for d in body["dead_letters"].as_array().into_iter().flatten() {
                println!(
                    "  dead letter {} {} {} — owner {}, see {}",
                    s(&d["id"]),
                    s(&d["category"]),
                    s(&d["error_code"]),
                    s(&d["owner"]),
                    s(&d["runbook"])
                );
            }
            for e in body["ledger_entries"].as_array().into_iter().flatten() {
                println!(
                    "  ledger {} available {} held {} paid out {}",
                    s(&e["kind"]),
                    s(&e["available"]),
                    s(&e["held"]),
                    s(&e["paid_out"])
                );
            }
        }
        ReviewCommand::Resolve { action, .. } => {
            let w = &body["withdrawal"];
            if body["status"] == "pending_approval" {
                println!(
                    "{action}: decision {} on {} waits for a second operator (withdrawals review approve {} --reason …)",
                    s(&body["decision"]["id"]),
                    s(&w["id"]),
                    s(&w["id"])
                );
            } else {
                println!("{action}: {} is now {} (version {})", s(&w["id"]), s(&w["status"]), s(&w["version"]));
            }
        }
        ReviewCommand::Decisions => {
            println!("{:<38} {:<9} {:<38}  reason", "withdrawal", "action", "requested by");
            for d in body["data"].as_array().into_iter().flatten() {
                println!(
                    "{:<38} {:<9} {:<38}  {}",
                    s(&d["withdrawal_id"]),
                    s(&d["action"]),
                    s(&d["requested_by"]),
                    s(&d["reason"])
                );
            }
        }
        ReviewCommand::Approve { id, .. } => {
            let w = &body["withdrawal"];
            println!("approved: {id} is now {} (version {})", s(&w["status"]), s(&w["version"]));
        }
        ReviewCommand::Reject { id, .. } => println!("rejected: the decision on {id} is dropped; nothing moved"),
    }
    Ok(())
}

pub async fn dlq(conn: &Connection, command: DlqCommand) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    let body = match &command {
        DlqCommand::List { filter, state, limit, cursor } => {
            let mut query = filter.query();
            query.extend([opt("state", state), opt("limit", limit), opt("cursor", cursor)].into_iter().flatten());
            client.get("/ops/v1/dead-letters", &query).await?
        }
        DlqCommand::Summary => client.get("/ops/v1/dead-letters/summary", &[]).await?,
        DlqCommand::Show { id } => client.get(&format!("/ops/v1/dead-letters/{id}"), &[]).await?,
        DlqCommand::Close { id, reason } => {
            client.post(&format!("/ops/v1/dead-letters/{id}/close"), &json!({"reason": reason})).await?
        }
    };
    if conn.json {
        println!("{body}");
        return Ok(());
    }
    match command {
        DlqCommand::List { .. } => {
            println!(
                "{:<38} {:<20} {:<28} {:<12} {:>7}  withdrawal",
                "id", "category", "error_code", "side_effect", "age"
            );
            for d in body["data"].as_array().into_iter().flatten() {
                println!(
                    "{:<38} {:<20} {:<28} {:<12} {:>7}  {}",
                    s(&d["id"]),
                    s(&d["category"]),
                    s(&d["error_code"]),
                    s(&d["side_effect_state"]),
                    age(&d["age_seconds"]),
                    s(&d["withdrawal_id"])
                );
            }
            if let Some(next) = body["next_cursor"].as_str() {
                println!("more: --cursor {next}");
            }
        }
        DlqCommand::Summary => {
            println!("{:<20} {:<28} {:>6} {:>10}", "category", "error_code", "open", "oldest");
            for g in body["data"].as_array().into_iter().flatten() {
                println!(
                    "{:<20} {:<28} {:>6} {:>10}",
                    s(&g["category"]),
                    s(&g["error_code"]),
                    s(&g["open"]),
                    age(&g["oldest_open_age_seconds"])
                );
            }
        }
        DlqCommand::Show { .. } => println!("{}", serde_json::to_string_pretty(&body)?),
        DlqCommand::Close { id, .. } => println!("closed {id}"),
    }
    Ok(())
}

/// `withdrawals status`: the overview (withdrawals by state, dead letters, queues, breakers, replays).
pub async fn status(conn: &Connection) -> anyhow::Result<()> {
    let body = Client::new(conn)?.get("/ops/v1/overview", &[]).await?;
    if conn.json {
        println!("{body}");
        return Ok(());
    }
    let age_or_dash = |v: &Value| if v.is_null() { "-".to_owned() } else { age(v) };
    if body["sandbox"] == true {
        println!("SANDBOX MODE: payouts go to an in-process provider mock; no money moves");
    }
    println!("withdrawals            count  oldest");
    for w in body["withdrawals"].as_array().into_iter().flatten() {
        println!("  {:<20} {:>5}  {}", s(&w["state"]), s(&w["count"]), age_or_dash(&w["oldest_age_seconds"]));
    }
    let dl = &body["dead_letters"];
    println!("dead letters open      {:>5}  {}", s(&dl["open"]), age_or_dash(&dl["oldest_open_age_seconds"]));
    for c in dl["by_category"].as_array().into_iter().flatten() {
        println!("  {:<20} {:>5}  {}", s(&c["category"]), s(&c["open"]), age(&c["oldest_age_seconds"]));
    }
    println!("queues                 scheduled  due  running  oldest due");
    for q in body["queues"].as_array().into_iter().flatten() {
        println!(
            "  {:<20} {:>9}  {:>3}  {:>7}  {}",
            s(&q["queue"]),
            s(&q["scheduled"]),
            s(&q["due"]),
            s(&q["running"]),
            age_or_dash(&q["oldest_due_age_seconds"])
        );
    }
    for b in body["breakers"].as_array().into_iter().flatten() {
        println!("breaker {}: {}", s(&b["name"]), s(&b["state"]));
    }
    for r in body["replays"].as_array().into_iter().flatten() {
        println!("replays {}: {} (pending items {})", s(&r["status"]), s(&r["runs"]), s(&r["pending_items"]));
    }
    Ok(())
}

/// `withdrawals breakers`: each provider breaker's state as the API process sees it.
pub async fn breakers(conn: &Connection) -> anyhow::Result<()> {
    let body = Client::new(conn)?.get("/ops/v1/breakers", &[]).await?;
    if conn.json {
        println!("{body}");
        return Ok(());
    }
    for b in body["data"].as_array().into_iter().flatten() {
        println!("{}  {}", s(&b["name"]), s(&b["state"]));
    }
    Ok(())
}

pub async fn audit(
    conn: &Connection,
    action: Option<String>,
    target: Option<String>,
    limit: Option<u32>,
) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    let query: Vec<_> =
        [opt("action", &action), opt("target_id", &target), opt("limit", &limit)].into_iter().flatten().collect();
    let body = client.get("/ops/v1/audit", &query).await?;
    if conn.json {
        println!("{body}");
        return Ok(());
    }
    for r in body["data"].as_array().into_iter().flatten() {
        println!(
            "{}  {} ({})  {} {} {}  {}  reason: {}",
            s(&r["at"]),
            s(&r["operator_name"]),
            s(&r["role"]),
            s(&r["action"]),
            s(&r["target_type"]),
            s(&r["target_id"]),
            s(&r["result"]),
            s(&r["reason"])
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
        ids: Vec<String>,
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
            let mut request = json!({
                "reason": reason, "expected_payload_version": expected_payload_version,
                "destination_queue": destination, "dry_run": dry_run, "rate_per_second": rate,
                "max_concurrency": max_concurrency, "auto_pause_threshold": auto_pause,
                "expected_selection_digest": expect_selection,
            });
            if ids.is_empty() {
                request["filter"] = serde_json::to_value(&filter)?;
            } else {
                request["dead_letter_ids"] = json!(ids);
            }
            let body = client.post("/ops/v1/replays", &request).await?;
            if conn.json {
                println!("{body}");
            } else if dry_run {
                println!(
                    "dry run: {} dead letters would be replayed{}",
                    s(&body["count"]),
                    if body["needs_approval"] == true { " (needs a second operator's approval)" } else { "" }
                );
                println!(
                    "selection {} (start with --expect-selection {} to require exactly these)",
                    s(&body["selection_digest"]),
                    s(&body["selection_digest"])
                );
                for item in body["sample"].as_array().into_iter().flatten() {
                    println!(
                        "  {} {} {} withdrawal {}",
                        s(&item["dead_letter_id"]),
                        s(&item["category"]),
                        s(&item["error_code"]),
                        s(&item["withdrawal_id"])
                    );
                }
            } else {
                println!(
                    "replay run {} started: {} items, status {}",
                    s(&body["id"]),
                    s(&body["total"]),
                    s(&body["status"])
                );
            }
            if watch && !dry_run {
                follow(&client, &s(&body["id"])).await?;
            }
        }
        ReplayCommand::List { status, limit } => {
            let query: Vec<_> =
                [opt("status", &status), Some(("limit", limit.to_string()))].into_iter().flatten().collect();
            let body = client.get("/ops/v1/replays", &query).await?;
            if conn.json {
                println!("{body}");
            } else {
                for run in body["data"].as_array().into_iter().flatten() {
                    let p = &run["progress"];
                    println!(
                        "{} {:<17} {} items: {} succeeded, {} failed, {} pending  {}",
                        s(&run["id"]),
                        s(&run["status"]),
                        s(&run["total"]),
                        s(&p["succeeded"]),
                        s(&p["failed"]),
                        s(&p["pending"]),
                        s(&run["reason"])
                    );
                }
            }
        }
        ReplayCommand::Status { id, watch } => {
            if watch {
                follow(&client, &id).await?;
            } else {
                let body = client.get(&format!("/ops/v1/replays/{id}"), &[]).await?;
                if conn.json {
                    println!("{body}");
                } else {
                    let p = &body["progress"];
                    println!(
                        "run {} {}: total {}, released {}, reconciling {}, skipped {}, succeeded {}, failed {}, new dead letters {}, {} /s{}",
                        s(&body["id"]), s(&body["status"]), s(&p["total"]), s(&p["released"]), s(&p["reconciling"]), s(&p["skipped"]),
                        s(&p["succeeded"]), s(&p["failed"]), s(&p["new_dead_letters"]), s(&p["released_per_second"]),
                        body["paused_reason"].as_str().map(|r| format!(" ({r})")).unwrap_or_default()
                    );
                }
            }
        }
        ReplayCommand::Pause { id, reason } => return replay_control(conn, "pause", &id, &reason).await,
        ReplayCommand::Resume { id, reason } => return replay_control(conn, "resume", &id, &reason).await,
        ReplayCommand::Cancel { id, reason } => return replay_control(conn, "cancel", &id, &reason).await,
        ReplayCommand::Approve { id, reason } => return replay_control(conn, "approve", &id, &reason).await,
    }
    Ok(())
}

/// pause | resume | cancel | approve.
async fn replay_control(conn: &Connection, action: &str, id: &str, reason: &str) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    let body = client.post(&format!("/ops/v1/replays/{id}/{action}"), &json!({"reason": reason})).await?;
    if conn.json {
        println!("{body}");
    } else {
        println!("run {} is now {}", s(&body["id"]), s(&body["status"]));
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
        let body = client.get(&format!("/ops/v1/replays/{id}"), &[]).await?;
        let p = &body["progress"];
        let done = p["released"].as_u64().unwrap_or(0)
            + p["reconciling"].as_u64().unwrap_or(0)
            + p["skipped"].as_u64().unwrap_or(0)
            + p["cancelled"].as_u64().unwrap_or(0);
        bar.set_length(p["total"].as_u64().unwrap_or(0));
        bar.set_position(done);
        bar.set_message(format!(
            "{} · succeeded {} · failed {} · new dead letters {} · {} /s",
            s(&body["status"]),
            s(&p["succeeded"]),
            s(&p["failed"]),
            s(&p["new_dead_letters"]),
            s(&p["released_per_second"])
        ));
        if matches!(body["status"].as_str(), Some("completed" | "cancelled" | "paused")) {
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
    let body = match &command {
        KeysCommand::Create { account_id, label, reason } => {
            client
                .post(&format!("/ops/v1/accounts/{account_id}/keys"), &json!({"label": label, "reason": reason}))
                .await?
        }
        KeysCommand::List { account_id } => client.get(&format!("/ops/v1/accounts/{account_id}/keys"), &[]).await?,
        KeysCommand::Revoke { key_id, reason } => {
            client.post(&format!("/ops/v1/api-keys/{key_id}/revoke"), &json!({"reason": reason})).await?
        }
    };
    if remote.conn.json {
        println!("{body}");
        return Ok(());
    }
    match command {
        KeysCommand::Create { .. } => println!(
            "key_id:     {}\naccount_id: {}\nlabel:      {}\napi_key:    {}\n(the API key is shown once; store it now. The account's other keys keep working until revoked.)",
            s(&body["id"]),
            s(&body["account_id"]),
            s(&body["label"]),
            s(&body["api_key"])
        ),
        KeysCommand::List { .. } => {
            println!("{:<36}  {:<7}  {:<27}  {:<27}  label", "id", "status", "created", "last used");
            for k in body["data"].as_array().into_iter().flatten() {
                println!(
                    "{:<36}  {:<7}  {:<27}  {:<27}  {}",
                    s(&k["id"]),
                    s(&k["status"]),
                    s(&k["created_at"]),
                    s(&k["last_used_at"]),
                    s(&k["label"])
                );
                if let Some(reason) = k["revoked_reason"].as_str() {
                    println!("  revoked {}: {reason}", s(&k["revoked_at"]));
                }
            }
        }
        KeysCommand::Revoke { key_id, .. } => {
            println!("revoked {key_id} (account {}): it fails from the next request on", s(&body["account_id"]))
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
    let (remote, path, body) = match &command {
        OperatorCommand::List { remote } => (remote, "/ops/v1/operators".to_owned(), None),
        OperatorCommand::Disable { id, reason, remote } => {
            (remote, format!("/ops/v1/operators/{id}/disable"), Some(json!({"reason": reason})))
        }
        OperatorCommand::Enable { id, reason, remote } => {
            (remote, format!("/ops/v1/operators/{id}/enable"), Some(json!({"reason": reason})))
        }
        OperatorCommand::RotateToken { id, reason, remote } => {
            (remote, format!("/ops/v1/operators/{id}/rotate-token"), Some(json!({"reason": reason})))
        }
    };
    let client = Client::for_remote(remote, database_url).await?;
    let body = match &body {
        Some(body) => client.post(&path, body).await?,
        None => client.get(&path, &[]).await?,
    };
    if remote.conn.json {
        println!("{body}");
        return Ok(());
    }
    match command {
        OperatorCommand::List { .. } => {
            println!("{:<36}  {:<8}  {:<8}  {:<27}  {:<27}  name", "id", "role", "status", "created", "token rotated");
            for o in body["data"].as_array().into_iter().flatten() {
                println!(
                    "{:<36}  {:<8}  {:<8}  {:<27}  {:<27}  {}",
                    s(&o["id"]),
                    s(&o["role"]),
                    s(&o["status"]),
                    s(&o["created_at"]),
                    s(&o["token_rotated_at"]),
                    s(&o["name"])
                );
                if let Some(reason) = o["disabled_reason"].as_str() {
                    println!("  disabled {}: {reason}", s(&o["disabled_at"]));
                }
            }
        }
        OperatorCommand::Disable { .. } => println!(
            "disabled {} ({}): their token fails from the next request on; {} console sessions ended",
            s(&body["name"]),
            s(&body["id"]),
            s(&body["sessions_ended"])
        ),
        OperatorCommand::Enable { .. } => println!("enabled {} ({})", s(&body["name"]), s(&body["id"])),
        OperatorCommand::RotateToken { .. } => {
            println!(
                "operator_id: {}\nstatus:      {}\ntoken:       {}\n(the token is shown once; the old token no longer works and {} console sessions ended)",
                s(&body["id"]),
                s(&body["status"]),
                s(&body["token"]),
                s(&body["sessions_ended"])
            );
            if body["own_token"] == true {
                println!("(this was your own token: use the new one from now on)");
            }
        }
    }
    Ok(())
}
