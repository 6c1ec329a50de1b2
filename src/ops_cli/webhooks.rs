//! `withdrawals webhooks list|show` (SPEC §15, §16): the providers' events and what each came
//! to, thin clients of `/ops/v1/webhook-events` (viewer).

use clap::Subcommand;

use super::client::Client;
use super::format::{at, at_or_dash, o};
use super::Connection;
use crate::ops::routes;
use crate::ops::types::{Page, WebhookEventQuery, WebhookEventView};

#[derive(Debug, Subcommand)]
pub enum WebhooksCommand {
    /// Events newest first: what each came to (`applied`, `no_op`, `mismatch`,
    /// `unknown_transfer`, `unverified`, or `pending` while its job has not decided).
    List {
        #[arg(long, value_parser = ["pending", "applied", "no_op", "mismatch", "unknown_transfer", "unverified"])]
        result: Option<String>,
        /// Only this event type, e.g. `transfer.paid`.
        #[arg(long = "type")]
        kind: Option<String>,
        /// Only the events this provider sent (its name in the providers file; `default` for a
        /// lone PROVIDER_URL).
        #[arg(long)]
        provider: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
        /// Where the previous page ended (printed under it).
        #[arg(long)]
        cursor: Option<String>,
    },
    /// One event: its raw body, the headers kept, and the provider's record its decision rested on.
    Show { id: String },
}

pub async fn webhooks(conn: &Connection, command: WebhooksCommand) -> anyhow::Result<()> {
    let client = Client::new(conn)?;
    match command {
        WebhooksCommand::List { result, kind, provider, limit, cursor } => {
            let query = WebhookEventQuery { result, kind, provider, limit: limit.map(i64::from), cursor };
            let answer = client.get::<Page<WebhookEventView>>(&routes::WEBHOOK_EVENTS.path(&[]), &query).await?;
            let Some(page) = answer.unless_json(conn.json) else { return Ok(()) };
            println!(
                "{:<36} {:<27} {:<12} {:<18} {:<16} {:<36}  detail",
                "id", "received", "provider", "type", "result", "withdrawal"
            );
            for e in &page.data {
                println!(
                    "{:<36} {:<27} {:<12} {:<18} {:<16} {:<36}  {}",
                    e.id.to_string(),
                    at(e.received_at),
                    e.provider,
                    e.kind,
                    e.result,
                    o(&e.withdrawal_id),
                    o(&e.detail)
                );
            }
            if let Some(next) = page.next_cursor {
                println!("more: --cursor {next}");
            }
        }
        WebhooksCommand::Show { id } => {
            let answer = client.get::<WebhookEventView>(&routes::WEBHOOK_EVENT.path(&[&id]), &()).await?;
            if let Some(e) = answer.unless_json(conn.json) {
                println!("id:          {}", e.id);
                println!("provider:    {}", e.provider);
                println!("event id:    {}", e.event_id);
                println!("type:        {}", e.kind);
                println!("transfer:    {}", o(&e.transfer_id));
                println!("withdrawal:  {}", o(&e.withdrawal_id));
                println!("result:      {}", e.result);
                println!("detail:      {}", o(&e.detail));
                println!("signed:      {}", at(e.signed_at));
                println!("received:    {}", at(e.received_at));
                println!("decided:     {}", at_or_dash(e.decided_at));
                println!("body:        {}", o(&e.body));
                println!("provider's record:");
                println!("{}", serde_json::to_string_pretty(&e.provider_record)?);
            }
        }
    }
    Ok(())
}
