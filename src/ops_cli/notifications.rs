//! `withdrawals notifications endpoints|list|show|redeliver` (SPEC §17): customers' webhook
//! endpoints with their health, the notifications with what each receiver answered, and an
//! operator's redelivery — thin clients of `/ops/v1/webhook-endpoints` and
//! `/ops/v1/notifications` (viewer; redeliver: operator, audited). Filters are judged by the
//! server, so a bad one is its one-line refusal (`422 invalid_status: …`).

use clap::Subcommand;

use super::client::Client;
use super::format::{at, at_or_dash, o};
use super::Connection;
use crate::ops::routes;
use crate::ops::types::{
    List, NotificationDetail, NotificationQuery, NotificationView, ReasonRequest, Redelivered, WebhookEndpointQuery,
    WebhookEndpointView,
};

#[derive(Debug, Subcommand)]
pub enum NotificationsCommand {
    /// Every account's webhook endpoints, newest first, with their health: status, why disabled,
    /// failing since when, and their notifications by status.
    Endpoints {
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Notifications newest first: each event's delivery to one endpoint, its status, attempts
    /// and the last answer.
    List {
        /// Only this endpoint's (`we_…`).
        #[arg(long)]
        endpoint: Option<String>,
        /// pending, delivered, undeliverable, gone or skipped.
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
    },
    /// One notification (its id is a UUID): its endpoint, every attempt and the event as sent.
    Show { id: String },
    /// Send a notification again (operator; audited): the same event, same `id`, with a fresh
    /// retry window. Refused when its endpoint is not enabled.
    Redeliver {
        id: String,
        /// Why (written to the audit log).
        #[arg(long)]
        reason: String,
    },
}

pub async fn notifications(conn: &Connection, command: NotificationsCommand) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    match command {
        NotificationsCommand::Endpoints { limit } => {
            let query = WebhookEndpointQuery { limit: limit.map(i64::from) };
            let answer = client.get::<List<WebhookEndpointView>>(&routes::WEBHOOK_ENDPOINTS.path(&[]), &query).await?;
            let Some(list) = answer.unless_json(conn.json) else { return Ok(()) };
            println!(
                "{:<35} {:<36} {:<8} {:>7} {:>9} {:>13} {:>4} {:>7}  {:<27}  url",
                "id", "account", "status", "pending", "delivered", "undeliverable", "gone", "skipped", "failing since"
            );
            for e in &list.data {
                let n = &e.notifications;
                println!(
                    "{:<35} {:<36} {:<8} {:>7} {:>9} {:>13} {:>4} {:>7}  {:<27}  {}",
                    e.id,
                    e.account_id.to_string(),
                    e.status.as_str(),
                    n.pending,
                    n.delivered,
                    n.undeliverable,
                    n.gone,
                    n.skipped,
                    at_or_dash(e.failing_since),
                    e.url
                );
                if let Some(reason) = &e.disabled_reason {
                    println!("  disabled: {reason}");
                }
            }
        }
        NotificationsCommand::List { endpoint, status, limit } => {
            let query = NotificationQuery { endpoint, status, limit: limit.map(i64::from) };
            let answer = client.get::<List<NotificationView>>(&routes::NOTIFICATIONS.path(&[]), &query).await?;
            let Some(list) = answer.unless_json(conn.json) else { return Ok(()) };
            println!(
                "{:<36} {:<27} {:<35} {:<26} {:<13} {:>8} {:>4}  last error",
                "id", "created", "endpoint", "event", "status", "attempts", "code"
            );
            for n in &list.data {
                println!(
                    "{:<36} {:<27} {:<35} {:<26} {:<13} {:>8} {:>4}  {}",
                    n.id.to_string(),
                    at(n.created_at),
                    n.endpoint_id,
                    n.event_type.as_str(),
                    n.status.as_str(),
                    n.attempts,
                    o(&n.last_status_code),
                    o(&n.last_error)
                );
            }
        }
        NotificationsCommand::Show { id } => {
            let answer = client.get::<NotificationDetail>(&routes::NOTIFICATION.path(&[&id]), &()).await?;
            let Some(d) = answer.unless_json(conn.json) else { return Ok(()) };
            let (n, e) = (&d.notification, &d.endpoint);
            println!("id:           {}", n.id);
            println!("account:      {}", n.account_id);
            println!("event:        {} ({})", n.event_id, n.event_type);
            println!("withdrawal:   {}", n.withdrawal_id);
            println!("status:       {}", n.status);
            println!("attempts:     {}", n.attempts);
            println!("last answer:  {} {}", o(&n.last_status_code), o(&n.last_error));
            println!("created:      {}", at(n.created_at));
            println!("delivered:    {}", at_or_dash(n.delivered_at));
            let why = e.disabled_reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
            println!("endpoint:     {} {}", e.id, e.url);
            println!("  status:     {}{why}", e.status);
            println!("{:>7} {:<27} {:<12} {:>4} {:>8}  error", "attempt", "at", "result", "code", "ms");
            for a in &d.attempts {
                println!(
                    "{:>7} {:<27} {:<12} {:>4} {:>8}  {}",
                    a.attempt,
                    at(a.at),
                    a.result.as_str(),
                    o(&a.status_code),
                    a.duration_ms,
                    o(&a.error)
                );
            }
            println!("event as sent:");
            println!("{}", serde_json::to_string_pretty(&d.event)?);
        }
        NotificationsCommand::Redeliver { id, reason } => {
            let path = routes::NOTIFICATION_REDELIVER.path(&[&id]);
            let answer = client.post::<_, Redelivered>(&path, &ReasonRequest { reason }).await?;
            if let Some(r) = answer.unless_json(conn.json) {
                println!(
                    "redelivery of {} queued (job {}): event {} goes to {} again",
                    r.notification.id, r.job_id, r.notification.event_id, r.notification.endpoint_id
                );
            }
        }
    }
    Ok(())
}
