//! An account's balances (SPEC §3): available, held and paid out, per currency.

use super::types::{BalanceList, BalanceView};
use super::{Customers, ServiceResult};
use crate::domain::{format_minor, AccountId, Currency};
use crate::storage::{accounts, StorageError};

/// Every currency the account holds money in.
pub async fn list(customers: &Customers<'_>, account: AccountId) -> ServiceResult<BalanceList> {
    let rows = accounts::balances(customers.db, account).await?;
    let data = rows
        .into_iter()
        .map(|row| {
            let currency = Currency::parse(&row.currency).map_err(StorageError::corrupt)?;
            Ok(BalanceView {
                currency: row.currency,
                available: format_minor(row.available, currency),
                held: format_minor(row.held, currency),
                paid_out: format_minor(row.paid_out, currency),
            })
        })
        .collect::<Result<Vec<_>, StorageError>>()?;
    Ok(BalanceList { data })
}
