//! `withdrawals accounts fund`: money entering an account, through
//! `POST /ops/v1/accounts/{id}/credits` (treasury or admin token; `--direct` runs the same route
//! in process on `DATABASE_URL`). The amount goes to the server as typed, so the API's grammar,
//! limits and codes decide. Each run sends an `Idempotency-Key`: `--idempotency-key`, or a new
//! one, printed either way, so a run whose answer was lost is retried with the same key and
//! credits once.

use anyhow::Context;

use super::client::Client;
use super::Remote;
use crate::ops::routes;
use crate::ops::types::{CreditRequest, CreditView};

pub async fn fund(
    database_url: &str,
    remote: &Remote,
    account: &str,
    request: CreditRequest,
    idempotency_key: Option<String>,
) -> anyhow::Result<()> {
    let key = idempotency_key.unwrap_or_else(|| format!("fund-{}", uuid::Uuid::now_v7()));
    let mut client = Client::for_remote(remote, database_url).await?;
    client.idempotency_key = Some(key.clone());
    let path = routes::ACCOUNT_CREDITS.path(&[&account]);
    let answer = client
        .post::<_, CreditView>(&path, &request)
        .await
        .with_context(|| format!("idempotency key {key} (retry with --idempotency-key {key})"))?;
    if let Some(credit) = answer.unless_json(remote.conn.json) {
        println!(
            "credited {} with {} {} (credit {}, by {}; idempotency key {})",
            credit.account_id, credit.amount, credit.currency, credit.id, credit.actor, credit.idempotency_key
        );
    }
    Ok(())
}
