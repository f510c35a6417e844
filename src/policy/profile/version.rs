//! A profile's version: the SHA-256 of its canonical form.
//!
//! The canonical form is the profile rendered back as TOML by [`profile_to_toml`]: one
//! fixed key order, one spelling of each value, no comments, input tables with sorted
//! keys. Two files that load to the same profile (reformatted, commented, keys reordered,
//! TOML or YAML) therefore have one hash, and any change to what the profile says changes
//! it. The canonical form loads back to the same profile, so it is also what the store
//! keeps of a version: a run restored or audited later is judged by exactly that text.
//!
//! SHA-256 rather than xxh3: the hash names a version in the store and in every decision
//! of the log, so a second profile with the same hash must be out of reach, not merely
//! unlikely; it is computed once per profile load, where its cost does not show.

use sha2::{Digest, Sha256};

use super::compile::CompiledProfile;
use super::load::{parse_profile, ParseError, ProfileFormat};
use super::render::profile_to_toml;
use super::schema::PolicyProfile;

/// The canonical form of a profile: the text its hash is taken over.
pub fn canonical_form(profile: &PolicyProfile) -> String {
    profile_to_toml(profile)
}

/// The content hash of a canonical form: 64 lowercase hex digits.
pub fn content_hash(canonical: &str) -> String {
    Sha256::digest(canonical.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Why a stored version cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// The stored text is not a profile.
    #[error("stored version {hash}: {source}")]
    Unreadable {
        /// The version's hash.
        hash: String,
        /// Why it does not load.
        source: ParseError,
    },
    /// The stored text loads to a profile of another hash: it was altered after it was
    /// stored, and judging by it would not be judging by the version the run pinned.
    #[error("stored version {hash}: its text hashes to {actual}")]
    Mismatch {
        /// The version's hash.
        hash: String,
        /// The hash of what is stored.
        actual: String,
    },
}

/// Compiles a version from its stored canonical form, checking that it is the version
/// `hash` names.
pub fn compile_version(hash: &str, canonical: &str) -> Result<CompiledProfile, VersionError> {
    let unreadable = |source| VersionError::Unreadable {
        hash: hash.to_string(),
        source,
    };
    let profile = parse_profile(canonical, ProfileFormat::Toml, "").map_err(unreadable)?;
    let compiled =
        CompiledProfile::compile(profile).map_err(|e| unreadable(ParseError::Invalid(e)))?;
    if compiled.hash() != hash {
        return Err(VersionError::Mismatch {
            hash: hash.to_string(),
            actual: compiled.hash().to_string(),
        });
    }
    Ok(compiled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash_of(text: &str, format: ProfileFormat) -> String {
        let profile = parse_profile(text, format, "stem").expect("a valid profile");
        CompiledProfile::compile(profile)
            .expect("compiles")
            .hash()
            .to_string()
    }

    const BASE: &str = r#"
name = "team"
mode = "plan"

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"
command_allow = ["git status", "cargo test"]

[termination]
max_steps = 10

[[tests]]
tool = "Bash"
command = "git status"
input = { b = 1, a = "x" }
expect = "allow"
"#;

    #[test]
    fn formatting_comments_and_key_order_do_not_change_the_hash() {
        let base = hash_of(BASE, ProfileFormat::Toml);
        assert_eq!(base.len(), 64);
        let reformatted = r#"
# the team's profile
mode="plan"   # unmatched calls are denied
name="team"
[[rules]]
decision = "allow"
command_allow = [
  "git status",
  "cargo test",
]
specifier = {tool="Bash"}
[[tests]]
expect = "allow"
input = { a = "x", b = 1 }
command = "git status"
tool = "Bash"
[termination]
max_steps = 10
"#;
        assert_eq!(hash_of(reformatted, ProfileFormat::Toml), base);
        let yaml = r#"
name: team
mode: plan
rules:
  - specifier: { tool: Bash }
    decision: allow
    command_allow: [git status, cargo test]
termination: { max_steps: 10 }
tests:
  - { tool: Bash, command: git status, input: { a: x, b: 1 }, expect: allow }
"#;
        assert_eq!(hash_of(yaml, ProfileFormat::Yaml), base);
        // Spelling a default out is no change either.
        let defaults = BASE.replace("max_steps = 10", "max_steps = 10\nmax_cost = 0.0");
        assert_eq!(hash_of(&defaults, ProfileFormat::Toml), base);
    }

    #[test]
    fn every_semantic_change_changes_the_hash() {
        let base = hash_of(BASE, ProfileFormat::Toml);
        for (from, to) in [
            ("\"plan\"", "\"default\""),
            (
                "\"git status\", \"cargo test\"",
                "\"cargo test\", \"git status\"",
            ),
            ("decision = \"allow\"", "decision = \"ask\""),
            ("max_steps = 10", "max_steps = 11"),
            ("name = \"team\"", "name = \"team2\""),
            ("mode = \"plan\"", "mode = \"plan\"\ndescription = \"d\""),
            ("b = 1", "b = 2"),
        ] {
            let changed = BASE.replacen(from, to, 1);
            assert_ne!(changed, BASE, "{from} is in the base profile");
            assert_ne!(
                hash_of(&changed, ProfileFormat::Toml),
                base,
                "{from} -> {to}"
            );
        }
    }

    #[test]
    fn a_version_compiles_back_from_its_canonical_form() {
        let profile = parse_profile(BASE, ProfileFormat::Toml, "stem").expect("valid");
        let compiled = CompiledProfile::compile(profile).expect("compiles");
        let again = compile_version(compiled.hash(), compiled.canonical()).expect("loads");
        assert_eq!(again.profile(), compiled.profile());
        assert_eq!(again.hash(), compiled.hash());
    }

    #[test]
    fn an_altered_stored_version_is_refused() {
        let profile = parse_profile(BASE, ProfileFormat::Toml, "stem").expect("valid");
        let compiled = CompiledProfile::compile(profile).expect("compiles");
        let altered = compiled.canonical().replace("\"allow\"", "\"deny\"");
        let err = compile_version(compiled.hash(), &altered).expect_err("refused");
        assert!(
            matches!(&err, VersionError::Mismatch { hash, .. } if hash == compiled.hash()),
            "{err}"
        );
        let err = compile_version(compiled.hash(), "not = [toml").expect_err("refused");
        assert!(matches!(err, VersionError::Unreadable { .. }), "{err}");
    }
}
