//! The four built-in profiles. Their names are part of the API.

use super::profile::{
    PermissionRule, PolicyMode, PolicyProfile, QualityGate, TerminationCondition,
    DEFAULT_ASK_TIMEOUT_SECONDS,
};
use crate::domain::Decision::{self, Allow, Deny};

/// The profile a run gets when it names none.
pub const DEFAULT_PROFILE: &str = "headless-safe-sandbox";

/// Files that hold secrets; the sandbox presets keep the agent's hands off them.
const SECRET_PATHS: [&str; 3] = [".env", "**/.env", "secrets/**"];

/// The built-in profiles, from the most restrictive to the most trusting.
pub fn presets() -> Vec<PolicyProfile> {
    vec![
        plan_readonly(),
        headless_safe_sandbox(),
        headless_permissive_sandbox(),
        trusted_mount_autonomous(),
    ]
}

fn rule(tool: &str, decision: Decision) -> PermissionRule {
    PermissionRule::new(tool, decision)
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn read_tools_allowed() -> Vec<PermissionRule> {
    ["Read", "Glob", "Grep"]
        .into_iter()
        .map(|t| rule(t, Allow))
        .collect()
}

/// Edit and Write denied for secret files only (a deny that matches when the path is one).
fn secrets_denied() -> Vec<PermissionRule> {
    ["Edit", "Write"]
        .into_iter()
        .map(|t| PermissionRule {
            path_allow: strings(&SECRET_PATHS),
            ..rule(t, Deny)
        })
        .collect()
}

fn limits(
    max_steps: i32,
    timeout_seconds: i64,
    max_cost: f64,
    stall: bool,
) -> TerminationCondition {
    TerminationCondition {
        max_steps,
        timeout_seconds,
        max_cost,
        stall_detection: stall,
        stall_threshold: if stall { 5 } else { 0 },
        ask_timeout_seconds: DEFAULT_ASK_TIMEOUT_SECONDS,
    }
}

fn plan_readonly() -> PolicyProfile {
    let mut rules = read_tools_allowed();
    rules.extend(["Edit", "Write", "Bash"].into_iter().map(|t| rule(t, Deny)));
    PolicyProfile {
        name: "plan-readonly".into(),
        description: "Read-only planning: the agent may read and search, nothing else.".into(),
        mode: PolicyMode::Plan,
        rules,
        quality_gate: QualityGate::default(),
        termination: limits(30, 300, 1.0, false),
    }
}

fn headless_safe_sandbox() -> PolicyProfile {
    let mut rules = read_tools_allowed();
    rules.push(PermissionRule {
        path_deny: strings(&[".env", "**/.env", "secrets/**", "**/credentials.*"]),
        ..rule("Edit", Allow)
    });
    rules.push(PermissionRule {
        command_allow: strings(&[
            "git status",
            "git diff",
            "git log",
            "go test",
            "cargo test",
            "python -m pytest",
            "npm test",
            "make test",
            "make lint",
        ]),
        ..rule("Bash", Allow)
    });
    rules.push(rule("Bash", Deny));
    PolicyProfile {
        name: DEFAULT_PROFILE.into(),
        description: "Unattended run in a sandbox: reads and edits (not secrets), a fixed set \
                      of test and git commands; everything else asks or is denied."
            .into(),
        mode: PolicyMode::Default,
        rules,
        quality_gate: QualityGate {
            require_tests_pass: true,
            require_lint_pass: true,
            rollback_on_gate_fail: true,
            ..QualityGate::default()
        },
        termination: limits(50, 600, 5.0, true),
    }
}

fn headless_permissive_sandbox() -> PolicyProfile {
    let mut rules = read_tools_allowed();
    rules.extend(secrets_denied());
    rules.push(rule("Edit", Allow));
    rules.push(rule("Write", Allow));
    rules.push(PermissionRule {
        command_allow: strings(&["curl", "wget", "ssh", "scp", "nc", "ncat"]),
        ..rule("Bash", Deny)
    });
    rules.push(rule("Bash", Allow));
    PolicyProfile {
        name: "headless-permissive-sandbox".into(),
        description: "Unattended run in a sandbox: anything but secrets and network tools.".into(),
        mode: PolicyMode::AcceptEdits,
        rules,
        quality_gate: QualityGate {
            require_tests_pass: true,
            ..QualityGate::default()
        },
        termination: limits(100, 1800, 20.0, true),
    }
}

fn trusted_mount_autonomous() -> PolicyProfile {
    let mut rules = secrets_denied();
    rules.extend(
        ["Read", "Glob", "Grep", "Edit", "Write", "Bash"]
            .into_iter()
            .map(|t| rule(t, Allow)),
    );
    PolicyProfile {
        name: "trusted-mount-autonomous".into(),
        description: "Trusted agent on the host checkout: everything but secret files.".into(),
        mode: PolicyMode::AcceptEdits,
        rules,
        quality_gate: QualityGate::default(),
        termination: limits(200, 3600, 50.0, false),
    }
}
