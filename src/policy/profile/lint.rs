//! Warnings about a profile that loads but does not do what it seems to: a rule that can
//! never decide, a glob that can never match, an allow rule naming secrets or commands
//! that connect which it can never open, a tool name written in another case.
//!
//! Only what can be proven from the evaluation rules is reported (docs/POLICY.md, "Lint"):
//! a warning the author cannot act on teaches them to ignore the lint.

use serde::Serialize;

use super::globs::{build_path_glob, tool_glob};
use super::schema::{PermissionRule, PolicyProfile};
use crate::domain::Decision;
use crate::policy::judge::network::{Finding, Scope};
use crate::policy::judge::secrets::Secrets;
use crate::policy::judge::words::Word;

/// The tool names agents send: Claude Code's, and Codex's `apply_patch` (Codex reports
/// its shell as `Bash`). MCP tools (`mcp__server__tool`) are named by their servers.
pub const KNOWN_TOOLS: &[&str] = &[
    "Bash",
    "BashOutput",
    "KillShell",
    "Read",
    "Edit",
    "Write",
    "MultiEdit",
    "NotebookEdit",
    "NotebookRead",
    "Glob",
    "Grep",
    "LS",
    "WebFetch",
    "WebSearch",
    "Task",
    "TodoWrite",
    "ExitPlanMode",
    "SlashCommand",
    "Skill",
    "apply_patch",
];

/// What a warning is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LintKind {
    /// An earlier rule decides every call this rule could match.
    Shadowed,
    /// A glob of the rule can never match a path or host the judge compares it with.
    NeverMatches,
    /// The tool name is a known tool's name in another case.
    ToolCase,
    /// A path glob of an allow rule names secrets, which are denied before any rule.
    ReachesSecret,
    /// A command entry of an allow rule connects where the profile's network does not
    /// let it, which is judged before any rule.
    ReachesNetwork,
}

/// One warning, tied to the rule it is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LintWarning {
    /// The rule, counted from 0 as everywhere else.
    pub rule: usize,
    /// The field the warning is about (`rules[3].path_allow[0]`).
    pub field: String,
    /// What kind of warning it is.
    pub kind: LintKind,
    /// What is wrong, in a sentence.
    pub message: String,
}

/// Every warning for `profile`, in rule order.
pub fn lint(profile: &PolicyProfile) -> Vec<LintWarning> {
    let mut warnings = Vec::new();
    // A list that does not compile is refused at load, with its own error.
    let secrets = Secrets::compile(&profile.secrets).ok();
    let network = Scope::of(&profile.network);
    for (j, rule) in profile.rules.iter().enumerate() {
        tool_case(j, rule, &mut warnings);
        if let Some(i) = (0..j).find(|&i| shadows(&profile.rules[i], rule)) {
            warnings.push(LintWarning {
                rule: j,
                field: format!("rules[{j}]"),
                kind: LintKind::Shadowed,
                message: format!(
                    "rules[{i}] ({} {}) decides every call this rule could match",
                    profile.rules[i].specifier.tool, profile.rules[i].decision
                ),
            });
        }
        never_matching_globs(j, rule, &profile.writable, &mut warnings);
        if let Some(secrets) = &secrets {
            allowed_secrets(j, rule, secrets, &mut warnings);
        }
        if let Some(network) = &network {
            allowed_connections(j, rule, network, &mut warnings);
        }
    }
    warnings
}

/// An allow rule's path glob that names a secret: secrets are denied before any rule, so
/// what the author meant to open stays closed. Proven by a witness, a path the glob
/// matches ([`witness`]) that the secret list holds.
fn allowed_secrets(
    j: usize,
    rule: &PermissionRule,
    secrets: &Secrets,
    warnings: &mut Vec<LintWarning>,
) {
    if rule.decision != Decision::Allow {
        return;
    }
    for (k, pattern) in rule.path_allow.iter().enumerate() {
        let Some(path) = witness(pattern) else {
            continue;
        };
        let matches = build_path_glob(pattern.strip_prefix("./").unwrap_or(pattern), false)
            .is_ok_and(|glob| glob.compile_matcher().is_match(&path));
        let Some(hit) = matches.then(|| secrets.find(&path, None, false)).flatten() else {
            continue;
        };
        warnings.push(LintWarning {
            rule: j,
            field: format!("rules[{j}].path_allow[{k}]"),
            kind: LintKind::ReachesSecret,
            message: format!(
                "{pattern:?} names secrets: {hit}; a secret is denied before any rule, so \
                 this rule never allows it"
            ),
        });
    }
}

