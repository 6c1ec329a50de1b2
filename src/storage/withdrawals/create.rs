//! Creating a withdrawal: its funds held, the row inserted, its first transition recorded, its
//! `withdrawal.created` event written and its submit job enqueued, with the caller's writes, in
//! one transaction.

use super::transitions::transition_in;
use crate::domain::job::SubmitPayout;
use crate::domain::view::WithdrawalView;
use crate::domain::EventType;
use crate::domain::{AccountId, Actor, Amount, Destination, Withdrawal, WithdrawalId, WithdrawalStatus};
use crate::storage::accounts::{self};
use crate::storage::batch::{Arg, Ran, Sql, Writes};
use crate::storage::jobs;
use crate::storage::notifications::{self, EventVersion};
use crate::storage::{DbTime, Result, StorageError, Tx};

/// A validated request to withdraw.
#[derive(Debug, Clone)]
pub struct NewWithdrawal {
    pub account_id: AccountId,
    pub amount: Amount,
    pub destination: Destination,
    pub reference: Option<String>,
    pub idempotency_key: String,
    pub correlation_id: String,
    /// Created by a process in sandbox mode.
    pub sandbox: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateRejected {
    InsufficientFunds,
}

/// The withdrawal `new` becomes, as [`create`] will store it (a fresh id, `pending`, version 1).
pub fn prepare(new: &NewWithdrawal) -> Withdrawal {
    let now = DbTime::now().0;
    Withdrawal {
        id: WithdrawalId::new(),
        account_id: new.account_id,
        status: WithdrawalStatus::Pending,
        amount: new.amount,
        destination: new.destination.clone(),
        reference: new.reference.clone(),
        failure_code: None,
        version: 1,
        idempotency_key: new.idempotency_key.clone(),
        correlation_id: new.correlation_id.clone(),
        created_at: now,
        updated_at: now,
        sandbox: new.sandbox,
    }
}

/// Creates `withdrawal` (from [`prepare`]) with its funds held, its first transition recorded and
/// its submit job enqueued, together with the caller's writes `also` — all in `tx`, as one
/// statement on PostgreSQL ([`Writes`]). Returns the outcome of `also`'s writes, read by their own
/// handles, and whether the hold applied. On `Err(CreateRejected)` the transaction holds partial
/// writes: the caller must drop it.
pub async fn create(
    tx: &mut Tx,
    withdrawal: &Withdrawal,
    also: Writes,
) -> Result<(Ran, std::result::Result<(), CreateRejected>)> {
    let w = withdrawal;
    let now = DbTime::from(w.created_at);
    let mut writes = Writes::new();
    writes.push(
        Sql::new(
            "INSERT INTO withdrawals (id, account_id, amount, currency, destination, reference, idempotency_key,
                                      correlation_id, created_at, updated_at, sandbox, status, version)
             VALUES (",
        )
        .binds([
            Arg::Uuid(w.id.0),
            Arg::Uuid(w.account_id.0),
            Arg::I64(w.amount.to_minor()),
            w.amount.currency().code().into(),
            Arg::Json(serde_json::to_value(&w.destination).map_err(StorageError::corrupt)?),
            Arg::OptText(w.reference.clone()),
            w.idempotency_key.as_str().into(),
            w.correlation_id.as_str().into(),
            Arg::Time(now),
            Arg::Time(now),
            Arg::Bool(w.sandbox),
        ])
        .sql(", 'pending', 1)"),
    );
    let transition = transition_in(
        &mut writes,
        w.key(),
        None,
        WithdrawalStatus::Pending,
        &Actor::Customer,
        "created",
        &w.correlation_id,
        None,
    );
    let held = accounts::hold_in(&mut writes, w.key(), w.amount, transition);
    notifications::event_in(
        &mut writes,
        EventType::Created,
        w,
        EventVersion::Known(w.version),
        WithdrawalView::from(w),
    );
    jobs::enqueue_in(&mut writes, &SubmitPayout::new(w.id, None).job(w.account_id, &w.correlation_id, now));
    let theirs = writes.append(also);
    let counts = writes.run(tx).await?;
    let held = match counts.applied(held) {
        true => Ok(()),
        false => Err(CreateRejected::InsufficientFunds),
    };
    Ok((counts.part(theirs), held))
}
