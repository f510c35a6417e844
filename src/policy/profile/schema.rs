//! The policy profile: the data an operator writes in a policy file.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::case::{validate_tests, PolicyTest};
use super::containment::{validate_containment, validate_places, Network, SandboxSettings};
use super::error::PolicyError;
use super::globs::{command_glob, domain_glob, path_glob};
use crate::domain::Decision;
use crate::policy::judge::table::TRUSTED_TOOLS;

/// What a call that no rule matches gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum PolicyMode {
    /// Unmatched calls ask a person.
    #[default]
    #[serde(rename = "default")]
    Default,
    /// Unmatched calls are allowed (the profile lists what to refuse).
    #[serde(rename = "acceptEdits")]
    AcceptEdits,
    /// Unmatched calls are denied (the profile lists what to permit).
    #[serde(rename = "plan")]
    Plan,
    /// Unmatched calls are allowed; the agent is trusted to delegate.
    #[serde(rename = "delegate")]
    Delegate,
}

impl PolicyMode {
    /// The decision for a call that no rule matches.
    pub fn unmatched_decision(self) -> Decision {
        match self {
            PolicyMode::Default => Decision::Ask,
            PolicyMode::AcceptEdits | PolicyMode::Delegate => Decision::Allow,
            PolicyMode::Plan => Decision::Deny,
        }
    }

    /// The name used in policy files and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyMode::Default => "default",
            PolicyMode::AcceptEdits => "acceptEdits",
            PolicyMode::Plan => "plan",
            PolicyMode::Delegate => "delegate",
        }
    }
}

impl fmt::Display for PolicyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A mode name that is not one of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode {0:?} (expected default, acceptEdits, plan or delegate)")]
pub struct UnknownMode(pub String);

impl FromStr for PolicyMode {
    type Err = UnknownMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "default" => Ok(PolicyMode::Default),
            "acceptEdits" => Ok(PolicyMode::AcceptEdits),
            "plan" => Ok(PolicyMode::Plan),
            "delegate" => Ok(PolicyMode::Delegate),
            other => Err(UnknownMode(other.to_string())),
        }
    }
}

/// Which tool a rule is about, optionally narrowed by a glob over the command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpecifier {
    /// The tool name, compared exactly (`Bash`, `Edit`, …).
    pub tool: String,
    /// A glob over the command (`*` also crosses `/`), checked against every simple command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_pattern: Option<String>,
}

/// One line of a profile. docs/POLICY.md says when it matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionRule {
    /// The tool (and command glob) the rule is about.
    pub specifier: ToolSpecifier,
    /// What the call gets when this is the first rule that matches.
    pub decision: Decision,
    /// If set, the path must match one of these globs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_allow: Vec<String>,
    /// The rule does not match a path that matches one of these globs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_deny: Vec<String>,
    /// If set, the command must start with one of these entries (at a word boundary).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command_allow: Vec<String>,
    /// The rule does not match a command that starts with one of these entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command_deny: Vec<String>,
    /// If set, the host of the call's URL must match one of these globs (`*.github.com`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domain_allow: Vec<String>,
    /// The rule does not match a URL whose host matches one of these globs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domain_deny: Vec<String>,
    /// If set, the rule matches only calls whose input (a JSON object) has each of these
    /// top-level fields with this value (`{ dangerouslyDisableSandbox = true }`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub input_match: BTreeMap<String, serde_json::Value>,
}

impl PermissionRule {
    /// A rule with only a tool and a decision; the constraint lists start empty.
    pub fn new(tool: &str, decision: Decision) -> Self {
        Self {
            specifier: ToolSpecifier {
                tool: tool.to_string(),
                sub_pattern: None,
            },
            decision,
            path_allow: Vec::new(),
            path_deny: Vec::new(),
            command_allow: Vec::new(),
            command_deny: Vec::new(),
            domain_allow: Vec::new(),
            domain_deny: Vec::new(),
            input_match: BTreeMap::new(),
        }
    }
}

/// What must hold when the agent says it is done.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QualityGate {
    /// The worker must run the tests and they must pass.
    pub require_tests_pass: bool,
    /// The worker must run the linter and it must pass.
    pub require_lint_pass: bool,
    /// A failed gate fails the run (and the worker rolls its changes back).
    pub rollback_on_gate_fail: bool,
    /// The test command the worker should run; empty = the worker's own default.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub test_command: String,
    /// The lint command the worker should run; empty = the worker's own default.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub lint_command: String,
}

