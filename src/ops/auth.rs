//! Operator authentication and roles: a `wdo_…` token, hashed, compared in constant time.

use super::{OpsError, OpsResult};
use crate::credentials;
use crate::domain::OperatorId;
use crate::storage::credentials::find_operator;
use crate::storage::Db;

pub use crate::domain::Role;

/// An authenticated operator.
#[derive(Debug, Clone)]
pub struct Operator {
    pub id: OperatorId,
    pub name: String,
    pub role: Role,
}

impl Operator {
    /// 403 unless the operator has at least `role`.
    pub fn require(&self, role: Role) -> OpsResult<()> {
        if self.role.includes(role) {
            Ok(())
        } else {
            Err(OpsError::forbidden(
                "forbidden",
                format!("this action needs the {} role; you have {}", role.as_str(), self.role.as_str()),
            ))
        }
    }
}

/// Checks an operator token (`wdo_<id>_<secret>`): hashed, compared in constant time, disabled
/// operators refused.
pub async fn authenticate(db: &Db, token: &str) -> OpsResult<Operator> {
    let (id, secret) =
        credentials::parse(credentials::OPERATOR_TOKEN_PREFIX, token).ok_or_else(OpsError::unauthenticated)?;
    let stored = find_operator(db, OperatorId(id)).await?.ok_or_else(OpsError::unauthenticated)?;
    if stored.disabled_at.is_some() || !credentials::verify(secret, &stored.secret_hash) {
        return Err(OpsError::unauthenticated());
    }
    let role = Role::parse(&stored.role).ok_or_else(OpsError::unauthenticated)?;
    Ok(Operator { id: OperatorId(stored.id), name: stored.name, role })
}
