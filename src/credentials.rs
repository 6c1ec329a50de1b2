//! Bearer credentials: customer API keys (`wdk_…`) and operator tokens (`wdo_…`).
//!
//! A token is `<prefix>_<id>_<secret>`: the id finds the row, and the SHA-256 of the secret is
//! compared in constant time with the stored hash. The secret itself is shown once, at creation,
//! and never stored or logged.

use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use uuid::Uuid;

pub const API_KEY_PREFIX: &str = "wdk";
pub const OPERATOR_TOKEN_PREFIX: &str = "wdo";

/// A freshly issued credential: the token to hand out once and what to store.
pub struct Issued {
    pub id: Uuid,
    pub token: String,
    pub secret_hash: Vec<u8>,
}

pub fn issue(prefix: &str) -> Issued {
    issue_with_id(prefix, Uuid::now_v7())
}

/// Issues a credential whose id is an existing row's id (an operator's token names the operator).
pub fn issue_with_id(prefix: &str, id: Uuid) -> Issued {
    let mut secret = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut secret);
    let secret = hex::encode(secret);
    Issued { id, secret_hash: hash(&secret), token: format!("{prefix}_{}_{secret}", id.simple()) }
}

/// Splits a presented token into its id and secret if it has the expected prefix and shape.
pub fn parse<'t>(prefix: &str, token: &'t str) -> Option<(Uuid, &'t str)> {
    let rest = token.strip_prefix(prefix)?.strip_prefix('_')?;
    let (id, secret) = rest.split_once('_')?;
    let id = Uuid::try_parse(id).ok()?;
    (!secret.is_empty()).then_some((id, secret))
}

pub fn hash(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// Constant-time comparison of a presented secret with a stored hash.
pub fn verify(secret: &str, stored_hash: &[u8]) -> bool {
    hash(secret).ct_eq(stored_hash).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_tokens_parse_and_verify() {
        let issued = issue(API_KEY_PREFIX);
        let (id, secret) = parse(API_KEY_PREFIX, &issued.token).unwrap();
        assert_eq!(id, issued.id);
        assert!(verify(secret, &issued.secret_hash));
        assert!(!verify("not-the-secret", &issued.secret_hash));
        assert!(!issued.token.contains(&hex::encode(&issued.secret_hash)));
    }

    #[test]
    fn malformed_tokens_do_not_parse() {
        let issued = issue(API_KEY_PREFIX);
        assert!(parse(OPERATOR_TOKEN_PREFIX, &issued.token).is_none());
        for bad in ["", "wdk", "wdk_", "wdk_notauuid_secret", "wdk_0190c3b2a1b27000800000000000000a_"] {
            assert!(parse(API_KEY_PREFIX, bad).is_none(), "{bad}");
        }
    }
}