impl QualityGate {
    /// Whether a completed run must pass through the gate at all.
    pub fn is_enabled(&self) -> bool {
        self.require_tests_pass || self.require_lint_pass
    }
}

/// Limits of a run. Zero means no limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TerminationCondition {
    /// Tool calls the run may make.
    pub max_steps: i32,
    /// Wall-clock seconds since the run started.
    pub timeout_seconds: i64,
    /// Dollars the run may spend.
    pub max_cost: f64,
    /// Whether a run that stops making progress is ended.
    pub stall_detection: bool,
    /// Consecutive steps without progress that count as a stall (0: the tracker's default).
    pub stall_threshold: i32,
    /// Seconds an ask waits for a person before it becomes a deny (0: waits forever).
    pub ask_timeout_seconds: i64,
}

/// How long an ask waits unless a profile says otherwise.
pub const DEFAULT_ASK_TIMEOUT_SECONDS: i64 = 300;

impl Default for TerminationCondition {
    fn default() -> Self {
        Self {
            max_steps: 0,
            timeout_seconds: 0,
            max_cost: 0.0,
            stall_detection: false,
            stall_threshold: 0,
            ask_timeout_seconds: DEFAULT_ASK_TIMEOUT_SECONDS,
        }
    }
}

/// A named set of rules, a mode for what they do not cover, a gate and limits.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyProfile {
    /// The name runs refer to.
    pub name: String,
    /// One line for operators.
    #[serde(default)]
    pub description: String,
    /// What unmatched calls get.
    #[serde(default)]
    pub mode: PolicyMode,
    /// Tried in order; the first that matches decides.
    #[serde(default)]
    pub rules: Vec<PermissionRule>,
    /// What a completed run must pass.
    #[serde(default)]
    pub quality_gate: QualityGate,
    /// Limits of a run.
    #[serde(default)]
    pub termination: TerminationCondition,
    /// Paths no tool may read or write and the sandbox hides from the agent: globs,
    /// `~/`-relative to the home directory, absolute, or relative to the workspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// Workspace-relative paths (files or directories) that stay read-only besides the
    /// built-in protected places: the judge denies writes there, the sandbox binds them
    /// read-only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protected: Vec<String>,
    /// Directories outside the workspace (absolute or `~/`) where writes may go besides
    /// the run's temp dir: the sandbox makes them writable, and the judge judges a path
    /// there by the rules instead of as outside the workspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable: Vec<String>,
    /// Build and test tools whose everyday forms are judged before the rules: allowed when
    /// the option table vets every option, asked when any other option, environment prefix
    /// or variable is given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_tools: Vec<String>,
    /// What commands and the agent may connect to: `"none"` or a list of `host:port`
    /// endpoints; the judge and the sandbox's egress proxy both hold to it.
    #[serde(default, skip_serializing_if = "Network::is_unstated")]
    pub network: Network,
    /// How the agent's kernel sandbox is made for runs of this profile.
    #[serde(default, skip_serializing_if = "SandboxSettings::is_default")]
    pub sandbox: SandboxSettings,
    /// Calls and the decisions they must get; checked whenever the profile loads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tests: Vec<PolicyTest>,
}

impl PolicyProfile {
    /// Checks everything a compiled profile relies on, naming the first bad field.
    pub fn validate(&self) -> Result<(), PolicyError> {
        validate_name(&self.name)?;
        for (i, rule) in self.rules.iter().enumerate() {
            validate_rule(i, rule)?;
        }
        validate_termination(&self.termination)?;
        validate_containment(&self.secrets, &self.network, &self.sandbox)?;
        validate_places(&self.protected, &self.writable)?;
        validate_trusted_tools(&self.trusted_tools)?;
        validate_tests(&self.tests, self.rules.len())
    }
}

fn validate_trusted_tools(tools: &[String]) -> Result<(), PolicyError> {
    for (i, tool) in tools.iter().enumerate() {
        if !TRUSTED_TOOLS.contains(&tool.as_str()) {
            return Err(PolicyError::new(
                format!("trusted_tools[{i}]"),
                format!(
                    "{tool:?} is not a tool the option table vets (one of: {})",
                    TRUSTED_TOOLS.join(", ")
                ),
            ));
        }
        if tools[..i].contains(tool) {
            return Err(PolicyError::new(
                format!("trusted_tools[{i}]"),
                format!("{tool:?} is named twice"),
            ));
        }
    }
    Ok(())
}

