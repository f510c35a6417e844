//! Token secrets: how they are made, recognised and hashed.
//!
//! A token is a prefix naming its kind and 256 random bits in hex: `rpo_…` for operators,
//! `rpw_…` for workers. The prefix lets a leaked token be recognised (secret scanners,
//! logs) and lets a worker token sent to an operator RPC be refused for what it is. Only
//! the token's SHA-256 is stored; a plain hash is enough because the secret is random and
//! long, so there is nothing to guess that a slow hash would protect.

use std::fmt;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::domain::{Credential, CredentialKind, Role, Scope};

/// Random bytes in a token.
const SECRET_BYTES: usize = 32;
/// Prefix of operator tokens.
pub const OPERATOR_PREFIX: &str = "rpo_";
/// Prefix of worker tokens.
pub const WORKER_PREFIX: &str = "rpw_";

/// Why a token could not be made.
#[derive(Debug, thiserror::Error)]
#[error("the operating system's random source failed: {0}")]
pub struct RandomError(getrandom::Error);

/// A token's secret text. Its `Debug` hides the secret, so it cannot reach a log by
/// accident; [`Secret::expose`] is the one way to read it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The token text, to hand to its holder once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The hash the store keeps.
    pub fn hash(&self) -> String {
        hash(&self.0)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// A fresh operator token and its credential.
pub fn operator_token(
    name: &str,
    role: Role,
    scope: Scope,
    now: DateTime<Utc>,
) -> Result<(Secret, Credential), RandomError> {
    let secret = random_secret(OPERATOR_PREFIX)?;
    let credential = Credential {
        name: name.to_string(),
        hash: secret.hash(),
        kind: CredentialKind::Operator { role, scope },
        created_at: now,
        revoked_at: None,
    };
    Ok((secret, credential))
}

/// A fresh worker token for `run_id` and its credential.
pub fn worker_token(run_id: &str, now: DateTime<Utc>) -> Result<(Secret, Credential), RandomError> {
    let secret = random_secret(WORKER_PREFIX)?;
    let credential = Credential {
        name: format!("worker:{run_id}"),
        hash: secret.hash(),
        kind: CredentialKind::Worker {
            run_id: run_id.to_string(),
        },
        created_at: now,
        revoked_at: None,
    };
    Ok((secret, credential))
}

fn random_secret(prefix: &str) -> Result<Secret, RandomError> {
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::fill(&mut bytes).map_err(RandomError)?;
    let mut text = String::with_capacity(prefix.len() + 2 * SECRET_BYTES);
    text.push_str(prefix);
    text.push_str(&hex(&bytes));
    Ok(Secret(text))
}

/// Whether `text` has the shape of a token runplane issues. Anything else is refused
/// before a lookup, so junk never reaches the store.
pub fn well_formed(text: &str) -> bool {
    let body = text
        .strip_prefix(OPERATOR_PREFIX)
        .or_else(|| text.strip_prefix(WORKER_PREFIX));
    body.is_some_and(|hex| {
        hex.len() == 2 * SECRET_BYTES
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Whether a token was issued to a worker (by its prefix; the stored kind decides).
pub fn is_worker_token(text: &str) -> bool {
    text.starts_with(WORKER_PREFIX)
}

/// SHA-256 of a token, lowercase hex.
pub fn hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// Compares two hashes in time independent of where they differ.
pub fn same_hash(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_well_formed_and_hashed() {
        let now = Utc::now();
        let (a, credential) = operator_token("ci", Role::Viewer, Scope::default(), now).unwrap();
        let (b, _) = operator_token("ci", Role::Viewer, Scope::default(), now).unwrap();
        assert_ne!(a, b);
        assert!(a.expose().starts_with("rpo_"));
        assert_eq!(a.expose().len(), 4 + 64);
        assert!(well_formed(a.expose()));
        assert_eq!(credential.hash, hash(a.expose()));
        assert_ne!(credential.hash, a.expose());
        assert_eq!(format!("{a:?}"), "Secret(…)");
        let (w, credential) = worker_token("run-1", now).unwrap();
        assert!(is_worker_token(w.expose()) && well_formed(w.expose()));
        assert_eq!(credential.name, "worker:run-1");
    }

    #[test]
    fn malformed_tokens_are_recognised() {
        for bad in [
            "",
            "rpo_",
            "rpo_XYZ",
            &format!("rpo_{}", "A".repeat(64)),
            &format!("rpx_{}", "a".repeat(64)),
            &format!("rpo_{}", "a".repeat(63)),
            &format!("rpo_{}0", "a".repeat(64)),
            &format!(" rpo_{}", "a".repeat(64)),
        ] {
            assert!(!well_formed(bad), "{bad:?}");
        }
    }

    #[test]
    fn hashes_compare_equal_only_when_equal() {
        assert!(same_hash(&hash("x"), &hash("x")));
        assert!(!same_hash(&hash("x"), &hash("y")));
        assert!(!same_hash("ab", "abc"));
        assert_eq!(
            hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
