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

crate::text_enum! {
    /// Why a presented credential was refused: logged and counted (issue 27, the `reason` label
    /// of `auth_failures_total`), never told to the caller, who gets the same 401 for each.
    pub enum CredentialRefusal("credential refusal", 5) {
        /// Not `<prefix>_<id>_<secret>` (another kind of credential, a typo, a guess).
        Malformed = "malformed",
        /// No credential has that id.
        Unknown = "unknown",
        /// An API key that was revoked.
        Revoked = "revoked",
        /// An operator who was disabled (or whose stored role is not one we know).
        Disabled = "disabled",
        /// The id exists and the secret is wrong.
        WrongSecret = "wrong_secret",
    }
}

/// Checks an operator token (`wdo_<id>_<secret>`): hashed, compared in constant time, disabled
/// operators refused.
pub async fn authenticate(db: &Db, token: &str) -> OpsResult<Operator> {
    check_token(db, token).await?.map_err(|_| OpsError::unauthenticated())
}

/// [`authenticate`], saying why a token is refused (the outer error is the database's).
pub async fn check_token(db: &Db, token: &str) -> OpsResult<Result<Operator, CredentialRefusal>> {
    let Some((id, secret)) = credentials::parse(credentials::OPERATOR_TOKEN_PREFIX, token) else {
        return Ok(Err(CredentialRefusal::Malformed));
    };
    let Some(stored) = find_operator(db, OperatorId(id)).await? else {
        return Ok(Err(CredentialRefusal::Unknown));
    };
    if !credentials::verify(secret, &stored.secret_hash) {
        return Ok(Err(CredentialRefusal::WrongSecret));
    }
    Ok(match stored.disabled_at {
        None => Ok(Operator { id: OperatorId(stored.id), name: stored.name, role: stored.role }),
        Some(_) => Err(CredentialRefusal::Disabled),
    })
}
