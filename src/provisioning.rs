//! Creating accounts and operators with fresh credentials: shared by the CLI and the tests, so
//! both go through exactly one path. Funding an account is the operator core's credit
//! ([`ops::credits`]) as the local actor: there is no other way money enters.

use anyhow::{bail, Context};

use crate::config::AppConfig;
use crate::credentials::{self, API_KEY_PREFIX, OPERATOR_TOKEN_PREFIX};
use crate::domain::Role;
use crate::domain::{AccountId, Amount, IdempotencyKey, OperatorId};
use crate::ops::{self, types::CreditRequest, Ops};
use crate::storage::{accounts, credentials as stored, Db};

/// A new account's id and its API key (shown once).
pub struct NewAccount {
    pub account_id: AccountId,
    pub api_key: String,
}

/// [`create_account_with`] with the default settings (the default credit limit).
pub async fn create_account(db: &Db, name: &str, funding: Option<Amount>) -> anyhow::Result<NewAccount> {
    create_account_with(db, &AppConfig::default(), name, funding).await
}

/// A new account and its first API key; with `funding`, then a credit by the local actor through
/// the operator core ([`ops::credits::credit`]): the same ledger entry, audit row and limits as
/// `POST /ops/v1/accounts/{id}/credits`, under the key `account-create-<id>`.
pub async fn create_account_with(
    db: &Db,
    config: &AppConfig,
    name: &str,
    funding: Option<Amount>,
) -> anyhow::Result<NewAccount> {
    let name = name.trim();
    if name.is_empty() {
        bail!("the account name must not be empty");
    }
    let mut tx = db.begin().await?;
    let account_id = accounts::create_account(&mut tx, name).await?;
    let issued = credentials::issue(API_KEY_PREFIX);
    stored::insert_api_key(&mut tx, crate::domain::ApiKeyId(issued.id), account_id, None, &issued.secret_hash).await?;
    tx.commit().await.context("cannot create the account")?;
    if let Some(amount) = funding {
        credit_locally(db, config, account_id, amount, &format!("account-create-{account_id}"), "initial funding")
            .await
            .with_context(|| format!("account {account_id} was created but not funded"))?;
    }
    Ok(NewAccount { account_id, api_key: issued.token })
}

/// Credits `account` as the local actor (only `DATABASE_URL`, no token): the operator core's
/// credit, audited, under a new idempotency key. For tests and tools; operators use
/// `withdrawals accounts fund`.
pub async fn fund_account(db: &Db, account: AccountId, amount: Amount) -> anyhow::Result<()> {
    let key = format!("local-{}", uuid::Uuid::now_v7());
    credit_locally(db, &AppConfig::default(), account, amount, &key, "funded locally").await
}

async fn credit_locally(
    db: &Db,
    config: &AppConfig,
    account: AccountId,
    amount: Amount,
    key: &str,
    reason: &str,
) -> anyhow::Result<()> {
    let key = IdempotencyKey::parse(key)?;
    let request = CreditRequest {
        amount: amount.value().to_string(),
        currency: amount.currency().code().to_owned(),
        reason: reason.to_owned(),
    };
    let context = Ops::new(db, config, None);
    ops::credits::credit(&context, &ops::credits::local_actor(), account, &key, request).await.map_err(
        |e| match e {
            ops::OpsError::Internal(cause) => cause,
            refused => anyhow::anyhow!("{refused}"),
        },
    )?;
    Ok(())
}

pub struct NewOperator {
    pub operator_id: OperatorId,
    pub token: String,
}

pub async fn create_operator(db: &Db, name: &str, role: Role) -> anyhow::Result<NewOperator> {
    let name = name.trim();
    if name.is_empty() {
        bail!("the operator name must not be empty");
    }
    let operator_id = OperatorId::new();
    let issued = credentials::issue_with_id(OPERATOR_TOKEN_PREFIX, operator_id.0);
    let mut tx = db.begin().await?;
    stored::insert_operator(&mut tx, operator_id, name, role.as_str(), &issued.secret_hash).await?;
    tx.commit().await?;
    Ok(NewOperator { operator_id, token: issued.token })
}
