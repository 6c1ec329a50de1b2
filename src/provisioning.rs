//! Creating accounts and operators with fresh credentials: shared by the CLI and the tests, so
//! both go through exactly one path. Funding an account is the operator core's credit
//! ([`ops::credits`]) as the local actor: there is no other way money enters.

use anyhow::{bail, Context};

use crate::config::AppConfig;
use crate::credentials::{self, API_KEY_PREFIX};
use crate::domain::Role;
use crate::domain::{AccountId, Amount, IdempotencyKey, OperatorId};
use crate::ops::types::{CreditRequest, OptionalReason};
use crate::ops::{self, credentials::LocalActor, Ops};
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
    ops::credits::credit(&context, &LocalActor::from_env().as_operator(), account, &key, request)
        .await
        .map_err(ops_error)?;
    Ok(())
}

pub struct NewOperator {
    pub operator_id: OperatorId,
    pub token: String,
}

/// `operators create`: a new operator, created by `actor` (only `DATABASE_URL`) through
/// [`ops::credentials::create_locally`] — audited, and the token marked as issued by the local
/// actor, so it cannot approve a two-person decision until its holder rotates it.
pub async fn create_operator_as(db: &Db, actor: &LocalActor, name: &str, role: Role) -> anyhow::Result<NewOperator> {
    let config = AppConfig::default();
    let ops = Ops::new(db, &config, None);
    let (operator_id, token) = ops::credentials::create_locally(&ops, actor, name, role).await.map_err(ops_error)?;
    Ok(NewOperator { operator_id, token })
}

/// [`create_operator_as`] by the local actor of this process's environment.
pub async fn create_operator(db: &Db, name: &str, role: Role) -> anyhow::Result<NewOperator> {
    create_operator_as(db, &LocalActor::from_env(), name, role).await
}

/// The reason an enrolment's rotation is audited with.
pub const ENROLMENT_REASON: &str = "enrolment: the holder makes the token their own";

/// An operator created as [`create_operator`] does, who then rotates their own token — what a new
/// operator does first, so that their credential is their own and counts as a second person
/// (tests and chaos runs, whose operators approve each other's decisions).
pub async fn create_enrolled_operator(db: &Db, name: &str, role: Role) -> anyhow::Result<NewOperator> {
    let created = create_operator(db, name, role).await?;
    let config = AppConfig::default();
    let ops = Ops::new(db, &config, None);
    let operator = ops::authenticate(db, &created.token).await.map_err(ops_error)?;
    let reason = OptionalReason { reason: Some(ENROLMENT_REASON.to_owned()) };
    let rotated =
        ops::credentials::rotate_token(&ops, &operator, created.operator_id, reason).await.map_err(ops_error)?;
    let token = rotated.token.context("a rotation answers the new token")?;
    Ok(NewOperator { operator_id: created.operator_id, token })
}

/// An operator action's failure for the CLI: a refusal's one line, or the internal cause chain.
fn ops_error(err: ops::OpsError) -> anyhow::Error {
    match err {
        ops::OpsError::Internal(cause) => cause,
        refused => anyhow::anyhow!("{refused}"),
    }
}
