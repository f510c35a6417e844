//! A policy profile's version as the store keeps it.

use chrono::{DateTime, Utc};

/// One version of a profile: its canonical text under its content hash. Stored once, when
/// the first run pinned to it starts, and never changed, so a run restored or audited
/// later is judged by exactly the rules it started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyVersion {
    /// SHA-256 of `source`, 64 lowercase hex digits: the version's identity.
    pub hash: String,
    /// The profile's name.
    pub name: String,
    /// The profile in its canonical form (TOML in the policy-file format).
    pub source: String,
    /// When a run first started under it.
    pub first_seen: DateTime<Utc>,
}
