//! `withdrawals review …`: the review queue, one withdrawal with its evidence, resolutions
//! and the two-person decisions.

use clap::Subcommand;
use uuid::Uuid;

use super::client::Client;
use super::format::{age, at, o};
use super::Connection;
use crate::domain::{Evidence, StoredEvidence};
use crate::ops::routes;
use crate::ops::types::{
    DecisionResult, List, OpsWithdrawal, Page, ProviderStatus, ReasonRequest, Reconciling, ResolveRequest, Resolved,
    ReviewDecisionView, WithdrawalDetail, WithdrawalQuery,
};

#[derive(Debug, Subcommand)]
pub enum ReviewCommand {
    /// Withdrawals waiting in `requires_review`, oldest first, with why each waits and what the
    /// provider last said.
    List {
        #[arg(long, default_value = "requires_review")]
        status: String,
        /// Only this customer account's withdrawals.
        #[arg(long)]
        account: Option<Uuid>,
        /// Only those waiting for this reason: dead_letter[:CATEGORY], reconciliation[:RESULT] or
        /// unknown (e.g. `dead_letter:retries_exhausted`, `reconciliation:window_expired`).
        #[arg(long)]
        reason: Option<String>,
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

pub async fn review(conn: &Connection, command: ReviewCommand) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    match command {
        ReviewCommand::List { status, account, reason, limit } => {
            let query = WithdrawalQuery {
                status: Some(status),
                account_id: account,
                reason,
                limit: limit.map(i64::from),
                cursor: None,
            };
            let answer = client.get::<Page<OpsWithdrawal>>(&routes::WITHDRAWALS.path(&[]), &query).await?;
            let Some(page) = answer.unless_json(conn.json) else { return Ok(()) };
            println!(
                "{:<38} {:>12} {:<4} {:>5} {:>7}  {:<16} {:<36} {:<28} provider said",
                "id", "amount", "cur", "ver", "age", "status", "reason", "code"
            );
            for w in page.data {
                println!(
                    "{:<38} {:>12} {:<4} {:>5} {:>7}  {:<16} {:<36} {:<28} {}",
                    w.id.to_string(),
                    w.amount,
                    w.currency,
                    w.version,
                    age(w.age_seconds),
                    w.status.as_str(),
                    w.reason.as_ref().map_or("-", |r| r.value.as_str()),
                    w.reason.as_ref().and_then(|r| r.code.as_deref()).unwrap_or("-"),
                    provider_said(w.provider_status.as_ref())
                );
            }
        }
        ReviewCommand::Show { id } => {
            let answer = client.get::<WithdrawalDetail>(&routes::WITHDRAWAL.path(&[&id]), &()).await?;
            if let Some(shown) = answer.unless_json(conn.json) {
                print_withdrawal(&shown);
            }
        }
        ReviewCommand::Resolve { id, action, reason, version, provider_reference } => {
            let request = ResolveRequest { action: action.clone(), reason, version, provider_reference };
            let answer = client.post::<_, Resolved>(&routes::WITHDRAWAL_RESOLVE.path(&[&id]), &request).await?;
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
            let path = routes::WITHDRAWAL_RECONCILE.path(&[&id]);
            let answer = client.post::<_, Reconciling>(&path, &ReasonRequest { reason }).await?;
            if let Some(queued) = answer.unless_json(conn.json) {
                println!(
                    "reconciling {}: job {} asks the provider now (withdrawals review show {} for the result)",
                    queued.withdrawal.id, queued.job_id, queued.withdrawal.id
                );
            }
        }
        ReviewCommand::Decisions => {
            let answer = client.get::<List<ReviewDecisionView>>(&routes::REVIEW_DECISIONS.path(&[]), &()).await?;
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
            let path = routes::DECISION_APPROVE.path(&[&id]);
            let answer = client.post::<_, DecisionResult>(&path, &ReasonRequest { reason }).await?;
            if let Some(decided) = answer.unless_json(conn.json) {
                let w = decided.withdrawal.as_ref();
                println!("approved: {id} is now {} (version {})", o(&w.map(|w| w.status)), o(&w.map(|w| w.version)));
            }
        }
        ReviewCommand::Reject { id, reason } => {
            let path = routes::DECISION_REJECT.path(&[&id]);
            let answer = client.post::<_, DecisionResult>(&path, &ReasonRequest { reason }).await?;
            if answer.unless_json(conn.json).is_some() {
                println!("rejected: the decision on {id} is dropped; nothing moved");
            }
        }
    }
    Ok(())
}

/// `review list`'s last column: the provider's last known status, where it was read and when
/// (`unknown` when nothing is stored).
fn provider_said(status: Option<&ProviderStatus>) -> String {
    match status {
        Some(ProviderStatus { status, source: Some(source), provider, at: Some(when) }) => {
            let by = provider.as_deref().map(|p| format!(" at {p}")).unwrap_or_default();
            format!("{status} ({source}{by}, {})", at(*when))
        }
        Some(s) => s.status.clone(),
        None => "unknown".into(),
    }
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
        let said = |e: &Evidence| {
            let transfer = e.transfer().map_or("none", |t| t.id.as_str());
            let by = e.provider.as_deref().map(|p| format!(" [{p}]")).unwrap_or_default();
            match &e.failover {
                // A move between providers rests on what was known at the first (SPEC §16).
                Some(m) => format!(
                    "{} → {}: {} (breaker {}, {} attempt(s) there) at {}",
                    m.from,
                    m.to,
                    m.rule,
                    m.breaker,
                    m.attempts.len(),
                    at(e.asked_at)
                ),
                None => format!("{}{by} (transfer {transfer}) at {}", e.verdict, at(e.asked_at)),
            }
        };
        match t.evidence.as_ref().map(StoredEvidence::read) {
            None => {}
            Some(Ok(StoredEvidence::Provider(e))) => println!("    provider said: {}", said(&e)),
            Some(Ok(StoredEvidence::SettlementLine(line))) => {
                println!("    settlement report showed: {}", line.verdict);
                if let Some(live) = &line.provider_record {
                    println!("    provider said: {}", said(live));
                }
            }
            Some(Err(unreadable)) => println!("    provider said: {unreadable}"),
        }
    }
    for a in &shown.provider_attempts {
        println!(
            "  attempt #{} at {} {} side effect {} {} ({})",
            a.attempt_no,
            a.provider,
            o(&a.outcome),
            a.side_effect,
            o(&a.error_code),
            at(a.started_at)
        );
    }
    for r in &shown.reconciliation_results {
        println!("  reconciliation at {} {}: {} ({})", r.provider, r.result, r.detail, at(r.at));
    }
    for d in &shown.dead_letters {
        println!("  dead letter {} {} {} — owner {}, see {}", d.id, d.category, d.error_code, d.owner, d.runbook);
    }
    for e in &shown.ledger_entries {
        println!("  ledger {} available {} held {} paid out {}", e.kind, e.available, e.held, e.paid_out);
    }
}
