//! Policy profiles and their evaluation.
//!
//! A profile (see `profile`) is what an operator writes; `CompiledProfile` is what the
//! server evaluates calls with; `ProfileRegistry` holds the built-in presets and the
//! profiles of a policy directory. docs/POLICY.md describes the rules for users.

mod case;
mod check;
mod commands;
mod compile;
mod containment;
mod coproc;
mod error;
mod eval;
mod expansion;
mod extent;
mod globs;
mod grants;
mod guard;
pub mod import;
mod interpreters;
mod judgement;
mod lex;
mod lint;
mod live;
mod load;
mod local;
mod memo;
mod offload;
mod options;
mod path;
mod presets;
mod profile;
mod programs;
mod reads;
mod render;
pub mod replay;
mod secrets;
mod shell;
mod version;
mod vetted;
mod walk;
mod words;
mod wrappers;

pub use case::{PolicyTest, DEFAULT_TEST_WORKSPACE};
pub use check::{TestFailure, TestOutcome};
pub use compile::CompiledProfile;
pub use containment::{EgressEndpoint, SandboxSettings};
pub use error::{LoadError, PolicyError};
pub use eval::{ToolCall, Verdict};
pub use grants::{grant_match, GrantError};
pub use lint::{lint, LintKind, LintWarning, KNOWN_TOOLS};
pub use live::{LiveProfiles, ProfileChange};
pub use load::{parse_profile, ParseError, ProfileFormat, ProfileRegistry, ProfileSource};
pub use offload::{
    apply_grants_off_runtime, evaluate_off_runtime, JudgeFailed, INLINE_COMMAND_BYTES,
};
pub use path::{locate, normalize_path, WorkspacePath};
pub use presets::{presets, DEFAULT_PROFILE};
pub use profile::{
    PermissionRule, PolicyMode, PolicyProfile, QualityGate, TerminationCondition, ToolSpecifier,
    UnknownMode, DEFAULT_ASK_TIMEOUT_SECONDS,
};
pub use render::{profile_to_toml, rule_to_toml};
pub use version::{canonical_form, compile_version, content_hash, VersionError};
