//! Bearer credentials: customer API keys (`wdk_…`) and operator tokens (`wdo_…`); and the
//! signing secrets of customers' notification endpoints (`whsec_…`, SPEC §17), which must be
//! used to sign and so cannot be hashed: they are sealed (AES-256-GCM under `NOTIFY_SECRET_KEY`,
//! a fresh nonce each, the endpoint's id as associated data so a sealed secret cannot be moved to
//! another endpoint) and opened only to sign.
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

/// The prefix of an endpoint's signing secret (Stripe's).
pub const SIGNING_SECRET_PREFIX: &str = "whsec_";

/// A new signing secret: `whsec_` and 32 random bytes in hex.
pub fn new_signing_secret() -> secrecy::SecretString {
    let mut secret = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut secret);
    secrecy::SecretString::from(format!("{SIGNING_SECRET_PREFIX}{}", hex::encode(secret)))
}

const NONCE_BYTES: usize = 12;

/// `secret` sealed under `key` for the endpoint `owner`: nonce, then ciphertext and tag.
pub fn seal(key: &[u8; 32], owner: Uuid, secret: &[u8]) -> Vec<u8> {
    use aes_gcm::aead::{Aead, KeyInit, Payload};
    let cipher = aes_gcm::Aes256Gcm::new(key.into());
    let mut nonce = [0u8; NONCE_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut nonce);
    let sealed = cipher
        .encrypt((&nonce).into(), Payload { msg: secret, aad: owner.as_bytes() })
        .expect("AES-GCM seals any message this size");
    [nonce.as_slice(), &sealed].concat()
}

/// The secret [`seal`] sealed for `owner` under `key`; `None` if it was sealed under another
/// key, for another endpoint, or altered.
pub fn open(key: &[u8; 32], owner: Uuid, sealed: &[u8]) -> Option<secrecy::SecretString> {
    use aes_gcm::aead::{Aead, KeyInit, Payload};
    if sealed.len() < NONCE_BYTES {
        return None;
    }
    let (nonce, body) = sealed.split_at(NONCE_BYTES);
    let cipher = aes_gcm::Aes256Gcm::new(key.into());
    let plain = cipher.decrypt(nonce.into(), Payload { msg: body, aad: owner.as_bytes() }).ok()?;
    String::from_utf8(plain).ok().map(secrecy::SecretString::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_secret_opens_only_under_its_key_for_its_endpoint() {
        use secrecy::ExposeSecret;
        let secret = new_signing_secret();
        assert!(secret.expose_secret().starts_with("whsec_") && secret.expose_secret().len() == 6 + 64);
        let (key, other_key, owner) = ([7u8; 32], [8u8; 32], Uuid::now_v7());
        let sealed = seal(&key, owner, secret.expose_secret().as_bytes());
        assert!(!sealed.windows(16).any(|w| secret.expose_secret().as_bytes().windows(16).any(|s| s == w)));
        assert_eq!(open(&key, owner, &sealed).unwrap().expose_secret(), secret.expose_secret());
        assert!(open(&other_key, owner, &sealed).is_none(), "another key");
        assert!(open(&key, Uuid::now_v7(), &sealed).is_none(), "another endpoint");
        let mut altered = sealed.clone();
        *altered.last_mut().unwrap() ^= 1;
        assert!(open(&key, owner, &altered).is_none(), "altered");
        assert_ne!(seal(&key, owner, b"x"), seal(&key, owner, b"x"), "a fresh nonce each time");
    }

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