/// An allow rule's command entry that the profile's network refuses (`curl` under
/// `network = "none"`): the network is judged before any rule, so the entry opens nothing.
fn allowed_connections(
    j: usize,
    rule: &PermissionRule,
    network: &Scope,
    warnings: &mut Vec<LintWarning>,
) {
    if rule.decision != Decision::Allow || !rule.specifier.tool.eq_ignore_ascii_case("Bash") {
        return;
    }
    for (k, entry) in rule.command_allow.iter().enumerate() {
        let words: Vec<Word> = entry.split_whitespace().map(Word::literal).collect();
        let Some(Finding::Refused(why)) = network.judge(&words) else {
            continue;
        };
        warnings.push(LintWarning {
            rule: j,
            field: format!("rules[{j}].command_allow[{k}]"),
            kind: LintKind::ReachesNetwork,
            message: format!(
                "{entry:?} {why}; the network is judged before any rule, so this rule never \
                 allows it"
            ),
        });
    }
}

/// A workspace path that `pattern` matches, made of its own literal parts: each `*`, `?`
/// and `**` stands for the name `x` (`**/` for nothing). `None` for a glob outside the
/// workspace (an allow rule never allows those) or with a class or alternatives.
fn witness(pattern: &str) -> Option<String> {
    let glob = pattern.strip_prefix("./").unwrap_or(pattern);
    if only_outside(glob) || glob.contains(['[', '{', '\\']) {
        return None;
    }
    let segments: Vec<String> = glob
        .split('/')
        .filter(|segment| *segment != "**")
        .map(|segment| segment.replace(['*', '?'], "x"))
        .collect();
    let path = segments.join("/");
    // `**` alone, or a glob ending in `/**`, names what is inside: one name stands for it.
    let path = match (path.is_empty(), glob.ends_with("**")) {
        (true, _) => "x".to_string(),
        (false, true) => format!("{path}/x"),
        (false, false) => path,
    };
    Some(path)
}

fn tool_case(j: usize, rule: &PermissionRule, warnings: &mut Vec<LintWarning>) {
    let tool = rule.specifier.tool.as_str();
    if KNOWN_TOOLS.contains(&tool) {
        return;
    }
    if let Some(known) = KNOWN_TOOLS.iter().find(|k| k.eq_ignore_ascii_case(tool)) {
        warnings.push(LintWarning {
            rule: j,
            field: format!("rules[{j}].specifier.tool"),
            kind: LintKind::ToolCase,
            message: format!(
                "no agent sends {tool:?}; it matches {known:?} only because tool names are \
                 compared ignoring case: write {known:?}"
            ),
        });
    }
}

/// Whether `earlier` decides every call `later` could decide.
///
/// Two cases are provable from how a call is judged (first match, see `eval::judge`):
/// `earlier` covers `later`'s tool and has no constraints at all, or the same constraints;
/// then it matches every subject `later` matches, at least as surely. One exception: an
/// allow rule is passed over for a subject that is never allowed (an indeterminate part,
/// a path outside the workspace), where a later deny or ask rule still decides. So an
/// earlier allow shadows only a later allow.
fn shadows(earlier: &PermissionRule, later: &PermissionRule) -> bool {
    if earlier.decision == Decision::Allow && later.decision != Decision::Allow {
        return false;
    }
    let covered = covers_tool(&earlier.specifier.tool, &later.specifier.tool);
    covered && (unconstrained(earlier) || same_constraints(earlier, later))
}

/// Whether every tool name `later` matches, `earlier` matches too.
fn covers_tool(earlier: &str, later: &str) -> bool {
    if earlier.eq_ignore_ascii_case(later) {
        return true;
    }
    // A glob over names covers a plain name it matches; whether it covers another glob
    // is not decided here (not provable in general), except for `*`, which is every name.
    earlier == "*"
        || (!is_glob(later)
            && is_glob(earlier)
            && tool_glob(earlier).is_ok_and(|g| g.compile_matcher().is_match(later)))
}

fn is_glob(tool: &str) -> bool {
    tool.contains(['*', '?', '[', '{'])
}

fn unconstrained(rule: &PermissionRule) -> bool {
    rule.specifier.sub_pattern.is_none()
        && rule.path_allow.is_empty()
        && rule.path_deny.is_empty()
        && rule.command_allow.is_empty()
        && rule.command_deny.is_empty()
        && rule.domain_allow.is_empty()
        && rule.domain_deny.is_empty()
        && rule.input_match.is_empty()
}

fn same_constraints(a: &PermissionRule, b: &PermissionRule) -> bool {
    a.specifier.sub_pattern == b.specifier.sub_pattern
        && a.path_allow == b.path_allow
        && a.path_deny == b.path_deny
        && a.command_allow == b.command_allow
        && a.command_deny == b.command_deny
        && a.domain_allow == b.domain_allow
        && a.domain_deny == b.domain_deny
        && a.input_match == b.input_match
}