fn validate_name(name: &str) -> Result<(), PolicyError> {
    if name.is_empty() {
        return Err(PolicyError::new("name", "must not be empty"));
    }
    // Names travel in CLI arguments, file names and RPCs; keep them plain.
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(PolicyError::new(
            "name",
            format!("{name:?} may only contain ASCII letters, digits, '-', '_' and '.'"),
        ));
    }
    Ok(())
}

fn validate_rule(i: usize, rule: &PermissionRule) -> Result<(), PolicyError> {
    let at = |field: &str| format!("rules[{i}].{field}");
    let tool = &rule.specifier.tool;
    if tool.is_empty() {
        return Err(PolicyError::new(at("specifier.tool"), "must not be empty"));
    }
    if tool.chars().any(char::is_whitespace) {
        return Err(PolicyError::new(
            at("specifier.tool"),
            format!("{tool:?} must not contain whitespace"),
        ));
    }
    if let Some(pattern) = &rule.specifier.sub_pattern {
        if pattern.is_empty() {
            return Err(PolicyError::new(
                at("specifier.sub_pattern"),
                "must not be empty (leave it out to match every command)",
            ));
        }
        command_glob(pattern).map_err(|e| {
            PolicyError::new(
                at("specifier.sub_pattern"),
                format!("invalid glob {pattern:?}: {e}"),
            )
        })?;
    }
    for (list, patterns) in [
        ("path_allow", &rule.path_allow),
        ("path_deny", &rule.path_deny),
    ] {
        for (j, pattern) in patterns.iter().enumerate() {
            let field = at(&format!("{list}[{j}]"));
            if pattern.is_empty() {
                return Err(PolicyError::new(field, "must not be empty"));
            }
            path_glob(pattern)
                .map_err(|e| PolicyError::new(field, format!("invalid glob {pattern:?}: {e}")))?;
        }
    }
    for (list, patterns) in [
        ("domain_allow", &rule.domain_allow),
        ("domain_deny", &rule.domain_deny),
    ] {
        for (j, pattern) in patterns.iter().enumerate() {
            let field = at(&format!("{list}[{j}]"));
            if pattern.is_empty() {
                return Err(PolicyError::new(field, "must not be empty"));
            }
            domain_glob(pattern)
                .map_err(|e| PolicyError::new(field, format!("invalid glob {pattern:?}: {e}")))?;
        }
    }
    for (key, value) in &rule.input_match {
        // Scalars only: what a flag in a tool's input looks like, and what a policy file
        // can state without ambiguity.
        let scalar = value.is_boolean() || value.is_number() || value.is_string();
        if key.is_empty() || !scalar {
            return Err(PolicyError::new(
                at(&format!("input_match.{key}")),
                "must be a non-empty key with a boolean, number or string value",
            ));
        }
    }
    for (list, entries) in [
        ("command_allow", &rule.command_allow),
        ("command_deny", &rule.command_deny),
    ] {
        for (j, entry) in entries.iter().enumerate() {
            if entry.trim().is_empty() {
                return Err(PolicyError::new(
                    at(&format!("{list}[{j}]")),
                    "must not be empty",
                ));
            }
        }
    }
    Ok(())
}

fn validate_termination(t: &TerminationCondition) -> Result<(), PolicyError> {
    let negative = |field: &str| {
        PolicyError::new(
            format!("termination.{field}"),
            "must not be negative (0 means no limit)",
        )
    };
    if t.max_steps < 0 {
        return Err(negative("max_steps"));
    }
    if t.timeout_seconds < 0 {
        return Err(negative("timeout_seconds"));
    }
    if !t.max_cost.is_finite() {
        return Err(PolicyError::new(
            "termination.max_cost",
            format!("must be a finite number, not {}", t.max_cost),
        ));
    }
    if t.max_cost < 0.0 {
        return Err(negative("max_cost"));
    }
    if t.stall_threshold < 0 {
        return Err(negative("stall_threshold"));
    }
    if t.ask_timeout_seconds < 0 {
        return Err(negative("ask_timeout_seconds"));
    }
    Ok(())
}
