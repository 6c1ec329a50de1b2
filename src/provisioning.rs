//! Creating accounts and operators with fresh credentials: shared by the CLI and the tests, so
//! both go through exactly one path.

use anyhow::{bail, Context};

use crate::credentials::{self, API_KEY_PREFIX, OPERATOR_TOKEN_PREFIX};
use crate::domain::Role;
use crate::domain::{AccountId, Amount, OperatorId};
use crate::storage::{accounts, credentials as stored, Db};

/// A new account's id and its API key (shown once).
pub struct NewAccount {
    pub account_id: AccountId,
    pub api_key: String,
}

pub async fn create_account(db: &Db, name: &str, funding: Option<Amount>) -> anyhow::Result<NewAccount> {
    let name = name.trim();
    if name.is_empty() {
        bail!("the account name must not be empty");
    }
    let mut tx = db.begin().await?;
    let account_id = accounts::create_account(&mut tx, name).await?;
    if let Some(amount) = funding {
        accounts::fund(&mut tx, account_id, amount).await?;
    }
    let issued = credentials::issue(API_KEY_PREFIX);
    stored::insert_api_key(&mut tx, crate::domain::ApiKeyId(issued.id), account_id, None, &issued.secret_hash).await?;
    tx.commit().await.context("cannot create the account")?;
    Ok(NewAccount { account_id, api_key: issued.token })
}

pub async fn fund_account(db: &Db, account: AccountId, amount: Amount) -> anyhow::Result<()> {
    let mut tx = db.begin().await?;
    if !accounts::account_exists(&mut tx, account).await? {
        bail!("no account {account}");
    }
    accounts::fund(&mut tx, account, amount).await?;
    tx.commit().await?;
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
