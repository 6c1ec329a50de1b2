//! The credential lifecycle: `withdrawals accounts keys …` and
//! `withdrawals operators list|disable|enable|rotate-token`, over HTTP or `--direct`.

use clap::Subcommand;

use super::client::Client;
use super::format::{at, at_or_dash, o};
use super::Remote;
use crate::ops::routes;
use crate::ops::types::{ApiKeyView, CreateKey, List, OperatorView, OptionalReason, ReasonRequest};

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
            let path = routes::ACCOUNT_KEYS.path(&[&account_id]);
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
            let answer = client.get::<List<ApiKeyView>>(&routes::ACCOUNT_KEYS.path(&[&account_id]), &()).await?;
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
            let path = routes::API_KEY_REVOKE.path(&[&key_id]);
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
            let answer = client.get::<List<OperatorView>>(&routes::OPERATORS.path(&[]), &()).await?;
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
            let path = routes::OPERATOR_DISABLE.path(&[&id]);
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
            let path = routes::OPERATOR_ENABLE.path(&[&id]);
            let answer = client.post::<_, OperatorView>(&path, &ReasonRequest { reason: reason.clone() }).await?;
            if let Some(op) = answer.unless_json(json) {
                println!("enabled {} ({})", op.name, op.id);
            }
        }
        OperatorCommand::RotateToken { id, reason, .. } => {
            let path = routes::OPERATOR_ROTATE_TOKEN.path(&[&id]);
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