fn never_matching_globs(
    j: usize,
    rule: &PermissionRule,
    writable: &[String],
    warnings: &mut Vec<LintWarning>,
) {
    let mut warn = |field: String, message: String| {
        warnings.push(LintWarning {
            rule: j,
            field,
            kind: LintKind::NeverMatches,
            message,
        })
    };
    for (list, patterns) in [
        ("path_allow", &rule.path_allow),
        ("path_deny", &rule.path_deny),
    ] {
        for (k, pattern) in patterns.iter().enumerate() {
            if let Some(why) = path_never_matches(pattern) {
                warn(
                    format!("rules[{j}].{list}[{k}]"),
                    format!("{pattern:?} {why}"),
                );
            }
        }
    }
    if rule.decision == Decision::Allow {
        for (k, pattern) in rule.path_allow.iter().enumerate() {
            if only_outside(pattern) && !reaches_writable(pattern, writable) {
                warn(
                    format!("rules[{j}].path_allow[{k}]"),
                    format!(
                        "{pattern:?} only matches paths outside the workspace and its \
                         writable places, which an allow rule never allows"
                    ),
                );
            }
        }
    }
    for (list, patterns) in [
        ("domain_allow", &rule.domain_allow),
        ("domain_deny", &rule.domain_deny),
    ] {
        for (k, pattern) in patterns.iter().enumerate() {
            if let Some(why) = host_never_matches(pattern) {
                warn(
                    format!("rules[{j}].{list}[{k}]"),
                    format!("{pattern:?} {why}"),
                );
            }
        }
    }
}

/// Why a path glob matches no path the judge compares it with, if it provably does not.
///
/// Paths are normalised lexically before they are matched (`path::normalize_path`): never
/// empty, no empty or `.` segment (but the root, `.`), no trailing `/` (but `/`), and `..`
/// only at the start of a relative path. A segment of the glob that is literally one of those can match nothing.
fn path_never_matches(pattern: &str) -> Option<&'static str> {
    // The loader drops a leading `./` the same way (`globs::build_path_glob`).
    let glob = pattern.strip_prefix("./").unwrap_or(pattern);
    if glob.is_empty() {
        return Some("is empty once its leading \"./\" is dropped, and no path is empty");
    }
    // The workspace root itself is `.`, the file system's root `/`.
    if glob == "." || glob == "/" {
        return None;
    }
    if glob.ends_with('/') {
        return Some("ends with \"/\", which no normalised path does");
    }
    // An absolute glob starts with an empty segment: that one is the root.
    let segments = glob.strip_prefix('/').unwrap_or(glob).split('/');
    let mut climbing = !glob.starts_with('/');
    for segment in segments {
        match segment {
            "" => return Some("holds an empty segment (\"//\"), which no normalised path does"),
            "." => return Some("holds a \".\" segment, which no normalised path does"),
            ".." if !climbing => {
                return Some("holds \"..\" after a name, which no normalised path does")
            }
            ".." => {}
            _ => climbing = false,
        }
    }
    None
}

/// Whether a path glob can only match paths that are outside the workspace: absolute
/// ones (a path inside is made relative to the root), home ones (`~`), and ones climbing
/// out (`../`).
fn only_outside(pattern: &str) -> bool {
    let glob = pattern.strip_prefix("./").unwrap_or(pattern);
    glob.starts_with('/') || glob.starts_with('~') || glob == ".." || glob.starts_with("../")
}

/// Whether an outside glob may match a path in one of the profile's `writable` places:
/// its literal part (up to the first wildcard) and the place lie on one branch.
fn reaches_writable(pattern: &str, writable: &[String]) -> bool {
    let literal = pattern
        .split(['*', '?', '[', '{'])
        .next()
        .unwrap_or_default();
    writable
        .iter()
        .any(|place| place.starts_with(literal) || literal.starts_with(place.as_str()))
}

/// Why a domain glob matches no host, if it provably does not. Hosts are read by a WHATWG
/// URL parser, which never leaves whitespace, `/`, `@` or `#` in one, and puts `:` only
/// inside an IPv6 literal's brackets.
fn host_never_matches(pattern: &str) -> Option<&'static str> {
    if pattern.contains("://") {
        return Some("holds a scheme; domain globs match the host alone (\"example.com\")");
    }
    if pattern.contains(|c: char| c.is_whitespace() || matches!(c, '/' | '@' | '#')) {
        return Some("holds whitespace, '/', '@' or '#', which no host does");
    }
    if pattern.contains(':') && !pattern.contains('[') {
        return Some("holds ':' outside brackets; ports are not part of the host");
    }
    None
}
