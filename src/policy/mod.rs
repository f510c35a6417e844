//! Policy profiles and their evaluation.
//!
//! Two rooms: `profile`, what an operator writes and its life from file to compiled form
//! (`CompiledProfile`, and `ProfileRegistry`, which holds the built-in presets and the
//! profiles of a policy directory); and `judge`, how a call is decided under a compiled
//! profile, shell command lines included. `replay` judges recorded calls again.
//! docs/POLICY.md describes the rules for users.

mod judge;
mod profile;
pub mod replay;

pub use judge::eval::{ToolCall, Verdict};
pub use judge::offload::{
    apply_grants_off_runtime, evaluate_off_runtime, JudgeFailed, INLINE_COMMAND_BYTES,
};
pub use judge::path::{locate, normalize_path, WorkspacePath};
pub use judge::protected::PROTECTED_NAMES;
pub use profile::case::{PolicyTest, DEFAULT_TEST_WORKSPACE};
pub use profile::check::{TestFailure, TestOutcome};
pub use profile::compile::CompiledProfile;
pub use profile::containment::{egress_of, EgressEndpoint, Network, SandboxSettings};
pub use profile::error::{LoadError, PolicyError};
pub use profile::grants::{grant_match, GrantError};
pub use profile::import;
pub use profile::lint::{lint, LintKind, LintWarning, KNOWN_TOOLS};
pub use profile::live::{LiveProfiles, ProfileChange};
pub use profile::load::{parse_profile, ParseError, ProfileFormat, ProfileRegistry, ProfileSource};
pub use profile::presets::{presets, DEFAULT_PROFILE};
pub use profile::render::{profile_to_toml, rule_to_toml};
pub use profile::schema::{
    PermissionRule, PolicyMode, PolicyProfile, QualityGate, TerminationCondition, ToolSpecifier,
    UnknownMode, DEFAULT_ASK_TIMEOUT_SECONDS,
};
pub use profile::version::{canonical_form, compile_version, content_hash, VersionError};
