//! Money entering an account (SPEC §1.2, §8; issue 27): the one door, `POST
//! /ops/v1/accounts/{id}/credits` `{amount, currency, reason}` with an `Idempotency-Key`, and the
//! CLI's `accounts fund` over it; `accounts create --fund` runs the same [`credit`] in process as
//! the local actor. Treasury or admin.
//!
//! One transaction writes the credit record under its key (with the answer), the balance —
//! raised only if its total still fits 64 bits, else 422 `balance_overflow` — the `funding`
//! ledger entry naming the actor, and the audit row `account.credit`. The key is scoped to the
//! credited account and kept forever: the same key and the same request answer the stored credit
//! again (`replayed`), with no second credit; the same key with another request is 422
//! `idempotency_key_reused`, as on the customer API. Amounts take the customer API's grammar
//! and codes, with the credit limit (`CREDIT_LIMITS`). Owns no SQL.

use serde_json::json;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::acts::AccountCredit;
use super::types::{CreditRequest, CreditView};
use super::{require_reason, Action, Audited, Operator, Ops, OpsError, OpsResult};
use crate::domain::{AccountId, Actor, Amount, Currency, IdempotencyKey};
use crate::storage::accounts::{self, Credit, NewCredit};
use crate::storage::credentials::{self, LOCAL_ACTOR};
use crate::storage::DbTime;

/// What a credit request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credited {
    pub credit: CreditView,
    /// The key's credit was already done: this is its stored answer, and nothing moved now.
    pub replayed: bool,
}

/// How a ledger entry names who put the money in.
fn actor_of(operator: &Operator) -> String {
    if operator.id == LOCAL_ACTOR {
        operator.name.clone()
    } else {
        Actor::Operator(operator.id.to_string()).to_string()
    }
}

/// "The same credit", by meaning: `"5"` and `"5.00"` are the same amount.
fn fingerprint(account: AccountId, amount: &Amount, reason: &str) -> Vec<u8> {
    let canonical = json!({
        "account_id": account.to_string(),
        "amount": amount.value().to_string(),
        "currency": amount.currency().code(),
        "reason": reason,
    });
    Sha256::digest(canonical.to_string().as_bytes()).to_vec()
}

/// The amount in the customer API's grammar and codes (`invalid_amount`, `amount_not_positive`,
/// `amount_too_precise`, `amount_over_limit`, `unsupported_currency`), within the credit limit.
pub fn parse_amount(ops: &Ops<'_>, amount: &str, currency: &str) -> OpsResult<Amount> {
    let currency = Currency::parse(currency).map_err(|e| OpsError::invalid(e.code(), "currency", e.to_string()))?;
    Amount::parse(amount, currency, &ops.config.credit_limits)
        .map_err(|e| OpsError::invalid(e.code(), "amount", e.to_string()))
}

/// Credits `account` (see the module documentation). 404 for an unknown account; every refusal
/// is audited.
pub async fn credit(
    ops: &Ops<'_>,
    operator: &Operator,
    account: AccountId,
    key: &IdempotencyKey,
    req: CreditRequest,
) -> OpsResult<Credited> {
    let parameters = json!({"amount": req.amount, "currency": req.currency, "idempotency_key": key.as_str()});
    ops.perform(operator, &AccountCredit::ACT, account.to_string(), &req.reason, parameters, async |audited| {
        let reason = require_reason(&req.reason)?;
        let amount = parse_amount(ops, &req.amount, &req.currency)?;
        let fingerprint = fingerprint(account, &amount, reason);
        let mut tx = ops.db.begin().await?;
        if !accounts::account_exists(&mut tx, account).await? {
            return Err(OpsError::not_found());
        }
        if operator.id == LOCAL_ACTOR {
            // The audit row (a replay's too) names the reserved row.
            credentials::ensure_local_actor(&mut tx).await?;
        }
        if let Some(done) = replay(&mut tx, account, key, &fingerprint).await? {
            let replayed = Audited { parameters: json!({"credit_id": done.id}), ..audited.clone_shallow() };
            replayed.record(&mut tx, operator, "replayed").await?;
            tx.commit().await?;
            return Ok(Credited { credit: done, replayed: true });
        }
        let actor = actor_of(operator);
        let (id, ledger_entry) = (Uuid::now_v7(), Uuid::now_v7());
        let view = CreditView {
            id,
            account_id: account.0,
            amount: amount.value().to_string(),
            currency: amount.currency().code().to_owned(),
            reason: reason.to_owned(),
            actor: actor.clone(),
            ledger_entry_id: ledger_entry,
            idempotency_key: key.as_str().to_owned(),
            created_at: DbTime::now().0,
        };
        let body = serde_json::to_vec(&view).map_err(anyhow::Error::from)?;
        let outcome = accounts::credit(
            &mut tx,
            &NewCredit {
                id,
                account,
                idempotency_key: key.as_str(),
                fingerprint: &fingerprint,
                amount,
                reason,
                actor: &actor,
                ledger_entry,
                response_body: &body,
            },
        )
        .await?;
        match outcome {
            Credit::Done => {}
            Credit::KeyTaken => {
                // A request with the same key committed while ours waited on its row: its
                // credit is the answer (read committed sees it now).
                let done = replay(&mut tx, account, key, &fingerprint).await?;
                tx.commit().await?;
                return done.map(|credit| Credited { credit, replayed: true }).ok_or_else(|| {
                    OpsError::conflict("idempotency_request_in_progress", "a request with this key is in flight")
                });
            }
            Credit::Overflow => {
                return Err(OpsError::invalid(
                    "balance_overflow",
                    "amount",
                    "this credit would take the account's balance past what can be stored (64-bit minor units)",
                ))
            }
        }
        let done = Audited {
            reason,
            parameters: json!({
                "amount": view.amount, "currency": view.currency, "idempotency_key": key.as_str(),
                "credit_id": id, "ledger_entry_id": view.ledger_entry_id, "actor": actor,
            }),
            ..audited.clone_shallow()
        };
        done.record_ok(&mut tx, operator).await?;
        tx.commit().await?;
        tracing::info!(account_id = %account, credit_id = %id, actor = %actor, "account credited");
        Ok(Credited { credit: view, replayed: false })
    })
    .await
}

/// The stored credit under `key` if the request is the same one; 422 `idempotency_key_reused` if
/// the key was used for another.
async fn replay(
    tx: &mut crate::storage::Tx,
    account: AccountId,
    key: &IdempotencyKey,
    fingerprint: &[u8],
) -> OpsResult<Option<CreditView>> {
    let Some(stored) = accounts::stored_credit(tx, account, key.as_str()).await? else { return Ok(None) };
    if stored.fingerprint != fingerprint {
        return Err(OpsError::invalid(
            "idempotency_key_reused",
            "Idempotency-Key",
            "this Idempotency-Key was used for a different credit of this account",
        ));
    }
    let view: CreditView = serde_json::from_slice(&stored.response_body)
        .map_err(|e| anyhow::anyhow!("a stored credit's answer does not read back: {e}"))?;
    Ok(Some(view))
}
