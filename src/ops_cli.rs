//! The operator commands of the CLI, one file per command group (`status`, `breakers`, `ledger`,
//! `review`, `dlq`, `replay`, `audit`, `settlement`, `webhooks`, `notifications`, `accounts fund`
//! in `credits`, and the credential lifecycle in `credentials`: `accounts keys …`,
//! `operators …`), over one [`client`]:
//! thin clients of `/ops/v1` (paths from [`crate::ops::routes`]), so roles and the audit log apply exactly as they do over HTTP.
//! `WITHDRAWALS_URL` and `WITHDRAWALS_TOKEN` say where and who; `--json` prints the API's JSON
//! for scripts. The credential commands also take `--direct`: the same ops routes run in this
//! process against `DATABASE_URL` (same token check, role and audit), for when the API is down.
//!
//! Requests are built from, and answers read into, the DTOs of [`crate::ops::types`]: the tables
//! print typed fields, and `--json` prints the answer exactly as the API wrote it.

mod credits;
mod settlement;

mod audit;
mod breakers;
mod client;
mod credentials;
mod dlq;
mod format;
mod ledger;
mod notifications;
mod replay;
mod review;
mod status;
mod webhooks;

use clap::Args;

pub use audit::audit;
pub use breakers::{breakers, BreakersCommand};
pub use credentials::{api_keys, operators, KeysCommand, OperatorCommand};
pub use credits::fund;
pub use dlq::{dlq, DlqCommand, FilterArgs};
pub use ledger::{ledger, LedgerCommand};
pub use notifications::{notifications, NotificationsCommand};
pub use replay::{replay, ReplayCommand};
pub use review::{review, ReviewCommand};
pub use settlement::{settlement, ImportArgs, SettlementCommand};
pub use status::{status, StatusArgs};
pub use webhooks::{webhooks, WebhooksCommand};

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
